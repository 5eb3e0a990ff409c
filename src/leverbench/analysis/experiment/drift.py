"""Drift: did an arm's speed move during the run, and does that bias a comparison?

**The series.**  A sentinel (:mod:`leverbench.runner.schedule`: a short fixed prompt behind a fresh tag, so
that no prefix cache holds it, with ``sentinel_tokens`` forced output tokens) runs for every arm at the
start of every round and at the end (blocked order: before every repeat of every arm's block, and at the
end), so each arm has a series of speeds over the run.  Of each successful sentinel:

    decode speed  = (n − 1) / (latency − TTFT)           the client's stream (n generated tokens)
                  = (predicted_n − 1) / predicted_ms      where llama.cpp's timings are there (its clock
                                                          starts at the first token: n − 1 tokens)
    prefill speed = 1 / TTFT                               (1 / prompt_ms where llama.cpp's timings are there)

and its time x = (t_send − t_first) / (t_last − t_first), t over all counted sentinels of the run (x runs
from 0 to 1 across the run).

**A trend** (:func:`trend`) of a series (x_i, y_i = log speed_i): least squares y = a + b·x; the change
over the run is exp(b) − 1, its interval exp(b ± t_{ν,(1+γ)/2}·se_b) − 1 with se_b = √(s²/S_xx),
s² = Σ residual² / ν, ν = n − 2, γ = 95 %: the slope beyond what the scatter of the sentinels explains.
A trend is **detected** when its interval excludes 0 and |change| > the drift tolerance
(``[experiment] drift_tolerance``, default 10 %).  Where any of m tests may refuse (decode and prefill of
every comparison; of every arm, for the arms' own drift and in blocked order) each interval is taken at
1 − 5 %/m (Bonferroni, :func:`family_confidence`), so that noise alone refuses a run's comparisons in at
most 5 % of runs, not in 5 % of each comparison's tests.  Fewer than 3 sentinels: no scatter to judge against,
the drift is **unknown** (a warning; two sentinels still give a change, without an interval).

**Per comparison** (:func:`pair_drift`), which is what drift can bias:

- interleaved order: a slowdown that hits every arm alike does not bias a paired ratio.  The series is
  y = log(speed_arm / speed_vs) over the sentinels both arms ran at the same place (round start, end),
  x their mean time; the comparison is refused only when this **differential** trend is detected (the two
  arms drifted differently), for decode or prefill;
- blocked order: the arms ran at different times, so any drift biases the ratio: the comparison is
  refused when either arm's own trend is detected, unknown, or undetermined (below).

With few rounds a series has little power (3 repeats: 4 sentinels per arm); a trend none detected whose
interval still reaches past ±tolerance is **undetermined**: the sentinels cannot rule out a drift that matters.
In interleaved order it does not refuse (the comparison is cited, its lever's line saying "drift undetermined",
one warning of kind ``drift_undetermined`` naming them): the arms alternate in counterbalanced order, so each
arm's turns sit about the run's middle alike; a common drift of any shape is paired away, and a differential
one of the shape the trend tests (linear) leaves the paired ratio the ratio at the run's middle, its average,
while the rounds' spread it causes is inside the verdict's interval, whose samples they are.  A detected one
refuses: the effect itself moved beyond tolerance, and one figure would hide it.  In blocked order nothing
cancels a drift, so an undetermined one refuses as an unknown one does.

**Common drift** (:func:`common_drift`): the trend of the mean over arms of log speed at the places every arm
with sentinels ran one (an arm without any is left out), said in words when detected ("the machine slowed
30 % during the run, alike for every arm").
A paired ratio cancels it, but the cells' medians need not pair the same rounds (a cache arm's cold first
turn moves its median to a later, slower round than the reference's), so in interleaved order, where a
common drift is detected and no comparison's arms drifted differently, the turns' times are put on the
speed at the run's first sentinel (:func:`adjusted_turn_s`): each call's prefill time (its TTFT) and decode
time (latency − TTFT), at run time x, multiplied by exp(b·x) with b = log(1 + change) of the common prefill
and decode trends.  The cells, totals and multipliers are then of those times (``drift_common.adjusted``);
the sequential verdicts pair their turns and take them as measured.

**Warm-up** (:func:`warmup_rows`): before the first round each arm's endpoint is sent the sentinel's call
(kind ``warmup``) until two decode speeds in a row are within the tolerance (:func:`settled`, at most
``WARMUP_MAX_CALLS`` of the runner), so that an engine warming up is not read as drift; the summary says
per arm how many calls it took and whether it settled.

An arm's own detected trend (``drifted``) refuses its absolute figures (its cost per turn:
:func:`.guard.measurement_guard`), which every drift biases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

from ...ledger.rows import CallRow, TimingsRow
from ...readable import SPAN, bounded, change_words  # noqa: F401 (re-exported: the drift's words)
from ...schema.check_rows import CommonDrift, DriftRow, Order, PairDriftRow, TrendRow, WarmupRow
from ...schema.warning_kinds import RunWarning, WarningKind
from ..base.dataset import Dataset
from ..base.knobs import Comparison

CONFIDENCE = 0.95
MIN_POINTS = 3  # a trend with an interval needs a residual degree of freedom


def _number(t: TimingsRow, key: str) -> float | None:
    """A timing that is a number (not a NaN or infinity the ledger wrote as a string), else None."""
    v = t.get(key)
    return v if isinstance(v, (int, float)) else None


def sentinel_rate(rec: CallRow) -> float | None:
    """A successful sentinel's decode speed in tokens/s (module docstring), or None."""
    if rec.get("error") is not None:
        return None
    t: TimingsRow = rec.get("timings") or {}
    ms, n_t = _number(t, "predicted_ms"), _number(t, "predicted_n")
    if ms and n_t and n_t > 1:
        return (n_t - 1) / ms * 1000.0
    n, ttft, lat = rec.get("completion_tokens"), rec.get("ttft_s"), rec.get("latency_s")
    if n and n > 1 and ttft is not None and lat is not None and lat > ttft:
        return (n - 1) / (lat - ttft)
    return None


