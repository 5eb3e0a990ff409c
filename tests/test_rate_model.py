"""The rate model's formulas, by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ledgers import call, header, ledger, turn

from leverbench.analysis.rates.rate_fit import batch_slowdown, fit_decode, fit_prefill
from leverbench.analysis.rates.rate_model import (
    decode_seconds,
    from_rates_row,
    models_by_arm,
    prefill_seconds,
    tokens_per_second_at,
)
from leverbench.analysis.summary import summarize
from leverbench.runner.sse import StreamState

MODEL = {"prefill": {"a_s": 0.1, "b_s_per_token": 0.001, "c_s_per_token2": 1e-6},
         "decode": {"d0_s_per_token": 0.02, "d1_s_per_token_per_ctx": 1e-5}}


def test_prefill_seconds_by_hand():
    # 1000 uncached after 500 cached: 0.1 + 0.001·1000 + 1e-6·1000·(500 + 500) = 0.1 + 1 + 1 = 2.1
    assert prefill_seconds(MODEL, 1000, 500) == pytest.approx(2.1)
    assert prefill_seconds(MODEL, 0, 500) == pytest.approx(0.1)


def test_decode_seconds_by_hand():
    # 10 tokens from context 1000: 10·0.02 + 1e-5·(10·1000 + 10·9/2) = 0.2 + 1e-5·10045 = 0.30045
    assert decode_seconds(MODEL, 1000, 10) == pytest.approx(0.30045)


def test_a_flat_model_from_the_rates_table():
    m = from_rates_row({"arm": "a", "prefill_tps": 1000.0, "prefill_a_s": 0.05, "decode_tps": 50.0})
    assert prefill_seconds(m, 2000, 10_000) == pytest.approx(0.05 + 2.0)  # no position term
    assert decode_seconds(m, 5000, 100) == pytest.approx(2.0)  # no context term
    assert from_rates_row({"arm": "a", "prefill_tps": None, "decode_tps": 50.0}) is None


# ------------------------------------------------------------------ fitting, on exact points

def test_fit_prefill_recovers_a_b_c_from_exact_points():
    """s = 0.02 + 0.001·n + 2e-7·n·(k + n/2) at (n, k) with both n and k varying: exact recovery, R² = 1."""
    pts = [(100, 0), (500, 0), (1000, 0), (2000, 0), (10, 1000), (50, 3000), (400, 1500)]
    n, k = [p[0] for p in pts], [p[1] for p in pts]
    s = [0.02 + 0.001 * a + 2e-7 * a * (b + a / 2) for a, b in pts]
    p = fit_prefill(n, k, s, "server timings")
    assert p["a_s"] == pytest.approx(0.02, rel=1e-6) and p["b_s_per_token"] == pytest.approx(0.001, rel=1e-6)
    assert p["c_s_per_token2"] == pytest.approx(2e-7, rel=1e-6) and p["quadratic"] is True
    assert p["r2"] == pytest.approx(1.0) and p["points"] == 7 and p["outliers"] == 0
    assert (p["range_uncached"], p["range_cached"]) == ([10, 2000], [0, 3000])


def test_fit_prefill_without_the_quadratic_term_when_it_is_not_determined():
    """Two prompt lengths, k = 0: n²/2 is a combination of 1 and n over two points, so c is not fitted
    (0, quadratic false) and the line through them is a + b·n: a = 0.1, b = (1.1 − 0.6)/500 = 0.001."""
    p = fit_prefill([500, 1000, 500, 1000], [0, 0, 0, 0], [0.6, 1.1, 0.6, 1.1])
    assert p["quadratic"] is False and p["c_s_per_token2"] == 0.0
    assert p["a_s"] == pytest.approx(0.1) and p["b_s_per_token"] == pytest.approx(0.001)
    # one prompt length: proportional through zero, b = Σs / Σn = 1.2 / 2000
    one = fit_prefill([1000, 1000], [0, 0], [0.5, 0.7])
    assert one["a_s"] == 0.0 and one["b_s_per_token"] == pytest.approx(0.0006) and one["r2"] is None
    assert fit_prefill([0, 0], [10, 10], [0.01, 0.01]) is None  # nothing computed: no prefill point


def test_fit_decode_recovers_d0_d1_from_exact_points():
    """m tokens from context L take Σ (d0 + d1·(L + i)) = m·(d0 + d1·(L + (m − 1)/2)); d0 = 10 ms, d1 = 5e-6."""
    pts = [(20, 500), (80, 500), (40, 2000), (60, 4000), (10, 8000)]
    m, L = [p[0] for p in pts], [p[1] for p in pts]
    s = [a * (0.01 + 5e-6 * (b + (a - 1) / 2)) for a, b in pts]
    d = fit_decode(m, L, s, "server timings")
    assert d["d0_s_per_token"] == pytest.approx(0.01, rel=1e-6)
    assert d["d1_s_per_token_per_ctx"] == pytest.approx(5e-6, rel=1e-6)
    assert d["r2"] == pytest.approx(1.0) and d["context_fitted"] is True
    assert d["range_context"] == [500, 8009]  # the last point's tokens reach 8000 + 10 − 1
    # its decode_s agrees with the points it was fitted on
    model = {"decode": d}
    assert decode_seconds(model, 500, 80) == pytest.approx(80 * (0.01 + 5e-6 * (500 + 79 / 2)), rel=1e-6)
    assert tokens_per_second_at(model, 2000) == pytest.approx(1 / (0.01 + 5e-6 * 2000), rel=1e-6)


def test_fit_decode_at_one_context_fits_no_slope():
    """Contexts within MIN_CONTEXT_SPAN of each other: d1 = 0, d0 the weighted mean per-token time
    Σs / Σm = (0.2 + 0.44) / (20 + 40) = 0.010667."""
    d = fit_decode([20, 40], [1000, 1010], [0.2, 0.44])
    assert d["context_fitted"] is False and d["d1_s_per_token_per_ctx"] == 0.0 and d["r2"] is None
    assert d["d0_s_per_token"] == pytest.approx(0.64 / 60)


def test_a_stall_is_left_out_and_counted():
    """Nine calls on the line d0 = 10 ms, d1 = 5e-6, one of them stalled 30 s (a shared machine): it is an
    outlier (residual far beyond 5 robust standard deviations and 25 % of its prediction), left out, and the
    fit on the other eight is exact."""
    pts = [(50, 500), (50, 1000), (50, 1500), (50, 2000), (50, 2500), (50, 3000), (50, 3500), (50, 4000), (50, 700)]
    s = [a * (0.01 + 5e-6 * (b + (a - 1) / 2)) for a, b in pts]
    s[-1] += 30.0
    d = fit_decode([p[0] for p in pts], [p[1] for p in pts], s)
    assert d["outliers"] == 1 and d["points"] == 8
    assert d["d0_s_per_token"] == pytest.approx(0.01, rel=1e-6)
    assert d["d1_s_per_token_per_ctx"] == pytest.approx(5e-6, rel=1e-6)


def test_batch_slowdown_from_the_load_stages():
    """TPOT p50 at concurrency 1, 2, 4: 10, 12, 18 ms → slowdown 1, 1.2, 1.8 (the sweep with most points)."""
    rows = [{"arm": "a", "stage": f"ramp-c{c}", "sweep": "ramp", "mode": "closed", "concurrency": c,
             "tpot": {"p50": t}} for c, t in ((1, 0.010), (2, 0.012), (4, 0.018))]
    rows.append({"arm": "a", "stage": "bursty", "sweep": None, "mode": "open", "concurrency": None,
                 "tpot": {"p50": 0.05}})
    b = batch_slowdown(rows, "a")
    assert b["concurrency"] == [1, 2, 4] and b["reference_concurrency"] == 1
    assert b["slowdown"] == pytest.approx([1.0, 1.2, 1.8])
    assert batch_slowdown(rows, "other") is None


def test_models_by_arm_falls_back_to_the_flat_rates():
    summary = {"rate_models": [{"arm": "a", "prefill": None, "decode": None}],
               "rates": [{"arm": "a", "prefill_tps": 10.0, "decode_tps": 5.0},
                         {"arm": "b", "prefill_tps": 1000.0, "prefill_a_s": 0.0, "decode_tps": 50.0}]}
    got = models_by_arm(summary)
    assert got["a"]["prefill"] is None  # its own model, as fitted
    assert got["b"]["decode"]["d0_s_per_token"] == pytest.approx(0.02)  # the flat model of its rates row


# ------------------------------------------------------------------ the cross-check at one context

ENGINES = Path(__file__).parent / "data" / "engines"
D0, D1 = 0.010, 1e-5  # s per token, s per token per context token: decode slows as the context grows


def _llama_call(case: str, r: int, *, prompt: int, out: int, kind: str = "call", **kw) -> dict:
    """A call as llama.cpp times it, on a context-dependent engine: prefill 1 ms a token, the first token at
    its end, then out − 1 tokens from context prompt + 1, each d0 + d1·(its context)."""
    prefill = prompt * 0.001
    decode = sum(D0 + D1 * (prompt + i) for i in range(1, out))
    return call("base", case, r, kind=kind, prompt=prompt, out=out, ttft=0.05 + prefill,
                latency=0.05 + prefill + decode,
                timings={"prompt_n": prompt, "prompt_ms": prefill * 1000, "predicted_n": out,
                         "predicted_ms": decode * 1000, "cache_n": 0}, **kw)


def _turns_at_500() -> list[dict]:
    """Four turns of one call each at a 500-token prompt, 40 to 160 output tokens."""
    recs = []
    for rep, out in enumerate((40, 80, 120, 160)):
        c = _llama_call("r", rep, prompt=500, out=out)
        recs += turn("base", "r", rep, c["latency_s"], out, calls=[c])
    return recs


def _probed_at(depth: int, decode_scale: float = 1.0) -> tuple[dict, list[dict]]:
    """(header, records): _growing_turns() and a forced probe of 16 and 128 tokens, 2 repeats, at *depth*;
    the probes' decode time (client stream and server timings alike) times *decode_scale*."""
    head = header({"base": {"prefix_cache": False}}, ["r"], repeats=4)
    head["config"]["probes"] = {"output_tokens": [16, 128], "repeats": 2, "case": "r", "tolerance": 0.05,
                                "depths": [depth]}
    recs = _growing_turns()
    for rep in range(2):
        for n in (16, 128):
            c = _llama_call("r", rep, prompt=depth, out=n, kind="probe", probe_tokens=n, probe_depth=depth,
                            length_method="ignore_eos")
            if decode_scale != 1.0:
                c["latency_s"] = c["ttft_s"] + decode_scale * (c["latency_s"] - c["ttft_s"])
                c["timings"]["predicted_ms"] *= decode_scale
            recs.append(c)
    return head, recs


