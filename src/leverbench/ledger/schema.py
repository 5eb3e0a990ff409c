# size: one contract, the model of every record kind the reader checks (the header's, the calls' and turns' made from
# the writer's own dataclasses, each other kind's), kept together as the one place a ledger's shape is stated.
"""The ledger's schema, as the reader checks it: the header and each record validated by typed models.

- Records: the ``call`` kinds' (``records.CALL_KINDS``, ``warmup``) and ``turn``'s models are made from the
  writer's own dataclasses, :class:`~.records.CallRecord` and :class:`~.records.TurnRecord` (one definition
  of each field's type and bound, ``records.Seconds``, ``Epoch``, ``Count``), in pydantic's strict mode (a
  string is not a number, a flag not a count), with the keys of ``extra`` analysis reads (:data:`CALL_EXTRAS`).
  A field a record lacks is not checked, but ``arm`` and a call's ``t_send`` (not a warm-up's: never
  analysed), which are required; a field analysis reads as a column may be null (it reads as absent).
  Across fields: cached_tokens ≤ prompt_tokens; a call that succeeded (not a warm-up) has its latency_s.  A
  ``load`` call adds its ``stage`` (required) and the stage's parameters (:data:`LOAD_EXTRAS`: left out or of
  their type, never null).  The other kinds that analysis reads by key (``metrics``, ``stage_end`` with its
  ``lost_workers``, ``clock``, ``resume``, ...) have small models of their own; keys no model names are left as
  they are.  That a record's ``arm`` is one of the header's is checked by :func:`check_record` against the
  set of the header's arms, made once per read (a set lookup, not a model: the set is the file's).
- The header (:class:`RunHeader`, also what :class:`~.writer.LedgerWriter` checks a ``run`` record by):
  its ``config`` (the experiment's snapshot: ``experiment`` with name and baseline, ``arms`` and ``cases``
  lists of named objects) and ``arms`` (name → role, conditions, discovered), the baseline one of the arms.
  Only what analysis reads is typed (the tolerances it compares with: left out or a number, never null; the
  knobs it computes with, :class:`KnobNumbers`): the experiment file's full model (``config``) is the loader's,
  and a header holds the snapshot of whatever version wrote it.

:func:`check_record` and :func:`check_header` give the first defect as "field F: what is wrong (got V)" (None:
none), for the reader to put after the file and line.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
import types
import typing
from typing import TYPE_CHECKING, Annotated, Any, Literal, Mapping

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model, model_validator

from ..bounds import MAX_CONCURRENCY, MAX_COUNT, MAX_GPU_HOUR_USD, MAX_GPUS, MAX_TOKENS, MAX_TOLERANCE
from ..config.limits import (  # a header and a load call state what its experiment file's loader accepted
    BURSTINESS_RANGE,
    MAX_CALL_S,
    MAX_RATE,
    MAX_REPEATS,
    MAX_WORKERS,
    SPEED_RANGE,
)
from .records import CALL_KINDS, COLUMN, CallRecord, Count, Epoch, Seconds, TurnRecord

if TYPE_CHECKING:
    from .rows import RunHeaderRow

Number = Annotated[float, Field(allow_inf_nan=False)]
Sample = float | Literal["NaN", "+Inf", "-Inf"]  # a server's value, a non-finite one as records.json_number stores it
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Tolerance = Annotated[float, Field(ge=0, le=MAX_TOLERANCE, allow_inf_nan=False)]  # as the loader accepts one
Money = Annotated[float, Field(ge=0, le=MAX_GPU_HOUR_USD, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Gpus = Annotated[float, Field(gt=0, le=MAX_GPUS, allow_inf_nan=False)]
Repeats = Annotated[int, Field(ge=1, le=MAX_REPEATS)]
STRICT = ConfigDict(strict=True, extra="allow")


class _Open(BaseModel):
    model_config = STRICT


class RecordError(_Open):
    """A call's or turn's ``error`` as written (:class:`~.records.CallError`: class, message)."""

    cls: str = Field(alias="class")
    message: str | None = None


class Timings(_Open):
    """llama.cpp's ``timings`` as sent: numbers (a non-finite one as the writer stores it), keys it adds kept."""

    prompt_n: Sample | None = None
    prompt_ms: Sample | None = None
    predicted_n: Sample | None = None
    predicted_ms: Sample | None = None
    cache_n: Sample | None = None
    draft_n: Sample | None = None
    draft_n_accepted: Sample | None = None


