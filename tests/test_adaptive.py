"""Issue 16, the parts around the statistics: the adaptive settings, the counterbalanced schedule, the looks an
adaptive run takes (analysis/experiment/verdicts.py) and ``summary.json`` ``verdicts[]`` — on hand-made ledgers whose
numbers are worked out here.  The runner against the simulator: tests/test_adaptive_run.py."""

from __future__ import annotations

import math

import pytest
from ledgers import header, ledger, turn
from test_config import GOOD, write

from leverbench.analysis.base.dataset import dataset
from leverbench.analysis.base.knobs import Comparison, comparisons
from leverbench.analysis.experiment.verdicts import Settings, decided_comparisons, plan_round, replay
from leverbench.analysis.sequential.confidence import fixed_design_repeats
from leverbench.analysis.summary import summarize
from leverbench.config import load, with_adaptive, with_repeats
from leverbench.errors import ConfigError
from leverbench.report.markdown import render_markdown
from leverbench.runner.schedule import adaptive_round, build_schedule, counterbalanced

# ---- the settings

ADAPTIVE_GOOD = GOOD.replace('baseline = "a"\n', 'baseline = "a"\nadaptive = { min_effect = 1.2, max_gpu_hours = 3 }\n')


def test_adaptive_settings_and_their_defaults(tmp_path):
    e = load(write(tmp_path, ADAPTIVE_GOOD)).spec.experiment
    assert (e.adaptive.min_effect, e.adaptive.confidence, e.adaptive.max_repeats, e.adaptive.max_gpu_hours) == (
        1.2, 0.95, 12, 3.0)
    on = load(write(tmp_path, GOOD.replace('baseline = "a"\n', 'baseline = "a"\nadaptive = true\n')))
    assert on.spec.experiment.adaptive.model_dump() == {"min_effect": 1.10, "confidence": 0.95, "max_repeats": 12,
                                                        "max_gpu_hours": None}
    plain = load(write(tmp_path, GOOD))
    assert plain.spec.experiment.adaptive is None
    assert "adaptive" not in plain.snapshot()["experiment"]  # a fixed run's ledger header is as before
    # run --adaptive: the defaults, unless the file sets them
    assert with_adaptive(plain, True).spec.experiment.adaptive.max_repeats == 12
    assert with_adaptive(plain, True).snapshot()["experiment"]["adaptive"]["min_effect"] == 1.10
    assert with_adaptive(load(write(tmp_path, ADAPTIVE_GOOD)), True).spec.experiment.adaptive.min_effect == 1.2
    assert with_adaptive(plain, False) is plain


@pytest.mark.parametrize("line, key, what", [
    ("adaptive = { min_effect = 0.9 }", "experiment.adaptive.min_effect", "ratio above 1"),
    ("adaptive = { min_effect = 1.0 }", "experiment.adaptive.min_effect", "ratio above 1"),
    ("adaptive = { confidence = 95 }", "experiment.adaptive.confidence", "between 0 and 1"),
    ("adaptive = { max_repeats = 1 }", "experiment.adaptive.max_repeats", "from 2"),
    ("adaptive = { max_gpu_hours = 0 }", "experiment.adaptive.max_gpu_hours", "above 0"),
    ("adaptive = { min_efect = 1.2 }", "experiment.adaptive.min_efect", "did you mean 'min_effect'"),
    ("adaptive = { max_repeats = 2 }\nrepeats = 3", "experiment.repeats", "exceed adaptive max_repeats = 2"),
    ("adaptive = true\nrepeats = 1", "experiment.repeats", "at least 2 repeats"),
    ('adaptive = true\norder = "blocked"', "experiment.order", "interleaved"),
])
def test_bad_adaptive_settings_name_the_key(tmp_path, line, key, what):
    with pytest.raises(ConfigError) as ei:
        load(write(tmp_path, GOOD.replace('baseline = "a"\n', f'baseline = "a"\n{line}\n')))
    assert ei.value.key == key and what in str(ei.value) and str(tmp_path / "exp.toml") in str(ei.value)


