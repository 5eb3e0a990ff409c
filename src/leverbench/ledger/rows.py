"""The ledger's records as the reader hands them to analysis: one :class:`TypedDict` per kind.

A record is a plain dict (parsed JSON, validated by :mod:`.schema`); these types say which keys it may hold
and of what type, for whoever reads it (analysis, the runner's resume, the reports).  They describe, they do
not check: the checks are :mod:`.schema`'s pydantic models, and the fields are the writer's dataclasses'
(:class:`.records.CallRecord`, :class:`.records.TurnRecord`).  ``tests/test_ledger_rows.py`` holds the two
together: :class:`CallFields`' keys are ``CallRecord``'s fields (less ``extra``), :class:`TurnRow`'s are
``TurnRecord``'s, every key of ``extra`` the schema types (``schema.CALL_EXTRAS``) is a key of
:class:`CallRow`, and every field a schema model names is a key of its row.

Every key is optional (``total=False``) but those every record of the kind holds (``kind``; ``arm`` where the
schema requires it): a record of an older writer, or of a kind's variant (a warm-up, a probe), lacks some.
Keys no row names may be present (the schema keeps them): read them with ``.get``.

This module imports nothing but typing (no pydantic): the CLI's ``--help`` must stay light.  It has no ``from
__future__ import annotations``: a TypedDict knows its ``Required`` keys at runtime only from evaluated
annotations (``__required_keys__``, which pydantic and the tests read).
"""


from typing import Union

from typing_extensions import Literal, Required, TypeAlias, TypedDict

from ..json_types import JSONObject, JSONValue

# re-exported (``X as X``): every record's row is found here, the engines' and GPUs' with the rest
from .engine_rows import EnginesRow as EnginesRow
from .engine_rows import EngineStartRow as EngineStartRow
from .engine_rows import EngineStopRow as EngineStopRow
from .engine_rows import EngineWarmedRow as EngineWarmedRow
from .engine_rows import GpuFactsRow as GpuFactsRow
from .engine_rows import GpuSamplesRow as GpuSamplesRow

#: A server's number as the ledger stores it: finite, or "NaN", "+Inf", "-Inf" (``records.json_number``).
Sample: TypeAlias = Union[float, str]
#: A load stage's execution (``load_run``): the stage's run id, an int in older ledgers.
LoadRun: TypeAlias = Union[str, int]

#: A failed call's or turn's ``error`` (``records.CallError.to_dict``).
ErrorRow = TypedDict("ErrorRow", {"class": str, "message": str})


class TimingsRow(TypedDict, total=False):
    """llama.cpp's ``timings`` as sent (``records.CALL_TIMINGS``; it may add other keys)."""

    prompt_n: Sample
    prompt_ms: Sample
    predicted_n: Sample
    predicted_ms: Sample
    cache_n: Sample
    draft_n: Sample
    draft_n_accepted: Sample


class ToolCallRow(TypedDict):
    """One tool call as streamed (``runner.sse``): its id (None when the server sent none), name, arguments."""

    id: str | None
    name: str
    arguments: str


class CallFields(TypedDict, total=False):
    """The fields of :class:`.records.CallRecord` as written (its docstring says what each holds)."""

    kind: Required[str]
    arm: Required[str]
    case: str
    repeat: int
    step: int
    turn_id: str
    t_send: float
    connect_s: float | None
    stale_connection: bool
    send_s: float
    ttft_s: float | None
    t_first_answer_s: float | None
    latency_s: float | None
    chunk_t: list[float]
    chunk_chars: list[int]
    status: int | None
    error: ErrorRow | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    reasoning_tokens: int | None
    token_source: str
    content_chars: int
    reasoning_chars: int
    reasoning_chunks: int
    answer_chunks: int
    finish_reason: str | None
    empty_answer: bool
    tool_calls: list[ToolCallRow] | None
    timings: TimingsRow | None
    output_sha256: str
    output_text: str
    reasoning_text: str
    chunk_text: list[str]
    usage_missing: bool
    harness_s: float
    # the JSON body sent, less messages and tools (the experiment's request fields: any JSON); without store_text,
    # a field other than sampling and the arm's own as its hash, "sha256:..." (runner.send.ledger_request)
    request: JSONObject
    input_sha256: str
    input_chars: int
    tools_sent: int
    tools_reached: Literal["yes", "no", "not known"]
    tools_check: str
    attempt: int
    input_messages: list[JSONObject]  # the chat messages sent (store_text)
    rejected_fields: list[str]
    length_verified: bool
    retried: bool