CacheState = Literal["cold", "shared", "keep"]
CacheMethod = Literal["reset", "salt", "restart", "restart+salt", "none", "keep"]


class CacheResetModel(_Open):
    """A ``cache_reset`` record (:class:`~.rows.CacheResetRow`): an arm's plan, or (with ``error``) one turn whose
    arm could not be brought to the state."""

    arm: str
    case: str | None = None
    repeat: Count | None = None
    error: str | None = None
    state: CacheState
    method: CacheMethod
    endpoint: str | None = None
    why: str | None = None
    check: Literal["took", "did not take", "unverified", "not reported", "failed"] | None = None
    recorded_method: CacheMethod | None = None
    cached_before: Count | None = None
    cached_after: Count | None = None
    check_tokens: Count | None = None


class TurnCache(_Open):
    """A turn's ``cache`` (:class:`~.rows.TurnCacheRow`)."""

    state: CacheState
    method: CacheMethod
    salt: str | None = None
    reset_s: Seconds | None = None
    warmed_tokens: Count | None = None
    error: str | None = None
    attempt: Count | None = None


class _CallChecks(_Open):
    @model_validator(mode="after")
    def _cached_in_prompt(self) -> _CallChecks:
        cached, prompt = getattr(self, "cached_tokens", None), getattr(self, "prompt_tokens", None)
        if cached is not None and prompt is not None and cached > prompt:
            raise ValueError(f"cached_tokens: {cached} is more than prompt_tokens {prompt} "
                             "(the cached tokens are part of the prompt)")
        return self


class _AnsweredCall(_CallChecks):
    """A measured call (not a warm-up): one that succeeded (``error`` null) has its ``latency_s`` (the client
    always times a call it got an answer to; analysis fits and sums it)."""

    @model_validator(mode="after")
    def _latency_when_answered(self) -> _AnsweredCall:
        if getattr(self, "error", None) is None and getattr(self, "latency_s", None) is None:
            raise ValueError("latency_s: missing or null on a call that succeeded (error null); the client times "
                             "every call it got an answer to")
        return self


# Unchecked = what a model accepts without looking inside: any JSON value.  (Not ``json_types.JSONValue``: an
# implicit recursive alias, which pydantic cannot build a schema of; ``object`` is what pydantic takes as any.)
Unchecked = object
# The JSON form of these fields (a CallError, an engine's timings; a request body and the messages sent, which
# are the user's and the server's JSON: checked to be objects, their contents not).  Tables of types, typed Any:
# pydantic takes a type form where mypy's TypeForm cannot follow these yet (a Literal in a dict, ``t | None``).
OVERRIDES: dict[str, Any] = {
    "error": RecordError | None, "timings": Timings | None, "request": dict[str, Unchecked],
    "tool_calls": list[dict[str, Unchecked]] | None, "input_messages": list[dict[str, Unchecked]] | None,
    "cache": TurnCache | None}
# A count analysis reads as a column, as JSON holds it: an int, or a float that is a whole number (polars reads
# both alike, so a record is judged as its column is), within ``records.Count``'s bounds (pydantic's own checks,
# not a Python function per value).  A count not read as a column (chunk_chars, ...) is an int.
JSON_COUNT = Count | Annotated[float, Field(ge=0, le=MAX_COUNT, multiple_of=1)]


def _json_form(t: Any) -> Any:
    """*t* (a field's type) with every ``records.Count`` in it as :data:`JSON_COUNT`."""
    if t == Count:
        return JSON_COUNT
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is list:
        return list[_json_form(args[0])]  # type: ignore[misc]  # a list of a type made at run time, for pydantic
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (_json_form(a) for a in args))
    return t


