"""Independent oracles for every headline number: small hand-made ledgers whose answers are worked out
by hand here, as literal numbers with their arithmetic in the comments, never by calling the code's
own helpers.  (tests/golden/ checks the code against an earlier run of itself: it catches change; these
catch wrong answers.)  The definitions are DESIGN.md's "The numbers, defined" and the analysis
modules' docstrings.
"""

from __future__ import annotations

import pytest
from ledgers import call, header, ledger, turn, warned

from leverbench.analysis.base.stats import median, percentile
from leverbench.analysis.load.stages import load_summary
from leverbench.analysis.summary import summarize
from leverbench.schema.warning_kinds import WarningKind as W

# ------------------------------------------------------------------ the article's two arms, four turns

# Turn times in repeat order (not sorted, so that a median must sort), one call per turn; the baseline's
# cell medians add up to the article's 173.8 s, the cache arm's to 67.2 s.
ARTICLE_TIMES = {
    ("base", "a"): [43.0, 40.0, 41.5],  # sorted 40.0 41.5 43.0 → median 41.5, range [40.0, 43.0]
    ("base", "b"): [45.2, 47.0, 44.0],  # 44.0 45.2 47.0 → 45.2
    ("base", "c"): [42.0, 39.0, 40.1],  # 39.0 40.1 42.0 → 40.1
    ("base", "d"): [48.5, 45.0, 47.0],  # 45.0 47.0 48.5 → 47.0        Σ medians = 41.5+45.2+40.1+47.0 = 173.8
    ("fast", "a"): [16.5, 15.0, 16.0],  # 15.0 16.0 16.5 → 16.0, range [15.0, 16.5]
    ("fast", "b"): [17.0, 19.0, 17.5],  # 17.0 17.5 19.0 → 17.5
    ("fast", "c"): [16.9, 16.2, 15.5],  # 15.5 16.2 16.9 → 16.2
    ("fast", "d"): [18.0, 17.5, 16.8],  # 16.8 17.5 18.0 → 17.5        Σ medians = 16.0+17.5+16.2+17.5 = 67.2
}
# Generated tokens per turn: case d's cache arm answers 25 % longer (the guard must refuse that cell).
ARTICLE_OUT = {
    ("base", "a"): [205, 198, 200],  # median 200
    ("fast", "a"): [210, 212, 208],  # median 210: spread (210 − 200) / 200 = 5 %
    ("base", "b"): [300] * 3, ("fast", "b"): [300] * 3,
    ("base", "c"): [150] * 3, ("fast", "c"): [150] * 3,
    ("base", "d"): [100] * 3,
    ("fast", "d"): [125] * 3,        # spread (125 − 100) / 100 = 25 % > 20 %
}
ARTICLE_ARMS = {"base": {"prefix_cache": False, "gpu_hour_usd": 5.5},
                "fast": {"prefix_cache": True, "gpu_hour_usd": 5.5}}


def engaged_cache(recs: list[dict], arms: dict[str, dict]) -> list[dict]:
    """The arms with prefix_cache on report half their prompt as cached: the lever engaged (a lever that did
    not engage refuses its comparison: tests/test_verdicts.py); no multiplier, median or range reads it."""
    for r in recs:
        if r["kind"] == "call" and arms.get(r["arm"], {}).get("prefix_cache"):
            r["cached_tokens"] = r["prompt_tokens"] // 2
    return recs


@pytest.fixture(scope="module")
def article() -> dict:
    recs = []
    for r in range(3):
        for case in "abcd":
            for arm in ARTICLE_ARMS:
                recs += turn(arm, case, r, ARTICLE_TIMES[(arm, case)][r], ARTICLE_OUT[(arm, case)][r])
    return summarize(ledger(header(ARTICLE_ARMS, list("abcd")), engaged_cache(recs, ARTICLE_ARMS)))


