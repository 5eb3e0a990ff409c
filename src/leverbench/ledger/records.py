"""The ledger's record kinds and schema version.

``ledger.jsonl`` holds one JSON object per line.  The first line is the
``run`` header; every later line is one of the kinds below.  A record is never
rewritten: a resumed run appends a ``resume`` record and continues.

Schema ``leverbench.ledger/5`` (version 1 lacked the kinds ``engine_start``, ``engine_stop`` and ``gpu`` and the
header's ``engines`` and ``host.gpu``, version 2 the kind ``engine_warmed``, version 3 a call's ``send_s``, its
times counting from when its connection was ready, version 4 the kind ``cache_reset`` and a turn's ``cache``:
its runs said nothing of the state each turn met; older ledgers read unchanged,
:mod:`.upgrade`):

- ``run``: schema, tool_version, run_id, started_at (ISO 8601 UTC), host{...},
  experiment_file, config (the validated experiment, as JSON), arms{name:
  {role, conditions (declared), discovered{...}}}, engines{mode, declared, reason,
  server_state} (how the engines the tool starts ran); host.gpu (the host's GPUs).
- ``call`` / ``probe`` / ``sentinel`` / ``warmup``: one model call each, a
  :class:`CallRecord` (its fields are documented there, once): who (kind, arm,
  case, repeat, step, turn_id), the per-kind keys of ``extra`` (a turn's
  calls: scripted_step; a recorded turn's calls also replay, recorded_step,
  recorded_prompt_tokens, as_recorded, recorded_redactions, departed; probes, sentinels and warm-ups: ``probe_tokens``, the
  forced output length, ``position`` and ``length_method``), what the client
  measured, and what was sent.
- ``load``: one call of a load stage, a :class:`CallRecord` whose ``extra``
  holds stage, mode, sweep, the stage's parameters (concurrency, rate, arrival, speed, ...;
  closed/open stages: prefix_sharing, the fraction of the prompt's tokens all
  the stage's requests share — the rest is made unique per request),
  scheduled_t (epoch s at which the schedule meant to send it; the client's
  lag is t_send − scheduled_t), warmup, load_run (which execution of the stage:
  a resumed run repeats load stages and analysis keeps the latest), repeat
  (request index), step, loop_lag_s, slot_wait_s (with max_in_flight: the wait
  for a slot, part of t_send − scheduled_t); trace calls add target_input_tokens,
  target_output_tokens, session (and turn_id); a trace stage's first call carries
  trace_import (rows used / skipped and why) and token_check (/tokenize).  A
  stage run on several workers (issue 17) adds workers (N) and, in each
  worker's shard, worker (K: which shard; t_send and scheduled_t are written
  on that worker's clock, and the reader puts them on the coordinator's by
  the stage's ``clock`` record, adding clock_offset_s and clock_uncertainty_s).
- ``turn``: one per finished turn, a :class:`TurnRecord` (its fields are
  documented there).  A turn, probe or sentinel whose record has an error is
  run again by a resumed run; the failed record stays, superseded (the
  analysis counts a unit's first successful attempt, else its latest).
- ``metrics``: a Prometheus scrape of an arm's endpoint: arm, when
  ("before" / "after"), samples{name: value}; a NaN or infinite sample (legal
  in the exposition format) is the string "NaN", "+Inf" or "-Inf".
- ``stage_end``: one per load stage finished on an arm: stage, arm, load_run,
  calls (records the stage wrote); on several workers also workers (N) and
  lost_workers: [{worker, error, scheduled, recorded, never_sent}] for each
  worker that died (scheduled: its share's calls, None where the server's pace
  decides; never_sent = scheduled − recorded: sent or not, no record came).  A resumed run skips the (stage, arm)
  pairs that have one and runs the others again (a stage is one measurement:
  one cut short is repeated whole; the analysis keeps the latest execution).
- ``warmup``: a short call to each arm before the work starts (a fresh
  server's first call is slow); kept, never analysed.  ``position`` "restart": the call after an engine was
  restarted before a turn; "shared": the call that warmed a case's shared prefix before a turn
  (``cache_between_turns = "shared"``); neither is part of the warm-up before the first round.
- ``cache_reset``: per arm, once before its turns (:mod:`leverbench.runner.cache_state`): the declared state
  (``cold``, ``shared``, ``keep``), the method that brings the arm to it before every turn (``reset`` through
  the engine's endpoint, ``salt``, ``restart``, ``restart+salt``, ``none``, ``keep``), the endpoint, why, and
  the check made of it (``check``: took, did not take, unverified; ``cached_before``, ``cached_after``,
  ``check_tokens``).
- ``shard``: the first line of a worker's shard ``ledger.d/worker-K.jsonl``
  (issue 17; the same record schema): schema, tool_version, run_id (the
  run's), worker, host, pid, started_at.
- ``clock``: what a worker writes to its shard before each stage: stage, arm,
  load_run, worker, host, pid, t (the coordinator's epoch time of the
  measurement), offset_s (the worker's clock − the coordinator's, from the
  round trip with the least delay of several), uncertainty_s (half that round
  trip: the offset is within ± it), rtt_s, samples.
- ``engine_start``: an engine the tool started for an arm, written as soon as it answered (before it is warmed)
  or failed to: arm, mode, block (the run's engine starts counted from 0; a resumed run goes on from its
  ledger's), round and part ("round": the arm's block of a round, "closing": its probes, closing sentinel and
  load stages, "run": an engine up for the whole run, "discovery": started to ask what it serves), t (epoch s
  the start began), ready_s (spawned → healthy; null: it failed), model_load_s (the engine's log, where it
  says), server_state ("cold": a fresh process), timeout_s and timeout_from (the start timeout and where it
  came from), devices (the GPUs it may use), pid, error (null; a failed start: why, the first line of it).
  Version 2 wrote it after the warm-up, with warmup_s, warmup_calls and settled.
- ``engine_warmed``: the warm-up of the engine that started under arm and block: warmup_s, warmup_calls,
  settled (its sentinel's speed stable).
- ``engine_stop``: arm, block, t, stop_s, released (its process group gone and, on a GPU, none of its
  processes left there and the memory back where it was; null: the group gone, its GPUs not checked, without
  NVML), check (what was checked, in words), leftover (pids).
- ``gpu``: one device's readings since the last such record (``gpu.readings``): source ("nvml", "dcgm"),
  device, arms (whose engine or endpoint uses it), fields (which source field each utilisation is), and
  the columns t (epoch s) and sm, dram (fractions of the sample period busy), mem_used_mib, power_w,
  sm_clock_mhz, energy_j (the device's counter), each a number or null per reading.  Written between
  units of work, never inside a measured interval.
- ``resume``: at, tool_version, completed_units (units with a successful
  record, not run again), failed_units_rerun (units whose every record failed,
  run again), repeats.

JSON has no NaN or infinity: wherever a record holds one (a server's sample
or ``timings``), the writer stores the string "NaN", "+Inf" or "-Inf"
(:func:`json_number`; ``float()`` reads each back).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeAlias, cast

from pydantic import Field

from ..bounds import MAX_COUNT
from ..json_types import JSONObject, JSONValue  # noqa: F401 (JSONObject's forward reference, for get_type_hints)
from .rows import CallExtras, CallRow, TimingsRow, ToolCallRow, TurnCacheRow, TurnRow

LEDGER_SCHEMA = "leverbench.ledger/6"
LEDGER_SCHEMA_NAME, LEDGER_SCHEMA_VERSION = LEDGER_SCHEMA.rsplit("/", 1)
SUMMARY_SCHEMA = "leverbench.summary/1"

CALL_KINDS = ("call", "probe", "sentinel", "load", "companion")

# The bounds of a record's numbers, one definition each (the reader validates every record by its fields'
# types, :mod:`.schema`): durations and epoch times are finite and non-negative; counts (tokens, characters,
# chunks, indices) are whole numbers from 0 to MAX_COUNT (as the ledger holds them, JSON's one number type:
# 3.0 is the count 3, ``schema.JSON_COUNT``).
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # a duration
Epoch = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # epoch seconds
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
KINDS = ("run", "turn", "metrics", "resume", "warmup", "stage_end", "shard", "clock", "engine_start", "engine_stop",
         "engine_warmed", "gpu", "cache_reset", *CALL_KINDS)


class ErrorClass(StrEnum):
    """What went wrong with a call (its record's ``error["class"]``); every failure is recorded, never raised."""

    CONNECT = "connect"  # connection refused / DNS / TLS: nothing was sent
    TIMEOUT_CONNECT = "timeout_connect"  # the connection (DNS included) was not established within connect_s
    TIMEOUT_FIRST_TOKEN = "timeout_first_token"  # no content arrived within the first-token timeout
    TIMEOUT_IDLE = "timeout_idle"  # the stream stalled longer than the idle timeout between chunks
    TIMEOUT_TOTAL = "timeout_total"  # the whole call took longer than the total timeout
    CANCELLED = "cancelled"  # the run was interrupted (Ctrl-C, SIGTERM) while the call was in flight; the record
    #                          keeps what had arrived (chunks, partial usage, the latency so far)
    HTTP_STATUS = "http_status"  # HTTP 4xx/5xx, or an error event in the stream; the message carries the server's
    STREAM_CUT = "stream_cut"  # the stream broke or ended without a finish reason or [DONE], or the connection
    #                            closed after the request was sent without a response
    MALFORMED = "malformed"  # not an HTTP response, an SSE line over MAX_SSE_LINE_BYTES (with its size), a data line
    #                          that is not JSON or of the wrong shape (a usage whose counts are not token counts, ...)
    NO_USAGE = "no_usage"  # the call completed, the server sent no token usage, and /tokenize could not count it
    ENGINE_DIED = "engine_died"  # an engine the tool started died; the message holds the tail of its log
    CACHE_STATE = "cache_state"  # a turn's: its arm could not be brought to the declared cache state before it (a
    #                              reset or a shared prefix's warm call failed): its calls ran, the turn does not
    #                              count, and --resume runs it again (runner.cache_state)


def completed(error_class: str) -> bool:
    """Whether a call whose record has an error of *error_class* still completed (its answer came whole: the server
    sent no usage and /tokenize could not count it): a turn's next call may build on its answer (the runner's turns,
    recorded turns and load rounds go on), and as a companion it held its place in the load, so it is no failed
    companion (:mod:`leverbench.runner.companions` counts so, and the analysis of a run)."""
    return error_class == ErrorClass.NO_USAGE


@dataclass(frozen=True, slots=True)
class CallError:
    """A failed call's (or turn's) ``error``: written as ``{"class": cls, "message": message}``."""

    cls: ErrorClass
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"class": self.cls.value, "message": self.message}


