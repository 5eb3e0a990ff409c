"""Runs compared with a baseline run: per matched (arm, case) and per arm the ratio later / baseline, under the guard.

The guard across runs refuses a cell (its ratio still shown where it has one, with the reason) when:

- either run has a failed call in it (a failed call, a failed turn, a failed companion: the turn was not the work the
  other run timed), counted per run;
- the two runs' output volumes differ beyond the experiment's cell tolerance (``volume_tolerance_cell``, default
  20 %: the median generated tokens per turn, spread = |later − baseline| / the smaller): the runs did different
  work.  (The equal-work correction of a run's own arms, :mod:`..experiment.equal_work`, is not applied across runs
  yet: such a cell is refused.)
- its arm drifted within either run (:mod:`.machine`): one speed per run cannot describe it;
- either run has no successful turn of it.

A case the runs sent differently is not compared at all (:mod:`.match`).  The statistics are :mod:`.stats`'s; the
machine's speed between the runs, :mod:`.machine`'s.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import BadInput
from ...schema.compare_rows import COMPARE_SCHEMA, ArmRow, CellRow, CompareResult, RunComparison, Verdict
from .machine import Machine, corrected_turns, machine_speed, shares
from .match import changes, match_arms, match_cases
from .runs import RunView
from .stats import LogDiff, family_confidence, geomean, verdict, welch, with_extra

DEFAULT_THRESHOLD = 1.05


@dataclass
class _Pending:
    """A cell before its interval: its row less the figures, its log difference, the correction's standard error."""

    row: CellRow
    diff: LogDiff | None
    extra_se: float


def _gm(x: Sequence[float]) -> float | None:
    y = [v for v in x if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, y)) / len(y)) if y else None


def _refusals(base: RunView, later: RunView, arm: str, larm: str, nb: int, nl: int, fb: int, fl: int,
              ob: float | None, ol: float | None) -> list[str]:
    out = []
    if fb or fl:
        out.append("failed calls: " + ", ".join(f"{n} in the {who}" for who, n in (("baseline", fb), ("later run", fl))
                                                if n))
    if not nb or not nl:
        out.append("no successful turn in the " + ("baseline" if not nb else "later run"))
    tol = base.tolerance_cell
    if ob and ol and abs(ol - ob) / min(ob, ol) > tol:
        out.append(f"output volume differs: {ob:g} → {ol:g} tokens a turn ({ol / ob - 1:+.0%}), beyond the tolerance "
                   f"{tol:.0%}: the runs did different work")
    for who, run, a in (("baseline", base, arm), ("later run", later, larm)):
        if a in run.drifted:
            out.append(f"{a} drifted within the {who} ({run.drifted[a]}): no one speed of that run to compare")
    return out


def _cells(base: RunView, later: RunView, machine: Machine, times: np.ndarray, arms: Sequence[tuple[str, str]],
           cases: Sequence[tuple[str, str]]) -> list[_Pending]:
    out = []
    for arm, larm in arms:
        for case, lcase in cases:
            cb, cl = base.cells.get((arm, case)), later.cells.get((larm, lcase))
            xb = cb.turn_s if cb else []
            xl = [float(times[i]) for i in cl.rows] if cl else []
            ob = statistics.median(cb.output) if cb and cb.output else None
            ol = statistics.median(cl.output) if cl and cl.output else None
            fb, fl = (cb.failed if cb else 0), (cl.failed if cl else 0)
            reasons = _refusals(base, later, arm, larm, len(xb), len(xl), fb, fl, ob, ol)
            extra = 0.0
            if machine.row["corrected"] and cl:
                sp, sd = shares(later, cl.rows)
                extra = math.hypot(sp * machine.se_prefill, sd * machine.se_decode)
            row: CellRow = {"arm": arm, "later_arm": larm, "case": case, "later_case": lcase, "n_baseline": len(xb),
                            "n_later": len(xl), "baseline_s": _gm(xb), "later_s": _gm(xl), "ratio": None,
                            "low": None, "high": None, "verdict": "refused" if reasons else "undecided",
                            "refused": bool(reasons), "reason": "; ".join(reasons) or None, "failed_baseline": fb,
                            "failed_later": fl, "output_baseline": ob, "output_later": ol,
                            "corrected": bool(machine.row["corrected"])}
            out.append(_Pending(row, welch(xb, xl), extra))
    return out


def _finish(p: _Pending, machine: Machine, confidence: float, threshold: float) -> CellRow:
    row = p.row
    if p.diff is None:
        return row
    d = with_extra(p.diff, 0.0, p.extra_se, machine.df) if p.extra_se > 0 else p.diff
    iv = d.interval(confidence)
    row["ratio"], row["low"], row["high"] = math.exp(d.d), iv[0] if iv else None, iv[1] if iv else None
    if not row["refused"]:
        row["verdict"] = verdict(math.exp(d.d), iv, threshold)
    return row


