"""Slots known, slowdown not measured: the two assumptions a what-if serves, and what a verification shows
(issue 22, defect 13; :mod:`.whatif`, :mod:`.whatif_verify`).

A server whose slots discovery found (llama.cpp's ``/props`` ``total_slots``, SGLang's
``max_running_requests``) serves that many requests at once, but how much each slows the others was not
measured (no ``[[load]]`` concurrency sweep).  Batching slows each of k requests served together by a factor
between 1 (perfect batching) and k (no gain: as slow as serving them one after another), so the two ends are:

    one at a time       slots = 1: the arm row's figures (what the forecast assumes)
    in parallel         slots = k, slowdown(k) = 1: ``assumptions.parallel``

``assumptions.range`` holds, per figure, [lowest, highest] of the two.  A verification (:func:`check`) tells,
per figure, which end the measured value lies nearer (``nearer``) and whether it lies between them; the
assumption was wrong when the measured e2e p50 lies nearer the parallel end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Sequence

from .orders import ORDER_FIGURES, order_figures

if TYPE_CHECKING:
    from ...schema.whatif_rows import AssumptionCheck, Assumptions, FigureCheck, MeasuredArm, OrderFigures, OrderRanges
    from .orders import Compared

ONE: Final = "one at a time"
PARALLEL: Final = "parallel"


def _s(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def assumptions(row: OrderFigures, parallel: OrderFigures, slots: int) -> tuple[Assumptions, str]:
    """(the row's ``assumptions``, the note that says so) from the arm's row served one at a time and its row
    served on ``slots`` in parallel without slowdown."""
    one, par = order_figures(row), order_figures(parallel)
    rng: OrderRanges = {}
    for k in ORDER_FIGURES:
        lo, hi = one[k], par[k]
        if lo is not None and hi is not None:
            rng[k] = [min(lo, hi), max(lo, hi)]
    note = (f"{slots} slots known but no batching slowdown measured: these figures serve requests one at a time "
            f"(e2e p50 {_s(one['e2e_p50_s'])} s, p99 {_s(one['e2e_p99_s'])} s, GPU-h/1000 calls "
            f"{_s(one['gpu_hours_per_1000_calls'])}); its {slots} slots in parallel without slowdown give e2e p50 "
            f"{_s(par['e2e_p50_s'])} s, p99 {_s(par['e2e_p99_s'])} s, GPU-h/1000 calls "
            f"{_s(par['gpu_hours_per_1000_calls'])}: the truth lies between (JSON assumptions); a [[load]] "
            "concurrency sweep measures the slowdown")
    return {"slots": slots, "figures": ONE, "one_at_a_time": one, PARALLEL: par, "range": rng}, note


def check(a: Assumptions, measured: MeasuredArm, figures: Sequence[Compared]) -> AssumptionCheck:
    """Where each measured figure lies between the two assumptions: {figures: {k: {measured, one_at_a_time,
    parallel, nearer, between}}, wrong, text}; ``wrong``: the measured e2e p50 lies nearer the parallel end
    than the one-at-a-time end the figures assumed."""
    out: dict[str, FigureCheck] = {}
    for k in figures:
        m, one, par = measured.get(k), a["one_at_a_time"].get(k), a[PARALLEL].get(k)
        if m is None or one is None or par is None or one == par:
            continue
        out[k] = {"measured": m, "one_at_a_time": one, "parallel": par,
                  "nearer": PARALLEL if abs(m - par) < abs(m - one) else ONE,
                  "between": min(one, par) <= m <= max(one, par)}
    e = out.get("e2e_p50_s")
    wrong = bool(e and e["nearer"] == PARALLEL)
    text: str | None = None
    if e is not None:
        if wrong:
            text = (f"measured e2e p50 {_s(e['measured'])} s lies nearer serving its {a['slots']} slots in parallel "
                    f"({_s(e['parallel'])} s) than one at a time ({_s(e['one_at_a_time'])} s): the one-at-a-time "
                    "assumption of the forecast was wrong; measure the batching slowdown (a [[load]] concurrency "
                    "sweep) and forecast again")
        else:
            text = (f"measured e2e p50 {_s(e['measured'])} s lies nearer one at a time ({_s(e['one_at_a_time'])} s) "
                    f"than its {a['slots']} slots in parallel ({_s(e['parallel'])} s): the one-at-a-time assumption "
                    "held")
        if not e["between"]:
            text += ("; it lies outside both assumptions: the engine's speed differs from its calibration's (see "
                     "the engine time where it is reported)")
    return {"figures": out, "wrong": wrong, "text": text}
