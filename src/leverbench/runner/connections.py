"""The session leverbench calls an endpoint with, and its connections: connect time measured apart, dead
kept-alive connections met and tried through, and what the session learns of its server's habit.

:func:`client_session` makes the session (its trace hooks fill a :class:`ConnectTiming` per request);
:func:`post` sends a request, again while the kept-alive connection it went out on turns out dead;
:func:`after_stream` ends a stream's connection's turn: read to its end for the pool, or not, and while the
session does not yet know whether its server keeps connections, a look at whether it closed this one
(:class:`ServerHabit`).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import time
import weakref
from typing import Any, Awaitable, Callable

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.payload import BytesPayload

from ..workload.chat import ChatBody
from .strict_json import dumps as strict_dumps

IDLE_CLOSE_S = 2.0  # a kept-alive connection idle this long is closed by us, before a server would (llama.cpp: ~5 s)
STALE_MAX_S = 0.25  # a reused connection that fails this soon after the request went out was stale (sent again)
STALE_IN_A_ROW = 3  # stale connections in a row after which a session stops pooling (see ServerHabit)
DRAIN_S = 0.05  # how long a stream's end after [DONE] is waited for (outside the call's time), to reuse its connection


class ConnectTiming:
    """What the session's trace hooks saw of one request's connection (pass as ``trace_request_ctx``)."""

    __slots__ = ("start", "end", "reused", "stale", "sent_at", "wrote_at")

    def __init__(self) -> None:
        self.start: float | None = None
        self.end: float | None = None
        self.reused = False
        self.stale = False  # a reused connection turned out closed by the server; the call went out on a new one
        self.sent_at: float | None = None  # when aiohttp took the request's headers (time.perf_counter)
        self.wrote_at: float | None = None  # when the request went out: its body's write began (StampedPayload)

    @property
    def connect_s(self) -> float | None:
        """Seconds spent opening a new connection (DNS, TCP, TLS): create_end − create_start
        (``time.perf_counter``; after a stale connection, create_start is the call's start, so the
        failed try counts here too, and a live pooled connection taken after it counts from the start
        until then); 0.0 on a reused one; None when no connection was made or the
        session has no :func:`client_session` hooks (nothing measured)."""
        if self.reused and not self.stale:
            return 0.0
        if self.start is not None and self.end is not None:
            return self.end - self.start
        return None

    def send_s(self, t0: float) -> float | None:
        """Seconds from the connection ready (*t0*, the call's start, + :attr:`connect_s`) until the request went
        out (:attr:`wrote_at`); None when it was not seen going out.  The client's own queue: aiohttp writes a
        request's body from a task of its own (on Python < 3.12 not started at once), which a loop busy with
        many streams reaches late (at 128 new connections at once, 10-25 ms)."""
        if self.wrote_at is None:
            return None
        return max(0.0, self.wrote_at - (t0 + (self.connect_s or 0.0)))

    def out_at(self, t0: float) -> float:
        """When the request went out (``time.perf_counter``), from which a call's own times count: *t0* (the
        call's start) + :attr:`connect_s` + :meth:`send_s` (None counting as 0)."""
        return t0 + (self.connect_s or 0.0) + (self.send_s(t0) or 0.0)


class StampedPayload(BytesPayload):
    """A request's JSON body that notes in its :class:`ConnectTiming` when it began to go out (``wrote_at``): the
    request's headers are held back and go with it, so that is when the request left."""

    def __init__(self, value: bytes, conn: ConnectTiming, **kw: Any):
        super().__init__(value, content_type="application/json", **kw)
        self._conn = conn

    async def write(self, writer: Any) -> None:  # (what an aiohttp older than write_with_length calls)
        self._conn.wrote_at = time.perf_counter()
        await super().write(writer)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        self._conn.wrote_at = time.perf_counter()
        await super().write_with_length(writer, content_length)


def _timing(ctx: Any) -> ConnectTiming | None:
    t = getattr(ctx, "trace_request_ctx", None)
    return t if isinstance(t, ConnectTiming) else None


async def _on_create_start(session: Any, ctx: Any, params: Any) -> None:
    if (t := _timing(ctx)) is not None and not t.stale:  # after a stale connection: from the call's start
        t.start = time.perf_counter()


async def _on_create_end(session: Any, ctx: Any, params: Any) -> None:
    if (t := _timing(ctx)) is not None:
        t.end = time.perf_counter()


async def _on_headers_sent(session: Any, ctx: Any, params: Any) -> None:
    if (t := _timing(ctx)) is not None:
        t.sent_at = time.perf_counter()


def _calling(fn: Callable[[], None]) -> Callable[[Any, Any, Any], Awaitable[None]]:
    """A chunk-sent trace hook that calls *fn* once per request (at its first body chunk written)."""
    async def hook(session: Any, ctx: Any, params: Any) -> None:
        if not getattr(ctx, "leverbench_sent", False):
            ctx.leverbench_sent = True
            fn()
    return hook


async def _on_reuse(session: Any, ctx: Any, params: Any) -> None:
    if (t := _timing(ctx)) is not None:
        t.reused = True
        if t.stale:  # after a dead one, a live pooled connection: the time lost since the start is connect time
            t.end = time.perf_counter()


class StampedHandler(ResponseHandler):
    """aiohttp's protocol for a connection, noting when its latest bytes came in (``rx_at``,
    ``time.perf_counter()``, in the loop's I/O callback, before any task runs).  What arrived before a stream's
    reader could stamp it (:class:`~leverbench.runner.sse.Arrivals`: the first chunk that came with, or just
    after, the headers, while the call's task waited its turn on a busy loop) counts from there, not from when
    the task got round to it: with 128 streams answering together, the last task to resume would otherwise
    stamp its first token after the 127 others had run."""

    rx_at: float | None = None

    def data_received(self, data: bytes) -> None:
        self.rx_at = time.perf_counter()
        super().data_received(data)


def client_session(*, keep_alive: bool = True, on_sent: Callable[[], None] | None = None,
                   **connector_kw: Any) -> aiohttp.ClientSession:
    """The HTTP session leverbench calls an endpoint with: its connect time measured apart.

    ``keep_alive`` (the runner's default, for turns and load stages alike): connections are reused,
    and one idle for ``IDLE_CLOSE_S`` is closed by us first, so that a server's own idle close
    (uvicorn, llama.cpp: after ~5 s) never hands us a stale connection; one a server closed right
    after its response, unannounced, is met by :func:`_post`.  ``keep_alive=False``: a new
    connection per call.  Either way the trace hooks fill the :class:`ConnectTiming` that
    :func:`stream_chat` passes with each request; *on_sent* is called once per request, as its body has gone out.
    Create it inside a running event loop.
    """
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(_on_create_start)
    trace.on_connection_create_end.append(_on_create_end)
    trace.on_connection_reuseconn.append(_on_reuse)
    trace.on_request_headers_sent.append(_on_headers_sent)
    if on_sent is not None:
        trace.on_request_chunk_sent.append(_calling(on_sent))
    kw: dict[str, bool | float] = {"force_close": True} if not keep_alive else {"keepalive_timeout": IDLE_CLOSE_S}
    conn = aiohttp.TCPConnector(limit=0, **kw, **connector_kw)
    factory = getattr(conn, "_factory", None)  # (an aiohttp making its protocols otherwise: lines stamped when read)
    if isinstance(factory, functools.partial) and factory.func is ResponseHandler:
        conn._factory = functools.partial(StampedHandler, *factory.args, **factory.keywords)
    return aiohttp.ClientSession(connector=conn, trace_configs=[trace], json_serialize=strict_dumps)


class ServerHabit:
    """What a session has learnt of its server's connections.  A server that closes each one right after its
    response without saying so (llama.cpp's) hands every reused connection back dead: a failed try, its
    exception and a second request on the loop, per call; with many streams ending together, the pool full
    of dead ones, met one after the other, and on a loop too busy to see the close at once, calls failed.

    While nothing is known (``keeps`` and ``closes`` both false), each stream's end waits for the loop to
    have read what came after it (:func:`after_stream`) and looks whether its connection is still open:
    closed, the server ``closes`` them (open proves nothing: a busy server closes late); a reused
    connection that answered, it ``keeps`` them.  Learnt as well from ``STALE_IN_A_ROW`` dead reused
    connections with no good reuse between them (a server that closes late, or not always).
    Once it ``closes``, the session stops pooling, as with ``keep_alive = false`` (the connector's own
    ``force_close``): each call goes out on a new connection, closed when its response ends."""

    __slots__ = ("stale_in_a_row", "closes", "keeps")

    def __init__(self) -> None:
        self.stale_in_a_row = 0
        self.closes = False
        self.keeps = False

    def stale(self, session: aiohttp.ClientSession) -> None:
        self.stale_in_a_row += 1
        if self.stale_in_a_row >= STALE_IN_A_ROW:
            self.close_all(session)

    def reused(self) -> None:
        self.stale_in_a_row = 0
        self.keeps = self.keeps or not self.closes

    def close_all(self, session: aiohttp.ClientSession) -> None:
        """From now on a new connection per call, closed when its response ends (an aiohttp without the
        connector's ``_force_close`` goes on meeting dead ones, each tried through by :func:`post`)."""
        if not self.closes:
            self.closes = True
            if hasattr(session.connector, "_force_close"):
                session.connector._force_close = True


_HABITS: weakref.WeakKeyDictionary[aiohttp.ClientSession, ServerHabit] = weakref.WeakKeyDictionary()


def server_habit(session: aiohttp.ClientSession) -> ServerHabit:
    """The session's :class:`ServerHabit` (one per session, made on first use)."""
    habit = _HABITS.get(session)
    if habit is None:
        habit = _HABITS[session] = ServerHabit()
    return habit


async def post(session: aiohttp.ClientSession, url: str, body: ChatBody, headers: dict[str, str] | None,
                timeout: aiohttp.ClientTimeout, conn: ConnectTiming, t0: float) -> aiohttp.ClientResponse:
    """POST, and again while the kept-alive connection it went out on turns out stale.

    A server may close a connection right after a response without saying so (llama.cpp's
    llama-server does after every streamed one, though it sends ``Keep-Alive``); a request sent on it
    before its close arrived fails before any response (cannot write, or the server disconnects).
    The server never answered it, so it goes out again (``conn.stale``), as HTTP clients do for a
    request on a reused connection that got nothing back.  The pool's next connection may be as dead
    (other calls' streams ended at the same time): each try takes one dead connection out of the pool,
    until a new one is opened or a live one answers (a failure on a new connection is the call's).  The
    session learns from it (:class:`ServerHabit`).
    """
    habit = server_habit(session)
    data = strict_dumps(body).encode()
    while True:
        try:
            resp = await session.post(url, data=StampedPayload(data, conn), headers=headers, timeout=timeout,
                                      trace_request_ctx=conn)
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
            if not conn.reused:
                raise
            # a reused connection dead without a response: the habit learns of it even when the failure is seen
            # late (a loop so busy that it read the close after STALE_MAX_S).  The call goes out again when the
            # server cannot have read the request (_unread), or when the failure came at once; not otherwise (a
            # server that took the request and worked on it before closing did answer it, in its way: that is
            # not sent again)
            habit.stale(session)
            # late: the failure came STALE_MAX_S after the request went out (its write began: aiohttp takes the
            # headers first and writes them with the body from a task of its own, which a busy loop runs late); one
            # that never went out the server cannot have read
            late = conn.wrote_at is not None and time.perf_counter() - conn.wrote_at > STALE_MAX_S
            if late and not _unread(exc):
                raise
            conn.reused, conn.stale, conn.start, conn.sent_at, conn.wrote_at = False, True, t0, None, None
            continue
        if conn.reused:
            habit.reused()
        return resp


def _unread(exc: BaseException) -> bool:
    """The server cannot have read the request: aiohttp could not write its body (the connection was closed
    before it was out), or the server's end reset the connection (its kernel answers data that reaches a
    closed socket, or that a socket closed unread, with a reset; a server that read the request and then
    closed sends an orderly close, read as ServerDisconnectedError)."""
    if not isinstance(exc, aiohttp.ClientOSError):
        return False
    return exc.errno in (errno.ECONNRESET, errno.EPIPE) or "Can not write request body" in str(exc)


async def _drain(resp: aiohttp.ClientResponse) -> bool:
    """Read what a stream sends after ``[DONE]`` (the end of its chunked body) for at most ``DRAIN_S``,
    so that its connection can go back to the pool: one left unread is closed.  A server that keeps
    the stream open after ``[DONE]`` just loses its connection.  Whether the body was read to its end."""
    try:
        async with asyncio.timeout(DRAIN_S):
            await resp.content.read()
    except (TimeoutError, aiohttp.ClientError):
        return False
    return True


def protocol_of(resp: aiohttp.ClientResponse) -> Any:
    """The protocol (aiohttp's ``ResponseHandler``) of the connection *resp* came on, even when it is already
    back in the pool (a body that came whole with the headers); None when unknown."""
    connection = resp.connection
    if connection is not None:
        return connection.protocol
    return getattr(resp, "_protocol", None)  # (ClientResponse.start keeps it there)


async def after_stream(session: aiohttp.ClientSession, resp: aiohttp.ClientResponse, proto: Any) -> None:
    """A stream ended ([DONE]; outside the call's time): its connection back to the pool, read to its end
    (:func:`_drain`), unless it is not pooled; and while the session does not know its server's habit,
    two turns of the loop (the second after the I/O the first one's select brought: a close that came
    with or just after the stream's end has been read), then whether *proto* (the response's connection's
    protocol) is still open.  The next call of a closed loop goes out after this, so that with many
    streams ending together none goes out on a connection already known dead."""
    connector = session.connector
    if connector is None or connector.force_close:  # closed when the response ends: nothing to read or learn
        return
    whole = await _drain(resp)
    habit = server_habit(session)
    if habit.keeps or habit.closes or proto is None or not whole:  # (one not read to its end we close)
        return
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    if not proto.is_connected():
        habit.close_all(session)
