"""Crash safety: SIGKILL mid-stream, resume, Ctrl-C; partial lines; the same report as an uninterrupted run."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import child
import limits
import pytest
from ledgers import warned
from test_run_sim import experiment

from leverbench.analysis.summary import summarize
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import Ledger, read_ledger
from leverbench.schema.warning_kinds import WarningKind as W

pytestmark = pytest.mark.slow  # ~70 s of crashed and resumed runs on a busy 2-core machine: .ci/run runs it
SLOW = dict(prefill_tps=50_000.0, decode_tps=150.0, output_tokens=200)


def start_run(exp: Path, out: Path, *extra: str) -> subprocess.Popen:
    """``leverbench run`` in a child that takes SIGINT as Python's KeyboardInterrupt (:func:`child.popen`)."""
    return child.popen([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(out), *extra],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_to_end(exp: Path, out: Path, *extra: str) -> None:
    """A whole run that must succeed (its output read as it comes: a child blocked on a full pipe never ends)."""
    proc = start_run(exp, out, *extra)
    _, stderr = proc.communicate(timeout=limits.SMALL_RUN_S)
    assert proc.returncode == 0, stderr


def interrupt(proc: subprocess.Popen) -> str:
    """SIGINT (Ctrl-C) to a run, then its stderr once it has exited; a run that does not stop is killed."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=limits.STOP_S)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        err = proc.communicate(timeout=limits.KILLED_S)[1]
        raise AssertionError(f"the run did not stop within {limits.STOP_S:.0f} s of SIGINT: {err}") from None


def wait_for_turns(out: Path, n: int, timeout: float = limits.PROGRESS_S) -> None:
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


def complete_records(out: Path) -> list[dict]:
    """The records of the whole lines written so far (the run may be writing the next one)."""
    p = out / "ledger.jsonl"
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines(keepends=True)[1:] if line.endswith("\n")]


def orphans(records: list[dict]) -> list[dict]:
    """Calls whose turn has no turn record (yet)."""
    turn_ids = {r["turn_id"] for r in records if r["kind"] == "turn"}
    return [r for r in records if r["kind"] == "call" and r["turn_id"] not in turn_ids]


def wait_for_a_turn_in_flight(out: Path, after_turns: int, timeout: float = limits.PROGRESS_S) -> None:
    """Until *after_turns* turns are done and a later 'read' turn has written its first or second call:
    its next call (48 or 24 tokens at 150 tok/s, 0.16 s or more) is in flight, and the turn is not done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recs = complete_records(out)
        if (sum(1 for r in recs if r["kind"] == "turn") >= after_turns
                and any(r["case"] == "read" and r["step"] < 2 for r in orphans(recs))):
            return
        time.sleep(0.01)
    raise AssertionError("the run did not progress")


def cell_facts(s: dict) -> dict:
    """What a resumed run must have exactly as an uninterrupted one: per cell the repeats, calls and volumes."""
    return {(c["arm"], c["case"]): (c["n"], c["attempted"], c["failed_calls"], c["calls"], c["output_tokens_median"],
                                    c["input_tokens_median"]) for c in s["cells"]}


def test_sigkill_mid_turn_then_resume_matches_an_uninterrupted_run(tmp_path):
    """Killed in the middle of a turn (SIGKILL), then resumed: the same cells, repeats, calls and output
    volumes as an uninterrupted run of the same experiment against the same simulators, times within
    noise; the cut-off turn's calls stay in the ledger, reported and not counted."""
    with SimulatorThread(SimConfig(**SLOW, prefix_cache=False)) as a, SimulatorThread(SimConfig(**SLOW)) as b:
        exp = experiment(tmp_path, {"nocache": a.base_url, "cache": b.base_url}, repeats=3)
        ref = tmp_path / "uninterrupted"
        run_to_end(exp, ref)
    with SimulatorThread(SimConfig(**SLOW, prefix_cache=False)) as a, SimulatorThread(SimConfig(**SLOW)) as b:
        exp = experiment(tmp_path, {"nocache": a.base_url, "cache": b.base_url}, repeats=3)
        out = tmp_path / "run"
        proc = start_run(exp, out)
        wait_for_a_turn_in_flight(out, 3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=limits.KILLED_S)
        before = read_ledger(out)
        done_before = len([r for r in before.records if r["kind"] == "turn"])
        cut_off = orphans(before.records)
        assert 3 <= done_before < 12 and cut_off
        res = start_run(exp, out, "--resume")
        stdout, stderr = res.communicate(timeout=limits.SMALL_RUN_S)
        assert res.returncode == 0, stderr
    led = read_ledger(out)
    keys = unit_keys(led)
    assert len(keys) == len(set(keys)), "a unit was run twice"
    assert sum(1 for k in keys if k[0] == "turn") == 2 * 2 * 3
    assert [r for r in led.records if r["kind"] == "resume"][0]["completed_units"] >= done_before
    # the cut-off turn's calls are still in the ledger, not counted, and the report says how many
    assert orphans(led.records) == cut_off
    resumed = json.loads((out / "summary.json").read_text())
    [w] = warned(resumed, W.ORPHAN_CALLS)
    assert w["text"].startswith(f"{len(cut_off)} call(s) of turns cut off")  # the count
    assert resumed["run"]["resumed"] == 1
    whole = json.loads((ref / "summary.json").read_text())
    assert whole["run"]["resumed"] == 0 and not warned(whole, W.ORPHAN_CALLS)
    # the same work, counted the same way
    assert cell_facts(resumed) == cell_facts(whole)
    assert {c["n"] for c in resumed["cells"]} == {3}
    assert resumed["run"]["calls"] == whole["run"]["calls"] and resumed["run"]["failed_calls"] == 0
    assert ([(t["arm"], t["output_tokens"]) for t in resumed["totals"]]
            == [(t["arm"], t["output_tokens"]) for t in whole["totals"]])
    assert [(d["arm"], d["case"], d["points"]) for d in resumed["decomposition"]] == \
           [(d["arm"], d["case"], d["points"]) for d in whole["decomposition"]]
    assert [(p["arm"], p["n1"], p["n2"], p["repeats"]) for p in resumed["probes"]] == \
           [(p["arm"], p["n1"], p["n2"], p["repeats"]) for p in whole["probes"]]
    # and the same times, within run-to-run noise (the simulator's rates are fixed)
    for got, want in zip(resumed["cells"], whole["cells"]):
        assert got["median_s"] == pytest.approx(want["median_s"], rel=0.25), (got["arm"], got["case"])
    for got, want in zip(resumed["decomposition"], whole["decomposition"]):
        if want["decode_tps"]:
            assert got["decode_tps"] == pytest.approx(want["decode_tps"], rel=0.10), (got["arm"], got["case"])
    for got, want in zip(resumed["probes"], whole["probes"]):
        assert got["decode_tps"] == pytest.approx(want["decode_tps"], rel=0.10), got["arm"]
    m_res = {(m["arm"], m["scope"]): m for m in resumed["multipliers"]}
    m_whole = {(m["arm"], m["scope"]): m for m in whole["multipliers"]}
    assert sorted(m_res) == sorted(m_whole)
    for k, m in m_whole.items():
        assert m_res[k]["value"] == pytest.approx(m["value"], rel=0.25), k
        assert m_res[k]["volume_spread"] == m["volume_spread"], k


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One whole run (a repeat, no probes) on the simulator, run once for the tests that read it or copy it:
    (its experiment file, its run directory), the simulator serving until they are done."""
    tmp = tmp_path_factory.mktemp("finished")
    with SimulatorThread(SimConfig(**SLOW)) as a:
        exp = experiment(tmp, {"nocache": a.base_url}, repeats=1, probes=False)
        run_to_end(exp, tmp / "run")
        yield exp, tmp / "run"


def test_partial_last_line_is_ignored_with_a_warning(tmp_path, finished_run):
    out = tmp_path / "run"
    shutil.copytree(finished_run[1], out)  # a copy: this test cuts its last line
    with open(out / "ledger.jsonl", "a") as fh:
        fh.write('{"kind":"call","arm":"noc')  # a write cut by a crash
    led = read_ledger(out)
    assert any("incomplete" in w for w in led.warnings)
    assert warned(summarize(led), W.LEDGER_REPAIR)


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path):
    with SimulatorThread(SimConfig(**SLOW)) as a:
        exp = experiment(tmp_path, {"nocache": a.base_url}, repeats=3)
        out = tmp_path / "run"
        proc = start_run(exp, out)
        wait_for_turns(out, 1)
        stderr = interrupt(proc)
    assert proc.returncode == 130, stderr
    assert "--resume" in stderr and str(out) in stderr
    led = read_ledger(out)
    assert not led.warnings  # what finished was written whole
    assert any(r["kind"] == "turn" for r in led.records)


def test_resume_refuses_a_changed_experiment(tmp_path):
    with SimulatorThread(SimConfig(**SLOW)) as a:
        exp = experiment(tmp_path, {"nocache": a.base_url}, repeats=1, probes=False)
        out = tmp_path / "run"
        run_to_end(exp, out)
        exp.write_text(exp.read_text().replace('prompt = "summarise"', 'prompt = "summarize"'))
        res = start_run(exp, out, "--resume")
        _, stderr = res.communicate(timeout=limits.SMALL_COMMAND_S)
    assert res.returncode == 2 and "experiment changed" in stderr


def test_existing_run_dir_needs_resume(finished_run):
    exp, out = finished_run
    res = start_run(exp, out)
    _, stderr = res.communicate(timeout=limits.SMALL_COMMAND_S)
    assert res.returncode == 2 and "--resume" in stderr
