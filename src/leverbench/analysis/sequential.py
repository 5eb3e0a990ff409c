"""Sequential verdicts: does a lever pay, decided in as few repeats as the data allow.

**Data.**  One comparison (an arm against its reference ``vs``) over K cases.
Repeat r of case c ran on both arms (adjacent turns, in counterbalanced order
A B B A …); it gives a *pair* when both turns succeeded, and its log-ratio

    d[c, r] = log(T_ref[c, r] / T_arm[c, r])          (> 0: the arm is faster)

A failed (or not yet run) turn leaves its pair out; the other pairs of the
case stay.

**Model and estimand.**  d[c, r] = θ_c + ε[c, r], ε independent N(0, σ²).
θ_c is a fixed effect per case (cases differ in their true ratio: a cache
helps a long prompt more than a short one); the cases are these cases, not a
sample of all prompts.  The estimand is the mean log-ratio over them,
θ = (1/K) Σ_c θ_c, reported as ratio = exp(θ) (the geometric mean of the
per-case ratios; the summary's *total* multiplier Σ ref / Σ arm weights long
cases more).  With n_c pairs in case c and d̄_c their mean:

    θ̂ = (1/K) Σ_c d̄_c
    W = Σ_c Σ_r (d[c, r] − d̄_c)²        pooled within-case sum of squares
    ν = Σ_c n_c − K                       its degrees of freedom
    M = K² / Σ_c (1/n_c)                  Var θ̂ = σ² / M  (M = K·n when balanced)

The variance is pooled over cases: one σ for all (a common coefficient of
variation of turn times, since the noise is on the log scale); the case
effects θ_c never enter W, so differences between cases cost nothing.  A case
with no pair yet is left out of θ (reported in ``missing_cases``).

**The confidence sequence** (anytime-valid: it may be looked at after every
pair and the comparison stopped whenever it decides).  For a candidate θ0 the
mixture likelihood ratio — flat over the case effects, right Haar (dσ/σ) over
σ, and δ = (θ − θ0)/σ ~ N(0, g) under the alternative — is, in closed form,

    B(θ0) = (1 + M·g)^(−1/2) · [ (W + M(θ̂−θ0)²) / (W + M(θ̂−θ0)²/(1 + M·g)) ]^((ν+1)/2)

Under θ = θ0 it is a nonnegative martingale with mean 1 (in the filtration of
the data's invariants under scale and per-case shifts), whatever σ and the
θ_c; Ville's inequality gives P(some look has B(θ) ≥ 1/α) ≤ α, so

    CS = {θ0 : B(θ0) < 1/α} = θ̂ ± √(u·W/M),
    G = 1 + M·g,  A = (√G / α)^(2/(ν+1)),  u = (A − 1) / (1 − A/G)   (the whole line when A ≥ G)

covers θ at every look at once with probability ≥ 1 − α (α = 1 − confidence),
hence at any data-dependent stopping time.  This is the scale-invariant
Gaussian-mixture t-test martingale of Wang & Ramdas, "Anytime-valid t-tests and
confidence sequences for Gaussian means with unknown variance" (arXiv:2310.03722,
2023), which refines Lai, "On confidence sequences" (Ann. Statist. 4, 1976);
the closed form is the fixed-g Bayes factor of Rouder et al., "Bayesian t
tests" (Psychon. Bull. Rev. 16, 2009); the case effects are handled as a
further invariance (right Haar = flat over shifts; Pérez-Ortiz, Lardy,
de Heide & Grünwald, "E-statistics, group invariance and anytime-valid
testing", Ann. Statist., 2024), which turns one sample of N pairs into
ν = N − K degrees of freedom and precision M (tests/test_sequential.py checks
the closed form against numerical integration).  g = :data:`MIXTURE_G` = 1
(prior sd of one standardized effect = one pair's noise sd) was chosen in the
simulation study (benchmarks/adaptive_study.py) on other seeds than the tests
check; any fixed g is valid, g only moves where the sequence is tightest.

**Assumptions.**  (1) Repeats are independent: a turn's noise does not carry
over to the next repeat (no cache state or queue left behind that the next
repeat sees differently).  (2) Pairing: both turns of a pair are the same
call sequence, run back to back; what they share (the prompt, the machine's
state at that moment) cancels in d.  (3) Per-case effects may differ freely
(fixed effects) but do not change during the run.  (4) Log-ratio noise is
roughly normal with one variance for all cases (lognormal turn times with a
common CV make it exactly so); heavier tails or unequal CVs widen the real
error a little (the study shows the realized miss rate stays below α).
(5) Drift: a slow change of the machine or endpoint that multiplies both arms'
times alike is cancelled to first order within a pair (adjacent turns), and
the counterbalanced order (which arm goes first alternates over cases and
repeats) cancels the remaining first-order term across pairs; a drift that
hits one arm only (its cache warming up) is not cancelled, and the drift
sentinels (:mod:`.drift`) still judge it.  (6) Whether a turn fails does not
depend on how long it would have taken.

**Verdict** (:func:`verdict_of`), with m = min_effect > 1, on the ratio's
interval [low, high], checked in this order:

1. ``pays`` when low > m;
2. ``equivalent`` when 1/m < low and high < m (neither faster nor slower by m);
3. ``does not pay`` when high < m (it may be slower);
4. else none: ``open`` while the budget lasts, ``undecided`` when it is spent.

"pays" is disjoint from the others (low ≤ high), so its place only matters for
clarity; "equivalent" implies high < m and is checked before "does not pay"
because it says more.  No verdict before ``min_repeats`` repeats (2, as the
guard's :data:`.guard.MIN_REPEATS`), and a comparison the guard refuses never
"pays" (:func:`decide`).

**The fixed design** the report compares against (:func:`fixed_design_repeats`):
the smallest number of repeats n per case for which the classical (non
sequential) t-interval at the same confidence, θ̂ ± t_{1−α/2, K(n−1)}·s/√(K·n),
reaches the same verdict with a stated power when the true θ and σ are the
observed ones — the power of a paired t-test from the noncentral t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..errors import BadInput
from .guard import MIN_REPEATS

MIXTURE_G = 1.0
PAYS, EQUIVALENT, DOES_NOT_PAY = "pays", "equivalent", "does not pay"
OPEN, UNDECIDED = "open", "undecided"
# verdict codes of the vectorised rule (:func:`verdict_codes`): 0 = none yet
VERDICTS = (None, PAYS, EQUIVALENT, DOES_NOT_PAY)

Times = Mapping[int, "float | None"] | Sequence["float | None"]


def check_parameters(min_effect: float = 1.10, confidence: float = 0.95, min_repeats: int = MIN_REPEATS,
                     max_repeats: int | None = None) -> None:
    """Raise :class:`BadInput` naming the parameter when one is out of range."""
    if not (isinstance(min_effect, (int, float)) and math.isfinite(min_effect) and min_effect > 1.0):
        raise BadInput(f"adaptive min_effect must be a ratio above 1 (e.g. 1.10 for 10 % faster), got {min_effect!r}")
    if not (isinstance(confidence, (int, float)) and 0.0 < confidence < 1.0):
        raise BadInput(f"adaptive confidence must be between 0 and 1 (e.g. 0.95), got {confidence!r}")
    if not (isinstance(min_repeats, int) and min_repeats >= 1):
        raise BadInput(f"min_repeats must be a whole number ≥ 1, got {min_repeats!r}")
    if max_repeats is not None and not (isinstance(max_repeats, int) and max_repeats >= min_repeats):
        raise BadInput(f"adaptive max_repeats must be a whole number ≥ {min_repeats} (the repeats before any "
                       f"verdict), got {max_repeats!r}")


def _by_repeat(times: Times) -> dict[int, float | None]:
    return dict(times) if isinstance(times, Mapping) else dict(enumerate(times))


def log_ratios(ref: Times, arm: Times) -> list[float]:
    """One case's complete pairs, by repeat: log(ref[r] / arm[r]) for every repeat r where both arms have a
    successful turn (a time, not None or NaN).  *ref*, *arm*: repeat → seconds (or a list indexed by repeat)."""
    a, b = _by_repeat(ref), _by_repeat(arm)
    out = []
    for r in sorted(a.keys() & b.keys()):
        t_ref, t_arm = a[r], b[r]
        if t_ref is None or t_arm is None or math.isnan(t_ref) or math.isnan(t_arm):
            continue
        if t_ref <= 0 or t_arm <= 0 or math.isinf(t_ref) or math.isinf(t_arm):
            raise BadInput(f"turn times must be positive and finite seconds; repeat {r} has {t_ref!r} and {t_arm!r}")
        out.append(math.log(t_ref / t_arm))
    return out


def paired_log_ratios(ref: Mapping[str, Times], arm: Mapping[str, Times]) -> dict[str, list[float]]:
    """Per case of *ref* (the reference arm's turn times by case, then repeat), :func:`log_ratios`
    against *arm*'s; a case *arm* lacks has no pairs."""
    return {case: log_ratios(times, arm.get(case, {})) for case, times in ref.items()}


def pool(n: np.ndarray, mean: np.ndarray, ss: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(θ̂, W, ν, M) from per-case pair counts *n*, means and within-case sums of squares *ss* (last axis =
    cases; any leading axes are looks or simulated experiments).  Cases with n = 0 are left out:
    θ̂ = mean of the others' means, W = Σ ss, ν = Σ n − K', M = K'² / Σ 1/n over the K' cases with pairs."""
    n = np.asarray(n, dtype=float)
    used = n > 0
    k = used.sum(-1)
    safe_n = np.where(used, n, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = np.where(used, mean, 0.0).sum(-1) / k
        inv = np.where(used, 1.0 / safe_n, 0.0).sum(-1)
        m = np.where(k > 0, k * k / np.where(inv > 0, inv, 1.0), 0.0)
    w = np.where(used, np.maximum(ss, 0.0), 0.0).sum(-1)
    nu = n.sum(-1) - k
    return est, w, nu, m


def cs_half_width(w, nu, m, confidence: float = 0.95, g: float = MIXTURE_G):
    """Half-width of the confidence sequence on the log scale: √(u·W/M) with
    G = 1 + M·g, A = (√G/α)^(2/(ν+1)), u = (A − 1)/(1 − A/G); inf when A ≥ G or ν < 1.  Vectorised."""
    w, nu, m = (np.asarray(x, dtype=float) for x in (w, nu, m))
    alpha = 1.0 - confidence
    big_g = 1.0 + m * g
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        a = (np.sqrt(big_g) / alpha) ** (2.0 / (np.maximum(nu, 1.0) + 1.0))
        u = (a - 1.0) / (1.0 - a / big_g)
        hw = np.sqrt(u * w / np.where(m > 0, m, 1.0))
    out = np.where((nu >= 1) & (a < big_g) & (m > 0), hw, np.inf)
    return float(out) if out.ndim == 0 else out


def mixture_evalue(d: Mapping[str, Sequence[float]], theta0: float, g: float = MIXTURE_G) -> float:
    """B(θ0) of the module docstring for the pairs *d* (case → log-ratios): the evidence against
    θ = θ0; the confidence sequence holds the θ0 with B(θ0) < 1/α.  1 when ν < 1 (no evidence yet)."""
    est, w, nu, m = _sufficient(d)
    if nu < 1:
        return 1.0
    big_g = 1.0 + m * g
    q = m * (est - theta0) ** 2
    if w == 0 and q == 0:  # θ0 = θ̂ with no spread: the bracket is 0/0; its limit as W → 0 is 1
        return float(big_g ** -0.5)
    return float(big_g ** -0.5 * ((w + q) / (w + q / big_g)) ** ((nu + 1) / 2))


def t_half_width(w, nu, m, confidence: float = 0.95):
    """Half-width of the classical (fixed-n, looked at once) t-interval on the log scale:
    t_{1−α/2, ν} · √(W/ν / M); inf when ν < 1.  Vectorised.  Valid only for a design fixed in advance."""
    from scipy.stats import t as student_t

    w, nu, m = (np.asarray(x, dtype=float) for x in (w, nu, m))
    ok = (nu >= 1) & (m > 0)
    safe_nu = np.where(ok, nu, 1.0)
    q = student_t.ppf(0.5 + confidence / 2.0, safe_nu)
    out = np.where(ok, q * np.sqrt(w / safe_nu / np.where(m > 0, m, 1.0)), np.inf)
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class Interval:
    """An interval for the mean log-ratio θ over the cases with pairs; ratio = exp(θ̂), [ratio_low,
    ratio_high] = exp of the log bounds.  ``sd``: the pooled sd of one pair's log-ratio, √(W/ν)."""

    estimate: float
    low: float
    high: float
    confidence: float
    pairs: dict[str, int]
    df: int
    information: float
    sd: float | None
    missing_cases: list[str] = field(default_factory=list)
    anytime: bool = True

    @property
    def ratio(self) -> float | None:
        return math.exp(self.estimate) if math.isfinite(self.estimate) else None

    @property
    def ratio_low(self) -> float:
        return math.exp(self.low) if self.low > -math.inf else 0.0

    @property
    def ratio_high(self) -> float:
        return math.exp(self.high) if self.high < math.inf else math.inf


def _case_stats(d: Mapping[str, Sequence[float]]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    names = list(d)
    n = np.array([len(d[c]) for c in names], dtype=float)
    mean = np.array([float(np.mean(d[c])) if len(d[c]) else 0.0 for c in names])
    ss = np.array([float(np.sum((np.asarray(d[c], dtype=float) - mu) ** 2)) if len(d[c]) else 0.0
                   for c, mu in zip(names, mean)])
    return names, n, mean, ss


def _sufficient(d: Mapping[str, Sequence[float]]) -> tuple[float, float, float, float]:
    _, n, mean, ss = _case_stats(d)
    if not len(n) or not n.any():
        return math.nan, 0.0, 0.0, 0.0
    est, w, nu, m = pool(n, mean, ss)
    return float(est), float(w), float(nu), float(m)


def _interval(d: Mapping[str, Sequence[float]], confidence: float, half_width, anytime: bool) -> Interval:
    check_parameters(confidence=confidence)
    for c, xs in d.items():
        if any(not math.isfinite(x) for x in xs):
            raise BadInput(f"case {c!r}: log-ratios must be finite numbers, got {list(xs)!r}")
    names, n, _, _ = _case_stats(d)
    est, w, nu, m = _sufficient(d)
    hw = half_width(w, nu, m, confidence) if nu >= 1 else math.inf
    return Interval(estimate=est, low=est - hw if math.isfinite(est) else -math.inf,
                    high=est + hw if math.isfinite(est) else math.inf, confidence=confidence,
                    pairs={c: int(k) for c, k in zip(names, n)}, df=int(nu), information=m,
                    sd=math.sqrt(w / nu) if nu >= 1 else None,
                    missing_cases=[c for c, k in zip(names, n) if k == 0], anytime=anytime)


def confidence_sequence(d: Mapping[str, Sequence[float]], confidence: float = 0.95,
                        g: float = MIXTURE_G) -> Interval:
    """The anytime-valid interval for θ from the pairs so far (*d*: case → log-ratios, e.g. from
    :func:`paired_log_ratios`): θ̂ ± √(u·W/M) (module docstring).  Unbounded until ν ≥ 1 and the evidence
    can exclude anything (A < G); a point when W = 0 (no spread) and it can."""
    return _interval(d, confidence, lambda w, nu, m, c: cs_half_width(w, nu, m, c, g), anytime=True)


def fixed_interval(d: Mapping[str, Sequence[float]], confidence: float = 0.95) -> Interval:
    """The classical t-interval θ̂ ± t_{1−α/2, ν}·√(W/ν/M), for a run with a fixed number of repeats
    looked at once (not valid when the run was stopped by looking at it: use :func:`confidence_sequence`)."""
    return _interval(d, confidence, t_half_width, anytime=False)


def verdict_codes(low, high, log_min_effect: float):
    """The verdict rule on log bounds, vectorised: 1 pays (low > log m), 2 equivalent (−log m < low and
    high < log m), 3 does not pay (high < log m), 0 none; checked in that order (see :data:`VERDICTS`)."""
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    out = np.select([low > log_min_effect, (low > -log_min_effect) & (high < log_min_effect),
                     high < log_min_effect], [1, 2, 3], 0)
    return int(out) if out.ndim == 0 else out


def verdict_of(ratio_low: float, ratio_high: float, min_effect: float) -> str | None:
    """"pays", "equivalent", "does not pay" or None (not decided) for the ratio's interval
    [ratio_low, ratio_high] against min_effect, in the order of the module docstring."""
    check_parameters(min_effect=min_effect)
    low = math.log(ratio_low) if ratio_low > 0 else -math.inf
    high = math.log(ratio_high) if ratio_high < math.inf else math.inf
    return VERDICTS[verdict_codes(low, high, math.log(min_effect))]


def decide(d: Mapping[str, Sequence[float]], *, repeats: int, max_repeats: int, min_effect: float = 1.10,
           confidence: float = 0.95, min_repeats: int = MIN_REPEATS, budget_spent: bool = False,
           refused: str | None = None, power: float = 0.90, g: float = MIXTURE_G) -> dict:
    """One look at one comparison after *repeats* repeats (the look number: repeats run on both arms,
    pairs complete or not), with *d* its pairs by case.

    verdict: :func:`verdict_of` on the confidence sequence, once repeats ≥ *min_repeats*; else, or when
    undecided, "open" while repeats < *max_repeats* and not *budget_spent* (e.g. ``max_gpu_hours``), and
    "undecided" after.  *refused*: the guard's reason not to cite the comparison — then it never "pays"
    (an interval above min_effect becomes "undecided", and the comparison stops: more repeats will not
    make it citable).  ``stop``: whether to add no more repeats to this comparison.
    Returns {verdict, stop, ratio, low, high, confidence, repeats, pairs (per case), df, sd,
    missing_cases, reason, fixed_design_repeats (:func:`fixed_design_repeats` at *power*, for the
    verdict reached or the one the estimate points to)}."""
    check_parameters(min_effect, confidence, min_repeats, max_repeats)
    iv = confidence_sequence(d, confidence, g)
    found = verdict_of(iv.ratio_low, iv.ratio_high, min_effect) if repeats >= min_repeats else None
    fixed = None
    if iv.sd is not None and math.isfinite(iv.estimate):
        fixed = fixed_design_repeats(iv.estimate, iv.sd, len(iv.pairs) - len(iv.missing_cases), min_effect,
                                     confidence, power, found)
    reason = None
    if found == PAYS and refused:
        found, reason = UNDECIDED, f"the guard refuses this comparison ({refused}): a refused pair never pays"
    elif refused:
        reason = f"not citable: {refused}"
    out_of_budget = repeats >= max_repeats or budget_spent
    verdict = found or (UNDECIDED if out_of_budget else OPEN)
    return {"verdict": verdict, "stop": verdict != OPEN, "ratio": iv.ratio, "low": iv.ratio_low,
            "high": iv.ratio_high, "confidence": confidence, "repeats": repeats, "pairs": iv.pairs, "df": iv.df,
            "sd": iv.sd, "missing_cases": iv.missing_cases, "reason": reason, "fixed_design_repeats": fixed,
            "fixed_design_power": power}


def fixed_power(n, estimate: float, sd: float, cases: int, min_effect: float, confidence: float = 0.95,
                verdict: str = PAYS):
    """Probability that a fixed design of *n* repeats per case (K = *cases*) reaches *verdict* with the
    t-interval at *confidence*, when the true mean log-ratio is *estimate* and one pair's sd is *sd*.
    With ν = K(n−1), se = sd/√(K·n), q = t_{1−α/2, ν}, T'(ν, λ) noncentral t:
    pays: P(T'(ν, (θ − log m)/se) > q); does not pay: P(T'(ν, (log m − θ)/se) > q); equivalent: the
    union bound 1 − P(T'(ν, (log m − θ)/se) ≤ q) − P(T'(ν, (θ + log m)/se) ≤ q), at least 0.  Vectorised in n."""
    from scipy.stats import nct
    from scipy.stats import t as student_t

    n = np.asarray(n, dtype=float)
    nu = cases * (n - 1.0)
    se = sd / np.sqrt(cases * n)
    q = student_t.ppf(0.5 + confidence / 2.0, nu)
    lm = math.log(min_effect)
    if verdict == PAYS:
        p = nct.sf(q, nu, (estimate - lm) / se)
    elif verdict == DOES_NOT_PAY:
        p = nct.sf(q, nu, (lm - estimate) / se)
    elif verdict == EQUIVALENT:
        p = np.maximum(0.0, 1.0 - nct.cdf(q, nu, (lm - estimate) / se) - nct.cdf(q, nu, (estimate + lm) / se))
    else:
        raise BadInput(f"no fixed design for the verdict {verdict!r}")
    return float(p) if np.ndim(p) == 0 else p


def fixed_design_repeats(estimate: float, sd: float, cases: int, min_effect: float, confidence: float = 0.95,
                         power: float = 0.90, verdict: str | None = None, max_n: int = 10_000) -> int | None:
    """Repeats per case a fixed (non-sequential) design needs to reach *verdict* with probability ≥ *power*
    when the true mean log-ratio and pair sd are the observed *estimate* and *sd* (:func:`fixed_power`):
    the smallest n ≥ 2 (ν ≥ 1), or None when no n ≤ *max_n* does (an effect at the margin).  *verdict*
    None: the one the estimate points to — "pays" above log(min_effect), else "does not pay".
    sd = 0: 2 (any fixed design decides at once when the effect is not at the margin)."""
    check_parameters(min_effect, confidence)
    if not (0.0 < power < 1.0):
        raise BadInput(f"power must be between 0 and 1 (e.g. 0.90), got {power!r}")
    if cases < 1:
        return None
    lm = math.log(min_effect)
    verdict = verdict or (PAYS if estimate > lm else DOES_NOT_PAY)
    margin = {PAYS: estimate - lm, DOES_NOT_PAY: lm - estimate,
              EQUIVALENT: min(lm - estimate, estimate + lm)}.get(verdict)
    if margin is None:
        raise BadInput(f"no fixed design for the verdict {verdict!r}")
    if margin <= 0:
        return None
    if sd == 0:
        return 2
    lo, hi = 2, 2
    while fixed_power(hi, estimate, sd, cases, min_effect, confidence, verdict) < power:  # power grows with n
        if hi >= max_n:
            return None
        lo, hi = hi + 1, min(2 * hi, max_n)
    while lo < hi:
        mid = (lo + hi) // 2
        if fixed_power(mid, estimate, sd, cases, min_effect, confidence, verdict) >= power:
            hi = mid
        else:
            lo = mid + 1
    return hi
