"""The rate model's, load's and the server's sections of the summary: the rows :mod:`leverbench.analysis.rates`,
:mod:`leverbench.analysis.load` (their rows: :mod:`.load_rows`) and :mod:`leverbench.analysis.base.metrics` build.

Every key a row can have is named; ``NotRequired`` where a builder adds it only sometimes, ``None`` where it
writes null.  The rows a reader of ``summary.json`` computes with (``analyze --rates``, ``whatif --rates``:
:mod:`leverbench.pipeline.summary_file`) carry its bounds as ``annotated_types`` constraints, which pydantic
applies (:mod:`.check`): :class:`RateRow` (rates: ``Rate``, ``Seconds``, a ``Span``), :class:`PrefillFit`,
:class:`DecodeFit`, :class:`BatchSlowdown` and :class:`RateModelRow` (coefficients ``Seconds`` / ``PerToken``,
``acceptance`` a ``Share``, ranges ``Span``, concurrencies, slowdowns, TPOTs, ``slots``).  Two checks of that
reader are not constraints on one number and stay its own: a span that ends below its start, and a decode whose
d0 and d1 are both 0.
"""

from __future__ import annotations

import math
from typing import Annotated, Union, final

from annotated_types import Ge, Gt, Le, Len, Predicate
from typing_extensions import NotRequired, TypeAlias, TypedDict

from ..bounds import MAX_CALL_S, TPS_RANGE
from ..bounds import MAX_CONCURRENCY as MAX_SLOTS
from . import STRICT, row_config, strict_row
from .load_lever_rows import CapacityRow, LoadLeverRow
from .load_rows import LoadCurve, LoadRow

# ---------------------------------------------------------------- the bounds a reader computes with


def _measured_or_zero(x: float) -> bool:
    """A rate is 0 (not measured) or at least TPS_RANGE[0] tokens/s."""
    return not 0 < x < TPS_RANGE[0]


Seconds: TypeAlias = Annotated[float, Ge(0.0), Le(MAX_CALL_S)]  # a fixed time per call
PerToken: TypeAlias = Annotated[float, Ge(0.0), Le(1.0 / TPS_RANGE[0])]  # seconds a token (or token × context)
Rate: TypeAlias = Annotated[float, Ge(0.0), Le(TPS_RANGE[1]), Predicate(_measured_or_zero)]  # tokens/s; 0: none
Share: TypeAlias = Annotated[float, Ge(0.0), Le(1.0)]
Slowdown: TypeAlias = Annotated[float, Gt(0.0), Le(float(MAX_SLOTS))]  # per-token time under load / alone
Concurrency: TypeAlias = Annotated[float, Ge(1.0), Le(float(MAX_SLOTS))]
Tokens: TypeAlias = Annotated[float, Ge(0.0), Le(1e12)]  # a token count or a range's end
Slots: TypeAlias = Annotated[int, Ge(1), Le(MAX_SLOTS)]
DecodeRate: TypeAlias = Annotated[float, Gt(0.0), Predicate(math.isfinite)]  # tokens/s a fit evaluates to
TpotSeconds: TypeAlias = Annotated[float, Gt(0.0), Le(MAX_CALL_S)]
Span: TypeAlias = Annotated[list[Tokens], Len(2, 2)]  # [lowest, highest] tokens a fit saw

#: A token count as the ledger gave it: an integer unless it said otherwise (``regression._count``).
Count: TypeAlias = Union[Annotated[int, Ge(0)], Annotated[float, Ge(0.0), Predicate(math.isfinite)]]


# ---------------------------------------------------------------- decomposition, probes, server, time shares


class RegressionFit(TypedDict):
    """What :func:`...analysis.rates.regression.regress` returns: the fit's part of a :class:`DecompositionRow`."""

    points: int
    decode_tps: float | None
    intercept_s: float | None
    r2: float | None
    output_min: Count | None
    output_max: Count | None
    refused: str | None
    method: str
    decode_context: float | None
    prefill_tps: NotRequired[float | None]


@strict_row
class DecompositionRow(RegressionFit):
    """``decomposition[]``: one cell's latency regressed on its output tokens (:mod:`...analysis.rates.regression`):
    the fit (:class:`RegressionFit`) and the cell's own keys."""

    arm: str
    case: str
    uncached_input_range: list[Count] | None
    mixed_prefill: bool
    x: list[Count]
    y: list[float]
    x_sampled: NotRequired[bool]


class Scatter(TypedDict):
    """A cell's points to plot (:func:`...analysis.rates.regression.scatter`)."""

    x: list[Count]
    y: list[float]
    x_sampled: NotRequired[bool]


class ProbeMeasure(TypedDict):
    """The two-point measurement of one probe (:func:`...analysis.rates.probes.measure`)."""

    t1_s: float
    t2_s: float
    c1: float
    c2: float
    prefill_s: float | None
    decode_tps: float | None
    input_tokens: float | None
    cached_tokens: float | None
    context_tokens: float | None
    method: str
    refused: NotRequired[str]


