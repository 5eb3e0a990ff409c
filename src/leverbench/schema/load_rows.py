"""The load stages' sections of the summary: ``load[]`` (one row per (arm, stage)) and ``load_curves[]``
(:mod:`leverbench.analysis.load.stages`; the metrics' definitions are that module's)."""

from __future__ import annotations

from typing_extensions import NotRequired, TypedDict

from . import strict_row


@strict_row
class Distribution(TypedDict):
    """n, p50, p90, p95, p99, mean and max of a load metric (:func:`...analysis.load.stages.distribution`)."""

    n: int
    p50: float
    p90: float
    p95: float
    p99: float
    mean: float
    max: float


@strict_row
class LostWorker(TypedDict):
    """A worker that died during a stage (its ``stage_end`` record's ``lost_workers[]``)."""

    worker: int
    error: str | None
    scheduled: int | None
    recorded: int
    never_sent: int | None


@strict_row
class StageSlo(TypedDict, total=False):
    """The SLOs a stage sets (only those it sets)."""

    slo_ttft_s: float
    slo_tpot_s: float
    slo_e2e_s: float


@strict_row
class TraceImport(TypedDict):
    """What a trace stage read of its trace (its first call's ``trace_import``, ``runner.trace_plan``)."""

    path: str
    fmt: str
    rows_used: int
    rows_skipped: dict[str, int]
    left_out: dict[str, int]
    replayed: int
    sessions: int
    notes: list[str]


@strict_row
class TokenCheck(TypedDict):
    """The trace stage's prompt lengths checked with ``/tokenize`` (its first call's ``token_check``,
    ``runner.load``); without ``/tokenize``, only ``source`` None and a ``note``."""

    source: str | None
    note: NotRequired[str]
    tokens_per_word: NotRequired[float]
    calibrated: NotRequired[bool]
    samples: NotRequired[int]
    targets: NotRequired[list[int]]
    measured: NotRequired[list[int]]
    rel_error_mean: NotRequired[float | None]
    rel_error_max: NotRequired[float | None]


@strict_row
class LoadRow(TypedDict):
    """``load[]``: one (arm, stage)'s load metrics (:func:`...analysis.load.stages.stage_row`; the definitions are
    that module's)."""

    arm: str
    stage: str
    sweep: str | None
    mode: str | None
    case: str | None
    concurrency: int | None
    rate: float | None
    arrival: str | None
    burstiness: float | None
    speed: float | None
    prefix_sharing: float | None
    requests: int
    ok: int
    failed: int
    warmup_requests: int
    retried_attempts: int
    errors: dict[str, int]
    workers: int
    lost_workers: list[LostWorker]
    clock_uncertainty_s: float | None
    duration_s: float | None
    cached_tokens: int | None
    cached_share: float | None
    cached_share_source: str
    output_tokens: int
    input_tokens: int
    slo: StageSlo | None
    window_s: float | None
    window_basis: str | None
    requests_per_s: float | None
    output_tps: float | None
    total_tps: float | None
    goodput_rps: float | None
    slo_met_share: float | None
    ttft: Distribution | None
    ttft_ok: Distribution | None
    ttfat: Distribution | None
    ttfat_ok: Distribution | None
    tpot: Distribution | None
    itl: Distribution | None
    e2e: Distribution | None
    e2e_ok: Distribution | None
    queue: Distribution | None
    server_wait: Distribution | None
    queue_source: str | None
    service: Distribution | None
    queueing: bool
    server_queue_s: float | None
    server_figures: dict[str, float]
    connect: Distribution | None
    new_connections: int
    client_lag: Distribution | None
    slot_wait: Distribution | None
    loop_lag: Distribution | None
    input_token_error: float | None
    trace_import: TraceImport | None
    token_check: TokenCheck | None
    p50_s: float | None
    p99_s: float | None
    throughput_tps: float | None
    knee: bool
    warnings: list[str]


@strict_row
class CurvePoint(TypedDict):
    """One stage of a sweep's curve."""

    stage: str
    load: float | None
    throughput_tps: float | None
    requests_per_s: float | None
    p50_s: float | None
    p99_s: float | None
    knee: bool


@strict_row
class LoadCurve(TypedDict):
    """``load_curves[]``: per (arm, sweep), its stages' points in run order (:func:`...load.stages.sweep_curves`)."""

    arm: str
    sweep: str
    x: str
    points: list[CurvePoint]
