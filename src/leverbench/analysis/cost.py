"""What a turn costs in GPU time and money.

From an arm's conditions ``gpu_hour_usd`` and ``gpus`` (default 1), with
turn_s = the arm's total / number of cases (the mean turn):

    usd_per_turn              = turn_s × gpu_hour_usd × gpus / 3600
    gpu_hours_per_1000_turns  = turn_s × gpus × 1000 / 3600
    usd_per_1000_turns        = 1000 × usd_per_turn

and the GPU-hours per 1000 turns an arm returns against the baseline.
(The article: 173.8 s and 67.2 s over four turns at $5.50/h → $0.0664 and
$0.0257 per turn, 12.07 and 4.67 GPU-hours per 1000 turns.)
"""

from __future__ import annotations

from typing import Any


def turn_cost(turn_s: float, gpu_hour_usd: float | None, gpus: float = 1.0) -> dict[str, Any]:
    gpu_hours = turn_s * gpus * 1000.0 / 3600.0
    usd = turn_s * gpu_hour_usd * gpus / 3600.0 if gpu_hour_usd is not None else None
    return {"turn_s": turn_s, "gpus": gpus, "gpu_hour_usd": gpu_hour_usd, "usd_per_turn": usd,
            "gpu_hours_per_1000_turns": gpu_hours, "usd_per_1000_turns": usd * 1000.0 if usd is not None else None}


def costs(totals: list[dict[str, Any]], conditions: dict[str, dict[str, Any]], baseline: str,
          gpu_hour_usd: float | None = None) -> list[dict[str, Any]]:
    out = []
    for t in totals:
        cond = conditions.get(t["arm"], {})
        price = cond.get("gpu_hour_usd", gpu_hour_usd)
        if t["total_s"] is None or (price is None and "gpus" not in cond):
            continue
        c = turn_cost(t["total_s"] / t["cases"], price, float(cond.get("gpus", 1)))
        out.append({"arm": t["arm"], **c})
    base = next((c for c in out if c["arm"] == baseline), None)
    for c in out:
        c["gpu_hours_returned_per_1000_turns"] = (base["gpu_hours_per_1000_turns"] - c["gpu_hours_per_1000_turns"]
                                                  if base else None)
    return out