def test_cell_medians_and_observed_ranges(article):
    cells = {(c["arm"], c["case"]): c for c in article["cells"]}
    want = {  # (median, min, max) from the sorted repeats above
        ("base", "a"): (41.5, 40.0, 43.0), ("base", "b"): (45.2, 44.0, 47.0),
        ("base", "c"): (40.1, 39.0, 42.0), ("base", "d"): (47.0, 45.0, 48.5),
        ("fast", "a"): (16.0, 15.0, 16.5), ("fast", "b"): (17.5, 17.0, 19.0),
        ("fast", "c"): (16.2, 15.5, 16.9), ("fast", "d"): (17.5, 16.8, 18.0),
    }
    for k, (med, lo, hi) in want.items():
        c = cells[k]
        assert (c["median_s"], c["min_s"], c["max_s"]) == (med, lo, hi), k
        assert c["n"] == 3 and c["failed_calls"] == 0 and c["retried_calls"] == 0
    assert cells[("base", "a")]["output_tokens_median"] == 200  # 198 200 205
    assert cells[("fast", "a")]["output_tokens_median"] == 210  # 208 210 212
    # every cache-arm range lies below the baseline's: disjoint (e.g. a: [15.0, 16.5] vs [40.0, 43.0])
    assert all(cells[("fast", c)]["overlaps_baseline"] is False for c in "abcd")


def test_totals_multipliers_and_the_volume_guard(article):
    totals = {t["arm"]: t for t in article["totals"]}
    assert totals["base"]["total_s"] == pytest.approx(173.8)  # 41.5 + 45.2 + 40.1 + 47.0
    assert totals["fast"]["total_s"] == pytest.approx(67.2)   # 16.0 + 17.5 + 16.2 + 17.5
    assert totals["base"]["output_tokens"] == 750  # 200 + 300 + 150 + 100
    assert totals["fast"]["output_tokens"] == 785  # 210 + 300 + 150 + 125
    m = {x["scope"]: x for x in article["multipliers"]}
    assert set(m) == {"case:a", "case:b", "case:c", "case:d", "total"}
    assert m["case:a"]["value"] == pytest.approx(2.59375)       # 41.5 / 16.0
    assert m["case:b"]["value"] == pytest.approx(2.5828571429)  # 45.2 / 17.5
    assert m["case:c"]["value"] == pytest.approx(2.4753086420)  # 40.1 / 16.2
    assert m["case:d"]["value"] == pytest.approx(2.6857142857)  # 47.0 / 17.5
    assert m["total"]["value"] == pytest.approx(2.5863095238)   # 173.8 / 67.2
    # the guard: a cell is citable up to a 20 % volume spread, the total up to 5 %
    assert (m["case:a"]["citable"], m["case:a"]["reason"]) == (True, None)
    assert m["case:a"]["volume_spread"] == pytest.approx(0.05)  # (210 − 200) / 200
    assert (m["case:b"]["citable"], m["case:c"]["citable"]) == (True, True)
    assert m["case:d"]["citable"] is False and m["case:d"]["volume_spread"] == pytest.approx(0.25)
    assert m["case:d"]["reason"] == "output volume spread 25.0% > 20%"  # (125 − 100) / 100
    assert m["total"]["volume_spread"] == pytest.approx(35 / 750)  # (785 − 750) / 750 = 4.67 % ≤ 5 %
    assert (m["total"]["citable"], m["total"]["reason"]) == (True, None)
    assert all(x["controlled"] and x["knobs"] == ["prefix_cache"] for x in m.values())  # one knob differs


def test_cost_per_turn_and_gpu_hours_the_articles_numbers(article):
    """usd_per_turn = turn_s × gpu_hour_usd × gpus / 3600, turn_s = total / cases;
    GPU-hours per 1000 turns = turn_s × gpus × 1000 / 3600."""
    cost = {c["arm"]: c for c in article["cost"]}
    # baseline: 173.8 / 4 = 43.45 s per turn; 43.45 × 5.5 / 3600 = 0.066382 $; 43.45 × 1000 / 3600 = 12.0694 GPU-h
    assert cost["base"]["turn_s"] == pytest.approx(43.45)
    assert cost["base"]["usd_per_turn"] == pytest.approx(0.0663819444)
    assert round(cost["base"]["usd_per_turn"], 4) == 0.0664
    assert cost["base"]["gpu_hours_per_1000_turns"] == pytest.approx(12.0694444)
    assert round(cost["base"]["gpu_hours_per_1000_turns"], 2) == 12.07
    assert cost["base"]["usd_per_1000_turns"] == pytest.approx(66.3819444)  # 1000 × 0.0663819
    # cache arm: 67.2 / 4 = 16.8 s; 16.8 × 5.5 / 3600 = 0.025667 $; 16.8 × 1000 / 3600 = 4.6667 GPU-h
    assert cost["fast"]["turn_s"] == pytest.approx(16.8)
    assert cost["fast"]["usd_per_turn"] == pytest.approx(0.0256666667)
    assert round(cost["fast"]["usd_per_turn"], 4) == 0.0257
    assert cost["fast"]["gpu_hours_per_1000_turns"] == pytest.approx(4.6666667)
    assert round(cost["fast"]["gpu_hours_per_1000_turns"], 2) == 4.67
    # returned against the baseline: 12.0694 − 4.6667 = 7.4028 GPU-hours per 1000 turns
    assert cost["fast"]["gpu_hours_returned_per_1000_turns"] == pytest.approx(7.4027778)
    assert cost["base"]["gpu_hours_returned_per_1000_turns"] == 0