class ProbeMeasured(TypedDict):
    """A probe as measured, before its check (:func:`...analysis.rates.probes.probes`): :class:`ProbeRow`'s first
    keys, in order."""

    arm: str
    case: str
    depth: int | None
    n1: int
    n2: int
    repeats: int
    prefill_s: float | None
    decode_tps: float | None
    input_tokens: float | None
    cached_tokens: float | None
    context_tokens: float | None
    natural: bool
    forced_on_drafter: bool
    # the measurement, where both lengths have calls that count
    t1_s: NotRequired[float]
    t2_s: NotRequired[float]
    c1: NotRequired[float]
    c2: NotRequired[float]
    method: NotRequired[str]
    refused: NotRequired[str]
    same_calls_server_tps: NotRequired[float | None]
    acceptance: NotRequired[float | None]


class ProbeCheck(TypedDict):
    """A probe's check (:func:`...analysis.rates.probes.check`): :class:`ProbeRow`'s keys after the measurement's,
    in order."""

    regression_decode_tps: float | None
    regression_context: float | None
    regression_extrapolated: bool | None
    regression_source: str | None
    server_decode_tps: float | None
    server_extrapolated: NotRequired[bool]
    views: list[str]
    agreement: float | None
    agrees: bool | None
    model_prefill_s: NotRequired[float]


@strict_row
class ProbeRow(ProbeMeasured, ProbeCheck):
    """``probes[]``: one fixed-length probe, measured and checked (:mod:`...analysis.rates.probes`)."""

    check_note: NotRequired[str]
    prefill_speedup_vs_baseline: float | None


@strict_row
class ServerRow(TypedDict):
    """``server[]``: one cell's client and server accounts of prefill and decode (:mod:`...analysis.rates.server`)."""

    arm: str
    case: str
    turns: int
    client_prefill_s: float
    client_decode_s: float
    server_prefill_s: float | None
    server_decode_s: float | None
    server_decode_tps: float | None
    server_prefill_tps: float | None
    server_cache_n: int | None
    draft_n: int | None
    draft_accepted: int | None
    prefill_disagrees: bool | None
    decode_disagrees: bool | None


@strict_row
class TimeShareRow(TypedDict):
    """``time_shares[]``: where one cell's turn time goes (:func:`...analysis.rates.phases.cell_shares`)."""

    arm: str
    case: str
    turn_s: float
    prefill_s: float
    decode_s: float
    other_s: float
    prefill_share: float | None
    decode_share: float | None
    other_share: float | None
    source: str


# ---------------------------------------------------------------- the projection


@strict_row
class FlatPrefillFit(TypedDict):
    """prefill_s = a + b·n over an arm's (uncached tokens, seconds) points (:func:`...rates.phases.prefill_model`)."""

    a: float
    b: float
    r2: float | None
    min_input: float
    max_input: float
    n: int


@final  # (no other key: `"refused" in arm` tells a refused arm from it)
@strict_row
class ProjectedArm(TypedDict):
    """``projection.arms[]``: the scenario on one arm (:func:`...analysis.rates.phases.project`)."""

    arm: str
    prefill_s: float | None
    decode_s: float | None
    queue_s: float
    total_s: float | None
    prefill_share: float | None
    decode_share: float | None
    prefill_tps: NotRequired[float | None]
    prefill_source: NotRequired[str | None]
    prefill_fit: NotRequired[FlatPrefillFit]
    cached_share: NotRequired[float]
    extrapolation: NotRequired[str]
    prefill_refused: NotRequired[str]
    decode_extrapolation: NotRequired[str]
    decode_tps: NotRequired[float | None]
    decode_source: NotRequired[str | None]
    decode_refused: NotRequired[str]


@strict_row
class RefusedArm(TypedDict):
    """``projection.arms[]`` for an arm neither of whose phases can be projected."""

    arm: str
    refused: str


#: ``projection.levers[]``: what one lever's controlled comparison returns on the scenario (Amdahl's); the
#: functional form because ``with`` is a keyword.
LeverReturn = TypedDict("LeverReturn", {
    "lever": str, "without": str, "with": str, "phase": str, "saved_s": float, "saved_share": Union[float, None],
    "speedup": Union[float, None], "phase_speedup": Union[float, None], "credited": bool, "citable": bool,
    "reason": Union[str, None], "measure": str})
strict_row(LeverReturn)


@strict_row
class Projection(TypedDict):
    """``projection``: a scenario (input, output tokens) projected on every arm, and the levers' returns."""

    input_tokens: int
    output_tokens: int
    arms: list[Union[ProjectedArm, RefusedArm]]
    levers: list[LeverReturn]
    recommendation: str | None


# ---------------------------------------------------------------- rates and rate models


@strict_row
class RateRow(TypedDict):
    """``rates[]``: the measured rates a projection uses, per arm (``analysis.sections.projection.rates_table``);
    bounded as the summary's reader bounds them."""

    arm: str
    decode_tps: Rate | None
    decode_source: str | None
    prefill_tps: Rate | None
    prefill_a_s: Seconds | None
    prefill_source: str | None
    prefill_input_range: Span | None
    cached_share: Share | None
    cached_share_source: str
    refused: str | None