# The keys of a call record's ``extra`` that analysis reads (see ``records``' docstring: a probe's, a load
# call's, a worker's), typed; any other is kept as it is.
CALL_EXTRAS: dict[str, Any] = {  # key → its type (a type form, for pydantic)
    "probe_tokens": Count | None, "probe_depth": Count | None, "position": str | None, "length_method": str | None,
    "scripted_step": Count | None, "stage": str | None, "load_run": str | int | None, "scheduled_t": Epoch | None,
    "loop_lag_s": Number | None, "slot_wait_s": Number | None, "target_input_tokens": Count | None, "target_output_tokens": Count | None,
    "worker": Count | None, "workers": Annotated[int, Field(ge=1, le=MAX_COUNT)] | None,
    "replay": Literal["recorded", "live"] | None, "recorded_step": Count | None,
    "recorded_prompt_tokens": Count | None, "as_recorded": bool | None, "recorded_redactions": Count | None,
    "departed": str | None,
}


def _model_of(cls: type, name: str, required: tuple[str, ...], base: type[BaseModel],
              extras: Mapping[str, Any] | None = None) -> type[BaseModel]:
    """A pydantic model of *cls*'s dataclass fields as the ledger holds them (see the module docstring), and of
    the *extras* keys its ``extra`` may hold."""
    hints = typing.get_type_hints(cls, include_extras=True)
    spec: dict[str, Any] = {k: (t, None) for k, t in (extras or {}).items()}  # name → (type, default)
    for f in dataclasses.fields(cls):
        if f.name in ("extra", "kind"):
            continue
        t = OVERRIDES.get(f.name) or (_json_form(hints[f.name]) if f.metadata.get(COLUMN) else hints[f.name])
        if f.name in required:
            spec[f.name] = (t, ...)
        else:
            spec[f.name] = (t | None if f.metadata.get(COLUMN) else t, None)
    return create_model(name, __base__=base, **spec)


CallModel = _model_of(CallRecord, "CallModel", ("arm", "t_send", "case"), _AnsweredCall, CALL_EXTRAS)
WarmupModel = _model_of(CallRecord, "WarmupModel", ("arm",), _CallChecks, CALL_EXTRAS)  # never analysed: t_send or not
TurnModel = _model_of(TurnRecord, "TurnModel", ("arm", "case"), _Open)


class MetricsModel(_Open):
    arm: str
    when: str
    t: Epoch | None = None
    samples: dict[str, Unchecked]  # numbers as the writer stores them; analysis leaves out any other (metrics.numeric)


class LostWorker(_Open):
    """A worker that died in a stage (``stage_end``'s ``lost_workers``, :class:`~.rows.LostWorkerRow`)."""

    worker: Count
    error: str | None = None
    scheduled: Count | None = None
    recorded: Count
    never_sent: Count | None = None


class StageEndModel(_Open):
    arm: str
    stage: str | None = None
    load_run: str | int | None = None
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | None = None  # the loader's bound: one shard each
    calls: Count | None = None
    lost_workers: list[LostWorker] | None = None
    stopped: bool | None = None


# -- a load call's own keys (:class:`~.rows.LoadExtras`: the stage's parameters, ``config.stages.StagePlan.params``,
# and what ``runner.load`` adds): a key is left out or holds its type, never null (analysis reads each as given);
# its ``stage`` is required.


class TraceImport(_Open):
    """A trace stage's first call's ``trace_import`` (:class:`~.rows.TraceImportRow`)."""

    path: str
    fmt: str
    rows_used: Count
    rows_skipped: dict[str, Count] = {}
    left_out: dict[str, Count] = {}
    replayed: Count
    sessions: Count | None = None
    notes: list[str] = []


class TokenCheck(_Open):
    """A trace stage's first call's ``token_check`` (:class:`~.rows.TokenCheckRow`)."""

    source: str | None
    note: str | None = None
    tokens_per_word: Positive = None  # type: ignore[assignment]  # pydantic: left out, or a number, never null
    calibrated: bool = False
    samples: Count = 0
    targets: list[Count] = []
    measured: list[Count] = []
    rel_error_mean: Number | None = None
    rel_error_max: Number | None = None


