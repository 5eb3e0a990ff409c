"""The summary's sections about what was checked of the measurements and what they cost: engagement
(``engaged``), drift (``drift``, ``drift_pairs``, ``drift_common``), equal work (``equal_work``) and the cost
(``cost``); built by :mod:`leverbench.analysis.experiment` (engaged, drift, equal_work, cost).

Every key a row can have is named; ``None`` where a builder writes null.  The numbers a reader computes with
carry their bounds as ``annotated_types`` constraints (pydantic applies them: :mod:`.check`): a trend's change
is exp(b) − 1, never below −1 (:func:`...analysis.experiment.drift.adjusted_turn_s` takes its log1p); a
sentinel's speed is above 0; equal work's shares, token changes and divergence positions are what their
formulas allow (a share of time ≥ 0, a token change ≥ −1); a cost row's GPUs, price, seconds, dollars and
GPU-hours are finite and not negative (the GPUs and the price within :mod:`leverbench.bounds`), the GPU-hours
an arm returns against the baseline of either sign.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

from annotated_types import Ge, Gt, Le, Predicate
from typing_extensions import TypeAlias, TypedDict

from ..bounds import MAX_GPU_HOUR_USD, MAX_GPUS
from . import strict_row
from .lever_rows import EngagedRow

# ---------------------------------------------------------------- the bounds a reader computes with

Change: TypeAlias = Annotated[float, Ge(-1.0)]  # exp(b) − 1, a ratio − 1: the run's (or a work's) change
Count: TypeAlias = Annotated[int, Ge(0)]
Share: TypeAlias = Annotated[float, Ge(0.0), Le(1.0)]
Speed: TypeAlias = Annotated[float, Gt(0.0), Predicate(math.isfinite)]  # a sentinel's tokens/s
NonNegative: TypeAlias = Annotated[float, Ge(0.0), Predicate(math.isfinite)]
Finite: TypeAlias = Annotated[float, Predicate(math.isfinite)]
Gpus: TypeAlias = Annotated[float, Gt(0.0), Le(float(MAX_GPUS))]
GpuHourUsd: TypeAlias = Annotated[float, Ge(0.0), Le(MAX_GPU_HOUR_USD)]
Order: TypeAlias = Literal["interleaved", "blocked"]


# ---------------------------------------------------------------- drift


@strict_row
class TrendRow(TypedDict):
    """A log-speed series' trend over the run (:meth:`...analysis.experiment.drift.Trend.as_dict`): ``change``
    = exp(b) − 1 (None with fewer than 2 points), [``low``, ``high``] its interval (None with fewer than 3),
    ``significant``: the interval excludes 0."""

    points: Count
    change: Change | None
    low: Change | None
    high: Change | None
    significant: bool


@strict_row
class WarmupRow(TypedDict):
    """An arm's last warm-up (:func:`...analysis.experiment.drift.warmup_rows`): its calls, their decode speeds
    (None: not read) and whether the last two agree within the tolerance."""

    calls: Annotated[int, Ge(1)]
    tps: list[Speed | None]
    settled: bool


@strict_row
class DriftRow(TypedDict):
    """``drift[]``: one arm's own trends over its sentinels (:func:`...analysis.experiment.drift.drift`)."""

    arm: str
    sentinels: Count
    decode: TrendRow
    prefill: TrendRow
    drifted: bool
    unknown: bool
    tolerance: NonNegative
    start_tps: Speed | None
    end_tps: Speed | None
    change: Change | None
    warmup: WarmupRow | None


@strict_row
class PairDriftRow(TypedDict):
    """``drift_pairs[]``: drift as it bears on one comparison (:meth:`...analysis.experiment.drift.PairDrift.as_dict`):
    the differential trends (interleaved order; in blocked order none, 0 points) and whether drift refuses it."""

    arm: str
    vs: str
    order: Order
    points: Count
    decode: TrendRow
    prefill: TrendRow
    refuses: bool
    reason: str | None
    undetermined: bool


@strict_row
class CommonDrift(TypedDict):
    """The trend of the arms' mean log speed (:func:`...analysis.experiment.drift.common_drift`): None with
    fewer than 2 arms or no place every arm ran a sentinel; ``text``: its words where detected."""

    decode: TrendRow | None
    prefill: TrendRow | None
    text: str | None
    detected: bool


@strict_row
class DriftCommon(CommonDrift):
    """``drift_common``: the common trend, and whether the turns' times were put on the speed at the run's
    start by it (:func:`...analysis.experiment.drift.adjusted_turn_s`)."""

    adjusted: bool


# ---------------------------------------------------------------- equal work


@strict_row
class IdentityFigures(TypedDict):
    """The calls of a comparison's two arms compared (:meth:`...analysis.experiment.equal_work.Identity.as_dict`)."""

    calls: Count
    identical: Count
    identical_share: Share | None
    divergence_chars_median: NonNegative | None


@strict_row
class EqualWorkFigure(TypedDict):
    """A multiplier's figure at equal work (:func:`...analysis.experiment.equal_work.figure`): a multiplier row's
    ``equal_work``, and an ``equal_work[]`` row's ``total``."""

    value: NonNegative | None
    citable: bool
    reason: str | None
    corrected: str
    correction_share: NonNegative | None
    token_change: Change | None


@strict_row
class EqualWorkRow(TypedDict):
    """``equal_work[]``: one comparison's identity figures (:class:`IdentityFigures`), its correction to the
    reference's work and, where its total is refused for volume, the total at equal work
    (:func:`...analysis.experiment.equal_work.equal_work_rows`)."""

    arm: str
    vs: str
    calls: Count
    identical: Count
    identical_share: Share | None
    divergence_chars_median: NonNegative | None
    turns_corrected: Count
    correction_share: NonNegative | None
    token_change: Change | None
    model_problem: str | None
    total: EqualWorkFigure | None


# ---------------------------------------------------------------- cost


@strict_row
class TurnCost(TypedDict):
    """What one turn costs (:func:`...analysis.experiment.cost.turn_cost`)."""

    turn_s: NonNegative
    gpus: Gpus
    gpu_hour_usd: GpuHourUsd | None
    usd_per_turn: NonNegative | None
    gpu_hours_per_1000_turns: NonNegative
    usd_per_1000_turns: NonNegative | None


@strict_row
class CostRow(TypedDict):
    """``cost[]`` (and a projection's costs): one arm's turn cost, the GPU-hours per 1000 turns it returns
    against the baseline (None without the baseline's row) and whether it may be cited (None: no comparison to
    judge it by) (:func:`...analysis.experiment.cost.costs`)."""

    arm: str
    turn_s: NonNegative
    gpus: Gpus
    gpu_hour_usd: GpuHourUsd | None
    usd_per_turn: NonNegative | None
    gpu_hours_per_1000_turns: NonNegative
    usd_per_1000_turns: NonNegative | None
    gpu_hours_returned_per_1000_turns: Finite | None
    citable: bool | None
    reason: str | None


#: Per arm, whether its cost row may be cited and why not (:func:`...analysis.sections.cells.cost_citability`).
Citability: TypeAlias = dict[str, tuple[bool, Union[str, None]]]


# ---------------------------------------------------------------- the sections


@strict_row
class CheckSections(TypedDict):
    """The summary's sections on engagement, drift, equal work and cost."""

    engaged: list[EngagedRow]
    cost: list[CostRow]
    drift: list[DriftRow]
    drift_pairs: list[PairDriftRow]
    drift_common: DriftCommon
    equal_work: list[EqualWorkRow]
