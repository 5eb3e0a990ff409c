"""Traffic analysis: numbers against hand computation, rates from runs and fits, Azure code vs conversation."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.analysis.traffic.analyze import (
    Rates,
    analyze_traffic,
    bucket_of,
    choose_rates,
    fit_rates,
    hand_rates,
    rates_from_summary,
    with_drafter,
)
from leverbench.cli.analyze import analyze_command
from leverbench.errors import BadInput
from leverbench.pipeline.traffic_files import analyze_file
from leverbench.workload.traces import TrafficCall, load_traffic

TRACES = Path(__file__).parent / "data" / "traces"  # slices of public traces: see its README.md


@lru_cache(maxsize=None)
def _load(name: str):
    return load_traffic(TRACES / name)


# ---------------------------------------------------------------- hand computation on three rows

THREE = [
    TrafficCall(input_tokens=1000, output_tokens=100, cached_tokens=200),
    TrafficCall(input_tokens=3000, output_tokens=10),
    TrafficCall(input_tokens=20000, output_tokens=500, cached_tokens=10000),
]
RATES = Rates(prefill_tps=1000.0, prefill_a_s=0.1, decode_tps=50.0, source="test", drafter_speedup=2.0)


def test_three_rows_by_hand() -> None:
    r = analyze_traffic(THREE, {None: RATES}, answer_cap=100, gpus=2, gpu_hour_usd=5.5)
    # prefill = 0.1 + I/1000: 1.1, 3.1, 20.1; decode = O/50: 2.0, 0.2, 10.0
    ov = r["overall"]
    assert ov["prefill_s"] == pytest.approx(24.3)
    assert ov["decode_s"] == pytest.approx(12.2)
    assert ov["queue_s"] == 0.0
    assert ov["total_s"] == pytest.approx(36.5)
    assert ov["prefill_share"] == pytest.approx(24.3 / 36.5)
    assert ov["dominant"] == "prefill"
    lv = {l["lever"]: l for l in r["levers"]}
    # prefix cache: 200/1000 + (unknown) + 10000/1000 = 10.2 s
    assert lv["prefix cache"]["saved_s"] == pytest.approx(10.2)
    assert lv["prefix cache"]["saved_share"] == pytest.approx(10.2 / 36.5)
    # GPU-hours per 1000 calls = (10.2 / 3) × 2 GPUs × 1000 / 3600; $ at 5.5/h
    assert lv["prefix cache"]["gpu_hours_per_1000_calls"] == pytest.approx(10.2 / 3 * 2 * 1000 / 3600)
    assert lv["prefix cache"]["usd_per_1000_calls"] == pytest.approx(10.2 / 3 * 2 * 1000 / 3600 * 5.5)
    # drafter: decode × (1 − 1/2) = 6.1 s
    assert lv["drafter"]["saved_s"] == pytest.approx(6.1)
    # answer cap 100: (0 + 0 + 400) / 50 = 8.0 s
    assert lv["answer cap"]["saved_s"] == pytest.approx(8.0)
    assert r["ranking"] == ["prefix cache", "answer cap", "drafter"]
    # the whole run: 36.5 s / 3 calls × 2 GPUs × 1000 / 3600
    assert r["cost"]["gpu_hours_per_1000_calls"] == pytest.approx(36.5 / 3 * 2 * 1000 / 3600)
    # buckets: 1000 → <1k, 3000 → 1k–4k, 20000 → 16k–64k
    b = {x["bucket"]: x for x in r["buckets"]}
    assert set(b) == {"<1k", "1k–4k", "16k–64k"}
    assert b["<1k"]["prefill_s"] == pytest.approx(1.1) and b["<1k"]["decode_s"] == pytest.approx(2.0)
    assert b["<1k"]["dominant"] == "decode" and b["16k–64k"]["dominant"] == "prefill"
    assert b["16k–64k"]["levers"]["prefix cache"] == pytest.approx(10.0 / 30.1)
    d = r["distribution"]["input_tokens"]
    assert (d["p50"], d["mean"], d["max"]) == (3000, 8000, 20000)
    assert r["distribution"]["input_output_ratio"] == pytest.approx(24000 / 610)
    assert r["queue"]["measured"] is False
    assert "Prefill dominates" in r["recommendation"] and "Try the prefix cache" in r["recommendation"]


def test_buckets_edges() -> None:
    assert [bucket_of(x) for x in (0, 1023, 1024, 4095, 4096, 16384, 65535, 65536)] == \
        ["<1k", "<1k", "1k–4k", "1k–4k", "4k–16k", "16k–64k", "16k–64k", "≥64k"]


def test_queue_from_ttft() -> None:
    calls = [TrafficCall(input_tokens=1000, output_tokens=10, cached_tokens=200, ttft_s=2.0)]
    r = Rates(prefill_tps=1000.0, prefill_a_s=0.1, decode_tps=50.0, source="test")
    # served cache: modelled prefill = 0.1 + 800/1000 = 0.9 → queue 1.1
    assert analyze_traffic(calls, {None: r}, cached_served=True)["overall"]["queue_s"] == pytest.approx(1.1)
    # cached only known shareable: prefill = 0.1 + 1.0 → queue 0.9
    res = analyze_traffic(calls, {None: r}, cached_served=False)
    assert res["overall"]["queue_s"] == pytest.approx(0.9) and res["queue"]["measured"]
    # rates fitted from these TTFTs: queueing is inside a, not measured
    res = analyze_traffic(calls, {None: r}, queue_from_ttft=False)
    assert res["overall"]["queue_s"] == 0 and not res["queue"]["measured"]


def test_unknown_levers_and_assumed_share() -> None:
    calls = [TrafficCall(input_tokens=4000, output_tokens=20), TrafficCall(input_tokens=6000, output_tokens=20)]
    r = Rates(prefill_tps=1000.0, decode_tps=50.0, source="test")
    res = analyze_traffic(calls, {None: r})
    lv = {l["lever"]: l for l in res["levers"]}
    assert not lv["prefix cache"]["estimated"] and not lv["drafter"]["estimated"]
    assert res["ranking"] == ["answer cap"]
    assert "Try a prefix cache first" in res["recommendation"]  # targets the dominant phase, gain unknown
    res = analyze_traffic(calls, {None: r}, assumed_cached_share=0.5)
    lv = {l["lever"]: l for l in res["levers"]}
    assert lv["prefix cache"]["saved_s"] == pytest.approx(5.0)  # (2000 + 3000) / 1000
    with pytest.raises(BadInput):
        analyze_traffic(calls, {None: r}, assumed_cached_share=1.5)


# ---------------------------------------------------------------- rates


def _summary(base_prefill: float = 2000.0, base_decode: float = 50.0, drafter_decode: float = 100.0) -> dict:
    """A summary.json shaped like leverbench's: baseline, a cache arm and a cache+drafter arm."""
    arms = [
        {"name": "current", "role": "baseline",
         "conditions": {"prefix_cache": False, "drafter": "none", "hardware": "gpu-x"}},
        {"name": "cache", "role": "control",
         "conditions": {"prefix_cache": True, "drafter": "none", "hardware": "gpu-x"}},
        {"name": "cache+drafter", "role": "treatment",
         "conditions": {"prefix_cache": True, "drafter": "ngram K=7", "hardware": "gpu-x"}},
    ]
    rates = [
        {"arm": "current", "decode_tps": base_decode, "decode_source": "probes", "prefill_tps": base_prefill,
         "prefill_a_s": 0.0, "prefill_source": "server timings", "prefill_input_range": [500, 90000]},
        {"arm": "cache", "decode_tps": base_decode * 1.1, "decode_source": "probes", "prefill_tps": base_prefill * 0.8,
         "prefill_a_s": 0.0, "prefill_source": "server timings", "prefill_input_range": [20, 90000]},
        {"arm": "cache+drafter", "decode_tps": drafter_decode, "decode_source": "probes",
         "prefill_tps": base_prefill * 0.9,
         "prefill_a_s": 0.0, "prefill_source": "server timings", "prefill_input_range": [20, 90000]},
    ]
    return {"baseline": "current", "arms": arms, "rates": rates, "run": {"concurrency": 1, "host": {"cpu": "x"}},
            "drift": []}