Slo = Annotated[float, Field(gt=0, le=MAX_CALL_S, allow_inf_nan=False)]  # a stage's SLO: config.limits.CallSeconds
LOAD_EXTRAS: dict[str, Any] = {  # key → its type (each optional, not null: the model's default None is no value)
    "mode": Literal["closed", "open", "trace"], "sweep": str,
    "concurrency": Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)], "ramp_s": Seconds,
    "rate": Annotated[float, Field(gt=0, le=MAX_RATE, allow_inf_nan=False)], "arrival": str,
    "burstiness": Annotated[float, Field(ge=BURSTINESS_RANGE[0], le=BURSTINESS_RANGE[1], allow_inf_nan=False)],
    "prefix_sharing": Fraction, "speed": Annotated[float, Field(ge=SPEED_RANGE[0], le=SPEED_RANGE[1], allow_inf_nan=False)],
    "slo_ttft_s": Slo, "slo_tpot_s": Slo, "slo_e2e_s": Slo, "warmup": bool, "session": str,
    "trace_import": TraceImport, "token_check": TokenCheck,
}
_LOAD_FIELDS: dict[str, Any] = {k: (t, None) for k, t in LOAD_EXTRAS.items()}  # name → (type, default)
LoadModel = create_model("LoadModel", __base__=CallModel, stage=(str, ...), **_LOAD_FIELDS)


class ClockModel(_Open):
    arm: str | None = None
    t: Epoch | None = None
    offset_s: Number | None = None
    uncertainty_s: Seconds | None = None


class ResumeModel(_Open):
    repeats: Repeats | None = None


EngineMode = Literal["together", "one at a time"]
GpuValue = Annotated[float, Field(allow_inf_nan=False)] | None  # a reading's field: a finite number, or null


class EngineStartModel(_Open):
    arm: str
    mode: EngineMode | None = None
    block: Count | None = None
    round: Count | None = None
    part: Literal["round", "closing", "run", "discovery", "restart"] | None = None
    t: Epoch | None = None
    ready_s: Seconds | None = None
    model_load_s: Seconds | None = None
    warmup_s: Seconds | None = None
    warmup_calls: Count | None = None
    settled: bool | None = None
    server_state: str | None = None
    timeout_s: Seconds | None = None
    timeout_from: str | None = None
    devices: list[str] | None = None
    pid: Count | None = None
    error: str | None = None


class EngineWarmedModel(_Open):
    arm: str
    block: Count | None = None
    warmup_s: Seconds | None = None
    warmup_calls: Count | None = None
    settled: bool | None = None


class EngineStopModel(_Open):
    arm: str
    block: Count | None = None
    t: Epoch | None = None
    stop_s: Seconds | None = None
    released: bool | None = None
    check: str | None = None
    leftover: list[Count] | None = None


class GpuSamplesModel(_Open):
    """A ``gpu`` record: its columns of one length, times epoch seconds, utilisations fractions."""

    source: Literal["nvml", "dcgm"]
    device: str
    arms: list[str] | None = None
    fields: dict[str, str] | None = None
    t: list[Epoch]
    sm: list[Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None] | None = None
    dram: list[Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None] | None = None
    mem_used_mib: list[Annotated[float, Field(ge=0, allow_inf_nan=False)] | None] | None = None
    power_w: list[Annotated[float, Field(ge=0, allow_inf_nan=False)] | None] | None = None
    sm_clock_mhz: list[Annotated[float, Field(ge=0, allow_inf_nan=False)] | None] | None = None
    energy_j: list[Annotated[float, Field(ge=0, allow_inf_nan=False)] | None] | None = None

    @model_validator(mode="after")
    def _one_length(self) -> GpuSamplesModel:
        for name in ("sm", "dram", "mem_used_mib", "power_w", "sm_clock_mhz", "energy_j"):
            col = getattr(self, name)
            if col is not None and len(col) != len(self.t):
                raise ValueError(f"{name}: {len(col)} values for {len(self.t)} times (t): a gpu record's columns "
                                 "have one length")
        return self


# -- the header


def _whole(lo: int, hi: float) -> Any:  # (pydantic's Field is typed Any)
    """The constraint of a float that holds a whole number in [lo, hi], as JSON holds one (3 or 3.0)."""
    return Field(ge=lo, le=hi, multiple_of=1, allow_inf_nan=False)


MAX_CACHE_TOKENS = 1e12  # analysis.base.bounds' (a prefix cache's capacity; a summary.json's knobs are read by it)


