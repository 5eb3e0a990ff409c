"""The headline: for each lever, the controlled comparison that measures it.

A lever is a knob (:mod:`.knobs`) in which some two arms differ (not a discovered fact or flag, ``fact:`` and
``flag:``, and not through a value unknown on one of them).  For each,
in the order the arms first differ in it: every controlled comparison that
measures it (two arms that differ in that knob only) with its total
multiplier (reference time / arm time) and the guard's verdict on it, whether
the lever engaged on the arm that has it, and the GPU-hours per 1000 turns it
returns (reference − arm, where both arms have a cost row) — citable exactly
when the multiplier is.  When no controlled comparison measures a lever, the
row says so and which arm would make one.

Where the measured multiplier is refused for its output volume alone and its
equal-work figure (:mod:`.equal_work`) may be cited, the row's multiplier is
the equal-work figure (``measure`` "equal work", ``note`` saying so, the
measured one kept in ``measured``); the GPU-hours returned are then the
reference's less the arm's at equal work (reference GPU-hours / multiplier).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ...json_types import JSONValue
from ...levers import engaged_in
from ...schema.check_rows import CostRow
from ...schema.experiment_rows import LeverHeadlineRow, MultiplierRow
from ...schema.lever_rows import EngagedRow
from ..base.guard import cited
from ..base.knobs import UNKNOWN, differing, suggestion


def levers(arms: list[str], knobs: Mapping[str, Mapping[str, JSONValue]], multipliers: Sequence[MultiplierRow],
           engaged_rows: Sequence[EngagedRow], cost_rows: Sequence[CostRow]) -> list[LeverHeadlineRow]:
    names: list[str] = []
    for i, x in enumerate(arms):
        for y in arms[i + 1:]:
            # a discovered fact or flag is no lever (it only keeps a comparison from being controlled), and a knob
            # known on one side only is no difference found
            names += [k for k in differing(knobs[x], knobs[y]) if k not in names
                      and not k.startswith(("fact:", "flag:")) and UNKNOWN not in (knobs[x].get(k), knobs[y].get(k))]
    eng: dict[str, EngagedRow] = {e["arm"]: e for e in engaged_rows}
    cost = {c["arm"]: c for c in cost_rows}
    out: list[LeverHeadlineRow] = []
    for knob in names:
        pairs = [m for m in multipliers if m["scope"] == "total" and m.get("lever") == knob]
        if not pairs:
            out.append({"lever": knob, "arm": None, "vs": None, "multiplier": None, "citable": False,
                        "reason": suggestion(knob, arms, knobs), "engaged": None,
                        "gpu_hours_returned_per_1000_turns": None})
            continue
        for m in pairs:
            ca, cr = cost.get(m["arm"]), cost.get(m["vs"])
            returned = (cr["gpu_hours_per_1000_turns"] - ca["gpu_hours_per_1000_turns"]) if ca and cr else None
            row: LeverHeadlineRow = {
                   "lever": knob, "arm": m["arm"], "vs": m["vs"], "multiplier": m["value"], "citable": m["citable"],
                   "reason": m["reason"], "engaged": _engaged(eng, m["arm"], knob),
                   "gpu_hours_returned_per_1000_turns": returned, "measure": "measured", "note": None,
                   "measured": {"value": m["value"], "citable": m["citable"], "reason": m["reason"]}}
            ew = m.get("equal_work")
            if ew and ew.get("value") is not None and not ew["citable"] and not m["citable"]:
                row["reason"] = f"{m['reason']}; at equal work {ew['value']:.2f}x, not citable either: {ew['reason']}"
            # (cited says "equal work" only where the row has an equal-work figure)
            if cited(m)[2] == "equal work" and ew is not None and ew["value"]:
                if cr and ca and cr.get("gpu_hours_per_1000_turns") is not None:
                    ref_h = cr["gpu_hours_per_1000_turns"]
                    scale = (ca.get("gpus") or 1) / (cr.get("gpus") or 1)
                    row["gpu_hours_returned_per_1000_turns"] = ref_h - ref_h * scale / ew["value"]
                row.update({"multiplier": ew["value"], "citable": True, "reason": None, "measure": "equal work",
                            "note": f"equal work: {ew['corrected']}; the measured {m['value']:.2f}x is refused "
                                    f"({m['reason']})"})
            out.append(row)
    return out


def _engaged(rows: Mapping[str, EngagedRow], arm: str, knob: str) -> bool | None:
    """Whether *arm* engaged *knob*'s lever, as its ``engaged`` row says (its lever's module says where the row
    holds it); None: unknown, the lever not turned on there, or a knob no lever names."""
    row = rows.get(arm)
    return engaged_in(row, knob) if row is not None else None
