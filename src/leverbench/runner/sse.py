"""What a streamed chat completion says, read as it arrives: its SSE lines, and its chunks accumulated.

:class:`SSELines` splits the response body into lines (long ones too, up to ``MAX_SSE_LINE_BYTES``), each
with the time its last byte arrived (:class:`Arrivals`); :class:`StreamState` takes each data line's JSON
chunk: content and reasoning text, tool calls, usage (its counts checked: :func:`checked_usage`),
llama.cpp's ``timings``, finish reason, and when each chunk with content arrived.  Anything of the wrong
shape raises ValueError, which the client records as ``malformed``.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, cast

import aiohttp
from typing_extensions import TypedDict

from ..bounds import MAX_COUNT
from ..json_types import JSONObject
from ..ledger.rows import TimingsRow, ToolCallRow
from ..ledger.schema import Timings

MAX_SSE_LINE_BYTES = 8 * 2**20  # a longer SSE line is recorded as malformed


class PromptTokensDetails(TypedDict, total=False):
    cached_tokens: int | None


class CompletionTokensDetails(TypedDict, total=False):
    reasoning_tokens: int | None


class Usage(TypedDict, total=False):
    """A stream's ``usage`` with its counts checked (:func:`checked_usage`); keys the server adds are kept."""

    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None
    prompt_tokens_details: PromptTokensDetails | None
    completion_tokens_details: CompletionTokensDetails | None


class SSELineTooLong(Exception):
    """An SSE line longer than :data:`MAX_SSE_LINE_BYTES`; ``size`` is how much of it had arrived."""

    def __init__(self, size: int):
        super().__init__(f"an SSE line longer than {MAX_SSE_LINE_BYTES} bytes ({size} bytes without a line end)")
        self.size = size


class Arrivals(deque):
    """When each piece of a response body arrived: aiohttp's ``StreamReader`` keeps the pieces its protocol
    parsed out of each socket read in a deque (``_buffer``), appended in the transport's ``data_received``,
    so this deque in its place notes ``time.perf_counter()`` with each piece (``stamps``: (time, bytes)), in
    the loop's I/O callback, before any task runs.  A chunk's time is then when its bytes came in, not when
    the call's task got round to parsing it: with 128 streams whose chunks arrive together, the last
    parsed would otherwise be stamped after the 127 others' parsing (and after whatever else the loop ran
    in between).  Pieces that were there before (the body's start that came with the headers) count as
    arrived when the connection's protocol last read (``rx_at``: :class:`.connections.StampedHandler`), or
    where that is not known, when installed."""

    def __init__(self, pieces: Any, first_offset: int = 0, rx_at: float | None = None):
        super().__init__(pieces)
        now = time.perf_counter()
        if rx_at is not None and rx_at <= now:
            now = rx_at
        self.stamps: deque[tuple[float, int]] = deque((now, len(p)) for p in self)
        if self.stamps and first_offset:
            self.stamps[0] = (now, self.stamps[0][1] - first_offset)

    def append(self, piece: bytes) -> None:
        self.stamps.append((time.perf_counter(), len(piece)))
        super().append(piece)

    @classmethod
    def install(cls, content: Any, rx_at: float | None = None) -> Arrivals | None:
        """Put an :class:`Arrivals` in *content*'s buffer (before anything is read from it; what is there
        already arrived at *rx_at*, when known); None where *content* is not the aiohttp ``StreamReader`` this
        knows (then lines are stamped as they are read)."""
        buf = getattr(content, "_buffer", None)
        if type(buf) is not deque:
            return buf if isinstance(buf, Arrivals) else None
        arrivals = cls(buf, getattr(content, "_buffer_offset", 0), rx_at)
        content._buffer = arrivals
        return arrivals

    def take(self, n: int) -> list[tuple[int, float]]:
        """The arrival of the next *n* bytes read: [(end offset within them, time)], one per piece."""
        out: list[tuple[int, float]] = []
        at = 0
        while at < n and self.stamps:
            t, size = self.stamps[0]
            if at + size > n:  # a piece read in part (not by readany): the rest stays
                self.stamps[0] = (t, at + size - n)
                size = n - at
            else:
                self.stamps.popleft()
            at += size
            out.append((at, t))
        return out