class KnobNumbers(_Open):
    """The knobs analysis computes with (an arm's slots, context, cache blocks: the what-if's serving), as numbers
    in the ranges a summary.json's are read in (``pipeline.summary_file``); any other knob is free-form."""

    slots: Annotated[float, _whole(1, MAX_CONCURRENCY)] | None = None
    context_length: Annotated[float, _whole(1, MAX_CACHE_TOKENS)] | None = None  # (Llama 4: 10,485,760)
    block_size: Annotated[float, _whole(1, MAX_TOKENS)] | None = None
    num_gpu_blocks: Annotated[float, _whole(0, MAX_CACHE_TOKENS)] | None = None
    kv_capacity_tokens: Annotated[float, Field(ge=0, le=MAX_CACHE_TOKENS, allow_inf_nan=False)] | None = None


class Conditions(KnobNumbers):
    """An arm's declared conditions: free-form, but for the numbers costs are priced with and the knobs'
    (:class:`KnobNumbers`)."""

    gpu_hour_usd: Money | None = None
    gpus: Gpus | None = None


class ConfigArm(_Open):
    name: str
    conditions: Conditions | None = None
    request: dict[str, Unchecked] | None = None  # JSON fields for the request body: the user's


class ConfigCase(_Open):
    name: str
    variant_of: str | None = None
    recorded_from: str | None = None
    recorded_turn: str | None = None
    recorded_skipped: str | None = None
    replay: Literal["recorded", "live"] | None = None


class Experiment(_Open):
    name: str
    baseline: str
    repeats: Repeats | None = None
    order: str | None = None
    # left out (an older run: analysis' default) or a number, never null: analysis compares with them
    volume_tolerance_cell: Tolerance = None  # type: ignore[assignment]  # pydantic: None is the unvalidated default
    volume_tolerance_total: Tolerance = None  # type: ignore[assignment]  # pydantic: None is the unvalidated default
    drift_tolerance: Tolerance = None  # type: ignore[assignment]  # pydantic: None is the unvalidated default
    engaged_acceptance_min: Fraction = None  # type: ignore[assignment]  # pydantic: None is the unvalidated default
    retries: Annotated[int, Field(ge=0, le=MAX_REPEATS)] | None = None
    store_text: bool | None = None
    adaptive: dict[str, Unchecked] | None = None  # the loader's model checked it
    cache_between_turns: CacheState | None = None  # left out: a run before ledger v5 (its state undeclared)
    cache_reset: str | None = None
    in_flight: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)] | None = None  # left out: before v6 (turns alone)


class Probes(_Open):
    output_tokens: list[Count] | None = None
    repeats: Repeats | None = None
    case: str | None = None
    tolerance: Tolerance = None  # type: ignore[assignment]  # pydantic: left out or a number, never null


class RunConfig(_Open):
    experiment: Experiment
    arms: list[ConfigArm]
    cases: list[ConfigCase] = []
    probes: Probes | None = None


class Discovered(_Open):
    knobs: KnobNumbers | None = None  # what the engine answered


class HeaderArm(_Open):
    role: str | None = None
    conditions: Conditions = Conditions()
    discovered: Discovered | None = None
    endpoint: str | None = None
    model: str | None = None


class Engines(_Open):
    mode: EngineMode
    declared: EngineMode | None = None
    reason: str | None = None
    server_state: str | None = None


class RunHeader(_Open):
    """A ledger's first line (kind ``run``; the schema's name and version are checked by :mod:`.upgrade`)."""

    kind: Literal["run"]
    schema_: str = Field(alias="schema")
    tool_version: str | None = None
    run_id: str | None = None
    started_at: str | None = None
    host: dict[str, Unchecked] | None = None  # rows.HostRow
    experiment_file: str | None = None
    config: RunConfig
    arms: dict[str, HeaderArm]
    engines: Engines | None = None

    @model_validator(mode="after")
    def _baseline_is_an_arm(self) -> RunHeader:
        names = [a.name for a in self.config.arms]
        if self.config.experiment.baseline not in names:
            raise ValueError(f"config.experiment.baseline: {self.config.experiment.baseline!r} is none of the "
                             f"arms {names}")
        return self


class ShardHeader(_Open):
    kind: Literal["shard"]
    schema_: str = Field(alias="schema")
    run_id: str
    worker: Count


