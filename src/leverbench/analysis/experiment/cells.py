"""Cells, totals and multipliers: the result table.

- Cell = (arm, case); its sample is the turn times of the arm's successful
  repeats.  median and observed range [min, max] over them.
- Overlap: whether an arm's range and the baseline's share any point.
- Total of an arm = Σ over cases of the cell medians (defined only when every
  case has a successful cell).
- Multiplier = reference time / arm time (cell or total), for every
  comparison of :func:`.knobs.comparisons` (each arm against the baseline, and
  every other pair that differs in one knob), judged by :mod:`.guard`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...schema.experiment_rows import CellRow, MultiplierRow, TotalRow
from ..base.dataset import Dataset, groups, sums, zero_nan
from ..base.guard import Judgement, Reason, judge
from ..base.knobs import Comparison
from ..base.stats import median, overlap


def cells(ds: Dataset, case_names: list[str] | None = None, turn_s: np.ndarray | None = None) -> list[CellRow]:
    """One row per (arm, case) of *case_names* (default: the engine comparison's cases); *turn_s*: the turns'
    times to take (default: as measured; :func:`.drift.adjusted_turn_s` puts them on one speed)."""
    case_names = ds.cases if case_names is None else case_names
    turn_s = ds.turn.turn_s if turn_s is None else turn_s
    T, C, n = ds.turn, ds.call, ds.n_cells
    by_turn = groups(ds.cell_code(T.arm, T.case), n)
    ccode = ds.cell_code(C.arm, C.case)
    calls = sums(ccode, None, n)
    failed = sums(ccode, ~C.ok & ~C.retried, n)
    # a failed companion (runner.companions): its turn was not timed at the load it claims
    companions_failed = sums(ds.cell_code(T.arm, T.case), zero_nan(T.companion_failed), n)
    retried = sums(ccode, C.retried, n)
    empty = sums(ccode, C.empty_answer, n)
    out = []
    for arm in ds.arms:
        for case in case_names:
            k = ds.cell(arm, case)
            turns = by_turn[k]
            ok = turns[T.ok[turns]]
            times = turn_s[ok]
            outs = T.output_tokens[ok]
            ins = T.prompt_tokens[ok]
            outs, ins = outs[~np.isnan(outs)], ins[~np.isnan(ins)]
            has = len(ok) > 0
            cell: CellRow = {  # type: ignore[typeddict-item]  # overlaps_baseline: below
                "arm": arm, "case": case, "n": len(ok), "attempted": len(turns),
                "failed_turns": len(turns) - len(ok),
                "failed_calls": int(failed[k]),
                "companion_failed": int(companions_failed[k]),
                "retried_calls": int(retried[k]),
                "calls": int(calls[k]),
                "median_s": median(times) if has else None,
                "min_s": float(times.min()) if has else None,
                "max_s": float(times.max()) if has else None,
                "output_tokens_median": median(outs) if len(outs) else None,
                "input_tokens_median": median(ins) if len(ins) else None,
                "reasoning_tokens_median": median(zero_nan(T.reasoning_tokens[ok])) if has else None,
                "tool_s_median": median(zero_nan(T.tool_s[ok])) if has else None,
                "empty_answers": int(empty[k]),
                "step_limited": int(T.step_limit[turns].sum()),
                "times_s": times.tolist(),
            }
            if retried[k]:  # the turn keeps its full wall clock; what it would have been without the retried attempts
                cell["median_without_retries_s"] = median(times - zero_nan(T.retried_s[ok])) if has else None
            out.append(cell)
    base = {c["case"]: c for c in out if c["arm"] == ds.baseline}
    for c in out:
        b = base.get(c["case"])
        # (a cell has its median and its range [min, max] both, or neither: without a successful turn)
        if c["arm"] == ds.baseline or not b or c["min_s"] is None or c["max_s"] is None or b["min_s"] is None \
                or b["max_s"] is None:
            c["overlaps_baseline"] = None
        else:
            c["overlaps_baseline"] = overlap((c["min_s"], c["max_s"]), (b["min_s"], b["max_s"]))
    return out


def totals(ds: Dataset, cell_list: Sequence[CellRow]) -> list[TotalRow]:
    out: list[TotalRow] = []
    for arm in ds.arms:
        mine = [c for c in cell_list if c["arm"] == arm]
        medians = [c["median_s"] for c in mine if c["median_s"] is not None]
        complete = len(medians) == len(mine) and len(mine) == len(ds.cases)
        vols = [c["output_tokens_median"] for c in mine if c["output_tokens_median"] is not None]
        out.append({
            "arm": arm,
            "total_s": sum(medians) if complete else None,
            "output_tokens": sum(vols) if complete and len(vols) == len(mine) else None,
            "cases": len(ds.cases),
            "complete": complete,
        })
    return out


def multipliers(ds: Dataset, cell_list: Sequence[CellRow], total_list: Sequence[TotalRow],
                comps: list[Comparison], also: dict[tuple[str, str], list[Reason]] | None = None
                ) -> list[MultiplierRow]:
    """Per comparison: one row per case and one for the total (``vs`` = the reference arm); *also*: the
    comparison's own reasons not to cite it (drift, contradictions, engagement), by (arm, vs)."""
    tol_cell, tol_total = ds.settings.volume_tolerance_cell, ds.settings.volume_tolerance_total
    cell_of: dict[tuple[str, str], _NamedCell] = {(c["arm"], c["case"]): {**c, "name": c["arm"]} for c in cell_list}
    total_of = {t["arm"]: t for t in total_list}
    out: list[MultiplierRow] = []
    for comp in comps:
        arm, ref, knobs = comp.arm, comp.vs, list(comp.knobs)
        extra = (also or {}).get((arm, ref), [])
        unknown = list(comp.unknown)
        mine = [(f"case:{case}", judge(cell_of[(ref, case)], cell_of[(arm, case)], tol_cell, knobs, also=extra,
                                       controlled=comp.controlled)) for case in ds.cases]
        tr, ta = total_of[ref], total_of[arm]
        blocking = [f"{scope.removeprefix('case:')} ({j['reason']})" for scope, j in mine if j["blocks_total"]]
        total = judge({"name": ref, "median_s": tr["total_s"], "output_tokens_median": tr["output_tokens"], "n": None},
                      {"name": arm, "median_s": ta["total_s"], "output_tokens_median": ta["output_tokens"], "n": None},
                      tol_total, knobs, blocked_by=blocking, also=extra, controlled=comp.controlled)
        out += [_row(comp, scope, j, unknown) for scope, j in [*mine, ("total", total)]]
    return out


class _NamedCell(CellRow):
    """A cell as :func:`.guard.judge` reads it: with the name its reasons give it (its arm's)."""

    name: str


def _row(comp: Comparison, scope: str, j: Judgement, unknown: list[str]) -> MultiplierRow:
    """A multiplier row of *comp* on *scope*: the guard's judgement *j* (less ``blocks_total``: what the total's
    own judgement takes), its lever and the knobs unknown on either arm; ``equal_work`` None until
    :func:`.equal_work.equal_work_rows` gives the rows refused for their volume their figure."""
    return {"arm": comp.arm, "vs": comp.vs, "scope": scope, "value": j["value"], "citable": j["citable"],
            "reason": j["reason"], "reason_codes": j["reason_codes"], "volume_spread": j["volume_spread"],
            "controlled": j["controlled"], "knobs": j["knobs"], "lever": comp.lever, "unknown_knobs": unknown,
            "equal_work": None}
