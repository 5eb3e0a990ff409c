"""Issue 16, the statistical core: the anytime-valid interval of a comparison's mean log-ratio, its verdict,
the fixed design it is measured against, and the simulation study (leverbench.analysis.sequential.study).

Seeds here (16_001 …) differ from those the method was chosen on (12345, 555) and from the benchmark's (2026 …).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy.integrate import trapezoid

from leverbench.analysis.sequential.confidence import (
    MIXTURE_G,
    confidence_sequence,
    decide,
    fixed_design_repeats,
    fixed_interval,
    fixed_power,
    log_ratios,
    mixture_evalue,
    paired_log_ratios,
    verdict_of,
)
from leverbench.analysis.sequential.study import (
    Model,
    cs_method,
    experiment_looks,
    fixed,
    matched_fixed_n,
    sequential,
    t_every_look,
)
from leverbench.errors import BadInput

M11 = 1.10
D3 = {"a": [0.1, 0.2, 0.3], "b": [0.2, 0.2, 0.2], "c": [0.0, 0.1, 0.2]}
# 3 cases × 5 pairs whose matched repeats D_j = (a_j + b_j + c_j)/3 are 0.1, 0.2, 0.2, 0.2, 0.3
D5 = {"a": [0.1, 0.2, 0.3, 0.2, 0.2], "b": [0.2, 0.2, 0.2, 0.1, 0.3], "c": [0.0, 0.2, 0.1, 0.3, 0.4]}


# ---- the interval, by hand ----

def test_confidence_sequence_by_hand():
    """3 cases × 5 pairs.  Matched repeats D = 0.1, 0.2, 0.2, 0.2, 0.3: θ̂ = 0.2, W = 0.01 + 0 + 0 + 0 + 0.01 =
    0.02, ν = 5 − 1 = 4, M = 5; the stream's g = 1 · 3 cases = 3.  α = 0.05: G = 1 + 5·3 = 16,
    A = (√16/0.05)^(2/5) = 80^0.4 = 5.770800, u = (A − 1)/(1 − A/G) = 4.770800/0.639325 = 7.462244,
    half-width = √(u·W/M) = √(7.462244 · 0.02/5) = 0.1727686.  The per-case noise (all pairs): s² = 0.005,
    0.005, 0.025, sd = √(0.035/3) = 0.1080123, weights 1/7, 1/7, 5/7."""
    iv = confidence_sequence(D5, 0.95)
    assert MIXTURE_G == 1.0
    assert iv.estimate == pytest.approx(0.2, abs=1e-12)
    assert (iv.df, iv.pairs) == (4, {"a": 5, "b": 5, "c": 5})
    assert iv.se == pytest.approx(math.sqrt(0.02 / 4 / 5), rel=1e-12)
    assert iv.sd == pytest.approx(math.sqrt(0.035 / 3), rel=1e-12)
    assert iv.weights == pytest.approx((1 / 7, 1 / 7, 5 / 7))
    assert iv.estimate - iv.low == pytest.approx(0.1727686, abs=1e-7)
    assert iv.high - iv.estimate == pytest.approx(0.1727686, abs=1e-7)
    assert iv.ratio == pytest.approx(math.exp(0.2))
    assert (iv.ratio_low, iv.ratio_high) == pytest.approx((math.exp(0.2 - 0.1727686), math.exp(0.2 + 0.1727686)))
    assert iv.anytime is True and iv.no_spread is False and iv.reason is None


def test_three_cases_of_three_pairs_are_not_yet_an_interval():
    """D3's matched repeats are 0.1, 1/6, 7/30: ν = 2, M = 3, G = 1 + 3·3 = 10, A = (√10/0.05)^(2/3) = 15.87 ≥ G:
    no bound yet (one σ pooled over the cases would claim ν = 6 and bound it)."""
    iv = confidence_sequence(D3)
    assert (iv.low, iv.high, iv.df) == (-math.inf, math.inf, 2)
    assert iv.estimate == pytest.approx(1 / 6)


def test_fixed_interval_by_hand():
    """The same pairs, the t-interval with each case's own variance (Welch–Satterthwaite): s² = 0.01, 0, 0.01,
    se = √((0.01/3 + 0 + 0.01/3)/3²) = 0.0272166, ν = (0.02/3)² / (2·(0.01/3)²/2) = 4 (not the pooled
    ν = 6), t_{0.975, 4} = 2.776445, half-width 0.0755653 — narrower than the anytime one (the price of
    looking after every repeat)."""
    iv = fixed_interval(D3, 0.95)
    assert iv.estimate - iv.low == pytest.approx(0.0755653, abs=1e-7)
    assert iv.df == pytest.approx(4.0)
    assert iv.anytime is False
    assert iv.high - iv.low < confidence_sequence(D3).high - confidence_sequence(D3).low
    # D5: v = 0.005/5, 0.005/5, 0.025/5 = 0.001, 0.001, 0.005; se = √(0.007/9) = 0.0278887;
    # ν = 0.007² / ((0.001² + 0.001² + 0.005²)/4) = 7.259259; t_{0.975, 7.259} = 2.347612: half-width 0.0654718
    iv = fixed_interval(D5)
    assert (iv.se, iv.df) == (pytest.approx(0.0278887, abs=1e-7), pytest.approx(196 / 27))
    assert iv.high - iv.estimate == pytest.approx(0.0654718, abs=1e-7)


def test_endpoints_are_where_the_evidence_reaches_one_over_alpha():
    iv = confidence_sequence(D5, 0.90)
    assert mixture_evalue(D5, iv.low) == pytest.approx(10.0, rel=1e-9)
    assert mixture_evalue(D5, iv.high) == pytest.approx(10.0, rel=1e-9)
    assert mixture_evalue(D5, iv.estimate) < 10.0
    assert mixture_evalue(D5, iv.high + 0.01) > 10.0


def test_closed_form_matches_the_mixture_integral_of_the_matched_repeats():
    """B(θ0) = ∫∫ Π_j N(D_j; θ0 + δτ, τ²) N(δ; 0, g) dδ dτ/τ ÷ ∫ Π_j N(D_j; θ0, τ²) dτ/τ, τ right-Haar, integrated
    numerically for 2 cases with 4 and 3 pairs: the matched repeats are the means of the first 3 pairs of each
    (a's 4th waits for b's), D = 0.18, 0.17, 0.235 (ν = 2, M = 3), and the stream's g is 1 · 2 cases = 2."""
    y = {"a": [0.31, 0.12, 0.25, 0.9], "b": [0.05, 0.22, 0.22]}
    dd = [(x + z) / 2 for x, z in zip(y["a"], y["b"])]
    theta0, g = 0.02, 2.0
    u = np.linspace(math.log(0.001), math.log(3.0), 801)[:, None]  # log τ: dτ/τ = du
    t = np.exp(u)
    d = np.linspace(-12.0, 12.0, 801)[None, :]

    def likelihood(delta):
        q = sum((v - theta0 - delta * t) ** 2 for v in dd)
        return t ** -3.0 * np.exp(-q / (2 * t * t))

    prior = np.exp(-d * d / (2 * g)) / math.sqrt(2 * math.pi * g)
    num = trapezoid(trapezoid(likelihood(d) * prior, d.ravel(), axis=1), u.ravel())
    den = trapezoid(likelihood(np.zeros((1, 1)))[:, 0], u.ravel())
    assert mixture_evalue(y, theta0) == pytest.approx(num / den, rel=1e-3)
    iv = confidence_sequence(y)
    assert (iv.df, iv.estimate, iv.pairs) == (2, pytest.approx(sum(dd) / 3), {"a": 4, "b": 3})


