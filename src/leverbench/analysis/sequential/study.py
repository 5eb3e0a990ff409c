"""The simulation study behind :mod:`.sequential`: a pure model of noisy turn times (no HTTP, no ledger).

Used by tests/test_sequential.py (a few seconds, seeded) and by ``benchmarks/adaptive_study.py`` (the full
table).  One comparison — an arm against its reference over K cases — per simulated experiment:

    T[arm, c, r] = base_c · f(arm, c) · drift(t) · exp(ε),   ε ~ N(−s_c²/2, s_c²),  s_c² = log(1 + cv_c²)
    f(ref, c) = 1,  f(arm, c) = 1 / (effect · e^{h_c})        (the arm is *effect* × faster)
    drift(t) = 1 + drift · t / T_run                           (linear in wall-clock time t)

h_c are per-case offsets with mean 0 (cases differ in their true ratio; the mean log-ratio over cases stays
log effect).  cv is one coefficient of variation for all cases or one per case (unequal noise: a case ten times
noisier than the others, a deterministic case with cv 0 — :data:`UNEQUAL`).  t is the start of the turn in the
schedule (expected durations, base_c each), T_run the length of a full run of ``max_repeats`` repeats: a run
stopped early sees less drift.  A turn fails with probability ``fail_rate`` (its pair is lost) and is slowed by
``spike_factor`` with probability ``spike_rate`` (a hiccup: heavier tails than the lognormal).  The schedule,
per repeat r, case c:

- ``counterbalanced``: the two arms' turns back to back, the reference first when r + c is even
  (A B, B A, …: which arm goes first alternates over cases and over repeats);
- ``fixed``: back to back, the arm always first (drift slows the reference a little in every pair);
- ``blocked``: every case on the arm, then every case on the reference, in each repeat.

A sequential run looks after every repeat (all its cases on both arms) and stops at the first look
≥ ``min_repeats`` whose interval reaches a verdict, else at ``max_repeats`` ("undecided").  A fixed design
of n repeats looks once, at n, with the fixed interval.  Simulating every experiment to the end and reading it
at the stopping look is the same as stopping it there (later repeats never change earlier ones).  The looks
hold, per experiment and repeat, the statistics of the module's matched repeats
(:func:`.sequential.matched`, the confidence sequence), of its fixed interval (:func:`.sequential.welch`) and
of the former interval with one σ pooled over cases (:func:`pool`, kept to show what it did).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import numpy as np

from .confidence import (
    MIXTURE_G,
    Stream,
    cs_half_width,
    matched,
    stream_g,
    t_half_width,
    verdict_codes,
    welch,
)

ORDERS = ("counterbalanced", "fixed", "blocked")
NO_VERDICT = 4  # code of "undecided" in the study's arrays (1–3 as :data:`.sequential.VERDICTS`)
NAMES = {1: "pays", 2: "equivalent", 3: "does not pay", NO_VERDICT: "undecided"}


@dataclass(frozen=True)
class Model:
    effect: float = 1.0
    cv: float | tuple[float, ...] = 0.10  # one CV, or one per case
    drift: float = 0.10
    order: str = "counterbalanced"
    base_s: tuple[float, ...] = (4.0, 9.0, 20.0, 45.0)
    case_offsets: tuple[float, ...] = (-0.06, -0.02, 0.02, 0.06)  # h_c, log scale, mean 0
    fail_rate: float = 0.0
    spike_rate: float = 0.0
    spike_factor: float = 1.5
    max_repeats: int = 12


#: one case ten times noisier than the three others (issue 22), and the normal agent mix: two deterministic short
#: cases beside a steady one and a tool-calling one
UNEQUAL = {"one case 10x noisier": (0.02, 0.02, 0.02, 0.20), "2 deterministic + 2 noisy": (0.0, 0.0, 0.02, 0.20)}


def start_times(model: Model, repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """(start of the reference's turn, start of the arm's turn), each (repeats, K), in the schedule of
    *model.order*, in units of T_run (the expected length of a full ``max_repeats`` run)."""
    if model.order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {model.order!r}")
    base = np.asarray(model.base_s, dtype=float)
    k = len(base)
    ref_first = np.zeros((repeats, k), dtype=bool)
    if model.order == "counterbalanced":
        ref_first = (np.arange(repeats)[:, None] + np.arange(k)[None, :]) % 2 == 0
    slots: list[tuple[str, int, int]] = []  # (arm, repeat, case) in run order
    for r in range(repeats):
        if model.order == "blocked":
            slots += [("arm", r, c) for c in range(k)] + [("ref", r, c) for c in range(k)]
        else:
            for c in range(k):
                pair = [("ref", r, c), ("arm", r, c)]
                slots += pair if ref_first[r, c] else pair[::-1]
    t_ref, t_arm = np.zeros((repeats, k)), np.zeros((repeats, k))
    clock = 0.0
    for who, r, c in slots:
        (t_ref if who == "ref" else t_arm)[r, c] = clock
        clock += base[c]
    t_run = 2.0 * model.max_repeats * base.sum()
    return t_ref / t_run, t_arm / t_run


def simulate(model: Model, experiments: int, repeats: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Turn times (T_ref, T_arm), each (experiments, repeats, K); NaN for a failed turn."""
    base = np.asarray(model.base_s, dtype=float)
    k = len(base)
    cv = np.broadcast_to(np.asarray(model.cv, dtype=float), (k,))
    s = np.sqrt(np.log1p(cv * cv))
    s_ref, s_arm = start_times(model, repeats)
    shape = (experiments, repeats, k)

    def noise() -> np.ndarray:
        eps = np.exp(rng.normal(-s * s / 2.0, s, shape))
        if model.spike_rate:
            eps *= np.where(rng.random(shape) < model.spike_rate, model.spike_factor, 1.0)
        if model.fail_rate:
            eps[rng.random(shape) < model.fail_rate] = np.nan
        return eps

    speed = 1.0 / (model.effect * np.exp(np.asarray(model.case_offsets, dtype=float)))
    t_ref = base * (1.0 + model.drift * s_ref) * noise()
    t_arm = base * speed * (1.0 + model.drift * s_arm) * noise()
    return t_ref, t_arm


