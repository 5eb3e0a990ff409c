"""--resume re-runs the units that failed (issue 12, defect 5); their failed records stay, superseded."""

from __future__ import annotations

import socket

import pytest
from ledgers import warned
from test_run_sim import DECODE_TPS, PREFILL_TPS, experiment, sim

from leverbench.analysis.base.dataset import dataset
from leverbench.analysis.summary import summarize
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import read_ledger
from leverbench.runner.run import Runner
from leverbench.schema.warning_kinds import WarningKind as W

UNIT_KINDS = ("turn", "probe", "sentinel")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_resume_reruns_the_units_that_failed_while_the_endpoint_was_down(tmp_path):
    port = free_port()
    out = tmp_path / "run"
    with sim(prefix_cache=False) as up:
        exp = experiment(tmp_path, {"nocache": up.base_url, "flaky": f"http://127.0.0.1:{port}"}, repeats=2)
        Runner(load(exp), out).run()  # nothing listens on the flaky arm's port: all its units fail
        first = read_ledger(out)
        failed = [r for r in first.records if r["kind"] in UNIT_KINDS and r["arm"] == "flaky"]
        assert len(failed) == 2 * 2 + 2 * 3 + 3  # turns, probes, sentinels (one per round, one at the end)
        assert all(r["error"] is not None and r["error"]["class"] == "connect" for r in failed)
        before = summarize(first)
        assert {c["n"] for c in before["cells"] if c["arm"] == "flaky"} == {0}
        healthy_units = sum(1 for r in first.records if r["kind"] in UNIT_KINDS and r["arm"] == "nocache")
        back = SimConfig(prefill_tps=PREFILL_TPS, decode_tps=DECODE_TPS, output_tokens=200)
        with SimulatorThread(back, port=port):  # the endpoint is back
            Runner(load(exp), out, resume=True).run()
    led = read_ledger(out)
    # the failed records are still in the ledger, as they were
    assert all(r in led.records for r in failed)
    # every failed unit ran again, and only those
    again = [r for r in led.records[len(first.records):] if r["kind"] in UNIT_KINDS]
    assert len(again) == len(failed) and all(r["arm"] == "flaky" and r["error"] is None for r in again)
    resume = next(r for r in led.records if r["kind"] == "resume")
    assert resume["failed_units_rerun"] == len(failed) and resume["completed_units"] == healthy_units
    # the analysis counts each unit's latest attempt and says what it left out
    s = summarize(led)
    flaky = [c for c in s["cells"] if c["arm"] == "flaky"]
    assert {c["n"] for c in flaky} == {2} and {c["failed_turns"] for c in flaky} == {0}
    assert s["run"]["failed_calls"] == 0
    ds = dataset(led)
    assert len([p for p in ds.probes if p["arm"] == "flaky"]) == 6 and all(p["error"] is None for p in ds.probes)
    assert len(ds.sentinels) == 6 and all(x["error"] is None for x in ds.sentinels)
    [w] = warned(s, W.SUPERSEDED)
    assert w["text"].startswith("4 turn(s), 6 probe(s), 3 sentinel(s) superseded"), w  # the counts
    assert not warned(s, W.ORPHAN_CALLS)
    assert {p["arm"] for p in s["probes"]} >= {"flaky"}


def test_each_unit_counts_its_first_success_else_its_latest_attempt():
    """Hand-made: which record of a unit counts, and what is reported as left out."""
    from ledgers import call, header, ledger, turn

    err = {"class": "connect", "message": "down"}
    recs = [*turn("a", "c", 0, 9.0, 10, error=err), *turn("a", "c", 0, 1.0, 10),   # failed, then re-run: the re-run
            *turn("a", "c", 1, 2.0, 10), *turn("a", "c", 1, 7.0, 10),              # two successes: the first
            *turn("a", "c", 2, 8.0, 10, error=err), *turn("a", "c", 2, 3.0, 10, error=err)]  # all failed: the latest

    def probe(rep: int, latency: float, **kw):
        return call("a", "c", rep, latency=latency, out=16, kind="probe", probe_tokens=16, position=None, **kw)

    probes = [probe(0, 5.0, error=err, retried=True, attempt=0), probe(0, 5.1, error=err, attempt=1),  # one attempt
              probe(0, 0.5, attempt=0),                                                               # its re-run
              probe(1, 6.0, error=err, retried=True, attempt=0), probe(1, 0.6, attempt=1)]            # retried, then ok
    ds = dataset(ledger(header({"a": {}}, ["c"], repeats=3), recs + probes))
    assert sorted(ds.turn.turn_s.tolist()) == [1.0, 2.0, 3.0]
    assert sorted(ds.call.latency_s.tolist()) == [1.0, 2.0, 3.0]  # the calls of the counted turns only
    assert [p["latency_s"] for p in ds.probes] == [0.5, 6.0, 0.6]  # a counted attempt keeps its retried tries
    [w] = [w for w in ds.warnings if w.kind == W.SUPERSEDED]
    assert w.text.startswith("3 turn(s), 2 probe(s) superseded") and "(3 call(s) of superseded turns" in w.text, w
    assert W.ORPHAN_CALLS not in [w.kind for w in ds.warnings]


def test_resume_does_not_run_finished_load_stages_again(tmp_path):
    """A load stage that finished on an arm wrote its stage_end record: resuming the run sends none of its calls
    again (a stage with no stage_end, cut short, is run again whole)."""
    from one_arm import one_arm_experiment

    stage = '[[load]]\nname = "loop"\nmode = "closed"\nconcurrency = 2\nrequests = 4\n'
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=2000.0, output_tokens=4)) as s:
        exp = one_arm_experiment(tmp_path, s.base_url, tail=stage)
        out = tmp_path / "run"
        Runner(load(exp), out).run()
        first = read_ledger(out)
        assert [(r["stage"], r["arm"], r["calls"]) for r in first.of_kind("stage_end")] == [("loop", "sim", 4)]
        served = len(s.truth())
        Runner(load(exp), out, resume=True).run()
        again = read_ledger(out)
        assert len(s.truth()) == served + 1  # the resumed run's warm-up only
    assert sum(1 for r in again.records if r["kind"] == "load") == 4
    row = next(r for r in summarize(again)["load"] if r["stage"] == "loop")
    assert row["requests"] == 4 and row["ok"] == 4
