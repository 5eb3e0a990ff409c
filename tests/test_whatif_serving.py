"""``leverbench whatif`` serving as the engine does (issue 22, section 3: defects 3, 6, 10 and 13), each against
a hand computation or the simulator's ground truth:

- the batching slowdown is relative to the single-stream per-token time of the rate model (defect 3);
- the prefix cache follows the arm's engine: vLLM and SGLang share a prompt's blocks once its prefill computed
  them, and the KV of the requests in flight counts against the capacity; llama.cpp's slots each keep their
  own last prompt and answer (defect 6);
- the extrapolation note compares a call's uncached tokens with the prefill's uncached range (defect 10);
- an arm whose slots are known and whose slowdown was not measured gets both assumptions, and --verify says
  which one the measurement supports (defect 13).
"""

from __future__ import annotations

import pytest
from ledgers import call, header, ledger, turn

from leverbench.analysis.rate_fit import batch_slowdown
from leverbench.analysis.summary import summarize
from leverbench.analysis.whatif import ArmSpec, forecast
from leverbench.analysis.whatif_arms import arm_specs
from leverbench.analysis.whatif_plan import plan_calls
from leverbench.errors import BadInput
from leverbench.report.summary_file import check_summary
from leverbench.workload.traces import TrafficCall

M = {"prefill": {"a_s": 0.5, "b_s_per_token": 0.01, "c_s_per_token2": 0.0},
     "decode": {"d0_s_per_token": 0.1, "d1_s_per_token_per_ctx": 0.0}, "batch": None, "slots": None}


def _summary(knobs: dict, model: dict | None = None, **arm) -> dict:
    """A summary of one arm "a" with *knobs* and the rate model *model* (M by default)."""
    return {"schema": "leverbench.summary/1", "baseline": "a", "run": {"name": "hand"}, "drift": [], "warnings": [],
            "arms": [{"name": "a", "conditions": {}, "knobs": knobs, **arm}], "rates": [],
            "rate_models": [{"arm": "a", **(model or M)}]}


# ---------------------------------------------------------------- defect 3: the slowdown's reference


D0 = 0.020  # s per token, served alone (the turns)
TPOT = {4: 0.040, 8: 0.060, 16: 0.100}  # the load sweep's p50 TPOT at each concurrency


def _load_call(c: int, i: int, tpot: float) -> dict:
    t = 100.0 * c + i
    return {"kind": "load", "arm": "a", "case": "r", "repeat": i, "step": 0, "stage": f"ramp-c{c}", "sweep": "ramp",
            "mode": "closed", "concurrency": c, "load_run": f"run-{c}", "t_send": t, "scheduled_t": t,
            "warmup": False, "ttft_s": 0.01, "t_first_answer_s": 0.01, "latency_s": 0.01 + 10 * tpot,
            "chunk_t": [], "chunk_chars": [], "status": 200, "error": None, "prompt_tokens": 100,
            "completion_tokens": 11, "cached_tokens": 0, "timings": None, "token_source": "usage"}


def _calibration() -> dict:
    """A run whose turns decode at 20 ms a token (llama.cpp timings; prefill 1 µs a token) and whose load sweep
    measured a p50 TPOT of 40, 60 and 100 ms at concurrency 4, 8 and 16 (no concurrency 1 in the sweep)."""
    recs = []
    for rep, out in enumerate((40, 80, 120, 160)):
        c = call("a", "r", rep, prompt=100, out=out, ttft=0.0001, latency=0.0001 + (out - 1) * D0,
                 timings={"prompt_n": 100, "prompt_ms": 0.1, "predicted_n": out, "predicted_ms": (out - 1) * D0 * 1000,
                          "cache_n": 0})
        recs += turn("a", "r", rep, c["latency_s"], out, calls=[c])
    recs += [_load_call(c, i, t) for c, t in TPOT.items() for i in range(5)]
    return summarize(ledger(header({"a": {"prefix_cache": False}}, ["r"], repeats=4), recs))


def test_slowdown_is_relative_to_the_single_stream_rate_model() -> None:
    """slowdown(c) = TPOT(c) / the rate model's per-token time at the sweep's context, d0 + d1·(P + n/2): with
    d1 = 0, 40 / 20 = 2, 60 / 20 = 3, 100 / 20 = 5 (on main 1, 1.5, 2.5: relative to the lowest concurrency)."""
    rows = [{"arm": "a", "stage": f"ramp-c{c}", "sweep": "ramp", "mode": "closed", "concurrency": c,
             "tpot": {"p50": t}, "ok": 5, "input_tokens": 5 * 1000, "output_tokens": 5 * 11} for c, t in TPOT.items()]
    b = batch_slowdown(rows, "a", {"d0_s_per_token": D0, "d1_s_per_token_per_ctx": 0.0})
    assert b["concurrency"] == [4, 8, 16] and b["slowdown"] == pytest.approx([2.0, 3.0, 5.0])
    assert b["reference_concurrency"] == 1
    # with a context slope: the single-stream time at a prompt of 1,000 and 11 answer tokens is
    # 0.02 + 1e-5 · (1000 + 11 / 2) = 0.030055 s
    b = batch_slowdown(rows, "a", {"d0_s_per_token": D0, "d1_s_per_token_per_ctx": 1e-5})
    assert b["slowdown"][0] == pytest.approx(0.040 / 0.030055)
    assert b["single_stream_tpot_s"][0] == pytest.approx(0.030055)