def test_rates_from_summary() -> None:
    r = rates_from_summary(_summary(), "run R")
    assert (r.prefill_tps, r.decode_tps) == (2000.0, 50.0)
    # the drafter arm differs from 'cache' only in the drafter: its speedup is against 'cache'
    assert r.drafter_speedup == pytest.approx(100.0 / 55.0)
    assert "'cache+drafter'" in r.drafter_source and "'cache'" in r.drafter_source
    assert sorted(r.alternatives["drafter_speedup"]) == pytest.approx([100 / 55, 100 / 50])
    assert sorted(r.alternatives["prefill_tps"]) == pytest.approx([1600, 1800, 2000])
    assert "hardware gpu-x" in r.conditions and "concurrency 1" in r.conditions
    bad = _summary()
    bad["rates"][0]["decode_tps"] = None
    with pytest.raises(BadInput, match="baseline"):
        rates_from_summary(bad)


def test_choose_rates_precedence() -> None:
    run = rates_from_summary(_summary())
    book = choose_rates(hand_rates(None, 80.0), run, None)
    assert book[None].decode_tps == 80.0 and book[None].prefill_tps == 2000.0
    assert "decode_tps" not in book[None].alternatives
    with pytest.raises(BadInput, match="--prefill-tps"):
        choose_rates(hand_rates(None, 80.0), None, None)
    with pytest.raises(BadInput, match="positive"):
        hand_rates(-1.0, 10.0)
    assert with_drafter(book, 3.0)[None].drafter_speedup == 3.0


