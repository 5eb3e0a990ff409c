"""Capacity at an SLO, and its price (issue 25 part 3): per arm and sweep, the highest load that meets the
stage's SLOs, interpolated on the sweep, the throughput there and what that capacity costs.

A sweep's levels x_1 < … < x_n (its stages' concurrencies, rates or speeds) that set SLOs (``slo_ttft_s``,
``slo_tpot_s``, ``slo_e2e_s``); levels where the client fell behind its schedule (:func:`..load.levels.on_schedule`)
are left out.  At each level, for the q-th percentile (:data:`PERCENTILE`, 99 by default) of each metric an SLO
names (from the stage row: TTFT and end-to-end over every measured call, a failed one at its elapsed time; TPOT
over the successful ones),

    g_i = max over the stage's SLOs of  percentile_q(metric at x_i) / slo        (the worst SLO's ratio)

and a level whose failed calls are more than (100 − q) % of its measured ones misses (a failed call meets no
SLO, so the q-th percentile of "met" cannot be).  The level meets the SLOs when g_i ≤ 1.  Then, with j the first
level that misses:

    capacity = x_(j−1) + (x_j − x_(j−1)) · (1 − g_(j−1)) / (g_j − g_(j−1))    ("interpolated": linear in load)
    capacity = x_n           every level met the SLOs ("at least": the capacity lies beyond the sweep)
    x_(j−1) ≤ capacity < x_j level j missed for its failures, so g_j is unknown ("between": ``load`` x_(j−1),
                             ``upper`` x_j)
    none                     the lowest level already missed them

and the throughput at the capacity, ``output_tps`` and ``requests_per_s``, interpolated linearly between the
same two levels (the level's own where it is a bound).  The price of capacity there (``gpus`` and
``gpu_hour_usd`` from the arm's conditions, :func:`.cost.price_and_gpus`):

    GPU-hours per 1,000 requests           = gpus × 1,000 / (3,600 × requests_per_s)
    GPU-hours per million output tokens    = gpus × 10^6 / (3,600 × output_tps)
    $ per 1,000 requests (per million)     = GPU-hours × gpu_hour_usd

(a request: one call of the stage, a one-call turn of its case).  A lever's capacity multiplier is the ratio
of its two arms' capacities (:mod:`.under_load`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Mapping, NamedTuple, Sequence

import numpy as np

from ..load.levels import level_load, on_schedule
from .cost import price_and_gpus

if TYPE_CHECKING:
    from ...json_types import JSONValue
    from ...schema.load_lever_rows import CapacityLevel, CapacityRow
    from ...schema.load_rows import LoadRow

PERCENTILE = 99
#: Each SLO key of a stage and the load metric (a stage row's distribution) it bounds.
SLO_METRICS = (("slo_ttft_s", "ttft"), ("slo_tpot_s", "tpot"), ("slo_e2e_s", "e2e"))


def level_ratio(row: LoadRow, q: int = PERCENTILE) -> tuple[float | None, str | None]:
    """(g: the worst SLO's percentile_q / slo, that SLO's key) of one level; (None, why) when its failed calls
    alone miss the SLOs, or a metric an SLO names was not measured."""
    slo = row.get("slo") or {}
    n = row.get("requests") or 0
    if n and (row.get("failed") or 0) / n > (100 - q) / 100:
        return None, "failed calls"
    worst: tuple[float, str] | None = None
    for key, metric in SLO_METRICS:
        limit = slo.get(key)  # type: ignore[misc]
        if limit is None:
            continue
        d = row.get(metric)  # type: ignore[misc]
        if not d:
            return None, key
        g = d[f"p{q}"] / limit
        if worst is None or g > worst[0]:
            worst = (g, key)
    return worst if worst is not None else (None, None)


def _at(x: float, x0: float, x1: float, y0: float | None, y1: float | None) -> float | None:
    if y0 is None or y1 is None:
        return None
    return float(np.interp(x, [x0, x1], [y0, y1]))


class SweepCapacity(NamedTuple):
    """One arm's capacity on a sweep (see the module docstring): ``load`` (the lower end where ``bound`` is
    "between"), ``upper`` (the level that failed, above it; else None), the throughput at ``load``."""

    load: float | None
    upper: float | None
    bound: str
    reason: str | None
    output_tps: float | None
    requests_per_s: float | None
    levels: list[CapacityLevel]


def sweep_capacity(levels: Sequence[LoadRow], q: int = PERCENTILE) -> SweepCapacity:
    """One arm's sweep's capacity, its rows in load order (see the module docstring)."""
    out: list[CapacityLevel] = []
    used: list[tuple[float, float | None, LoadRow]] = []
    for r in levels:
        _, x = level_load(r)
        if x is None:
            continue
        ok, _, _ = on_schedule(r)
        g, which = level_ratio(r, q)
        out.append({"stage": r["stage"], "load": float(x), "worst": g, "worst_slo": which,
                    "meets": g is not None and g <= 1.0, "on_schedule": ok})
        if ok:
            used.append((float(x), g, r))
    if not used:
        return SweepCapacity(None, None, "none", "no level on schedule (the client fell behind at every one)", None,
                             None, out)
    x0, g0, r0 = used[0]
    if g0 is None or g0 > 1.0:
        return SweepCapacity(None, None, "none", f"misses the SLOs at the lowest load measured ({x0:g})", None, None,
                             out)
    for (xa, ga, ra), (xb, gb, rb) in zip(used, used[1:]):
        if gb is not None and gb <= 1.0:
            continue
        if gb is None:
            return SweepCapacity(xa, xb, "between", f"calls failed at {xb:g}: the capacity lies between {xa:g} and "
                                 f"{xb:g}", ra.get("output_tps"), ra.get("requests_per_s"), out)
        x = xa + (xb - xa) * (1.0 - ga) / (gb - ga)  # type: ignore[operator]
        return SweepCapacity(x, None, "interpolated", None, _at(x, xa, xb, ra.get("output_tps"), rb.get("output_tps")),
                             _at(x, xa, xb, ra.get("requests_per_s"), rb.get("requests_per_s")), out)
    xn, _, rn = used[-1]
    return SweepCapacity(xn, None, "at least", "met the SLOs at every level measured", rn.get("output_tps"),
                         rn.get("requests_per_s"), out)


def capacity_rows(rows: Sequence[LoadRow], conditions: Mapping[str, Mapping[str, JSONValue]],
                  gpu_hour_usd: float | None = None, q: int = PERCENTILE) -> list[CapacityRow]:
    """Per (arm, sweep, axis) whose stages set SLOs: its capacity and the price of it (see the module docstring)."""
    groups: dict[tuple[str, str, str], list[LoadRow]] = defaultdict(list)
    for r in rows:
        if r.get("sweep") and r.get("slo"):  # a sweep is one mode: one axis
            groups[(r["arm"], r["sweep"], level_load(r)[0])].append(r)
    out: list[CapacityRow] = []
    for (arm, sweep, _), rs in groups.items():
        rs = sorted(rs, key=lambda r: level_load(r)[1] or 0.0)
        load, upper, bound, reason, tps, rps, levels = sweep_capacity(rs, q)
        price, gpus = price_and_gpus(conditions.get(arm, {}), arm, gpu_hour_usd)
        per_req = gpus * 1000.0 / (3600.0 * rps) if rps else None
        per_tok = gpus * 1e6 / (3600.0 * tps) if tps else None
        out.append({"arm": arm, "sweep": sweep, "x": level_load(rs[0])[0], "slo": rs[0]["slo"] or {},
                    "percentile": float(q), "load": load, "upper": upper, "bound": bound,  # type: ignore[typeddict-item]
                    "reason": reason,
                    "output_tps": tps, "requests_per_s": rps, "gpus": gpus, "gpu_hour_usd": price,
                    "gpu_hours_per_1000_requests": per_req, "gpu_hours_per_million_output_tokens": per_tok,
                    "usd_per_1000_requests": per_req * price if per_req is not None and price is not None else None,
                    "usd_per_million_output_tokens": per_tok * price if per_tok is not None and price is not None
                    else None, "levels": levels})
    return out