def test_probe_regression_and_server_timings_agree_at_the_probes_context():
    """Agent turns at contexts 500 → ~900, a probe at a 3,000-token depth: decode there is much slower
    (1/(10 ms + 1e-5·3,071.5) = 24.6 tok/s against 1/(10 ms + 1e-5·~700) = 58.8 tok/s in the turns).  Compared
    as measured, probe and regression are 140 % apart; at the probe's context (the regression: d0 + d1·L fitted
    per call on the client's stream clock over the turns, without the probe, so extrapolated there) the three
    views are the same rate."""
    s = summarize(ledger(*_probed_at(3000)))
    p = s["probes"][0]
    at = 1.0 / (D0 + D1 * 3071.5)
    assert p["depth"] == 3000 and p["context_tokens"] == pytest.approx(3071.5)
    assert p["decode_tps"] == pytest.approx(at, rel=1e-9)
    assert p["server_decode_tps"] == pytest.approx(at, rel=1e-6)
    assert p["regression_decode_tps"] == pytest.approx(at, rel=1e-6) and p["regression_extrapolated"] is True
    assert p["agrees"] is True and p["agreement"] < 1e-6
    m = s["rate_models"][0]["decode"]
    assert (m["d0_s_per_token"], m["d1_s_per_token_per_ctx"]) == (pytest.approx(D0), pytest.approx(D1))


