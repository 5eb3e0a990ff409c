"""Your operating point (issue 25 part 5): a trace's arrival rate and the calls it has in flight, and on which
side of each lever's crossover under load (``summary.json`` ``load_levers``) that traffic lies.

Pure functions over numbers: :mod:`..traffic` (``analyze``) and :mod:`..whatif` give the calls' arrivals and
durations, and a run's summary gives the levers' rows.

**Arrival rate** = (n − 1) / (last arrival − first arrival), over the n calls with an arrival time.

**Calls in flight**: each call is in flight from its arrival to its arrival + its duration (``analyze``: its
recorded latency where the log has one, else its service time at the rates, alone: without queueing, so a
lower bound wherever the server queued; ``whatif``: its end-to-end time as the simulation served it on the arm).
The count N(t) of calls in flight is a step function of time over [first arrival, last end]; its distribution
is time-weighted (what a moment drawn at random sees):

    share(N = k) = total time with k calls in flight / (last end − first arrival)

and p50, p95 are the smallest k whose cumulative share reaches 0.50, 0.95; mean = ∫N dt / span (Little's
law: arrival rate × mean duration, over the span); max the most at once.

**Sides**: for each lever pair and metric of a run's ``load_levers`` (its default metrics: end-to-end p50 and
goodput, else throughput), the traffic's own load on that sweep's axis — its p95 (and p50) in flight for a
closed-loop sweep (whose concurrency is calls in flight), its arrival rate for an open-loop one (a trace
replay's speed compares with no traffic) — and the multiplier there, between the citable levels the ratio of
the two arms' statistics each interpolated linearly (as the crossover reads them; the nearest level's where the
load lies beyond them: ``measured`` false).  The lever pays
there when that multiplier is > 1: "turn it on"; else "leave it off" — unless the metric shows no clear
difference at any level (each interval holds 1): then neither ("either").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np

from ...levers import registry

if TYPE_CHECKING:
    from ...schema.load_lever_rows import InFlight, LeverSide, LoadLeverRow, MetricRow, OperatingPoint, UnderLoad

#: The metrics a side is judged on, in order of preference (a sweep without SLOs has no goodput).
SIDE_METRICS = ("e2e_p50", "goodput", "output_tps")


def in_flight(arrival: np.ndarray, duration: np.ndarray) -> InFlight | None:
    """The time-weighted distribution of calls in flight (see the module docstring); None without a span."""
    ok = np.isfinite(arrival) & np.isfinite(duration) & (duration >= 0)
    start, end = arrival[ok], arrival[ok] + duration[ok]
    if start.size == 0:
        return None
    times = np.concatenate([start, end])
    steps = np.concatenate([np.ones(start.size), -np.ones(end.size)])
    order = np.lexsort((steps, times))  # at one instant a call that ends leaves before one that arrives
    t, n = times[order], np.cumsum(steps[order])
    dt = np.diff(t)
    span = float(t[-1] - t[0])
    if not span > 0:
        return None
    level, weight = n[:-1], dt
    by = np.argsort(level, kind="stable")
    cum = np.cumsum(weight[by]) / span
    sorted_level = level[by]

    def q(p: float) -> float:
        return float(sorted_level[min(int(np.searchsorted(cum, p - 1e-12)), sorted_level.size - 1)])
    return {"p50": q(0.50), "p95": q(0.95), "mean": float((level * weight).sum() / span), "max": float(n.max()),
            "span_s": span}


def operating_point(arrival: np.ndarray, duration: np.ndarray, source: str) -> OperatingPoint:
    """The arrival rate and calls in flight of calls arriving at *arrival* (seconds) and lasting *duration*
    (*source*: where the durations come from, in words)."""
    a = arrival[np.isfinite(arrival)]
    span = float(a.max() - a.min()) if a.size else 0.0
    return {"calls": int(a.size), "arrival_rate": (a.size - 1) / span if span > 0 else None,
            "in_flight": in_flight(arrival, duration), "duration_source": source, "sides": []}


def side_metric(row: LoadLeverRow) -> MetricRow | None:
    """The metric a lever pair is judged on at an operating point: the first of :data:`SIDE_METRICS` with a
    citable level."""
    metrics = {m["metric"]: m for m in row["metrics"]}
    return next((metrics[k] for k in SIDE_METRICS if k in metrics and _at(metrics[k], 0.0)[0] is not None), None)


def under_load(rows: Iterable[LoadLeverRow]) -> list[UnderLoad]:
    """Each lever pair a run measured under load, compactly, for the words of a traffic analysis: its side metric's
    multipliers at the citable levels, where it pays, its crossover, and whether its lever acts on queueing
    (batching: :mod:`leverbench.levers`)."""
    out: list[UnderLoad] = []
    for r in rows:
        m = side_metric(r)
        if m is None:
            continue
        x = registry.lever(r["lever"])
        out.append({"lever": r["lever"], "words": x.words if x else r["lever"],
                    "queueing": bool(x and "queueing" in x.phases), "arm": r["arm"], "vs": r["vs"],
                    "sweep": r["sweep"], "x": r["x"], "metric": m["metric"], "pays": m["pays"],
                    "crossover": m.get("crossover"),
                    "levels": [[v["load"], v["value"]] for v in m["levels"]
                               if v["citable"] and v["value"] is not None],
                    "unclear": [v["load"] for v in m["levels"]
                                if v["citable"] and v["value"] is not None and not v.get("clear", True)]})
    return out


def _at(row: MetricRow, x: float) -> tuple[float | None, bool]:
    """A metric row's multiplier at load x, between its citable levels (the nearest one's beyond them), and whether
    x lies within the levels measured: 1 + d(x) / s(x), the difference d = s · (m − 1) of the two arms' statistics
    and the denominator s each interpolated linearly — the ratio of the two arms' statistics each on its straight
    line, as the crossover reads them (:mod:`..experiment.crossover`); the multiplier interpolated where a level
    lacks its denominator."""
    use = [(v["load"], value, v.get("denominator")) for v in row["levels"]
           if v["citable"] and (value := v["value"]) is not None]
    if not use:
        return None, False
    xs, ms, ss = zip(*use)
    inside = min(xs) <= x <= max(xs)
    if any(v is None or not v > 0 for v in ss):
        return float(np.interp(x, xs, ms)), inside
    den = float(np.interp(x, xs, ss))
    return 1.0 + float(np.interp(x, xs, [k * (m - 1.0) for k, m in zip(ss, ms)])) / den, inside


def sides(rows: Iterable[LoadLeverRow], point: OperatingPoint) -> list[LeverSide]:
    """On which side of each lever pair's crossover the traffic lies (see the module docstring)."""
    out: list[LeverSide] = []
    fl = point.get("in_flight")
    for r in rows:
        at_p50: float | None
        if r["x"] == "concurrency" and fl:
            at, at_p50, what = fl["p95"], fl["p50"], "p95"
        elif r["x"] == "rate" and (rate := point.get("arrival_rate")) is not None:
            at, at_p50, what = rate, None, "arrival rate"
        else:
            continue
        m = side_metric(r)
        if m is None:
            continue
        value, measured = _at(m, at)
        p50_value = _at(m, at_p50)[0] if at_p50 is not None else None
        cross = m.get("crossover")
        even, pays_there = m["pays"] == "no clear difference", value is not None and value > 1.0
        out.append({"lever": r["lever"], "arm": r["arm"], "vs": r["vs"], "sweep": r["sweep"], "x": r["x"],
                    "metric": m["metric"], "at": float(at), "at_what": what, "multiplier": value,
                    "p50": at_p50, "p50_multiplier": p50_value, "measured": measured,
                    "crossover": cross["load"] if cross else None, "pays": m["pays"],
                    "side": "no clear difference" if even else "pays" if pays_there else "costs",
                    "advice": "either: no clear difference measured" if even else "turn it on" if pays_there
                    else "leave it off"})
    return out
