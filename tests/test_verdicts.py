"""Issue 11: one-knob comparisons, the guard over everything derived from a comparison, Amdahl's projection,
and engagement from the server's own counters.  Hand-made ledgers; every expected number is worked out here."""

from __future__ import annotations

import pytest
from ledgers import call, header, ledger, probes_for, timed, turn, warned

from leverbench.analysis.base.knobs import arm_knobs, comparisons, suggestion
from leverbench.analysis.summary import summarize
from leverbench.schema.warning_kinds import WarningKind as W

THREE = {"base": {"prefix_cache": False, "drafter": "none"},
         "control": {"prefix_cache": True, "drafter": "none"},
         "treatment": {"prefix_cache": True, "drafter": "ngram"}}


def _three_arm_ledger(times: dict[str, tuple[float, ...]], outs: dict[str, int] | None = None, **exp) -> tuple:
    outs = outs or {}
    head = header(THREE, ["c"], **exp)
    for a, role in (("control", "control"), ("treatment", "treatment")):
        head["arms"][a]["role"] = role
    recs = []
    for r in range(len(times["base"])):
        for arm in THREE:
            recs += turn(arm, "c", r, times[arm][r], outs.get(arm, 100))
    for rec in recs:  # the cache arms' calls found half their prompt cached: the lever engaged
        if rec["kind"] == "call" and THREE[rec["arm"]]["prefix_cache"]:
            rec["cached_tokens"] = rec["prompt_tokens"] // 2
    return head, recs


def _m(s, arm, vs, scope="total"):
    return next(m for m in s["multipliers"] if m["arm"] == arm and m["vs"] == vs and m["scope"] == scope)


def test_treatment_is_compared_with_control_not_only_baseline():
    head, recs = _three_arm_ledger({"base": (10.0, 10.0, 10.0), "control": (8.0, 8.0, 8.0),
                                    "treatment": (4.0, 4.0, 4.0)})
    s = summarize(ledger(head, recs))
    drafter = _m(s, "treatment", "control")
    assert drafter["value"] == pytest.approx(8.0 / 4.0) and drafter["controlled"] is True
    assert drafter["knobs"] == ["drafter"] and drafter["lever"] == "drafter" and drafter["citable"] is True
    # the baseline comparisons stay: control vs base measures the cache; treatment vs base mixes two knobs
    assert _m(s, "control", "base")["value"] == pytest.approx(10.0 / 8.0)
    assert _m(s, "control", "base")["lever"] == "prefix_cache"
    both = _m(s, "treatment", "base")
    assert both["controlled"] is False and both["knobs"] == ["drafter", "prefix_cache"] and both["lever"] is None
    # the headline names each lever's controlled pair
    lev = {l["lever"]: l for l in s["levers"]}
    assert (lev["drafter"]["arm"], lev["drafter"]["vs"]) == ("treatment", "control")
    assert lev["drafter"]["multiplier"] == pytest.approx(2.0)
    assert (lev["prefix_cache"]["arm"], lev["prefix_cache"]["vs"]) == ("control", "base")


def test_an_undeclared_engine_version_makes_the_comparison_uncontrolled():
    head, recs = _three_arm_ledger({"base": (10.0,) * 3, "control": (8.0,) * 3, "treatment": (4.0,) * 3})
    head["arms"]["base"]["discovered"] = {"knobs": {"engine": "vllm", "engine_version": "0.31.0"}}
    for a in ("control", "treatment"):
        head["arms"][a]["discovered"] = {"knobs": {"engine": "vllm", "engine_version": "0.32.0"}}
    s = summarize(ledger(head, recs))
    cache = _m(s, "control", "base")
    assert cache["controlled"] is False and cache["knobs"] == ["engine_version", "prefix_cache"]
    [w] = warned(s, W.UNCONTROLLED, "control")
    assert "differ in 2 knobs (engine_version, prefix_cache)" in w["text"]  # the knobs named
    assert _m(s, "treatment", "control")["controlled"] is True  # same version on both
    lev = {l["lever"]: l for l in s["levers"]}
    assert lev["prefix_cache"]["arm"] is None and lev["prefix_cache"]["citable"] is False
    assert "an arm like control with engine_version = '0.31.0' would differ from base in prefix_cache only" \
        in lev["prefix_cache"]["reason"]
    conditions = next(t for t in __import__("leverbench.report.tables", fromlist=["all_tables"]).all_tables(s)
                      if t.key == "conditions")
    assert "0.32.0 *" in " ".join(" ".join(r) for r in conditions.rows)  # discovered, not declared