def test_flags_are_checked_against_the_adaptive_settings(tmp_path):
    with pytest.raises(ConfigError, match="at least 2 repeats") as ei:
        with_adaptive(with_repeats(load(write(tmp_path, GOOD)), 1), True)
    assert ei.value.key == "--adaptive"
    with pytest.raises(ConfigError, match="exceed adaptive max_repeats = 12") as ei:
        with_repeats(load(write(tmp_path, ADAPTIVE_GOOD)), 13)
    assert ei.value.key == "--repeats"


# ---- the schedule

def test_counterbalanced_order_alternates_by_case_and_repeat():
    assert counterbalanced(["a", "b"], 0, 0) == ["a", "b"]
    assert counterbalanced(["a", "b"], 1, 0) == ["b", "a"]
    assert counterbalanced(["a", "b"], 0, 1) == ["b", "a"]
    assert counterbalanced(["a", "b", "c"], 1, 2) == ["c", "b", "a"]


def test_an_adaptive_schedule_and_a_fixed_one_share_the_counterbalanced_order(tmp_path):
    two_cases = GOOD + '\n[[cases]]\nname = "d"\nprompt = "go"\n'
    want = [(0, "c", "a"), (0, "c", "b"), (0, "d", "b"), (0, "d", "a"),
            (1, "c", "b"), (1, "c", "a"), (1, "d", "a"), (1, "d", "b"),
            (2, "c", "a"), (2, "c", "b"), (2, "d", "b"), (2, "d", "a")]
    fixed = load(write(tmp_path, two_cases)).spec
    assert [(u.repeat, u.case, u.arm) for u in build_schedule(fixed, {}) if u.kind == "turn"] == want
    adaptive = load(write(tmp_path, two_cases.replace('baseline = "a"\n', 'baseline = "a"\nadaptive = true\n'))).spec
    units = build_schedule(adaptive, {})
    assert [(u.repeat, u.case, u.arm) for u in units if u.kind == "turn"] == want
    assert [u.kind for u in units][-2:] == ["sentinel", "sentinel"] and units[0].kind == "sentinel"
    # a round: a sentinel of each arm in it, then only the cells asked for, in the experiment's case order,
    # counterbalanced by repeat
    rnd = adaptive_round(adaptive, [("b", "d"), ("a", "d"), ("b", "c")], 5)
    assert [(u.kind, u.repeat, u.case, u.arm) for u in rnd] == [
        ("sentinel", 5, "(sentinel)", "b"), ("sentinel", 5, "(sentinel)", "a"),
        ("turn", 5, "c", "b"), ("turn", 5, "d", "a"), ("turn", 5, "d", "b")]
    # a recorded turn meets what its recording's earlier turns of the round left (issue 38): its cell brings
    # those turns on its arm into the round, before it
    recorded = adaptive.model_copy(deep=True)
    for c in recorded.cases:
        c.recorded_from = "rec"
    rnd = adaptive_round(recorded, [("a", "d")], 5)
    assert [(u.kind, u.case, u.arm) for u in rnd] == [("sentinel", "(sentinel)", "a"), ("turn", "c", "a"),
                                                      ("turn", "d", "a")]


# ---- which comparisons are decided

THREE = {"base": {"prefix_cache": False, "drafter": "none"},
         "control": {"prefix_cache": True, "drafter": "none"},
         "treatment": {"prefix_cache": True, "drafter": "ngram"}}


def test_each_lever_is_decided_by_its_controlled_pair_and_other_arms_against_the_baseline():
    knobs = {**THREE, "other": {"prefix_cache": True, "drafter": "eagle", "engine": "x"}}
    roles = {"base": "baseline", "control": "control", "treatment": "treatment", "other": "treatment"}
    comps = comparisons(list(knobs), "base", knobs, roles)
    got = [(c.arm, c.vs, c.lever) for c in decided_comparisons(comps, "base")]
    # treatment vs base differs in two knobs: not decided; "other" is in no controlled pair: against the baseline
    assert got == [("control", "base", "prefix_cache"), ("treatment", "control", "drafter"), ("other", "base", None)]


# ---- the looks, by hand

