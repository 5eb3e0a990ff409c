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

import math
from typing import Mapping, Sequence, Union

from ...errors import BadInput
from ...json_types import JSONValue
from ...schema.check_rows import Citability, CostRow, TurnCost
from ...schema.experiment_rows import TotalRow
from ...schema.rate_rows import ProjectedArm, RefusedArm
from ..base.bounds import MAX_GPU_HOUR_USD, MAX_GPUS


def _fmt(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def price_and_gpus(cond: Mapping[str, JSONValue], arm: str, gpu_hour_usd: float | None = None
                   ) -> tuple[float | None, float]:
    """(price of a GPU-hour, GPUs) of an arm: its conditions' ``gpu_hour_usd`` (else ``gpu_hour_usd``) and
    ``gpus`` (else 1), each a number in range (:mod:`.bounds`); else BadInput naming the arm and the key (a
    ledger whose header gave ``gpu_hour_usd = -5.5`` printed negative dollars)."""
    price = cond.get("gpu_hour_usd", gpu_hour_usd)
    return (None if price is None else _in_range(arm, "gpu_hour_usd", price, False, MAX_GPU_HOUR_USD),
            _in_range(arm, "gpus", cond.get("gpus", 1), True, MAX_GPUS))


def _in_range(arm: str, key: str, v: JSONValue | None, lo_open: bool, hi: float) -> float:
    """*v*, the arm's conditions' *key*, as a float: a finite number above 0 (*lo_open*) or from 0, at most *hi*;
    else BadInput."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
            math.isfinite(v) and (v > 0 if lo_open else v >= 0) and v <= hi):
        raise BadInput(f"arm {arm!r}: conditions {key} = {v!r:.40} is not a finite number "
                       f"{'above' if lo_open else 'from'} 0 {'and at most' if lo_open else 'to'} {_fmt(hi)}; "
                       "correct the run's conditions (the experiment file's)")
    return float(v)


def turn_cost(turn_s: float, gpu_hour_usd: float | None, gpus: float = 1.0) -> TurnCost:
    gpu_hours = turn_s * gpus * 1000.0 / 3600.0
    usd = turn_s * gpu_hour_usd * gpus / 3600.0 if gpu_hour_usd is not None else None
    return {"turn_s": turn_s, "gpus": gpus, "gpu_hour_usd": gpu_hour_usd, "usd_per_turn": usd,
            "gpu_hours_per_1000_turns": gpu_hours, "usd_per_1000_turns": usd * 1000.0 if usd is not None else None}


def costs(totals: Sequence[TotalRow], conditions: Mapping[str, Mapping[str, JSONValue]], baseline: str,
          gpu_hour_usd: float | None = None, citability: Citability | None = None) -> list[CostRow]:
    """Per arm with a price or a GPU count in its conditions (*totals*: the summary's ``totals[]``): the cost
    of its mean turn."""
    out: list[tuple[str, TurnCost]] = []
    for t in totals:
        cond = conditions.get(t["arm"], {})
        price, gpus = price_and_gpus(cond, t["arm"], gpu_hour_usd)
        total_s = t["total_s"]
        if total_s is None or (price is None and "gpus" not in cond):
            continue
        out.append((t["arm"], turn_cost(total_s / t["cases"], price, gpus)))
    return _with_returned(out, baseline, citability)


def scenario_costs(projected: Sequence[Union[ProjectedArm, RefusedArm]],
                   conditions: Mapping[str, Mapping[str, JSONValue]], baseline: str,
                   gpu_hour_usd: float | None = None, citability: Citability | None = None) -> list[CostRow]:
    """Per projected arm (``projection.arms`` rows with ``total_s``): the cost of one scenario turn."""
    out: list[tuple[str, TurnCost]] = []
    for a in projected:
        total_s = a.get("total_s")  # (a refused arm has none)
        if not isinstance(total_s, (int, float)):
            continue
        price, gpus = price_and_gpus(conditions.get(a["arm"], {}), a["arm"], gpu_hour_usd)
        out.append((a["arm"], turn_cost(total_s, price, gpus)))
    return _with_returned(out, baseline, citability)


def _with_returned(rows: list[tuple[str, TurnCost]], baseline: str, citability: Citability | None) -> list[CostRow]:
    """Each arm's cost row: its turn cost, the GPU-hours per 1000 turns it returns against the baseline, and its
    citability."""
    base = next((c for arm, c in rows if arm == baseline), None)
    out: list[CostRow] = []
    for arm, c in rows:
        citable, reason = (citability or {}).get(arm, (None, "no comparison to judge it by"))
        out.append({"arm": arm, **c, "gpu_hours_returned_per_1000_turns": (
            base["gpu_hours_per_1000_turns"] - c["gpu_hours_per_1000_turns"] if base else None),
            "citable": citable, "reason": reason})
    return out
