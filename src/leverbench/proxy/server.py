"""The pass-through proxy: every request to the upstream as it came, every response back as it comes.

An aiohttp server with one route for every method and path, and one client session to the upstream (a pool of
kept-alive connections, no limit).  A request goes out with its method, path, query, body bytes and headers
(``Authorization`` included: forwarded, never stored; a compressed body as it came, still compressed) but those
that belong to one hop (``Connection``,
``Host``, ``Content-Length``, ...); the client adds none of its own (no ``User-Agent``, ``Accept`` or
``Accept-Encoding`` the agent did not send).  The response's status and headers go back the same way, and its
body byte for byte, each read passed on as it arrives (``auto_decompress`` off: a compressed body stays as the
upstream sent it).  The body is never parsed on the way: the chat exchanges (``POST .../chat/completions``) are
captured as bytes and arrival times and handed to :class:`~.writer.RecordingWriter`'s thread when the response
has gone; other paths (``/v1/models``, an engine's ``/props``; ``/v1/responses``, ``/v1/completions``) pass
through unrecorded, the POSTs among them counted (:attr:`RecordingProxy.unrecorded`: the closing line says them).

The path: a request's path goes to the upstream's host as it is.  The agent's base URL is the proxy's with the
upstream's path (``http://127.0.0.1:8099/v1`` for ``http://host:8000/v1``): the API's requests
(``/v1/chat/completions``) keep it, and an engine's own endpoints outside it (``/health``, ``/props``,
``/metrics``) reach the upstream's root, as they would straight.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, MultiMapping

from .exchange import RawExchange
from .writer import RecordingWriter

#: Headers of one hop (RFC 9110 7.6.1, and what each side's HTTP stack sets itself: the length, the host, a
#: 100-continue the proxy's server has answered already): never forwarded.
HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                         "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length", "expect"})
#: Headers aiohttp's client adds when a request lacks them: left out, so the upstream gets what the agent sent.
AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
CONNECT_S = 30.0  # a connection to the upstream; once connected, a response may take as long as it takes


def upstream_url(upstream: str, path_qs: str) -> str:
    """The upstream URL of a request for *path_qs* (see the module's docstring)."""
    parts = urlsplit(upstream)
    root = f"{parts.scheme}://{parts.netloc}"
    path = path_qs if path_qs.startswith("/") else "/" + path_qs
    return root + path  # the base path's own requests as they are; any other (``/health``) at the root


def is_chat(method: str, path: str) -> bool:
    return method == "POST" and path.rstrip("/").endswith("/chat/completions")


def _forwarded(headers: MultiMapping[str], drop: frozenset[str]) -> CIMultiDict[str]:
    """*headers* less those named in *drop* (lower case), each of a repeated header kept."""
    out: CIMultiDict[str] = CIMultiDict()
    for k, v in headers.items():
        if k.lower() not in drop:
            out.add(k, v)
    return out


class RecordingProxy:
    """The proxy (see the module's docstring), recording through *writer*; *session_header* names the request
    header an agent may name its session with (its value is recorded as the exchange's session)."""

    def __init__(self, upstream: str, writer: RecordingWriter | None, session_header: str = "X-Session-Id"):
        self.upstream = upstream
        self.writer = writer
        self.session_header = session_header
        self.unrecorded: Counter[str] = Counter()  # POSTs passed through unrecorded (/v1/responses, ...), by path
        self.session: aiohttp.ClientSession | None = None
        self.runner: web.AppRunner | None = None
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def start(self, host: str, port: int) -> str:
        """Listen on *host*:*port* (0: a free port); the proxy's root URL."""
        conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
        self.session = aiohttp.ClientSession(connector=conn, auto_decompress=False, skip_auto_headers=AUTO_HEADERS,
                                             timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_S))
        # auto_decompress off: a compressed request body goes on as sent, with its Content-Encoding
        self.runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=5.0, auto_decompress=False)
        try:
            await self.runner.setup()
            site = web.TCPSite(self.runner, host, port)
            await site.start()
        except BaseException:  # it cannot listen there: nothing left open (the client session's pool included)
            await self.stop()
            raise
        bound = self.runner.addresses[0]
        self.url = f"http://[{bound[0]}]:{bound[1]}" if ":" in bound[0] else f"http://{bound[0]}:{bound[1]}"
        return self.url

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        if self.session is not None:
            await self.session.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        body = await request.read()
        chat = self.writer is not None and is_chat(request.method, request.path)
        if request.method == "POST" and not is_chat(request.method, request.path):
            self.unrecorded[request.path] += 1  # (told when the proxy stops: only chat completions are recorded)
        raw = RawExchange(t_start=time.time(), method=request.method, path=request.path,
                          session=request.headers.get(self.session_header), request=body,
                          request_encoding=request.headers.get("Content-Encoding", "")) if chat else None
        assert self.session is not None
        try:
            up = await self.session.request(request.method, upstream_url(self.upstream, request.path_qs),
                                            headers=_forwarded(request.headers, HOP_HEADERS), data=body or None,
                                            allow_redirects=False)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            msg = f"leverbench record: cannot reach the upstream: {type(exc).__name__}: {exc}"
            if raw is not None:
                raw.error, raw.end_s = msg, time.perf_counter() - t0
                self._hand_over(raw)
            return web.json_response({"error": {"message": msg, "type": "proxy_error"}}, status=502)
        resp: web.StreamResponse | None = None
        try:
            resp = web.StreamResponse(status=up.status, reason=up.reason,
                                      headers=_forwarded(up.headers, HOP_HEADERS - {"content-length"}))
            await resp.prepare(request)
            if raw is not None:
                raw.status = up.status
                raw.content_type = up.headers.get("Content-Type", "")
                raw.content_encoding = up.headers.get("Content-Encoding", "")
            async for data in up.content.iter_any():
                await resp.write(data)
                if raw is not None:
                    raw.chunks.append((time.perf_counter() - t0, data))
            await resp.write_eof()
        except (ConnectionResetError, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            if raw is not None:
                gone = isinstance(exc, ConnectionResetError) or request.transport is None \
                    or request.transport.is_closing()
                raw.error = ("the client went away mid-response" if gone else
                             f"the upstream's response broke: {type(exc).__name__}: {exc}")
            up.close()
            if raw is not None:
                raw.end_s = time.perf_counter() - t0
                self._hand_over(raw)
            if resp is None or not resp.prepared:
                return web.Response(status=502)
            if request.transport is not None:  # the upstream broke off: so does the client's stream (never a clean end)
                request.transport.abort()
            return resp
        up.release()
        if raw is not None:
            raw.end_s = time.perf_counter() - t0
            self._hand_over(raw)
        return resp

    def _hand_over(self, raw: RawExchange) -> None:
        if self.writer is not None:
            self.writer.submit(raw)


async def serve(proxy: RecordingProxy, host: str, port: int, on_ready: Callable[[str], None]) -> None:
    """Run *proxy* on *host*:*port* until cancelled (Ctrl-C, SIGTERM, SIGHUP: ``leverbench record``); ``on_ready(url)``
    once it listens.  It starts no process: its port closes with it."""
    url = await proxy.start(host, port)
    on_ready(url)
    try:
        await asyncio.Event().wait()
    finally:
        await proxy.stop()
