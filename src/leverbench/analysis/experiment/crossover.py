"""Where a lever flips: the load at which its multiplier crosses 1.0 (issue 25 part 2).

Pure functions over one metric's multipliers at the levels of a sweep, in load order: x_1 < … < x_n, each
m_i with its interval [L_i, H_i] (:mod:`.under_load`; only the levels the guard lets through).

**The crossover** is interpolated linearly between the two levels around it: where m_i and m_(i+1) lie on
either side of 1 (or m_i = 1),

    x* = x_i + (x_(i+1) − x_i) · (m_i − 1) / (m_i − m_(i+1))

(on the multiplier itself, not its log: a goodput multiplier may be 0).  The first such crossing in load order
is reported; ``crossings`` counts them (more than one: the lever's sign changes back and forth, "mixed").

``between`` gives those two levels: with the multiplier monotone between them, the crossing lies there whatever
the curve's shape; the interpolated load assumes it straight.

**Its interval** (of the sampling at the levels, not of the interpolation between them) inverts the multipliers'
band: the true multiplier lies within [L, H] at each level, so the
crossing lies between where the two bounds cross 1.  For a lever that pays below the crossover (m > 1 first):

    low  = the first load where L, interpolated the same way, falls to 1 (None: L is ≤ 1 already at x_1)
    high = the load past which H stays below 1: its crossing after the last level with H ≥ 1 (None: H ≥ 1 at
           x_n, the crossing may lie beyond the levels measured)

and mirrored for a lever that pays above it (low from H rising to 1, high from L staying above 1 after).  An end
of the interval that is open is beyond the measured levels; a level without an interval leaves both ends open
on its side.

**Where it pays** (``pays``): "every level" (every m_i > 1), "no level" (every m_i < 1), "below" / "above"
the crossover, "mixed" (several crossings), "unknown" (no level).
"""

from __future__ import annotations

from typing import Sequence

from ...schema.load_lever_rows import Crossover, Pays


def crossings(xs: Sequence[float], ms: Sequence[float]) -> list[tuple[float, float, float]]:
    """Every load at which the piecewise-linear multiplier curve through (x_i, m_i) crosses 1, in order (a level
    exactly at 1 counts once), each with the two levels around it."""
    out: list[tuple[float, float, float]] = []
    for i in range(len(xs) - 1):
        a, b = ms[i] - 1.0, ms[i + 1] - 1.0
        if a == 0.0:
            if not out or out[-1][0] != xs[i]:
                out.append((float(xs[i]), float(xs[i]), float(xs[i])))
        elif a * b < 0:
            out.append((xs[i] + (xs[i + 1] - xs[i]) * a / (a - b), float(xs[i]), float(xs[i + 1])))
    if ms and ms[-1] == 1.0 and (not out or out[-1][0] != xs[-1]):
        out.append((float(xs[-1]), float(xs[-1]), float(xs[-1])))
    return out


def _first_at_or_below(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The first load where the curve through (x_i, y_i) reaches 1 going down; None when it starts at or below
    1, or never gets there."""
    if not ys or ys[0] <= 1.0:
        return None
    for i in range(len(ys) - 1):
        if ys[i + 1] <= 1.0:
            return xs[i] + (xs[i + 1] - xs[i]) * (ys[i] - 1.0) / (ys[i] - ys[i + 1])
    return None


def _last_leaving(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The load past which the curve stays below 1: its crossing after the last level at or above 1; None when
    the last level is at or above 1, or no level is."""
    above = [i for i, y in enumerate(ys) if y >= 1.0]
    if not above or above[-1] == len(ys) - 1:
        return None
    i = above[-1]
    return xs[i] + (xs[i + 1] - xs[i]) * (ys[i] - 1.0) / (ys[i] - ys[i + 1])


def crossover(xs: Sequence[float], ms: Sequence[float], lows: Sequence[float | None],
              highs: Sequence[float | None]) -> tuple[Crossover | None, int]:
    """(the first crossing with its interval, or None; how many crossings there are): see the module docstring."""
    found = crossings(xs, ms)
    if not found:
        return None, 0
    x, left, right = found[0]
    down = ms[0] > 1.0 or (ms[0] == 1.0 and len(ms) > 1 and ms[1] < 1.0)
    if any(v is None for v in (*lows, *highs)):
        return {"load": x, "low": None, "high": None, "between": [left, right]}, len(found)
    lo, hi = [float(v) for v in lows], [float(v) for v in highs]  # type: ignore[arg-type]
    if down:
        low, high = _first_at_or_below(xs, lo), _last_leaving(xs, hi)
    else:  # the mirror image: 2 − m turns a rising curve into a falling one about 1
        low = _first_at_or_below(xs, [2.0 - h for h in hi])
        high = _last_leaving(xs, [2.0 - v for v in lo])
    return {"load": x, "low": min(low, x) if low is not None else None,
            "high": max(high, x) if high is not None else None, "between": [left, right]}, len(found)


def pays(ms: Sequence[float], n_crossings: int) -> Pays:
    """Where the lever pays along the levels (see the module docstring)."""
    if not ms:
        return "unknown"
    if n_crossings == 0:
        return "every level" if ms[0] > 1.0 else "no level"
    if n_crossings > 1:
        return "mixed"
    return "below" if ms[0] > 1.0 or (ms[0] == 1.0 and len(ms) > 1 and ms[1] < 1.0) else "above"