# log-ratios per case for repeats 0 … 4 — test_sequential's D5 (matched repeats 0.1, 0.2, 0.2, 0.2, 0.3: θ̂ = 0.2,
# W = 0.02, 95 % half-width 0.1727686 at the look after 5 repeats) — and a repeat 5 that would point the other way
D = {"a": [0.1, 0.2, 0.3, 0.2, 0.2, -0.5], "b": [0.2, 0.2, 0.2, 0.1, 0.3, -0.5], "c": [0.0, 0.2, 0.1, 0.3, 0.4, -0.5]}
LOW5, HIGH5 = math.exp(0.2 - 0.1727686), math.exp(0.2 + 0.1727686)  # [1.0276, 1.4517]
REF_S = 10.0


def _two_arm(repeats: int, adaptive: dict | None, gpus: int | None = None, arm_out: int = 100):
    """Arms ref (baseline) and arm (knob kernel = "fused"; *gpus* GPUs, a second knob, when given): ref turns
    take 10 s, arm's 10 / exp(d)."""
    exp = {} if adaptive is None else {"adaptive": adaptive}
    arm = {"kernel": "fused", **({"gpus": gpus} if gpus else {})}
    head = header({"ref": {"kernel": "plain"}, "arm": arm}, list(D),
                  repeats=2 if adaptive is not None else repeats, **exp)
    recs = []
    for r in range(repeats):
        for case, ds in D.items():
            recs += turn("ref", case, r, REF_S, 100) + turn("arm", case, r, REF_S / math.exp(ds[r]), arm_out)
    return ledger(head, recs)


def test_an_adaptive_comparison_stops_at_the_look_that_decides_it_and_keeps_that_look():
    """min_effect 1.02: after 2 and 3 repeats (ν = 1, 2) the interval is the whole line, after 4 it is
    exp(0.175 ± 0.2012) = [0.974, 1.457]: open; after 5 it is exp(0.2 ± 0.1727686) = [1.0276, 1.4517]: low > 1.02,
    pays.  Repeat 5 (all −0.5) is in the ledger but after the stop: the verdict is the one of look 5."""
    led = _two_arm(6, {"min_effect": 1.02, "max_repeats": 8}, gpus=2)
    rp = replay(dataset(led), Settings.of_config(led.header["config"]))
    (comp,) = rp.comparisons
    stop = rp.stops[comp]
    assert (stop.look, stop.why, stop.decision["verdict"]) == (5, "decided", "pays")
    assert rp.rounds == [{"repeat": r, "comparisons": ["arm vs ref"], "cells": 6} for r in (2, 3, 4)]
    assert plan_round(_two_arm(2, {"min_effect": 1.02, "max_repeats": 8}, gpus=2), 2).cells == [
        ("ref", "a"), ("ref", "b"), ("ref", "c"), ("arm", "a"), ("arm", "b"), ("arm", "c")]
    assert plan_round(led, 5).cells == []  # decided: no round 5
    v = summarize(led)["verdicts"][0]
    assert (v["verdict"], v["looks"], v["stopped_by"], v["method"]) == ("pays", 5, "decided", "confidence sequence")
    assert v["ratio"] == pytest.approx(math.exp(0.2))
    assert (v["low"], v["high"]) == pytest.approx((LOW5, HIGH5), rel=1e-6)
    assert v["repeats"] == v["pairs"] == {"a": 5, "b": 5, "c": 5}
    # 5 repeats of both arms: ref 15 × 10 s × 1 GPU, arm Σ 10/exp(d) × 2 GPUs
    arm_s = sum(REF_S / math.exp(x) for ds in D.values() for x in ds[:5])
    assert v["gpu_hours"] == pytest.approx((15 * REF_S + 2 * arm_s) / 3600)
    # the fixed design on the per-case noise of all pairs: s² = 0.005, 0.005, 0.025 (test_sequential's D5)
    n = fixed_design_repeats(0.2, math.sqrt(0.035 / 3), 3, 1.02, 0.95, 0.90, "pays", weights=(1 / 7, 1 / 7, 5 / 7))
    medians = [REF_S + 2 * REF_S / math.exp(0.2)] * 3  # each case's median arm time (median d = 0.2 in each)
    assert v["fixed_design_repeats"] == n and v["fixed_design_gpu_hours"] == pytest.approx(n * sum(medians) / 3600)


