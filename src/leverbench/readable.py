"""When an interval is given in figures, and the words that stand for one that is not: one rule for every page.

Light on purpose (no numpy, no scipy): the reports import it, and ``leverbench --help`` must load nothing heavy.
"""

from __future__ import annotations

import math

SPAN = 10.0  # an interval whose ends lie further apart than this factor is said in words (:func:`bounded`)


def bounded(low: float | None, high: float | None) -> bool:
    """Whether an interval of a ratio is given in figures on every page (drift table, warnings, reasons, the
    verdicts' intervals on the first screen, report.md and report.html).  The one rule: **an interval of a ratio
    — a speed ratio 1 + change (a drift), or a multiplier — is given in figures when both ends are finite and
    positive and the upper is at most** :data:`SPAN` **(10) times the lower**; wider, in words ("no estimate: 4
    sentinels scatter too much to bound it").  A change "between −90 % and +660 %" bounds nothing a reader can
    use.  The intervals are symmetric in log, so tenfold is ×/÷ 3.2 about the estimate, whatever the estimate.
    With 4 sentinels (2 degrees of freedom, each interval at 99.2 % by Bonferroni over 6 tests: t = 10.9) a
    scatter of 8 % about the trend already spans tenfold: few sentinels' honest answer, not a fault of the fit
    (exp never reaches 0: a lower end printed "−100.0 %" was −99.96 % rounded).  *low*, *high*: the ratio's
    ends (1 + change for a drift), None where there is none."""
    return (low is not None and high is not None and math.isfinite(low) and math.isfinite(high)
            and 0.0 < low <= high <= SPAN * low)


def change_words(change: float | None, low: float | None, high: float | None, points: int, digits: int = 0) -> str:
    """A relative change (a drift) and its interval as every page writes it: ``+4% [-26%, +46%]``; with fewer
    than 3 points ``+4% (no interval: 2 sentinels)``; an interval not :func:`bounded` in words — the side the
    interval rules out where it excludes 0 ("above +20% (5 sentinels scatter too much to bound it above)"), else
    "no estimate: 4 sentinels scatter too much to bound it"; *digits*: of the percentages."""
    def f(v: float) -> str:
        return f"{v:+.{digits}%}"
    if change is None:
        return "unknown"
    if low is None or high is None:
        return f"{f(change)} (no interval: {points} sentinel{'s' if points != 1 else ''})"
    if bounded(1.0 + low, 1.0 + high):
        return f"{f(change)} [{f(low)}, {f(high)}]"
    why = f"{points} sentinels scatter too much to bound it"
    if low > 0:
        return f"above {f(low)} ({why} above)"
    if high < 0:
        return f"below {f(high)} ({why} below)"
    return f"no estimate: {why}"


def ratio_words(low: float | None, high: float | None) -> str:
    """A multiplier's interval as every page writes it: ``[1.73–2.03]`` where :func:`bounded`; else, where the
    interval still lies on one side of 1x, that side's end in words (``[above 1.60x: its repeats bound it below
    only]``, likewise ``below``); else ``[no interval: its repeats do not bound it]``."""
    if bounded(low, high):
        return f"[{low:.2f}–{high:.2f}]"
    if low is not None and math.isfinite(low) and low > 1.0:
        return f"[above {_beside_one(low)}x: its repeats bound it below only]"
    if high is not None and math.isfinite(high) and 0.0 < high < 1.0:
        return f"[below {_beside_one(high)}x: its repeats bound it above only]"
    return "[no interval: its repeats do not bound it]"


def _beside_one(x: float) -> str:
    """*x* (not 1) with two decimals, or as many more as it takes not to read 1.00."""
    for digits in range(2, 7):
        if f"{x:.{digits}f}" != f"{1:.{digits}f}":
            return f"{x:.{digits}f}"
    return f"{x:g}"