MODELS: dict[str, type[BaseModel]] = {**dict.fromkeys(CALL_KINDS, CallModel), "warmup": WarmupModel, "turn": TurnModel,
                          "metrics": MetricsModel, "stage_end": StageEndModel, "clock": ClockModel,
                          "resume": ResumeModel, "run": RunHeader, "shard": ShardHeader,
                          "engine_start": EngineStartModel, "engine_stop": EngineStopModel,
                          "engine_warmed": EngineWarmedModel, "gpu": GpuSamplesModel, "cache_reset": CacheResetModel}
MODELS["load"] = LoadModel  # a call record with its stage's keys
_VALIDATORS = {kind: TypeAdapter(m) for kind, m in MODELS.items()}


_TAG = re.compile(r"^(int|float|str|bool|none|[a-z]+-[a-z]+|[a-z-]+\[.*\]|[A-Z]\w*)$")  # a union member's, not a key


def _first(exc: ValidationError) -> str:
    """The first defect pydantic found, as "field F: what is wrong (got V)": F the path of keys and indices to it
    (without pydantic's names of a union's members), a count's range said whole."""
    err = exc.errors(include_url=False)[0]
    if err["type"] == "value_error" and not err["loc"]:  # a check across fields: its message names them
        return str(err["ctx"]["error"])
    loc = [p for p in err["loc"] if isinstance(p, int) or not _TAG.match(p)]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".").replace("schema_", "schema")
    got = "" if err["type"] == "missing" else f" (got {_short(err.get('input'))})"
    if "constrained-int" in err["loc"]:  # a count (JSON_COUNT): say its range
        return f"{where}: must be a whole number from 0 to {MAX_COUNT}{got}"
    msg = re.sub(r" or instance of \w+", "", err["msg"])  # (a model's name says nothing to whoever reads it)
    return f"{where}: {msg[:1].lower()}{msg[1:]}{got}"


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def check_record(obj: Mapping[str, object], arms: frozenset[str] | None) -> str | None:
    """The first defect of a record (of a known kind) by its kind's model, and whether its ``arm`` is one of
    *arms* (None: not checked); None when it has none."""
    kind = obj.get("kind")
    validator = _VALIDATORS.get(kind) if isinstance(kind, str) else None
    if validator is not None:
        try:
            validator.validate_python(obj)
        except ValidationError as exc:
            return "field " + _first(exc)
    arm = obj.get("arm")
    if arms is not None and arm is not None and arm not in arms:
        return f"field arm: {_short(arm)} is none of the header's arms {sorted(arms)}"
    return None


def check_header(obj: Mapping[str, object], kind: str) -> str | None:
    """The first defect of a ``run`` (or ``shard``, *kind*) header; None when it has none."""
    try:
        _VALIDATORS[kind].validate_python(obj)
    except ValidationError as exc:
        return "field " + _first(exc)
    return None


def header_arms(obj: RunHeaderRow) -> frozenset[str]:
    """Every arm a valid ``run`` header knows: its config's and its ``arms``'."""
    return frozenset(a["name"] for a in obj["config"]["arms"]) | frozenset(obj["arms"])


@functools.cache
def column_bounds(cls: type) -> dict[str, tuple[bool, float | None, float | None, bool]]:
    """Per field of *cls* read as a number column: (whole, ge, le, finite) of its type, for the reader to check a
    column by the same bounds as a record (``records.Count``, ``Seconds``, ``Epoch``)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get(COLUMN) != "number":
            continue
        t = hints[f.name]
        args = [a for a in typing.get_args(t) if a is not type(None)] if typing.get_origin(t) is not Annotated else [t]
        t = args[0] if args else t
        base, meta = (typing.get_args(t)[0], list(t.__metadata__)) if typing.get_origin(t) is Annotated else (t, [])
        ge: float | None = None
        le: float | None = None
        finite = False
        for m in meta:
            for c in getattr(m, "metadata", [m]):
                if isinstance(c, annotated_types.Ge) and isinstance(c.ge, (int, float)):  # (a number column's)
                    ge = c.ge
                elif isinstance(c, annotated_types.Le) and isinstance(c.le, (int, float)):
                    le = c.le
                elif getattr(c, "allow_inf_nan", None) is False:
                    finite = True
        out[f.name] = (base is int, ge, le, finite or base is int)
    return out
