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
call, the work changed between the runs, an arm drifted within a run, no turn) or was put on the baseline's work
(:mod:`.work`: its turns are, a multiplier is not), or where its two arms did different work within either run
(their median generated tokens per turn differ beyond the experiment's cell tolerance, as the run's own guard
refuses the multiplier).  A lever all of whose cases are refused is refused, with the reasons, its figures those of
every case with pairs (shown, as a refused cell's ratio is).  A lever the later run measures with the other arm as
its reference is read the other way round (its log ratios negated, said in the note); one whose arm has no match, or
whose arms the later run does not compare in that knob alone, is a row that says it was not compared.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ...schema.compare_rows import CellRow, LeverRow, LeverVerdict, Verdict
from ..base.knobs import Comparison
from ..base.stats import spread
from ..experiment.verdicts import TurnLog, all_comparisons, pairs, repeats_run, turn_log
from .runs import RunView
from .stats import LogDiff, geomean, verdict, welch

_WORDS: dict[Verdict, LeverVerdict] = {"slower": "pays more", "faster": "pays less", "same": "same",
                                       "undecided": "undecided", "refused": "refused"}


def _log_ratios(log: TurnLog, comp: Comparison, cases: Sequence[str]) -> dict[str, list[float]]:
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
    if spread(oa, ov) <= run.tolerance_cell:
        return None
    return (f"{comp.arm} and {comp.vs} did different work within {run.path} on {case} ({oa:g} against {ov:g} tokens "
            f"a turn)")


Pending = tuple[LeverRow, list[LogDiff], list[LogDiff], list[LogDiff]]


def _row(comp: Comparison, later_arm: str | None, later_vs: str | None, cases: int, refused: int,
         reasons: Sequence[str], compared: bool = True) -> LeverRow:
    assert comp.lever is not None
    return {"lever": comp.lever, "arm": comp.arm, "vs": comp.vs, "later_arm": later_arm, "later_vs": later_vs,
            "compared": compared, "cases": cases, "refused_cases": refused, "multiplier_baseline": None,
            "multiplier_baseline_low": None, "multiplier_baseline_high": None, "multiplier_later": None,
            "multiplier_later_low": None, "multiplier_later_high": None, "ratio": None, "low": None, "high": None,
            "verdict": "refused" if not cases else "undecided", "refused": not cases,
            "reason": " | ".join(reasons) or None, "note": None}


def lever_pending(base: RunView, later: RunView, arm_pairs: Sequence[tuple[str, str]],
                  case_pairs: Sequence[tuple[str, str]], cells: Sequence[CellRow]) -> list[Pending]:
    """Each lever the baseline measures: its row less the figures, and per compared case its log difference later −
    baseline and each run's own mean log ratio (module docstring); refused, saying why, where the later run does not
    measure it between the matched arms.  *cells*: the cross-run cells (their refusals, and a correction to equal
    work, refuse the lever's case).  Where every case is refused, the figures are those of every case with pairs
    (shown, as a refused cell's ratio is)."""
    to_later = dict(arm_pairs)
    refused: dict[tuple[str, str], list[str]] = {}
    for c in cells:
        why = ([c["reason"] or "refused"] if c["refused"] else []) + (
            ["its work changed between the runs (its turns were put on the baseline's work; a multiplier is not)"]
            if c["equal_work"] else [])
        if why:
            refused[(c["arm"], c["case"])] = why
    later_comps = {(frozenset((c.arm, c.vs)), c.lever): c for c in all_comparisons(later.ds)
                   if c.controlled and c.lever}
    log_b, log_l = turn_log(base.ds), turn_log(later.ds)  # (each run's turns by cell: read once for every lever)
    out: list[Pending] = []
    for comp in all_comparisons(base.ds):
        if not (comp.controlled and comp.lever):
            continue
        missing = [a for a in (comp.arm, comp.vs) if a not in to_later]
        if missing:
            out.append((_row(comp, None, None, 0, 0, [
                f"not compared: arm {missing[0]} has no match in the later run"], compared=False), [], [], []))
            continue
        la, lv = to_later[comp.arm], to_later[comp.vs]
        lcomp = later_comps.get((frozenset((la, lv)), comp.lever))
        if lcomp is None:
            out.append((_row(comp, la, lv, 0, 0, [
                f"not compared: the later run's {la} and {lv} are no controlled pair in {comp.lever} (another knob "
                "differs between them, or this one does not)"], compared=False), [], [], []))
            continue
        flip = lcomp.arm != la  # the later run takes the other arm as the reference: its log ratios the other way
        rb = _log_ratios(log_b, comp, [c for c, _ in case_pairs])
        rl = {k: [-v if flip else v for v in x] for k, x in _log_ratios(log_l, lcomp, [lc for _, lc in case_pairs]
                                                                        ).items()}
        ok: list[tuple[LogDiff, LogDiff, LogDiff]] = []
        shown: list[tuple[LogDiff, LogDiff, LogDiff]] = []
        reasons = []
        for case, lcase in case_pairs:
            why = [f"{a}: {w}" for a in (comp.arm, comp.vs) for w in refused.get((a, case), [])]
            why += [w for w in (_volume_within(base, comp, case), _volume_within(later, lcomp, lcase)) if w]
            d = welch([math.exp(v) for v in rb.get(case, [])], [math.exp(v) for v in rl.get(lcase, [])])
            ob, ol = _one_run(rb.get(case, [])), _one_run(rl.get(lcase, []))
            if d is None or ob is None or ol is None:
                why.append("no paired repeat of the lever's arms in "
                           + ("the baseline" if ob is None else "the later run"))
            else:
                shown.append((d, ob, ol))
            if why:
                reasons.append(f"{case}: " + "; ".join(why))
            elif d is not None and ob is not None and ol is not None:
                ok.append((d, ob, ol))
        row = _row(comp, la, lv, len(ok), len(reasons), reasons)
        if flip:
            row["note"] = f"the later run measures it with {lcomp.vs} as the reference: its ratios taken the other way"
        used = ok or shown
        out.append((row, [x[0] for x in used], [x[1] for x in used], [x[2] for x in used]))
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
    if not row["refused"]:
        row["verdict"] = _WORDS[verdict(row["ratio"], iv, threshold)]
    if any(d.se is None for d in diffs):
        said = ("interval from the spread between the cases (a case has none of its own)" if len(diffs) > 1
                else "no interval: its one case has none (one paired repeat in a run, or no scatter)")
        row["note"] = f"{row['note']}; {said}" if row["note"] else said
    return row