def _grid_calls(model: str, prefill_tps: float, decode_tps: float, a: float, ttft: bool) -> list[TrafficCall]:
    """Exact timings on a full input × output grid (uncorrelated, so latency ~ output has the true slope)."""
    out = []
    for i in (1000, 2000, 4000):
        for o in (10, 50, 100, 200):
            pre = a + i / prefill_tps
            out.append(TrafficCall(input_tokens=i, output_tokens=o, latency_s=pre + o / decode_tps,
                                   ttft_s=pre if ttft else None, model=model))
    return out


@pytest.mark.parametrize("ttft", [True, False])
def test_fit_rates_recovers_known_rates_per_model(ttft: bool) -> None:
    calls = _grid_calls("small", 4000.0, 80.0, 0.2, ttft) + _grid_calls("big", 1000.0, 20.0, 0.5, ttft)
    book, rows = fit_rates(calls)
    assert book["small"].decode_tps == pytest.approx(80.0)
    assert book["small"].prefill_tps == pytest.approx(4000.0)
    assert book["small"].prefill_a_s == pytest.approx(0.2)
    assert book["big"].decode_tps == pytest.approx(20.0) and book["big"].prefill_tps == pytest.approx(1000.0)
    assert None in book  # pooled fallback
    assert {r["model"] for r in rows} == {"small", "big", "all calls"}
    per_model = [r for r in rows if r["model"] != "all calls"]
    assert all(r["prefill_r2"] == pytest.approx(1.0) for r in per_model)  # exact prefill once decode is known
    # input and output vary independently here, so the decode fit also regresses on input: exact
    assert all(r["method"] == "latency ~ output + uncached input" and r["r2"] == pytest.approx(1.0) for r in per_model)
    res = analyze_traffic(calls, book, queue_from_ttft=False)
    assert res["rates"]["small"]["fit"]["r2"] == per_model[1]["r2"]


def test_fit_refuses_constant_outputs() -> None:
    calls = [TrafficCall(input_tokens=i, output_tokens=100, latency_s=1.0 + i / 1000) for i in (100, 200, 300, 400)]
    book, rows = fit_rates(calls)
    assert book == {} and "barely vary" in rows[-1]["refused"]


# ---------------------------------------------------------------- the real traces