def test_declared_knob_contradicted_by_the_endpoint_is_a_warning():
    knobs, contradictions = arm_knobs({"conditions": {"drafter": "none", "gpu_hour_usd": 2.0},
                                       "discovered": {"knobs": {"drafter": True, "engine": "llama.cpp"}}})
    assert knobs == {"drafter": "none", "engine": "llama.cpp"}  # declared wins; price is not a knob
    assert contradictions == {"drafter": "declared drafter = 'none', but the endpoint says on"}


def test_direction_of_a_pair_where_both_set_the_knob():
    knobs = {"a": {"drafter": "K=3"}, "b": {"drafter": "K=7"}, "base": {"drafter": "none"}}
    comps = comparisons(["base", "a", "b"], "base", knobs, {"base": "baseline", "a": "control", "b": "treatment"})
    assert [(c.arm, c.vs, c.knobs) for c in comps] == [("a", "base", ("drafter",)), ("b", "base", ("drafter",)),
                                                        ("b", "a", ("drafter",))]
    assert suggestion("x", ["a"], {"a": {}}) == "no two arms differ in x"


def _probes(head, arms):
    """Probes at 32 and 256 tokens on every arm (1000 prompt tokens at 1000 tok/s, decode 50 tok/s), so the
    scenario projection has rates to work with."""
    return probes_for(head, arms)


def _retried_turn(arm, r, t, out):
    """A turn whose one call failed once and succeeded on the retry: both attempts in the ledger."""
    first = call(arm, "c", r, latency=2.0, out=None, error={"class": "http_status", "message": "HTTP 500"},
                 retried=True, attempt=0)
    ok = call(arm, "c", r, latency=t - 2.0, out=out, attempt=1)
    recs = turn(arm, "c", r, t, out, calls=[first, ok])
    recs[-1]["error"] = None
    recs[-1]["failed_calls"] = 0
    recs[-1]["retried_s"] = 2.0
    return recs


def test_retried_cell_is_not_citable_in_multipliers_cost_and_projection():
    arms = {"base": {"prefix_cache": False, "gpu_hour_usd": 5.5}, "cached": {"prefix_cache": True, "gpu_hour_usd": 5.5}}
    recs = []
    for r in range(3):
        recs += turn("base", "c", r, 10.0, 100)
        recs += turn("cached", "c", r, 5.0, 100) if r == 0 else _retried_turn("cached", r, 5.0 + r, 100)
    head = header(arms, ["c"])
    s = summarize(ledger(head, recs + _probes(head, arms)), scenario=(100, 100))
    cell = next(c for c in s["cells"] if c["arm"] == "cached")
    assert cell["n"] == 3 and cell["retried_calls"] == 2 and cell["failed_calls"] == 0
    # turn times 5, 6, 7 s: the full wall clock of the retried turns is kept (median 6)
    assert cell["median_s"] == 6.0 and cell["max_s"] == 7.0
    # without the 2 s of each retried attempt: 5, 4, 5 → median 5
    assert cell["median_without_retries_s"] == 5.0
    m = _m(s, "cached", "base", "case:c")
    assert m["citable"] is False and "retries inside the measured time" in m["reason"]
    assert _m(s, "cached", "base")["citable"] is False
    cost = {c["arm"]: c for c in s["cost"]}
    assert cost["cached"]["citable"] is False and "retries inside the measured time" in cost["cached"]["reason"]
    assert cost["base"]["citable"] is True
    lever = s["projection"]["levers"][0]
    assert lever["citable"] is False and "retries inside the measured time" in lever["reason"]


def _sentinel(arm, position, repeat, t, tps):
    return call(arm, "(sentinel)", repeat, kind="sentinel", latency=0.1 + 16 / tps, ttft=0.1, out=17,
                position=position, probe_tokens=16, t_send=t)