@strict_row
class PrefillFit(TypedDict):
    """A rate model's ``prefill``: s = a + b·n + c·n·(k + n/2) (:func:`...analysis.rates.rate_fit.fit_prefill`;
    a model read from ``rates[]`` has no ``quadratic`` nor ``outliers``)."""

    a_s: Seconds
    b_s_per_token: PerToken
    c_s_per_token2: PerToken
    quadratic: NotRequired[bool]
    source: str | None
    points: int | None
    outliers: NotRequired[int]
    r2: float | None
    range_uncached: Span | None
    range_cached: Span | None


@strict_row
class DecodeFit(TypedDict):
    """A rate model's ``decode``: per-token time d0 + d1·L (:func:`...analysis.rates.rate_fit.fit_decode`)."""

    d0_s_per_token: PerToken
    d1_s_per_token_per_ctx: PerToken
    context_fitted: NotRequired[bool]
    source: str | None
    points: int | None
    outliers: NotRequired[int]
    r2: float | None
    range_context: Span | None
    acceptance: Share | None
    #: the decode rate at the two ends of ``range_context``, 1 / (d0 + d1·L) (None where that time is not positive):
    #: what the fit says over the contexts it saw (:func:`...analysis.rates.rate_model.decode_tps_at`)
    tps_over_context: NotRequired[list[DecodeRate | None]]


@strict_row
class BatchSlowdown(TypedDict):
    """A rate model's ``batch``: per-token slowdown by concurrency, relative to one request served alone
    (:func:`...analysis.rates.rate_fit.batch_slowdown`)."""

    concurrency: list[Concurrency]
    slowdown: list[Slowdown]
    tpot_s: list[TpotSeconds]
    single_stream_tpot_s: list[Seconds]
    reference_concurrency: Concurrency
    reference: str
    stage: str


class RateModelFits(TypedDict):
    """What a rate model's formulas read (:mod:`...analysis.rates.rate_model`): its fits.  A
    :class:`RateModelRow` has them, and so has the model a what-if arm was served with
    (:class:`.whatif_rows.RateModelUsed`)."""

    prefill: PrefillFit | None
    decode: DecodeFit | None
    batch: BatchSlowdown | None


@strict_row
class RateModelRow(TypedDict):
    """``rate_models[]``: one arm's rate model (:mod:`...analysis.rates.rate_model`, the contract)."""

    arm: str
    prefill: PrefillFit | None
    decode: DecodeFit | None
    batch: BatchSlowdown | None
    slots: Slots | None
    drafter: NotRequired[bool]
    prefill_refused: NotRequired[str]
    decode_refused: NotRequired[str]


# ---------------------------------------------------------------- the server's metrics


#: The config of the rows of the server's figures: strict types, and no ``extra`` setting — their other keys are
#: their ``extra_items`` (a number each), which pydantic applies in its place.
figures_row = row_config({k: v for k, v in STRICT.items() if k != "extra"})


@figures_row
class ArmMetrics(TypedDict, total=False, extra_items=float):  # type: ignore[call-arg]  # PEP 728: not in mypy yet
    """The server's own figures over a window of scrapes (:func:`...analysis.base.metrics.arm_metrics`): each
    present only where the engine's counters give it.  The engine's figures and the built-in levers' are named
    here; a lever's module may declare figures of its own (its :class:`leverbench.levers.MetricTable`), which a
    row carries as further keys, each a number (``extra_items``, PEP 728: in the JSON Schema, a number for any
    other key).  Which names a lever may take (not the engine's, not the row's own) is checked where the figures
    are built."""

    queue_s_per_request: float
    prefill_s_per_request: float
    decode_s_per_request: float
    prefill_tps: float
    decode_tps: float
    uncached_prompt_tokens_per_request: float
    prefix_cache_hit_share: float
    drafter_acceptance: float
    cached_prompt_tokens: float
    prefix_cache_hit_tokens: float
    prefix_cache_query_tokens: float
    draft_tokens: float
    accepted_tokens: float
    sglang_cache_hit_rate: float
    sglang_spec_accept_length: float


@figures_row
class ServerMetricsRow(ArmMetrics):
    """``server_metrics[]``: one arm's figures over its blocks (:func:`...analysis.base.metrics.server_metrics`);
    its own keys are required (a TypedDict's totality is per class), the figures not; any other key is a figure a
    lever's module declares (its ``MetricTable``), a number."""

    arm: str
    windows: int
    window: list[float]
    attribution: str
    mixed_with: NotRequired[list[str]]


# ---------------------------------------------------------------- the sections


@strict_row
class RateSections(TypedDict):
    """The summary's sections about rates, phases, load and the server's own account."""

    decomposition: list[DecompositionRow]
    probes: list[ProbeRow]
    server: list[ServerRow]
    time_shares: list[TimeShareRow]
    projection: Projection | None
    rates: list[RateRow]
    rate_models: list[RateModelRow]
    load: list[LoadRow]
    load_curves: list[LoadCurve]
    load_levers: list[LoadLeverRow]
    capacity: list[CapacityRow]
    server_metrics: list[ServerMetricsRow]