def test_azure_code_and_conversation_differ_as_their_lengths_say() -> None:
    """Same measured rates (prefill 2,000 tok/s, decode 50 tok/s, drafter 100 tok/s vs 55 on its twin):
    prefill dominates iff Σinput/Σoutput > prefill_tps/decode_tps = 40 (a = 0).  Code traffic
    (long prompts, short answers) is far above 40, conversation far below."""
    rates = {None: rates_from_summary(_summary(), "run R")}
    code = _load("AzureLLMInferenceTrace_code.csv").calls
    conv = _load("AzureLLMInferenceTrace_conv.csv").calls
    rc = analyze_traffic(code, rates, assumed_cached_share=0.5)
    rv = analyze_traffic(conv, rates, assumed_cached_share=0.5)
    # the distributions: code has longer prompts and much shorter answers
    dc, dv = rc["distribution"], rv["distribution"]
    assert dc["input_tokens"]["p50"] > dv["input_tokens"]["p50"]
    assert dc["output_tokens"]["p50"] < dv["output_tokens"]["p50"] / 5
    assert dc["input_output_ratio"] > 40 > dv["input_output_ratio"]
    # hence the dominant phase flips ...
    assert rc["overall"]["dominant"] == "prefill"
    assert rv["overall"]["dominant"] == "decode"
    # ... by exactly the hand formula: prefill share = (ΣI/2000) / (ΣI/2000 + ΣO/50)
    si = sum(c.input_tokens for c in code)
    so = sum(c.output_tokens for c in code)
    assert rc["overall"]["prefill_share"] == pytest.approx((si / 2000) / (si / 2000 + so / 50))
    # ... and so does the lever ranking: the cache first for code, a decode lever first and the cache last
    # for conversation (the median-answer cap and the 1.82x drafter both beat a half-cached prompt)
    phase = {l["lever"]: l["phase"] for l in rc["levers"]}
    assert rc["ranking"][0] == "prefix cache"
    assert phase[rv["ranking"][0]] == "decode" and rv["ranking"][-1] == "prefix cache"
    assert "Try the prefix cache" in rc["recommendation"]
    assert f"Try the {rv['ranking'][0]}" in rv["recommendation"]
    drafter = {r["lever"]: r for r in rv["levers"]}["drafter"]
    assert drafter["saved_share"] == pytest.approx(rv["overall"]["decode_share"] * (1 - 55 / 100))
    # without an assumed cached share the code traffic's first lever is still the cache, unestimated
    assert "Try a prefix cache first" in analyze_traffic(code, rates)["recommendation"]


def test_mooncake_prefix_cache_saving_from_hash_ids() -> None:
    load = _load("mooncake_conversation_trace.jsonl")
    rates = Rates(prefill_tps=5000.0, decode_tps=40.0, source="test")
    res = analyze_traffic(load.calls, {None: rates}, cached_served=load.cached_served)
    # recompute the cached tokens independently from the hash ids: leading blocks seen before, × 512, ≤ input − 1
    seen: set[int] = set()
    cached = []
    for c in load.calls:
        k = next((j for j, h in enumerate(c.prefix_blocks) if h not in seen), len(c.prefix_blocks))
        cached.append(min(512 * k, c.input_tokens - 1))
        seen.update(c.prefix_blocks)
    lever = next(l for l in res["levers"] if l["lever"] == "prefix cache")
    assert lever["estimated"]
    assert lever["saved_s"] == pytest.approx(sum(cached) / 5000.0)
    assert lever["saved_share"] == pytest.approx(sum(cached) / 5000.0 / res["overall"]["total_s"])
    assert res["distribution"]["cached_share_of_input"] == pytest.approx(
        sum(cached) / sum(c.input_tokens for c in load.calls))
    # on this slice (the first 200 rows): row 0 finds nothing cached, 192 rows reuse only the system-prompt
    # block and 7 continue an earlier conversation by 2, 5, 14, 18, 26, 27 and 38 blocks: 192 + 130 = 322 blocks
    # of 512 tokens, over 2,782,179 input tokens (none capped at input − 1)
    assert sum(cached) == 322 * 512 and sum(c.input_tokens for c in load.calls) == 2_782_179
    assert res["distribution"]["cached_share_of_input"] == pytest.approx(322 * 512 / 2_782_179)
    assert lever["range"] is not None and lever["range"][0] <= lever["range"][1]  # spread across input-length buckets


# ---------------------------------------------------------------- the command