def test_a_drafter_arms_natural_probe_is_checked_against_the_same_calls_timings():
    """A drafter's speed depends on the text: its turns' answers are drafted at another acceptance than the
    probe's (here its probe decodes twice as fast per token).  Regression and model (the turns' text) would put
    the probe 100 % apart and FAIL a sound measurement; the probe is checked against the server's timings of
    the same probe calls, (p2 − p1) / (m2 − m1), and the regression shown beside it."""
    head = header({"base": {"prefix_cache": True, "drafter": "ngram"}}, ["r"], repeats=4)
    head["config"]["probes"] = {"output_tokens": [16, 128], "repeats": 2, "case": "r", "tolerance": 0.05}
    recs = _turns_at_500()
    for rep in range(2):
        for n in (16, 128):
            p = _llama_call("r", rep, prompt=500, out=n, kind="probe", probe_tokens=n,
                            length_method="natural (drafter arm: not forced past end-of-sequence)")
            half = (p["latency_s"] - p["ttft_s"]) / 2  # the probe's text drafts well: each token in half the time
            p["latency_s"] = p["ttft_s"] + half
            p["timings"]["predicted_ms"] = half * 1000
            recs.append(p)
    p = summarize(ledger(head, recs))["probes"][0]
    same_calls = (128 - 16) / (sum(D0 + D1 * (500 + i) for i in range(16, 128)) / 2)
    assert p["natural"] is True and p["views"] == ["probe", "server"]
    assert p["decode_tps"] == pytest.approx(same_calls, rel=1e-9)
    assert p["server_decode_tps"] == pytest.approx(same_calls, rel=1e-9)
    # shown, not checked: the per-call fit over the turns (their text; the probe left out)
    assert p["regression_decode_tps"] == pytest.approx(same_calls / 2, rel=0.05)
    assert p["agrees"] is True and "same calls" in p["check_note"]


