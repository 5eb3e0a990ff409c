"""The experiment's figures: per (arm, case) cells and per arm totals, the multipliers of every comparison with
the reasons one is refused, the prompt variants, equal work, the verdicts, and what a turn costs."""

from __future__ import annotations

from typing import Sequence, cast

import numpy as np

from ...schema.check_rows import Citability, CommonDrift, CostRow, DriftRow, EqualWorkRow
from ...schema.experiment_rows import CellRow, MultiplierRow
from ...schema.warning_kinds import RunWarning, WarningKind
from ..base.guard import measurement_guard
from ..experiment.cells import cells, multipliers, totals
from ..experiment.cost import costs
from ..experiment.drift import drifted_arms
from ..experiment.equal_work import EqualWork, equal_work, equal_work_rows, turns
from ..experiment.reasoning import prompt_discipline
from ..experiment.verdicts import verdicts
from .base import Inputs, Product
from .comparisons import (
    COMMON,
    COMPARISONS,
    DRIFT,
    KNOBS,
    PAIR_DRIFT,
    REPEAT_CHECK,
    TOOLS_CHECK,
    Reasons,
    comparison_reasons,
)
from .engagement import ENGAGED
from .rates import PROBES, RATE_MODELS

CELLS = Product("cells", (COMMON,), lambda i: cells(i.ds, turn_s=i[COMMON][1]), key="cells")
TOTALS = Product("totals", (CELLS,), lambda i: totals(i.ds, i[CELLS]), key="totals")


def _reasons(i: Inputs) -> Reasons:
    out = comparison_reasons(i[COMPARISONS], i[KNOBS][1], i[ENGAGED], i[PAIR_DRIFT])
    for key, more in [*i[REPEAT_CHECK][1].items(), *i[TOOLS_CHECK][1].items()]:
        out[key] = [*out.get(key, []), *more]
    return out


#: per comparison (arm, vs), every reason beyond the guard's own that it may not be cited
REASONS = Product("reasons", (COMPARISONS, KNOBS, ENGAGED, PAIR_DRIFT, REPEAT_CHECK, TOOLS_CHECK), _reasons)
#: the multipliers as measured (before equal work's figure is added to the rows refused for their volume)
MEASURED = Product("measured_multipliers", (CELLS, TOTALS, COMPARISONS, REASONS),
                   lambda i: multipliers(i.ds, i[CELLS], i[TOTALS], i[COMPARISONS], i[REASONS]))


def _cell_warnings(i: Inputs) -> None:
    for c in i[CELLS]:
        if c["failed_calls"] or c["failed_turns"] or c["companion_failed"]:
            beside = f", {c['companion_failed']} failed companion call(s)" if c["companion_failed"] else ""
            i.warn(RunWarning(WarningKind.FAILED_CALLS, f"{c['arm']}/{c['case']}: {c['failed_turns']} failed turn(s), "
                              f"{c['failed_calls']} failed call(s){beside}; its multipliers are not citable",
                              c["arm"], c["case"]))
    for m in i[MEASURED]:
        if not m["controlled"] and m["scope"] == "total":
            i.warn(RunWarning(WarningKind.UNCONTROLLED, f"uncontrolled comparison: {m['arm']} vs {m['vs']} differ in "
                              f"{len(m['knobs'])} knobs ({', '.join(m['knobs'])}); the multiplier mixes their effects",
                              m["arm"]))


#: warnings only: cells with failed calls, comparisons that differ in more than one knob
CELL_WARNINGS = Product("cell_warnings", (CELLS, MEASURED), _cell_warnings)


def _variant_cells(i: Inputs) -> list[CellRow]:
    variant_cells = cells(i.ds, list(i.ds.variants)) if i.ds.variants else []
    for c in i[CELLS] + variant_cells:
        if c["empty_answers"]:
            i.warn(RunWarning(WarningKind.EMPTY_ANSWER, f"{c['arm']}/{c['case']}: {c['empty_answers']} call(s) used "
                              "all of max_tokens and returned no visible answer (reasoning or nothing): the turn did "
                              "not do its job", c["arm"], c["case"]))
        if c["step_limited"]:
            i.warn(RunWarning(WarningKind.STEP_LIMIT, f"{c['arm']}/{c['case']}: {c['step_limited']} turn(s) were cut "
                              "by the step limit", c["arm"], c["case"]))
    return variant_cells


VARIANT_CELLS = Product("variant_cells", (CELLS,), _variant_cells, key="variant_cells")
PROMPT_DISCIPLINE = Product("prompt_discipline", (VARIANT_CELLS, CELLS),
                            lambda i: prompt_discipline(i.ds, i[VARIANT_CELLS], i[CELLS]), key="prompt_discipline")


