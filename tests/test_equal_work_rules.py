"""Issue 22's equal work and drift, the corners a review found: a tool call one arm made more, corrections larger
than the turn, a total whose gain hides in one over-corrected case, an arm without a cache, the verdict of an
adaptive run at equal work, and knobs that are no serving condition.  Calls are timed exactly (1000 prompt
tokens/s, 50 decode tokens/s) so that each arm's rate model is the truth and passes its cross-check."""

from __future__ import annotations

import pytest
from ledgers import call, header, ledger, probes_for, timed, turn, warned

from leverbench.analysis.base.knobs import UNKNOWN, fact_knobs, is_on
from leverbench.analysis.summary import summarize
from leverbench.runner.discover import knobs as discovered_knobs
from leverbench.schema.warning_kinds import WarningKind as W

ARMS = {"base": {"hardware": "old"}, "fast": {"hardware": "new"}}
PREFILL, DECODE = 1000.0, 50.0


def _call(arm, case, r, *, out, prompt=1000, cached=0, step=0):
    return timed(arm, case, r, prompt=prompt, cached=cached, out=out, prefill_tps=PREFILL, decode_tps=DECODE,
                 step=step)


def _summary(recs, arms=ARMS, cases=("c",), **exp):
    head = header(arms, list(cases), **exp)
    return summarize(ledger(head, recs + probes_for(head, arms, case=cases[0]))), head


def _total(s):
    return next(m for m in s["multipliers"] if m["arm"] == "fast" and m["scope"] == "total")


def test_an_extra_tool_call_s_scripted_latency_is_corrected_too():
    """The arm makes one more tool call (its model time and 1.5 s of scripted tool latency): at equal work both
    go.  Review: only the call's model time went, and a lever 1.19x faster read 0.65x, citable."""
    recs = []
    for r in range(3):
        recs += turn("base", "c", r, 0.0, 0, calls=[_call("base", "c", r, out=100)])
        extra = [_call("fast", "c", r, out=100), _call("fast", "c", r, out=20, prompt=1100, step=1)]
        t = turn("fast", "c", r, 0.0, 0, calls=extra)
        recs += t
    for rec in recs:
        if rec["kind"] == "turn":
            calls = [c for c in recs if c.get("turn_id") == rec["turn_id"] and c["kind"] == "call"]
            rec["tool_s"] = 1.5 if rec["arm"] == "fast" else 0.0
            rec["turn_s"] = sum(c["latency_s"] for c in calls) + rec["tool_s"]
            rec["output_tokens"] = sum(c["completion_tokens"] for c in calls)
    s, _ = _summary(recs)
    ew = _total(s)["equal_work"]
    # by hand: base 1.0 + 99/50 = 2.98 s; fast at base's work: its first call only, the same 2.98 s → 1.00x
    assert ew["value"] == pytest.approx(1.0, rel=1e-6)


def test_a_correction_larger_than_the_turn_is_refused_and_the_verdict_kept_off_it():
    """The arm's rate model says its extra tokens cost more than its whole turn took: no equal-work figure to
    cite, and the verdict is not taken on non-positive times (review: summarize raised)."""
    recs = []
    for r in range(3):
        recs += turn("base", "c", r, 1.0 + 99 / 50, 100, calls=[_call("base", "c", r, out=100)])
        c = _call("fast", "c", r, out=400)
        c["latency_s"] = 0.4  # far faster than its own rate model says (a drafter's lucky answer)
        recs += turn("fast", "c", r, 0.4, 400, calls=[c])
    s, _ = _summary(recs)
    ew = _total(s)["equal_work"]
    assert not ew["citable"] and ("exceeds the turn's own time" in ew["reason"] or "more than 25%" in ew["reason"])
    [v] = s["verdicts"]
    assert v["measure"] == "measured" and v["verdict"] != "pays"