def test_analyze_file_and_command(tmp_path: Path) -> None:
    res = analyze_file(TRACES / "tracelab_example_round_trace.jsonl")
    assert res["input"]["used"] == 19
    assert res["rates_used"] == ["fitted from the traffic's latencies"]
    assert {f["model"] for f in res["fits"]} >= {"claude-opus-4-8", "gpt-5.4"}
    runner = CliRunner()
    out = runner.invoke(analyze_command, [str(TRACES / "AzureLLMInferenceTrace_code.csv"), "--prefill-tps", "2000",
                                          "--decode-tps", "50", "--gpu-hour-usd", "5.5"])
    assert out.exit_code == 0, out.output
    assert "Recommendation" in out.output and "Prefill dominates" in out.output
    out = runner.invoke(analyze_command, [str(TRACES / "AzureLLMInferenceTrace_code.csv"), "--prefill-tps", "2000",
                                          "--decode-tps", "50", "--json"])
    data = json.loads(out.output)
    assert data["overall"]["dominant"] == "prefill" and data["input"]["format"] == "azure"
    # no rates at all for a trace without latencies: bad input, exit code 2, also with the command alone
    out = runner.invoke(analyze_command, [str(TRACES / "AzureLLMInferenceTrace_code.csv")])
    assert out.exit_code == 2 and "leverbench: error: " in out.output and "--rates RUN_DIR" in out.output


# ---------------------------------------------------------------- a log whose cache was already on (issue 15, part 4)


def test_generic_csv_with_served_cached_tokens_reports_the_cache_on(tmp_path: Path) -> None:
    """A gateway log's cached_tokens were read from a cache: prefill counts only the uncached tokens, the cache
    is reported as on with its realized saving, and the first recommendation names another lever."""
    (tmp_path / "gw.csv").write_text("input_tokens,output_tokens,cached_tokens\n"
                                     "10000,100,8000\n12000,200,9000\n8000,50,6000\n")
    res = analyze_file(tmp_path / "gw.csv", prefill_tps=1000, decode_tps=50, drafter_speedup=2.0)
    assert res["cache_already_on"] is True
    # prefill from the uncached tokens: (2000 + 3000 + 2000) / 1000 = 7 s; decode (100 + 200 + 50) / 50 = 7 s
    assert res["overall"]["prefill_s"] == pytest.approx(7.0) and res["overall"]["decode_s"] == pytest.approx(7.0)
    cache = next(l for l in res["levers"] if l["lever"] == "prefix cache")
    assert cache["already_on"] and not cache["estimated"]
    assert cache["realized_saved_s"] == pytest.approx(23.0)  # 23,000 cached tokens at 1,000 tok/s
    assert cache["realized_share"] == pytest.approx(23.0 / (14.0 + 23.0))
    assert cache["served_share"] == pytest.approx(23000 / 30000)
    assert "prefix cache" not in res["ranking"] and res["ranking"][0] == "drafter"
    rec = res["recommendation"]
    assert "The prefix cache is already on" in rec and "Try the drafter" in rec
    assert "Try the prefix cache" not in rec and "Try a prefix cache" not in rec
    # the same log read as only *potential* sharing (cached_served False) keeps the cache a lever to try
    plain = analyze_traffic(load_traffic(tmp_path / "gw.csv").calls, {None: Rates(1000.0, 50.0, "t")})
    assert plain["cache_already_on"] is False and plain["ranking"][0] == "prefix cache"
    assert plain["overall"]["prefill_s"] == pytest.approx(30.0)


def test_mooncake_analysis_shows_a_finite_cache_beside_the_unbounded_one() -> None:
    res = analyze_file(TRACES / "mooncake_conversation_trace.jsonl", prefill_tps=5000, decode_tps=40,
                       cache_tokens=100_000, block_tokens=16)
    lever = next(l for l in res["levers"] if l["lever"] == "prefix cache")
    assert res["cache_already_on"] is False and lever["estimated"]  # potential sharing: still a lever to try
    f = lever["finite"]
    assert f["capacity_tokens"] == 100_000 and f["block_tokens"] == 16 and f["source"] == "--cache-tokens"
    assert f["saved_s"] == pytest.approx(f["hit_tokens"] / 5000)
    assert 0 < f["saved_s"] < lever["saved_s"]
    assert "a cache of 100,000 tokens in blocks of 16" in lever["parameter"]


@pytest.mark.parametrize("cap", ["-5", "nan"])
def test_analyze_refuses_a_bad_cache_size(cap: str) -> None:
    """--cache-tokens -5 (or nan) ended in a ValueError traceback on main."""
    out = CliRunner().invoke(analyze_command, [str(TRACES / "mooncake_conversation_trace.jsonl"), "--prefill-tps",
                                               "5000", "--decode-tps", "40", "--cache-tokens", cap])
    assert out.exit_code == 2 and "leverbench: error: --cache-tokens" in out.output, out.output
