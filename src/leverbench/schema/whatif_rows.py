"""What ``leverbench whatif`` writes (``whatif.json``): a trace served on each calibrated arm
(:mod:`leverbench.analysis.whatif.forecast`), and, after ``whatif --verify``, the forecast beside what a replay
measured (:mod:`leverbench.analysis.whatif.verify`).

Types for the code that builds and formats them; the file is not validated on reading (no reader reads it
back but the track record, which takes only ``arms[].error``, ``ranking_matches`` and ``at``).
"""

from __future__ import annotations

from typing_extensions import NotRequired, TypedDict

from ..json_types import JSONValue
from .load_lever_rows import OperatingPoint, UnderLoad
from .load_rows import Distribution
from .rate_rows import BatchSlowdown, DecodeFit, PrefillFit, RateModelRow

# ---------------------------------------------------------------- an arm served


class ServedRateModel(RateModelRow):
    """The rate model a what-if serves an arm with (:class:`...whatif.forecast.ArmSpec`): the summary's
    ``rate_models[]`` row, or the flat model of its ``rates[]`` row, with where it came from
    (:func:`...whatif.arms.arm_specs`; written as :class:`RateModelUsed`'s ``source``)."""

    source: NotRequired[str]


class RateModelUsed(TypedDict):
    """The rate model an arm was served with, and where it came from."""

    prefill: PrefillFit | None
    decode: DecodeFit | None
    batch: BatchSlowdown | None
    source: str | None


class CacheFigures(TypedDict):
    """A finite cache's figures beside an unbounded one's (:func:`...whatif.forecast.cache_figures`)."""

    capacity_tokens: float | None
    block_tokens: int
    source: str
    rule: str
    rule_text: str
    hit_tokens: float
    input_tokens: float
    hit_share: float | None
    unbounded_hit_share: float | None
    evicted_tokens: float


class OrderFigures(TypedDict):
    """The figures of an arm's row that the order of simultaneous arrivals changes (``orders.ORDER_FIGURES``)."""

    ttft_p50_s: float | None
    ttft_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p99_s: float | None
    output_tps: float | None
    busy_s: float | None
    makespan_s: float | None
    gpu_hours_per_1000_calls: float | None
    usd_per_1000_calls: float | None


class OrderRanges(TypedDict, total=False):
    """Per figure of :class:`OrderFigures`, its [lowest, highest]: only the figures that have one."""

    ttft_p50_s: list[float]
    ttft_p99_s: list[float]
    e2e_p50_s: list[float]
    e2e_p99_s: list[float]
    output_tps: list[float]
    busy_s: list[float]
    makespan_s: list[float]
    gpu_hours_per_1000_calls: list[float]
    usd_per_1000_calls: list[float]


class Orders(OrderRanges):
    """An arm's row averaged over several orders of simultaneous arrivals (:func:`...whatif.orders.mean_row`):
    how many, the tied calls and each figure's range."""

    orders: int
    tied_calls: int


#: ``assumptions``: the arm served one at a time and on its slots in parallel (:func:`...whatif.slots.assumptions`);
#: the functional form because a key holds a space.
Assumptions = TypedDict("Assumptions", {"slots": int, "figures": str, "one_at_a_time": OrderFigures,
                                        "parallel": OrderFigures, "range": OrderRanges})


class ForecastArm(OrderFigures):
    """``arms[]``: one arm's forecast (:func:`...whatif.forecast.arm_row`, averaged by ``mean_row``)."""

    arm: str
    calls: int
    ttft: Distribution | None
    e2e: Distribution | None
    gpus: float
    gpu_hour_usd: float | None
    slots: int
    prefix_cache: bool
    knobs: dict[str, JSONValue]
    rate_model: RateModelUsed
    notes: list[str]
    extrapolation: str | None
    operating_point: NotRequired[OperatingPoint]
    cache: NotRequired[CacheFigures]
    orders: NotRequired[Orders | None]
    assumptions: NotRequired[Assumptions]
    # after ``--verify`` (:func:`...whatif.verify.compare`): what was measured beside the forecast
    measured: NotRequired[MeasuredArm | None]
    error: NotRequired[dict[str, float | None] | None]
    in_order_range: NotRequired[dict[str, bool] | None]
    assumption_check: NotRequired[AssumptionCheck | None]


class Ranked(TypedDict):
    """What :func:`...whatif.forecast.ranking` reads of a row (a forecast arm's, or a measured one's)."""

    arm: str
    gpu_hours_per_1000_calls: float | None
    e2e_p50_s: float | None


class RankRow(TypedDict):
    """``ranking[]``: the arms by GPU-hours per 1,000 calls (:func:`...whatif.forecast.ranking`)."""

    arm: str
    levers: list[str]
    gpu_hours_per_1000_calls: float | None
    e2e_p50_s: float | None
    multiplier: float | None