class SSELines:
    """The lines of a response body as they arrive (without their ``\\n``), each with the time its last
    byte arrived (``time.perf_counter()``: :class:`Arrivals`; where that cannot be installed, when it was
    read), split here rather than by aiohttp's ``readline``, which raises past twice its read buffer
    (``ValueError("Chunk too big")`` past 128 KiB in older aiohttp, ``http_exceptions.LineTooLong`` past
    512 KiB in 3.14): lines up to ``limit`` bytes are returned whole; a longer one raises
    :class:`SSELineTooLong`.  Create it before anything is read from *content*."""

    def __init__(self, content: aiohttp.StreamReader, limit: int = MAX_SSE_LINE_BYTES, rx_at: float | None = None):
        self.content = content
        self.limit = limit
        self.arrivals = Arrivals.install(content, rx_at)
        self.lines: deque[tuple[bytes, float]] = deque()
        self.head: list[bytes] = []  # the start of a line still waiting for its end
        self.head_size = 0
        self.eof = False

    def __aiter__(self) -> "SSELines":
        return self

    async def __anext__(self) -> tuple[bytes, float]:
        while not self.lines:
            if self.head_size > self.limit:
                raise SSELineTooLong(self.head_size)
            if self.eof:
                raise StopAsyncIteration
            data = await self.content.readany()
            if not data:
                self.eof = True
                if self.head_size:
                    self.lines.append((b"".join(self.head), time.perf_counter()))
                continue
            pieces = self.arrivals.take(len(data)) if self.arrivals is not None else None
            if not pieces or pieces[-1][0] != len(data):  # not all of it stamped: what is not, arrived now
                pieces = [*(pieces or ()), (len(data), time.perf_counter())]
            pos = k = 0
            while (nl := data.find(b"\n", pos)) >= 0:
                line = data[pos:nl]
                if self.head:
                    line = b"".join((*self.head, line))
                    self.head, self.head_size = [], 0
                while pieces[k][0] <= nl:  # the piece its \n came in
                    k += 1
                self.lines.append((line, pieces[k][1]))
                pos = nl + 1
            if pos < len(data):
                self.head.append(data[pos:])
                self.head_size += len(data) - pos
        return self.lines.popleft()


class StreamState:
    """Accumulates what the stream says, chunk by chunk."""

    def __init__(self, t0: float, keep_text: bool, think_tags: bool = False):
        self.t0 = t0
        self.keep_text = keep_text
        self.think_tags = think_tags
        self.reasoning_chunks = 0
        self.answer_chunks = 0
        self._text = ""
        self._answer_started = False
        self.chunk_t: list[float] = []
        self.chunk_chars: list[int] = []
        self.chunk_text: list[str] = []
        self.content: list[str] = []
        self.reasoning_chars = 0
        self.reasoning: list[str] = []
        self.first_token_s: float | None = None
        self.first_answer_s: float | None = None
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.timings: TimingsRow | None = None
        self.tool_calls: dict[int, ToolCallRow] = {}  # by the stream's index
        self.done = False

    def feed(self, obj: JSONObject, now: float) -> None:
        """Take one SSE chunk (its JSON, not yet checked).  Anything of the wrong shape raises ValueError (the
        call is then ``malformed``): a usage whose counts are not token counts, content that is neither text nor
        text parts, choices or tool calls that are not objects."""
        if obj.get("usage"):
            self.usage = checked_usage(obj["usage"])
        if obj.get("timings"):
            self.timings = checked_timings(obj["timings"])
        choices = obj.get("choices") or []
        if not isinstance(choices, list) or not _all_objects(choices):
            raise ValueError("choices is not a list of objects")
        got_any = False
        for ch in choices:
            delta = ch.get("delta") or ch.get("message") or {}
            if not isinstance(delta, dict):
                raise ValueError(f"delta is not an object: {delta!r:.80}")
            text = delta.get("content")  # (as_text's common cases inline: this runs for every chunk of every stream)
            if text.__class__ is not str:
                text = as_text(text, "content")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning is None:
                reasoning = ""
            elif reasoning.__class__ is not str:
                reasoning = as_text(reasoning, "reasoning")
            if reasoning:
                self.reasoning_chars += len(reasoning)
                self.reasoning_chunks += 1
                if self.keep_text:
                    self.reasoning.append(reasoning)
            if text:
                self.content.append(text)
                if self.think_tags:
                    self._text += text
                if self.think_tags and not self._past_think():
                    self.reasoning_chunks += 1
                else:
                    self.answer_chunks += 1
                    if self.first_answer_s is None:
                        self.first_answer_s = now - self.t0
            calls = delta.get("tool_calls") or ()
            if calls and (not isinstance(calls, list) or not _all_objects(calls)):
                raise ValueError("tool_calls is not a list of objects")
            for tc in calls:
                idx = tc.get("index", len(self.tool_calls))
                slot = self.tool_calls.setdefault(idx, {"id": tc.get("id"), "name": "", "arguments": ""})
                fn = tc.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
                if tc.get("id"):
                    slot["id"] = tc["id"]
                got_any = True
            if text or reasoning:
                got_any = True
            if ch.get("finish_reason"):
                if not isinstance(ch["finish_reason"], str):
                    raise ValueError(f"finish_reason is not a string: {ch['finish_reason']!r:.80}")
                self.finish_reason = ch["finish_reason"]
            if got_any:
                self.chunk_t.append(now - self.t0)
                self.chunk_chars.append(len(text) + len(reasoning))
                if self.keep_text:
                    self.chunk_text.append(reasoning + text)
                if self.first_token_s is None:
                    self.first_token_s = now - self.t0


    def _past_think(self) -> bool:
        """With <think> tags: whether visible answer text has begun after </think>."""
        if self._answer_started:
            return True
        head = self._text.lstrip()
        if not head or "<think>".startswith(head[:7]) and len(head) < 7:
            return False  # nothing yet, or still possibly the opening tag
        if not head.startswith("<think>"):
            self._answer_started = True  # the model did not think aloud
            return True
        end = head.find("</think>")
        self._answer_started = end >= 0 and bool(head[end + 8:].strip())
        return self._answer_started