def _growing_turns() -> list[dict]:
    """Four turns of three steps each, as an agent's: each step's prompt is the last one's plus its answer and a
    50-token follow-up (contexts 500 → ~900), the long answer first and shorter ones as the context grows."""
    recs = []
    outs = [(200, 120, 40), (220, 100, 60), (180, 140, 20), (240, 80, 40)]
    for rep, steps in enumerate(outs):
        prompt, calls = 500, []
        for i, out in enumerate(steps):
            calls.append(_llama_call("r", rep, prompt=prompt, out=out, step=i))
            prompt += out + 50
        recs += turn("base", "r", rep, sum(c["latency_s"] for c in calls), sum(steps), calls=calls)
    return recs


def test_the_regression_view_is_per_call_so_a_turns_growing_context_does_not_bias_it():
    """The demo's failure (issue 15): a cell regression of latency on output over the calls of agent turns
    reads decode too fast, because a call's prompt (so its prefill and its decode context) grows with the
    earlier answers, not with its own output.  The per-call fit on the client's stream clock takes each
    call at its own context: at the probe's context the three views are the same rate, exactly."""
    s = summarize(ledger(*_probed_at(700)))
    p = s["probes"][0]
    at = 1.0 / (D0 + D1 * p["context_tokens"])
    assert p["decode_tps"] == pytest.approx(at, rel=1e-9)
    assert p["regression_decode_tps"] == pytest.approx(at, rel=1e-6)
    assert p["server_decode_tps"] == pytest.approx(at, rel=1e-6)
    assert p["agreement"] < 1e-6 and p["agrees"] is True
    cell = next(d for d in s["decomposition"] if d["arm"] == "base")
    assert cell["decode_tps"] > 1.05 * at  # the cell regression, which the check no longer uses, reads fast


def _recorded_spec_stream() -> StreamState:
    """vLLM 0.32's stream of a 64-token answer with an ngram drafter (tests/data/engines/README.md)."""
    st = StreamState(0.0, keep_text=True)
    for line in (ENGINES / "vllm-0.32.0" / "chat-stream-spec-details.sse").read_text().splitlines():
        if line.startswith("data: {"):
            st.feed(json.loads(line[6:]), 0.0)
    return st