# ---- edge cases ----

def test_fewer_than_two_pairs_gives_no_interval():
    for d in ({"a": [0.2]}, {"a": [0.2], "b": [0.1]}, {"a": []}):
        iv = confidence_sequence(d)
        assert (iv.low, iv.high) == (-math.inf, math.inf), d
        assert iv.sd is None
    out = decide({"a": [0.2], "b": [0.1]}, repeats=1, max_repeats=12)
    assert (out["verdict"], out["stop"], out["fixed_design_repeats"]) == ("open", False, None)
    assert decide({"a": [0.2]}, repeats=12, max_repeats=12)["verdict"] == "undecided"


def test_zero_spread_is_not_called_a_confidence_interval():
    """Issue 22 §3.9: every repeat of every case gave the same ratio (1.16x), so the timer or the engine is
    deterministic.  The formula would give the point exp(0.15) and call it a 95 % interval; there is no
    noise in the data to bound, so: the estimate stays, no interval (the whole line), no verdict ("open", then
    "undecided" when the budget is spent, never "pays"), and the reason says why."""
    flat = {"a": [0.2] * 4, "b": [0.1] * 4, "c": [0.15] * 4}
    out = decide(flat, repeats=4, max_repeats=12)
    assert out["verdict"] != "pays"
    assert (out["verdict"], out["stop"], out["low"], out["high"]) == ("open", False, 0.0, math.inf)
    assert "deterministic" in out["reason"] and "not a confidence interval" in out["reason"]
    spent = decide(flat, repeats=12, max_repeats=12, refused="b has 1 failed call(s)")
    assert spent["verdict"] == "undecided" and spent["reason"].startswith("not citable: b has 1 failed call(s); ")
    assert "deterministic" in spent["reason"]
    for iv in (confidence_sequence(flat), fixed_interval(flat)):
        assert iv.no_spread is True and "deterministic" in iv.reason
        assert (iv.low, iv.high, iv.sd) == (-math.inf, math.inf, None)
        assert iv.estimate == pytest.approx(0.15)
    # one case without spread beside others with it is an ordinary interval (a deterministic short case)
    iv = confidence_sequence({"a": [0.2] * 6, "b": [0.1, 0.3, 0.2, 0.25, 0.15, 0.2]})
    assert iv.no_spread is False and iv.reason is None and iv.high < math.inf