def test_a_total_is_not_cited_at_equal_work_when_one_case_is_corrected_beyond_the_limit():
    recs = []
    for r in range(3):
        recs += turn("base", "a", r, 0.0, 0, calls=[_call("base", "a", r, out=200)])
        recs += turn("fast", "a", r, 0.0, 0, calls=[_call("fast", "a", r, out=200)])
        recs += turn("base", "b", r, 0.0, 0, calls=[_call("base", "b", r, out=20, prompt=100)])
        recs += turn("fast", "b", r, 0.0, 0, calls=[_call("fast", "b", r, out=60, prompt=100)])  # 3× the tokens
    for rec in recs:
        if rec["kind"] == "turn":
            calls = [c for c in recs if c.get("turn_id") == rec["turn_id"] and c["kind"] == "call"]
            rec["turn_s"] = sum(c["latency_s"] for c in calls)
            rec["output_tokens"] = sum(c["completion_tokens"] for c in calls)
    s, _ = _summary(recs, cases=("a", "b"))
    total = _total(s)
    assert total["equal_work"] is not None and total["equal_work"]["correction_share"] < 0.25  # small overall …
    assert not total["equal_work"]["citable"] and "in b" in total["equal_work"]["reason"]  # … but not in case b
    assert not next(x for x in s["levers"] if x["arm"] == "fast")["citable"]


def test_an_arm_without_a_cache_is_charged_the_reference_s_longer_prompt():
    """Step 1's prompt holds step 0's answer: 50 tokens longer on the reference.  Without a cache the arm would
    have prefilled them too (review: they were counted as cached)."""
    recs = []
    for r in range(3):
        recs += turn("base", "c", r, 0.0, 0, calls=[_call("base", "c", r, out=100),
                                                      _call("base", "c", r, out=20, prompt=1150, step=1)])
        recs += turn("fast", "c", r, 0.0, 0, calls=[_call("fast", "c", r, out=50),
                                                      _call("fast", "c", r, out=20, prompt=1100, step=1)])
    for rec in recs:
        if rec["kind"] == "turn":
            calls = [c for c in recs if c.get("turn_id") == rec["turn_id"] and c["kind"] == "call"]
            rec["turn_s"] = sum(c["latency_s"] for c in calls) * (0.5 if rec["arm"] == "fast" else 1.0)
            rec["output_tokens"] = sum(c["completion_tokens"] for c in calls)
    s, _ = _summary(recs)
    m = _total(s)
    # by hand: fast's turn 0.5 × (1 + 49/50 + 1.1 + 19/50) = 1.73 s; at base's work + (1.15 − 1.1) s prefill and
    # + 50 / 50 s decode = 2.78 s; base 1 + 99/50 + 1.15 + 19/50 = 4.51 s → 4.51 / 2.78
    assert m["equal_work"]["value"] == pytest.approx(4.51 / 2.78, rel=1e-6)


def test_an_adaptive_verdict_at_equal_work_is_final_when_the_run_stopped(monkeypatch):
    """Review: the run stopped on the measured pairs ("decided"); the summary decided again on the corrected ones
    at the same look and said "open" in a finished run.  Each arm gets an exact rate model and a passing
    cross-check (as the probes of a real run give), so that equal work applies."""
    import leverbench.analysis.experiment.equal_work as equal_work
    import leverbench.analysis.sections.rates as rates_section  # (the section that fits the rate models)

    fitted = rates_section.rate_models

    def exact(ds, load_rows, own):
        out = fitted(ds, load_rows, own)
        for m in out:
            m["prefill"] = {"a_s": 0.0, "b_s_per_token": 0.001, "c_s_per_token2": 0.0, "source": "exact",
                            "points": 10, "r2": 1.0, "range_uncached": [1, 10000], "range_cached": [0, 10000],
                            "quadratic": False, "outliers": 0}
            m["decode"] = {"d0_s_per_token": 0.02, "d1_s_per_token_per_ctx": 0.0, "source": "exact", "points": 10,
                           "r2": 1.0, "range_context": [1, 10000], "acceptance": None, "context_fitted": False,
                           "outliers": 0}
        return out
    monkeypatch.setattr(rates_section, "rate_models", exact)
    monkeypatch.setattr(equal_work, "_cross_checked", lambda rows, arm, tol=None: (None, None))
    noise = [1.0, 1.01, 0.99, 1.005, 0.995, 1.0, 1.01, 0.99, 1.0, 1.005, 0.995, 1.0]
    extra = [150, -40, 200, -40, 150, -40, 150, -40, 200, -40, 150, -40]
    recs = []
    for r in range(12):
        recs += turn("base", "c", r, 20.0 * noise[r], 100) + turn("fast", "c", r, 9.0 * noise[::-1][r], 100 + extra[r])
    head = header(ARMS, ["c"], repeats=3, adaptive={"min_effect": 1.1, "confidence": 0.95, "max_repeats": 12})
    s = summarize(ledger(head, recs))
    [v] = s["verdicts"]
    assert v["measure"] == "equal work" and v["stopped_by"] == "decided"
    assert v["verdict"] != "open"


