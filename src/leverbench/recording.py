"""A recording of an agent's real model calls, as ``leverbench record`` writes it and cases replay it.

``leverbench record`` (:mod:`leverbench.proxy`) writes ``DIR/exchanges.jsonl``, schema
``leverbench.recording/1``: a header line, then one line per chat-completions exchange, appended as each
ends (:class:`ExchangeRow`).  The importers (:mod:`leverbench.workload.recorded`) read that file and other
request logs into :class:`RecordedTurn` s, the agent turns that ``[[cases]] from = ...`` replays.

A leaf module (typing and dataclasses only): the experiment file's loader (``config``) holds recorded turns
and the proxy, the importers and the runner read them, without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from typing_extensions import NotRequired, TypedDict

from .json_types import JSONObject

RECORDING_SCHEMA = "leverbench.recording/1"
EXCHANGES_FILE = "exchanges.jsonl"
REPLAY_MODES = ("recorded", "live")
ReplayMode = Literal["recorded", "live"]


# ---------------------------------------------------------------- the proxy's file, line by line


class RecordingHeaderRow(TypedDict):
    """The first line: what recorded, from where (the upstream's URL redacted, never a key), since when."""

    kind: Literal["recording"]
    schema: str
    tool_version: str
    started_at: str  # ISO 8601, UTC
    upstream: str
    session_header: str  # the request header that names a session, when the agent sends one
    redact_patterns: int  # how many --redact patterns masked the content (the patterns themselves are not kept)


class ToolCallJSON(TypedDict):
    """A tool call the model made: its id (None when the server sent none), name, arguments (JSON text)."""

    id: str | None
    name: str
    arguments: str


class ResponseRow(TypedDict):
    """What came back, accumulated from the stream (or the one JSON body): the answer's text, the reasoning
    (``reasoning_content`` / ``reasoning``), the tool calls, the finish reason, ``usage`` and the engine's own
    ``timings`` (llama.cpp) as the server sent them (None where it sent none)."""

    content: str
    reasoning: str
    tool_calls: list[ToolCallJSON]
    finish_reason: str | None
    usage: JSONObject | None
    timings: JSONObject | None


class TimingRow(TypedDict):
    """The exchange's times as the proxy saw them, in seconds after it received the request: the first chunk
    with content (None: none came, or not streamed) and the last byte; ``chunks``: body reads passed through."""

    ttft_s: float | None
    latency_s: float
    chunks: int


class ExchangeRow(TypedDict):
    """One chat-completions exchange: ``n`` counts the recording's exchanges from 1; ``turn`` and ``step`` say
    which turn it belongs to and where (:class:`~leverbench.workload.recorded.grouping.TurnGrouper`);
    ``request`` is the body the agent sent, whole (messages, tools, sampling parameters), after ``--redact``;
    ``redactions`` counts the matches masked in it and the response; ``error`` says why a failed exchange
    failed (the upstream unreachable, the client gone, a response that does not parse); ``note`` why an exchange
    that did not fail has no ``response`` (a content-encoding this Python has no library for)."""

    kind: Literal["exchange"]
    n: int
    turn: str
    step: int
    session: str | None
    t_start: float  # epoch seconds the request arrived
    method: str
    path: str
    status: int | None
    stream: bool
    request: JSONObject | None
    response: ResponseRow | None
    timing: TimingRow
    redactions: int
    error: str | None
    note: NotRequired[str | None]  # (absent in recordings made before it was)


# ---------------------------------------------------------------- what a case replays


@dataclass(frozen=True, slots=True)
class RecordedToolCall:
    """A tool call the model made in the recording."""

    id: str | None
    name: str
    arguments: str  # JSON text, as the model wrote it


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One recorded model call: the request as the agent sent it, and what came back.

    ``prompt_tokens`` (and the other counts) are the recording's usage, None where it has none (a request log
    without responses); ``source`` says where it was read (``FILE:LINE``)."""

    request: JSONObject
    source: str
    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[RecordedToolCall, ...] = ()
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    model: str | None = None  # the model that answered (the response's, else the request's)
    ttft_s: float | None = None
    latency_s: float | None = None
    redactions: int = 0

    @property
    def messages(self) -> list[JSONObject]:
        """The request's messages (the importers keep only requests whose messages are a list of objects)."""
        msgs = self.request.get("messages")
        return [m for m in msgs if isinstance(m, dict)] if isinstance(msgs, list) else []

    @property
    def tools(self) -> list[JSONObject] | None:
        tools = self.request.get("tools")
        return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) and tools else None


@dataclass(frozen=True, slots=True)
class RecordedTurn:
    """One agent turn: its calls in the order they were made.  ``id`` is the recording's (or the importer's)
    name for it; ``session`` the agent's session header, where it sent one."""

    id: str
    calls: tuple[RecordedCall, ...]
    session: str | None = None
    notes: tuple[str, ...] = field(default=())  # what the importer could not read as recorded (per turn)

    @property
    def first(self) -> RecordedCall:
        return self.calls[0]

