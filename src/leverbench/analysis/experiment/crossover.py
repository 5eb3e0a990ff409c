"""Where a lever flips: the load at which its multiplier crosses 1.0 (issue 25 part 2).

Pure functions over one metric's multipliers at the levels of a sweep, in load order: x_1 < … < x_n, each
m_i with its interval [L_i, H_i] (:mod:`.under_load`; only the levels the guard lets through) and s_i, the
statistic the multiplier divides by (the arm's percentile for a latency, m = R / A; the reference's rate for a
rate, m = A / R), so that s_i · (m_i − 1) = d_i is the difference of the two arms' statistics (R − A for a latency,
A − R for a rate; s_i = 1 where it is not known: the multiplier's own deviation from 1).

**A side of 1, per level** (:func:`sides`): +1 where the lever pays beyond the sampling's doubt (L_i > 1), −1
where it costs (H_i < 1), 0 where the interval holds or touches 1 ("no clear difference"; without an interval,
the sign of m_i − 1).

**A crossing** lies between two levels on opposite sides, i < j, with only levels of no clear difference between
them (``between``: [x_i, x_j]): wobbles of a multiplier within its interval about 1 are no crossing, nor is a
multiplier that touches 1 and returns.  Its load is where the difference, interpolated linearly between levels,
is 0 — the first k in i … j − 1 with d_k = 0 (x_k), else d_k and d_(k+1) of opposite signs:

    x* = x_k + (x_(k+1) − x_k) · d_k / (d_k − d_(k+1))

The difference, not the ratio: two arms' latencies that each grow linearly with the load make a straight
difference and a curved ratio (1/m is as curved the other way), and a cost the client adds to each call alike
(its own time per call) cancels in the difference and pulls the ratio toward 1.  With s_i = 1 it is the
multiplier interpolated.  The first crossing in load order is reported; ``crossings`` counts them (more than one:
the sign changes back and forth, "mixed").  ``between`` holds whatever the curve's shape, with the multiplier
monotone there; the interpolated load assumes each arm's statistic straight between two levels.

**Its interval** is the sampling's part of the uncertainty only (of the levels' statistics, not of the
interpolation between them): the true multiplier lies within [L, H] at each level, so the crossing lies between
where the two bounds' differences s · (L − 1) and s · (H − 1), interpolated the same way, cross 0.  For a lever
that pays below the crossover (first clear side +1):

    low  = the first load where the lower bound's difference falls to 0 (None: ≤ 0 already at x_1)
    high = the load past which the upper bound's difference stays below 0: its crossing after the last level
           where it is ≥ 0 (None: ≥ 0 at x_n, the crossing may lie beyond the levels measured)

and mirrored for a lever that pays above it (low from the upper bound rising to 0, high from the lower bound
staying above 0 after).  An end that is open is beyond the measured levels; a level without an interval leaves
both ends open.

**Where it pays** (``pays``), over the levels on a side: "every level" (each +1), "no level" (each −1), "below" /
"above" the crossover, "mixed" (several crossings), "no clear difference" (no level on a side), "unknown" (no
level).
"""

from __future__ import annotations

from typing import Sequence

from ...schema.load_lever_rows import Crossover, Pays


def sides(ms: Sequence[float], lows: Sequence[float | None], highs: Sequence[float | None]) -> list[int]:
    """Each level's side of 1: +1 (L > 1), −1 (H < 1), 0 (no clear difference); see the module docstring."""
    out = []
    for m, lo, hi in zip(ms, lows, highs):
        if lo is None or hi is None:
            out.append((m > 1.0) - (m < 1.0))
        else:
            out.append(1 if lo > 1.0 else -1 if hi < 1.0 else 0)
    return out


