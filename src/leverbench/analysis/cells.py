"""Cells, totals and multipliers: the result table.

- Cell = (arm, case); its sample is the turn times of the arm's successful
  repeats.  median and observed range [min, max] over them.
- Overlap: whether an arm's range and the baseline's share any point.
- Total of an arm = Σ over cases of the cell medians (defined only when every
  case has a successful cell).
- Multiplier = baseline time / arm time (cell or total).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .dataset import Dataset
from .guard import judge, uncontrolled_knobs
from .stats import median, overlap


def cells(ds: Dataset, case_names: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per (arm, case) of *case_names* (default: the engine comparison's cases)."""
    case_names = ds.cases if case_names is None else case_names
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for t in ds.turns:
        by[(t["arm"], t["case"])].append(t)
    calls_by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in ds.calls:
        calls_by[(c["arm"], c["case"])].append(c)
    out = []
    for arm in ds.arms:
        for case in case_names:
            turns = by.get((arm, case), [])
            ok = [t for t in turns if t.get("error") is None]
            times = [t["turn_s"] for t in ok]
            outs = [t["output_tokens"] for t in ok if t.get("output_tokens") is not None]
            ins = [t["prompt_tokens"] for t in ok if t.get("prompt_tokens") is not None]
            calls = calls_by.get((arm, case), [])
            cell = {
                "arm": arm, "case": case, "n": len(ok), "attempted": len(turns),
                "failed_turns": len(turns) - len(ok),
                "failed_calls": sum(1 for c in calls if c.get("error") is not None and not c.get("retried")),
                "retried_calls": sum(1 for c in calls if c.get("retried")),
                "calls": len(calls),
                "median_s": median(times) if times else None,
                "min_s": min(times) if times else None,
                "max_s": max(times) if times else None,
                "output_tokens_median": median(outs) if outs else None,
                "input_tokens_median": median(ins) if ins else None,
                "reasoning_tokens_median": median(rs) if (rs := [t.get("reasoning_tokens") or 0 for t in ok]) else None,
                "tool_s_median": median([t.get("tool_s") or 0.0 for t in ok]) if ok else None,
                "empty_answers": sum(1 for c in calls if c.get("empty_answer")),
                "step_limited": sum(1 for t in turns if t.get("step_limit")),
                "times_s": times,
            }
            out.append(cell)
    base = {c["case"]: c for c in out if c["arm"] == ds.baseline}
    for c in out:
        b = base.get(c["case"])
        if c["arm"] == ds.baseline or not b or c["median_s"] is None or b["median_s"] is None:
            c["overlaps_baseline"] = None
        else:
            c["overlaps_baseline"] = overlap((c["min_s"], c["max_s"]), (b["min_s"], b["max_s"]))
    return out


def totals(ds: Dataset, cell_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for arm in ds.arms:
        mine = [c for c in cell_list if c["arm"] == arm]
        complete = all(c["median_s"] is not None for c in mine) and len(mine) == len(ds.cases)
        vols = [c["output_tokens_median"] for c in mine]
        out.append({
            "arm": arm,
            "total_s": sum(c["median_s"] for c in mine) if complete else None,
            "output_tokens": sum(vols) if complete and all(v is not None for v in vols) else None,
            "cases": len(ds.cases),
            "complete": complete,
        })
    return out


def multipliers(ds: Dataset, cell_list: list[dict[str, Any]], total_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    exp = ds.config["experiment"]
    tol_cell = exp.get("volume_tolerance_cell", 0.20)
    tol_total = exp.get("volume_tolerance_total", 0.05)
    cell_of = {(c["arm"], c["case"]): c for c in cell_list}
    total_of = {t["arm"]: t for t in total_list}
    out = []
    for arm in ds.arms:
        if arm == ds.baseline:
            continue
        knobs = uncontrolled_knobs(ds.conditions(ds.baseline), ds.conditions(arm))
        for case in ds.cases:
            b, a = cell_of[(ds.baseline, case)], cell_of[(arm, case)]
            out.append({"arm": arm, "vs": ds.baseline, "scope": f"case:{case}",
                        **judge(b, a, tol_cell, knobs)})
        tb, ta = total_of[ds.baseline], total_of[arm]
        per_case = [m for m in out if m["arm"] == arm and m["scope"].startswith("case:")]
        blocking = [m for m in per_case if m.get("blocks_total")]
        out.append({"arm": arm, "vs": ds.baseline, "scope": "total",
                    **judge({"median_s": tb["total_s"], "output_tokens_median": tb["output_tokens"], "n": None},
                            {"median_s": ta["total_s"], "output_tokens_median": ta["output_tokens"], "n": None},
                            tol_total, knobs, blocked_by=[m["scope"] for m in blocking])})
    for m in out:
        m.pop("blocks_total", None)
    return out
