"""Runs compared with a baseline run: per matched (arm, case) and per arm the ratio later / baseline, under the guard.

The guard across runs refuses a cell (its ratio still shown where it has one, with the reason) when:

- either run has a failed call in it (a failed call, a failed turn, a failed companion: the turn was not the work the
  other run timed), counted per run;
- the two runs' output volumes differ beyond the experiment's cell tolerance (``volume_tolerance_cell``, default
  20 %: the median generated tokens per turn, spread = |later − baseline| / the smaller; none against some is
  beyond it; where a run has no token counts the cell says the volume is unknown): the runs did different
  work — unless the later turns can be put on the baseline's work by the later run's own decode speed
  (:mod:`.work`: a correction of at most a quarter of the cell's time), then the cell is compared at equal work
  (``equal_work``, its note saying by how much);
- its arm drifted within either run (:mod:`.machine`): one speed per run cannot describe it;
- either run has no successful turn of it.

A case the runs sent differently is not compared at all (:mod:`.match`).  The statistics are :mod:`.stats`'s; the
machine's speed between the runs, :mod:`.machine`'s; each lever's multiplier in both runs, :mod:`.levers`'s (never
gated).  Every row has its figures as measured and, where the machine's
speed changed and could be corrected, with the later turns on the baseline's speed (``corrected_*``); the exit code
follows the measured verdicts, or the corrected ones with ``--correct-machine``: 1 where a row is slower, and with
``--strict`` also where a row is undecided beyond the threshold toward slower or refused.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import BadInput
from ...schema.compare_rows import COMPARE_SCHEMA, ArmRow, CellRow, CompareResult, Figures, RunComparison, Verdict
from ..base.stats import spread
from .levers import lever_pending, lever_row
from .machine import Machine, corrected_turns, machine_speed, shares
from .match import changes, check_pairs, match_arms, match_cases
from .runs import RunView
from .stats import LogDiff, family_confidence, geomean, verdict, welch, with_extra
from .work import work_correction

DEFAULT_THRESHOLD = 1.05


@dataclass
class _Pending:
    """A cell before its interval: its row less the figures, its log differences (as measured, and with the later
    turns on the baseline's machine speed), the correction's standard error."""

    row: CellRow
    diff: LogDiff | None
    corr: LogDiff | None
    extra_se: float


def _gm(x: Sequence[float]) -> float | None:
    y = [v for v in x if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, y)) / len(y)) if y else None


def _volume(ob: float | None, ol: float | None, tol: float) -> tuple[str | None, str | None]:
    """(the refusal, the note) of the runs' output volumes: beyond *tol* (none against some is beyond), or unknown."""
    if ob is None or ol is None:
        who = "either run" if ob is None and ol is None else "the baseline" if ob is None else "the later run"
        return None, f"output volume unknown in {who} (no token counts): equal work not checked"
    if spread(ob, ol) <= tol:
        return None, None
    change = f"{ol / ob - 1:+.0%}" if ob > 0 else "from none"
    return (f"output volume differs: {ob:g} → {ol:g} tokens a turn ({change}), beyond the tolerance {tol:.0%}: the "
            "runs did different work"), None


def _refusals(base: RunView, later: RunView, arm: str, larm: str, nb: int, nl: int, fb: int, fl: int,
              volume: str | None) -> list[str]:
    out = []
    if fb or fl:
        out.append("failed calls: " + ", ".join(f"{n} in the {who}" for who, n in (("baseline", fb), ("later run", fl))
                                                if n))
    if not nb or not nl:
        out.append("no successful turn in the " + ("baseline" if not nb else "later run"))
    if volume:
        out.append(volume)
    for who, run, a in (("baseline", base, arm), ("later run", later, larm)):
        if a in run.drifted:
            out.append(f"{a} drifted within the {who} ({run.drifted[a]}): no one speed of that run to compare")
    return out


def _no_interval(nb: int, nl: int) -> str:
    if nb < 2 or nl < 2:
        return "no interval: one repeat in the " + ("baseline" if nb < 2 else "later run")
    return "no interval: no scatter at all in its turn times to judge against"


def _cells(base: RunView, later: RunView, machine: Machine, times: np.ndarray, arms: Sequence[tuple[str, str]],
           cases: Sequence[tuple[str, str]]) -> list[_Pending]:
    out = []
    corrected = bool(machine.row["corrected"])
    for arm, larm in arms:
        for case, lcase in cases:
            cb, cl = base.cells.get((arm, case)), later.cells.get((larm, lcase))
            xb = cb.turn_s if cb else []
            xl = cl.turn_s if cl else []
            xc = [float(times[i]) for i in cl.rows] if cl else []
            ob = statistics.median(cb.output) if cb and cb.output else None
            ol = statistics.median(cl.output) if cl and cl.output else None
            fb, fl = (cb.failed if cb else 0), (cl.failed if cl else 0)
            volume, note = _volume(ob, ol, base.tolerance_cell)
            measured = xl
            work = None
            if volume and cl and ob is not None and ol is not None:
                work, why = work_correction(later, cl.rows, ob)
                if work is None:
                    volume += f" (the equal-work correction: {why})"
                else:
                    xl = [t + s for t, s in zip(xl, work.seconds)]
                    xc = [t + s * machine.f_decode for t, s in zip(xc, work.seconds)]
                    volume, note = None, work.words(ob, ol)
            reasons = _refusals(base, later, arm, larm, len(xb), len(xl), fb, fl, volume)
            extra = 0.0
            if corrected and cl:
                sp, sd = shares(later, cl.rows)
                extra = math.hypot(sp * machine.se_prefill, sd * machine.se_decode)
            row: CellRow = {"arm": arm, "later_arm": larm, "case": case, "later_case": lcase, "n_baseline": len(xb),
                            "n_later": len(xl), "baseline_s": _gm(xb), "later_s": _gm(measured), "ratio": None,
                            "low": None, "high": None, "verdict": "refused" if reasons else "undecided",
                            "refused": bool(reasons), "reason": "; ".join(reasons) or None, "failed_baseline": fb,
                            "failed_later": fl, "output_baseline": ob, "output_later": ol, "corrected": corrected,
                            "corrected_ratio": None, "corrected_low": None, "corrected_high": None,
                            "corrected_verdict": None, "note": note, "equal_work": work is not None,
                            "later_equal_work_s": _gm(xl) if work is not None else None}
            out.append(_Pending(row, welch(xb, xl), welch(xb, xc) if corrected else None, extra))
    return out


def _figures(d: LogDiff, confidence: float, threshold: float) -> tuple[float, float | None, float | None, Verdict]:
    iv = d.interval(confidence)
    return math.exp(d.d), iv[0] if iv else None, iv[1] if iv else None, verdict(math.exp(d.d), iv, threshold)


def _finish(p: _Pending, machine: Machine, confidence: float, threshold: float) -> CellRow:
    row = p.row
    if p.diff is None:
        return row
    row["ratio"], row["low"], row["high"], v = _figures(p.diff, confidence, threshold)
    if row["low"] is None and not row["refused"]:
        row["note"] = "; ".join(x for x in (row["note"], _no_interval(row["n_baseline"], row["n_later"])) if x)
    if p.corr is not None:
        c = with_extra(p.corr, 0.0, p.extra_se, machine.df) if p.extra_se > 0 else p.corr
        row["corrected_ratio"], row["corrected_low"], row["corrected_high"], cv = _figures(c, confidence, threshold)
        row["corrected_verdict"] = "refused" if row["refused"] else cv
    if not row["refused"]:
        row["verdict"] = v
    return row


def _arm_row(arm: str, larm: str, pending: Sequence[_Pending], later: RunView, machine: Machine,
             confidence: float, threshold: float) -> ArmRow:
    ok = [p for p in pending if not p.row["refused"] and p.diff is not None]
    corrected = bool(machine.row["corrected"])
    row: ArmRow = {"arm": arm, "later_arm": larm, "cases": len(ok), "refused_cases": len(pending) - len(ok),
                   "ratio": None, "low": None, "high": None, "verdict": "refused", "corrected": corrected,
                   "corrected_ratio": None, "corrected_low": None, "corrected_high": None,
                   "corrected_verdict": "refused" if corrected else None, "note": None}
    g = geomean([p.diff for p in ok if p.diff is not None])
    if g is None:
        return row
    at_work = sum(p.row["equal_work"] for p in ok)
    if at_work:
        row["note"] = f"{at_work} of its {len(ok)} case(s) compared at equal work (their notes say by how much)"
    if any(p.diff is not None and p.diff.se is None for p in ok):
        said = ("interval from the spread between the cases (a case has none of its own)" if len(ok) > 1 else
                "no interval: its one case has none (one repeat a side, or no scatter)")
        row["note"] = f"{row['note']}; {said}" if row["note"] else said
    row["ratio"], row["low"], row["high"], row["verdict"] = _figures(g, confidence, threshold)
    gc = geomean([p.corr for p in ok if p.corr is not None]) if corrected else None
    if gc is not None:
        rows = [i for p in ok for i in later.cells[(larm, p.row["later_case"])].rows]
        sp, sd = shares(later, rows)
        gc = with_extra(gc, 0.0, math.hypot(sp * machine.se_prefill, sd * machine.se_decode), machine.df)
        row["corrected_ratio"], row["corrected_low"], row["corrected_high"], row["corrected_verdict"] = \
            _figures(gc, confidence, threshold)
    return row


def gated(row: Figures, correct_machine: bool) -> tuple[Verdict, float | None, float | None, float | None]:
    """The verdict and figures the exit code follows: corrected for the machine with ``--correct-machine`` (where the
    row was corrected), as measured otherwise."""
    if correct_machine and row["corrected"] and row["corrected_verdict"] is not None:
        return row["corrected_verdict"], row["corrected_ratio"], row["corrected_low"], row["corrected_high"]
    return row["verdict"], row["ratio"], row["low"], row["high"]


def _line(path: str, what: str, ratio: float | None, low: float | None, high: float | None, tail: str) -> str:
    iv = f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
    shown = f"{ratio:.3f}x{iv} of the baseline's time" if ratio is not None else "no ratio"
    return f"{path}: {what}: {shown}: {tail}"


def _verdict_lines(path: str, cells: Sequence[CellRow], arms: Sequence[ArmRow], threshold: float,
                   correct_machine: bool) -> tuple[list[str], list[str], list[str]]:
    """The lines of the rows slower, undecided beyond the threshold toward slower, and refused (gated verdicts)."""
    slower: list[str] = []
    undecided: list[str] = []
    refused: list[str] = []
    rows: list[tuple[str, Figures, str | None]] = [
        (f"arm {c['arm']}, case {c['case']}" + (" (at equal work)" if c["equal_work"] else ""), c, c["reason"])
        for c in cells]
    rows += [(f"arm {r['arm']}, geometric mean over {r['cases']} case(s)", r, None) for r in arms]
    for what, r, reason in rows:
        v, ratio, low, high = gated(r, correct_machine)
        if v == "slower":
            slower.append(_line(path, what, ratio, low, high, f"slower than the threshold {threshold:g}x"))
        elif v == "undecided" and ratio is not None and ratio > threshold:
            undecided.append(_line(path, what, ratio, low, high, f"beyond the threshold {threshold:g}x, undecided"))
        elif v == "refused":
            refused.append(_line(path, what, ratio, low, high, f"refused: {reason or 'every case of it refused'}"))
    return slower, undecided, refused


def compare_runs(base: RunView, laters: Sequence[RunView], *, threshold: float = DEFAULT_THRESHOLD,
                 pairs: Sequence[tuple[str, str]] = (), correct_machine: bool = False,
                 strict: bool = False) -> CompareResult:
    """Every run of *laters* compared with *base* (module docstring); *pairs*: ``--match`` (baseline arm, later arm);
    *correct_machine*: the exit code follows the verdicts corrected for the machine's speed; *strict*: it is 1 also
    for a row undecided beyond the threshold or refused.  :class:`~leverbench.errors.BadInput` where a later run
    shares no case or no arm with the baseline, is the baseline itself, or ``--match`` or the threshold is wrong."""
    if not (math.isfinite(threshold) and threshold > 1.0):
        raise BadInput(f"--threshold {threshold:g}: a finite factor above 1 (1.05: 5 % slower)")
    check_pairs(base, laters, pairs)
    staged = []
    for later in laters:
        if later.info["run_id"] is not None and later.info["run_id"] == base.info["run_id"]:
            raise BadInput(f"{later.path} and {base.path}: the same run twice (run_id {base.info['run_id']}): "
                           "nothing to compare")
        arms = match_arms(base, later, pairs)
        cases = match_cases(base, later)
        arm_pairs = [(m["arm"], m["later"]) for m in arms if m["later"] is not None]
        case_pairs = [(c["case"], c["later"]) for c in cases if c["later"] is not None]
        if not case_pairs:
            raise BadInput(f"{later.path}: no case of it sent what a case of {base.path} sent (experiments "
                           f"{base.info['experiment_name']!r} and {later.info['experiment_name']!r}): nothing to "
                           "compare")
        if not arm_pairs:
            raise BadInput(f"{later.path}: no arm of it matches an arm of {base.path} by knobs or name "
                           f"(its arms: {', '.join(later.ds.arms)}); pair them with --match BASE=LATER")
        changed = changes(base, later, arms)
        machine = machine_speed(base, later, arms, changed)
        machine.row["gated"] = correct_machine and machine.row["corrected"]
        times = corrected_turns(later, machine)
        pending = _cells(base, later, machine, times, arm_pairs, case_pairs)
        lever_rows = lever_pending(base, later, arm_pairs, case_pairs, [p.row for p in pending])
        staged.append((later, arms, cases, changed, machine, arm_pairs, pending, lever_rows))
    # the rows the exit code may follow (the levers, never gated, take their intervals at the same confidence)
    rows = sum(len([p for p in s[6] if not p.row["refused"]]) + len(s[5]) for s in staged)
    confidence = family_confidence(rows)
    comparisons: list[RunComparison] = []
    for later, arms, cases, changed, machine, arm_pairs, pending, lever_rows in staged:
        cells = [_finish(p, machine, confidence, threshold) for p in pending]
        arm_rows = [_arm_row(a, la, [p for p in pending if p.row["arm"] == a], later, machine, confidence, threshold)
                    for a, la in arm_pairs]
        slower, undecided, refused = _verdict_lines(later.path, cells, arm_rows, threshold, correct_machine)
        comparisons.append({"later": later.info, "changed": changed, "arms": arms, "cases": cases,
                            "machine": machine.row, "cells": cells, "arm_ratios": arm_rows,
                            "levers": [lever_row(*x, confidence, threshold) for x in lever_rows], "slower": slower,
                            "undecided": undecided, "refused": refused})
    any_slower = any(c["slower"] for c in comparisons)
    fail = any_slower or (strict and any(c["undecided"] or c["refused"] for c in comparisons))
    return {"schema": COMPARE_SCHEMA, "baseline": base.info, "threshold": threshold, "confidence": confidence,
            "correct_machine": correct_machine, "strict": strict, "comparisons": comparisons, "slower": any_slower,
            "exit_code": 1 if fail else 0}


def verdicts(result: CompareResult) -> list[Verdict]:
    """Every arm's verdict of every comparison, in order (for the tests and the summary line)."""
    return [r["verdict"] for c in result["comparisons"] for r in c["arm_ratios"]]