def test_a_failed_turn_drops_its_pair_only():
    ref = {"a": [10.0, 11.0, 12.0], "b": [20.0, 21.0, 22.0]}
    arm = {"a": [8.0, None, 9.0], "b": [16.0, 17.0, float("nan")]}
    d = paired_log_ratios(ref, arm)
    assert d == {"a": [math.log(10 / 8), math.log(12 / 9)], "b": [math.log(20 / 16), math.log(21 / 17)]}
    iv = confidence_sequence(d)
    assert (iv.pairs, iv.df) == ({"a": 2, "b": 2}, 1)
    # repeats by number (a resumed run may skip one): only repeats both arms have pair up
    assert log_ratios({0: 10.0, 2: 12.0, 3: 5.0}, {0: 8.0, 1: 7.0, 2: 9.0}) == [math.log(10 / 8), math.log(12 / 9)]


def test_unequal_pairs_per_case_weigh_cases_equally():
    """The estimand is the mean over cases, not over pairs: case a (2 pairs at 0.1) and b (4 pairs at 0.3)
    give θ̂ = 0.2 (not 0.233) in both intervals; the matched repeats are 2 (b's last two wait for a's: ν = 1),
    the fixed interval uses every pair: v = 0.0002/2, 0.0004/3/4, ν = (1/7500)² / (10⁻⁸ + (1/30000)²/3) =
    1.714286."""
    d = {"a": [0.09, 0.11], "b": [0.29, 0.31, 0.29, 0.31]}
    iv = confidence_sequence(d)
    assert (iv.estimate, iv.df) == (pytest.approx(0.2), 1)
    iv = fixed_interval(d)
    assert (iv.estimate, iv.df) == (pytest.approx(0.2), pytest.approx(12 / 7))


def test_all_cases_identical():
    """Three identical cases: the matched repeats are that case's own pairs, so the sequence is the one case's
    with the stream's g = 3 — cases that move together carry no more information about the noise than one."""
    xs = [0.1, 0.2, 0.3, 0.2, 0.25]
    three, one = confidence_sequence({c: xs for c in "abc"}), confidence_sequence({"a": xs}, g=3.0)
    assert (three.estimate, three.low, three.high) == pytest.approx((one.estimate, one.low, one.high))
    assert three.high < math.inf and three.df == one.df == 4
    assert confidence_sequence({"a": [0.1, 0.2, 0.3]}).high == math.inf