def _all_objects(items: list) -> bool:
    for x in items:
        if not isinstance(x, dict):
            return False
    return True


def split_think(content: str) -> tuple[str, str]:
    """(reasoning, answer) of a text whose reasoning is inside <think>...</think>."""
    start = content.find("<think>")
    if start < 0:
        return "", content
    end = content.find("</think>", start)
    if end < 0:  # cut inside the reasoning: no answer yet
        return content[start + 7:], content[:start]
    return content[start + 7:end], content[:start] + content[end + 8:]


def as_text(value: Any, what: str) -> str:
    """A delta's text: a string, null, or a list of OpenAI content parts (their ``text``); else ValueError."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        return "".join(str(p.get("text") or "") for p in value if p.get("type", "text") == "text")
    raise ValueError(f"{what} is neither text nor a list of text parts: {value!r:.80}")


def token_count(value: Any, where: str) -> int | None:
    """A usage count as an int (null stays None); a value that is not a whole, finite, non-negative number
    raises ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or value != int(value) or value > MAX_COUNT:
        raise ValueError(f"{where} is not a token count (a whole number from 0 to {MAX_COUNT:,}): {value!r:.40}")
    return int(value)


def checked_usage(usage: Any) -> Usage:
    """The usage object with its counts checked (:func:`token_count`); ValueError when it is of the wrong shape."""
    if not isinstance(usage, dict):
        raise ValueError(f"usage is not an object: {usage!r:.80}")
    out = dict(usage)
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if k in out:
            out[k] = token_count(out[k], f"usage.{k}")
    for details, key in (("prompt_tokens_details", "cached_tokens"), ("completion_tokens_details", "reasoning_tokens")):
        d = out.get(details)
        if d is None:
            continue
        if not isinstance(d, dict):
            raise ValueError(f"usage.{details} is not an object: {d!r:.80}")
        if key in d:
            out[details] = {**d, key: token_count(d[key], f"usage.{details}.{key}")}
    cached = (out.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is not None and out.get("prompt_tokens") is not None and cached > out["prompt_tokens"]:
        raise ValueError(f"usage.prompt_tokens_details.cached_tokens {cached} is more than usage.prompt_tokens "
                         f"{out['prompt_tokens']} (the cached tokens are part of the prompt)")
    return cast(Usage, out)


def checked_timings(timings: Any) -> TimingsRow:
    """llama.cpp's ``timings`` object checked by the ledger's own model of it (:class:`~leverbench.ledger.schema.
    Timings`: its counts and milliseconds are numbers), so that what the call records the ledger reads back;
    ValueError when it is of the wrong shape."""
    from pydantic import ValidationError  # noqa: PLC0415 (pydantic: imported by the ledger's schema anyway)

    if not isinstance(timings, dict):
        raise ValueError(f"timings is not an object: {timings!r:.80}")
    try:
        Timings.model_validate(timings)
    except ValidationError as err:
        e = err.errors()[0]
        raise ValueError(f"timings.{'.'.join(map(str, e['loc']))} is not a number: {e.get('input')!r:.40}") from None
    return cast(TimingsRow, timings)
