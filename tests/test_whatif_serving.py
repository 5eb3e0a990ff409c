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

import json
from pathlib import Path

import pytest
from ledgers import call, header, ledger, turn
from test_load import sim_process

import leverbench.ledger.writer as writer
from leverbench.analysis.rates.rate_fit import batch_slowdown
from leverbench.analysis.summary import summarize
from leverbench.analysis.whatif.arms import arm_specs
from leverbench.analysis.whatif.forecast import ArmSpec, forecast, simulate
from leverbench.analysis.whatif.plan import plan_calls
from leverbench.analysis.whatif.verify import COMPARED, compare, measured
from leverbench.config import load
from leverbench.errors import BadInput
from leverbench.ledger.reader import read_ledger
from leverbench.pipeline.summary_file import check_summary
from leverbench.pipeline.whatif_files import whatif_file
from leverbench.report.whatif import arms_table, verify_table
from leverbench.runner.run import Runner
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


# ---------------------------------------------------------------- defect 6: the engine's cache rule


def _ab() -> list[TrafficCall]:
    """A: 100 tokens (hash block 1), 10 out: prefill 0.5 + 1.0 = 1.5 s, decode 0.9 s → ends at 2.4.  B at 2.0,
    during A's decode: 200 tokens starting with A's block."""
    return [TrafficCall(100, 10, arrival_s=0.0, prefix_blocks=(1,)),
            TrafficCall(200, 5, arrival_s=2.0, prefix_blocks=(1, 2))]


def test_a_call_arriving_during_anothers_decode_hits_its_prefix_on_vllm() -> None:
    """Two slots, no slowdown.  vLLM shares A's blocks once its prefill computed them (t = 1.5): B at 2.0 hits
    100 tokens, prefill 0.5 + 100 × 0.01 = 1.5 s → TTFT 1.5 (main: no hit until A ended, TTFT 2.5)."""
    summary = _summary({"prefix_cache": True, "engine": "vllm", "block_size": 1},
                       {**M, "slots": 2, "batch": {"concurrency": [1, 2], "slowdown": [1.0, 1.0]}})
    specs, _ = arm_specs(summary, cache_tokens=10_000)
    s = simulate(plan_calls(_ab(), block_tokens=100), specs[0])
    assert list(s.hit) == [0, 100]
    assert list(s.ttft) == pytest.approx([1.5, 1.5])


def _abc() -> list[TrafficCall]:
    """A: 110 tokens (block 1 = 100, then 10 of its own), 1 out: prefill 0.5 + 1.1 = 1.6 s, ends at 1.6.
    B at 2.0: 200 tokens of its own, 11 out: prefill 2.5 s (→ 4.5), decode 1.0 s (→ 5.5).
    C at 5.0, during B's decode: 110 tokens starting with A's block 1."""
    return [TrafficCall(110, 1, arrival_s=0.0, prefix_blocks=(1,)),
            TrafficCall(200, 11, arrival_s=2.0, prefix_blocks=(9, 8)),
            TrafficCall(110, 1, arrival_s=5.0, prefix_blocks=(1,))]


def test_the_kv_of_requests_in_flight_counts_against_the_capacity() -> None:
    """A cache of 250 tokens.  When A ends its 110 prompt tokens and its answer's 1 are cached.  B, admitted at
    2.0, holds 200 + 11 tokens of KV while it is served: 111 + 211 > 250, so A's blocks are evicted (its tail
    first, then its head: 111 + 211 − 1 − 10 = 311 > 250 still).  C at 5.0 finds nothing (main, which counted
    only finished prompts: 100 tokens hit).  With room for both (1,000 tokens), C hits A's 100."""
    arm = ArmSpec("a", M, slots=2, cache=True, capacity_tokens=250, block_tokens=1)
    plan = plan_calls(_abc(), block_tokens=100)
    s = simulate(plan, arm)
    assert list(s.hit) == [0, 0, 0]
    roomy = simulate(plan, ArmSpec("a", M, slots=2, cache=True, capacity_tokens=1000, block_tokens=1))
    assert list(roomy.hit) == [0, 0, 100]


def _llama(slots: int, **knobs) -> ArmSpec:
    summary = _summary({"prefix_cache": True, "engine": "llama.cpp", **knobs},
                       {**M, "slots": slots, "batch": {"concurrency": [1, 2], "slowdown": [1.0, 1.0]}})
    return arm_specs(summary, cache_tokens=10_000)[0][0]


