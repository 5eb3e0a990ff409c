"""What a turn costs in GPU time and money.

From an arm's conditions ``gpu_hour_usd`` and ``gpus`` (default 1), with
turn_s = the arm's total / number of cases (the mean turn):

    usd_per_turn              = turn_s × gpu_hour_usd × gpus / 3600
    gpu_hours_per_1000_turns  = turn_s × gpus × 1000 / 3600
    usd_per_1000_turns        = 1000 × usd_per_turn

and the GPU-hours per 1000 turns an arm returns against the baseline.  Each
row carries ``citable`` and ``reason`` by the guard's rules (:mod:`.guard`):
an arm's row those of its total multiplier against the baseline (the
comparison its "returned" figure comes from), the baseline's row those of its
own measurements (repeats, failures, retries, drift).
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


Citability = dict[str, tuple[bool, "str | None"]]


def costs(totals: list[dict[str, Any]], conditions: dict[str, dict[str, Any]], baseline: str,
          gpu_hour_usd: float | None = None, citability: Citability | None = None) -> list[dict[str, Any]]:
    """Per arm with a price or a GPU count in its conditions: the cost of its mean turn."""
    out = []
    for t in totals:
        cond = conditions.get(t["arm"], {})
        price = cond.get("gpu_hour_usd", gpu_hour_usd)
        if t["total_s"] is None or (price is None and "gpus" not in cond):
            continue
        out.append({"arm": t["arm"], **turn_cost(t["total_s"] / t["cases"], price, float(cond.get("gpus", 1)))})
    return _with_returned(out, baseline, citability)


def scenario_costs(projected: list[dict[str, Any]], conditions: dict[str, dict[str, Any]], baseline: str,
                   gpu_hour_usd: float | None = None, citability: Citability | None = None) -> list[dict[str, Any]]:
    """Per projected arm (``projection.arms`` rows with ``total_s``): the cost of one scenario turn."""
    out = []
    for a in projected:
        if a.get("total_s") is None:
            continue
        cond = conditions.get(a["arm"], {})
        out.append({"arm": a["arm"], **turn_cost(a["total_s"], cond.get("gpu_hour_usd", gpu_hour_usd),
                                                 float(cond.get("gpus", 1)))})
    return _with_returned(out, baseline, citability)


def _with_returned(rows: list[dict[str, Any]], baseline: str, citability: Citability | None) -> list[dict[str, Any]]:
    """Add the GPU-hours per 1000 turns each arm returns against the baseline, and each row's citability."""
    base = next((c for c in rows if c["arm"] == baseline), None)
    for c in rows:
        c["gpu_hours_returned_per_1000_turns"] = (base["gpu_hours_per_1000_turns"] - c["gpu_hours_per_1000_turns"]
                                                  if base else None)
        c["citable"], c["reason"] = (citability or {}).get(c["arm"], (None, "no comparison to judge it by"))
    return rows