class TurnCallExtras(TypedDict, total=False):
    """The keys of ``extra`` a turn's call adds: its scripted step; a recorded turn's call
    (``runner.recorded_turn``) also the replay mode, the recorded call it stands for, the recording's prompt
    tokens for it, whether its messages are that call's, the matches the recording masked, and (a live replay)
    where it departed from the recording."""

    scripted_step: int | None
    replay: str  # "recorded" or "live"
    recorded_step: int
    recorded_prompt_tokens: int | None
    as_recorded: bool
    recorded_redactions: int
    departed: str


class ProbeExtras(TypedDict, total=False):
    """The keys of ``extra`` a probe, a sentinel and a warm-up add."""

    probe_tokens: int | None  # the forced output length
    probe_depth: int | None
    position: str | None
    length_method: str | None


class TraceImportRow(TypedDict):
    """A trace stage's ``trace_import`` (on its first call, ``runner.trace_plan.plan_trace``): the rows used
    and skipped (reason → count), and how many calls the replay holds."""

    path: str
    fmt: str
    rows_used: int
    rows_skipped: dict[str, int]
    left_out: dict[str, int]  # reason → calls left out of the replay
    replayed: int
    sessions: int
    notes: list[str]


class TokenCheckRow(TypedDict, total=False):
    """A trace stage's ``token_check`` (``runner.load``): words per token by /tokenize, the first prompts'
    lengths checked (their targets and the counts measured); ``source`` None and a ``note`` without one."""

    source: Required[str | None]
    note: str
    tokens_per_word: float
    calibrated: bool
    samples: int
    targets: list[int]
    measured: list[int]
    rel_error_mean: float | None
    rel_error_max: float | None


class LoadExtras(TypedDict, total=False):
    """The keys of ``extra`` a load stage's call adds (``config.stages.StagePlan.params`` and ``runner.load``)."""

    stage: str | None
    mode: str
    sweep: str
    concurrency: int
    ramp_s: float
    rate: float
    arrival: str
    burstiness: float
    prefix_sharing: float
    speed: float
    slo_ttft_s: float
    slo_tpot_s: float
    slo_e2e_s: float
    load_run: LoadRun | None
    scheduled_t: float | None
    loop_lag_s: float | None
    slot_wait_s: float
    warmup: bool
    session: str
    target_input_tokens: int | None
    target_output_tokens: int | None
    trace_import: TraceImportRow
    token_check: TokenCheckRow
    workers: int | None
    worker: int | None
    clock_offset_s: float  # added by the reader to a worker's record (its shard's clock record)
    clock_uncertainty_s: float | None


class CallExtras(TurnCallExtras, ProbeExtras, LoadExtras, total=False):
    """A call record's ``extra`` (:attr:`.records.CallRecord.extra`): the keys its kind adds."""


class CallRow(CallFields, CallExtras, total=False):
    """A ``call``, ``probe``, ``sentinel``, ``warmup`` or ``load`` record: a call's fields and its kind's
    ``extra`` keys."""


