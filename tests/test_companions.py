"""Turns timed under load (``[experiment] in_flight``, :mod:`leverbench.runner.companions`): each turn sent while
in_flight − 1 companions keep requests in flight on its arm.  Checked against what the simulator logged it did
(its truth records: how many requests decoded beside each one, how long each waited for a slot), never against its
configured rates."""

from __future__ import annotations

import pytest
from one_arm import one_arm_experiment
from sim_truth import records_of

from leverbench.analysis.summary import summarize
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import read_ledger
from leverbench.runner.run import Runner

TOKENS = 16


def _run(tmp_path, cfg: SimConfig, in_flight: int, repeats: int = 3):
    with SimulatorThread(cfg) as s:
        exp = one_arm_experiment(tmp_path, s.base_url + "/v1", repeats=repeats, max_tokens=TOKENS,
                                 experiment=f"in_flight = {in_flight}")
        Runner(load(exp), tmp_path / "run").run()
        truth = list(s.state.truth)
    return read_ledger(tmp_path / "run"), truth


def test_each_turn_decodes_beside_its_companions_and_they_are_all_in_the_ledger(tmp_path):
    cfg = SimConfig(prefill_tps=100_000.0, decode_tps=400.0, output_tokens=TOKENS, slots=4)
    led, truth = _run(tmp_path, cfg, 4)
    turns = list(led.of_kind("turn"))
    calls = [r for r in led.records if r["kind"] == "call"]
    companions = [r for r in led.records if r["kind"] == "companion"]
    assert len(turns) == 3 and all(t["in_flight"] == 4 and t["companion_failed"] == 0 for t in turns)
    assert sum(t["companion_calls"] for t in turns) == len(companions) >= 3 * 3
    assert all(c["error"] is None and c["completion_tokens"] == TOKENS for c in companions)
    # every companion's prompt is its own: no prefix cache serves one from another's, or from the turn's
    assert len({c["input_sha256"] for c in companions}) == len(companions)
    assert all(c["input_sha256"] != t["input_sha256"] for c in companions for t in calls)
    # the oracle: the simulator's own count of the requests decoding beside each turn's call (itself included)
    for t in records_of(calls, truth):
        assert t["decode_batch"] == pytest.approx(4.0, abs=0.75)  # (alone: 1; a companion between calls: 3)
        assert t["queue_s"] == pytest.approx(0.0, abs=0.1)


def test_with_fewer_slots_than_in_flight_the_turn_queues_behind_its_companions(tmp_path):
    """One slot, four in flight: the turn's request waits for the three sent before it, as one client of a steady
    closed loop of four does (its wait is three services, each the simulator's own time for a companion)."""
    cfg = SimConfig(prefill_tps=100_000.0, decode_tps=400.0, output_tokens=TOKENS, slots=1)
    led, truth = _run(tmp_path, cfg, 4, repeats=2)
    calls = [r for r in led.records if r["kind"] == "call"]
    served = {t["id"]: t for t in truth}
    for call, t in zip(calls, records_of(calls, truth)):
        ahead = [o for o in served.values() if o["admitted"] is not None and o["end"] is not None
                 and o["id"] != t["id"] and o["arrival"] <= t["arrival"] and o["end"] > t["arrival"]]
        assert len(ahead) == 3, call
        assert t["decode_batch"] == pytest.approx(1.0)
        # it waited for exactly those three: the queue the simulator logged against their service times
        first_in = min(o["admitted"] for o in ahead)
        assert t["queue_s"] == pytest.approx(t["admitted"] - t["arrival"], abs=1e-3)
        assert t["admitted"] >= max(o["end"] for o in ahead) - 0.01 and first_in <= t["arrival"]