def sentinel_prefill_speed(rec: CallRow) -> float | None:
    """A successful sentinel's prefill speed, 1 / (time to its first token) in 1/s (module docstring), or None."""
    if rec.get("error") is not None:
        return None
    ms = _number(rec.get("timings") or {}, "prompt_ms")
    if ms:
        return 1000.0 / ms
    ttft = rec.get("ttft_s")
    return 1.0 / ttft if ttft else None


def settled(rates: list[float | None], tolerance: float) -> bool:
    """Whether the last two of a warm-up's decode speeds are both known and within *tolerance* of each other."""
    if len(rates) < 2 or rates[-1] is None or rates[-2] is None or not rates[-2]:
        return False
    return abs(rates[-1] / rates[-2] - 1.0) <= tolerance


@dataclass(frozen=True)
class Trend:
    """The trend of a log-speed series over the run (:func:`trend`): ``change`` = exp(b) − 1 over the whole run,
    [``low``, ``high``] its interval (None with fewer than 3 points), ``significant``: the interval excludes 0."""

    points: int
    change: float | None
    low: float | None = None
    high: float | None = None
    significant: bool = False

    def detected(self, tolerance: float) -> bool:
        """Significant and beyond *tolerance*: a drift the scatter does not explain, and large enough to matter."""
        return self.significant and self.change is not None and abs(self.change) > tolerance

    def as_dict(self) -> TrendRow:
        return {"points": self.points, "change": self.change, "low": self.low, "high": self.high,
                "significant": self.significant}

    def words(self, digits: int = 0) -> str:
        """The change and its interval (:func:`change_words`: words where the interval is not :func:`bounded`)."""
        return change_words(self.change, self.low, self.high, self.points, digits)

    def beyond(self, tolerance: float) -> bool:
        """Not ruled out: fewer than 3 points (no interval), or an interval that reaches past ±*tolerance*."""
        return self.change is None or self.low is None or self.high is None or self.low < -tolerance \
            or self.high > tolerance