class TurnCacheRow(TypedDict, total=False):
    """How a turn's arm was brought to the declared cache state before it (a ``turn`` record's ``cache``;
    :mod:`leverbench.runner.cache_state`)."""

    state: Required[str]  # the declared state: "cold", "shared" or "keep"
    method: Required[str]  # "reset", "salt", "restart", "restart+salt", "none" or "keep"
    salt: str | None  # the salt put before the turn's first prompt (the same on every arm of a round's turn)
    reset_s: float | None  # seconds the reset (or restart) took, before the turn began
    warmed_tokens: int | None  # "shared": the prompt tokens of the call that warmed the shared prefix
    error: str | None  # a reset that failed (the turn ran all the same; a cache_reset record says so too)
    attempt: int | None  # a failed turn run again (resume): a number drawn for that session, in its salt


class CacheResetRow(TypedDict, total=False):
    """A ``cache_reset`` record: how the run brings one arm's caches to the declared state before every turn, and
    what the check made once before the turns found (:mod:`leverbench.runner.cache_state`)."""

    kind: Required[Literal["cache_reset"]]
    arm: Required[str]
    case: str  # a turn's failure record only (with repeat and error): its reset or warm call failed
    repeat: int
    error: str | None
    state: Required[str]  # "cold", "shared" or "keep"
    method: Required[str]  # "reset", "salt", "restart", "restart+salt", "none" or "keep"
    recorded_method: str  # a recorded turn's (never salted): "reset", "restart", "none" or "keep"
    endpoint: str | None  # the reset endpoint used ("POST /reset_prefix_cache", ...)
    why: str  # why this method, in words
    check: str | None  # "took", "did not take", "unverified", "not reported", "failed"; None: not checked
    cached_before: int | None  # the check's prompt cached on its second send before the reset
    cached_after: int | None  # ... and after it
    check_tokens: int | None  # the check prompt's tokens


class TurnRow(TypedDict, total=False):
    """A ``turn`` record: the fields of :class:`.records.TurnRecord`."""

    kind: Required[str]
    arm: Required[str]
    case: str
    repeat: int
    turn_id: str | None
    t_start: float
    turn_s: float
    model_s: float
    tool_s: float
    calls: int
    scripted_steps: int
    failed_calls: int
    step_limit: bool
    empty_answers: int
    retried_s: float
    output_tokens: int | None
    prompt_tokens: int | None
    reasoning_tokens: int | None
    error: ErrorRow | None
    cache: TurnCacheRow  # ledger v5: how the arm's caches were brought to the declared state before the turn
    in_flight: int  # ledger v6, with in_flight > 1: requests in flight on the arm while the turn ran
    companion_calls: int
    companion_failed: int


class MetricsRow(TypedDict, total=False):
    """A ``metrics`` record: a Prometheus scrape of an arm's endpoint, before or after (a stage)."""

    kind: Required[Literal["metrics"]]
    arm: Required[str]
    when: Required[str]
    t: float | None
    samples: Required[dict[str, Sample]]  # sample name (with its labels) → value


class LostWorkerRow(TypedDict):
    """A worker that died during a stage (``stage_end``'s ``lost_workers``)."""

    worker: int
    error: str
    scheduled: int | None  # its share's calls; None where the server's pace decides
    recorded: int
    never_sent: int | None


class StageEndRow(TypedDict, total=False):
    """A ``stage_end`` record: a load stage finished on an arm."""

    kind: Required[Literal["stage_end"]]
    arm: Required[str]
    stage: str | None
    load_run: LoadRun | None
    calls: int | None
    stopped: bool
    workers: int | None
    lost_workers: list[LostWorkerRow] | None


class ClockRow(TypedDict, total=False):
    """A ``clock`` record: a worker's clock offset to the coordinator's, before a stage."""

    kind: Required[Literal["clock"]]
    stage: str
    arm: str | None
    load_run: LoadRun
    worker: int
    host: str
    pid: int
    t: float | None
    offset_s: float | None
    uncertainty_s: float | None
    rtt_s: float
    samples: int
    nonce: str