def test_four_simultaneous_calls_at_the_measured_tpot() -> None:
    """The issue's case: sweep at 4, 8, 16, single stream 20 ms a token.  Four simultaneous calls of 100 tokens
    after their first: each decodes at the measured TPOT at concurrency 4, 40 ms → 100 × 0.040 = 4.0 s
    (main: 2.0 s, the slowdown at 4 taken as 1)."""
    summary = _calibration()
    b = summary["rate_models"][0]["batch"]
    assert b["slowdown"] == pytest.approx([2.0, 3.0, 5.0], rel=1e-6)
    specs, _ = arm_specs(summary)
    plan = plan_calls([TrafficCall(2, 101, arrival_s=0.0) for _ in range(4)])
    row = forecast(plan, specs, "a")["arms"][0]
    assert row["e2e_p50_s"] == pytest.approx(4.0, rel=1e-3)
    assert row["e2e"]["max"] == pytest.approx(4.0, rel=1e-3)


def test_an_older_summarys_slowdown_is_renormalised_to_single_stream() -> None:
    """A summary written before this fix: slowdown relative to its lowest concurrency (4), with the measured TPOT
    beside it.  It is still read (checked) and its slowdown is taken against the model's 20 ms: the same 4.0 s,
    and a note says so (main: 2.0 s)."""
    model = {**M, "prefill": {"a_s": 0.0, "b_s_per_token": 1e-6, "c_s_per_token2": 0.0},
             "decode": {"d0_s_per_token": D0, "d1_s_per_token_per_ctx": 0.0},
             "batch": {"concurrency": [4, 8, 16], "slowdown": [1.0, 1.5, 2.5], "tpot_s": [0.04, 0.06, 0.1],
                       "reference_concurrency": 4, "stage": "ramp"}, "slots": None}
    summary = check_summary(_summary({"prefix_cache": False}, model), "old.json")
    specs, _ = arm_specs(summary)
    plan = plan_calls([TrafficCall(2, 101, arrival_s=0.0) for _ in range(4)])
    row = forecast(plan, specs, "a")["arms"][0]
    assert row["e2e_p50_s"] == pytest.approx(4.0, rel=1e-3)
    assert any("concurrency 4" in n and "single stream" in n for n in row["notes"])


def test_a_batch_with_a_tpot_per_concurrency_is_checked() -> None:
    """summary.json's batch: its measured TPOT, when there, has one value per concurrency (whatif reads it to
    re-normalise an older summary's slowdown)."""
    bad = _summary({}, {**M, "batch": {"concurrency": [4, 8], "slowdown": [1.0, 1.5], "tpot_s": [0.04],
                                       "reference_concurrency": 4}})
    with pytest.raises(BadInput, match="tpot_s: 1 values for 2 concurrencies"):
        check_summary(bad, "old.json")


# ---------------------------------------------------------------- defect 10: the extrapolation note


def test_extrapolation_compares_the_uncached_part_of_a_prompt() -> None:
    """Prefill fitted on up to 150 uncached tokens.  On an arm with a cache, the 200-token call reads 100 from
    it: 100 uncached, inside the range, so nothing is extrapolated (main: "1 of 2 prompts longer than the 150
    tokens").  Without a cache the same call prefills 200: beyond the range, said."""
    model = {**M, "prefill": {**M["prefill"], "range_uncached": [10, 150], "range_cached": [0, 500]}}
    calls = [TrafficCall(100, 10, arrival_s=0.0, prefix_blocks=(1,)),
             TrafficCall(200, 5, arrival_s=10.0, prefix_blocks=(1, 2))]
    plan = plan_calls(calls, block_tokens=100)
    on = forecast(plan, [ArmSpec("a", model, cache=True, capacity_tokens=1000, block_tokens=1)], "a")["arms"][0]
    assert on["cache"]["hit_tokens"] == 100
    assert on["extrapolation"] is None
    off = forecast(plan, [ArmSpec("a", model)], "a")["arms"][0]
    assert off["extrapolation"] == ("extrapolated: 1 of 2 prompts prefill more than the 150 uncached tokens its "
                                    "prefill was fitted on (up to 200)")


def test_extrapolation_says_when_a_call_reads_more_cached_tokens_than_fitted() -> None:
    """With an attention term (c > 0) the prefill's time depends on the cached tokens too: a call that reads 100
    cached tokens where the fit saw at most 50 extrapolates in them, and the note says so."""
    model = {**M, "prefill": {**M["prefill"], "c_s_per_token2": 1e-6, "range_uncached": [10, 150],
                              "range_cached": [0, 50]}}
    calls = [TrafficCall(100, 10, arrival_s=0.0, prefix_blocks=(1,)),
             TrafficCall(200, 5, arrival_s=10.0, prefix_blocks=(1, 2))]
    row = forecast(plan_calls(calls, block_tokens=100),
                   [ArmSpec("a", model, cache=True, capacity_tokens=1000, block_tokens=1)], "a")["arms"][0]
    assert row["extrapolation"] == ("extrapolated: 1 of 2 calls read more than the 50 cached tokens its prefill "
                                    "was fitted with (up to 100)")