def test_llama_cpp_slots_keep_their_own_prompt() -> None:
    """llama.cpp: a slot keeps the tokens of its last request; a call takes the idle slot whose tokens share
    the largest part of its prompt (more than 10 %), else the least recently used.  Two slots:
    A (100 + 10 tokens, 1 out) on one slot, ends at 1.6.  B at 2.0 (A's block 1, then 100 of its own) shares 100
    of its 200 tokens with that slot (50 %): it takes it and hits 100; the slot then holds B.  C at 3.0, while B
    is served, starts with block 1 too, but that slot is busy and the other empty: no hit (a cache shared by the
    slots, as main had, serves 100)."""
    calls = [TrafficCall(110, 1, arrival_s=0.0, prefix_blocks=(1,)),
             TrafficCall(200, 11, arrival_s=2.0, prefix_blocks=(1, 2)),
             TrafficCall(110, 1, arrival_s=3.0, prefix_blocks=(1,))]
    plan = plan_calls(calls, block_tokens=100)
    arm = _llama(2)
    s = simulate(plan, arm)
    assert list(s.hit) == [0, 100, 0]
    assert arm.cache_rule == "slots" and arm.block_tokens == 1
    assert s.shadow.hit_tokens == 200  # the unbounded upper bound beside it still counts C's 100


def test_llama_cpp_next_round_hits_its_prompt_and_answer_on_its_slot() -> None:
    """A session of two rounds on llama.cpp: round 2 (round 1's 100 + 10 answer + 20 new) lands on round 1's
    slot and reuses all 110 tokens the slot holds (its prompt and the answer it generated)."""
    calls = [TrafficCall(100, 10, arrival_s=0.0, session="s", round=0),
             TrafficCall(130, 5, cached_tokens=110, session="s", round=1, tool_wait_s=0.5)]
    s = simulate(plan_calls(calls), _llama(2))
    assert list(s.hit) == [0, 110]


def test_llama_cpp_host_memory_prompt_cache() -> None:
    """One slot.  A (block 1, then 10 of its own), then B (unrelated) takes the slot by LRU: A's tokens are saved
    to the host-memory prompt cache (--cache-ram).  C (block 1, then 10 of its own) shares nothing with the
    slot (B): the slot is saved and A's state, which keeps 100 / 110 ≥ 25 % of itself and more of C than the
    slot, is loaded: C hits 100.  With --cache-ram 0 there is no such cache: C hits nothing."""
    calls = [TrafficCall(110, 1, arrival_s=0.0, prefix_blocks=(1,)),
             TrafficCall(200, 1, arrival_s=10.0, prefix_blocks=(9, 8)),
             TrafficCall(110, 1, arrival_s=20.0, prefix_blocks=(1,))]
    plan = plan_calls(calls, block_tokens=100)
    assert list(simulate(plan, _llama(1)).hit) == [0, 0, 100]
    off_summary = _summary({"prefix_cache": True, "engine": "llama.cpp"},
                           {**M, "slots": 1, "batch": {"concurrency": [1, 2], "slowdown": [1.0, 1.0]}},
                           discovered={"engine_args": ["--cache-ram", "0"]})
    off = arm_specs(off_summary)[0][0]
    assert off.capacity_tokens == 0
    assert list(simulate(plan, off).hit) == [0, 0, 0]


