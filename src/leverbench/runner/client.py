"""One streaming chat-completions call against an OpenAI-compatible endpoint.

The client measures and records; it computes no statistics.  Every call ends
as a :class:`~leverbench.ledger.records.CallRecord`, its measured fields
filled, with ``error`` set (never raised) when the call failed, so a failure
is recorded exactly like a success.  The error classes, and what each means,
are :class:`~leverbench.ledger.records.ErrorClass` (the client produces all
but ``engine_died``, which the runner sets).  A call cancelled (Ctrl-C) while
in flight raises :class:`CallCancelled`, which carries its record (class
``cancelled``: what had arrived, the latency so far).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import NamedTuple

import aiohttp

from ..config import TimeoutsSpec as Timeouts  # a call's time limits, defined once with the experiment file's
from ..ledger.records import CallError, CallRecord, ErrorClass
from ..redact import redact_text
from ..workload.chat import ChatBody, ChatMessage
from .connections import ConnectTiming, after_stream, post, protocol_of
from .connections import client_session as client_session  # (the runner's and the tests' import of it)
from .sse import SSELines, SSELineTooLong, StreamState, Usage, split_think


class IdleWatch:
    """The idle limit between a stream's chunks, without a timer per chunk: each line only notes when it
    arrived (``last``); one timer, set ``idle_s`` after the latest note it has seen, looks again when it
    fires, and only when nothing came for ``idle_s`` ends the call (it sets *deadline*, the call's
    ``asyncio.timeout``, to now: ``expired`` tells the TimeoutError apart from the total's).  Rescheduling the
    timeout at every chunk cost two timer handles and a heap push per SSE line, on the loop, for every
    stream in flight."""

    __slots__ = ("deadline", "idle_s", "last", "expired", "_handle", "_loop")

    def __init__(self, deadline: asyncio.Timeout, idle_s: float, last: float):
        self.deadline, self.idle_s, self.last, self.expired = deadline, idle_s, last, False
        self._loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = self._loop.call_later(idle_s, self._check)

    def _check(self) -> None:
        quiet = time.perf_counter() - self.last  # ``last``: time.perf_counter() of the latest line's arrival
        if self.deadline.expired():  # the total limit came first
            self._handle = None
        elif quiet >= self.idle_s:
            self.expired, self._handle = True, None
            self.deadline.reschedule(self._loop.time())
        else:
            self._handle = self._loop.call_later(self.idle_s - quiet, self._check)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def messages_sha256(messages: list[ChatMessage]) -> str:
    text = json.dumps(messages, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()  # (a lone surrogate, JSON's, as it is)


def _error(cls: ErrorClass, message: str) -> CallError:
    """A call's error; URLs and query values in *message* redacted (:func:`~leverbench.redact.redact_text`)."""
    return CallError(cls, redact_text(message)[:500])


class Streamed(NamedTuple):
    """What :func:`stream_chat` returns: the call's record, and beside it the text the runner's next step
    needs (the conversation goes on with the answer; an uncounted call is counted from both)."""

    record: CallRecord
    content: str  # the answer (a <think> part taken out)
    reasoning: str  # the reasoning text (reasoning_content, or the <think> part)


class CallCancelled(asyncio.CancelledError):
    """The task was cancelled (Ctrl-C) during a call; ``streamed`` is what :func:`stream_chat` had, its
    record of class ``cancelled``.

    A :class:`asyncio.CancelledError`, so the cancellation goes on for callers that do not record it.
    """

    def __init__(self, streamed: Streamed):
        super().__init__("call cancelled")
        self.streamed = streamed


def _body_error_message(status: int, body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or json.dumps(err)[:300]
        else:
            msg = str(err)
    except (json.JSONDecodeError, AttributeError):
        msg = text.strip()[:300] or "(empty body)"
    return f"HTTP {status}: {msg}"


def _set_usage(rec: CallRecord, usage: Usage | None) -> None:
    """The record's token counts from the stream's (checked) usage; none sent: all None, token_source "none"."""
    if not usage:
        rec.prompt_tokens = rec.completion_tokens = rec.cached_tokens = rec.reasoning_tokens = None
        rec.token_source = "none"
        return
    rec.prompt_tokens = usage.get("prompt_tokens")
    rec.completion_tokens = usage.get("completion_tokens")
    rec.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    rec.reasoning_tokens = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    rec.token_source = "usage"


async def stream_chat(
    session: aiohttp.ClientSession,
    url: str,
    body: ChatBody,
    *,
    headers: dict[str, str] | None = None,
    timeouts: Timeouts = Timeouts(),
    keep_text: bool = False,
    think_tags: bool = False,
    record: CallRecord | None = None,
) -> Streamed:
    """POST *body* (streaming) to *url*; the measured fields of *record* (a new :class:`CallRecord` when
    None: the caller sets the head, who the call is) are filled, and it comes back with the answer's text.

    Times: ``t_send`` is the epoch time the call started; ``connect_s`` the seconds it spent
    opening a new connection (0.0 on a reused one; None when none was made or the session is not
    a :func:`client_session`); ``send_s`` the seconds from then until the request went out (the
    client's own queue: :meth:`~.connections.ConnectTiming.send_s`); every other time (``ttft_s``,
    ``latency_s``, ``chunk_t``) is seconds after the request went out, i.e. after start + connect_s +
    send_s (``time.perf_counter``), so that neither connect and TLS time nor the client's own delay
    hide in them: the call's full time is connect_s + send_s + latency_s.
    """
    body = {**body, "stream": True}
    body.setdefault("stream_options", {"include_usage": True})
    t_send = time.time()
    t0 = time.perf_counter()
    st = StreamState(t0, keep_text, think_tags)
    conn = ConnectTiming()
    t_done: float | None = None
    status: int | None = None
    error: CallError | None = None
    phase = "connect"
    loop = asyncio.get_running_loop()
    start = loop.time()
    total_deadline = start + timeouts.total_s
    # which deadline the one timer is set to: the first token's, then the total's (the idle gap: IdleWatch)
    armed = "first_token" if timeouts.first_token_s < timeouts.total_s else "total"
    # connect covers the whole connection's establishment, DNS included (sock_connect only the TCP part)
    timeout = aiohttp.ClientTimeout(total=None, connect=timeouts.connect_s, sock_connect=timeouts.connect_s,
                                    sock_read=None)
    idle: IdleWatch | None = None
    try:
        async with asyncio.timeout_at(start + min(timeouts.first_token_s, timeouts.total_s)) as deadline:
            async with await post(session, url, body, headers, timeout, conn, t0) as resp:
                st.t0 = conn.out_at(t0)  # chunk times count from when the request went out
                proto = protocol_of(resp)
                status = resp.status
                phase = "response"
                if status >= 400:
                    raw = await resp.read()
                    error = _error(ErrorClass.HTTP_STATUS, _body_error_message(status, raw))
                else:
                    # each line comes with the time its bytes arrived (sse.Arrivals), not the time it is parsed
                    async for raw_line, now in SSELines(resp.content, rx_at=getattr(proto, "rx_at", None)):
                        if idle is not None:
                            idle.last = now
                        line = raw_line.strip()
                        if not line or line.startswith(b":") or not line.startswith(b"data:"):
                            continue
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            st.done = True
                            t_done = now
                            break
                        try:
                            obj = json.loads(data)
                            if not isinstance(obj, dict):
                                raise ValueError("not an object")
                            if "error" in obj and not obj.get("choices"):
                                e = obj["error"]
                                msg = e.get("message") if isinstance(e, dict) else str(e)
                                error = _error(ErrorClass.HTTP_STATUS, f"error event in stream: {msg}")
                                break
                            st.feed(obj, now)
                        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
                            error = _error(ErrorClass.MALFORMED, f"bad SSE data line: {exc}: {data[:120]!r}")
                            break
                        if idle is None and st.first_token_s is not None:  # from now on: the idle gap, the total
                            if armed == "first_token":
                                armed = "total"
                                deadline.reschedule(total_deadline)
                            idle = IdleWatch(deadline, timeouts.idle_s, now)
                    if idle is not None:
                        idle.stop()
                    if st.done:  # the call's time ends here; what follows [DONE] is read outside it
                        deadline.reschedule(None)
                        await after_stream(session, resp, proto)
    except asyncio.CancelledError:  # Ctrl-C: record what arrived, then let the cancellation go on (below)
        error = _error(ErrorClass.CANCELLED, "the run was interrupted while the call was in flight")
    except SSELineTooLong as exc:
        error = _error(ErrorClass.MALFORMED, str(exc))
    except aiohttp.ServerTimeoutError:  # before TimeoutError, which it subclasses on Python 3.11+
        error = _error(ErrorClass.TIMEOUT_CONNECT, f"connect timed out after {timeouts.connect_s:g} s")
    except TimeoutError:
        if idle is not None and idle.expired:
            armed = "idle"
        if armed == "first_token":
            error = _error(ErrorClass.TIMEOUT_FIRST_TOKEN, f"no token within {timeouts.first_token_s:g} s")
        elif armed == "idle":
            error = _error(ErrorClass.TIMEOUT_IDLE, f"no data for {timeouts.idle_s:g} s between chunks")
        else:
            error = _error(ErrorClass.TIMEOUT_TOTAL, f"call exceeded {timeouts.total_s:g} s")
    except aiohttp.ClientConnectorError as exc:
        error = _error(ErrorClass.CONNECT, f"cannot connect to {url}: {exc.os_error.strerror if exc.os_error else exc}")
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        if phase == "connect" and conn.sent_at is None:
            error = _error(ErrorClass.CONNECT, f"cannot send: {type(exc).__name__}: {exc}")
        elif phase == "connect":  # the request went out; the server closed without a response
            error = _error(ErrorClass.STREAM_CUT, f"no response: the connection closed "
                                                  f"{time.perf_counter() - (conn.wrote_at or conn.sent_at):.2f} s "
                                                  f"after the request was sent ({type(exc).__name__}: {exc})")
        else:
            error = _error(ErrorClass.STREAM_CUT, f"stream broken: {type(exc).__name__}: {exc}")
    except aiohttp.ClientResponseError as exc:  # not HTTP (a garbage status line, bad headers)
        error = _error(ErrorClass.MALFORMED, f"not an HTTP response: {type(exc).__name__}: {exc}")
    except aiohttp.ClientError as exc:
        error = _error(ErrorClass.CONNECT if status is None and conn.sent_at is None else ErrorClass.STREAM_CUT,
                       f"{type(exc).__name__}: {exc}")
    finally:
        if idle is not None:
            idle.stop()
    t_end = (t_done if t_done is not None else time.perf_counter()) - conn.out_at(t0)
    if error is None and status is not None and status < 400:
        if not st.done and st.finish_reason is None:
            error = _error(ErrorClass.STREAM_CUT, "stream ended without a finish reason or [DONE]")
        elif st.usage is None:
            error = _error(ErrorClass.NO_USAGE, "the server sent no token usage; output volume unknown")
    content = "".join(st.content)
    think = ""
    if think_tags:
        think, content = split_think(content)
    reasoning_text = "".join(st.reasoning) + think
    tool_calls = [st.tool_calls[k] for k in sorted(st.tool_calls)] or None
    rec = record if record is not None else CallRecord()
    rec.t_send = t_send
    rec.connect_s = conn.connect_s
    send_s = conn.send_s(t0)
    rec.send_s = round(send_s, 6) if send_s is not None else None
    rec.stale_connection = True if conn.stale else None
    rec.ttft_s = st.first_token_s
    rec.t_first_answer_s = st.first_answer_s
    rec.latency_s = t_end
    rec.chunk_t = [round(t, 6) for t in st.chunk_t]
    rec.chunk_chars = st.chunk_chars
    rec.status = status
    rec.error = error
    _set_usage(rec, st.usage)
    rec.content_chars = len(content)
    rec.reasoning_chars = st.reasoning_chars + len(think)
    rec.reasoning_chunks = st.reasoning_chunks
    rec.answer_chunks = st.answer_chunks
    rec.finish_reason = st.finish_reason
    rec.empty_answer = error is None and st.finish_reason == "length" and not content.strip() and not tool_calls
    rec.tool_calls = tool_calls
    rec.timings = st.timings
    rec.output_sha256 = hashlib.sha256(content.encode()).hexdigest()
    if keep_text:
        rec.output_text = content
        rec.reasoning_text = reasoning_text
        rec.chunk_text = st.chunk_text
    streamed = Streamed(rec, content, reasoning_text)
    if error is not None and error.cls == ErrorClass.CANCELLED:
        raise CallCancelled(streamed)
    return streamed