def test_switches_that_change_only_what_a_server_reports_are_no_knobs():
    base = {"server_info": {"enable_cache_report": False, "enable_metrics": False}, "engine_args": []}
    other = {"server_info": {"enable_cache_report": True, "enable_metrics": True},
             "engine_args": ["--enable-prompt-tokens-details"]}
    assert fact_knobs({"a": base, "b": other}, {"a": {}, "b": {}}) == {"a": {}, "b": {}}
    # the same model file loaded from two directories is one model
    a = {"props": {"model_path": "/x/m.gguf"}, "models": ["/x/m.gguf"]}
    b = {"props": {"model_path": "/y/m.gguf"}, "models": ["/y/m.gguf"]}
    assert fact_knobs({"a": a, "b": b}, {"a": {}, "b": {}}) == {"a": {}, "b": {}}


def test_an_unknown_knob_is_not_read_as_on():
    assert not is_on(UNKNOWN)
    arms = {"base": {"conditions": {}, "discovered": {"knobs": {"engine": "vllm", "drafter": False}}},
            "control": {"conditions": {}, "discovered": {"knobs": {"engine": "vllm"}}}}
    head = header({a: {} for a in arms}, ["c"])
    for a, h in arms.items():
        head["arms"][a].update(h)
    recs = []
    for r in range(3):
        recs += turn("base", "c", r, 2.0, 100) + turn("control", "c", r, 1.0, 100)
    s = summarize(ledger(head, recs))
    assert not [w for w in warned(s, W.NOT_ENGAGED) if "(unknown)" in w["text"]]
    assert not any(x["lever"] == "drafter" for x in s["levers"])  # a knob known on one side only is no lever


def test_the_embedded_engine_s_own_facts_stand_in_for_an_endpoint_that_did_not_answer():
    k = discovered_knobs({"known": {"engine": "llama.cpp llama-server", "engine_args": [], "parallel": 1,
                                    "ctx_size": 8192, "model_id": "SmolLM2-135M-Instruct-Q4_1"}})
    assert (k["slots"], k["context_length"], k["model"]) == (1, 8192, "SmolLM2-135M-Instruct-Q4_1")


def test_sentinels_without_a_speed_to_read_are_drift_unknown():
    recs = []
    for r in range(4):
        for a in ARMS:
            recs.append(call(a, "(sentinel)", r, kind="sentinel", latency=0.3, ttft=None, out=None, position="start",
                             probe_tokens=16, t_send=1000.0 + r))
        recs += turn("base", "c", r, 2.0, 100) + turn("fast", "c", r, 1.0, 100)
    s = summarize(ledger(header(ARMS, ["c"], repeats=4), recs))
    assert all(d["unknown"] for d in s["drift"]) and warned(s, W.DRIFT_UNKNOWN, "fast")


def test_blocked_order_s_common_drift_words_say_blocked():
    from test_drift import _run
    s = _run(lambda a, x: 1.0 - 0.3 * x, order="blocked")
    text = s["drift_common"]["text"] or ""
    assert "blocked order" in text and "interleaved" not in text


def _probe_off_run(extra_tokens: int):
    """The arm writes *extra_tokens* more per turn; its probes read its decode 20 % slow (50 against 40 tok/s):
    its cross-check fails, by 25 %."""
    recs = []
    for r in range(3):
        recs += turn("base", "c", r, 1.0 + 399 / 50, 400, calls=[_call("base", "c", r, out=400)])
        c = _call("fast", "c", r, out=400 + extra_tokens)
        recs += turn("fast", "c", r, c["latency_s"] / 2, 400 + extra_tokens, calls=[c])
    head = header(ARMS, ["c"])
    probes = probes_for(head, {"base": {}}, decode_tps=DECODE) + [p for p in probes_for(head, {"fast": {}},
                                                                                      decode_tps=40.0)]
    return summarize(ledger(head, recs + probes))


def test_a_failed_cross_check_refuses_only_a_correction_it_could_move_beyond_the_guard_s_tolerance():
    small = _total(_probe_off_run(40))  # 10 % more tokens: a correction of about 9 % of its time
    assert not small["citable"] and small["equal_work"]["citable"], small["equal_work"]["reason"]
    assert "good to" in small["equal_work"]["corrected"] and "25.0%" in small["equal_work"]["corrected"]
    large = _total(_probe_off_run(90))  # 22 %: the correction could move by 25 % × 20 % of the time > 5 %
    assert not large["equal_work"]["citable"] and "could reach" in large["equal_work"]["reason"]
