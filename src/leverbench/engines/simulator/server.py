"""The simulator's HTTP side: its routes per dialect (the cache-reset endpoints among them), the aiohttp app, and
running it (a process or a thread)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from aiohttp import web

from . import dialects
from .answer import parse_chat_request
from .config import SimConfig
from .exchange import Exchange, Trace
from .state import SimState
from .tokens import TOKEN_ID_SPACE, chat_prompt_tokens, stable_int, token_ids

STATE = web.AppKey("sim_state", SimState)


def _error(status: int, message: str, kind: str, dialect: str = "llama.cpp") -> web.Response:
    return web.json_response(dialects.error_body(dialect, status, message, kind), status=status)


async def handle_chat(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    dialect = state.cfg.dialect
    trace = Trace(id=state.next_id(), arrival=time.time(), received=getattr(request.protocol, "rx_at", None))
    faults = state.draw_faults()  # before any await: draws follow arrival order
    try:
        req = parse_chat_request(await request.json(), dialect, state.cfg.template_tools)
    except ValueError as err:  # includes json.JSONDecodeError
        return _error(400, str(err), "invalid_request_error", dialect)
    trace.prompt_tokens, trace.stream = len(req.prompt), req.stream
    for fault, status, message, kind in (
        ("http_500", 500, "simulated internal error", "server_error"),
        ("http_429", 429, "simulated rate limit", "rate_limit_error"),
    ):
        if fault in faults:
            trace.fault, trace.end = fault, time.time()
            state.truth.append(asdict(trace))
            return _error(status, message, kind, dialect)
    return await Exchange(state, request, req, trace, faults).run()


async def handle_health(request: web.Request) -> web.Response:
    if request.app[STATE].cfg.dialect == "llama.cpp":
        return web.json_response({"status": "ok"})
    return web.Response(status=200)  # vLLM and SGLang answer 200 with an empty body


async def handle_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.json_response(dialects.models_body(state.cfg, state.started))


async def handle_props(request: web.Request) -> web.Response:
    """llama.cpp's ``/props`` (the fields leverbench reads), plus ``sim``: the whole config."""
    cfg = request.app[STATE].cfg
    return web.json_response(
        {
            "default_generation_settings": {"n_ctx": dialects.CONTEXT_LENGTH},
            "model_path": cfg.model_path,
            "model_alias": cfg.model,
            "total_slots": cfg.slots,
            "build_info": cfg.engine_version,
            "chat_template_caps": {"supports_tools": cfg.template_tools, "supports_tool_calls": cfg.template_tools,
                                   "supports_system_role": True, "supports_string_content": True},
            "sim": asdict(cfg),
        }
    )


async def handle_slots(request: web.Request) -> web.Response:
    """llama.cpp's ``/slots``: per slot, whether a drafter is loaded (``speculative``)."""
    cfg = request.app[STATE].cfg
    slots = [{"id": i, "n_ctx": dialects.CONTEXT_LENGTH, "speculative": bool(cfg.draft_k), "is_processing": False}
             for i in range(cfg.slots)]
    return web.json_response(slots)


async def handle_tokenize(request: web.Request) -> web.Response:
    """llama.cpp: ``{"content"}`` → ``{"tokens"}``; vLLM and SGLang: ``{"model", "prompt"}`` or
    ``{"model", "messages"}`` → ``{"count", "max_model_len", "tokens"}``."""
    cfg = request.app[STATE].cfg
    try:
        body = await request.json()
        if cfg.dialect == "llama.cpp":
            content = body["content"]
            if not isinstance(content, str):
                raise TypeError
            return web.json_response({"tokens": token_ids(content)})
        if isinstance(body.get("messages"), list):
            tools = body.get("tools") if cfg.template_tools and isinstance(body.get("tools"), list) else None
            ids = [stable_int(w) % TOKEN_ID_SPACE for w in chat_prompt_tokens(body["messages"], tools)]
        elif isinstance(body.get("prompt"), str):
            ids = token_ids(body["prompt"])
        else:
            raise TypeError
    except (ValueError, KeyError, TypeError, AttributeError):
        shape = '{"content": "<text>"}' if cfg.dialect == "llama.cpp" else '{"model": ..., "prompt": "<text>"}'
        return _error(400, f"body must be {shape}", "invalid_request_error", cfg.dialect)
    return web.json_response({"count": len(ids), "max_model_len": dialects.CONTEXT_LENGTH, "tokens": ids,
                              "token_strs": None})