# ------------------------------------------------------------------ what makes a multiplier not citable

GUARD_ARMS = {"base": {"prefix_cache": False, "drafter": "none"},
              "treat": {"prefix_cache": True, "drafter": "none"},
              "other": {"prefix_cache": True, "drafter": "ngram"}}
HTTP_500 = {"class": "http_status", "message": "500 internal error"}


def _retried_turn(arm: str, case: str, rep: int, turn_s: float, out: int) -> list[dict]:
    """A turn whose call failed once and succeeded on its retry: the failed attempt (``retried``) is in
    the ledger beside the call the turn kept, as the runner writes them."""
    recs = turn(arm, case, rep, turn_s, out)
    first = call(arm, case, rep, latency=9.9, out=40, error=HTTP_500, retried=True, attempt=0)
    first["turn_id"] = recs[0]["turn_id"]
    return [first, *recs]


@pytest.fixture(scope="module")
def guarded() -> dict:
    recs = []
    for r, t in enumerate([10.0, 12.0, 11.0]):
        recs += turn("base", "x", r, t, 50)
    for r, t in enumerate([4.0, 4.4, 4.2]):
        recs += turn("base", "y", r, t, 50)
    # treat/x: repeat 1 failed (its one call got an HTTP 500): two successful repeats, 5.0 and 7.0
    recs += turn("treat", "x", 0, 5.0, 50)
    recs += turn("treat", "x", 1, 6.5, 50, error=HTTP_500)
    recs += turn("treat", "x", 2, 7.0, 50)
    # treat/y: repeat 1's call was retried once and then succeeded
    recs += turn("treat", "y", 0, 2.0, 50)
    recs += _retried_turn("treat", "y", 1, 2.2, 50)
    recs += turn("treat", "y", 2, 2.1, 50)
    # other/x: one successful repeat of three; other/y: a range that reaches into the baseline's
    recs += turn("other", "x", 0, 9.0, 50)
    recs += turn("other", "x", 1, 9.0, 50, error=HTTP_500)
    recs += turn("other", "x", 2, 9.0, 50, error=HTTP_500)
    for r, t in enumerate([3.0, 4.1, 3.3]):
        recs += turn("other", "y", r, t, 50)
    return summarize(ledger(header(GUARD_ARMS, ["x", "y"]), engaged_cache(recs, GUARD_ARMS)))


def test_failed_calls_and_too_few_repeats_refuse_the_multiplier(guarded):
    cells = {(c["arm"], c["case"]): c for c in guarded["cells"]}
    tx = cells[("treat", "x")]
    # two successful repeats: the median of an even sample is the mean of the middle two, (5.0 + 7.0) / 2
    assert (tx["n"], tx["attempted"], tx["failed_turns"], tx["failed_calls"]) == (2, 3, 1, 1)
    assert (tx["median_s"], tx["min_s"], tx["max_s"]) == (6.0, 5.0, 7.0)
    m = {(x["arm"], x["scope"]): x for x in guarded["multipliers"] if x["vs"] == "base"}
    assert m[("treat", "case:x")]["value"] == pytest.approx(11.0 / 6.0)  # base median 11.0 (10, 11, 12)
    assert m[("treat", "case:x")]["citable"] is False
    assert m[("treat", "case:x")]["reason"] == "treat has 1 failed call(s)"
    ox = m[("other", "case:x")]
    assert ox["value"] == pytest.approx(11.0 / 9.0) and ox["citable"] is False
    assert ox["reason"] == "other has 1 successful repeat(s), fewer than 2; other has 2 failed call(s)"
    # a cell without a usable comparison blocks its arm's total, which says which cell
    assert m[("treat", "total")]["citable"] is False
    assert "cells without a usable comparison: x" in m[("treat", "total")]["reason"]