def test_an_arm_that_drifted_alone_is_not_citable_anywhere():
    """The cached arm's sentinels slow 40 % over the run while the base's hold: the ratio of their speeds
    drifted, so their comparison, its cost and its lever are refused."""
    arms = {"base": {"prefix_cache": False, "gpus": 1}, "cached": {"prefix_cache": True, "gpus": 1}}
    recs = []
    for r in range(3):
        recs += [_sentinel("base", "start", r, 1000.0 + 10 * r, 100.0),
                 _sentinel("cached", "start", r, 1000.0 + 10 * r, 100.0 * (1 - 0.4 * r / 3))]
        recs += turn("base", "c", r, 10.0, 100) + turn("cached", "c", r, 5.0, 100)
    recs += [_sentinel("base", "end", 0, 1030.0, 100.0), _sentinel("cached", "end", 0, 1030.0, 60.0)]  # −40 %
    head = header(arms, ["c"])
    s = summarize(ledger(head, recs + _probes(head, arms)), scenario=(100, 100))
    assert {d["arm"]: d["drifted"] for d in s["drift"]} == {"base": False, "cached": True}
    for m in (x for x in s["multipliers"] if x["arm"] == "cached"):
        assert m["citable"] is False and "cached and base drifted differently" in m["reason"]
    cost = {c["arm"]: c for c in s["cost"]}
    assert cost["cached"]["citable"] is False and "drifted" in cost["cached"]["reason"]
    assert next(l for l in s["levers"] if l["lever"] == "prefix_cache")["citable"] is False


def test_refused_multiplier_refuses_cost_and_projection():
    arms = {"base": {"prefix_cache": False, "gpus": 1}, "cached": {"prefix_cache": True, "gpus": 1}}
    recs = []
    for r in range(3):  # 3× the output; the calls timed as the probes are (see _probes)
        recs += turn("base", "c", r, 10.0, 100, calls=[_timed("base", "c", r, prompt=1000, cached=0, out=100,
                                                               prefill_tps=1000.0, decode_tps=50.0)])
        recs += turn("cached", "c", r, 5.0, 300, calls=[_timed("cached", "c", r, prompt=1000, cached=990, out=300,
                                                                prefill_tps=1000.0, decode_tps=50.0)])
    head = header(arms, ["c"])
    s = summarize(ledger(head, recs + _probes(head, arms)), scenario=(20_000, 100))
    m = _m(s, "cached", "base")
    assert m["reason"] == "output volume spread 200.0% > 5%"
    # at equal work the correction (200 tokens at 50 tok/s, 4 s of its 5 s) is far beyond a quarter: refused too
    assert m["equal_work"]["citable"] is False and "more than 25%" in m["equal_work"]["reason"]
    cost = {c["arm"]: c for c in s["cost"]}
    assert cost["cached"]["citable"] is False and cost["cached"]["reason"] == "output volume spread 200.0% > 5%"
    assert cost["cached"]["gpu_hours_returned_per_1000_turns"] == pytest.approx((10.0 - 5.0) * 1000 / 3600)
    lever = s["projection"]["levers"][0]
    assert (lever["citable"] is False
            and "NOT citable: output volume spread 200.0% > 5%" in s["projection"]["recommendation"])
    assert next(l for l in s["levers"] if l["lever"] == "prefix_cache")["citable"] is False


def test_a_multiplier_refused_for_volume_alone_is_cited_at_equal_work():
    """50 % more output on the cached arm, its rate model cross-checked by the probes: the correction (50 tokens
    at 50 tok/s, 1 s of its 5 s) is small, so the lever and its projection are cited at equal work."""
    arms = {"base": {"prefix_cache": False, "gpus": 1}, "cached": {"prefix_cache": True, "gpus": 1}}
    recs = []
    for r in range(3):
        recs += turn("base", "c", r, 10.0, 100, calls=[_timed("base", "c", r, prompt=1000, cached=0, out=100,
                                                               prefill_tps=1000.0, decode_tps=50.0)])
        recs += turn("cached", "c", r, 5.0, 150, calls=[_timed("cached", "c", r, prompt=1000, cached=990, out=150,
                                                                prefill_tps=1000.0, decode_tps=50.0)])
    head = header(arms, ["c"])
    s = summarize(ledger(head, recs + _probes(head, arms)), scenario=(20_000, 100))
    m = _m(s, "cached", "base")
    assert not m["citable"] and m["equal_work"]["citable"]
    assert m["equal_work"]["value"] == pytest.approx(10.0 / (5.0 - 50 / 50.0), rel=0.01)  # 2.5x by hand
    lever = next(l for l in s["levers"] if l["lever"] == "prefix_cache")
    assert lever["citable"] and lever["measure"] == "equal work"
    assert s["projection"]["levers"][0]["citable"] and s["projection"]["levers"][0]["measure"] == "equal work"