def _arm_row(arm: str, larm: str, pending: Sequence[_Pending], later: RunView, machine: Machine,
             confidence: float, threshold: float) -> ArmRow:
    ok = [p for p in pending if not p.row["refused"] and p.diff is not None]
    g = geomean([p.diff for p in ok if p.diff is not None])
    row: ArmRow = {"arm": arm, "later_arm": larm, "cases": len(ok), "refused_cases": len(pending) - len(ok),
                   "ratio": None, "low": None, "high": None, "verdict": "refused",
                   "corrected": bool(machine.row["corrected"])}
    if g is None:
        return row
    if machine.row["corrected"]:
        rows = [i for p in ok for i in later.cells[(larm, p.row["later_case"])].rows]
        sp, sd = shares(later, rows)
        g = with_extra(g, 0.0, math.hypot(sp * machine.se_prefill, sd * machine.se_decode), machine.df)
    iv = g.interval(confidence)
    row["ratio"], row["low"], row["high"] = math.exp(g.d), iv[0] if iv else None, iv[1] if iv else None
    row["verdict"] = verdict(math.exp(g.d), iv, threshold)
    return row


def _slower_line(path: str, what: str, ratio: float | None, low: float | None, high: float | None,
                 threshold: float) -> str:
    iv = f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else ""
    return f"{path}: {what}: {ratio or 0:.3f}x{iv} of the baseline's time: slower than the threshold {threshold:g}x"


def compare_runs(base: RunView, laters: Sequence[RunView], *, threshold: float = DEFAULT_THRESHOLD,
                 pairs: Sequence[tuple[str, str]] = ()) -> CompareResult:
    """Every run of *laters* compared with *base* (module docstring); *pairs*: ``--match`` (baseline arm, later arm).
    :class:`~leverbench.errors.BadInput` where a later run shares no case or no arm with the baseline."""
    if not threshold > 1.0:
        raise BadInput(f"--threshold {threshold:g}: a factor above 1 (1.05: 5 % slower)")
    staged = []
    for later in laters:
        arms = match_arms(base, later, pairs)
        cases = match_cases(base, later)
        arm_pairs = [(m["arm"], m["later"]) for m in arms if m["later"] is not None]
        case_pairs = [(c["case"], c["later"]) for c in cases if c["later"] is not None]
        if not case_pairs:
            raise BadInput(f"{later.path}: no case of it sent what a case of {base.path} sent (experiments "
                           f"{base.info['experiment']!r} and {later.info['experiment']!r}): nothing to compare")
        if not arm_pairs:
            raise BadInput(f"{later.path}: no arm of it matches an arm of {base.path} by knobs or name "
                           f"(its arms: {', '.join(later.ds.arms)}); pair them with --match BASE=LATER")
        changed = changes(base, later, arms)
        machine = machine_speed(base, later, arms, changed)
        times = corrected_turns(later, machine)
        pending = _cells(base, later, machine, times, arm_pairs, case_pairs)
        staged.append((later, arms, cases, changed, machine, arm_pairs, pending))
    rows = sum(len([p for p in s[6] if not p.row["refused"]]) + len(s[5]) for s in staged)
    confidence = family_confidence(rows)
    comparisons: list[RunComparison] = []
    for later, arms, cases, changed, machine, arm_pairs, pending in staged:
        cells = [_finish(p, machine, confidence, threshold) for p in pending]
        arm_rows = [_arm_row(a, la, [p for p in pending if p.row["arm"] == a], later, machine, confidence, threshold)
                    for a, la in arm_pairs]
        slower = [_slower_line(later.path, f"arm {c['arm']}, case {c['case']}", c["ratio"], c["low"], c["high"],
                               threshold) for c in cells if c["verdict"] == "slower"]
        slower += [_slower_line(later.path, f"arm {r['arm']}, geometric mean over {r['cases']} case(s)", r["ratio"],
                                r["low"], r["high"], threshold) for r in arm_rows if r["verdict"] == "slower"]
        comparisons.append({"later": later.info, "changed": changed, "arms": arms, "cases": cases,
                            "machine": machine.row, "cells": cells, "arm_ratios": arm_rows, "slower": slower})
    return {"schema": COMPARE_SCHEMA, "baseline": base.info, "threshold": threshold, "confidence": confidence,
            "comparisons": comparisons, "slower": any(c["slower"] for c in comparisons)}


def verdicts(result: CompareResult) -> list[Verdict]:
    """Every arm's verdict of every comparison, in order (for the tests and the summary line)."""
    return [r["verdict"] for c in result["comparisons"] for r in c["arm_ratios"]]
