# size: one idea, the statistics a verdict rests on (the confidence sequence, the fixed interval and the fixed
# design it is held against): a quarter of it is the docstring's model and validity argument (issues 16, 22).
"""Sequential verdicts: does a lever pay, decided in as few repeats as the data allow.

**Data.**  One comparison (an arm against its reference ``vs``) over K cases.
Repeat r of case c ran on both arms (adjacent turns, in counterbalanced order
A B B A …); it gives a *pair* when both turns succeeded, and its log-ratio

    d[c, r] = log(T_ref[c, r] / T_arm[c, r])          (> 0: the arm is faster)

A failed (or not yet run) turn leaves its pair out; the other pairs of the
case stay.  Case c's pairs, in repeat order, are x[c, 1], x[c, 2], … (n_c of them).

**Model and estimand.**  x[c, j] = θ_c + ε[c, j], ε independent N(0, σ_c²):
each case its own true ratio θ_c (a fixed effect: a cache helps a long prompt
more than a short one) and its own noise σ_c (a deterministic short case
beside a tool-calling one is the normal agent mix); the cases are these
cases, not a sample of all prompts.  The estimand is the mean log-ratio over
them, θ = (1/K) Σ_c θ_c, reported as ratio = exp(θ) (the geometric mean of the
per-case ratios; the summary's *total* multiplier Σ ref / Σ arm weights long
cases more).  A case with no pair yet is left out of θ (K counts the cases with
pairs; the others are reported in ``missing_cases``).

**The confidence sequence: matched repeats.**  With J = min_c n_c, the j-th
matched repeat is the mean over the cases of each case's j-th pair,

    D_j = (1/K) Σ_c x[c, j]   (j = 1 … J),    θ̂ = (1/J) Σ_j D_j,    W = Σ_j (D_j − θ̂)²,    ν = J − 1,  M = J

(pairs of a case beyond J wait for the lagging case).  D_1, D_2, … are
independent N(θ, τ²) with τ² = Σ_c σ_c² / K², *whatever the σ_c*: each case's
own variance enters through τ², which the D_j estimate themselves.  For one
stream of independent normal observations with unknown scale, the mixture
likelihood ratio — right Haar (dτ/τ) over τ, δ = (θ − θ0)/τ ~ N(0, g) under the
alternative — is, in closed form,

    B(θ0) = (1 + M·g)^(−1/2) · [ (W + M(θ̂−θ0)²) / (W + M(θ̂−θ0)²/(1 + M·g)) ]^((ν+1)/2)

and under θ = θ0 it is a nonnegative martingale with mean 1 in J (in the
filtration of the stream's scale invariants), whatever τ.  Ville's inequality
gives P(some J has B(θ) ≥ 1/α) ≤ α, so

    CS = {θ0 : B(θ0) < 1/α} = θ̂ ± √(u·W/M),
    G = 1 + M·g,  A = (√G / α)^(2/(ν+1)),  u = (A − 1) / (1 − A/G)   (the whole line when A ≥ G)

covers θ at every J at once with probability ≥ 1 − α (α = 1 − confidence).  A
look after any repeat shows the sequence at that look's J (J moves only when
the lagging case gets its next pair, and whether a pair fails is independent of
its value, assumption 6), so the bound over all J covers every look at once,
hence any data-dependent stopping time.  Sources: the scale-invariant
Gaussian-mixture t-test martingale of Wang & Ramdas, "Anytime-valid t-tests and
confidence sequences for Gaussian means with unknown variance"
(arXiv:2310.03722, 2023), refining Lai, "On confidence sequences" (Ann.
Statist. 4, 1976), the closed form being the fixed-g Bayes factor of Rouder et
al., "Bayesian t tests" (Psychon. Bull. Rev. 16, 2009) (tests/test_sequential.py
checks it against numerical integration); matching the j-th observations of
samples of unequal variance into one stream is Scheffé's exact solution of the
Behrens–Fisher problem ("On solutions of the Behrens–Fisher problem, based on
the t-distribution", Ann. Math. Statist. 14, 1943).  The mixture variance is
g = :data:`MIXTURE_G` · K in units of τ² (:func:`stream_g`): a prior sd of the
effect equal to the root mean square over cases of one pair's noise sd (K τ² =
mean σ_c²); chosen in the simulation study (benchmarks/adaptive_study.py) on
other seeds than the tests check.  Any g fixed before the data (K is the
design's) is valid; g only moves where the sequence is tightest.

**Why matched repeats and not a pooled σ, nor a product over cases.**  Pooling
W over cases (Σ_c Σ_j (x[c, j] − x̄_c)², ν = Σ n_c − K) is exact only when the
σ_c are equal: with one case ten times noisier than three others the pooled W
is the noisy case's, with the few degrees of freedom of that case but counted
as K times as many, and the sequence missed the truth in 7–15 % of simulated
runs (issue 22; the study's table 2 keeps it as "pooled σ").  No exact
studentization does better than J − 1: a quadratic form Q in the within-case
residuals with Q/τ² ~ χ²_ν for every (σ_c) must be so when all the noise is in
one case c, where only that case's n_c − 1 residual coordinates carry it, so ν ≤
min_c n_c − 1 = J − 1 (the obstacle of the Behrens–Fisher problem, whose exact
similar tests are irregular: Linnik, "Statistical problems with nuisance
parameters", AMS 1968).  A product of per-case t-martingales (each case's own
σ_c, the same g), minimised over the
null set {μ : mean μ_c = θ0} (valid: it is at most the product at the true
θ_c), is unbounded until (n − K)/2 · log(1 + n·g) ≥ log(1/α) — a case taking
the whole deviation saturates at (1 + n·g)^((n−1)/2) while the K − 1 others sit
at their minimum (1 + n·g)^(−1/2) — so never with n ≤ K repeats; the matched
stream needs (J − 1)/2 · log(1 + J·g) ≥ log(1/α) whatever K.  The price of
not assuming one σ: with equal noise, fewer degrees of freedom than the pooled
form (the study: a true 1.3x decided after 5.5 repeats on average instead of
3.5; with one case ten times noisier the same 5.5, where the pooled form missed
the truth at the margin in 10.5 % and said "pays" in 5.2 %).

**No spread** (``no_spread``): when every matched repeat (for the fixed
interval: every repeat of every case) gave the same log-ratio, W = 0 and the
formula would give the point θ̂ and call it a 95 % interval.  Zero spread of
measured wall-clock times means the timer or the engine is deterministic (a
coarse clock, a replayed or simulated server): there is no noise in the data
to bound, and a confidence statement about it would be a label without
content.  So the estimate stays (the measured ratio, exact for these turns),
the interval is the whole line, no verdict is given (``open`` while the budget
lasts, then ``undecided``), and :attr:`Interval.reason` says why.  A case
without spread beside others with it is an ordinary interval.

**Assumptions.**  (1) Repeats are independent: a turn's noise does not carry
over to the next repeat (no cache state or queue left behind that the next
repeat sees differently).  (2) Pairing: both turns of a pair are the same
call sequence, run back to back; what they share (the prompt, the machine's
state at that moment) cancels in d.  (3) Per-case effects may differ freely
(fixed effects) but do not change during the run.  (4) Log-ratio noise is
roughly normal within each case, with a variance of its own (heavier tails
widen the real error a little: the study shows the realized miss rate stays
below α).  (5) Drift: a slow change of the machine or endpoint that multiplies
both arms' times alike is cancelled to first order within a pair (adjacent
turns), and the counterbalanced order (which arm goes first alternates over
cases and repeats) cancels the remaining first-order term across pairs; a
drift that hits one arm only (its cache warming up) is not cancelled, and the
drift sentinels (:mod:`.drift`) still judge it.  (6) Whether a turn fails
does not depend on how long it would have taken.  The guarantee is for the set
of cases with pairs; a case whose first pair comes after a look starts the
sequence of a new estimand (with every case paired from the first look, as in
a run where no case always fails, that is the whole run).

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
"pays" (:func:`labelled`).

**The fixed interval** (:func:`fixed_interval`, for a run whose repeats were
fixed in advance and that is looked at once): with all pairs of each case,
s_c² = Σ_r (d[c, r] − d̄_c)² / (n_c − 1), v_c = s_c² / n_c,

    θ̂ = (1/K) Σ_c d̄_c,   se² = Σ_c v_c / K²,   ν = (Σ_c v_c)² / Σ_c v_c² / (n_c − 1),   θ̂ ± t_{1−α/2, ν} · se

— each case's own variance, with the Welch–Satterthwaite degrees of freedom
(Satterthwaite, Biometrics Bulletin 2, 1946; Welch, "The generalization of
'Student's' problem when several different population variances are involved",
Biometrika 34, 1947): ν is at most Σ (n_c − 1) (reached when the cases' sample
variances are alike) and falls to n − 1 when one case carries the noise, where
one pooled σ would claim K(n − 1) (and missed the truth in 13 % of 3-repeat
designs with one case ten times noisier).
It is an approximation, not exact: the study (table 5) measures 6.5 % misses
at 3 repeats in that case (7.9 % at 2, 5.2 % at 6), and 1.6–5 % with equal
noise.  The exact alternative, the matched repeats' t-interval θ̂ ± t_{1−α/2,
J−1}·√(W/ν/M), costs power where it matters most for a fixed design: 59 %
against Welch's 91 % "pays" at a true 1.3x with 3 repeats and equal noise.  A case
with one pair has no variance: no interval.

**The fixed design** the report compares against (:func:`fixed_design_repeats`):
the smallest number of repeats n per case for which that fixed interval reaches
the same verdict with a stated power when the true θ and per-case noise are the
observed ones (sd: the root mean square over cases of one pair's sd; each
case's share of the noise variance) — the power given the cases' sample
variances is a normal probability, and its expectation over them (independent
scaled χ²_{n−1}, which also set the Welch–Satterthwaite ν) is taken on fixed
quasi-random draws (:func:`fixed_power`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Final, Literal, Mapping, Sequence, overload

import numpy as np
import numpy.typing as npt
from typing_extensions import TypedDict

from ...errors import BadInput
from ..base.guard import MIN_REPEATS

if TYPE_CHECKING:
    from ...schema.experiment_rows import Verdict

MIXTURE_G = 1.0  # prior variance of a standardized effect, in units of the mean over cases of one pair's noise variance
PAYS: Final = "pays"
EQUIVALENT: Final = "equivalent"
DOES_NOT_PAY: Final = "does not pay"
OPEN: Final = "open"
UNDECIDED: Final = "undecided"
#: A verdict an interval reaches (:func:`verdict_of`); "open" and "undecided" are a comparison's without one.
Reached = Literal["pays", "equivalent", "does not pay"]
# verdict codes of the vectorised rule (:func:`verdict_codes`): 0 = none yet
VERDICTS: tuple[Reached | None, ...] = (None, PAYS, EQUIVALENT, DOES_NOT_PAY)
NO_SPREAD = ("no spread: each case gave the same ratio on every repeat, so the timer or the engine is deterministic; "
             "the ratio is the measured one, exact for these turns, but with no noise to bound this is not a "
             "confidence interval and gives no verdict")

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
    return log_ratio_arrays(*_seconds(_by_repeat(ref)), *_seconds(_by_repeat(arm)))


def log_ratio_arrays(repeats_ref: np.ndarray, ref: np.ndarray, repeats_arm: np.ndarray, arm: np.ndarray
                     ) -> list[float]:
    """:func:`log_ratios` of two arms' turns given as arrays: each one's repeat numbers (int64, distinct) and
    seconds (NaN: no successful turn)."""
    common, i, j = np.intersect1d(repeats_ref, repeats_arm, assume_unique=True, return_indices=True)
    t_ref, t_arm = ref[i], arm[j]
    both = ~(np.isnan(t_ref) | np.isnan(t_arm))
    common, t_ref, t_arm = common[both], t_ref[both], t_arm[both]
    bad = (t_ref <= 0) | (t_arm <= 0) | np.isinf(t_ref) | np.isinf(t_arm)
    if bad.any():
        k = int(np.argmax(bad))
        raise BadInput(f"turn times must be positive and finite seconds; repeat {int(common[k])} has "
                       f"{float(t_ref[k])!r} and {float(t_arm[k])!r}")
    return list(map(math.log, (t_ref / t_arm).tolist()))  # (math.log: numpy's may differ in the last bit)


def _seconds(times: dict[int, float | None]) -> tuple[np.ndarray, np.ndarray]:
    """(repeats, seconds) of *times* for :func:`log_ratio_arrays`; BadInput for a time that is no number."""
    if any(not isinstance(t, numbers.Real) for t in times.values() if t is not None):
        raise BadInput(f"turn times must be numbers of seconds or None, got {list(times.values())!r}")
    return (np.fromiter(times, np.int64, len(times)),
            np.array([math.nan if t is None else t for t in times.values()], dtype=float))


def paired_log_ratios(ref: Mapping[str, Times], arm: Mapping[str, Times]) -> dict[str, list[float]]:
    """Per case of *ref* (the reference arm's turn times by case, then repeat), :func:`log_ratios`
    against *arm*'s; a case *arm* lacks has no pairs."""
    return {case: log_ratios(times, arm.get(case, {})) for case, times in ref.items()}


@dataclass(frozen=True)
class Stream:
    """The matched repeats of the module docstring at one look (or at many: arrays over leading axes):
    θ̂, W, ν = J − 1, M = J, K (the cases with pairs) and ``flat`` (every D_j the same: no spread)."""

    est: np.ndarray
    w: np.ndarray
    nu: np.ndarray
    m: np.ndarray
    k: np.ndarray
    flat: np.ndarray


def matched(x: npt.ArrayLike, n: npt.ArrayLike) -> Stream:
    """The matched repeats from *x* (…, R, K): each case's pairs in repeat order, its first n_c valid (the rest
    anything, NaN included), and *n* (…, K) the pairs per case: D_j = the mean over the K cases with n_c > 0 of
    their j-th pair, j < J = their least n_c; θ̂ = mean D_j, W = Σ (D_j − θ̂)², ν = J − 1, M = J.  Vectorised
    over the leading axes (looks, simulated experiments); θ̂ NaN where no case has a pair."""
    x, n = np.asarray(x, dtype=float), np.asarray(n)
    used = n > 0
    k = used.sum(-1)
    most = np.iinfo(np.int64).max
    big_j = np.where(k > 0, np.where(used, n, most).min(-1, initial=most), 0)
    live = np.arange(x.shape[-2]) < big_j[..., None]                          # (…, R): j < J
    cells = live[..., :, None] & used[..., None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.where(cells, x, 0.0).sum(-1) / np.where(k > 0, k, 1)[..., None]  # (…, R): D_j
        est = np.where(big_j > 0, np.where(live, d, 0.0).sum(-1) / np.where(big_j > 0, big_j, 1), np.nan)
    dev = np.where(live, d - np.nan_to_num(est)[..., None], 0.0)
    w = (dev * dev).sum(-1)
    lo, hi = np.where(live, d, np.inf).min(-1), np.where(live, d, -np.inf).max(-1)
    return Stream(est, w, np.maximum(big_j - 1, 0).astype(float), big_j.astype(float), k, (big_j >= 2) & (lo == hi))


@overload
def stream_g(g: float, k: int) -> float: ...
@overload
def stream_g(g: float, k: np.ndarray) -> np.ndarray: ...

def stream_g(g: float, k: npt.ArrayLike) -> float | np.ndarray:
    """The mixture variance in units of the stream's τ² = Σ σ_c²/K²: g·K (a prior sd of the effect equal to the
    root mean square over the K cases of one pair's sd when *g* = 1)."""
    return g * np.asarray(k, dtype=float)


def welch(n: npt.ArrayLike, mean: npt.ArrayLike, ss: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(θ̂, se², ν) of the fixed interval from per-case pair counts *n*, means and within-case sums of squares
    *ss* (last axis = cases; leading axes vectorised): over the cases with n_c > 0, θ̂ = mean of their means,
    se² = Σ v_c / K² with v_c = ss_c / (n_c − 1) / n_c, ν = (Σ v_c)² / Σ v_c² / (n_c − 1) (Welch–Satterthwaite);
    se² = inf and ν = 0 when a case has a single pair (no variance); ν = Σ (n_c − 1) when se² = 0."""
    n = np.asarray(n, dtype=float)
    used = n > 0
    k = used.sum(-1)
    one = (used & (n < 2)).any(-1)
    safe = np.where(n > 1, n, 2.0)
    v = np.where(used & (n > 1), np.maximum(ss, 0.0) / (safe - 1.0) / safe, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = np.where(used, mean, 0.0).sum(-1) / np.where(k > 0, k, np.nan)
        total = v.sum(-1)
        var = np.where(one | (k == 0), np.inf, total / np.where(k > 0, k * k, 1))
        den = (v * v / (safe - 1.0)).sum(-1)
        nu = np.where(one | (k == 0), 0.0,
                      np.where(den > 0, total * total / np.where(den > 0, den, 1.0), np.where(used, n - 1, 0).sum(-1)))
    return est, var, nu


@overload
def cs_half_width(w: float, nu: float, m: float, confidence: float = 0.95, g: float = MIXTURE_G) -> float: ...
@overload
def cs_half_width(w: np.ndarray, nu: np.ndarray, m: np.ndarray, confidence: float = 0.95,
                  g: float | np.ndarray = MIXTURE_G) -> np.ndarray: ...

def cs_half_width(w: npt.ArrayLike, nu: npt.ArrayLike, m: npt.ArrayLike, confidence: float = 0.95,
                  g: npt.ArrayLike = MIXTURE_G) -> float | np.ndarray:
    """Half-width of the confidence sequence on the log scale: √(u·W/M) with
    G = 1 + M·g, A = (√G/α)^(2/(ν+1)), u = (A − 1)/(1 − A/G); inf when A ≥ G or ν < 1.  Vectorised (*g* too:
    the stream's, :func:`stream_g`)."""
    w, nu, m, g = (np.asarray(x, dtype=float) for x in (w, nu, m, g))
    alpha = 1.0 - confidence
    big_g = 1.0 + m * g
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        a = (np.sqrt(big_g) / alpha) ** (2.0 / (np.maximum(nu, 1.0) + 1.0))
        u = (a - 1.0) / (1.0 - a / big_g)
        hw = np.sqrt(u * w / np.where(m > 0, m, 1.0))
    out = np.where((nu >= 1) & (a < big_g) & (m > 0), hw, np.inf)
    return float(out) if out.ndim == 0 else out


@overload
def t_half_width(se: float, nu: float, confidence: float = 0.95) -> float: ...
@overload
def t_half_width(se: np.ndarray, nu: np.ndarray, confidence: float = 0.95) -> np.ndarray: ...

def t_half_width(se: npt.ArrayLike, nu: npt.ArrayLike, confidence: float = 0.95) -> float | np.ndarray:
    """Half-width of a classical (fixed-n, looked at once) t-interval on the log scale: t_{1−α/2, ν} · se; inf
    when ν < 1 or se is not finite.  Vectorised.  Valid only for a design fixed in advance."""
    from scipy.stats import t as student_t

    se, nu = np.asarray(se, dtype=float), np.asarray(nu, dtype=float)
    ok = (nu >= 1) & np.isfinite(se)
    q = student_t.ppf(0.5 + confidence / 2.0, np.where(ok, nu, 1.0))
    out = np.where(ok, q * np.where(ok, se, 0.0), np.inf)
    return float(out) if out.ndim == 0 else out


def _padded(d: Mapping[str, Sequence[float]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(case names, x (R, K) NaN-padded, n (K,)) of the pairs *d*."""
    names = list(d)
    n = np.array([len(d[c]) for c in names], dtype=np.int64)
    x = np.full((max(int(n.max(initial=0)), 1), len(names)), np.nan)
    for i, c in enumerate(names):
        x[: n[i], i] = d[c]
    return names, x, n


def _case_stats(d: Mapping[str, Sequence[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, mean, within-case sum of squares) per case of *d*, all its pairs."""
    n = np.array([len(xs) for xs in d.values()], dtype=float)
    mean = np.array([float(np.mean(xs)) if len(xs) else 0.0 for xs in d.values()])
    ss = np.array([float(np.sum((np.asarray(xs, dtype=float) - mu) ** 2)) if len(xs) else 0.0
                   for xs, mu in zip(d.values(), mean)])
    return n, mean, ss


def mixture_evalue(d: Mapping[str, Sequence[float]], theta0: float, g: float = MIXTURE_G) -> float:
    """B(θ0) of the module docstring for the matched repeats of the pairs *d* (case → log-ratios): the evidence
    against θ = θ0; the confidence sequence holds the θ0 with B(θ0) < 1/α.  1 when ν < 1 (no evidence yet).
    Without spread (W = 0) the formula is degenerate — G^(ν/2) against every θ0 ≠ θ̂ — and the confidence
    sequence does not use it (module docstring, "No spread")."""
    _, x, n = _padded(d)
    s = matched(x, n)
    est, w, nu, m = float(s.est), float(s.w), float(s.nu), float(s.m)
    if nu < 1:
        return 1.0
    big_g = 1.0 + m * float(stream_g(g, s.k))
    q = m * (est - theta0) ** 2
    if w == 0 and q == 0:  # θ0 = θ̂ with no spread: the bracket is 0/0; its limit as W → 0 is 1
        return float(big_g ** -0.5)
    return float(big_g ** -0.5 * ((w + q) / (w + q / big_g)) ** ((nu + 1) / 2))


@dataclass(frozen=True)
class Interval:
    """An interval for θ, the mean log-ratio over the cases with pairs; ratio = exp(θ̂), [ratio_low, ratio_high]
    = exp of the log bounds.  ``df``: the degrees of freedom of its noise estimate (J − 1 of the matched repeats;
    Welch–Satterthwaite for the fixed interval); ``se``: its standard error of θ̂ (None: none yet, or no
    spread); ``sd``: the root mean square over cases of one pair's sd, each case's from all its pairs (None when a
    case has one pair, or without spread); ``weights``: each case's share of the noise variance, s_c² / Σ s², what
    the fixed design is planned on (:func:`fixed_power`; None with ``sd``); ``no_spread``: W = 0, so no interval
    (the whole line) and :attr:`reason` says why."""

    estimate: float
    low: float
    high: float
    confidence: float
    pairs: dict[str, int]
    df: float
    se: float | None
    sd: float | None
    weights: tuple[float, ...] | None = None
    missing_cases: list[str] = field(default_factory=list)
    anytime: bool = True
    no_spread: bool = False

    @property
    def ratio(self) -> float | None:
        return math.exp(self.estimate) if math.isfinite(self.estimate) else None

    @property
    def ratio_low(self) -> float:
        return math.exp(self.low) if self.low > -math.inf else 0.0

    @property
    def ratio_high(self) -> float:
        return math.exp(self.high) if self.high < math.inf else math.inf

    @property
    def reason(self) -> str | None:
        """Why the interval says nothing though the data have degrees of freedom: :data:`NO_SPREAD`; else None."""
        return NO_SPREAD if self.no_spread else None


def _noise(n: np.ndarray, ss: np.ndarray) -> tuple[float | None, tuple[float, ...] | None]:
    """(sd, weights) of :class:`Interval` from the cases' pair counts and sums of squares (cases with pairs)."""
    n, ss = n[n > 0], ss[n > 0]
    if not len(n) or (n < 2).any():
        return None, None
    s2 = np.maximum(ss, 0.0) / (n - 1.0)
    total = float(np.sum(s2))
    if total == 0:
        return None, None
    return math.sqrt(total / len(s2)), tuple(float(x) for x in s2 / total)


def _checked(d: Mapping[str, Sequence[float]], confidence: float) -> None:
    check_parameters(confidence=confidence)
    for c, xs in d.items():
        if any(not math.isfinite(x) for x in xs):
            raise BadInput(f"case {c!r}: log-ratios must be finite numbers, got {list(xs)!r}")


def _interval(d: Mapping[str, Sequence[float]], est: float, hw: float, df: float, se: float | None,
              flat: bool, confidence: float, anytime: bool) -> Interval:
    n, _, ss = _case_stats(d)
    sd, weights = _noise(n, ss)
    if flat:
        hw, se, sd, weights = math.inf, None, None, None
    ok = math.isfinite(est)
    return Interval(estimate=est, low=est - hw if ok else -math.inf, high=est + hw if ok else math.inf,
                    confidence=confidence, pairs={c: len(xs) for c, xs in d.items()}, df=df, se=se, sd=sd,
                    weights=weights, missing_cases=[c for c, xs in d.items() if not len(xs)], anytime=anytime,
                    no_spread=flat)


def confidence_sequence(d: Mapping[str, Sequence[float]], confidence: float = 0.95,
                        g: float = MIXTURE_G) -> Interval:
    """The anytime-valid interval for θ from the pairs so far (*d*: case → log-ratios in repeat order, e.g. from
    :func:`paired_log_ratios`): the matched repeats' θ̂ ± √(u·W/M) (module docstring).  Unbounded until ν ≥ 1 and
    the evidence can exclude anything (A < G), and without spread (``no_spread``)."""
    _checked(d, confidence)
    _, x, n = _padded(d)
    s = matched(x, n)
    est, nu = float(s.est), float(s.nu)
    hw = cs_half_width(float(s.w), nu, float(s.m), confidence, stream_g(g, int(s.k))) if nu >= 1 else math.inf
    se = math.sqrt(float(s.w) / nu / float(s.m)) if nu >= 1 else None
    return _interval(d, est, hw, nu, se, bool(s.flat), confidence, anytime=True)


def fixed_interval(d: Mapping[str, Sequence[float]], confidence: float = 0.95) -> Interval:
    """The t-interval with each case's own variance, θ̂ ± t_{1−α/2, ν}·se with Welch–Satterthwaite ν (module
    docstring), for a run with a fixed number of repeats looked at once (not valid when the run was stopped by
    looking at it: use :func:`confidence_sequence`).  Unbounded when a case has a single pair, and without spread
    within every case (``no_spread``)."""
    _checked(d, confidence)
    n, mean, ss = _case_stats(d)
    est, var, nu = (float(v) for v in welch(n, mean, ss))
    flat = nu >= 1 and all(len(xs) < 1 or max(xs) == min(xs) for xs in d.values())
    se = math.sqrt(var) if math.isfinite(var) else None
    return _interval(d, est, t_half_width(math.inf if se is None else se, nu, confidence), nu, se, flat, confidence,
                     anytime=False)


@overload
def verdict_codes(low: float, high: float, log_min_effect: float) -> int: ...
@overload
def verdict_codes(low: np.ndarray, high: np.ndarray, log_min_effect: float) -> np.ndarray: ...

def verdict_codes(low: npt.ArrayLike, high: npt.ArrayLike, log_min_effect: float) -> int | np.ndarray:
    """The verdict rule on log bounds, vectorised: 1 pays (low > log m), 2 equivalent (−log m < low and
    high < log m), 3 does not pay (high < log m), 0 none; checked in that order (see :data:`VERDICTS`)."""
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    out = np.select([low > log_min_effect, (low > -log_min_effect) & (high < log_min_effect),
                     high < log_min_effect], [1, 2, 3], 0)
    return int(out) if out.ndim == 0 else out


def verdict_of(ratio_low: float, ratio_high: float, min_effect: float) -> Reached | None:
    """"pays", "equivalent", "does not pay" or None (not decided) for the ratio's interval
    [ratio_low, ratio_high] against min_effect, in the order of the module docstring."""
    check_parameters(min_effect=min_effect)
    low = math.log(ratio_low) if ratio_low > 0 else -math.inf
    high = math.log(ratio_high) if ratio_high < math.inf else math.inf
    return VERDICTS[verdict_codes(low, high, math.log(min_effect))]


def labelled(found: Verdict | None, refused: str | None, iv: Interval) -> tuple[Verdict | None, str | None]:
    """(verdict, reason) for the verdict *found* on *iv* when the guard's reason not to cite the comparison is
    *refused*: a refused "pays" becomes "undecided" ("a refused pair never pays"), any other refused verdict
    stays with "not citable: …"; the interval's own :attr:`Interval.reason` (no spread) follows."""
    reason = None
    if found == PAYS and refused:
        found, reason = UNDECIDED, f"the guard refuses this comparison ({refused}): a refused pair never pays"
    elif refused:
        reason = f"not citable: {refused}"
    return found, "; ".join(r for r in (reason, iv.reason) if r) or None


class Judged(TypedDict):
    """A comparison's verdict on its interval and the figures it rests on (:func:`decide`; a fixed design's:
    :mod:`..experiment.verdicts`): the ratio and its bounds, the pairs per case, the noise's sd, the reason,
    and the repeats per case a fixed design would need (None: none suffices)."""

    verdict: Verdict
    ratio: float | None
    low: float
    high: float
    pairs: dict[str, int]
    sd: float | None
    reason: str | None
    fixed_design_repeats: int | None


class Decision(Judged):
    """One look's decision (:func:`decide`): a :class:`Judged` and whether to stop, at what confidence, after how
    many repeats, with what degrees of freedom, which cases have no pair yet and the power planned on."""

    stop: bool
    confidence: float
    repeats: int
    df: float
    missing_cases: list[str]
    fixed_design_power: float


def decide(d: Mapping[str, Sequence[float]], *, repeats: int, max_repeats: int, min_effect: float = 1.10,
           confidence: float = 0.95, min_repeats: int = MIN_REPEATS, budget_spent: bool = False,
           refused: str | None = None, power: float = 0.90, g: float = MIXTURE_G) -> Decision:
    """One look at one comparison after *repeats* repeats (the look number: repeats run on both arms,
    pairs complete or not), with *d* its pairs by case.

    verdict: :func:`verdict_of` on the confidence sequence, once repeats ≥ *min_repeats*; else, or when
    undecided (no spread included), "open" while repeats < *max_repeats* and not *budget_spent* (e.g.
    ``max_gpu_hours``), and "undecided" after.  *refused*: the guard's reason not to cite the comparison — then
    it never "pays" (an interval above min_effect becomes "undecided", and the comparison stops: more repeats
    will not make it citable; :func:`labelled`).  ``stop``: whether to add no more repeats to this comparison.
    Returns {verdict, stop, ratio, low, high, confidence, repeats, pairs (per case), df, sd, missing_cases,
    reason, fixed_design_repeats (:func:`fixed_design_repeats` at *power*, for the verdict reached or the one
    the estimate points to)}."""
    check_parameters(min_effect, confidence, min_repeats, max_repeats)
    iv = confidence_sequence(d, confidence, g)
    found: Verdict | None = verdict_of(iv.ratio_low, iv.ratio_high, min_effect) if repeats >= min_repeats else None
    fixed = None
    if iv.sd is not None and math.isfinite(iv.estimate):
        fixed = fixed_design_repeats(iv.estimate, iv.sd, len(iv.pairs) - len(iv.missing_cases), min_effect,
                                     confidence, power, found, weights=iv.weights)
    found, reason = labelled(found, refused, iv)
    out_of_budget = repeats >= max_repeats or budget_spent
    verdict: Verdict = found or (UNDECIDED if out_of_budget else OPEN)
    return {"verdict": verdict, "stop": verdict != OPEN, "ratio": iv.ratio, "low": iv.ratio_low,
            "high": iv.ratio_high, "confidence": confidence, "repeats": repeats, "pairs": iv.pairs, "df": iv.df,
            "sd": iv.sd, "missing_cases": iv.missing_cases, "reason": reason, "fixed_design_repeats": fixed,
            "fixed_design_power": power}


#: quasi-random draws over which :func:`fixed_power` takes the expectation over the cases' sample variances
POWER_DRAWS = 4096


@lru_cache(maxsize=64)
def _uniform_draws(cases: int) -> np.ndarray:
    """POWER_DRAWS × *cases* scrambled Sobol points in (0, 1), the same on every call (seed 0)."""
    from scipy.stats import qmc

    u: npt.NDArray[np.float64] = qmc.Sobol(d=cases, scramble=True, seed=0).random(POWER_DRAWS)
    return np.clip(u, 1e-12, 1.0 - 1e-12)


@lru_cache(maxsize=8)
def _chi2_draws(cases: int, df: float) -> np.ndarray:
    """χ²_df / df at the quantiles :func:`_uniform_draws` (*cases*): the same for every comparison with as many
    cases, so kept for the next one (scipy's inverse of the incomplete gamma function is the costly part)."""
    from scipy.stats import chi2

    x: np.ndarray = chi2.ppf(_uniform_draws(cases), df) / df
    x.flags.writeable = False
    return x


@overload
def fixed_power(n: int, estimate: float, sd: float, cases: int, min_effect: float, confidence: float = 0.95,
                verdict: str = PAYS, weights: Sequence[float] | None = None) -> float: ...
@overload
def fixed_power(n: np.ndarray, estimate: float, sd: float, cases: int, min_effect: float, confidence: float = 0.95,
                verdict: str = PAYS, weights: Sequence[float] | None = None) -> np.ndarray: ...

def fixed_power(n: npt.ArrayLike, estimate: float, sd: float, cases: int, min_effect: float, confidence: float = 0.95,
                verdict: str = PAYS, weights: Sequence[float] | None = None) -> float | np.ndarray:
    """Probability that a fixed design of *n* repeats per case (K = *cases*) reaches *verdict* with the fixed
    interval (:func:`fixed_interval`) at *confidence*, when the true mean log-ratio is *estimate*, the root mean
    square over cases of one pair's sd is *sd* and case c carries the share *weights*[c] of the noise variance
    (σ_c² / Σ σ², None: equal).  θ̂ ~ N(θ, σ_θ²) with σ_θ = sd/√(K·n), independent of the sample variances
    s_c² = σ_c² χ²_{n−1}/(n − 1); given them, r = se/σ_θ = √(Σ_c w_c χ²_c/(n − 1)), q = t_{1−α/2, ν} with
    ν = (Σ s_c²)² / Σ s_c⁴/(n − 1), and with λ± = (θ ∓ log m)/σ_θ:
    pays: Φ(λ− − q·r); does not pay: Φ(−λ− − q·r); equivalent: max(0, Φ(−λ− − q·r) − Φ(q·r − λ+)).  The
    expectation over the χ² is taken on :data:`POWER_DRAWS` fixed quasi-random draws.  Vectorised in n."""
    from scipy.stats import norm
    from scipy.stats import t as student_t

    if verdict not in (PAYS, DOES_NOT_PAY, EQUIVALENT):
        raise BadInput(f"no fixed design for the verdict {verdict!r}")
    n = np.asarray(n, dtype=float)
    w = np.full(cases, 1.0 / cases) if weights is None else np.asarray(weights, dtype=float) / float(np.sum(weights))
    x = np.stack([_chi2_draws(cases, float(max(k - 1.0, 1.0))) for k in n.ravel().tolist()]
                 ).reshape(n.shape + (POWER_DRAWS, cases))  # (…, draws, K): χ²/(n − 1)
    v = w * x                                                                          # ∝ s_c²
    nu = v.sum(-1) ** 2 / np.maximum((v * v).sum(-1), 1e-300) * (n - 1.0)[..., None]
    qr = student_t.ppf(0.5 + confidence / 2.0, np.maximum(nu, 1e-9)) * np.sqrt(v.sum(-1))
    sigma = sd / np.sqrt(cases * n)[..., None]
    lm = math.log(min_effect)
    lo, hi = (estimate - lm) / sigma, (estimate + lm) / sigma
    if verdict == PAYS:
        p = norm.cdf(lo - qr)
    elif verdict == DOES_NOT_PAY:
        p = norm.cdf(-lo - qr)
    else:
        p = np.maximum(0.0, norm.cdf(-lo - qr) - norm.cdf(qr - hi))
    out = np.where(n >= 2, p.mean(-1), 0.0)
    return float(out) if np.ndim(out) == 0 else out


def fixed_design_repeats(estimate: float, sd: float, cases: int, min_effect: float, confidence: float = 0.95,
                         power: float = 0.90, verdict: str | None = None, max_n: int = 10_000,
                         weights: Sequence[float] | None = None) -> int | None:
    """Repeats per case a fixed (non-sequential) design needs to reach *verdict* with probability ≥ *power*
    when the true mean log-ratio and noise are the observed *estimate*, *sd* and *weights* (:func:`fixed_power`):
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
    while fixed_power(hi, estimate, sd, cases, min_effect, confidence, verdict, weights) < power:  # grows with n
        if hi >= max_n:
            return None
        lo, hi = hi + 1, min(2 * hi, max_n)
    while lo < hi:
        mid = (lo + hi) // 2
        if fixed_power(mid, estimate, sd, cases, min_effect, confidence, verdict, weights) >= power:
            hi = mid
        else:
            lo = mid + 1
    return hi