def trend(x: list[float] | np.ndarray, y: list[float] | np.ndarray, confidence: float = CONFIDENCE) -> Trend:
    """Least squares y = a + b·x over the finite points; change exp(b) − 1 and its t-interval (module docstring)."""
    xa, ya = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(xa) & np.isfinite(ya)
    return _fit(xa[ok], ya[ok], confidence)


def _fit(x: np.ndarray, y: np.ndarray, confidence: float) -> Trend:
    """:func:`trend` over finite points."""
    n = len(x)
    sxx = float(((x - x.mean()) ** 2).sum()) if n else 0.0
    if n < 2 or sxx <= 0:
        return Trend(n, None)
    b = float(((x - x.mean()) * (y - y.mean())).sum()) / sxx
    if n < MIN_POINTS:
        return Trend(n, math.expm1(b))
    res = y - (y.mean() + b * (x - x.mean()))
    se = math.sqrt(float((res ** 2).sum()) / (n - 2) / sxx)
    half = float(stats.t.ppf((1.0 + confidence) / 2.0, n - 2)) * se
    lo, hi = b - half, b + half
    return Trend(n, math.expm1(b), math.expm1(lo), math.expm1(hi), bool(lo > 0 or hi < 0))


@dataclass(frozen=True)
class Point:
    """One counted sentinel: its place in the schedule (position, repeat), time share x, log speeds."""

    key: tuple[str | None, int | None]
    x: float
    decode: float
    prefill: float


def series(ds: Dataset) -> dict[str, list[Point]]:
    """Per arm, its counted successful sentinels in time order (module docstring)."""
    recs = [s for s in ds.sentinels if s.get("error") is None and s.get("t_send") is not None]
    if not recs:
        return {a: [] for a in ds.arms}
    t = [float(s["t_send"]) for s in recs]
    t0, span = min(t), (max(t) - min(t)) or 1.0
    out: dict[str, list[Point]] = {a: [] for a in ds.arms}
    for s, ts in sorted(zip(recs, t), key=lambda p: p[1]):
        d, p = sentinel_rate(s), sentinel_prefill_speed(s)
        if s["arm"] in out:
            out[s["arm"]].append(Point((s.get("position"), s.get("repeat")), (ts - t0) / span,
                                       math.log(d) if d else math.nan, math.log(p) if p else math.nan))
    return out


def family_confidence(tests: int, confidence: float = CONFIDENCE) -> float:
    """The confidence of each of *tests* intervals whose any one can refuse, so that all of them hold together
    with *confidence* (Bonferroni: 1 − (1 − confidence) / tests)."""
    return 1.0 - (1.0 - confidence) / max(tests, 1)


def _trends(points: list[Point], confidence: float = CONFIDENCE) -> tuple[Trend, Trend]:
    x = [p.x for p in points]
    return trend(x, [p.decode for p in points], confidence), trend(x, [p.prefill for p in points], confidence)


def _matched(a: list[Point], b: list[Point]) -> list[tuple[Point, Point]]:
    by = {p.key: p for p in b}
    return [(p, by[p.key]) for p in a if p.key in by]


@dataclass(frozen=True)
class PairDrift:
    """Drift as it bears on one comparison (:func:`pair_drift`): the differential trends (interleaved) and
    whether drift refuses it, with the reason."""

    arm: str
    vs: str
    order: Order
    decode: Trend
    prefill: Trend
    refuses: bool
    reason: str | None
    undetermined: bool = False  # none detected, but the series cannot rule out one beyond tolerance (module doc)

    def as_dict(self) -> PairDriftRow:
        return {"arm": self.arm, "vs": self.vs, "order": self.order, "points": self.decode.points,
                "decode": self.decode.as_dict(), "prefill": self.prefill.as_dict(), "refuses": self.refuses,
                "reason": self.reason, "undetermined": self.undetermined}


