"""A lever across runs: the multiplier its controlled comparison measured in each run, and their ratio.

Within a run a lever is measured by a controlled comparison (two arms that differ in its knob only,
:func:`..base.knobs.comparisons`), each repeat of the arm paired with the same repeat of its reference (run back to
back), so a run's multiplier of a case is the geometric mean of its paired ratios T_reference / T_arm.  Across runs
the lever is the same comparison when both of its arms are matched (:mod:`.match`) and the later run measures the
same knob between them.  With r = log(T_reference / T_arm) of a paired repeat:

    a run's multiplier   = exp(mean over the K compared cases of mean_k(r))   (each case: mean r ± sd / √n, n − 1 df;
                            over cases: se² = Σ se_k² / K², Welch–Satterthwaite df, as :func:`.stats.geomean`)
    ratio later / base   = exp(mean over the cases of d_k),  d_k = mean_k(r_later) − mean_k(r_baseline)
                            (per case Welch over the two runs' paired log ratios, :func:`.stats.welch`: the runs
                            do not pair, the repeats within each do)

**Why not corrected for the machine.**  Each multiplier is a ratio of two arms timed back to back in the same run, so
a machine slower by the same factor in both phases slows both arms alike and cancels; the cross-run correction of
:mod:`.machine` is for turn times, not for ratios.

**The verdict** is :func:`.stats.verdict`'s against the threshold t, read for a multiplier: "pays more" (the ratio
above t, its interval wholly above 1x), "pays less" (below 1/t, wholly below), "same" (within [1/t, t]),
"undecided".  It never moves the exit code: a lever paying less is not a slowdown of its own (the arms' rows say
what got slower).

**The guard**: a case of the lever is refused where the cross-run cell of either of its arms is refused (a failed
call, the work changed between the runs, an arm drifted within a run, no turn), or where its two arms did different
work within either run (their median generated tokens per turn differ beyond the experiment's cell tolerance, as
the run's own guard refuses the multiplier).  A lever all of whose cases are refused is refused, with the reasons.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ...schema.compare_rows import CellRow, LeverRow, LeverVerdict, Verdict
from ..base.knobs import Comparison
from ..experiment.verdicts import all_comparisons, pairs, repeats_run, turn_log
from .runs import RunView
from .stats import LogDiff, geomean, verdict, welch

_WORDS: dict[Verdict, LeverVerdict] = {"slower": "pays more", "faster": "pays less", "same": "same",
                                       "undecided": "undecided", "refused": "refused"}


def _log_ratios(run: RunView, comp: Comparison, cases: Sequence[str]) -> dict[str, list[float]]:
    log = turn_log(run.ds)
    return pairs(log, comp, list(cases), repeats_run(log, list(cases)))


def _one_run(r: Sequence[float]) -> LogDiff | None:
    """A case's mean paired log ratio in one run, with its standard error (None: fewer than 2 pairs)."""
    if not r:
        return None
    n = len(r)
    m = sum(r) / n
    if n < 2:
        return LogDiff(m, None, None)
    return LogDiff(m, statistics.stdev(r) / math.sqrt(n), float(n - 1))


def _volume_within(run: RunView, comp: Comparison, case: str) -> str | None:
    """Why the lever's arms did different work within *run* on *case*, or None."""
    ca, cv = run.cells.get((comp.arm, case)), run.cells.get((comp.vs, case))
    if not ca or not cv or not ca.output or not cv.output:
        return None
    oa, ov = statistics.median(ca.output), statistics.median(cv.output)
    lo, hi = min(oa, ov), max(oa, ov)
    if hi == 0 or (lo > 0 and (hi - lo) / lo <= run.tolerance_cell):
        return None
    return (f"{comp.arm} and {comp.vs} did different work within {run.path} on {case} ({oa:g} against {ov:g} tokens "
            f"a turn)")


Pending = tuple[LeverRow, list[LogDiff], list[LogDiff], list[LogDiff]]