# A field's role, in its metadata: HEAD, the call's identity, set by whoever sends it (the rest is the
# sender's and the client's); OMIT_NONE, written only when not None (else always written, null included);
# COLUMN, how analysis reads it as a column (the reader's ``Columns``, ``analysis.dataset.CallTable``):
# a label (text), a number (float64, NaN where the record lacks the field or has null), a flag (true or
# not), a hash (text compared for equality only: an int64 code per row, equal codes for equal values), or for
# ``timings`` the numbers of its keys TIMINGS.
HEAD, OMIT_NONE, COLUMN, TIMINGS = "head", "omit_none", "column", "timings"
ToolsReached: TypeAlias = Literal["yes", "no", "not known"]  # CallRecord.tools_reached

LABEL, NUMBER, FLAG, HASH = "label", "number", "flag", "hash"


def _f(default: Any = None, *, factory: Any = None, head: bool = False, omit_none: bool = False,
       column: str | None = None, **meta: Any) -> Any:
    md = {HEAD: head, OMIT_NONE: omit_none, COLUMN: column, **meta}
    return field(default_factory=factory, metadata=md) if factory is not None else field(default=default, metadata=md)


@dataclass(slots=True)
class CallRecord:
    """One model call, as the ledger holds it (kinds ``call``, ``probe``, ``sentinel``, ``warmup``, ``load``).

    Written by :meth:`to_dict`: the fields in this order (a field made with ``omit_none=True`` only when
    it is not None), the keys of ``extra`` right after the head (``turn_id``).  Times: ``t_send`` is
    epoch seconds; ``ttft_s``, ``t_first_answer_s``, ``latency_s`` and ``chunk_t`` count from when the
    request went out, i.e. from t_send + connect_s + send_s (:attr:`t_out`), so that neither connect
    time nor the client's own delay in sending hides in them (a call's full time is connect_s + send_s
    + latency_s; it ended at :attr:`t_end`).  A ledger before version 4 has no ``send_s``: its times
    count from the connection ready.
    """

    # -- who: set by the caller (the turn runner, a probe, a load stage)
    kind: str = _f("call", head=True)
    arm: str = _f("", head=True, column=LABEL)
    case: str = _f("", head=True, column=LABEL)
    repeat: Count = _f(0, head=True)  # the turn's or probe's repeat; a load stage's request index
    step: Count = _f(0, head=True, column=NUMBER)  # the call's index in its turn (a trace session's round)
    turn_id: str | None = _f(head=True, omit_none=True, column=LABEL)  # the turn (trace session) it belongs to
    # -- what the client measured (runner.client.stream_chat)
    t_send: Epoch = _f(0.0, column=NUMBER)  # epoch s at which the call started
    connect_s: Seconds | None = _f(column=NUMBER)  # s opening a new connection (DNS, TCP, TLS); 0.0 reused; null: none made
    stale_connection: bool | None = _f(omit_none=True)  # true: a kept-alive connection the server had closed;
    #                                                     the call went out on a new one (connect_s from the start)
    send_s: Seconds | None = _f(omit_none=True, column=NUMBER)  # s from the connection ready until the request went
    #                  out: the client's own queue (aiohttp writes a request from a task of its own); null: not seen
    ttft_s: Seconds | None = _f(column=NUMBER)  # → the first chunk with content (reasoning included)
    t_first_answer_s: Seconds | None = _f(column=NUMBER)  # → the first chunk of the visible answer
    latency_s: Seconds | None = _f(column=NUMBER)  # → the stream's [DONE], or its end
    chunk_t: list[Seconds] = _f(factory=list)  # s at which each streamed chunk with content arrived
    chunk_chars: list[Count] = _f(factory=list)  # characters of each such chunk
    status: int | None = _f()  # HTTP status; null: no response
    error: CallError | None = _f()  # null: the call succeeded
    prompt_tokens: Count | None = _f(column=NUMBER)  # the server's usage (or /tokenize's count: token_source)
    completion_tokens: Count | None = _f(column=NUMBER)
    cached_tokens: Count | None = _f(column=NUMBER)  # usage.prompt_tokens_details.cached_tokens
    reasoning_tokens: Count | None = _f(column=NUMBER)  # usage.completion_tokens_details.reasoning_tokens
    token_source: str = _f("none")  # "usage", "tokenize (...)" or "none"
    content_chars: Count = _f(0, column=NUMBER)  # characters of the answer (a <think> part not included)
    reasoning_chars: Count = _f(0, column=NUMBER)
    reasoning_chunks: Count = _f(0, column=NUMBER)
    answer_chunks: Count = _f(0, column=NUMBER)
    finish_reason: str | None = _f()
    empty_answer: bool = _f(False, column=FLAG)  # cut by max_tokens before any visible answer or tool call
    tool_calls: list[ToolCallRow] | None = _f()  # [{id, name, arguments}] as streamed
    timings: TimingsRow | None = _f(column=TIMINGS, keys=(
        "prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "cache_n", "draft_n", "draft_n_accepted"))
    #                                   llama.cpp's, as sent
    output_sha256: str = _f("", column=HASH)  # of the visible answer's text (equal work: identical outputs)
    output_text: str | None = _f(omit_none=True)  # these three with the experiment's store_text
    reasoning_text: str | None = _f(omit_none=True)
    chunk_text: list[str] | None = _f(omit_none=True)
    # -- what the sender added (runner.send)
    usage_missing: bool | None = _f(omit_none=True)  # true: no usage came; /tokenize counted the tokens
    harness_s: Seconds | None = _f(omit_none=True)  # s the tokenizer took (harness time, out of every measurement)
    # the JSON body sent, less messages and tools; without store_text, fields other than sampling and the arm's own
    # as their hashes (runner.send.ledger_request)
    request: JSONObject = _f(factory=dict)
    input_sha256: str = _f("")
    input_chars: Count = _f(0)
    tools_sent: Count = _f(0, column=NUMBER)
    tools_reached: ToolsReached | None = _f(omit_none=True, column=LABEL)  # with tools sent: whether the engine's
    #                  chat template rendered them (runner.tools_check): "yes", "no", "not known"; absent: no tools
    tools_check: str | None = _f(omit_none=True, column=LABEL)  # how that was found: the arm's first call with them
    attempt: Count | None = _f(omit_none=True)  # with retries: the attempt's index
    input_messages: list[JSONObject] | None = _f(omit_none=True)  # with store_text
    rejected_fields: list[str] | None = _f(omit_none=True)  # the endpoint refused a probe's forcing fields
    length_verified: bool | None = _f(omit_none=True)  # a probe generated exactly its forced length
    retried: bool | None = _f(omit_none=True, column=FLAG)  # true: this attempt failed and was tried again
    # -- the keys the record's kind adds (see the module's docstring); none may name a field
    extra: CallExtras = field(default_factory=CallExtras)

    @property
    def t_out(self) -> float:
        """Epoch time the request went out, from which the call's own times count: t_send + connect_s + send_s
        (None counts as 0)."""
        return self.t_send + (self.connect_s or 0.0) + (self.send_s or 0.0)

    @property
    def t_end(self) -> float:
        """Epoch time the call ended: t_send + connect_s + send_s + latency_s (None counts as 0)."""
        return self.t_out + (self.latency_s or 0.0)

    def failed_as(self, *classes: ErrorClass) -> bool:
        """Whether the call failed with one of *classes* (any class when none is given)."""
        return self.error is not None and (not classes or self.error.cls in classes)

    def fresh(self) -> CallRecord:
        """A new record with this one's head fields and a copy of its ``extra`` (one per attempt)."""
        return CallRecord(**{k: getattr(self, k) for k in _CALL_HEAD}, extra=CallExtras(**self.extra))

    def to_dict(self) -> CallRow:
        """The ledger's JSON object (see the class docstring); ValueError when ``extra`` names a field."""
        out: dict[str, object] = {}
        _put(out, self, _CALL_HEAD_WRITE)
        if self.extra:
            if not _CALL_FIELDS.isdisjoint(self.extra):
                named = sorted(_CALL_FIELDS & set(self.extra))
                raise ValueError(f"a call record's extra keys name its fields: {named}")
            out.update(self.extra)
        _put(out, self, _CALL_REST_WRITE)
        return cast(CallRow, out)


@dataclass(slots=True)
class TurnRecord:
    """One finished turn (kind ``turn``): its calls, one after another, continued through tool calls."""

    kind: str = _f("turn")
    arm: str = _f("", column=LABEL)
    case: str = _f("", column=LABEL)
    repeat: Count = _f(0, column=NUMBER)
    turn_id: str | None = _f(column=LABEL)  # its calls carry the same
    t_start: Epoch = _f(0.0, column=NUMBER)  # epoch s
    turn_s: Seconds = _f(0.0, column=NUMBER)  # the turn's full wall clock: model_s + tool_s
    model_s: Seconds = _f(0.0, column=NUMBER)  # first call's start → last token, connect times included, harness_s left out
    tool_s: Seconds = _f(0.0, column=NUMBER)  # the tool results' scripted latencies
    calls: Count = _f(0)
    scripted_steps: Count = _f(0)
    failed_calls: Count = _f(0)
    step_limit: bool = _f(False, column=FLAG)  # cut at the case's max_steps
    empty_answers: Count = _f(0)
    retried_s: Seconds = _f(0.0, column=NUMBER)  # s its calls' retried attempts took (not in turn_s)
    output_tokens: Count | None = _f(column=NUMBER)  # Σ of its calls' (null when one lacks it)
    prompt_tokens: Count | None = _f(column=NUMBER)
    reasoning_tokens: Count | None = _f(column=NUMBER)
    error: CallError | None = _f()  # the first failed call's class, "N of M calls failed"
    # v5: how the arm's caches were brought to the declared state before the turn (runner.cache_state)
    cache: TurnCacheRow | None = _f(omit_none=True)
    # v6, with [experiment] in_flight > 1 (runner.companions): the requests in flight on the arm while the turn ran
    # (the turn and its companions), how many companion calls were sent, and how many of them failed
    in_flight: Count | None = _f(omit_none=True)
    companion_calls: Count | None = _f(omit_none=True)
    companion_failed: Count | None = _f(omit_none=True, column=NUMBER)

    def to_dict(self) -> TurnRow:
        """The ledger's JSON object: every field, in this order."""
        out: dict[str, object] = {}
        _put(out, self, _TURN_WRITE)
        return cast(TurnRow, out)


def _write_plan(cls: type) -> tuple[tuple[str, bool], ...]:
    """(name, omitted when None) of each field *cls* writes, in order (``extra`` is not one)."""
    return tuple((f.name, f.metadata[OMIT_NONE]) for f in fields(cls) if f.name != "extra")


_CALL_HEAD = tuple(f.name for f in fields(CallRecord) if f.metadata.get(HEAD))
_CALL_HEAD_WRITE = _write_plan(CallRecord)[:len(_CALL_HEAD)]
_CALL_REST_WRITE = _write_plan(CallRecord)[len(_CALL_HEAD):]
_CALL_FIELDS = frozenset(f.name for f in fields(CallRecord))
_TURN_WRITE = _write_plan(TurnRecord)


def _put(out: dict[str, object], rec: CallRecord | TurnRecord, plan: tuple[tuple[str, bool], ...]) -> None:
    """Add *rec*'s fields of *plan* to *out* as the ledger writes them: a CallError as its dict, a None
    left out where the field says so."""
    for name, omit_none in plan:
        v = getattr(rec, name)
        if v is None:
            if omit_none:
                continue
        elif name == "error":
            v = v.to_dict()
        out[name] = v


def columns_of(cls: type, column: str) -> tuple[str, ...]:
    """The fields of *cls* that analysis reads as columns of the kind *column* (LABEL, NUMBER, FLAG)."""
    return tuple(f.name for f in fields(cls) if f.metadata.get(COLUMN) == column)


# The columns the reader builds (``ledger.reader.Columns``) and analysis reads (``analysis.dataset``),
# derived from the records' fields.  Calls and turns share their labels.
LABELS = columns_of(CallRecord, LABEL)
CALL_HASHES = columns_of(CallRecord, HASH)
CALL_NUMBERS = columns_of(CallRecord, NUMBER)
CALL_FLAGS = columns_of(CallRecord, FLAG)
CALL_TIMINGS: tuple[str, ...] = next(f.metadata["keys"] for f in fields(CallRecord)
                                     if f.metadata.get(COLUMN) == TIMINGS)
TURN_NUMBERS = columns_of(TurnRecord, NUMBER)
TURN_FLAGS = columns_of(TurnRecord, FLAG)
if not set(columns_of(TurnRecord, LABEL)) <= set(LABELS):  # the reader reads both kinds' labels with one list
    raise AssertionError("a turn record's label columns must be call records' too")  # (a turn's others: None)


def json_number(v: float) -> float | str:
    """*v* as the ledger stores it: itself when finite, else "NaN", "+Inf" or "-Inf" (Prometheus' spelling)."""
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")


def json_safe(obj: Any) -> Any:
    """*obj* with every non-finite float (in dicts, lists and tuples) replaced by :func:`json_number`'s string."""
    if isinstance(obj, float):
        return json_number(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