def pair_drift(arm: str, vs: str, own: dict[str, list[Point]], order: Order, tol: float,
               confidence: float = CONFIDENCE) -> PairDrift:
    """Whether drift refuses the comparison *arm* against *vs* (module docstring); *confidence*: of each
    interval (:func:`family_confidence` over the run's tests)."""
    if order == "blocked":
        reasons, undetermined = [], False
        for who in (vs, arm):
            d, p = _trends(own.get(who, []), confidence)
            if d.change is None or d.points < MIN_POINTS:
                reasons.append(f"{who}'s drift is unknown ({d.points} sentinel(s) with a speed to read), and blocked "
                               "order puts any drift into the comparison")
            for phase, tr in (("decode", d), ("prefill", p)):
                if tr.detected(tol):
                    reasons.append(f"{who}'s {phase} speed changed {tr.words()} over the run (tolerance "
                                   f"{tol:.0%}), and blocked order puts it into the comparison; run interleaved")
            vague = [f"{phase} {tr.words()}" for phase, tr in (("decode", d), ("prefill", p))
                     if tr.low is not None and not (d.detected(tol) or p.detected(tol)) and tr.beyond(tol)]
            if vague:
                undetermined = True
                reasons.append(f"{who}'s drift is undetermined ({'; '.join(vague)}: its sentinels cannot rule out "
                               f"a change beyond {tol:.0%}), and blocked order puts any drift into the comparison; "
                               "run interleaved, or more repeats")
        none = Trend(0, None)
        return PairDrift(arm, vs, order, none, none, bool(reasons), "; ".join(reasons) or None, undetermined)
    pairs = _matched(own.get(arm, []), own.get(vs, []))
    x = [(p.x + q.x) / 2.0 for p, q in pairs]
    d = trend(x, [p.decode - q.decode for p, q in pairs], confidence)
    p = trend(x, [p.prefill - q.prefill for p, q in pairs], confidence)
    reasons = [f"{arm} and {vs} drifted differently: {phase} speed of {arm} relative to {vs} changed "
               f"{tr.words()} over the run (tolerance {tol:.0%})" for phase, tr in (("decode", d), ("prefill", p))
               if tr.detected(tol)]
    undetermined = not reasons and any(tr.beyond(tol) for tr in (d, p))
    return PairDrift(arm, vs, order, d, p, bool(reasons), "; ".join(reasons) or None, undetermined)


def common_drift(own: dict[str, list[Point]], arms: list[str], tol: float, order: Order,
                 differential: bool = False) -> CommonDrift:
    """The trend of the arms' mean log speed at the places every arm with sentinels ran one, and its words
    when detected (module docstring); *differential*: some comparison's arms drifted differently (then the
    words do not say "alike").  An arm without sentinels (its drift unknown) is left out, not allowed to hide
    the others' common trend: the machine's speed is a fact of the run, and the arm's times carry it too."""
    arms = [a for a in arms if own.get(a)]
    keys = None
    for a in arms:
        k = {p.key for p in own.get(a, [])}
        keys = k if keys is None else keys & k
    if not keys or len(arms) < 2:
        return {"decode": None, "prefill": None, "text": None, "detected": False}
    rows = {a: {p.key: p for p in own[a]} for a in arms}
    places = sorted(keys, key=lambda k: rows[arms[0]][k].x)
    x = [float(np.mean([rows[a][k].x for a in arms])) for k in places]
    d = trend(x, [float(np.mean([rows[a][k].decode for a in arms])) for k in places], family_confidence(2))
    p = trend(x, [float(np.mean([rows[a][k].prefill for a in arms])) for k in places], family_confidence(2))
    # (a detected trend is significant, so fitted with its change and interval: the checks only say so)
    said = [f"{phase} {'slowed' if tr.change < 0 else 'sped up'} {abs(tr.change):.0%} "
            + (f"[{tr.low:+.0%}, {tr.high:+.0%}]" if bounded(1 + tr.low, 1 + tr.high) else f"({tr.words()})")
            for phase, tr in (("decode", d), ("prefill", p))
            if tr.detected(tol) and tr.change is not None and tr.low is not None and tr.high is not None]
    text = None
    detected = bool(said)
    if said:
        if differential:
            text = ("the arms' mean speed changed during the run (" + "; ".join(said) + "), and not alike for "
                    "every arm: the comparisons whose arms drifted differently are refused")
        else:
            text = ("the machine's speed changed during the run, alike for every arm (" + "; ".join(said) + "): "
                    + ("the comparisons are interleaved and their turn times are put on the speed at the run's "
                       "start by the sentinels' common trend, so unaffected; absolute times and costs are not citable"
                       if order != "blocked" else "in blocked order every comparison carries it, and is refused"))
    return {"decode": d.as_dict(), "prefill": p.as_dict(), "text": text, "detected": detected and not differential}


