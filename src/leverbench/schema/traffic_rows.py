"""What ``leverbench analyze`` writes for recorded traffic (``--json``): where its time goes and what a lever
would save (:mod:`leverbench.analysis.traffic.analyze`, with what ``pipeline.traffic_files.analyze_file`` adds).

Types for the code that builds and formats it; not validated on reading (nothing reads it back).
"""

from __future__ import annotations

from typing import Literal

from typing_extensions import NotRequired, TypeAlias, TypedDict

from .load_lever_rows import OperatingPoint, UnderLoad
from .whatif_rows import CachePass

# ---------------------------------------------------------------- the sums the analysis starts from


#: A phase of a call's time in the traffic analysis (a row's ``<phase>_s`` and ``<phase>_share``).
TrafficPhase: TypeAlias = Literal["prefill", "decode", "queue"]
PHASES: tuple[TrafficPhase, ...] = ("prefill", "decode", "queue")


class PhaseSums(TypedDict):
    """One (model, bucket) group of :func:`...traffic.sums.phase_sums`: counts and sums over its calls."""

    model: str
    bucket: str
    calls: int
    input: float
    output: float
    prefill: float
    decode: float
    queue: float
    cached: float | None
    cached_calls: int
    excess: float
    ttft_calls: int
    beyond: int


class CountDistribution(TypedDict):
    """p50, p90, p99, mean and max of a multiset of token counts (:func:`...traffic.sums.distribution_of_counts`)."""

    p50: float
    p90: float
    p99: float
    mean: float
    max: float


# ---------------------------------------------------------------- the rates


class RateFitSummary(TypedDict):
    """A fit's figures kept with the rates it gave (``Rates.fit``)."""

    model: str | None
    points: int
    r2: float | None
    prefill_r2: float | None
    intercept_s: float | None


class RatesJSON(TypedDict):
    """``rates`` per model: :class:`...traffic.rates.Rates` as JSON (``Rates.as_dict``)."""

    prefill_tps: float
    prefill_a_s: float
    decode_tps: float
    source: str
    prefill_source: str
    decode_source: str
    drafter_speedup: float | None
    drafter_source: str | None
    prefill_input_range: list[float] | None
    fit: RateFitSummary | None
    alternatives: dict[str, list[float]]
    conditions: list[str]


class HandRates(TypedDict, total=False):
    """The rates given by hand (``--prefill-tps``, ``--decode-tps``): only those given."""

    prefill_tps: float
    decode_tps: float
    prefill_a_s: float


class DecodeRegression(TypedDict):
    """One group's latency regressed on its output tokens, from its sums (:func:`...traffic.fit._decode`)."""

    decode_tps: float | None
    intercept_s: float | None
    r2: float | None
    refused: str | None
    method: str


class FitRow(DecodeRegression):
    """``fits[]``: one model's (or the pooled: ``model`` "all calls") fit of rates from the traffic's own latencies."""

    model: str
    calls: int
    points: int
    prefill_points: NotRequired[int]
    prefill_refused: NotRequired[str]
    prefill_a: NotRequired[float]
    prefill_b: NotRequired[float]
    prefill_r2: NotRequired[float]
    prefill_tps: NotRequired[float]
    prefill_a_s: NotRequired[float]


# ---------------------------------------------------------------- where the time goes, and the levers


class PhaseRow(TypedDict):
    """``overall`` (and each bucket's): the calls' seconds per phase, their shares and the dominant phase."""

    calls: int
    prefill_s: float
    decode_s: float
    queue_s: float
    total_s: float
    prefill_share: float | None
    decode_share: float | None
    queue_share: float | None
    dominant: str | None


class BucketRow(PhaseRow):
    """``buckets[]``: one input-length bucket, and the share each lever would save of its time."""

    bucket: str
    call_share: float
    levers: NotRequired[dict[str, float | None]]


class FiniteCache(CachePass):
    """A finite cache's hits over the calls (``pipeline.traffic_files.finite_cache``), with where its capacity and
    block size came from."""

    source: str | None


class FiniteCacheRow(FiniteCache):
    """The prefix cache lever's ``finite``: a finite cache's saving beside the unbounded one."""

    saved_s: float | None
    saved_share: float | None


class LeverRow(TypedDict):
    """``levers[]``: what one lever (prefix cache, drafter, answer cap) would save (:func:`...analyze._lever_row`)."""

    lever: str
    phase: str
    ceiling_share: float | None
    already_on: bool
    parameter: str | None
    estimated: bool
    saved_s: float | None
    saved_share: float | None
    range: list[float] | None
    range_source: str | None
    reason: str | None
    saved_s_per_call: NotRequired[float]
    gpu_hours_per_1000_calls: NotRequired[float]
    usd_per_1000_calls: NotRequired[float | None]
    finite: NotRequired[FiniteCacheRow]
    # a prefix cache already on: its realized saving instead
    realized_saved_s: NotRequired[float]
    realized_share: NotRequired[float | None]
    realized_gpu_hours_per_1000_calls: NotRequired[float]
    realized_usd_per_1000_calls: NotRequired[float | None]
    served_share: NotRequired[float | None]