def test_a_case_without_pairs_is_left_out_and_named():
    for interval in (confidence_sequence, fixed_interval):
        iv, ref = interval({**D5, "d": []}), interval(D5)
        assert (iv.estimate, iv.low, iv.high) == pytest.approx((ref.estimate, ref.low, ref.high))
        assert iv.missing_cases == ["d"] and iv.pairs["d"] == 0


@pytest.mark.parametrize("call, what", [
    (lambda: verdict_of(0.9, 1.2, 1.0), "min_effect"),
    (lambda: confidence_sequence(D3, 1.5), "confidence"),
    (lambda: log_ratios([10.0, -1.0], [8.0, 9.0]), "positive"),
    (lambda: decide(D3, repeats=3, max_repeats=1), "max_repeats"),
    (lambda: fixed_design_repeats(0.2, 0.1, 4, 1.1, power=1.0), "power"),
    (lambda: confidence_sequence({"a": [0.1, float("inf")]}), "finite"),
])
def test_bad_input_names_what_is_wrong(call, what):
    with pytest.raises(BadInput, match=what):
        call()


# ---- the verdict and the decision ----

@pytest.mark.parametrize("low, high, verdict", [
    (1.15, 1.40, "pays"),
    (0.95, 1.05, "equivalent"),        # also below min_effect: "equivalent" is checked first, it says more
    (0.85, 1.05, "does not pay"),      # may be slower by more than the margin
    (0.80, 0.88, "does not pay"),      # slower
    (1.05, 1.20, None),
    (0.90, 1.20, None),
    (1.10, 1.30, None),                # low must exceed min_effect
    (0.95, 1.10, None),                # high must be below it
    (0.905, 1.05, "does not pay"),     # low must exceed 1/min_effect = 0.909 for "equivalent"
])
def test_verdict_order(low, high, verdict):
    assert verdict_of(low, high, M11) == verdict


def test_no_verdict_before_min_repeats_and_undecided_when_the_budget_is_spent():
    clear = {c: [0.5 + e for e in (0.0, 0.01, -0.01, 0.02, -0.02)] for c in "abcd"}  # ratio ≈ 1.65, little noise
    assert decide(clear, repeats=3, max_repeats=12, min_repeats=4)["verdict"] == "open"
    out = decide(clear, repeats=4, max_repeats=12, min_repeats=4)
    assert (out["verdict"], out["stop"]) == ("pays", True)
    straddling = {c: [0.05, 0.15, 0.0, 0.2] for c in "ab"}
    assert decide(straddling, repeats=4, max_repeats=12)["verdict"] == "open"
    assert decide(straddling, repeats=4, max_repeats=12, budget_spent=True)["verdict"] == "undecided"
    assert decide(straddling, repeats=12, max_repeats=12)["stop"] is True


def test_a_refused_comparison_never_pays():
    clear = {c: [0.5, 0.51, 0.49, 0.52, 0.48] for c in "abcd"}
    out = decide(clear, repeats=5, max_repeats=12, refused="output volume spread 30.0% > 20%")
    assert (out["verdict"], out["stop"]) == ("undecided", True)
    assert "never pays" in out["reason"] and "30.0%" in out["reason"]
    flat = {c: [0.0, 0.01, -0.01, 0.005, -0.005] for c in "abcd"}
    out = decide(flat, repeats=5, max_repeats=12, refused="b has 1 failed call(s)")
    assert out["verdict"] == "equivalent" and out["reason"] == "not citable: b has 1 failed call(s)"


# ---- the fixed design ----

def test_fixed_design_large_n_agrees_with_the_normal_approximation():
    """Δ = 0.1 above the margin, one pair's sd 1, 4 cases, 95 % / 90 %: N = K·n ≈ (z_.975 + z_.9)²/Δ² + z_.975²/2
    (Guenther's t correction) = 1050.74 + 1.92 = 1052.66 pairs → n = ⌈263.16⌉ = 264."""
    assert fixed_design_repeats(math.log(M11) + 0.1, 1.0, 4, M11, 0.95, 0.90) == 264