def test_a_retried_call_refuses_the_multiplier(guarded):
    """DESIGN.md: not citable with failed *or retried* calls (the retried turn's time holds the failed
    attempt and the retry); the failed attempt is counted as retried, not as failed, and not as a success."""
    cells = {(c["arm"], c["case"]): c for c in guarded["cells"]}
    ty = cells[("treat", "y")]
    assert (ty["n"], ty["failed_turns"], ty["failed_calls"], ty["retried_calls"], ty["calls"]) == (3, 0, 0, 1, 4)
    assert ty["median_s"] == 2.1  # 2.0 2.1 2.2
    m = {(x["arm"], x["scope"]): x for x in guarded["multipliers"] if x["vs"] == "base"}
    y = m[("treat", "case:y")]
    assert y["value"] == pytest.approx(2.0)  # 4.2 / 2.1
    assert y["citable"] is False and y["reason"] == "treat has 1 retried attempt(s): retries inside the measured time"
    assert "y" in m[("treat", "total")]["reason"].split("cells without a usable comparison: ")[1]
    assert guarded["run"]["failed_calls"] == 3  # treat/x 1 + other/x 2: the retried attempt is not one of them
    [retried] = warned(guarded, W.RETRIED)
    assert retried["text"].startswith("1 failed attempt(s) were retried")  # the count


def test_overlap_and_an_uncontrolled_comparison(guarded):
    cells = {(c["arm"], c["case"]): c for c in guarded["cells"]}
    # other/y [3.0, 4.1] reaches into base/y [4.0, 4.4]; treat/y [2.0, 2.2] does not
    assert cells[("other", "y")]["overlaps_baseline"] is True
    assert cells[("treat", "y")]["overlaps_baseline"] is False
    m = {(x["arm"], x["scope"]): x for x in guarded["multipliers"] if x["vs"] == "base"}
    oy = m[("other", "case:y")]
    assert oy["value"] == pytest.approx(4.2 / 3.3)  # other/y median 3.3 (3.0 3.3 4.1)
    assert (oy["controlled"], oy["knobs"]) == (False, ["drafter", "prefix_cache"])
    assert (m[("treat", "case:y")]["controlled"], m[("treat", "case:y")]["knobs"]) == (True, ["prefix_cache"])


# ------------------------------------------------------------------ regression and probes

# One cell of four turns, one call each: (output tokens, latency s) in repeat order.
POINTS = [(300, 6.8), (100, 3.0), (400, 9.0), (200, 5.2)]
PROBE_LATENCY = {16: [0.55, 0.50, 0.52], 128: [2.90, 2.76, 2.80]}  # medians 0.52 and 2.80
PROBE_TTFT = {16: [0.25, 0.20, 0.21], 128: [0.22, 0.20, 0.24]}


@pytest.fixture(scope="module")
def decomposed() -> dict:
    head = header({"base": {"prefix_cache": False}}, ["r"], repeats=4)
    head["config"]["probes"] = {"output_tokens": [16, 128], "repeats": 3, "case": "r", "tolerance": 0.05}
    recs = []
    for rep, (out, lat) in enumerate(POINTS):
        recs += _retried_turn("base", "r", rep, lat, out) if rep == 1 else turn("base", "r", rep, lat, out)
    for n, lats in PROBE_LATENCY.items():
        for i, lat in enumerate(lats):
            recs.append(call("base", "r", i, latency=lat, ttft=PROBE_TTFT[n][i], out=n, prompt=1000, kind="probe",
                             probe_tokens=n))
    return summarize(ledger(head, recs))