_timed = timed


def test_projection_is_amdahls_a_cache_moves_prefill_only():
    # Both arms prefill at 1000 tok/s; the cache arm happens to decode slower (50 vs 40 tok/s: noise, another
    # phase). The cache's return must be the prefill it removes, with decode held at the reference arm's value.
    arms = {"base": {"prefix_cache": False}, "cached": {"prefix_cache": True}}
    recs = []
    for r in range(3):
        for arm, dt in (("base", 50.0), ("cached", 40.0)):
            for case, prompt in (("short", 1000), ("long", 3000)):
                cached = prompt - 10 if arm == "cached" and r > 0 else 0
                c = _timed(arm, case, r, prompt=prompt, cached=cached, out=100 + 50 * r, prefill_tps=1000.0,
                           decode_tps=dt)
                recs += turn(arm, case, r, c["latency_s"], c["completion_tokens"], calls=[c])
    for n in (32, 256):
        for arm, dt in (("base", 50.0), ("cached", 40.0)):
            recs.append(_timed(arm, "long", 0, kind="probe", prompt=3000, cached=2990 if arm == "cached" else 0, out=n,
                               prefill_tps=1000.0, decode_tps=dt, probe_tokens=n))
    head = header(arms, ["short", "long"])
    head["config"]["probes"] = {"output_tokens": [32, 256], "repeats": 1, "case": "long", "tolerance": 0.05}
    s = summarize(ledger(head, recs), scenario=(20_000, 1_000))
    lever = s["projection"]["levers"][0]
    # base: prefill 20,000 / 1000 = 20 s, decode 1000 / 50 = 20 s; cached: prefill 20,000 × (10/3000) / 1000 = 0.0667 s
    assert lever["phase"] == "prefill"
    assert lever["saved_s"] == pytest.approx(20.0 - 20_000 * 10 / 3000 / 1000, rel=1e-6)
    # total without = 40 s; with = 40 − saved (decode stays at the base's 20 s, not the cached arm's 25 s)
    assert lever["speedup"] == pytest.approx(40.0 / (40.0 - lever["saved_s"]), rel=1e-6)
    p = {a["arm"]: a for a in s["projection"]["arms"]}
    assert p["cached"]["decode_s"] == pytest.approx(25.0)  # its own decode, still reported


def _metrics(arm, when, t, **samples):
    return {"kind": "metrics", "arm": arm, "when": when, "t": t, "samples": samples}


def _vllm_ledger(*, shared_endpoint: bool = False):
    """A vLLM endpoint with default flags: usage carries no cached_tokens and there are no timings."""
    arms = {"nocache": {"prefix_cache": False}, "cache": {"prefix_cache": True}}
    head = header(arms, ["doc"])
    for a in arms:
        head["arms"][a]["endpoint"] = "http://gpu:8000" if shared_endpoint else f"http://{a}:8000"
    recs = [_metrics("nocache", "before", 1.0), _metrics("cache", "before", 1.0)]
    for r in range(3):
        for arm in arms:
            ttft = 2.0 if arm == "nocache" or r == 0 else 0.05
            c = call(arm, "doc", r, latency=ttft + 2.0, ttft=ttft, out=100, prompt=2000, cached=None)
            recs += turn(arm, "doc", r, c["latency_s"], 100, calls=[c])
    for n in (32, 256):  # probes (cached on the cache arm: TTFT 0.05 s) give the decode rate, 50 tok/s: the first
        for arm in arms:  # token at TTFT, the n − 1 after it 20 ms apart
            ttft = 2.0 if arm == "nocache" else 0.05
            recs.append(call(arm, "doc", 0, kind="probe", probe_tokens=n, out=n, prompt=2000, cached=None, ttft=ttft,
                             latency=ttft + (n - 1) / 50.0))
    head["config"]["probes"] = {"output_tokens": [32, 256], "repeats": 1, "case": "doc", "tolerance": 0.05}
    # the cache arm's counters: 6000 prompt tokens queried, 3 × 1 uncached + 2 × 1984 hits... in tokens:
    # hits 3968 (two calls of 1984 cached tokens), queries 6000; prefill seconds 2.0 + 0.05 + 0.05 over 3 requests
    recs += [_metrics("nocache", "after", 100.0, **{
                 "vllm:prompt_tokens_total": 6000.0, "vllm:prefix_cache_queries_total": 0.0,
                 "vllm:request_prefill_time_seconds_sum": 6.0, "vllm:request_prefill_time_seconds_count": 3.0}),
             _metrics("cache", "after", 100.0, **{
                 "vllm:prompt_tokens_total": 6000.0, "vllm:prefix_cache_queries_total": 6000.0,
                 "vllm:prefix_cache_hits_total": 3968.0, "vllm:prefix_cache_hits_total{engine=1}": "NaN",
                 "vllm:request_prefill_time_seconds_sum": 2.1, "vllm:request_prefill_time_seconds_count": 3.0,
                 "vllm:request_queue_time_seconds_sum": 0.03, "vllm:request_queue_time_seconds_count": 3.0})]
    return head, recs