def test_fixed_design_power_matches_simulation():
    """At 1.3x, cv 10 % (one pair's log sd √(2·log 1.01) = 0.1411), no drift: 3 repeats reach 90 % power, 2 do
    not; the power of the fixed interval (normal given the sample variances, averaged over them) agrees with the
    simulated fixed designs within 3 standard errors — with equal noise, and with one case ten times noisier
    (cv 2, 2, 2, 20 %: the same root-mean-square sd, but 5 repeats for 90 %: Welch's ν falls towards n − 1)."""
    sd = math.sqrt(2 * math.log1p(0.01))
    est = math.log(1.3)
    assert fixed_design_repeats(est, sd, 4, M11, 0.95, 0.90) == 3
    lk = experiment_looks(Model(effect=1.3, drift=0.0, case_offsets=(0.0,) * 4), 20000, 3, seed=16_001)
    for n in (2, 3):
        simulated = fixed(lk, n, M11).rate("pays")
        p = fixed_power(n, est, sd, 4, M11, 0.95, "pays")
        assert simulated == pytest.approx(p, abs=3 * math.sqrt(p * (1 - p) / 20000))
    assert fixed_power(2, est, sd, 4, M11) < 0.90 <= fixed_power(3, est, sd, 4, M11)
    var = 2 * np.log1p(np.array([0.02, 0.02, 0.02, 0.20]) ** 2)
    sd, weights = math.sqrt(var.mean()), var / var.sum()
    model = Model(effect=1.3, drift=0.0, cv=(0.02, 0.02, 0.02, 0.20), case_offsets=(0.0,) * 4)
    lk = experiment_looks(model, 20000, 5, seed=16_010)
    for n in (3, 4, 5):
        simulated = fixed(lk, n, M11).rate("pays")
        p = fixed_power(n, est, sd, 4, M11, 0.95, "pays", weights)
        assert simulated == pytest.approx(p, abs=3 * math.sqrt(p * (1 - p) / 20000)), n
    assert fixed_design_repeats(est, sd, 4, M11, 0.95, 0.90, weights=weights) == 5


def test_fixed_design_edges():
    assert fixed_design_repeats(math.log(M11), 0.1, 4, M11) is None  # at the margin: no n decides
    assert fixed_design_repeats(0.3, 0.0, 4, M11) == 2
    n = fixed_design_repeats(0.0, 0.1411, 4, M11, verdict="equivalent")
    assert fixed_power(n, 0.0, 0.1411, 4, M11, verdict="equivalent") >= 0.90
    assert fixed_power(n - 1, 0.0, 0.1411, 4, M11, verdict="equivalent") < 0.90
    assert (fixed_design_repeats(0.0, 0.1411, 4, M11)
            == fixed_design_repeats(0.0, 0.1411, 4, M11, verdict="does not pay"))


# ---- the simulation study (the issue's "done when") ----

E = 4000
ISSUE = Model()  # 4 cases, lognormal 10 % CV, drift 10 % over the run, counterbalanced, 12 repeats at most


def _run(model: Model, seed: int, experiments: int = E, repeats: int = 12, method=None):
    lk = experiment_looks(model, experiments, repeats, seed)
    return lk, sequential(lk, M11, 0.95, 2, 12, method, truth=math.log(model.effect))


def test_no_true_effect_rarely_pays():
    """No effect: "pays" in at most 5 % (the issue); at the margin itself (true ratio = min_effect, the
    hardest case) at most α/2 = 2.5 %, and the truth leaves the interval at some look in at most α = 5 %."""
    _, none = _run(ISSUE, 16_002)
    assert none.rate("pays") <= 0.05
    assert none.repeats.min() >= 2
    _, margin = _run(replace(ISSUE, effect=M11), 16_003)
    assert margin.rate("pays") <= 0.025
    assert np.mean(margin.missed) <= 0.05


def test_peeking_at_a_fixed_interval_fails_the_same_check():
    """The check can fail: the classical 95 % t-interval looked at after every repeat "pays" at the margin
    far more often than 2.5 % (and misses the truth more often than 5 %)."""
    _, margin = _run(replace(ISSUE, effect=M11), 16_003, method=t_every_look)
    assert margin.rate("pays") > 0.05
    assert np.mean(margin.missed) > 0.10


