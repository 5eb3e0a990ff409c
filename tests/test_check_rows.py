"""The summary's check sections fit their schema (:mod:`leverbench.schema.check_rows`, issue 24 part 3): engaged,
cost, drift, drift_pairs, drift_common and equal_work, of the golden summaries and of hand-made runs of every
kind (drift detected on one arm, alike for every arm, absent; blocked order; warm-ups; equal work refused; a
cost with a GPU price); and the schema refuses a wrong type, an unknown key, a missing key and a figure out of
its bounds in each of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ledgers import call, header, ledger, probes_for, timed, turn

from leverbench.analysis.summary import projection_costs, summarize
from leverbench.schema.check import summary_problems

GOLDEN = Path(__file__).parent / "golden"
CHECK_SECTIONS = ("engaged", "cost", "drift", "drift_pairs", "drift_common", "equal_work")
ARMS = {"base": {"hardware": "old", "gpu_hour_usd": 5.5}, "fast": {"hardware": "new", "gpu_hour_usd": 5.5, "gpus": 2}}


def _check_problems(summary: dict) -> list[str]:
    return [str(p) for p in summary_problems(summary) if p.where.split(".", 1)[0].split("[")[0] in CHECK_SECTIONS]


def _sentinel(arm: str, position: str, repeat: int, t: float, tps: float, ttft: float = 0.1) -> dict:
    return call(arm, "(sentinel)", repeat, kind="sentinel", latency=ttft + 16 / tps, ttft=ttft, out=17,
                position=position, probe_tokens=16, t_send=t)


def _drift_run(speed, rounds: int = 4, order: str = "interleaved", sentinels: bool = True,
               warmups: int = 0) -> dict:
    """Rounds of one turn per arm (base 10 s, fast 5 s), each opened by a sentinel of every arm and one more at
    the end (blocked order: per block); speed(arm, x): the arm's speed at run time x (1: as at the start)."""
    recs: list[dict] = []
    for a in ARMS:
        recs += [call(a, "(sentinel)", k, kind="warmup", latency=0.1 + 16 / 100, ttft=0.1, out=17)
                 for k in range(warmups)]
    blocks = [(a, r) for a in ARMS for r in range(rounds)] if order == "blocked" else [(None, r) for r in range(rounds)]
    n = len(blocks) + 1
    for k, (block, r) in enumerate(blocks):
        x = k / (n - 1)
        if sentinels:
            recs += [_sentinel(a, "start", k if order == "blocked" else r, 1000.0 + 100 * x, 100 * speed(a, x),
                               0.1 / speed(a, x)) for a in ARMS]
        for a in ARMS if block is None else [block]:
            t = (10.0 if a == "base" else 5.0) / speed(a, x)
            recs += turn(a, "c", r, t, 100, calls=[call(a, "c", r, latency=t, out=100, t_send=1000.0 + 100 * x)])
    if sentinels:
        recs += [_sentinel(a, "end", 0, 1100.0, 100 * speed(a, 1.0), 0.1 / speed(a, 1.0)) for a in ARMS]
    return summarize(ledger(header(ARMS, ["c"], repeats=rounds, order=order), recs))


def _equal_work_refused() -> dict:
    """The fast arm's extra tokens cost more than its whole turn by its rate model: equal work refused."""
    recs: list[dict] = []
    for r in range(3):
        b = timed("base", "c", r, prompt=1000, cached=0, out=100, prefill_tps=1000.0, decode_tps=50.0)
        recs += turn("base", "c", r, 1.0 + 99 / 50, 100, calls=[b])
        f = timed("fast", "c", r, prompt=1000, cached=0, out=400, prefill_tps=1000.0, decode_tps=50.0)
        f["latency_s"] = 0.4
        recs += turn("fast", "c", r, 0.4, 400, calls=[f])
    head = header(ARMS, ["c"])
    return summarize(ledger(head, recs + probes_for(head, ARMS)))


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.summary.json")))
def test_golden_check_sections_fit(name: str) -> None:
    summary = json.loads((GOLDEN / name).read_text())
    assert _check_problems(summary) == []


def test_drift_on_one_arm_and_its_cost_fit() -> None:
    s = _drift_run(lambda a, x: 1.0 - 0.5 * x if a == "fast" else 1.0)
    assert _check_problems(s) == []
    assert any(d["drifted"] for d in s["drift"]) and s["drift_pairs"][0]["refuses"]
    assert len(s["cost"]) == 2 and all(c["usd_per_turn"] is not None for c in s["cost"])
    assert s["cost"][1]["gpus"] == 2.0 and s["cost"][1]["citable"] is False


def test_a_drift_alike_for_every_arm_adjusts_the_turns_and_fits() -> None:
    s = _drift_run(lambda a, x: 1.0 - 0.5 * x)
    assert _check_problems(s) == []
    assert s["drift_common"]["detected"] and s["drift_common"]["adjusted"] and s["drift_common"]["text"]


