"""The orders in which a what-if serves calls that arrive at the same instant (issue 15; :mod:`.whatif`).

A trace's timestamps are coarse (Mooncake's come in bursts of 10–16 calls at one millisecond), and the
order in which a real server takes simultaneous requests is not recorded (llama.cpp took each replay of
the same burst in a different order).  With one slot, a call's latency is its place in that queue.  So
:func:`.whatif.forecast` serves ``k`` seeded random orders of the ties (:func:`orders_to_serve`) and
reports each figure's mean over them, with its lowest and highest (:func:`mean_row`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Sequence, overload

import numpy as np
from typing_extensions import TypeAlias

from .plan import Plan

if TYPE_CHECKING:
    from ...schema.load_rows import Distribution
    from ...schema.whatif_rows import CacheFigures, ForecastArm, OrderFigures, OrderRanges

ORDERS = 16  # random orders of simultaneous arrivals a forecast serves (see the module docstring) ...
ORDER_BUDGET = 1_000_000  # ... at most this many calls simulated per arm in all: a large trace gets fewer orders
#                           (200,000 calls: 5), its figures averaging over many bursts already
#: A key of :class:`~leverbench.schema.whatif_rows.OrderFigures`.
OrderFigure: TypeAlias = Literal["ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "output_tps", "busy_s",
                                 "makespan_s", "gpu_hours_per_1000_calls", "usd_per_1000_calls"]
#: An order figure a verification compares (:data:`.verify.COMPARED`): a replay measures it too (``MeasuredArm``).
Compared: TypeAlias = Literal["ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "output_tps",
                              "gpu_hours_per_1000_calls"]
#: the figures of an arm's row averaged over those orders (the ``ttft`` / ``e2e`` distributions and the
#: ``cache`` figures key by key)
ORDER_FIGURES: tuple[OrderFigure, ...] = ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "output_tps",
                                          "busy_s", "makespan_s", "gpu_hours_per_1000_calls", "usd_per_1000_calls")
CACHE_FIGURES = ("hit_tokens", "input_tokens", "hit_share", "unbounded_hit_share", "evicted_tokens")


def tied_calls(plan: Plan) -> int:
    """How many sessions' first calls arrive at the same instant as another's (0 without arrival times)."""
    if not plan.has_arrivals:
        return 0
    starts = np.array([s[0].start_s or 0.0 for s in plan.sessions])
    _, counts = np.unique(starts, return_counts=True)
    return int(counts[counts > 1].sum())


def _present(values: Sequence[float | None]) -> list[float] | None:
    """The values, or None when any is None."""
    xs = [v for v in values if v is not None]
    return xs if len(xs) == len(values) else None


@overload
def _mean(values: Sequence[float]) -> float: ...


@overload
def _mean(values: Sequence[float | None]) -> float | None: ...


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean of the values, or None when any is None."""
    xs = _present(values)
    return None if xs is None else float(np.mean(xs))


def order_figures(row: OrderFigures) -> OrderFigures:
    """The row's ORDER_FIGURES, in their order (None where the row lacks one)."""
    return {"ttft_p50_s": row.get("ttft_p50_s"), "ttft_p99_s": row.get("ttft_p99_s"),
            "e2e_p50_s": row.get("e2e_p50_s"), "e2e_p99_s": row.get("e2e_p99_s"), "output_tps": row.get("output_tps"),
            "busy_s": row.get("busy_s"), "makespan_s": row.get("makespan_s"),
            "gpu_hours_per_1000_calls": row.get("gpu_hours_per_1000_calls"),
            "usd_per_1000_calls": row.get("usd_per_1000_calls")}


def _mean_distribution(ds: Sequence[Distribution]) -> Distribution:
    """The distributions' count (the first's: every order serves the same calls) and the mean of each figure."""
    return {"n": ds[0]["n"], "p50": _mean([d["p50"] for d in ds]), "p90": _mean([d["p90"] for d in ds]),
            "p95": _mean([d["p95"] for d in ds]), "p99": _mean([d["p99"] for d in ds]),
            "mean": _mean([d["mean"] for d in ds]), "max": _mean([d["max"] for d in ds])}


def _mean_cache(cache: CacheFigures, caches: Sequence[CacheFigures]) -> CacheFigures:
    """*cache* with the mean of each of CACHE_FIGURES over *caches*."""
    return {**cache, "hit_tokens": _mean([c["hit_tokens"] for c in caches]),
            "input_tokens": _mean([c["input_tokens"] for c in caches]),
            "hit_share": _mean([c["hit_share"] for c in caches]),
            "unbounded_hit_share": _mean([c["unbounded_hit_share"] for c in caches]),
            "evicted_tokens": _mean([c["evicted_tokens"] for c in caches])}


def mean_row(rows: Sequence[ForecastArm], tied: int) -> ForecastArm:
    """One row from an arm's rows under several orders of simultaneous arrivals: ORDER_FIGURES, the
    distributions and the cache figures averaged; ``orders`` gives their count, the tied calls and, for each
    of ORDER_FIGURES that the order changes, its [lowest, highest].  A single row is returned as it is
    (``orders`` None)."""
    if len(rows) == 1:
        return {**rows[0], "orders": None}
    out: ForecastArm = {**rows[0]}
    for k in ORDER_FIGURES:
        out[k] = _mean([r[k] for r in rows])
    ttft, e2e = [r.get("ttft") for r in rows], [r.get("e2e") for r in rows]
    if all(ttft):
        out["ttft"] = _mean_distribution([d for d in ttft if d])
    if all(e2e):
        out["e2e"] = _mean_distribution([d for d in e2e if d])
    cache = out.get("cache")
    if cache:
        out["cache"] = _mean_cache(cache, [r["cache"] for r in rows])
    bands: OrderRanges = {}
    for k in ORDER_FIGURES:
        xs = _present([r[k] for r in rows])
        if xs is not None:
            lo, hi = min(xs), max(xs)
            if hi - lo > 1e-9 * abs(hi):  # a figure the order does not change has no range
                bands[k] = [lo, hi]
    out["orders"] = {"orders": len(rows), "tied_calls": tied, **bands}
    return out


def orders_to_serve(plan: Plan, orders: int) -> tuple[int, int, str | None]:
    """(k orders to serve, the tied calls, the note that says so): k = min(orders, ORDER_BUDGET // calls),
    at least 1, where calls arrive at the same instant; else 1 (the trace's order) and no note."""
    tied = tied_calls(plan)
    n = len(plan.calls)
    if not tied or orders <= 1:
        return 1, tied, None
    k = max(1, min(orders, ORDER_BUDGET // max(n, 1)))
    if k == 1:
        return 1, tied, (f"{tied:,} of {n:,} calls arrive at the same instant as another: served in the trace's "
                         f"order only (one order of {n:,} calls already exceeds {ORDER_BUDGET:,} simulated calls "
                         "per arm)")
    return k, tied, (f"{tied:,} of {n:,} calls arrive at the same instant as another: their order at the server is "
                     f"unknown, so each figure is the mean over {k} random orders of them (lowest–highest in the "
                     "JSON's orders)" + (f"; {k}, not {orders}: at most {ORDER_BUDGET:,} calls are simulated per "
                                         "arm" if k < orders else ""))
