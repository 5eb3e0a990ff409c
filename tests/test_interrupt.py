"""Ctrl-C (SIGINT) on a real `leverbench run`: every call in flight reaches the ledger as ``cancelled``.

The run goes in a subprocess against a slow simulator in this process; SIGINT is sent while the
simulator holds the calls, then the ledger is read back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import child
import limits
import pytest
from one_arm import one_arm_experiment

from leverbench.engines.simulator import SimConfig, SimulatorThread

pytestmark = pytest.mark.slow  # ~20 s of interrupted runs on a busy 2-core machine: .ci/run runs it
SLOW = SimConfig(prefill_tps=100_000.0, decode_tps=20.0, output_tokens=400, slots=8)  # 20 s per 400-token call


def _experiment(tmp: Path, base_url: str, load: str = "") -> Path:
    """A turn of two calls (the first 400 tokens: 20 s) or, with *load*, short turns before the stage."""
    return one_arm_experiment(tmp, base_url, max_tokens=2 if load else 400,
                              tail='[[cases.steps]]\nprompt = "and more"\nmax_tokens = 8\n' + load)


def _start(exp: Path, out: Path) -> subprocess.Popen:
    """``leverbench run`` in a child that takes SIGINT as Python's KeyboardInterrupt (:func:`child.popen`)."""
    return child.popen([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(out)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "400"})


def _wait_in_flight(sim: SimulatorThread, proc: subprocess.Popen, n: int, timeout_s: float = limits.PROGRESS_S
                    ) -> None:
    """Until the simulator holds ``n`` requests (running or queued) of the run's main work."""
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended early ({proc.returncode}): {proc.stderr.read()}")
        slots = sim.state.slots
        if slots.running + slots.waiting >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"the simulator never held {n} requests")


def _interrupt(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=limits.STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=limits.KILLED_S)
        raise AssertionError(f"the run did not stop within {limits.STOP_S:.0f} s of SIGINT: {err}") from None
    return proc.returncode, err


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines() if line.strip()]


def test_ctrl_c_records_the_call_in_flight_as_cancelled(tmp_path):
    with SimulatorThread(SLOW) as sim:
        exp = _experiment(tmp_path, sim.base_url)
        out = tmp_path / "run"
        proc = _start(exp, out)
        _wait_in_flight(sim, proc, 1)  # the warm-up (8 tokens, 0.4 s) ...
        t_end = time.monotonic() + limits.PROGRESS_S
        while not any(r["kind"] == "warmup" for r in _records(out)) and time.monotonic() < t_end:
            time.sleep(0.05)
        _wait_in_flight(sim, proc, 1)  # ... then the turn's first call (400 tokens, 20 s)
        time.sleep(1.0)  # let some chunks arrive
        code, err = _interrupt(proc)
    assert code == 130, err
    assert f"--out {out} --resume" in err
    recs = _records(out)
    calls = [r for r in recs if r["kind"] == "call"]
    assert len(calls) == 1, calls
    c = calls[0]
    assert c["error"]["class"] == "cancelled"
    assert c["step"] == 0 and c["case"] == "c"
    # what had arrived is kept: chunk times within the time it ran, and no finish
    assert 5 <= len(c["chunk_t"]) < 400 and len(c["chunk_chars"]) == len(c["chunk_t"])
    assert 0.5 < c["latency_s"] < 20 and c["chunk_t"][-1] <= c["latency_s"]
    assert c["ttft_s"] is not None and c["finish_reason"] is None
    assert not any(r["kind"] == "turn" for r in recs)  # a cut turn gets no turn record; resume re-runs it


@pytest.mark.parametrize("mode, shape", [
    ("closed", "concurrency = 4\nrequests = 8"),  # four clients, each waiting for its call
    ("open", "rate = 1.0\narrival = \"constant\"\nrequests = 8"),  # a send a second: Ctrl-C lands between sends
])
def test_ctrl_c_records_every_load_call_in_flight(tmp_path, mode, shape):
    stage = f'''
[[load]]
name = "stage"
mode = "{mode}"
max_tokens = 400
{shape}
'''
    with SimulatorThread(SLOW) as sim:
        exp = _experiment(tmp_path, sim.base_url, stage)
        out = tmp_path / "run"
        proc = _start(exp, out)
        t_end = time.monotonic() + limits.PROGRESS_S
        while not ((out / "ledger.jsonl").exists()
                   and any(r["kind"] == "metrics" and r["when"].startswith("load-start") for r in _records(out))):
            assert time.monotonic() < t_end and proc.poll() is None, "the load stage never started"
            time.sleep(0.02)
        _wait_in_flight(sim, proc, 4)
        code, err = _interrupt(proc)
    assert code == 130, err
    load = [r for r in _records(out) if r["kind"] == "load"]
    assert len(load) == 4, [r["error"] for r in load]
    assert [r["error"]["class"] for r in load] == ["cancelled"] * 4
    assert all(r["latency_s"] > 0 and r["stage"] == "stage" for r in load)


def test_sigterm_stops_the_run_like_ctrl_c(tmp_path):
    """kill and timeout send SIGTERM: the call in flight is recorded, the resume command printed."""
    with SimulatorThread(SLOW) as sim:
        exp = _experiment(tmp_path, sim.base_url)
        out = tmp_path / "run"
        proc = _start(exp, out)
        _wait_in_flight(sim, proc, 1)
        t_end = time.monotonic() + limits.PROGRESS_S
        while time.monotonic() < t_end and not any(r["kind"] == "cache_reset" for r in _records(out)):
            time.sleep(0.05)  # warmed, and its cache reset checked (runner.cache_state): the turn comes next
        _wait_in_flight(sim, proc, 1)  # the turn's first call (400 tokens: 20 s)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=limits.STOP_S)
    assert proc.returncode == 130, err
    assert "--resume" in err
    calls = [r for r in _records(out) if r["kind"] == "call"]
    assert [c["error"]["class"] for c in calls] == ["cancelled"]


def test_a_run_stopped_before_its_first_record_resumes_afresh(tmp_path):
    """Ctrl-C during engine start or discovery leaves a ledger without a run header: --resume (the printed
    command) and a new run on the same --out both start the run afresh instead of refusing it."""
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=2000.0, output_tokens=4)) as sim:
        exp = _experiment(tmp_path, sim.base_url)
        for args in (["--resume"], []):
            out = tmp_path / f"run{len(args)}"
            out.mkdir()
            (out / "ledger.jsonl").write_text("")  # what a run stopped before its header leaves
            res = subprocess.run([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(out), *args],
                                 capture_output=True, text=True, timeout=limits.SMALL_RUN_S)
            assert res.returncode == 0, res.stderr
            recs = _records(out)
            assert recs[0]["kind"] == "run" and sum(r["kind"] == "turn" for r in recs) == 1