def adjusted_turn_s(ds: Dataset, common_row: CommonDrift) -> np.ndarray | None:
    """The turns' times put on the speed at the run's first sentinel, where a common drift was detected in
    interleaved order (None otherwise): each call's prefill (TTFT) and decode (latency − TTFT) time at run
    time x is multiplied by exp(b·x), b = log(1 + change) of the common prefill and decode trends, and the
    turn's time changed by what its calls' times changed (module docstring)."""
    if not common_row.get("detected") or ds.settings.order == "blocked":
        return None
    t = [float(s["t_send"]) for s in ds.sentinels if s.get("error") is None and s.get("t_send") is not None]
    t0, span = min(t), (max(t) - min(t)) or 1.0
    d, p = common_row["decode"], common_row["prefill"]
    bd = math.log1p(d["change"]) if d is not None and d["change"] is not None else 0.0
    bp = math.log1p(p["change"]) if p is not None and p["change"] is not None else 0.0
    c = ds.call
    x = np.clip((c.t_send - t0) / span, 0.0, 1.0)  # a call before the first sentinel (after the last): its speed
    ttft = np.where(np.isnan(c.ttft_s), 0.0, c.ttft_s)
    dec = np.where(np.isnan(c.latency_s), 0.0, c.latency_s) - ttft
    change = ttft * (np.exp(bp * x) - 1.0) + dec * (np.exp(bd * x) - 1.0)
    change = np.where(np.isfinite(change) & (c.turn >= 0), change, 0.0)
    return ds.turn.turn_s + np.bincount(np.maximum(c.turn, 0), weights=change, minlength=len(ds.turn))[:len(ds.turn)]


def warmup_rows(ds: Dataset, tol: float) -> dict[str, WarmupRow]:
    """Per arm, its last warm-up (the calls since its last ``repeat`` 0): calls, decode speeds, settled.  The calls
    that restart or warm a shared prefix before a turn (``position``: :mod:`leverbench.runner.cache_state`) are
    no part of it."""
    tps: dict[str, list[float | None]] = {}
    for w in ds.warmups:
        if w.get("position") is not None:
            continue
        arm = w.get("arm")
        if w.get("repeat") == 0 or arm not in tps:
            tps[arm] = []
        tps[arm].append(sentinel_rate(w))
    return {arm: {"calls": len(r), "tps": r, "settled": settled(r, tol)} for arm, r in tps.items()}


