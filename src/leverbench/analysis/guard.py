"""The guard: when a comparison's figure may be cited.

Output volume = generated tokens, reasoning included (``usage.completion_tokens``).
spread = (max − min) / min of the two arms' volumes.  A cell multiplier is
citable only if spread ≤ volume_tolerance_cell (0.20), a total only if
spread ≤ volume_tolerance_total (0.05).  Also never citable, for a cell or a
total: fewer than 2 successful repeats, failed calls, retried attempts (their
time is inside the measured turn), an unknown volume, an arm whose decode
rate drifted beyond tolerance between its sentinels, a knob that differs and
whose value is contradicted (declared off, discovered on), or — for the
comparison that measures a lever — a lever that did not engage on the arm
that has it, or that the reference arm used too.  A refused multiplier is
still reported, with ``citable: false`` and the reason.  Everything derived
from a comparison (cost returned, a lever's projected return) carries the
citability of the multiplier it comes from.

Controlled comparison: two arms whose knobs (see :mod:`.knobs`) differ in
exactly one.  Others are still compared, but marked uncontrolled with the
knobs named (none: a replicate of one configuration).
"""

from __future__ import annotations

from typing import Any

from .stats import spread

MIN_REPEATS = 2


def judge(ref: dict[str, Any], arm: dict[str, Any], tol: float, knobs: list[str],
          blocked_by: list[str] | None = None, drifted: dict[str, str] | None = None,
          also: list[str] | None = None) -> dict[str, Any]:
    """Multiplier of *arm* against the reference *ref* (dicts with median_s, output_tokens_median, n,
    failed_calls, retried_calls and ``name``); *drifted*: arm name → what drifted; *also*: reasons of the
    comparison itself (a contradicted knob, a lever that did not engage or that the reference also used)."""
    reasons: list[str] = []
    blocks_total = False
    bt, at = ref.get("median_s"), arm.get("median_s")
    value = bt / at if bt and at else None
    if value is None:
        reasons.append("no successful turns to compare")
        blocks_total = True
    for cell in (ref, arm):
        who = cell.get("name", "arm")
        if cell.get("n") is not None and cell["n"] < MIN_REPEATS:
            reasons.append(f"{who} has {cell['n']} successful repeat(s), fewer than {MIN_REPEATS}")
            blocks_total = True
        if cell.get("failed_calls"):
            reasons.append(f"{who} has {cell['failed_calls']} failed call(s)")
            blocks_total = True
        if cell.get("retried_calls"):
            reasons.append(f"{who} has {cell['retried_calls']} retried attempt(s): retries inside the measured time")
            blocks_total = True
    for who in dict.fromkeys((ref.get("name"), arm.get("name"))):
        if who and drifted and who in drifted:
            reasons.append(f"{who} drifted ({drifted[who]})")
    reasons += also or []
    if blocked_by:
        reasons.append("cells without a usable comparison: " + "; ".join(blocked_by))
    vb, va = ref.get("output_tokens_median"), arm.get("output_tokens_median")
    sp = None
    if vb is None or va is None:
        reasons.append("output volume unknown (no token usage)")
    else:
        sp = spread(vb, va)
        if sp > tol:
            reasons.append(f"output volume spread {sp:.1%} > {tol:.0%}")
    return {
        "value": value,
        "citable": not reasons,
        "reason": "; ".join(reasons) if reasons else None,
        "volume_spread": sp,
        "controlled": len(knobs) == 1,
        "knobs": knobs,
        "blocks_total": blocks_total,
    }


def measurement_guard(cells: list[dict[str, Any]], drifted: dict[str, str] | None = None) -> tuple[bool, str | None]:
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
        if c.get("retried_calls"):
            reasons.append(f"{c['case']}: {c['retried_calls']} retried attempt(s)")
    arm = cells[0]["arm"] if cells else None
    if arm and drifted and arm in drifted:
        reasons.append(f"drifted ({drifted[arm]})")
    return not reasons, "; ".join(reasons) or None
