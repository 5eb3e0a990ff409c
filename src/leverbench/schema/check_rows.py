"""The summary's sections about what was checked of the measurements and what they cost: engagement
(``engaged``), drift (``drift``, ``drift_pairs``, ``drift_common``), equal work (``equal_work``) and the cost
(``cost``); built by :mod:`leverbench.analysis.experiment` (engaged, drift, equal_work, cost)."""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from . import STRICT
from .lever_rows import EngagedRow


class CheckSections(TypedDict):
    """The summary's sections on engagement, drift, equal work and cost (rows typed: issue 24 part 3)."""

    __pydantic_config__ = STRICT

    engaged: list[EngagedRow]
    cost: Any
    drift: list[Any]
    drift_pairs: list[Any]
    drift_common: Any
    equal_work: list[Any]