def drift(ds: Dataset) -> tuple[list[DriftRow], list[RunWarning]]:
    """``summary.json`` ``drift[]``, one row per arm: its own trends (decode, prefill), ``drifted`` (its own
    trend detected), ``unknown`` (fewer than 3 sentinels), its warm-up; and the warnings."""
    tol = ds.settings.drift_tolerance
    own = series(ds)
    warm = warmup_rows(ds, tol)
    out: list[DriftRow] = []
    warnings: list[RunWarning] = []
    for arm in ds.arms:
        pts = own.get(arm, [])
        d, p = _trends(pts, family_confidence(2 * len(ds.arms)))
        rates = [math.exp(q.decode) for q in pts if math.isfinite(q.decode)]
        unknown = len(rates) < MIN_POINTS  # sentinels whose speed could be read (token counts and times known)
        drifted = d.detected(tol) or p.detected(tol)
        row: DriftRow = {"arm": arm, "sentinels": len(rates), "decode": d.as_dict(), "prefill": p.as_dict(),
                         "drifted": drifted, "unknown": unknown, "tolerance": tol,
                         "start_tps": rates[0] if rates else None, "end_tps": rates[-1] if rates else None,
                         "change": d.change, "warmup": warm.get(arm)}
        out.append(row)
        if drifted:
            what = "; ".join(f"{ph} speed {tr.words()}" for ph, tr in (("decode", d), ("prefill", p))
                             if tr.detected(tol))
            warnings.append(RunWarning(WarningKind.DRIFT, f"drift: arm {arm!r}: {what} over the run, beyond the "
                                       f"scatter of its {len(pts)} sentinels and the tolerance {tol:.0%}; its "
                                       "absolute figures (cost per turn) are not citable, and comparisons "
                                       "only where the order or the other arm does not cancel it", arm))
        if unknown:
            have = len([s for s in ds.sentinels if s["arm"] == arm])
            why = ("no sentinels (sentinel_tokens = 0, or the run was cut short)" if not have
                   else f"{len(rates)} sentinel(s) of {have} with a speed to read (successful, with token counts)")
            warnings.append(RunWarning(WarningKind.DRIFT_UNKNOWN, f"drift unknown: arm {arm!r}: {why}; "
                                       f"{MIN_POINTS} are needed to tell drift from noise"
                                       + ("; with blocked order its comparisons are not citable"
                                          if ds.settings.order == "blocked" else ""), arm))
        w = warm.get(arm)
        if w and w["calls"] > 1 and not w["settled"]:
            warnings.append(RunWarning(WarningKind.WARMUP_UNSETTLED,
                                       f"arm {arm!r}: its speed had not settled after {w['calls']} warm-up calls "
                                       f"(decode {', '.join('?' if r is None else f'{r:.1f}' for r in w['tps'])} "
                                       "tok/s): its first round may still be warming up", arm))
    return out, warnings


def pair_drifts(ds: Dataset, comps: Sequence[Comparison]) -> list[PairDrift]:
    """:func:`pair_drift` of every comparison (its ``arm`` and ``vs``)."""
    tol, order = ds.settings.drift_tolerance, ds.settings.order
    own = series(ds)
    tests = 2 * (len(ds.arms) if order == "blocked" else len(comps))  # decode and prefill of each
    return [pair_drift(c.arm, c.vs, own, order, tol, family_confidence(tests)) for c in comps]


def common(ds: Dataset, pairs: list[PairDrift] | None = None) -> CommonDrift:
    """:func:`common_drift` of the run's arms (*pairs*: the comparisons' :class:`PairDrift`)."""
    order = ds.settings.order
    differential = order != "blocked" and any(p.refuses for p in pairs or [])
    return common_drift(series(ds), ds.arms, ds.settings.drift_tolerance, order, differential)


def drifted_arms(rows: Sequence[DriftRow]) -> dict[str, str]:
    """Arm → what drifted, for the arms whose own trend was detected (the input of the guard of an arm's own,
    absolute figures)."""
    out = {}
    for d in rows:
        if not d["drifted"]:
            continue
        if isinstance(d.get("decode"), dict):
            parts = [f"{ph} speed {Trend(**d[ph]).words()}" for ph in ("decode", "prefill")
                     if d.get(ph) and Trend(**d[ph]).detected(d["tolerance"])]
            out[d["arm"]] = "; ".join(parts) + f" over the run, tolerance {d['tolerance']:.0%}"
        else:  # a summary written before the series: start and end only
            out[d["arm"]] = (f"decode {d['start_tps']:.1f} → {d['end_tps']:.1f} tok/s, {d['change']:+.0%} "
                             f"between its sentinels, tolerance {d['tolerance']:.0%}")
    return out
