"""The summary's sections about the levers under load (issue 25): ``load_levers[]`` (each lever's controlled pair
at every load level both arms ran, the load at which its multiplier crosses 1, its capacity multiplier) and
``capacity[]`` (per arm and sweep, the highest load that meets the stage's SLOs, and the price of capacity
there); built by :mod:`leverbench.analysis.experiment.under_load` and :mod:`leverbench.analysis.experiment.capacity`,
whose docstrings hold the formulas; and what ``analyze`` and ``whatif`` say of a trace's operating point against
those levers (:mod:`leverbench.analysis.base.operating_point`; not in the summary, not validated on reading).

A multiplier here is > 1 where the lever pays: the reference's time over the arm's for a latency, the arm's rate
over the reference's for a throughput.  Loads, multipliers and prices are finite and not negative; an interval's
end is None where it is open (beyond the levels measured) or could not be taken.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from annotated_types import Ge, Le, Len, Predicate
from typing_extensions import TypeAlias, TypedDict

from ..bounds import MAX_GPU_HOUR_USD, MAX_GPUS
from . import strict_row
from .load_rows import StageSlo

NonNegative: TypeAlias = Annotated[float, Ge(0.0), Predicate(math.isfinite)]
Finite: TypeAlias = Annotated[float, Predicate(math.isfinite)]
Count: TypeAlias = Annotated[int, Ge(0)]
Share: TypeAlias = Annotated[float, Ge(0.0), Le(1.0)]
#: What a level's load is: a closed loop's concurrency, an open loop's rate, a trace's replay speed.
LoadAxis: TypeAlias = Literal["concurrency", "rate", "speed"]
#: Where a lever pays along the levels measured (:func:`...analysis.experiment.crossover.pays`).
Pays: TypeAlias = Literal["every level", "no level", "below", "above", "mixed", "no clear difference", "unknown"]
#: How a capacity was had: interpolated between two levels, at least the highest level measured (every level met
#: the SLOs), between a level that met them and the next, whose calls failed (``load`` and ``upper``), or none (the
#: lowest level missed them).
Bound: TypeAlias = Literal["interpolated", "at least", "between", "none"]


@strict_row
class PairCount(TypedDict):
    """A count of each arm of a pair (calls, failed calls): ``arm`` (with the lever) and ``vs`` (the reference)."""

    arm: Count | None
    vs: Count | None


@strict_row
class PairShare(TypedDict):
    """A share of each arm of a pair (the cached share of its prompt tokens), in [0, 1]."""

    arm: Share | None
    vs: Share | None


@strict_row
class PairFigure(TypedDict):
    """A figure of each arm of a pair that is no count or share (tokens per call, seconds of lag, a server
    counter's figure over the stage): finite."""

    arm: Finite | None
    vs: Finite | None


@strict_row
class LevelValue(TypedDict):
    """One metric's multiplier at one level, with its 95 % bootstrap interval (None: not taken); ``denominator``:
    the statistic it divides by (the arm's percentile in seconds for a latency, the reference's rate for a rate),
    so that denominator × (value − 1) is the difference of the two arms' statistics; ``clear``: the interval lies
    on one side of 1 (:func:`...analysis.experiment.crossover.sides`)."""

    stage: str
    load: NonNegative
    value: NonNegative | None
    low: NonNegative | None
    high: NonNegative | None
    denominator: NonNegative | None
    citable: bool
    clear: bool


@strict_row
class Crossover(TypedDict):
    """Where a multiplier crosses 1.0: ``load`` interpolated between the two levels around it (``between``),
    [``low``, ``high``] where its interval's bounds cross (None: beyond the levels measured on that side)."""

    load: NonNegative
    low: NonNegative | None
    high: NonNegative | None
    between: Annotated[list[NonNegative], Len(2, 2)]


@strict_row
class MetricRow(TypedDict):
    """``load_levers[].metrics[]``: one metric of a pair across its levels, and where it crosses 1."""

    metric: str
    default: bool
    levels: list[LevelValue]
    pays: Pays
    crossover: Crossover | None
    reason: str | None
    crossings: Count


@strict_row
class LoadLevel(TypedDict):
    """``load_levers[].levels[]``: one level both arms ran, and the guard's verdict on it."""

    stage: str
    load: NonNegative
    citable: bool
    reason: str | None
    reason_codes: list[str]
    calls: PairCount
    failed: PairCount
    output_tokens_per_call: PairFigure
    client_lag_p99_s: PairFigure
    lag_budget_s: PairFigure
    cached_share: PairShare
    engagement: dict[str, PairFigure]


@strict_row
class CapacityPair(TypedDict):
    """A lever's capacity multiplier at the SLOs: the arm's capacity over the reference's, [``low``, ``high``] the
    range the two capacities' bounds allow (None: open on that side).  ``bound``: "exact" (``value``), "at least"
    (``value`` = ``low``), "at most" (``value`` = ``high``), "between" (``value`` None); None, with ``reason``, where
    one arm has no capacity, neither is bounded, or the pair is not citable."""

    arm_load: NonNegative | None
    vs_load: NonNegative | None
    value: NonNegative | None
    low: NonNegative | None
    high: NonNegative | None
    bound: Literal["exact", "at least", "at most", "between"] | None
    reason: str | None


@strict_row
class LoadLeverRow(TypedDict):
    """``load_levers[]``: one lever's controlled pair on one sweep (or one stage), level by level."""

    lever: str
    arm: str
    vs: str
    sweep: str
    mode: str | None
    x: LoadAxis
    levels: list[LoadLevel]
    metrics: list[MetricRow]
    capacity: CapacityPair | None
    refused: str | None


@strict_row
class CapacityLevel(TypedDict):
    """One level of a capacity: the worst of its SLO ratios (percentile / SLO; None: calls failed beyond what
    the percentile allows) and whether it met every SLO."""

    stage: str
    load: NonNegative
    worst: NonNegative | None
    worst_slo: str | None
    meets: bool
    on_schedule: bool


@strict_row
class CapacityRow(TypedDict):
    """``capacity[]``: per arm and sweep, the highest load that meets the stage's SLOs (``load``; below ``upper``
    where that level's calls failed) and its price there."""

    arm: str
    sweep: str
    x: LoadAxis
    slo: StageSlo
    percentile: Annotated[float, Ge(0.0), Le(100.0)]
    load: NonNegative | None
    upper: NonNegative | None
    bound: Bound
    reason: str | None
    output_tps: NonNegative | None
    requests_per_s: NonNegative | None
    throughput_source: Literal["calls in flight", "window"]
    gpus: Annotated[float, Ge(0.0), Le(float(MAX_GPUS))]
    gpus_source: Literal["conditions", "assumed"]
    gpu_hour_usd: Annotated[float, Ge(0.0), Le(MAX_GPU_HOUR_USD)] | None
    gpu_hours_per_1000_requests: NonNegative | None
    gpu_hours_per_million_output_tokens: NonNegative | None
    usd_per_1000_requests: NonNegative | None
    usd_per_million_output_tokens: NonNegative | None
    levels: list[CapacityLevel]


# ---------------------------------------------------------------- the operating point (issue 25 part 5)


class InFlight(TypedDict):
    """Calls in flight, time-weighted over the span (:func:`...base.operating_point.in_flight`)."""

    p50: float
    p95: float
    mean: float
    max: float
    span_s: float


class LeverSide(TypedDict):
    """On which side of a lever pair's crossover under load the traffic lies (:func:`...operating_point.sides`)."""

    lever: str
    arm: str
    vs: str
    sweep: str
    x: str
    metric: str
    at: float
    at_what: str
    multiplier: float | None
    p50: float | None
    p50_multiplier: float | None
    measured: bool
    crossover: float | None
    pays: str
    side: str
    advice: str


class OperatingPoint(TypedDict):
    """A trace's arrival rate and calls in flight, and the levers' sides there
    (:func:`...base.operating_point.operating_point`)."""

    calls: int
    arrival_rate: float | None
    in_flight: InFlight | None
    duration_source: str
    sides: list[LeverSide]


class UnderLoad(TypedDict):
    """A lever pair measured under load in the ``--rates`` run, as the recommendation names it
    (:func:`...base.operating_point.under_load`): its multipliers at the citable levels of one metric."""

    lever: str
    words: str
    queueing: bool
    arm: str
    vs: str
    sweep: str
    x: str
    metric: str
    pays: str
    crossover: Crossover | None
    levels: list[list[float]]
    unclear: list[float]


__all__ = ["Bound", "CapacityLevel", "CapacityPair", "CapacityRow", "Crossover", "InFlight", "LevelValue",
           "LeverSide", "LoadAxis", "LoadLevel", "LoadLeverRow", "MetricRow", "OperatingPoint", "PairCount",
           "PairFigure", "PairShare", "Pays", "Share", "UnderLoad"]