def test_cache_engagement_and_prefill_rate_come_from_metrics_when_usage_lacks_them():
    head, recs = _vllm_ledger()
    s = summarize(ledger(head, recs), scenario=(2000, 100))
    eng = {e["arm"]: e for e in s["engaged"]}
    assert eng["cache"]["prefix_cache"] is True
    assert eng["cache"]["cached_share"] == pytest.approx(3968 / 6000)
    assert eng["cache"]["cached_share_source"].startswith("server metrics")
    rates = {r["arm"]: r for r in s["rates"]}
    # uncached tokens per request (6000 − 3968) / 3 = 677.3 in 2.1 / 3 = 0.7 s → 967.6 tok/s, not 2000 / 0.05 = 40,000
    assert rates["cache"]["prefill_tps"] == pytest.approx((6000 - 3968) / 3 / 0.7, rel=1e-6)
    assert rates["cache"]["prefill_source"].startswith("server metrics")
    assert rates["nocache"]["prefill_tps"] == pytest.approx(1000.0)  # no cache, no counts needed: 2000 tokens in 2 s
    lever = s["projection"]["levers"][0]
    assert lever["lever"] == "prefix_cache" and lever["credited"] is True
    queue = {a["arm"]: a for a in s["projection"]["arms"]}["cache"]["queue_s"]
    assert queue == pytest.approx(0.01)  # the server's own queue seconds per request enter the projection
    assert not warned(s, W.NOT_ENGAGED)


def test_metrics_of_a_shared_endpoint_in_interleaved_order_are_mixed_and_not_used():
    head, recs = _vllm_ledger(shared_endpoint=True)
    s = summarize(ledger(head, recs), scenario=(2000, 100))
    rows = {r["arm"]: r for r in s["server_metrics"]}
    assert rows["cache"]["attribution"] == "mixed" and rows["cache"]["mixed_with"] == ["nocache"]
    eng = {e["arm"]: e for e in s["engaged"]}
    # nothing of its own reports cached tokens: engagement unknown (not "not engaged"), the lever still credited
    assert eng["cache"]["prefix_cache"] is None and eng["cache"]["cached_share"] is None
    assert warned(s, W.ENGAGEMENT_UNKNOWN, "cache")
    rates = {r["arm"]: r for r in s["rates"]}
    assert rates["cache"]["prefill_tps"] is None and "cannot be told apart" in rates["cache"]["refused"]
    [mixed] = warned(s, W.MIXED_METRICS, "cache")
    assert "mixed with nocache" in mixed["text"]  # names the other arm


def test_sglang_samples_with_extra_labels_are_summed():
    from leverbench.analysis.base.metrics import arm_metrics
    before = {"sglang:queue_time_seconds_sum{tp_rank=0}": 1.0, "sglang:queue_time_seconds_sum{tp_rank=1}": 1.0,
              "sglang:queue_time_seconds_count{tp_rank=0}": 10.0, "sglang:queue_time_seconds_count{tp_rank=1}": 10.0}
    after = {"sglang:queue_time_seconds_sum{tp_rank=0}": 3.0, "sglang:queue_time_seconds_sum{tp_rank=1}": 5.0,
             "sglang:queue_time_seconds_count{tp_rank=0}": 20.0, "sglang:queue_time_seconds_count{tp_rank=1}": 20.0,
             "sglang:cache_hit_rate{tp_rank=0}": 0.5, "sglang:cache_hit_rate{tp_rank=1}": 0.7}
    m = arm_metrics(before, after)
    assert m["queue_s_per_request"] == pytest.approx((2.0 + 4.0) / (10.0 + 10.0))
    assert m["sglang_cache_hit_rate"] == pytest.approx(0.6)