class ForecastCache(TypedDict):
    """``cache``: the first arm with a prefix cache's figures (and its name), else the unbounded cache's."""

    arm: str | None
    capacity_tokens: float | None
    hit_share: float | None
    unbounded_hit_share: float | None
    upper_bound_hit_share: float | None
    trace_cached_share: float | None
    note: NotRequired[str]
    block_tokens: NotRequired[int]
    source: NotRequired[str]
    rule: NotRequired[str]
    rule_text: NotRequired[str]
    hit_tokens: NotRequired[float]
    input_tokens: NotRequired[float]
    evicted_tokens: NotRequired[float]


class CacheSaving(TypedDict):
    """``cache_already_on``: what the trace's cached tokens, served by a cache already on, saved."""

    calls: int
    cached_tokens: int
    cached_share: float
    saved_prefill_s: float


class PlanOptions(TypedDict, total=False):
    """``plan``: how the trace's calls were planned (:func:`...whatif.plan.plan_calls`'s options)."""

    speed: float
    scale_input: float
    scale_output: float
    requests: int | None
    max_input_tokens: int | None
    max_tokens: int | None
    block_tokens: int
    template_tokens: int


class CachePass(TypedDict):
    """A finite cache run over the planned calls without serving them (:func:`...whatif.forecast.cache_pass`)."""

    hit_tokens: float
    input_tokens: float
    hit_share: float | None
    unbounded_hit_share: float | None
    capacity_tokens: float | None
    block_tokens: int
    evicted_tokens: float


# ---------------------------------------------------------------- verified against a replay


class MeasuredArm(TypedDict):
    """One arm's figures as a replay of the trace measured them (:func:`...whatif.verify.measured_row`)."""

    calls: int
    failed: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p99_s: float | None
    output_tps: float | None
    busy_s: float
    gpu_hours_per_1000_calls: float | None
    prompt_tokens: float
    cached_share: float | None
    template_tokens: float | None
    service_model_s: NotRequired[float | None]
    service_s: NotRequired[float | None]


class FigureCheck(TypedDict):
    """Where a measured figure lies between the two assumptions (:func:`...whatif.slots.check`)."""

    measured: float
    one_at_a_time: float
    parallel: float
    nearer: str
    between: bool


class AssumptionCheck(TypedDict):
    """``assumption_check``: per figure, where the measured one lies; whether one at a time was wrong."""

    figures: dict[str, FigureCheck]
    wrong: bool
    text: str | None


class WhatifInput(TypedDict):
    """``input``: the traffic file the calls came from (``pipeline.whatif_files.whatif_file``)."""

    path: str
    format: str
    used: int
    skipped: dict[str, int]
    notes: list[str]
    cached_served: bool


class WhatifRun(TypedDict):
    """``run``: the run whose rates served the calls."""

    path: str
    name: str | None
    baseline: str | None


class Forecast(TypedDict):
    """``whatif.json``: the forecast (:func:`...whatif.forecast.forecast`), with what ``whatif_file`` adds
    (``input``, ``run``, ``track_record``); after ``--verify`` the measured ranking beside the forecast one."""

    arms: list[ForecastArm]
    ranking: list[RankRow]
    reference: str
    cache: ForecastCache
    cache_already_on: CacheSaving | None
    calls: int
    sessions: int
    left_out: dict[str, int]
    plan: PlanOptions
    notes: list[str]
    input: NotRequired[WhatifInput]
    run: NotRequired[WhatifRun]
    track_record: NotRequired[TrackRecord | None]
    ranking_measured: NotRequired[list[RankRow]]
    ranking_matches: NotRequired[bool]
    verify_dir: NotRequired[str]
    operating_point: NotRequired[OperatingPoint | None]
    under_load: NotRequired[list[UnderLoad]]


class ErrorTrack(TypedDict):
    """One figure's errors over earlier verifications, in order, and the largest in absolute value."""

    values: list[float]
    max_abs: float


class TrackRecord(TypedDict):
    """Earlier verifications of a run's forecasts (:func:`...whatif.verify.track_record`)."""

    verifications: int
    ranking_matched: int
    last: str | None
    errors: dict[str, dict[str, ErrorTrack]]


class VerificationArm(TypedDict):
    """One arm of a stored verification: the compared figures, forecast and measured, and their errors."""

    arm: str
    forecast: dict[str, float | None]
    measured: dict[str, float | None]
    error: dict[str, float | None] | None
    assumption_wrong: NotRequired[bool]


class VerificationEntry(TypedDict):
    """A line of a run's ``whatif-verify.jsonl`` (``pipeline.whatif_files.store_verification``; read back as
    written, unchecked: :func:`...whatif.verify.track_record` takes what it needs with defaults)."""

    at: str
    traffic: str
    plan: PlanOptions
    verify_dir: str | None
    ranking: list[str]
    ranking_measured: list[str]
    ranking_matches: bool | None
    arms: list[VerificationArm]