def test_regression_by_hand(decomposed):
    """latency = a + b × output by least squares over the cell's successful calls (the retried attempt,
    9.9 s for 40 tokens, is not one of them):
    x̄ = (100+200+300+400)/4 = 250, ȳ = (3.0+5.2+6.8+9.0)/4 = 6.0;
    Sxy = (−150)(−3.0) + (−50)(−0.8) + 50(0.8) + 150(3.0) = 980, Sxx = 2·150² + 2·50² = 50000;
    b = 980/50000 = 0.0196 s/token → decode_tps = 1/0.0196 = 51.0204; a = 6.0 − 0.0196·250 = 1.1 s;
    residuals −0.06, 0.18, −0.18, 0.06 → SS_res = 0.072; SS_tot = 9 + 0.64 + 0.64 + 9 = 19.28;
    R² = 1 − 0.072/19.28 = 0.996266."""
    d = next(x for x in decomposed["decomposition"] if x["case"] == "r")
    assert d["refused"] is None and d["points"] == 4 and d["method"] == "latency ~ output"
    assert d["decode_tps"] == pytest.approx(51.0204082, rel=1e-7)
    assert d["intercept_s"] == pytest.approx(1.1, rel=1e-9)
    assert d["r2"] == pytest.approx(0.9962655602, rel=1e-9)
    assert (d["output_min"], d["output_max"]) == (100, 400)


def test_probes_by_the_two_point_formula(decomposed):
    """Decode time f = latency − TTFT: at 16 tokens 0.30 0.30 0.31 (median 0.30), at 128 tokens 2.68 2.56 2.56
    (median 2.56); decode_tps = (c2 − c1)/(f2 − f1) = 112/2.26 = 49.557522 tok/s; prefill_s = t1 − (c1 − 1)/decode_tps
    (t1 spans the first token and the c1 − 1 decoded after it) = 0.52 − 15·2.26/112 = 0.52 − 0.302679 = 0.217321 s;
    context = 1000 + (16 + 128 − 1)/2 = 1071.5.
    The regression: per-token decode time d0 + d1·x (x = L + (m − 1)/2, weights m) fitted per call on the
    client's stream clock (m = completion − 1 tokens from L = prompt + 1 in latency − TTFT seconds) over the
    turns, the probe's own calls left out: (99, 101, 2.70) (199, 101, 4.68) (299, 101, 6.12) (399, 101, 8.10)
    (TTFT = 0.1 × latency).  The per-token time falls with context here, so the fit's d1 ≥ 0 holds it at 0 and
    d0 = Σw·y/Σw = Σs/Σm = 21.6/996.  Weighted residuals √m·(s/m − d0): 0.0556 0.0258 −0.0211 −0.0277, median
    0.0024, MAD 0.0268 → 5 × 1.4826 × MAD = 0.198: no outlier.  → 996/21.6 = 46.111 tok/s at every context,
    the probe's context 1,071.5 outside the turns' 101–499 (extrapolated).  The arm's rate model (the same
    form over the turns and the probes: no server timings) leaves the 99-token call out as an outlier (its
    residual 0.0644 from the median −0.0051 beyond 5 × 1.4826 × MAD 0.00796 = 0.0590) and gives
    d0 = 27.61/1323.  No server timings: two views, agreement = max/min − 1 = 49.5575/46.1111 − 1."""
    p = next(x for x in decomposed["probes"] if x["arm"] == "base")
    assert (p["n1"], p["n2"], p["repeats"]) == (16, 128, 3)
    assert (p["t1_s"], p["t2_s"]) == (0.52, 2.80)
    assert p["decode_tps"] == pytest.approx(49.5575221, rel=1e-7)
    assert p["prefill_s"] == pytest.approx(0.2173214, rel=1e-6)
    assert p["input_tokens"] == 1000 and p["context_tokens"] == pytest.approx(1071.5)
    reg = 996 / 21.6
    assert p["regression_decode_tps"] == pytest.approx(reg, rel=1e-9)
    assert p["regression_source"] == "per-call fit, client stream" and p["regression_extrapolated"] is True
    m = next(m for m in decomposed["rate_models"] if m["arm"] == "base")["decode"]  # turns and probes, no server clock
    assert (m["source"], m["points"], m["outliers"], m["d1_s_per_token_per_ctx"]) == ("client stream", 9, 1, 0.0)
    assert m["d0_s_per_token"] == pytest.approx(27.61 / 1323, rel=1e-9)
    assert p["server_decode_tps"] is None and p["views"] == ["probe", "regression"]
    assert p["agreement"] == pytest.approx(max(reg, 49.5575221) / min(reg, 49.5575221) - 1, rel=1e-6)
    assert p["agrees"] is (p["agreement"] <= 0.05)