def test_max_repeats_stops_a_comparison_undecided():
    led = _two_arm(4, {"min_effect": 1.10, "max_repeats": 4})  # [0.974, 1.457] straddles 1.10
    v = summarize(led)["verdicts"][0]
    assert (v["verdict"], v["looks"], v["stopped_by"]) == ("undecided", 4, "max_repeats")
    assert summarize(led)["adaptive"]["stopped_by"] == "max_repeats"
    assert plan_round(led, 4).cells == []


def test_the_gpu_hours_budget_stops_the_round_that_would_pass_it():
    """After 2 repeats: spent = ref 6 × 10 s + arm 2 GPUs × Σ 10/exp(d) over repeats 0-1 (51.7976 s) = 163.5952
    GPU-s; the next round is expected to take the cells' medians: ref 3 × 10 + arm 2 × 25.8988 = 81.7976 GPU-s;
    together 245.3928 GPU-s = 0.068165 GPU-hours.  (With 1 GPU per arm it would be 0.046582.)  After 3 repeats
    the same sum is 0.089925, after 4 0.111710: a budget of 0.0682 runs one round and stops at look 3, one of
    0.1118 lets the comparison reach look 5, where it pays."""
    arm2 = sum(REF_S / math.exp(x) for ds in D.values() for x in ds[:2])
    assert arm2 == pytest.approx(51.7976, abs=1e-4)
    for limit, cells in ((0.0681, 0), (0.0682, 6)):
        led = _two_arm(2, {"min_effect": 1.02, "max_gpu_hours": limit}, gpus=2)
        assert len(plan_round(led, 2).cells) == cells, limit
        if not cells:
            assert plan_round(led, 2).stopped_by == "max_gpu_hours"
            v = summarize(led)["verdicts"][0]
            assert (v["verdict"], v["stopped_by"], v["looks"]) == ("undecided", "max_gpu_hours", 2)
            assert summarize(led)["adaptive"]["stopped_by"] == "max_gpu_hours"
    led = _two_arm(3, {"min_effect": 1.02, "max_gpu_hours": 0.0682}, gpus=2)
    assert plan_round(led, 3).cells == [] and plan_round(led, 3).stopped_by == "max_gpu_hours"
    v = summarize(led)["verdicts"][0]
    assert (v["verdict"], v["stopped_by"], v["looks"]) == ("undecided", "max_gpu_hours", 3)
    led = _two_arm(5, {"min_effect": 1.02, "max_gpu_hours": 0.1118}, gpus=2)
    assert (summarize(led)["verdicts"][0]["verdict"], summarize(led)["verdicts"][0]["looks"]) == ("pays", 5)


def test_a_ledger_that_ends_with_a_comparison_open_is_undecided_and_not_finished():
    led = _two_arm(2, {"min_effect": 1.04})
    s = summarize(led)
    assert (s["verdicts"][0]["verdict"], s["verdicts"][0]["stopped_by"]) == ("undecided", "not finished")
    assert s["adaptive"]["stopped_by"] == "not finished"


def test_a_refused_comparison_never_pays():
    """The arm generates 150 tokens against 100: a 50 % volume spread, refused by the guard."""
    led = _two_arm(6, {"min_effect": 1.02}, arm_out=150)
    v = summarize(led)["verdicts"][0]
    assert (v["verdict"], v["looks"]) == ("undecided", 5)
    assert "output volume spread 50.0%" in v["refused"] and "never pays" in v["reason"]


