"""The output-volume guard and the controlled-comparison check.

Output volume = generated tokens, reasoning included (``usage.completion_tokens``).
spread = (max − min) / min of the two arms' volumes.  A cell multiplier is
citable only if spread ≤ volume_tolerance_cell (0.20), a total only if
spread ≤ volume_tolerance_total (0.05); also never with fewer than 2
successful repeats, failed calls, retried calls (the retried turn's time holds
the failed attempt and the retry), or an unknown volume.  A refused multiplier
is still reported, with ``citable: false`` and the reason.

Controlled comparison: two arms whose recorded conditions differ in more than
one knob are still compared, but the comparison is marked uncontrolled and the
knobs are named.
"""

from __future__ import annotations

from typing import Any

from .stats import spread

MIN_REPEATS = 2


def uncontrolled_knobs(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The condition keys whose values differ between two arms (missing counts as differing)."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def judge(base: dict[str, Any], arm: dict[str, Any], tol: float, knobs: list[str],
          blocked_by: list[str] | None = None) -> dict[str, Any]:
    """Multiplier of *arm* against *base* (dicts with median_s, output_tokens_median, n, failed_calls,
    retried_calls)."""
    reasons: list[str] = []
    blocks_total = False
    bt, at = base.get("median_s"), arm.get("median_s")
    value = bt / at if bt and at else None
    if value is None:
        reasons.append("no successful turns to compare")
        blocks_total = True
    for who, cell in (("baseline", base), ("arm", arm)):
        if cell.get("n") is not None and cell["n"] < MIN_REPEATS:
            reasons.append(f"{who} has {cell['n']} successful repeat(s), fewer than {MIN_REPEATS}")
            blocks_total = True
        if cell.get("failed_calls"):
            reasons.append(f"{who} has {cell['failed_calls']} failed call(s)")
            blocks_total = True
        if cell.get("retried_calls"):
            reasons.append(f"{who} has {cell['retried_calls']} retried call(s)")
            blocks_total = True
    if blocked_by:
        reasons.append("cells without a usable comparison: " + ", ".join(s.removeprefix("case:") for s in blocked_by))
    vb, va = base.get("output_tokens_median"), arm.get("output_tokens_median")
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
        "controlled": len(knobs) <= 1,
        "knobs": knobs,
        "blocks_total": blocks_total,
    }
