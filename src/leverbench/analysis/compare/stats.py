"""The statistics of a comparison across runs: a ratio of geometric means with a Welch interval, and its verdict.

**Why this interval.**  Within a run leverbench pairs each repeat of one arm with the same repeat of another (run
back to back: a pair shares the machine's state).  Across runs nothing pairs: the baseline's third repeat of a case
and the later run's third repeat ran hours or machines apart, and their order says nothing.  The repeats of a cell
in each run are two independent samples, of sizes n₁ and n₂ that may differ, each with its own scatter (an engine
upgrade can change the noise as well as the speed).  Turn times are positive and their noise multiplicative (a
request's work times a speed), so the comparison is made on log turn times: with y = log turn_s,

    d      = mean(y_later) − mean(y_baseline)          ratio = exp(d): the geometric means' ratio, later / baseline
    se²    = s²_later / n_later + s²_baseline / n_baseline
    ν      = se⁴ / ((s²_l/n_l)² / (n_l − 1) + (s²_b/n_b)² / (n_b − 1))        (Welch–Satterthwaite)
    [low, high] = exp(d ± t_{ν,(1+γ)/2} · se)

Welch's t needs neither equal sizes nor equal variances, the two things runs far apart do not share; on logs it is
the interval of a ratio, symmetric in the ratio's log, and its ends stay positive.  A bootstrap would need more
repeats than a run has (3 by default) to be trusted, and a rank test gives no ratio.  The geometric mean (not the
median) is the estimate the interval is of; with lognormal noise it is also the median.

**Over cases** (an arm's figure, as pyperf's geometric mean over benchmarks): each case its own fixed effect, the
arm's ratio = exp(mean over its K compared cases of d_k), se² = Σ se_k² / K², ν by Welch–Satterthwaite over the cases'
terms (Scheffé's answer to unequal variances, as the sequential verdicts use within a run).  Where a case has no
interval of its own (one repeat on a side, or no scatter), the arm's interval comes from the spread between its
cases instead: se = sd(d_k) / √K on K − 1 degrees of freedom (the cases' own noise and their real differences
together: wider, never narrower than it should be); with one such case there is none, and the row says why.

**Confidence.**  Each interval is taken at γ = 1 − 5 % / m, m the rows a verdict is drawn for (every compared cell
and every arm of every later run: Bonferroni), so that noise alone makes any row "slower" in at most 2.5 % of
comparisons, whatever the number of cells — the promise a CI gate needs.  The levers' rows (:mod:`.levers`) never
move the exit code and are not counted; their intervals are taken at the same γ.

**The verdict** against the threshold t (``--threshold``, default 1.05):

- **slower**: the ratio is above t and the interval lies wholly above 1 (a slowdown the repeats show, larger than
  the threshold) — asv's ``continuous`` rule (a factor and a significant difference);
- **faster**: the mirror (ratio below 1/t, interval wholly below 1);
- **same**: the ratio lies within [1/t, t]: no change beyond the threshold (its interval says how much a change the
  repeats could still hide; where it lies inside [1/t, t] the sameness is shown, not only not contradicted);
- **undecided**: the ratio is beyond the threshold but the interval reaches 1 (the repeats do not show it), or
  there is no interval (a run with one repeat of the cell, or no scatter at all to judge against).

Assumed: the repeats of a cell are independent within each run (the run's own guard: each turn meets the declared
cache state), log turn times roughly normal within a cell, and the machine's speed constant within each run (a run
whose arm drifted is refused, :mod:`.machine`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from scipy import stats

from ...schema.compare_rows import Verdict

FAMILY = 0.95  # all the intervals of one compare hold together with this confidence (Bonferroni)


@dataclass(frozen=True)
class LogDiff:
    """d = the mean log-time difference later − baseline, its standard error and Welch degrees of freedom (None: no
    scatter to judge against, fewer than 2 repeats on a side)."""

    d: float
    se: float | None
    df: float | None

    def interval(self, confidence: float) -> tuple[float, float] | None:
        """[low, high] of the ratio exp(d), or None without an interval (no scatter, or none measurable)."""
        if self.se is None or self.df is None or not self.se > 0:
            return None
        t = float(stats.t.ppf((1.0 + confidence) / 2.0, self.df))
        return math.exp(self.d - t * self.se), math.exp(self.d + t * self.se)


def _mean_var(y: Sequence[float]) -> tuple[float, float | None]:
    n = len(y)
    m = sum(y) / n
    return m, (sum((v - m) ** 2 for v in y) / (n - 1) if n > 1 else None)


def welch(baseline: Sequence[float], later: Sequence[float]) -> LogDiff | None:
    """The log difference of two samples of positive times (module docstring); None where a side has none."""
    yb = [math.log(v) for v in baseline if v > 0 and math.isfinite(v)]
    yl = [math.log(v) for v in later if v > 0 and math.isfinite(v)]
    if not yb or not yl:
        return None
    mb, vb = _mean_var(yb)
    ml, vl = _mean_var(yl)
    if vb is None or vl is None:
        return LogDiff(ml - mb, None, None)
    qb, ql = vb / len(yb), vl / len(yl)
    se2 = qb + ql
    if not se2 > 0:
        return LogDiff(ml - mb, 0.0, None)
    df = se2 ** 2 / (qb ** 2 / (len(yb) - 1) + ql ** 2 / (len(yl) - 1))
    return LogDiff(ml - mb, math.sqrt(se2), df)


def with_extra(diff: LogDiff, shift: float, se: float, df: float | None) -> LogDiff:
    """*diff* moved by *shift* (a correction, in log) whose own standard error *se* (with *df* degrees of freedom)
    adds to its variance; the degrees of freedom by Welch–Satterthwaite over the two terms."""
    if diff.se is None or diff.df is None:
        return LogDiff(diff.d + shift, diff.se, diff.df)
    terms = [(diff.se ** 2, diff.df)] + ([(se ** 2, df)] if se > 0 and df else [])
    return _combine(diff.d + shift, terms)


def _combine(d: float, terms: Sequence[tuple[float, float]]) -> LogDiff:
    var = sum(v for v, _ in terms)
    if not var > 0:
        return LogDiff(d, 0.0, None)
    den = sum(v ** 2 / df for v, df in terms if df > 0)
    return LogDiff(d, math.sqrt(var), var ** 2 / den if den > 0 else None)


def geomean(diffs: Sequence[LogDiff]) -> LogDiff | None:
    """The mean of the cases' log differences with its standard error and Welch–Satterthwaite degrees of freedom
    (module docstring); where a case has no interval of its own, from the spread between the cases (:func:`spread`)."""
    if not diffs:
        return None
    k = len(diffs)
    d = sum(x.d for x in diffs) / k
    if any(x.se is None or x.df is None for x in diffs):
        return spread(diffs)
    return _combine(d, [((x.se or 0.0) ** 2 / k ** 2, x.df or 0.0) for x in diffs])


def spread(diffs: Sequence[LogDiff]) -> LogDiff:
    """The mean of the K cases' log differences with the standard error of the spread between them, sd(d_k) / √K on
    K − 1 degrees of freedom (module docstring: where a case has no interval of its own); none with one case."""
    k = len(diffs)
    d = sum(x.d for x in diffs) / k
    if k < 2:
        return LogDiff(d, None, None)
    var = sum((x.d - d) ** 2 for x in diffs) / (k - 1)
    return LogDiff(d, math.sqrt(var / k), float(k - 1))


def verdict(ratio: float, interval: tuple[float, float] | None, threshold: float) -> Verdict:
    """faster, slower, same or undecided against *threshold* (module docstring)."""
    if 1.0 / threshold <= ratio <= threshold:
        return "same"
    if interval is None:
        return "undecided"
    low, high = interval
    if ratio > threshold and low > 1.0:
        return "slower"
    if ratio < 1.0 / threshold and high < 1.0:
        return "faster"
    return "undecided"


def family_confidence(rows: int) -> float:
    """Each interval's confidence so that *rows* of them hold together at :data:`FAMILY` (Bonferroni)."""
    return 1.0 - (1.0 - FAMILY) / max(rows, 1)