# ------------------------------------------------------------------ review findings: each a test


def test_the_results_tables_vs_baseline_row_is_the_baseline_comparison():
    from leverbench.report.tables import result_table
    head, recs = _three_arm_ledger({"base": (10.0,) * 3, "control": (8.0,) * 3, "treatment": (4.0,) * 3})
    s = summarize(ledger(head, recs))
    row = next(r for r in result_table(s).rows if r[0] == "vs base")
    assert row[1:] == ["1.00x (baseline)", "1.25x", "2.50x"]  # 10/8 and 10/4, not treatment vs control's 2.00x


def test_off_values_are_one_value_and_absent_is_off():
    from leverbench.analysis.base.knobs import differing
    assert differing({"drafter": "none"}, {}) == []
    assert differing({"drafter": "none", "prefix_cache": False}, {"drafter": False, "prefix_cache": "off"}) == []
    assert differing({"drafter": "none"}, {"drafter": "ngram"}) == ["drafter"]
    assert differing({"engine_version": "1"}, {}) == ["engine_version"]


def test_a_request_switch_is_a_knob_and_two_arms_differing_in_nothing_are_a_replicate():
    """llama.cpp's cache is switched off per request (cache_prompt = false): that is the prefix_cache knob."""
    arms = {"nocache": {}, "cache": {}, "twin": {}}
    head = header(arms, ["c"])
    head["config"]["arms"][0]["request"] = {"cache_prompt": False}
    for a in arms:
        head["arms"][a]["discovered"] = {"knobs": {"engine": "llama.cpp", "prefix_cache": True}}
    recs = []
    for r in range(2):
        for a, t in (("nocache", 10.0), ("cache", 5.0), ("twin", 5.1)):
            recs += turn(a, "c", r, t, 100)
    for rec in recs:
        if rec["kind"] == "call" and rec["arm"] != "nocache":
            rec["cached_tokens"] = 90
    s = summarize(ledger(head, recs))
    cache = _m(s, "cache", "nocache")
    assert cache["knobs"] == ["prefix_cache"] and cache["lever"] == "prefix_cache" and cache["controlled"] is True
    twin = _m(s, "twin", "nocache")
    assert twin["lever"] == "prefix_cache"
    replicate = next(m for m in s["multipliers"] if {m["arm"], m["vs"]} == {"cache", "twin"}) \
        if any({m["arm"], m["vs"]} == {"cache", "twin"} for m in s["multipliers"]) else None
    assert replicate is None  # not a lever: no comparison is made for it beyond the baseline's
    assert not any(m["controlled"] and not m["knobs"] for m in s["multipliers"])
    assert {(m["arm"], m["vs"]) for m in s["multipliers"] if m["scope"] == "total"} == {("cache", "nocache"),
                                                                                        ("twin", "nocache")}


def test_a_baseline_with_the_lever_on_is_measured_the_other_way_round():
    """prod has the cache; the experiment's other arm turns it off: the lever's multiplier is prod vs nocache."""
    arms = {"prod": {"prefix_cache": True}, "nocache": {"prefix_cache": False}}
    recs = []
    for r in range(3):
        recs += turn("prod", "c", r, 4.0, 100) + turn("nocache", "c", r, 8.0, 100)
    for rec in recs:
        if rec["kind"] == "call" and rec["arm"] == "prod":
            rec["cached_tokens"] = 90
    s = summarize(ledger(header(arms, ["c"]), recs))
    base_row = _m(s, "nocache", "prod")  # the baseline comparison stays, in no lever's direction
    assert base_row["value"] == pytest.approx(0.5) and base_row["lever"] is None
    lever = _m(s, "prod", "nocache")
    assert lever["value"] == pytest.approx(2.0) and lever["lever"] == "prefix_cache"
    (row,) = [l for l in s["levers"] if l["lever"] == "prefix_cache"]
    assert (row["arm"], row["vs"], row["multiplier"], row["engaged"]) == ("prod", "nocache", pytest.approx(2.0), True)