def test_a_failed_companion_refuses_its_cells_comparisons(tmp_path):
    """A companion that failed leaves its turn timed at a lower load than claimed: its cell counts the failure, and
    every comparison through that cell is refused."""
    from ledgers import header, turn, write

    head = header({"a": {}, "b": {}}, ["c"], in_flight=4)
    recs = []
    for r in range(3):
        for arm in ("a", "b"):
            *calls, t = turn(arm, "c", r, 1.0 if arm == "a" else 0.5, 10)
            t.update(in_flight=4, companion_calls=3, companion_failed=1 if (arm, r) == ("b", 1) else 0)
            recs += [*calls, t]
    s = summarize(read_ledger(write(tmp_path / "r", head, recs)))
    cell = next(c for c in s["cells"] if c["arm"] == "b")
    assert cell["companion_failed"] == 1 and cell["failed_calls"] == 0  # (its own calls all succeeded)
    for scope in ("case:c", "total"):
        mult = next(m for m in s["multipliers"] if m["arm"] == "b" and m["scope"] == scope)
        assert not mult["citable"] and "b has 1 failed companion call(s)" in mult["reason"]
    (verdict,) = [v for v in s["verdicts"] if v["arm"] == "b"]
    assert verdict["refused"] and verdict["verdict"] != "pays"


def test_one_in_flight_is_each_turn_alone(tmp_path):
    cfg = SimConfig(prefill_tps=100_000.0, decode_tps=400.0, output_tokens=TOKENS, slots=4)
    led, truth = _run(tmp_path, cfg, 1, repeats=2)
    assert not [r for r in led.records if r["kind"] == "companion"]
    assert all("in_flight" not in t for t in led.of_kind("turn"))
    calls = [r for r in led.records if r["kind"] == "call"]
    assert all(t["decode_batch"] == 1.0 for t in records_of(calls, truth))


def test_a_run_from_before_companions_resumes_as_it_ran(tmp_path):
    """A ledger v5 header names no in_flight (each turn alone): with the file unchanged it resumes; a file that
    now asks for companions is refused, saying what to do."""
    import json

    from click.testing import CliRunner

    from leverbench.cli import cli

    cfg = SimConfig(prefill_tps=100_000.0, decode_tps=400.0, output_tokens=TOKENS)
    with SimulatorThread(cfg) as s:
        exp = one_arm_experiment(tmp_path, s.base_url + "/v1", repeats=3, max_tokens=TOKENS)
        run = ["run", str(exp), "--out", str(tmp_path / "run")]
        assert CliRunner().invoke(cli, run).exit_code == 0
        path = tmp_path / "run" / "ledger.jsonl"
        lines = path.read_text().splitlines()
        head = json.loads(lines[0])
        del head["config"]["experiment"]["in_flight"]
        head["schema"] = "leverbench.ledger/5"
        cut = next(i for i, ln in enumerate(lines) if json.loads(ln)["kind"] == "turn")
        path.write_text("\n".join([json.dumps(head), *lines[1:cut + 1]]) + "\n")  # one turn done, as v5 wrote it
        alone = exp.read_text()
        exp.write_text(alone.replace("[experiment]\n", "[experiment]\nin_flight = 2\n"))
        res = CliRunner().invoke(cli, [*run, "--resume"])
        assert res.exit_code == 2 and "timed each turn alone" in res.output, res.output
        exp.write_text(alone)
        res = CliRunner().invoke(cli, [*run, "--resume"])
        assert res.exit_code == 0, res.output
    assert len(list(read_ledger(tmp_path / "run").of_kind("turn"))) == 3


def test_a_companion_s_prompt_is_its_own_also_in_content_parts():
    """A recorded turn's messages may hold content-part lists only: each companion still gets words of its own."""
    from leverbench.runner.companions import OwnPrompts

    msgs = [{"role": "system", "content": [{"type": "text", "text": "x"}]},
            {"role": "user", "content": [{"type": "text", "text": "y y"}]}]
    own = OwnPrompts(msgs, "s")
    a, b = own.for_request(0), own.for_request(1)
    assert a != b and a != msgs and a[0]["content"][1:] == msgs[0]["content"] and a[1] == msgs[1]
    plain = OwnPrompts([{"role": "user", "content": "hi there"}], "s")
    assert plain.for_request(0) != plain.for_request(1)
