"""A stub HTTP server for a test: a few routes of an engine's API, each a coroutine, on a free loopback port for
the length of an ``async with``."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.Response]]


@asynccontextmanager
async def serving(routes: dict[tuple[str, str], Handler]) -> AsyncIterator[str]:
    """The base URL (``http://127.0.0.1:PORT``) of a server answering *routes* ((method, path) → handler)."""
    app = web.Application()
    for (method, path), handler in routes.items():
        app.router.add_route(method, path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def answering(body: object, status: int = 200) -> Handler:
    """A handler that answers *body* as JSON with *status*, whatever it is asked."""

    async def handle(request: web.Request) -> web.Response:
        return web.json_response(body, status=status)

    return handle