def test_a_true_effect_of_1_3_pays():
    _, o = _run(replace(ISSUE, effect=1.3), 16_004)
    assert o.rate("pays") >= 0.90


def test_fewer_repeats_than_the_fixed_design_with_the_same_error_rates():
    """The fixed design with the same error rates: the smallest fixed n whose "pays" rate under 1.3x is at
    least the sequential design's and whose "pays" rate under no effect is at most 5 %, found on the same
    simulated experiments (their first n repeats, the fixed interval once): 7.  The sequential design's mean
    repeats under 1.3x are at most 80 % of it (5.5; issue 16 asked for 60 %, which the pooled σ reached with
    3.5 — by assuming one noise for all cases, issue 22)."""
    experiments, sim_r = 20000, 16
    lk13, seq = _run(replace(ISSUE, effect=1.3), 16_005, experiments, sim_r)
    lk10, _ = _run(ISSUE, 16_006, experiments, sim_r)
    pays = {n: fixed(lk13, n, M11).rate("pays") for n in range(2, sim_r + 1)}
    false = {n: fixed(lk10, n, M11).rate("pays") for n in range(2, sim_r + 1)}
    n_fixed = matched_fixed_n(seq.rate("pays"), pays, false)
    assert n_fixed is not None
    assert seq.mean_repeats <= 0.80 * n_fixed, (seq.mean_repeats, n_fixed)


def test_the_saving_depends_on_the_power_the_fixed_design_is_held_to():
    """The match above holds the fixed design to the sequential design's own power at 1.3x, which is nearly
    every simulated experiment (so n grows with their number).  At the issue's error rates — at least 90 % power,
    at most 5 % false "pays" — 3 fixed repeats suffice, at 99 % power 5: a fixed design sized for the true effect
    and noise needs fewer repeats than the sequential design's mean (5.5), which needs neither known in advance
    (docs/statistics.md states these numbers)."""
    experiments, sim_r = 20000, 12
    lk13, seq = _run(replace(ISSUE, effect=1.3), 16_005, experiments, sim_r)
    lk10, _ = _run(ISSUE, 16_006, experiments, sim_r)
    assert seq.rate("pays") >= 0.999
    power = {n: fixed(lk13, n, M11).rate("pays") for n in range(2, sim_r + 1)}
    false = {n: fixed(lk10, n, M11).rate("pays") for n in range(2, sim_r + 1)}
    at90 = min(n for n in power if power[n] >= 0.90 and false[n] <= 0.05)
    at99 = min(n for n in power if power[n] >= 0.99 and false[n] <= 0.05)
    assert (at90, at99) == (3, 5)
    assert at99 < seq.mean_repeats < at99 + 1


def test_counterbalanced_order_cancels_drift_that_blocked_order_does_not():
    """A strong drift (50 % over the run) and little noise (cv 5 %), true ratio at the margin: in blocked
    order (each repeat: all cases on the arm, then on the reference) drift inflates the ratio and "pays" comes
    well over 2.5 %; counterbalanced, it stays under, and the estimate after 12 repeats is unbiased."""
    strong = replace(ISSUE, effect=M11, cv=0.05, drift=0.5)
    lk_b, blocked = _run(replace(strong, order="blocked"), 16_007)
    lk_c, balanced = _run(strong, 16_008)
    assert blocked.rate("pays") > 0.05
    assert balanced.rate("pays") <= 0.025
    assert abs(float(np.mean(lk_c.est[:, -1])) - math.log(M11)) < 0.001
    assert float(np.mean(lk_b.est[:, -1])) - math.log(M11) > 0.01


UNEQUAL = replace(ISSUE, cv=(0.02, 0.02, 0.02, 0.20))  # one case ten times noisier than the three others