def test_the_simulators_own_rule_prompts_shared_after_prefill(tmp_path: Path, monkeypatch) -> None:
    """Ground truth: the simulator (llama.cpp dialect, two slots) shares prompt blocks across its slots once
    their prefill ends.  Call 1 decodes 60 tokens at 20 tok/s (3 s); call 2 arrives at 1 s, during that decode,
    with call 1's first hash block: the simulator serves 32 of its tokens from the cache, and the forecast
    (the arm's engine discovered as the simulator) says the same (main: 0, call 1 had not ended)."""
    monkeypatch.setattr(writer.os, "fsync", lambda fd: None)
    trace = tmp_path / "two.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 1024, "output_length": 60, "hash_ids": [1, 2]})
                     + "\n" + json.dumps({"timestamp": 1000, "input_length": 1024, "output_length": 2,
                                          "hash_ids": [1, 3]}) + "\n")
    sim = dict(prefill_tps=20_000.0, decode_tps=20.0, slots=2, prefix_cache=True, cache_block=16)
    summary = _summary({"prefix_cache": True, "engine": "llama.cpp", "simulator": True, "block_size": 16},
                       {"prefill": {"a_s": 0.0, "b_s_per_token": 1 / sim["prefill_tps"], "c_s_per_token2": 0.0},
                        "decode": {"d0_s_per_token": 1 / sim["decode_tps"], "d1_s_per_token_per_ctx": 0.0},
                        "slots": 2, "batch": {"concurrency": [1, 2], "slowdown": [1.0, 1.0]}})
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    res = whatif_file(trace, tmp_path / "summary.json", scale_input=1 / 16, cache_tokens=1e6)
    exp = tmp_path / "exp.toml"
    with sim_process(**sim) as url:
        exp.write_text(f'''[experiment]
name = "truth"
repeats = 1
baseline = "a"
sentinel_tokens = 0
[[arms]]
name = "a"
role = "baseline"
base_url = "{url}"
model = "sim"
[[cases]]
name = "x"
prompt = "hi"
max_tokens = 1
[[load]]
name = "whatif"
mode = "trace"
trace = "two.jsonl"
scale_input = {1 / 16}
''')
        Runner(load(exp), tmp_path / "run").run()
    recs = [r for r in read_ledger(tmp_path / "run").records if r.get("kind") == "load" and r.get("stage") == "whatif"]
    truth = sorted((r["scheduled_t"], r["cached_tokens"]) for r in recs)
    assert [c for _, c in truth] == [0, 32]
    assert res["arms"][0]["cache"]["hit_tokens"] == 32
    assert measured(read_ledger(tmp_path / "run").records, "whatif")["a"]["cached_share"] == pytest.approx(32 / 128)


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


# ---------------------------------------------------------------- defect 13: slots known, no slowdown measured


def _two() -> list[TrafficCall]:
    return [TrafficCall(100, 10, arrival_s=0.0), TrafficCall(200, 5, arrival_s=1.0)]


def test_known_slots_without_a_measured_slowdown_give_both_assumptions() -> None:
    """Two slots discovered, no slowdown measured.  One at a time (the figures): e2e 2.4 and 4.3 (p50 3.35),
    busy 5.3 s.  In parallel without slowdown: A 1.5 + 0.9 = 2.4; B from 1.0: 2.5 + 0.4 → e2e 2.9 (p50 2.65),
    busy 3.9 s.  Both are in the row (``assumptions``) and a note says so (main: one at a time, silently)."""
    summary = _summary({"prefix_cache": False, "slots": 2})
    specs, _ = arm_specs(summary)
    res = forecast(plan_calls(_two()), specs, "a")
    row = res["arms"][0]
    assert row["e2e_p50_s"] == pytest.approx(3.35) and row["busy_s"] == pytest.approx(5.3)
    a = row["assumptions"]
    assert a["slots"] == 2 and a["figures"] == "one at a time"
    assert a["parallel"]["e2e_p50_s"] == pytest.approx(2.65)
    assert a["parallel"]["busy_s"] == pytest.approx(3.9)
    assert a["one_at_a_time"]["e2e_p50_s"] == pytest.approx(3.35)
    assert a["range"]["e2e_p50_s"] == pytest.approx([2.65, 3.35])
    note = next(n for n in row["notes"] if "no batching slowdown" in n)
    assert "one at a time" in note and "in parallel" in note and "2.65" in note
    table = arms_table({**res, "calls": 2})
    assert table.rows[0][2] == "1 (2 known)" and any("2.65" in n for n in table.notes)



def test_verify_says_when_the_measurement_shows_the_assumption_was_wrong() -> None:
    """Measured e2e p50 2.7 s: nearer the parallel figure (2.65) than the one-at-a-time one the forecast used
    (3.35): the assumption was wrong, and the verification says so.  Measured 3.3 s: nearer one at a time, the
    assumption held."""
    specs, _ = arm_specs(_summary({"prefix_cache": False, "slots": 2}))
    res = forecast(plan_calls(_two()), specs, "a")
    f = res["arms"][0]
    for value, wrong in ((2.7, True), (3.3, False)):
        meas = {"a": {k: f[k] for k in COMPARED} | {"e2e_p50_s": value, "calls": 2, "failed": 0,
                                                     "cached_share": 0.0, "template_tokens": 0.0}}
        v = compare(res, meas, {"a": {}})
        check = v["arms"][0]["assumption_check"]
        assert check["wrong"] is wrong
        assert check["figures"]["e2e_p50_s"]["nearer"] == ("parallel" if wrong else "one at a time")
        notes = " ".join(verify_table(v).notes)
        assert ("was wrong" in notes) is wrong