def _texts(i: Inputs) -> dict[tuple[str, str, int, int], str]:
    """(arm, case, repeat, step) → the answer's text, of the counted turns' calls (a run with store_text)."""
    ds = i.ds
    counted = {tid: k for k, tid in enumerate(ds.turn_ids) if tid is not None}
    out: dict[tuple[str, str, int, int], str] = {}
    for r in i.ledger.of_kind("call"):
        k = counted.get(r.get("turn_id"))
        if k is not None and r.get("output_text") is not None and r.get("error") is None \
                and ds.turn.repeat[k] == ds.turn.repeat[k]:  # a turn without a repeat number is no unit
            out.setdefault((r["arm"], r["case"], int(ds.turn.repeat[k]), int(r.get("step") or 0)), r["output_text"])
    return out


def _equal_work(i: Inputs) -> list[EqualWork]:
    model_of = {m["arm"]: m for m in i[RATE_MODELS]}
    tt = turns(i.ds)
    texts = _texts(i) if i.ds.settings.store_text else None
    volume = {(m["arm"], m["vs"]) for m in i[MEASURED] if "volume" in m["reason_codes"]}
    adjusted: np.ndarray | None = i[COMMON][1]
    return [equal_work(i.ds, c, model_of.get(c.arm), i[PROBES], tt, texts, adjusted, (c.arm, c.vs) in volume)
            for c in i[COMPARISONS]]


#: per comparison, its arm's turns corrected to the reference's work
EQUAL_WORK = Product("equal_work", (RATE_MODELS, MEASURED, COMMON, PROBES, COMPARISONS), _equal_work)


def _at_equal_work(i: Inputs) -> tuple[list[EqualWorkRow], list[MultiplierRow]]:
    # equal_work_rows adds ``equal_work`` to every multiplier row refused for its volume: to copies, so that no
    # product changes another's value (tests/test_sections.py checks none does)
    mults = [cast(MultiplierRow, dict(m)) for m in i[MEASURED]]
    rows = equal_work_rows(i[EQUAL_WORK], mults, i.ds.cases, (i.ds.settings.volume_tolerance_cell,
                                                              i.ds.settings.volume_tolerance_total))
    return rows, mults


#: (the ``equal_work`` section, the multipliers with equal work's figure added where their volume refused them)
AT_EQUAL_WORK = Product("at_equal_work", (EQUAL_WORK, MEASURED), _at_equal_work)
EQUAL_WORK_ROWS = Product("equal_work_rows", (AT_EQUAL_WORK,), lambda i: i[AT_EQUAL_WORK][0], key="equal_work")
#: the ``multipliers`` section: every comparison's, with equal work's figure where it applies
MULTIPLIERS = Product("multipliers", (AT_EQUAL_WORK,), lambda i: i[AT_EQUAL_WORK][1], key="multipliers")
#: (the ``verdicts`` section, the ``adaptive`` block or None)


VERDICTS = Product("verdicts", (COMPARISONS, MULTIPLIERS, EQUAL_WORK),
                   lambda i: verdicts(i.ds, i[COMPARISONS], i[MULTIPLIERS], i[EQUAL_WORK]))
VERDICT_ROWS = Product("verdict_rows", (VERDICTS,), lambda i: i[VERDICTS][0], key="verdicts")
ADAPTIVE = Product("adaptive", (VERDICTS,), lambda i: i[VERDICTS][1], key="adaptive")


def cost_citability(baseline: str, cell_list: Sequence[CellRow], mults: Sequence[MultiplierRow],
                    drift_rows: Sequence[DriftRow], common_row: CommonDrift | None = None) -> Citability:
    """Per arm, whether its cost row may be cited: the baseline by its own measurements, every other
    arm by its total multiplier against the baseline (the comparison "GPU-hours returned" comes from);
    and no arm whose own speed drifted, nor any arm where the machine's speed changed for every arm alike
    (*common_row*: ``drift_common``; a cost per turn is an absolute figure: every drift biases it).
    Takes the summary's own rows, so a command can apply it to a summary read back."""
    drifted = drifted_arms(drift_rows)
    common = "the machine's speed changed during the run, alike for every arm (drift_common)" \
        if common_row is not None and common_row.get("detected") else None
    out = {baseline: measurement_guard([c for c in cell_list if c["arm"] == baseline], drifted)}
    for m in mults:
        if m["scope"] == "total" and m["vs"] == baseline:
            ok, why = m["citable"], m["reason"]
            if m["arm"] in drifted:
                ok, why = False, "; ".join(filter(None, [why, f"drifted ({drifted[m['arm']]})"]))
            out[m["arm"]] = (ok, why)
    if common:
        out = {a: (False, "; ".join(filter(None, [why, common]))) for a, (_, why) in out.items()}
    return out


def _cost(i: Inputs) -> list[CostRow]:
    cite = cost_citability(i.ds.baseline, i[CELLS], i[MULTIPLIERS], i[DRIFT], i[COMMON][0])
    return costs(i[TOTALS], {a: i.ds.conditions(a) for a in i.ds.arms}, i.ds.baseline, i.gpu_hour_usd, cite)


COST = Product("cost", (CELLS, MULTIPLIERS, DRIFT, COMMON, TOTALS), _cost, key="cost")
