"""Sending one call to one arm and recording it: the seam between what is sent and when.

Turns, probes and load stages decide *what* to send and *when*; a :class:`Sender` does the rest:
the request body, the call (:func:`~leverbench.runner.client.stream_chat`), retries, the tokens of
a call the server sent no usage for, the ledger append of every attempt, and the cancel path (a
call cut by Ctrl-C is recorded, class ``cancelled``, before the cancellation goes on).
:class:`ArmSender` is the runner's; a test's fake sender returns synthetic records, so that
scheduling is tested without HTTP.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import json
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Callable, NamedTuple, Protocol

import aiohttp
from typing_extensions import TypedDict

from ..json_types import JSONObject
from ..ledger.records import CallError, CallRecord, ErrorClass
from ..levers import registry
from .client import CallCancelled, Streamed, Timeouts, messages_sha256, stream_chat
from .discover import chat_url
from .recorder import Recorder
from .tokens import ChatTokens, Endpoint, count_chat_tokens, count_text_tokens
from .tools_check import ToolsChecks

if TYPE_CHECKING:
    from ..workload.chat import ChatBody, ChatMessage

FORCE_FIELDS = ("ignore_eos", "min_tokens")  # how a probe forces its output length, where the engine allows it
#: A request's fields the ledger keeps as they were sent whatever ``store_text`` says: sampling and control, no
#: content.  Any other (a recorded request's ``user``, ``metadata``, ``prediction``, ``response_format``, ...)
#: is kept as its hash (:func:`ledger_request`) unless ``store_text``, or the arm's own (the experiment file's).
#: A lever's per-call switches are among them (llama.cpp's ``cache_prompt``: :func:`leverbench.levers.registry.
#: request_fields`).
SAMPLING_FIELDS = frozenset({
    "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "typical_p", "seed",
    "n", "stop", "stream", "stream_options", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "logprobs", "top_logprobs", "ignore_eos", "min_tokens", "parallel_tool_calls", "tool_choice",
    "reasoning_effort", "service_tier", *registry.request_fields()})


class Sent(NamedTuple):
    """A sent call: its (last attempt's) record, and beside it what its caller goes on with."""

    record: CallRecord
    content: str  # the answer's text, for the conversation's next message
    retried_s: float  # seconds its retried attempts took (connect + latency of each)


class Sender(Protocol):
    """Sends one arm's calls and records every attempt in the ledger."""

    @property
    def length_by_prompt(self) -> bool:
        """The arm rejected ignore_eos/min_tokens: a forced length is asked for in the prompt instead."""
        ...

    def body(self, messages: list[ChatMessage], max_tokens: int | None, temperature: float | None,
             extra: JSONObject | None = None, tools: list[JSONObject] | None = None) -> ChatBody:
        """The request body: model, messages, max_tokens and temperature (left out when None: a recorded request
        that gave none), tools, the arm's fields, *extra*."""
        ...

    async def send(self, body: ChatBody, head: CallRecord, *, think_tags: bool = False,
                   defer_counting: bool = False, forced_tokens: int | None = None,
                   note: Callable[[CallRecord], None] | None = None) -> Sent:
        """Send *body*; each attempt's record is *head* (who the call is: see ``CallRecord``'s head and
        ``extra``) with what was measured and sent, appended to the ledger.  *forced_tokens*: the output
        length the body forces (a probe: :func:`length_check`).  *note*: the caller's last word on each
        attempt's record, given it before it is appended (a live replay's ``departed``, which depends on the
        answer).  Cancelled: the call is recorded, then the cancellation goes on."""
        ...

    async def count_text_tokens(self, text: str) -> int | None:
        """Tokens of *text* by the arm's tokenizer; None when it offers none."""
        ...


class ArmEndpointLike(Endpoint, Protocol):
    """What :class:`ArmSender` reads of the runner's ``ArmEndpoint``."""

    length_by_prompt: bool
    request: JSONObject  # the arm's extra request fields (the experiment file's JSON)
    tools_checks: ToolsChecks  # whether each tool set reaches the model (runner.tools_check), asked once per arm

    def death_note(self) -> str | None:
        """Why the arm's engine died (the tail of its log); None while it lives or when there is none."""
        ...


class ArmSender:
    """The runner's :class:`Sender`: one arm, through one connection pool (*session*)."""

    def __init__(self, recorder: Recorder, session: aiohttp.ClientSession, ep: ArmEndpointLike, *,
                 timeouts: Timeouts, retries: int, keep_text: bool):
        self.recorder = recorder
        self.session = session
        self.ep = ep
        self.timeouts = timeouts
        self.retries = retries
        self.keep_text = keep_text

    @property
    def length_by_prompt(self) -> bool:
        return self.ep.length_by_prompt

    def body(self, messages: list[ChatMessage], max_tokens: int | None, temperature: float | None,
             extra: JSONObject | None = None, tools: list[JSONObject] | None = None) -> ChatBody:
        body: ChatBody = {"model": self.ep.model, "messages": messages}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        if tools:
            body["tools"] = tools
        body.update(self.ep.request)  # the user's fields: any JSON
        if extra:
            body.update(extra)
        return body

    async def count_text_tokens(self, text: str) -> int | None:
        return await count_text_tokens(self.session, self.ep, text)

    async def send(self, body: ChatBody, head: CallRecord, *, think_tags: bool = False,
                   defer_counting: bool = False, forced_tokens: int | None = None,
                   note: Callable[[CallRecord], None] | None = None) -> Sent:
        """One call, recorded; with ``retries`` set, a failed attempt is recorded and tried again.  A
        fixed-length call (*forced_tokens*) gets :func:`length_check`'s fields; one the endpoint rejected
        for its forcing fields is not tried again (the caller falls back).

        A call the server sent no usage for is counted with its tokenizer (:func:`count_chat_tokens`):
        harness time that must not enter a measurement.  It is recorded as ``harness_s`` (a turn leaves
        it out of its time); with *defer_counting* (load stages, whose next send must not wait for it) the
        counting and the record's append happen in the background (:meth:`Recorder.flush` waits for them)
        and the record comes back without its counts; and a counted one comes back before its fields of what
        was sent are filled and it is appended (:meth:`Recorder.later`)."""
        retried_s = 0.0
        messages = body["messages"]
        tools = body.get("tools")
        checked_s = 0.0
        if tools:
            h0 = time.perf_counter()
            check, first = await self.ep.tools_checks.get(self.session, self.ep, messages, tools)
            checked_s = time.perf_counter() - h0
        for attempt in range(self.retries + 1):
            rec = head.fresh()
            if tools:
                rec.tools_reached, rec.tools_check = check.said, check.how if first and attempt == 0 else None
                # the check's seconds (harness): on the call that ran it, or that waited for it to finish
                rec.harness_s, checked_s = (checked_s if first or checked_s > 1e-3 else None), 0.0
            cancelled: asyncio.CancelledError | None = None
            try:
                got = await stream_chat(self.session, chat_url(self.ep.base_url), body, headers=self.ep.headers,
                                        timeouts=self.timeouts, keep_text=self.keep_text, think_tags=think_tags,
                                        record=rec)
            except CallCancelled as exc:  # Ctrl-C: the call in flight is recorded (class cancelled), then we stop
                got, cancelled = exc.streamed, exc
            uncounted = rec.failed_as(ErrorClass.NO_USAGE)
            if uncounted and not defer_counting:
                h0 = time.perf_counter()
                try:
                    _counted(rec, await count_chat_tokens(self.session, self.ep, messages, got.content + got.reasoning,
                                                          tools))
                except asyncio.CancelledError as exc:  # Ctrl-C while counting: recorded uncounted (below), then stop
                    cancelled = exc
                rec.harness_s = (rec.harness_s or 0.0) + time.perf_counter() - h0
            # a load stage's record is finished (what was sent: the input's hash) and handed to the ledger after the
            # I/O the loop has waiting (Recorder.later), not between this call's end and the next send
            later = defer_counting and cancelled is None and not uncounted
            if not later:
                _sent(rec, body, attempt if self.retries else None, self.keep_text, self.ep.request)
            if cancelled is not None:
                self.recorder.append_now(rec)
                raise cancelled
            if rec.error is not None and (note := self.ep.death_note()):
                rec.error = CallError(ErrorClass.ENGINE_DIED, note[:2000])
            if forced_tokens is not None:
                for k, v in length_check(rec, body, forced_tokens).items():
                    setattr(rec, k, v)
            if note is not None:
                note(rec)
            will_retry = (rec.error is not None and attempt < self.retries and rec.error.cls != ErrorClass.ENGINE_DIED
                          and not rec.rejected_fields)
            if will_retry:
                rec.retried = True
                retried_s += (rec.connect_s or 0.0) + (rec.send_s or 0.0) + (rec.latency_s or 0.0)
            if uncounted and defer_counting:
                self.recorder.defer(self._count_then_append(messages, got, rec, tools))
            elif later:
                numbered = attempt if self.retries else None
                self.recorder.later(functools.partial(self._sent_then_append, rec, body, numbered))
            else:
                self.recorder.append(rec)  # returns at once: the next call is not held up by the fsync
            if not will_retry:
                break
        return Sent(rec, got.content, retried_s)

    def _sent_then_append(self, rec: CallRecord, body: ChatBody, attempt: int | None) -> None:
        """A load call's record finished and appended (see :meth:`send`; run by :meth:`Recorder.later`)."""
        _sent(rec, body, attempt, self.keep_text, self.ep.request)
        self.recorder.append(rec)

    async def _count_then_append(self, messages: list[ChatMessage], got: Streamed, rec: CallRecord,
                                tools: list[JSONObject] | None) -> None:
        """A deferred :func:`count_chat_tokens` (see :meth:`send`): count, then append (a copy of) the record."""
        counted = dataclasses.replace(rec)
        h0 = time.perf_counter()
        try:
            _counted(counted, await count_chat_tokens(self.session, self.ep, messages, got.content + got.reasoning,
                                                      tools))
        except asyncio.CancelledError:  # Ctrl-C while counting: the call is recorded all the same, uncounted
            self.recorder.append_now(rec)
            raise
        counted.harness_s = (counted.harness_s or 0.0) + time.perf_counter() - h0
        self.recorder.append(counted)


def _counted(rec: CallRecord, tokens: ChatTokens | None) -> None:
    """A call counted by its tokenizer (*tokens*: a ChatTokens, or None when it could not) counts as measured."""
    if tokens is None:
        return
    rec.prompt_tokens, rec.completion_tokens, rec.token_source = (tokens.prompt_tokens, tokens.completion_tokens,
                                                                  tokens.source)
    rec.usage_missing, rec.error = True, None


def value_hash(v: object) -> str:
    """A JSON value as the ledger keeps it without its text: ``sha256:`` and 16 hex digits of its canonical JSON."""
    text = json.dumps(v, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def ledger_request(body: ChatBody, keep_text: bool, own: Collection[str] = ()) -> JSONObject:
    """*body* less messages and tools, as the ledger keeps it: every field as sent with *keep_text*; else the
    :data:`SAMPLING_FIELDS` and the arm's *own* fields as sent, any other as its hash (a recorded request's
    ``user``, ``metadata``, ``prediction``, ``response_format`` hold the agent's content)."""
    return {k: v if keep_text or k in SAMPLING_FIELDS or k in own else value_hash(v)
            for k, v in body.items() if k not in ("messages", "tools")}


def _sent(rec: CallRecord, body: ChatBody, attempt: int | None, keep_text: bool, own: Collection[str] = ()) -> None:
    """The record's fields of what was sent: the body less messages and tools (:func:`ledger_request`), the
    input's hash and size."""
    messages = body["messages"]
    rec.request = ledger_request(body, keep_text, own)
    rec.input_sha256 = messages_sha256(messages)
    rec.input_chars = sum(len(m.get("content") or "") for m in messages)
    rec.tools_sent = len(body.get("tools") or [])
    rec.attempt = attempt
    if keep_text:
        rec.input_messages = messages  # stored as the JSON they are


class LengthCheck(TypedDict, total=False):
    """The fields :func:`length_check` sets on a fixed-length call's record (``CallRecord``'s)."""

    rejected_fields: list[str]
    retried: bool
    length_verified: bool


def length_check(rec: CallRecord, body: ChatBody, n: int) -> LengthCheck:
    """Fields for a fixed-length call's record: ``rejected_fields`` (+ ``retried``) when the endpoint
    refused a body that carried :data:`FORCE_FIELDS` with HTTP 400 or 422 (a strict API); else,
    for a call that succeeded, ``length_verified`` = the engine generated exactly ``n`` tokens."""
    sent = [f for f in FORCE_FIELDS if f in body]
    if rec.error is not None and rec.status in (400, 422) and sent:
        return {"rejected_fields": sent, "retried": True}
    if rec.error is None:
        return {"length_verified": rec.completion_tokens == n}
    return {}