class TrafficDistribution(TypedDict):
    """``distribution``: the calls' token counts."""

    input_tokens: CountDistribution | None
    output_tokens: CountDistribution | None
    cached_tokens: CountDistribution | None
    cached_share_of_input: float | None
    input_output_ratio: float | None


class QueueNote(TypedDict):
    """``queue``: whether queueing was measured (from TTFTs), and how."""

    measured: bool
    calls_with_ttft: int
    note: str


class TrafficCost(TypedDict):
    """``cost``: what a call costs on the rates' hardware."""

    gpus: float
    gpu_hour_usd: float | None
    seconds_per_call: float
    gpu_hours_per_1000_calls: float
    usd_per_1000_calls: float | None


class TrafficExtrapolation(TypedDict):
    """``extrapolation``: the calls whose input lies beyond the largest the prefill rate was measured on."""

    calls_beyond: int
    share_beyond: float
    largest_measured: float


class TrafficInput(TypedDict):
    """``input``: the traffic file read (``pipeline.traffic_files.analyze_file``)."""

    path: str
    format: str
    rows: int
    used: int
    skipped: dict[str, int]
    first_skipped_line: dict[str, int]  # per reason a row was skipped, the first line it was
    notes: list[str]


# ---------------------------------------------------------------- a recording's own first screen


class CallsPerTurn(TypedDict):
    """The fewest, median and most calls of a recording's turns."""

    min: int
    median: float
    max: int


class SharedPrefix(TypedDict):
    """The prefix every turn's first request shares: over how many turns, its leading messages alike, the tools
    (their count where every turn sent the same, else 0), its characters, its tokens at the recording's tokens per
    character (an estimate), and the median of the cached tokens of every turn's first call after the first one's
    (measured where the engine had a prefix cache) over how many calls."""

    turns: int
    messages: int
    tools: int
    chars: int
    tokens_estimate: float | None
    cached_median: float | None
    cached_calls: int


class EngineTime(TypedDict):
    """Where the engine's time went, over the calls with llama.cpp's timings: their count, latency, prefill,
    decode and the rest; every call's latency as the proxy saw it; the time between a turn's calls."""

    calls: int
    latency_s: float
    prefill_s: float
    decode_s: float
    other_s: float
    calls_latency_s: float
    between_calls_s: float


class RecordedTurnRow(TypedDict):
    """``per_turn[]``: one recorded turn: its calls, tool rounds, first and last prompt, the sums over its calls
    with counts (None: none has them) and its calls' seconds."""

    turn: str
    calls: int
    tool_rounds: int
    first_prompt: int | None
    last_prompt: int | None
    prompt_tokens: int | None
    cached_tokens: int | None
    output_tokens: int | None
    model_s: float


class RecordingSummary(TypedDict):
    """A recording's own first screen (:func:`...traffic.recording.recording_summary`): its turns, calls and tool
    rounds, where its token counts came from (``counted_by``: per source, its calls; ``none``: without counts), the
    token sums over the calls with counts, the prefix its turns share, the share of a later call's prompt its turn's
    previous call held, where the engine's time went, and each turn."""

    turns: int
    calls: int
    calls_per_turn: CallsPerTurn
    tool_rounds: int
    turns_with_tool_rounds: int
    max_tool_rounds: int
    counted_by: dict[str, int]
    counted_calls: int
    prompt_tokens: int
    cached_tokens: int | None
    cached_calls: int
    output_tokens: int
    tokens_per_char: float | None
    shared_prefix: SharedPrefix | None
    within_turn_share: float | None
    engine_time: EngineTime
    per_turn: list[RecordedTurnRow]


# ---------------------------------------------------------------- the result


class TrafficResult(TypedDict):
    """The traffic analysis (:func:`...traffic.analyze.analyze_traffic`), with ``input``, ``fits`` and
    ``rates_used`` (``analyze_file``)."""

    calls: int
    distribution: TrafficDistribution
    rates: dict[str, RatesJSON]
    queue: QueueNote
    overall: PhaseRow
    buckets: list[BucketRow]
    levers: list[LeverRow]
    ranking: list[str]
    cost: TrafficCost
    answer_cap: float
    answer_cap_default: bool
    cached_meaning: str | None
    cache_already_on: bool
    extrapolation: TrafficExtrapolation | None
    conditions: NotRequired[list[str]]
    recommendation: NotRequired[str]
    input: NotRequired[TrafficInput]
    fits: NotRequired[list[FitRow]]
    rates_used: NotRequired[list[str]]
    operating_point: NotRequired[OperatingPoint | None]
    under_load: NotRequired[list[UnderLoad]]
    recording: NotRequired[RecordingSummary]  # the traffic is a recording (``leverbench record``'s)
