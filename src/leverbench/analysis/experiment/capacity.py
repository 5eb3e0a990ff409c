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
same two levels (the level's own where it is a bound).  A level's throughput (:func:`level_throughput`), in a
closed loop of N calls in flight, by Little's law over its measured calls (``throughput_source`` "calls in
flight"; each client's calls tile its time, their e2e counting from the previous call's end):

    requests_per_s = N · (successful calls) / Σ e2e        output_tps = N · Σ output tokens / Σ e2e

(the stage's window counts the calls that ended within [first send, last send], which over a few rounds a level
reads high, and its tokens and calls apart, so that the two prices below would disagree); in an open loop or a
trace replay, the stage row's own figures over its window (``throughput_source`` "window").  The price of
capacity there (``gpus`` and ``gpu_hour_usd`` from the arm's conditions, :func:`.cost.price_and_gpus`):

    GPU-hours per 1,000 requests           = gpus × 1,000 / (3,600 × requests_per_s)
    GPU-hours per million output tokens    = gpus × 10^6 / (3,600 × output_tps)
    $ per 1,000 requests (per million)     = GPU-hours × gpu_hour_usd

(a request: one call of the stage, the first call of its case made distinct per request — not a whole turn;
``gpus_source``: "conditions", or "assumed" where the arm's conditions name no ``gpus`` and 1 is taken).  A
lever's capacity multiplier is the ratio of its two arms' capacities (:mod:`.under_load`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Literal, Mapping, NamedTuple, Sequence

import numpy as np

from ..load.levels import LevelCalls, level_load, on_schedule
from .cost import price_and_gpus

if TYPE_CHECKING:
    from ...json_types import JSONValue
    from ...schema.load_lever_rows import Bound, CapacityLevel, CapacityRow
    from ...schema.load_rows import Distribution, LoadRow

PERCENTILE = 99
#: Each SLO key of a stage and the load metric (a stage row's distribution) it bounds.
SLO_METRICS: tuple[tuple[Literal["slo_ttft_s", "slo_tpot_s", "slo_e2e_s"], Literal["ttft", "tpot", "e2e"]], ...] = (
    ("slo_ttft_s", "ttft"), ("slo_tpot_s", "tpot"), ("slo_e2e_s", "e2e"))


def at_percentile(d: Distribution, q: int) -> float:
    """A load metric's q-th percentile (its distribution's ``p{q}``: q is 50, 90, 95 or 99)."""
    return {50: d["p50"], 90: d["p90"], 95: d["p95"], 99: d["p99"]}[q]


def level_ratio(row: LoadRow, q: int = PERCENTILE) -> tuple[float | None, str | None]:
    """(g: the worst SLO's percentile_q / slo, that SLO's key) of one level; (None, why) when its failed calls
    alone miss the SLOs, or a metric an SLO names was not measured."""
    slo = row.get("slo") or {}
    n = row.get("requests") or 0
    if n and (row.get("failed") or 0) / n > (100 - q) / 100:
        return None, "failed calls"
    worst: tuple[float, str] | None = None
    for key, metric in SLO_METRICS:
        limit = slo.get(key)
        if limit is None:
            continue
        d = row.get(metric)
        if not d:
            return None, key
        g = at_percentile(d, q) / limit
        if worst is None or g > worst[0]:
            worst = (g, key)
    return worst if worst is not None else (None, None)


def _at(x: float, x0: float, x1: float, y0: float | None, y1: float | None) -> float | None:
    if y0 is None or y1 is None:
        return None
    return float(np.interp(x, [x0, x1], [y0, y1]))


Throughput = tuple[float | None, float | None]  # output tokens/s, requests/s


def level_throughput(row: LoadRow, calls: LevelCalls | None) -> Throughput | None:
    """(output tokens/s, requests/s) of a closed-loop level by Little's law over its measured calls (see the module
    docstring); None for another mode, or without its calls."""
    n = row.get("concurrency")
    if row.get("mode") != "closed" or calls is None or not calls.n or not n:
        return None
    total = float(np.nansum(calls.e2e))
    if not total > 0:
        return None
    return n * float(calls.output.sum()) / total, n * float((~calls.failed).sum()) / total


class SweepCapacity(NamedTuple):
    """One arm's capacity on a sweep (see the module docstring): ``load`` (the lower end where ``bound`` is
    "between"), ``upper`` (the level that failed, above it; else None), the throughput at ``load``."""

    load: float | None
    upper: float | None
    bound: Bound
    reason: str | None
    output_tps: float | None
    requests_per_s: float | None
    levels: list[CapacityLevel]


def sweep_capacity(levels: Sequence[LoadRow], q: int = PERCENTILE,
                   throughput: Mapping[str, Throughput] | None = None) -> SweepCapacity:
    """One arm's sweep's capacity, its rows in load order (see the module docstring); *throughput*: each level's
    (output tokens/s, requests/s) by stage (else the row's own)."""
    def tps(r: LoadRow) -> float | None:
        return (throughput or {}).get(r["stage"], (r.get("output_tps"), None))[0]

    def rps(r: LoadRow) -> float | None:
        return (throughput or {}).get(r["stage"], (None, r.get("requests_per_s")))[1]
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
    xa, ga, ra = x0, g0, r0  # the last level that met the SLOs
    for xb, gb, rb in used[1:]:
        if gb is not None and gb <= 1.0:
            xa, ga, ra = xb, gb, rb
            continue
        if gb is None:
            return SweepCapacity(xa, xb, "between", f"calls failed at {xb:g}: the capacity lies between {xa:g} and "
                                 f"{xb:g}", tps(ra), rps(ra), out)
        x = xa + (xb - xa) * (1.0 - ga) / (gb - ga)
        return SweepCapacity(x, None, "interpolated", None, _at(x, xa, xb, tps(ra), tps(rb)),
                             _at(x, xa, xb, rps(ra), rps(rb)), out)
    xn, _, rn = used[-1]
    return SweepCapacity(xn, None, "at least", "met the SLOs at every level measured", tps(rn), rps(rn), out)


def capacity_rows(rows: Sequence[LoadRow], conditions: Mapping[str, Mapping[str, JSONValue]],
                  gpu_hour_usd: float | None = None, q: int = PERCENTILE,
                  calls: Mapping[tuple[str, str], LevelCalls] | None = None) -> list[CapacityRow]:
    """Per (arm, sweep, axis) whose stages set SLOs: its capacity and the price of it (see the module docstring);
    *calls*: each (arm, stage)'s measured calls (:func:`..load.levels.level_calls`), for a closed loop's
    throughput."""
    groups: dict[tuple[str, str, str], list[LoadRow]] = defaultdict(list)
    for r in rows:
        if (name := r.get("sweep")) and r.get("slo"):  # a sweep is one mode: one axis
            groups[(r["arm"], name, level_load(r)[0])].append(r)
    out: list[CapacityRow] = []
    for (arm, sweep, _), rs in groups.items():
        rs = sorted(rs, key=lambda r: level_load(r)[1] or 0.0)
        little = {r["stage"]: level_throughput(r, (calls or {}).get((arm, r["stage"]))) for r in rs}
        known = {stage: v for stage, v in little.items() if v is not None}
        little_all = len(known) == len(little)  # one basis for the whole sweep
        load, upper, bound, reason, tps, rps, levels = sweep_capacity(rs, q, known if little_all else None)
        cond = conditions.get(arm, {})
        price, gpus = price_and_gpus(cond, arm, gpu_hour_usd)
        per_req = gpus * 1000.0 / (3600.0 * rps) if rps else None
        per_tok = gpus * 1e6 / (3600.0 * tps) if tps else None
        out.append({"arm": arm, "sweep": sweep, "x": level_load(rs[0])[0], "slo": rs[0]["slo"] or {},
                    "percentile": float(q), "load": load, "upper": upper, "bound": bound,
                    "reason": reason,
                    "output_tps": tps, "requests_per_s": rps,
                    "throughput_source": "calls in flight" if little_all else "window", "gpus": gpus,
                    "gpus_source": "conditions" if "gpus" in cond else "assumed",
                    "gpu_hour_usd": price,
                    "gpu_hours_per_1000_requests": per_req, "gpu_hours_per_million_output_tokens": per_tok,
                    "usd_per_1000_requests": per_req * price if per_req is not None and price is not None else None,
                    "usd_per_million_output_tokens": per_tok * price if per_tok is not None and price is not None
                    else None, "levels": levels})
    return out