def test_fixed_repeats_get_the_t_interval_beside_the_range():
    """5 fixed repeats (the D5 pairs): the t-interval with each case's variance (Welch–Satterthwaite ν = 7.26),
    0.2 ± 0.0654718 = [1.1440, 1.3040], above 1.10: pays.  3 repeats (test_sequential's D3 pairs): 1/6 ± 0.0755653
    = [1.0954, 1.2741] — one pooled σ would claim ν = 6 and [1.1052, 1.2628], "pays"; with ν = 4, undecided."""
    v3 = summarize(_two_arm(3, None))["verdicts"][0]
    assert (v3["verdict"], v3["ratio"]) == ("undecided", pytest.approx(math.exp(1 / 6)))
    assert (v3["low"], v3["high"]) == pytest.approx((math.exp(1 / 6 - 0.0755653), math.exp(1 / 6 + 0.0755653)),
                                                    rel=1e-6)
    led = _two_arm(5, None)
    s = summarize(led)
    v = s["verdicts"][0]
    assert s["adaptive"] is None
    assert (v["method"], v["verdict"], v["looks"], v["stopped_by"]) == ("fixed t-interval", "pays", 5, None)
    assert (v["low"], v["high"]) == pytest.approx((math.exp(0.2 - 0.0654718), math.exp(0.2 + 0.0654718)), rel=1e-6)
    assert sorted(v) == sorted(["arm", "vs", "lever", "knobs", "verdict", "ratio", "low", "high", "confidence",
                                "min_effect", "method", "repeats", "pairs", "looks", "stopped_by", "gpu_hours",
                                "fixed_design_repeats", "fixed_design_gpu_hours", "fixed_design_power", "refused",
                                "reason", "measure"])
    assert (v["arm"], v["vs"], v["lever"], v["confidence"], v["min_effect"]) == ("arm", "ref", "kernel", 0.95,
                                                                                1.10)
    md = render_markdown(s)
    assert "| kernel | arm vs ref | pays | 1.22x [1.14–1.30] | 5 per case |" in md
    assert "| ratio vs ref [95% interval] | — | 1.22x [1.14–1.30] |" in md
    assert "95% t-interval over the fixed repeats" in md


def test_the_report_shows_the_adaptive_rounds():
    s = summarize(_two_arm(6, {"min_effect": 1.02, "max_repeats": 8}))
    md = render_markdown(s)
    assert "anytime-valid 95% confidence sequence" in md
    assert "| kernel | arm vs ref | pays | 1.22x [1.03–1.45] | 5 per case |" in md
    assert ("Adaptive: 2 repeats, then one more per round to the comparisons still open (up to 8); 3 round(s) added"
            in md)


def test_comparison_type_is_hashable_for_the_replay():
    assert len({Comparison("a", "b", ("k",), "k"), Comparison("a", "b", ("k",), "k")}) == 1


def _no_spread(repeats: int, adaptive: dict | None) -> object:
    """Three cases where every repeat takes 10 s on ref and 10/1.5 s on arm: no spread within any case."""
    exp = {} if adaptive is None else {"adaptive": adaptive}
    head = header({"ref": {"kernel": "plain"}, "arm": {"kernel": "fused"}}, list(D),
                  repeats=2 if adaptive is not None else repeats, **exp)
    recs = []
    for r in range(repeats):
        for case in D:
            recs += turn("ref", case, r, REF_S, 100) + turn("arm", case, r, REF_S / 1.5, 100)
    return ledger(head, recs)


def test_a_ledger_without_spread_gets_no_interval_and_says_the_timer_or_engine_is_deterministic():
    """Issue 22 §3.9: 1.5x on every repeat of every case.  The t-interval would be the point [1.50–1.50] and
    "pays" at 95 %; there is no noise to bound, so the ratio stays, the interval is the whole line, the verdict
    is not "pays", and the row's reason says why — fixed repeats and adaptive alike."""
    v = summarize(_no_spread(3, None))["verdicts"][0]
    assert v["verdict"] != "pays"
    assert (v["verdict"], v["low"], v["high"]) == ("undecided", 0.0, math.inf)
    assert v["ratio"] == pytest.approx(1.5)
    assert "deterministic" in v["reason"] and "not a confidence interval" in v["reason"]
    a = summarize(_no_spread(4, {"min_effect": 1.04, "max_repeats": 4}))["verdicts"][0]
    assert (a["verdict"], a["stopped_by"], a["looks"]) == ("undecided", "max_repeats", 4)
    assert "deterministic" in a["reason"]