# ------------------------------------------------------------------ load percentiles

# Ten measured, successful calls' end-to-end latencies (sent on schedule, so e2e = latency_s):
E2E = [0.9, 0.3, 0.5, 1.7, 0.4, 0.6, 2.5, 0.8, 0.7, 1.1]
# sorted: 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1.1 1.7 2.5 (n = 10); NumPy's linear rule: rank = p/100 × (n − 1)
#   p50: rank 4.5  → 0.7 + 0.5 × (0.8 − 0.7) = 0.75
#   p90: rank 8.1  → 1.7 + 0.1 × (2.5 − 1.7) = 1.78
#   p95: rank 8.55 → 1.7 + 0.55 × 0.8 = 2.14
#   p99: rank 8.91 → 1.7 + 0.91 × 0.8 = 2.428
#   mean: 9.5 / 10 = 0.95; max 2.5
HAND = {"p50": 0.75, "p90": 1.78, "p95": 2.14, "p99": 2.428, "mean": 0.95, "max": 2.5}


def _load_call(i: int, latency: float, **extra) -> dict:
    t = 1000.0 + i
    return {"kind": "load", "arm": "base", "stage": "s", "mode": "closed", "case": "r", "concurrency": 1,
            "load_run": "run-1", "t_send": t, "scheduled_t": t, "ttft_s": 0.1, "t_first_answer_s": 0.1,
            "latency_s": latency, "chunk_t": [0.1, latency], "completion_tokens": 10, "prompt_tokens": 100,
            "cached_tokens": 0, "timings": None, "error": None, "warmup": False, **extra}


def test_load_percentiles_by_hand():
    recs = [_load_call(0, 5.0, warmup=True)]  # a warm-up call: not measured
    recs += [_load_call(i + 1, x) for i, x in enumerate(E2E)]
    recs.append(_load_call(11, 7.0, error=HTTP_500, retried=True))  # an attempt that was retried: left out
    recs.append(_load_call(12, 6.0, error=HTTP_500))  # a measured call that failed after 6.0 s: counted at that time
    row = next(r for r in load_summary(ledger(header({"base": {}}, ["r"]), recs)) if r["stage"] == "s")
    assert (row["requests"], row["ok"], row["failed"], row["warmup_requests"],
            row["retried_attempts"]) == (11, 10, 1, 1, 1)
    assert row["errors"] == {"http_status": 1}
    e2e_ok = row["e2e_ok"]  # the successful calls alone
    assert e2e_ok["n"] == 10
    for k, v in HAND.items():
        assert e2e_ok[k] == pytest.approx(v, rel=1e-12), k
    # every measured call, the failed one at its 6.0 s: sorted 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1.1 1.7 2.5 6.0 (n = 11),
    # rank = p/100 × 10: p50 rank 5 → 0.8; p90 rank 9 → 2.5; p95 rank 9.5 → 2.5 + 0.5 × 3.5 = 4.25; p99 rank 9.9 →
    # 2.5 + 0.9 × 3.5 = 5.65; mean (9.5 + 6.0) / 11 = 1.409091; max 6.0
    e2e = row["e2e"]
    assert e2e["n"] == 11
    for k, v in {"p50": 0.8, "p90": 2.5, "p95": 4.25, "p99": 5.65, "mean": 15.5 / 11, "max": 6.0}.items():
        assert e2e[k] == pytest.approx(v, rel=1e-12), k


def test_stats_percentile_and_median_by_hand():
    for p, v in ((50, 0.75), (90, 1.78), (95, 2.14), (99, 2.428)):
        assert percentile(E2E, p) == pytest.approx(v, rel=1e-12), p
    assert percentile(E2E, 0) == 0.3 and percentile(E2E, 100) == 2.5
    assert percentile([4.0, 1.0, 3.0], 25) == pytest.approx(2.0)  # sorted 1 3 4; rank 0.5 → 1 + 0.5 × 2
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5  # (2 + 3) / 2