def _zero(xs: Sequence[float], ds: Sequence[float], i: int, j: int) -> float:
    """The first load in [x_i, x_j] where the piecewise-linear curve through (x_k, d_k) is 0 (d_i, d_j of
    opposite signs)."""
    for k in range(i, j):
        if ds[k] == 0.0:
            return float(xs[k])
        if ds[k] * ds[k + 1] < 0.0:
            return xs[k] + (xs[k + 1] - xs[k]) * ds[k] / (ds[k] - ds[k + 1])
    return float(xs[j])


def crossings(xs: Sequence[float], ds: Sequence[float], side: Sequence[int]) -> list[tuple[float, float, float]]:
    """Every crossing, in load order: (its load, the two levels on opposite sides around it); *ds* the
    differences, *side* each level's side (see the module docstring)."""
    clear = [i for i, s in enumerate(side) if s != 0]
    return [(_zero(xs, ds, i, j), float(xs[i]), float(xs[j])) for i, j in zip(clear, clear[1:])
            if side[i] != side[j]]


def _first_at_or_below(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The first load where the curve through (x_i, y_i) reaches 0 going down; None when it starts at or below
    0, or never gets there."""
    if not ys or ys[0] <= 0.0:
        return None
    for i in range(len(ys) - 1):
        if ys[i + 1] <= 0.0:
            return xs[i] + (xs[i + 1] - xs[i]) * ys[i] / (ys[i] - ys[i + 1])
    return None


def _last_leaving(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The load past which the curve stays below 0: its crossing after the last level at or above 0; None when
    the last level is at or above 0, or no level is."""
    above = [i for i, y in enumerate(ys) if y >= 0.0]
    if not above or above[-1] == len(ys) - 1:
        return None
    i = above[-1]
    return xs[i] + (xs[i + 1] - xs[i]) * ys[i] / (ys[i] - ys[i + 1])


def crossover(xs: Sequence[float], ms: Sequence[float], lows: Sequence[float | None],
              highs: Sequence[float | None], scales: Sequence[float | None] | None = None
              ) -> tuple[Crossover | None, int]:
    """(the first crossing with its interval, or None; how many crossings there are): see the module docstring.
    *scales*: each level's s_i (None, or a level's None or ≤ 0: 1 at every level)."""
    given = [float(v) for v in scales if v is not None and v > 0] if scales is not None else []
    s = given if scales is not None and len(given) == len(scales) else [1.0] * len(ms)
    side = sides(ms, lows, highs)
    found = crossings(xs, [k * (m - 1.0) for k, m in zip(s, ms)], side)
    if not found:
        return None, 0
    x, left, right = found[0]
    known_lows, known_highs = [v for v in lows if v is not None], [v for v in highs if v is not None]
    if len(known_lows) < len(lows) or len(known_highs) < len(highs):
        return {"load": x, "low": None, "high": None, "between": [left, right]}, len(found)
    lo = [k * (float(v) - 1.0) for k, v in zip(s, known_lows)]
    hi = [k * (float(v) - 1.0) for k, v in zip(s, known_highs)]
    if next(v for v in side if v != 0) > 0:
        low, high = _first_at_or_below(xs, lo), _last_leaving(xs, hi)
    else:  # the mirror image: −d turns a rising curve into a falling one about 0
        low, high = _first_at_or_below(xs, [-v for v in hi]), _last_leaving(xs, [-v for v in lo])
    return {"load": x, "low": min(low, x) if low is not None else None,
            "high": max(high, x) if high is not None else None, "between": [left, right]}, len(found)


def pays(ms: Sequence[float], n_crossings: int, side: Sequence[int] | None = None) -> Pays:
    """Where the lever pays along the levels (see the module docstring); *side*: :func:`sides` (without it, the
    sign of each m − 1)."""
    if not ms:
        return "unknown"
    clear = [v for v in (side if side is not None else sides(ms, [None] * len(ms), [None] * len(ms))) if v != 0]
    if not clear:
        return "no clear difference"
    if n_crossings == 0:
        return "every level" if clear[0] > 0 else "no level"
    if n_crossings > 1:
        return "mixed"
    return "below" if clear[0] > 0 else "above"
