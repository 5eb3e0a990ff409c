"""The guard: when a comparison's figure may be cited.

Output volume = generated tokens, reasoning included (``usage.completion_tokens``).
spread = (max − min) / min of the two arms' volumes.  A cell multiplier is
citable only if spread ≤ volume_tolerance_cell (0.20), a total only if
spread ≤ volume_tolerance_total (0.05).  Also never citable, for a cell or a
total: fewer than 2 successful repeats, failed calls, retried attempts (their
time is inside the measured turn), an unknown volume, a knob that differs and
whose value is contradicted (declared off, discovered on), arms that drifted
differently (interleaved order) or drifted at all (blocked order; see
:mod:`.drift`), or — for the comparison that measures a lever — a lever that
did not engage on the arm that has it, or that the reference arm used too.
Each reason carries a code (``reason_codes``); a row refused for its volume
alone may be cited through its equal-work figure (:mod:`.equal_work`).  A
refused multiplier is still reported, with ``citable: false`` and the reason.  Everything derived
from a comparison (cost returned, a lever's projected return) carries the
citability of the multiplier it comes from.

Controlled comparison: two arms whose knobs (see :mod:`.knobs`) differ in
exactly one, none of them unknown on either arm.  Others are still compared, but marked uncontrolled with the
knobs named (none: a replicate of one configuration).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence, Union

from typing_extensions import TypedDict

# (the guard's codes: there, a report reads them cheaply; re-exported for who judges with them)
from ...schema.reason_codes import CELLS as CELLS
from ...schema.reason_codes import CONTRADICTION as CONTRADICTION
from ...schema.reason_codes import DRIFT as DRIFT
from ...schema.reason_codes import FAILED as FAILED
from ...schema.reason_codes import NO_TURNS as NO_TURNS
from ...schema.reason_codes import NOT_ENGAGED as NOT_ENGAGED
from ...schema.reason_codes import REFERENCE_USED as REFERENCE_USED
from ...schema.reason_codes import REPEATS as REPEATS
from ...schema.reason_codes import RETRIED as RETRIED
from ...schema.reason_codes import REVISITS as REVISITS
from ...schema.reason_codes import TOOLS as TOOLS
from ...schema.reason_codes import VOLUME as VOLUME
from ...schema.reason_codes import VOLUME_UNKNOWN as VOLUME_UNKNOWN
from .stats import spread

if TYPE_CHECKING:
    from ...schema.experiment_rows import CellRow, MultiplierRow

MIN_REPEATS = 2

#: A reason not to cite a comparison: (code, words).
Reason = tuple[str, str]


class TotalSide(TypedDict):
    """One arm of a comparison of totals as :func:`judge` reads it: its name, total time and output (its repeats:
    none, a total has no repeats of its own)."""

    name: str
    median_s: float | None
    output_tokens_median: float | None
    n: None


#: One arm of a comparison: a cell, or an arm's total.
Side = Union["CellRow", TotalSide]


class Judgement(TypedDict):
    """What :func:`judge` says of one comparison: the multiplier and whether it may be cited (a multiplier row
    of the summary holds these keys)."""

    value: float | None
    citable: bool
    reason: str | None
    reason_codes: list[str]
    volume_spread: float | None
    controlled: bool
    knobs: list[str]
    blocks_total: bool


def judge(ref: Side, arm: Side, tol: float, knobs: list[str],
          blocked_by: list[str] | None = None, also: list[Reason] | None = None,
          controlled: bool | None = None) -> Judgement:
    """Multiplier of *arm* against the reference *ref* (dicts with median_s, output_tokens_median, n,
    failed_calls, retried_calls and ``name``); *also*: reasons of the comparison itself (its arms drifted
    differently, a contradicted knob, a lever that did not engage or that the reference also used);
    *controlled*: whether the comparison is controlled (default: it differs in exactly one knob)."""
    reasons: list[Reason] = []
    blocks_total = False
    bt, at = ref.get("median_s"), arm.get("median_s")
    value = bt / at if bt and at else None
    if value is None:
        reasons.append((NO_TURNS, "no successful turns to compare"))
        blocks_total = True
    for cell in (ref, arm):
        who = cell.get("name", "arm")
        if (n := cell.get("n")) is not None and n < MIN_REPEATS:
            reasons.append((REPEATS, f"{who} has {n} successful repeat(s), fewer than {MIN_REPEATS}"))
            blocks_total = True
        if failed := cell.get("failed_calls"):
            reasons.append((FAILED, f"{who} has {failed} failed call(s)"))
            blocks_total = True
        if failed := cell.get("companion_failed"):
            reasons.append((FAILED, f"{who} has {failed} failed companion call(s): its turns were not timed at the "
                            "load they claim"))
            blocks_total = True
        if retried := cell.get("retried_calls"):
            reasons.append((RETRIED, f"{who} has {retried} retried attempt(s): retries inside the "
                            "measured time"))
            blocks_total = True
    reasons += also or []
    if blocked_by:
        reasons.append((CELLS, "cells without a usable comparison: " + "; ".join(blocked_by)))
    vb, va = ref.get("output_tokens_median"), arm.get("output_tokens_median")
    sp = None
    if vb is None or va is None:
        reasons.append((VOLUME_UNKNOWN, "output volume unknown (no token usage)"))
    else:
        sp = spread(vb, va)
        if sp > tol:
            reasons.append((VOLUME, f"output volume spread {sp:.1%} > {tol:.0%}"))
    return {
        "value": value,
        "citable": not reasons,
        "reason": "; ".join(text for _, text in reasons) if reasons else None,
        "reason_codes": list(dict.fromkeys(code for code, _ in reasons)),
        "volume_spread": sp,
        "controlled": len(knobs) == 1 if controlled is None else controlled,
        "knobs": knobs,
        "blocks_total": blocks_total,
    }


def refused_for_volume_alone(row: MultiplierRow) -> bool:
    """Whether a multiplier row is refused for its output volume spread and nothing else."""
    return not row["citable"] and row.get("reason_codes") == [VOLUME]


def cited(row: MultiplierRow) -> tuple[bool, str | None, str]:
    """(citable, reason, measure) of a multiplier row as the headline cites it: the measured figure when it is
    citable; its equal-work figure (:mod:`.equal_work`) when the measured one is refused for its volume alone
    and that figure is citable (measure "equal work"); else refused, with the measured row's reason."""
    if row["citable"]:
        return True, None, "measured"
    ew = row.get("equal_work")
    if refused_for_volume_alone(row) and ew and ew.get("citable"):
        return True, None, "equal work"
    return False, row["reason"], "measured"


def measurement_guard(cells: Sequence[CellRow], drifted: Mapping[str, str] | None = None
                      ) -> tuple[bool, str | None]:
    """Whether one arm's own figures (its cells) may be cited: every cell has ≥ 2 successful repeats,
    no failed calls, no retried attempts, and the arm did not drift.  (citable, reason)."""
    reasons = []
    for c in cells:
        if c.get("median_s") is None:
            reasons.append(f"{c['case']}: no successful turn")
        elif c["n"] < MIN_REPEATS:
            reasons.append(f"{c['case']}: {c['n']} successful repeat(s), fewer than {MIN_REPEATS}")
        if c.get("failed_calls"):
            reasons.append(f"{c['case']}: {c['failed_calls']} failed call(s)")
        if c.get("companion_failed"):
            reasons.append(f"{c['case']}: {c['companion_failed']} failed companion call(s)")
        if c.get("retried_calls"):
            reasons.append(f"{c['case']}: {c['retried_calls']} retried attempt(s)")
    arm = cells[0]["arm"] if cells else None
    if arm and drifted and arm in drifted:
        reasons.append(f"drifted ({drifted[arm]})")
    return not reasons, "; ".join(reasons) or None
