"""The experiment's sections of the summary: the run, its arms, comparisons, verdicts, drift, equal work,
engagement, cost and the warnings."""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from . import STRICT


class ExperimentSections(TypedDict):
    """The summary's sections about the experiment's comparisons (rows typed: issue 24 part 3)."""

    __pydantic_config__ = STRICT

    schema: str
    run: Any
    baseline: str
    arms: list[Any]
    levers: list[Any]
    verdicts: list[Any]
    adaptive: Any
    cases: list[str]
    cells: list[Any]
    totals: list[Any]
    multipliers: list[Any]
    variant_cells: list[Any]
    prompt_discipline: Any
    reasoning: Any
    engaged: Any
    cost: Any
    drift: list[Any]
    drift_pairs: list[Any]
    drift_common: Any
    equal_work: list[Any]
    tolerances: Any
    warnings: list[str]
    warning_items: list[Any]