def test_a_contradicted_knob_or_a_reference_that_used_the_lever_refuses_it():
    arms = {"base": {"prefix_cache": False}, "cache": {"prefix_cache": True}}
    recs = []
    for r in range(3):
        recs += turn("base", "c", r, 5.0, 100) + turn("cache", "c", r, 5.0, 100)
    for rec in recs:
        if rec["kind"] == "call":
            rec["cached_tokens"] = 80  # both arms served 80 % of their prompts from a cache
    head = header(arms, ["c"])
    head["arms"]["base"]["discovered"] = {"knobs": {"prefix_cache": True}}  # and the base's server says it caches
    s = summarize(ledger(head, recs))
    m = _m(s, "cache", "base")
    assert m["citable"] is False
    assert "base: declared prefix_cache = False, but the endpoint says on" in m["reason"]
    assert "the reference base used prefix_cache too" in m["reason"]


def _window(arm, when, t, hits, queries):
    return _metrics(arm, when, t, **{"vllm:prefix_cache_hits_total": hits, "vllm:prefix_cache_queries_total": queries})


def test_metrics_windows_of_a_resumed_run_add_up():
    """Each before → after pair is a window (a resumed run adds one; an engine restart resets counters, which a
    window never spans); the arm's figures are the windows' deltas summed."""
    from leverbench.analysis.base.metrics import server_metrics
    recs = [_window("a", "before", 1, 0, 0), _window("a", "after", 2, 60, 100),  # first run: 60 of 100
            _window("a", "before", 3, 5, 10), _window("a", "after", 4, 25, 110),  # resumed, restarted: 20 of 100
            _window("a", "before", 5, 25, 110), _window("a", "after", 6, 25, 110)]  # resumed with nothing left
    (row,) = server_metrics(recs, ["a"], {})
    assert row["prefix_cache_hit_share"] == pytest.approx((60 + 20) / (100 + 100)) and row["windows"] == 3


def test_one_server_under_two_spellings_is_one_endpoint():
    from leverbench.analysis.base.metrics import server_metrics
    head = {"arms": {"a": {"endpoint": "http://localhost:8000"}, "b": {"endpoint": "http://127.0.0.1:8000/"}},
            "config": {"arms": [{"name": "a"}, {"name": "b"}]}}
    recs = [_window("a", "before", 1, 0, 0), _window("b", "before", 1, 0, 0),
            _window("a", "after", 2, 5, 10), _window("b", "after", 2, 5, 10)]
    assert {r["attribution"] for r in server_metrics(recs, ["a", "b"], head)} == {"mixed"}


def test_a_drafter_lever_is_projected_when_prefill_cannot_be():
    """Amdahl's drafter needs the pair's decode rates only: an arm whose prefill is refused keeps its decode."""
    head, recs = _vllm_ledger()
    head["arms"]["cache"]["conditions"]["drafter"] = "ngram"
    head["arms"]["nocache"]["conditions"]["prefix_cache"] = True  # now the pair differs in the drafter only
    recs = [r for r in recs if r["kind"] != "metrics"]  # no counters: the cache arm's prefill cannot be projected
    for r in recs:  # the drafter decodes at 100 tok/s, the other arm at 50 (each token after the first)
        if r["kind"] in ("call", "probe"):
            r["latency_s"] = r["ttft_s"] + (r["completion_tokens"] - 1) / (100.0 if r["arm"] == "cache" else 50.0)
    s = summarize(ledger(head, recs), scenario=(2000, 1000))
    p = {a["arm"]: a for a in s["projection"]["arms"]}
    assert p["cache"]["prefill_s"] is None and "cannot be told apart" in p["cache"]["prefill_refused"]
    assert p["cache"]["decode_s"] == pytest.approx(10.0)
    (lever,) = s["projection"]["levers"]
    assert lever["lever"] == "drafter" and lever["saved_s"] == pytest.approx(1000 / 50 - 1000 / 100)


def test_the_phase_of_a_lever_is_known_by_its_name_not_guessed():
    from leverbench.analysis.base.knobs import lever_phase
    assert [lever_phase(k) for k in ("prefix_cache", "drafter", "request.top_k", "gpu_spec", "engine_version")] == \
        ["prefill", "decode", "both", "both", "both"]
