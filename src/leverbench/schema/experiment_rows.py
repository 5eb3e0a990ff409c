"""The experiment's sections of the summary: the run, its arms, comparisons, verdicts, drift, equal work,
engagement, cost and the warnings (engagement, drift, equal work and
cost: :mod:`.check_rows`)."""

from __future__ import annotations

from typing import Any

from typing_extensions import NotRequired

from . import STRICT
from .check_rows import CheckSections
from .recorded_rows import RecordedSection


class ExperimentSections(CheckSections):
    """The summary's sections about the experiment's comparisons (rows typed: issue 24 part 3); engagement, drift,
    equal work and cost: :class:`.check_rows.CheckSections`."""

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
    tolerances: Any
    warnings: list[str]
    warning_items: list[Any]
    recorded: NotRequired[RecordedSection]  # only a run that replayed recorded turns