def pool(n: np.ndarray, mean: np.ndarray, ss: np.ndarray) -> Stream:
    """The former interval's statistics, one σ pooled over cases (exact only when the cases' noise is equal):
    θ̂ = mean of the case means, W = Σ ss, ν = Σ n − K, M = K² / Σ 1/n over the K cases with pairs (last axis =
    cases); ``k`` 1, so that :func:`cs_method` mixes with g itself, as it did."""
    n = np.asarray(n, dtype=float)
    used = n > 0
    k = used.sum(-1)
    safe_n = np.where(used, n, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = np.where(used, mean, 0.0).sum(-1) / k
        inv = np.where(used, 1.0 / safe_n, 0.0).sum(-1)
        m = np.where(k > 0, k * k / np.where(inv > 0, inv, 1.0), 0.0)
    w = np.where(used, np.maximum(ss, 0.0), 0.0).sum(-1)
    return Stream(est, w, n.sum(-1) - k, m, np.ones_like(k), np.zeros(k.shape, dtype=bool))


@dataclass(frozen=True)
class Fixed:
    """The fixed interval's (θ̂, se², ν) after each repeat, each (experiments, repeats)."""

    est: np.ndarray
    var: np.ndarray
    nu: np.ndarray


@dataclass(frozen=True)
class Looks:
    """After each repeat, each array (experiments, repeats): the matched repeats (``stream``, what the
    confidence sequence uses), the fixed interval's statistics (``fixed``) and the pooled-σ statistics
    (``pooled``) over the pairs of the first r + 1 repeats."""

    stream: Stream
    fixed: Fixed
    pooled: Stream

    @property
    def est(self) -> np.ndarray:
        """The estimate of the confidence sequence (the matched repeats' θ̂)."""
        return self.stream.est

    def upto(self, repeats: int) -> "Looks":
        return Looks(_first(self.stream, repeats), _first(self.fixed, repeats), _first(self.pooled, repeats))


_Looked = TypeVar("_Looked", Stream, Fixed)


def _first(x: _Looked, repeats: int) -> _Looked:
    """*x* at its first *repeats* looks: each of its arrays' first *repeats* columns."""
    return type(x)(*(getattr(x, f)[:, :repeats] for f in x.__dataclass_fields__))


def looks(t_ref: np.ndarray, t_arm: np.ndarray) -> Looks:
    """Per look (cumulative over repeats): the matched repeats of the complete pairs of d = log(T_ref/T_arm) (each
    case's pairs in repeat order, successes first), and per-case counts, means and sums of squares for the fixed
    interval and the pooled statistics."""
    d = np.log(t_ref / t_arm)
    ok = ~np.isnan(d)
    n = np.cumsum(ok, axis=1)
    x = np.take_along_axis(d, np.argsort(~ok, axis=1, kind="stable"), axis=1)  # each case's pairs first, in order
    per_look = [matched(x, n[:, r, :]) for r in range(d.shape[1])]
    stream = Stream(*(np.stack([getattr(s, f) for s in per_look], axis=1) for f in Stream.__dataclass_fields__))
    d0 = np.where(ok, d, 0.0)
    s1, s2 = np.cumsum(d0, axis=1), np.cumsum(d0 * d0, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, s1 / np.where(n > 0, n, 1), 0.0)
    ss = s2 - mean * s1
    return Looks(stream, Fixed(*welch(n, mean, ss)), pool(n, mean, ss))


HalfWidth = Callable[[Stream, float], np.ndarray]


def cs_method(g: float = MIXTURE_G) -> HalfWidth:
    """The confidence sequence of :mod:`.sequential` (mixture parameter *g*, per pair: the stream's is
    :func:`.sequential.stream_g`)."""
    return lambda s, confidence: cs_half_width(s.w, s.nu, s.m, confidence, stream_g(g, s.k))


def t_every_look(s: Stream, confidence: float) -> np.ndarray:
    """The classical t-interval of the stream at every look (INVALID when looked at more than once)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(s.w / np.where(s.nu >= 1, s.nu, 1.0) / np.where(s.m > 0, s.m, 1.0))
    half: np.ndarray = t_half_width(np.where(s.nu >= 1, se, np.inf), s.nu, confidence)  # (confidence.py: untyped)
    return half


@dataclass
class Outcome:
    """One design over the simulated experiments: the verdict code (1–4) and the repeats each used, and
    whether the truth θ = log(effect) left the interval at any look up to the stop (``missed``)."""

    codes: np.ndarray
    repeats: np.ndarray
    missed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def rate(self, name: str) -> float:
        code = next(k for k, v in NAMES.items() if v == name)
        return float(np.mean(self.codes == code))

    @property
    def mean_repeats(self) -> float:
        return float(np.mean(self.repeats))


def sequential(lk: Looks, min_effect: float, confidence: float = 0.95, min_repeats: int = 2,
               max_repeats: int = 12, method: HalfWidth | None = None, truth: float | None = None,
               pooled: bool = False) -> Outcome:
    """Stop each experiment at its first look ≥ *min_repeats* with a verdict, else at *max_repeats*.  *method*
    (default the module's :func:`cs_method`) on the matched repeats, or on the pooled-σ statistics when
    *pooled*; ``missed``: the truth left the interval at some look up to the stop."""
    lk = lk.upto(max_repeats)
    s = lk.pooled if pooled else lk.stream
    hw = (method or cs_method())(s, confidence)
    est = np.nan_to_num(s.est)
    codes = verdict_codes(est - hw, est + hw, math.log(min_effect))
    codes[:, : min_repeats - 1] = 0
    decided = codes > 0
    any_ = decided.any(axis=1)
    stop = np.where(any_, decided.argmax(axis=1), max_repeats - 1)
    rows = np.arange(len(stop))
    final = np.where(any_, codes[rows, stop], NO_VERDICT)
    missed = np.zeros(len(stop), dtype=bool)
    if truth is not None:
        out = np.abs(est - truth) > hw
        upto = np.arange(max_repeats)[None, :] <= stop[:, None]
        missed = (out & upto).any(axis=1)
    return Outcome(final, stop + 1, missed)


def fixed(lk: Looks, n: int, min_effect: float, confidence: float = 0.95, truth: float | None = None,
          pooled: bool = False) -> Outcome:
    """A fixed design of *n* repeats: the module's fixed interval (or, *pooled*, the t-interval with one σ pooled
    over cases) at look n, once; ``missed``: the truth outside it."""
    if pooled:
        s = lk.pooled
        est = s.est[:, n - 1]
        hw = t_every_look(Stream(*(getattr(s, f)[:, n - 1] for f in Stream.__dataclass_fields__)), confidence)
    else:
        est = lk.fixed.est[:, n - 1]
        hw = t_half_width(np.sqrt(lk.fixed.var[:, n - 1]), lk.fixed.nu[:, n - 1], confidence)
    codes = verdict_codes(est - hw, est + hw, math.log(min_effect))
    missed = np.abs(est - truth) > hw if truth is not None else np.zeros(len(est), dtype=bool)
    return Outcome(np.where(codes > 0, codes, NO_VERDICT), np.full(len(est), n), missed)


def matched_fixed_n(seq_pays: float, fixed_pays: dict[int, float], fixed_false_pays: dict[int, float],
                    max_false: float = 0.05) -> int | None:
    """The fixed design "with the same error rates": the smallest n whose "pays" rate under the true effect
    is ≥ the sequential design's *seq_pays* and whose "pays" rate under no effect is ≤ *max_false*."""
    for n in sorted(fixed_pays):
        if fixed_pays[n] >= seq_pays and fixed_false_pays[n] <= max_false:
            return n
    return None


def experiment_looks(model: Model, experiments: int, repeats: int, seed: int) -> Looks:
    """Simulate *experiments* runs of *repeats* repeats under *model* (seeded) and return their looks."""
    rng = np.random.default_rng(seed)
    return looks(*simulate(model, experiments, repeats, rng))
