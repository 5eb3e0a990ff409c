"""Crash safety: SIGKILL mid-stream, resume, Ctrl-C; partial lines; the same report as an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_run_sim import experiment

from leverbench.analysis.summary import summarize
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import Ledger, read_ledger

SLOW = dict(prefill_tps=50_000.0, decode_tps=150.0, output_tokens=200)


def start_run(exp: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_turns(out: Path, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = out / "ledger.jsonl"
        if p.exists() and p.read_text().count('"kind":"turn"') >= n:
            return
        time.sleep(0.05)
    raise AssertionError("the run did not progress")


def unit_keys(led: Ledger) -> list[tuple]:
    return [(r["kind"], r["arm"], r["case"], r["repeat"], r.get("probe_tokens"), r.get("position"))
            for r in led.records if r["kind"] in ("turn", "probe", "sentinel")]


def counted_only(led: Ledger) -> Ledger:
    """The ledger an uninterrupted run would have written with the same counted calls."""
    turn_ids = {r["turn_id"] for r in led.records if r["kind"] == "turn"}
    keep = [r for r in led.records
            if r["kind"] not in ("resume", "warmup") and (r["kind"] != "call" or r["turn_id"] in turn_ids)]
    return Ledger(path=led.path, header=led.header, records=keep)


def comparable(s: dict) -> dict:
    s = dict(s)
    s.pop("warnings")
    s["run"] = {k: v for k, v in s["run"].items() if k not in ("resumed", "calls")}
    return s


def test_sigkill_mid_stream_then_resume(tmp_path):
    with SimulatorThread(SimConfig(**SLOW, prefix_cache=False)) as a, SimulatorThread(SimConfig(**SLOW)) as b:
        exp = experiment(tmp_path, {"nocache": a.base_url, "cache": b.base_url}, repeats=3)
        out = tmp_path / "run"
        proc = start_run(exp, out)
        wait_for_turns(out, 3)
        time.sleep(0.15)  # somewhere inside a streamed call
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        # every complete line is valid; a partial last line is tolerated with a warning
        before = read_ledger(out)
        done_before = len([r for r in before.records if r["kind"] == "turn"])
        assert 3 <= done_before < 12
        res = start_run(exp, out, "--resume")
        stdout, stderr = res.communicate(timeout=120)
        assert res.returncode == 0, stderr
    led = read_ledger(out)
    keys = unit_keys(led)
    assert len(keys) == len(set(keys)), "a unit was run twice"
    assert sum(1 for k in keys if k[0] == "turn") == 2 * 2 * 3
    assert [r for r in led.records if r["kind"] == "resume"][0]["completed_units"] >= done_before
    s = summarize(led)
    assert {c["n"] for c in s["cells"]} == {3}
    # equals what an uninterrupted run computes over the same calls
    assert comparable(s) == comparable(summarize(counted_only(led)))
    assert json.loads((out / "summary.json").read_text())["run"]["resumed"] == 1


def test_partial_last_line_is_ignored_with_a_warning(tmp_path):
    with SimulatorThread(SimConfig(**SLOW)) as a:
        exp = experiment(tmp_path, {"nocache": a.base_url}, repeats=1, probes=False)
        out = tmp_path / "run"
        proc = start_run(exp, out)
        assert proc.wait(timeout=60) == 0
    with open(out / "ledger.jsonl", "a") as fh:
        fh.write('{"kind":"call","arm":"noc')  # a write cut by a crash
    led = read_ledger(out)
    assert any("incomplete" in w for w in led.warnings)
    assert any("incomplete" in w for w in summarize(led)["warnings"])


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path):
    with SimulatorThread(SimConfig(**SLOW)) as a:
        exp = experiment(tmp_path, {"nocache": a.base_url}, repeats=3)
        out = tmp_path / "run"
        proc = start_run(exp, out)
        wait_for_turns(out, 1)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "--resume" in stderr and str(out) in stderr
    led = read_ledger(out)
    assert not led.warnings  # what finished was written whole
    assert any(r["kind"] == "turn" for r in led.records)


def test_resume_refuses_a_changed_experiment(tmp_path):
    with SimulatorThread(SimConfig(**SLOW)) as a:
        exp = experiment(tmp_path, {"nocache": a.base_url}, repeats=1, probes=False)
        out = tmp_path / "run"
        assert start_run(exp, out).wait(timeout=60) == 0
        exp.write_text(exp.read_text().replace('prompt = "summarise"', 'prompt = "summarize"'))
        res = start_run(exp, out, "--resume")
        _, stderr = res.communicate(timeout=30)
    assert res.returncode == 2 and "experiment changed" in stderr


def test_existing_run_dir_needs_resume(tmp_path):
    with SimulatorThread(SimConfig(**SLOW)) as a:
        exp = experiment(tmp_path, {"nocache": a.base_url}, repeats=1, probes=False)
        out = tmp_path / "run"
        assert start_run(exp, out).wait(timeout=60) == 0
        res = start_run(exp, out)
        _, stderr = res.communicate(timeout=30)
    assert res.returncode == 2 and "--resume" in stderr