def test_blocked_order_fits() -> None:
    s = _drift_run(lambda a, x: 1.0 - 0.3 * x, order="blocked")
    assert _check_problems(s) == []
    assert all(p["order"] == "blocked" and p["points"] == 0 for p in s["drift_pairs"])
    assert s["drift_pairs"][0]["decode"]["change"] is None


def test_no_sentinels_and_warm_ups_fit() -> None:
    s = _drift_run(lambda a, x: 1.0, sentinels=False, warmups=2)
    assert _check_problems(s) == []
    assert all(d["unknown"] and d["start_tps"] is None for d in s["drift"])
    assert all(d["warmup"]["calls"] == 2 and d["warmup"]["settled"] for d in s["drift"])
    assert s["drift_common"]["decode"] is None and not s["drift_common"]["adjusted"]
    s = _drift_run(lambda a, x: 1.0, rounds=2)
    assert _check_problems(s) == [] and all(d["warmup"] is None for d in s["drift"])


def test_equal_work_refused_fits() -> None:
    s = _equal_work_refused()
    assert _check_problems(s) == []
    [e] = s["equal_work"]
    assert e["total"] is not None and not e["total"]["citable"] and e["turns_corrected"] == 3


def test_projection_costs_are_cost_rows() -> None:
    """The projection's costs (``project``, from a summary read back) are rows of the ``cost`` schema."""
    s = json.loads(json.dumps(_drift_run(lambda a, x: 1.0)))
    s["projection"] = {"input_tokens": 100, "output_tokens": 10, "levers": [], "recommendation": None,
                       "arms": [{"arm": "base", "total_s": 2.0}, {"arm": "fast", "refused": "no rates"}]}
    s["cost"] = projection_costs(s, gpu_hour_usd=3.0)
    assert [c["arm"] for c in s["cost"]] == ["base"] and s["cost"][0]["gpu_hour_usd"] == 5.5
    assert _check_problems(s) == []


def _located(summary: dict) -> list[str]:
    return [p.split(":")[0] for p in _check_problems(summary)]


def test_each_section_refuses_an_unknown_key_a_missing_one_and_a_wrong_type() -> None:
    s = json.loads((GOLDEN / "handmade.summary.json").read_text())
    s["engaged"][0]["bogus"] = 1
    del s["engaged"][1]["prefix_cache"]
    s["engaged"][0]["prompt_tokens"] = "100"
    s["cost"][0]["bogus"] = 1
    del s["cost"][0]["reason"]
    s["cost"][0]["citable"] = "no"
    s["drift"][0]["decode"]["bogus"] = 1
    del s["drift"][0]["warmup"]["settled"]
    s["drift"][0]["drifted"] = 1
    s["drift_pairs"][0]["bogus"] = 1
    del s["drift_pairs"][0]["undetermined"]
    s["drift_pairs"][0]["order"] = "shuffled"
    s["drift_common"]["bogus"] = 1
    del s["drift_common"]["adjusted"]
    s["drift_common"]["text"] = 0
    s["equal_work"][0]["total"]["bogus"] = 1
    del s["equal_work"][0]["model_problem"]
    s["equal_work"][0]["calls"] = 36.0
    assert sorted(_located(s)) == sorted([
        "engaged[0].bogus", "engaged[1].prefix_cache", "engaged[0].prompt_tokens",
        "cost[0].bogus", "cost[0].reason", "cost[0].citable",
        "drift[0].decode.bogus", "drift[0].warmup.settled", "drift[0].drifted",
        "drift_pairs[0].bogus", "drift_pairs[0].undetermined", "drift_pairs[0].order",
        "drift_common.bogus", "drift_common.adjusted", "drift_common.text",
        "equal_work[0].total.bogus", "equal_work[0].model_problem", "equal_work[0].calls"]), _located(s)


def test_the_figures_a_reader_computes_with_are_bounded() -> None:
    s = json.loads((GOLDEN / "handmade.summary.json").read_text())
    s["drift"][0]["decode"]["change"] = -1.5  # exp(b) − 1 is never below −1
    s["drift"][0]["start_tps"] = 0.0  # a sentinel's speed is above 0
    s["drift_pairs"][0]["points"] = -1
    s["drift_common"]["decode"]["low"] = -2.0
    s["equal_work"][0]["identical_share"] = 1.5
    s["equal_work"][0]["total"]["token_change"] = -1.1
    s["cost"][0]["usd_per_turn"] = -0.01
    s["cost"][0]["gpus"] = 0.0
    s["cost"][0]["gpu_hour_usd"] = 2e6  # beyond MAX_GPU_HOUR_USD
    assert _located(s) == [
        "cost[0].gpus", "cost[0].gpu_hour_usd", "cost[0].usd_per_turn", "drift[0].decode.change", "drift[0].start_tps",
        "drift_pairs[0].points", "drift_common.decode.low", "equal_work[0].identical_share",
        "equal_work[0].total.token_change"], _located(s)