def lever_pending(base: RunView, later: RunView, arm_pairs: Sequence[tuple[str, str]],
                  case_pairs: Sequence[tuple[str, str]], cells: Sequence[CellRow]) -> list[Pending]:
    """Each lever both runs measure between matched arms: its row less the figures, and per compared case its log
    difference later − baseline and each run's own mean log ratio (module docstring).  *cells*: the cross-run cells
    (their refusals refuse the lever's case)."""
    to_later = dict(arm_pairs)
    refused = {(c["arm"], c["case"]): c["reason"] for c in cells if c["refused"]}
    later_comps = {(c.arm, c.vs, c.lever): c for c in all_comparisons(later.ds) if c.controlled and c.lever}
    out: list[Pending] = []
    for comp in all_comparisons(base.ds):
        if not (comp.controlled and comp.lever and comp.arm in to_later and comp.vs in to_later):
            continue
        lcomp = later_comps.get((to_later[comp.arm], to_later[comp.vs], comp.lever))
        if lcomp is None:
            continue
        rb = _log_ratios(base, comp, [c for c, _ in case_pairs])
        rl = _log_ratios(later, lcomp, [lc for _, lc in case_pairs])
        diffs, own_b, own_l, reasons = [], [], [], []
        for case, lcase in case_pairs:
            why = [f"{a}: {refused[(a, case)]}" for a in (comp.arm, comp.vs) if (a, case) in refused]
            why += [w for w in (_volume_within(base, comp, case), _volume_within(later, lcomp, lcase)) if w]
            d = welch([math.exp(v) for v in rb.get(case, [])], [math.exp(v) for v in rl.get(case, [])])
            ob, ol = _one_run(rb.get(case, [])), _one_run(rl.get(case, []))
            if d is None or ob is None or ol is None:
                why.append("no paired repeat of the lever's arms in "
                           + ("the baseline" if ob is None else "the later run"))
            if why:
                reasons.append(f"{case}: " + "; ".join(why))
                continue
            assert d is not None and ob is not None and ol is not None
            diffs.append(d)
            own_b.append(ob)
            own_l.append(ol)
        row: LeverRow = {"lever": comp.lever, "arm": comp.arm, "vs": comp.vs, "later_arm": lcomp.arm,
                         "later_vs": lcomp.vs, "cases": len(diffs), "refused_cases": len(reasons),
                         "multiplier_baseline": None, "multiplier_baseline_low": None, "multiplier_baseline_high": None,
                         "multiplier_later": None, "multiplier_later_low": None, "multiplier_later_high": None,
                         "ratio": None, "low": None, "high": None, "verdict": "refused" if not diffs else "undecided",
                         "refused": not diffs, "reason": " | ".join(reasons) or None, "note": None}
        out.append((row, diffs, own_b, own_l))
    return out


def _ends(g: LogDiff | None, confidence: float) -> tuple[float | None, float | None, float | None]:
    if g is None:
        return None, None, None
    iv = g.interval(confidence)
    return math.exp(g.d), iv[0] if iv else None, iv[1] if iv else None


def lever_row(row: LeverRow, diffs: Sequence[LogDiff], own_b: Sequence[LogDiff], own_l: Sequence[LogDiff],
              confidence: float, threshold: float) -> LeverRow:
    """*row* with its figures at *confidence* and its verdict against *threshold* (module docstring)."""
    (row["multiplier_baseline"], row["multiplier_baseline_low"],
     row["multiplier_baseline_high"]) = _ends(geomean(own_b), confidence)
    row["multiplier_later"], row["multiplier_later_low"], row["multiplier_later_high"] = _ends(geomean(own_l),
                                                                                                confidence)
    g = geomean(diffs)
    if g is None:
        return row
    row["ratio"], row["low"], row["high"] = _ends(g, confidence)
    assert row["ratio"] is not None
    iv = (row["low"], row["high"]) if row["low"] is not None and row["high"] is not None else None
    row["verdict"] = _WORDS[verdict(row["ratio"], iv, threshold)]
    if any(d.se is None for d in diffs):
        row["note"] = ("interval from the spread between the cases (a case has none of its own)" if len(diffs) > 1
                       else "no interval: its one case has none (one paired repeat in a run, or no scatter)")
    return row