async def handle_apply_template(request: web.Request) -> web.Response:
    """llama.cpp's ``POST /apply-template {messages, tools}`` → ``{"prompt"}``: the prompt the chat template renders
    (here the prompt's tokens joined by spaces, so that ``/tokenize`` counts what a chat request would; tools
    left out without ``template_tools``, as the chat endpoint leaves them out)."""
    cfg = request.app[STATE].cfg
    try:
        body = await request.json()
        tools = body.get("tools") if cfg.template_tools else None
        prompt = chat_prompt_tokens(body["messages"], tools if isinstance(tools, list) else None)
    except (ValueError, KeyError, TypeError, AttributeError):
        return _error(400, 'body must be {"messages": [...], "tools": [...]}', "invalid_request_error", cfg.dialect)
    return web.json_response({"prompt": " ".join(prompt)})


async def handle_version(request: web.Request) -> web.Response:
    return web.json_response({"version": request.app[STATE].cfg.engine_version})


async def handle_model_info(request: web.Request) -> web.Response:
    cfg = request.app[STATE].cfg
    return web.json_response({"model_path": cfg.model_path, "tokenizer_path": cfg.model_path, "is_generation": True,
                              "preferred_sampling_params": None, "weight_version": "default"})


async def handle_server_info(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.json_response(dialects.sglang_server_info(state.cfg, state.slots.running, state.slots.waiting))


async def handle_metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.metrics is None:  # not started with metrics on (SGLang's default)
        return web.Response(status=404, text="Not Found")
    text = state.metrics.render(state.phase_counts())
    return web.Response(text=text, content_type="text/plain", charset="utf-8")


# ---------------------------------------------------------------------- cache resets
#
# Each engine's own way to empty its prefix cache, as ``SimConfig.cache_reset`` sets it: "on" (the endpoint exists
# and clears SimState.cache), "off" (as on a server started without it), "fake" (the same status and body as "on",
# the cache kept: a reset acknowledged, not performed, as llama.cpp's --cache-ram prompt cache still served a prompt
# erased from its slot, measured on b11549).  None of them touches the drafter's memory (SimState.draft_memory);
# POST /sim/reset clears everything.  The openai dialect (a hosted API) has no such endpoint, whatever the setting.

LLAMA_SLOTS_OFF = "This server does not support slots action. Start it with `--slot-save-path`"
SGLANG_FLUSHED = ("Cache flushed.\nPlease check backend logs for more details. "
                  "(When there are running or waiting requests, the operation will not be performed.)\n")
SGLANG_NOT_FLUSHED = "Flush cache failed.\n"
SGLANG_FLUSH_BUSY = "Another flush_cache is already in progress."
SGLANG_FLUSH_TIMEOUT = "Timed out waiting for idle state."
IDLE_POLL_S = 0.005  # how often a deferred SGLang flush looks whether the server is idle
# pydantic's (so FastAPI's) strings for a bool query parameter, as vLLM parses its own
_BOOL_STRINGS = {**dict.fromkeys(("1", "on", "t", "true", "y", "yes"), True),
                 **dict.fromkeys(("0", "off", "f", "false", "n", "no"), False)}


def _reset_cache(state: SimState) -> None:
    """An acknowledged reset: clears the prefix cache with ``cache_reset`` "on", nothing with "fake"."""
    if state.cfg.cache_reset == "on":
        state.cache.clear()


async def handle_slot_action(request: web.Request) -> web.Response:
    """llama.cpp's ``POST /slots/{id_slot}?action=...`` (``tools/server/server-context.cpp``: ``post_slots``
    and the ``SERVER_TASK_TYPE_SLOT_ERASE`` task).  Checked in llama.cpp's order: without ``--slot-save-path``
    (``cache_reset`` "off") every action answers 501 ``not_supported_error``; an id that is not a number (read
    as ``std::stoi`` does: its leading integer) 400 "Invalid slot ID"; an action other than save, restore,
    erase 400 "Invalid action"; ``erase`` of an id outside [0, slots) 400 "Invalid slot ID"; else 200
    ``{"id_slot", "n_erased"}``.  ``save`` and ``restore`` (a file under ``--slot-save-path``) answer 501
    ``not_supported_error``: the simulator has no KV to write.

    Simplification: llama.cpp keeps one KV per slot and erases that slot's; the simulator's cache is shared
    by all slots, so erasing any slot empties all of it (the tool erases every slot ``GET /slots`` lists), and
    ``n_erased`` counts the tokens the whole cache held.  As llama.cpp defers an erase of a busy slot until it
    is free, the erase takes its turn for a slot (first come, first served) before it acts."""
    state = request.app[STATE]
    if state.cfg.cache_reset == "off":
        return _error(501, LLAMA_SLOTS_OFF, "not_supported_error")
    number = re.match(r"\s*[+-]?\d+", request.match_info["id_slot"])
    if number is None:
        return _error(400, "Invalid slot ID", "invalid_request_error")
    id_slot, action = int(number.group()), request.query.get("action", "")
    if action in ("save", "restore"):
        return _error(501, f"The simulator does not support slot {action} (only erase)", "not_supported_error")
    if action != "erase":
        return _error(400, "Invalid action", "invalid_request_error")
    if not 0 <= id_slot < state.cfg.slots:
        return _error(400, "Invalid slot ID", "invalid_request_error")
    await state.slots.acquire()
    try:
        n_erased = state.cache.tokens
        _reset_cache(state)
    finally:
        state.slots.release()
    return web.json_response({"id_slot": id_slot, "n_erased": n_erased})


async def handle_reset_prefix_cache(request: web.Request) -> web.Response:
    """vLLM's ``POST /reset_prefix_cache`` (served only with ``VLLM_SERVER_DEV_MODE=1``: ``cache_reset`` "off"
    leaves the route out, 404; source: ``vllm/entrypoints/serve/dev/cache/api_router.py``, the scheduler's
    ``reset_prefix_cache``).  Query parameters ``reset_running_requests`` and ``reset_external`` (booleans,
    default false; one that is not a boolean: 400).  Answers 200 ``{"success": true}`` and clears the cache;
    while requests are running (they hold blocks) 200 ``{"success": false}`` and keeps it, unless
    ``reset_running_requests=true``, where vLLM preempts them to recompute and clears (the simulator clears and
    lets them run on).  ``reset_external`` resets a KV connector's cache: none here.  vLLM before 0.26 answered
    200 with an empty body, whatever happened."""
    state = request.app[STATE]
    flags = {}
    for name in ("reset_running_requests", "reset_external"):
        raw = request.query.get(name, "false")
        if raw.lower() not in _BOOL_STRINGS:
            return _error(400, f"Input should be a valid boolean, unable to interpret input (query {name}: {raw!r})",
                          "BadRequestError", "vllm")
        flags[name] = _BOOL_STRINGS[raw.lower()]
    if state.slots.running and not flags["reset_running_requests"]:
        return web.json_response({"success": False})
    _reset_cache(state)
    return web.json_response({"success": True})


async def handle_flush_cache(request: web.Request) -> web.Response:
    """SGLang's ``/flush_cache``, GET or POST (``python/sglang/srt/entrypoints/http_server.py``, the scheduler's
    ``flush_cache`` and its flush wrapper); SGLang always serves it, so ``cache_reset`` "off" (404) stands for a
    front that does not pass it on.  Idle (no request running or waiting): 200 with SGLang's text
    (:data:`SGLANG_FLUSHED`) and the cache cleared.  Busy: 400 "Flush cache failed.\\n" and nothing done, or
    with ``?timeout=S`` (> 0) it waits up to S seconds for the server to be idle, then flushes (200) or answers
    400 "Timed out waiting for idle state."; while such a flush waits, another answers 400 "Another flush_cache
    is already in progress.".  A ``timeout`` that is not a number >= 0: 400 in SGLang's error shape.  (SGLang
    before its deferred flush, March 2026, sent its success text with the 400 too.)"""
    state = request.app[STATE]
    raw = request.query.get("timeout", "0")
    try:
        timeout = float(raw)
    except ValueError:
        timeout = -1.0
    if not timeout >= 0:
        return _error(400, f"Input should be a valid number greater than or equal to 0 (query timeout: {raw!r})",
                      "Bad Request", "sglang")
    if state.flush_pending:
        return web.Response(status=400, text=SGLANG_FLUSH_BUSY)

    def busy() -> bool:
        return bool(state.slots.running or state.slots.waiting)

    if busy():
        if timeout <= 0:
            return web.Response(status=400, text=SGLANG_NOT_FLUSHED)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        state.flush_pending = True
        try:
            while busy() and loop.time() < deadline:
                await asyncio.sleep(IDLE_POLL_S)
        finally:
            state.flush_pending = False
        if busy():
            return web.Response(status=400, text=SGLANG_FLUSH_TIMEOUT)
    _reset_cache(state)
    return web.Response(text=SGLANG_FLUSHED)


def _cache_reset_routes(cfg: SimConfig) -> list[tuple[str, str, Callable[..., Any]]]:
    """The dialect's cache-reset route(s): llama.cpp's always (it answers 501 when "off"), vLLM's and SGLang's
    unless "off", none for the openai dialect."""
    if cfg.dialect == "llama.cpp":
        return [("POST", "/slots/{id_slot}", handle_slot_action)]
    if cfg.cache_reset == "off":
        return []
    if cfg.dialect == "vllm":
        return [("POST", "/reset_prefix_cache", handle_reset_prefix_cache)]
    if cfg.dialect == "sglang":
        return [("GET", "/flush_cache", handle_flush_cache), ("POST", "/flush_cache", handle_flush_cache)]
    return []


# ---------------------------------------------------------------------- the simulator's own


async def handle_truth(request: web.Request) -> web.Response:
    return web.json_response(list(request.app[STATE].truth))


async def handle_reset(request: web.Request) -> web.Response:
    """``POST /sim/reset``: a new process, as far as state goes (truth, prefix cache, the drafter's memory)."""
    request.app[STATE].reset()
    return web.json_response({"status": "ok"})


_ENGINE_ROUTES: dict[str, list[tuple[str, str, Callable[..., Any]]]] = {
    "llama.cpp": [("GET", "/health", handle_health), ("GET", "/props", handle_props), ("GET", "/slots", handle_slots),
                  ("POST", "/tokenize", handle_tokenize), ("POST", "/apply-template", handle_apply_template),
                  ("GET", "/metrics", handle_metrics)],
    "vllm": [("GET", "/health", handle_health), ("GET", "/version", handle_version),
             ("POST", "/tokenize", handle_tokenize), ("GET", "/metrics", handle_metrics)],
    "sglang": [("GET", "/health", handle_health), ("GET", "/get_model_info", handle_model_info),
               ("GET", "/get_server_info", handle_server_info), ("POST", "/tokenize", handle_tokenize),
               ("GET", "/metrics", handle_metrics)],
    "openai": [],
}


def build_app(cfg: SimConfig) -> web.Application:
    """The simulator as an aiohttp application (state in ``app[STATE]``): chat and the model list
    under ``cfg.base_path``, the dialect's engine endpoints at the root, ``/sim/*`` always."""
    app = web.Application(client_max_size=256 * 1024**2)
    app[STATE] = SimState(cfg)
    app.router.add_post(cfg.base_path + "/chat/completions", handle_chat)
    app.router.add_get(cfg.base_path + "/models", handle_models)
    for method, path, handler in _ENGINE_ROUTES[cfg.dialect] + _cache_reset_routes(cfg):
        app.router.add_route(method, path, handler)
    app.router.add_get("/sim/truth", handle_truth)
    app.router.add_post("/sim/reset", handle_reset)
    return app


# ---------------------------------------------------------------------- running


def _base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def _start(app: web.Application, host: str, port: int, shutdown_timeout: float) -> tuple[web.AppRunner, str]:
    """Bind and start ``app``; returns the runner and the base URL with the real port."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, _base_url(host, runner.addresses[0][1])


def serve(
    cfg: SimConfig, host: str = "127.0.0.1", port: int = 8090, *, on_ready: Callable[[str], None] | None = None
) -> None:
    """Run the simulator until interrupted; ``on_ready(base_url)`` (default: print it) once bound."""

    async def main() -> None:
        runner, url = await _start(build_app(cfg), host, port, shutdown_timeout=5.0)
        (on_ready or (lambda u: print(u, flush=True)))(url)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass


class SimulatorThread:
    """Runs a simulator on 127.0.0.1 in a background thread with its own event loop.

    >>> with SimulatorThread(SimConfig(decode_tps=500)) as sim:
    ...     url = sim.base_url + "/v1/chat/completions"   # doctest: +SKIP
    """

    def __init__(self, cfg: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0):
        self.cfg = cfg or SimConfig()
        self.host, self.port = host, port
        self.app = build_app(self.cfg)
        self.base_url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def state(self) -> SimState:
        return self.app[STATE]

    def __enter__(self) -> SimulatorThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leverbench-sim", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("simulator did not start within 30 s")
        if self._error is not None:
            self._thread.join()
            raise RuntimeError(f"simulator failed to start: {self._error}") from self._error

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            runner, self.base_url = await _start(self.app, self.host, self.port, shutdown_timeout=1.0)
        except BaseException as err:  # reported by start() in the caller's thread
            self._error = err
            return
        finally:
            self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def stop(self) -> None:
        """Stop the server and join the thread; safe to call twice."""
        if self._thread is None or not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the simulator's loop (its state is not thread-safe) and return its result."""

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=30)

    def truth(self) -> list[dict]:
        """The ground-truth records so far, in completion order."""
        return self._call(lambda: list(self.state.truth))

    def reset(self) -> None:
        """Same as ``POST /sim/reset``."""
        self._call(self.state.reset)