def test_a_stream_of_grouped_tokens_counts_the_tokens_after_its_first_token():
    """A drafter's accepted tokens arrive together, but the first chunk holds the one token the prefill
    sampled: vLLM's recorded ngram stream sends "The", then " ledger", " is", then groups of several tokens
    (64 tokens in 14 chunks).  The stream's decode time (first chunk → end) spans the other 63 tokens:
    completion − 1 as for any stream, not completion · (chunks − 1) / chunks = 59.4 (which reads 6 % slow).
    Nor may a call that writes a few words and then streams a tool call (tool-call deltas are not answer
    chunks) count half its tokens."""
    st = _recorded_spec_stream()
    out, chunks = st.usage["completion_tokens"], st.answer_chunks
    assert (out, chunks, st.chunk_text[0]) == (64, 14, "The")
    head = header({"base": {"prefix_cache": False}}, ["r"], repeats=3)
    recs = []
    for rep in range(3):
        c = call("base", "r", rep, prompt=500, out=out, ttft=0.5, latency=0.5 + (out - 1) * D0, answer_chunks=chunks)
        recs += turn("base", "r", rep, c["latency_s"], out, calls=[c])
    for rep in range(3):  # "Let me read it." in 2 chunks, then a 58-token tool call in 58 tool-call deltas
        c = call("base", "r", 3 + rep, prompt=500, out=60, ttft=0.5, latency=0.5 + 59 * D0, answer_chunks=2,
                 tool_calls=[{"id": "1", "name": "read", "arguments": "{}"}])
        recs += turn("base", "r", 3 + rep, c["latency_s"], 60, calls=[c])
    d = summarize(ledger(head, recs))["rate_models"][0]["decode"]
    assert d["source"] == "client stream" and d["outliers"] == 0
    assert d["d0_s_per_token"] == pytest.approx(D0, rel=1e-9) and d["d1_s_per_token_per_ctx"] == 0.0


def test_without_a_stream_the_cell_regression_stands_in():
    """Calls that were not streamed (no TTFT) give no per-call decode time: the regression view is the cell's
    latency ~ output regression (prompt 100, outputs 100 200 300 400 at 3.0 5.2 6.8 9.0 s: 1/0.0196 =
    51.0204 tok/s, tests/test_oracles.py), no decode model to move it (d1 = 0)."""
    head = header({"base": {"prefix_cache": False}}, ["r"], repeats=4)
    head["config"]["probes"] = {"output_tokens": [16, 128], "repeats": 2, "case": "r", "tolerance": 0.05}
    recs = []
    for rep, (out, lat) in enumerate([(100, 3.0), (200, 5.2), (300, 6.8), (400, 9.0)]):
        recs += turn("base", "r", rep, lat, out)
    for rep in range(2):
        for n, lat in ((16, 0.5), (128, 2.7)):
            recs.append(call("base", "r", rep, latency=lat, out=n, prompt=100, kind="probe", probe_tokens=n))
    for r in recs:
        if r["kind"] != "turn":
            r["ttft_s"] = None
    s = summarize(ledger(head, recs))
    p = s["probes"][0]
    assert p["method"] == "latency at two lengths" and p["decode_tps"] == pytest.approx(112 / 2.2)
    assert p["regression_source"] == "cell regression, latency ~ output"
    assert p["regression_decode_tps"] == pytest.approx(1 / 0.0196, rel=1e-7)
    assert s["rate_models"][0]["decode"] is None


def test_the_regression_view_leaves_out_the_probe_it_is_checked_against():
    """Probes at a depth of their own (3,000 tokens, beyond the turns' 500–900) whose decode is 20 % quicker per
    token than the turns' line there: a fit that took the probes in would pass through them (two clusters, two
    coefficients) and call the views the same.  The regression is fitted without the probe's own calls: the
    turns' line, extrapolated to the probe's context (flagged), is 25 % slower, and the check fails."""
    p = summarize(ledger(*_probed_at(3000, decode_scale=0.8)))["probes"][0]
    line = 1.0 / (D0 + D1 * p["context_tokens"])
    assert p["decode_tps"] == pytest.approx(line / 0.8, rel=1e-9)
    assert p["regression_decode_tps"] == pytest.approx(line, rel=1e-6) and p["regression_extrapolated"] is True
    assert p["agrees"] is False and p["agreement"] > 0.2