@pytest.mark.parametrize("model, seed", [
    (UNEQUAL, 22_201),
    (replace(UNEQUAL, effect=M11), 22_202),
    # the normal agent mix: two deterministic short cases beside a steady one and a tool-calling one
    (replace(ISSUE, effect=M11, cv=(0.0, 0.0, 0.02, 0.20)), 22_203),
])
def test_unequal_noise_across_cases_keeps_the_anytime_guarantee(model, seed):
    """Issue 22 §3.2: with one σ pooled over cases the truth left the interval at some look in 8–12 % of
    the experiments.  With each case's own noise the truth leaves it in at most α = 5 %, and at the margin
    "pays" comes in at most α/2 = 2.5 % (4000 experiments: a miss rate of 8 % is 9 standard errors above 5 %)."""
    _, o = _run(model, seed)
    assert np.mean(o.missed) <= 0.05, np.mean(o.missed)
    assert o.rate("pays") <= (0.025 if model.effect == M11 else 0.0)


def _fixed_misses(model: Model, n: int, experiments: int, seed: int) -> float:
    """The share of simulated fixed designs of *n* repeats whose :func:`fixed_interval` misses the truth: the
    module's own interval, one experiment at a time (the oracle is the simulated truth, not a formula)."""
    from leverbench.analysis.sequential.study import simulate

    t_ref, t_arm = simulate(model, experiments, n, np.random.default_rng(seed))
    d = np.log(t_ref / t_arm)
    truth, misses = math.log(model.effect), 0
    for e in range(experiments):
        iv = fixed_interval({str(c): d[e, :, c].tolist() for c in range(d.shape[2])})
        misses += not (iv.low <= truth <= iv.high)
    return misses / experiments


@pytest.mark.slow
def test_the_fixed_interval_holds_its_level_with_unequal_noise():
    """The fixed t-interval with one σ pooled over cases misses the truth in 13 % of 3-repeat designs when one
    case is ten times noisier than the others (11 % at 4 repeats).  Per-case variances with Welch–Satterthwaite
    degrees of freedom: at most 7.5 % at 3 repeats (an approximation: 6.7 % in the study), at most 6 % at 6;
    with equal noise at most the nominal 5 %."""
    model = replace(UNEQUAL, effect=M11, drift=0.0)
    assert _fixed_misses(model, 3, 6000, 22_204) <= 0.075
    assert _fixed_misses(model, 6, 6000, 22_205) <= 0.06
    assert _fixed_misses(replace(model, cv=0.10), 3, 6000, 22_206) <= 0.05


@pytest.mark.parametrize("model", [replace(ISSUE, effect=1.2),
                                   replace(ISSUE, effect=1.2, cv=(0.0, 0.02, 0.1, 0.3), fail_rate=0.2)])
def test_the_study_uses_the_module_interval(model):
    """The study's vectorised looks give the module's own intervals for simulated experiments, at every look:
    the confidence sequence (matched repeats) and the fixed interval, with unequal noise and failed turns too
    (then a case's pairs skip its failed repeats, and the matched repeats wait for the lagging case)."""
    from leverbench.analysis.sequential.study import simulate

    t_ref, t_arm = simulate(model, 3, 8, np.random.default_rng(16_009))
    lk = experiment_looks(model, 3, 8, 16_009)
    hw = cs_method()(lk.stream, 0.95)
    for e in range(3):
        for r in range(8):
            d = {str(c): [math.log(a / b) for a, b in zip(t_ref[e, : r + 1, c], t_arm[e, : r + 1, c])
                          if not (math.isnan(a) or math.isnan(b))] for c in range(4)}
            iv, fx = confidence_sequence(d), fixed_interval(d)
            if math.isfinite(iv.estimate):
                assert lk.est[e, r] == pytest.approx(iv.estimate, rel=1e-12, abs=1e-15)
            assert hw[e, r] == pytest.approx(iv.high - iv.estimate, rel=1e-9)
            if math.isfinite(fx.high):
                assert lk.fixed.est[e, r] == pytest.approx(fx.estimate, rel=1e-12, abs=1e-15)
                assert math.sqrt(lk.fixed.var[e, r]) == pytest.approx(fx.se, rel=1e-9)
                assert lk.fixed.nu[e, r] == pytest.approx(fx.df, rel=1e-9)
            else:
                assert not np.isfinite(lk.fixed.var[e, r]) or lk.fixed.nu[e, r] < 1