class ShardHeaderRow(TypedDict, total=False):
    """A ``shard`` header: the first line of a worker's shard."""

    kind: Required[Literal["shard"]]
    schema: Required[str]
    run_id: Required[str]
    worker: Required[int]
    tool_version: str
    host: str
    pid: int
    started_at: str


class ResumeRow(TypedDict, total=False):
    """A ``resume`` record: a resumed run's start."""

    kind: Required[Literal["resume"]]
    at: str
    tool_version: str
    completed_units: int
    failed_units_rerun: int
    repeats: int | None


class HostRow(TypedDict, total=False):
    """The header's ``host`` (``runner.discover.host_info``; ``gpu``: ``runner.telemetry``)."""

    hostname: str
    os: str
    cpu: str
    cores: int | None
    python: str
    gpu: GpuFactsRow


class ConfigArmRow(TypedDict, total=False):
    """An arm of the header's ``config`` (the experiment file's arm, as loaded)."""

    name: Required[str]
    conditions: JSONObject | None  # declared: free-form (gpu_hour_usd, gpus: numbers)
    request: JSONObject | None  # JSON fields merged into every request body (the user's)


class ConfigCaseRow(TypedDict, total=False):
    """A case of the header's ``config``."""

    name: Required[str]
    variant_of: str | None
    temperature: float
    recorded_from: str | None  # a recorded turn's case: the case of recorded turns it came from
    recorded_turn: str | None
    recorded_skipped: str | None  # what the import of its request log left out, in words
    replay: str


class ConfigExperimentRow(TypedDict, total=False):
    """The header's ``config.experiment``."""

    name: Required[str]
    baseline: Required[str]
    repeats: int | None
    order: str | None
    volume_tolerance_cell: float | None
    volume_tolerance_total: float | None
    drift_tolerance: float | None
    engaged_acceptance_min: float | None
    retries: int | None
    store_text: bool | None
    adaptive: JSONObject | None
    cache_between_turns: str | None  # left out: a run before ledger v5, which declared no state
    cache_reset: str | None
    in_flight: int | None  # left out: a run before ledger v6 (each turn alone)


class ConfigProbesRow(TypedDict, total=False):
    """The header's ``config.probes``."""

    output_tokens: list[int] | None
    repeats: int | None
    case: str | None
    tolerance: float | None


class RunConfigRow(TypedDict, total=False):
    """The header's ``config``: the validated experiment, as JSON (the loader's model says the rest)."""

    experiment: Required[ConfigExperimentRow]
    arms: Required[list[ConfigArmRow]]
    cases: list[ConfigCaseRow]
    probes: ConfigProbesRow | None
    load: JSONValue
    traces: JSONValue


class HeaderArmRow(TypedDict, total=False):
    """An arm of the header's ``arms``: its role, declared conditions, what discovery found, where it ran."""

    role: str | None
    conditions: JSONObject  # declared (free-form); gpu_hour_usd and gpus numbers
    discovered: JSONObject | None  # an engine's answers (/props, /v1/models, its flags): its own JSON
    endpoint: str | None
    model: str | None


class RunHeaderRow(TypedDict, total=False):
    """The ``run`` header, a ledger's first line."""

    kind: Required[Literal["run"]]
    schema: Required[str]
    tool_version: str | None
    run_id: str | None
    started_at: str | None
    host: HostRow | None
    experiment_file: str | None
    config: Required[RunConfigRow]
    arms: Required[dict[str, HeaderArmRow]]
    engines: EnginesRow


#: Any record after the header, as read.
LedgerRow: TypeAlias = Union[CallRow, TurnRow, MetricsRow, StageEndRow, ClockRow, ShardHeaderRow, ResumeRow,
                             RunHeaderRow, EngineStartRow, EngineStopRow, EngineWarmedRow, GpuSamplesRow,
                             CacheResetRow]
#: The header a ledger (or a shard) opens with.
HeaderRow: TypeAlias = Union[RunHeaderRow, ShardHeaderRow]
