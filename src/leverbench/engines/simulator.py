"""The simulator: an OpenAI-compatible chat server whose speeds are set exactly.

It is a test instrument with known ground truth, never a stand-in for a real
engine.  Every quantity leverbench tries to measure (queue time, prefill time,
decode rate, prefix-cache hits, drafter acceptance) is fixed by a
:class:`SimConfig`, and every request leaves a ground-truth record that tests
can compare a measurement against.

Tokenizer
    One token per whitespace-separated word (``text.split()``).  A chat
    request's prompt is, in order: the words of ``json.dumps(tools)`` when the
    request has tools (first, where chat templates put them, so that a growing
    conversation keeps its prefix), then for each message its role as one token
    (``"system"``, ``"user"``, ``"assistant"``, ``"tool"``) followed by the
    words of its content.  Content may be a string, null, or a list of OpenAI
    content parts (only ``text`` parts count); ``tool_calls`` inside assistant
    messages do not count.  See :func:`chat_prompt_tokens`.

Timing model (real ``asyncio.sleep``)
    wait FIFO for one of ``slots`` (queue) -> ``overhead_s`` -> prefill of the
    uncached prompt tokens at ``prefill_tps`` -> decode steps.  Step ``i``
    (1-based) ends at ``start + i / decode_tps`` on the loop clock (no drift)
    and emits ``1 + round(draft_k * draft_acceptance)`` tokens (Python's
    ``round``; at most what remains) as one SSE chunk; without a drafter, one
    token.  So the first token arrives one step after prefill, and decoding
    ``n`` tokens takes ``ceil(n / tokens_per_step) / decode_tps`` seconds.

Prefix cache
    One cache shared by all slots, holding hashes of prompt prefixes that end
    at multiples of ``cache_block``.  A request reuses the longest whole-block
    prefix seen before, always leaving at least one token to compute; it reuses
    nothing when ``prefix_cache`` is off or the request says
    ``"cache_prompt": false``.  After prefill, every request's block prefixes
    enter the cache (also with ``cache_prompt: false``: the KV was computed).

Faults
    Per request, in arrival order, one ``random.Random(seed)`` draw per fault
    kind decides which faults fire (a request later rejected with 400 still
    used its draws).  HTTP 500 wins over 429; both answer at once, before
    queueing.  Without streaming, ``cut_stream`` drops the connection without
    a response and ``malformed`` sends half a JSON body.  ``/sim/reset``
    reseeds the generator.

Ground truth
    ``GET /sim/truth`` (or :meth:`SimulatorThread.truth`) lists one record per
    finished or faulted request, in completion order; see :class:`_Trace`.
    ``fault`` names the faults that took effect, comma-joined, plus
    ``client_disconnect`` when the client went away mid-stream.

Dialects
    ``SimConfig.dialect`` (``llama.cpp``, ``vllm``, ``sglang``, ``openai``)
    sets how the simulator *speaks*: usage fields, ``timings``, errors, which
    request fields it honours, ignores or rejects, its info endpoints and
    ``/metrics`` names (see :mod:`leverbench.engines.sim_dialects`).  The
    timing model and the ground truth are the same in every dialect.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import threading
import time
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from aiohttp import web

from . import sim_dialects as dialects
from .sim_config import SimConfig

TRUTH_LIMIT = 100_000  # ground-truth records kept (the most recent)
CACHE_CAPACITY_BLOCKS = 1_000_000  # prefix-cache entries kept (least recently used go first)
TOOL_CALL_TOKENS = 8  # generated tokens of a tool-call answer
TOKEN_ID_SPACE = 50_000  # /tokenize ids are stable hashes modulo this
FAULT_NAMES = ("http_500", "http_429", "cut_stream", "stall", "malformed", "no_usage")
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


# --------------------------------------------------------------------------- config


def tokens_per_step(cfg: SimConfig) -> int:
    """Tokens one decode step emits: 1, plus the accepted drafts when a drafter is set."""
    return 1 + round(cfg.draft_k * cfg.draft_acceptance) if cfg.draft_k else 1


# ------------------------------------------------------------------------ tokenizer


def tokenize(text: str) -> list[str]:
    """The simulator's tokens: one per whitespace-separated word."""
    return text.split()


def count_tokens(text: str) -> int:
    """How many simulator tokens ``text`` has."""
    return len(text.split())


def message_text(content: Any) -> str:
    """The text of a message's content: a string, null, or a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    raise ValueError("message content must be a string, null or a list of content parts")


def chat_prompt_tokens(messages: list[dict], tools: list | None = None) -> list[str]:
    """The prompt tokens of a chat request: tools' JSON words, then role + content per message."""
    tokens = tokenize(json.dumps(tools)) if tools else []
    for message in messages:
        tokens.append(str(message.get("role", "user")))
        tokens += tokenize(message_text(message.get("content")))
    return tokens


def token_ids(text: str) -> list[int]:
    """Stable integer ids for ``text``'s tokens (for ``/tokenize``)."""
    return [_stable_int(word) % TOKEN_ID_SPACE for word in tokenize(text)]


def synthetic_text(n_tokens: int, seed: int | str) -> str:
    """``n_tokens`` deterministic pseudo-words; the same seed gives the same text."""
    rng = random.Random(f"leverbench-sim:{seed}")
    return " ".join(_pseudo_word(rng) for _ in range(n_tokens))


def _pseudo_word(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(1, 3)))


def _stable_int(*parts: object) -> int:
    """A 64-bit hash of ``parts`` that is the same in every process (unlike ``hash``)."""
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        digest.update(str(part).encode())
        digest.update(b"\x00")
    return int.from_bytes(digest.digest(), "big")


# ---------------------------------------------------------------- engine internals


class PrefixCache:
    """Hashes of prompt prefixes ending at block boundaries, shared by all slots.

    Keys chain: block k's key hashes block k-1's key with block k's tokens, so
    one key stands for the whole prefix up to that block.
    """

    def __init__(self, block: int, capacity: int = CACHE_CAPACITY_BLOCKS):
        self.block = block
        self.capacity = capacity
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def block_keys(self, tokens: list[str]) -> list[bytes]:
        keys: list[bytes] = []
        previous = b""
        for end in range(self.block, len(tokens) + 1, self.block):
            digest = hashlib.blake2b(previous, digest_size=16)
            digest.update(" ".join(tokens[end - self.block : end]).encode())
            previous = digest.digest()
            keys.append(previous)
        return keys

    def lookup(self, tokens: list[str]) -> int:
        """Cached tokens: the longest seen whole-block prefix shorter than the prompt."""
        hits = 0
        for key in self.block_keys(tokens):
            if (hits + 1) * self.block >= len(tokens) or key not in self._keys:
                break
            self._keys.move_to_end(key)
            hits += 1
        return hits * self.block

    def insert(self, tokens: list[str]) -> None:
        for key in self.block_keys(tokens):
            self._keys[key] = None
            self._keys.move_to_end(key)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def clear(self) -> None:
        self._keys.clear()


class FifoSlots:
    """A counting semaphore that admits waiters strictly first come, first served."""

    def __init__(self, slots: int):
        self.total = slots
        self._free = slots
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def running(self) -> int:
        return self.total - self._free

    @property
    def waiting(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed to us as we were cancelled: pass it on
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """Hand the slot to the longest waiter, or free it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class SimState:
    """Everything one simulator instance shares across requests."""

    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.cache = PrefixCache(cfg.cache_block)
        self.slots = FifoSlots(cfg.slots)
        self.metrics = dialects.metrics_for(cfg)  # None: the dialect has no /metrics
        self.phases: dict[str, tuple[int, str]] = {}  # request id -> (scheduler rank, "waiting" | "running")
        self.truth: deque[dict] = deque(maxlen=TRUTH_LIMIT)
        self.started = int(time.time())
        self._requests = 0

    def next_id(self) -> str:
        self._requests += 1
        return f"chatcmpl-sim-{self._requests}"

    def phase_counts(self) -> dict[int, tuple[int, int]]:
        """(running, waiting) requests per scheduler rank."""
        out: dict[int, tuple[int, int]] = {}
        for rank, phase in self.phases.values():
            running, waiting = out.get(rank, (0, 0))
            out[rank] = (running + (phase == "running"), waiting + (phase == "waiting"))
        return out

    def draw_faults(self) -> frozenset[str]:
        """One draw per fault kind, always all of them, so the sequence depends only on arrival order."""
        cfg = self.cfg
        probabilities = (
            cfg.fault_http_500,
            cfg.fault_http_429,
            cfg.fault_cut_stream,
            cfg.fault_stall,
            cfg.fault_malformed,
            cfg.fault_no_usage,
        )
        return frozenset(name for name, p in zip(FAULT_NAMES, probabilities) if self.rng.random() < p)

    def reset(self) -> None:
        """Forget truth and cache, and reseed the fault draws; metrics stay monotonic."""
        self.truth.clear()
        self.cache.clear()
        self.rng = random.Random(self.cfg.seed)


# ------------------------------------------------------------ requests and answers


@dataclass
class ChatRequest:
    """The fields of a chat-completions request that the simulator honours."""

    prompt: list[str]
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    cache_prompt: bool = True
    tools: list = field(default_factory=list)
    tool_messages: int = 0
    last_user_text: str = ""


def parse_chat_request(body: Any, dialect: str = "llama.cpp") -> ChatRequest:
    """Validate a request body; raises ``ValueError`` with a message fit for a 400.

    The ``openai`` dialect rejects fields outside OpenAI's schema; only ``llama.cpp``
    honours ``cache_prompt`` (vLLM and SGLang ignore fields they do not know).
    """
    if not isinstance(body, dict):
        raise ValueError("request body must be a JSON object")
    if dialect == "openai" and (unknown := dialects.unknown_fields(body)):
        raise ValueError(dialects.unknown_fields_message(unknown))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ValueError("messages must be a non-empty list of objects")
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise ValueError("tools must be a list")
    users = [m for m in messages if m.get("role") == "user"]
    stream_options = body.get("stream_options") or {}
    return ChatRequest(
        prompt=chat_prompt_tokens(messages, tools),
        stream=bool(body.get("stream", False)),
        include_usage=bool(stream_options.get("include_usage", False)) if isinstance(stream_options, dict) else False,
        max_tokens=_optional_count(body, "max_completion_tokens", "max_tokens"),
        min_tokens=_optional_count(body, "min_tokens") or 0,
        ignore_eos=bool(body.get("ignore_eos", False)),
        cache_prompt=dialect != "llama.cpp" or body.get("cache_prompt", True) is not False,
        tools=tools,
        tool_messages=sum(1 for m in messages if m.get("role") == "tool"),
        last_user_text=message_text(users[-1].get("content")) if users else "",
    )


def _optional_count(body: dict, *names: str) -> int | None:
    """The first of ``names`` present and not null, as a positive int (min_tokens may be 0)."""
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        least = 0 if name == "min_tokens" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}")
        return value
    return None


@dataclass
class Answer:
    """What a request generates: one piece per token, as (kind, text).

    Kinds: ``reasoning``, ``content``, ``tool_head`` (opens the tool call) and
    ``tool_args`` (a fragment of its arguments).
    """

    pieces: list[tuple[str, str]]
    finish_reason: str
    tool_call: dict | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.pieces)

    @property
    def reasoning_tokens(self) -> int:
        return sum(1 for kind, _ in self.pieces if kind == "reasoning")


def answer_length(req: ChatRequest, cfg: SimConfig) -> tuple[int, str]:
    """Generated tokens and finish reason for a plain (non-tool) answer."""
    if req.ignore_eos and req.max_tokens is not None:
        return req.max_tokens, "length"
    n = max(jittered_length(cfg, " ".join(req.prompt)), req.min_tokens)
    if req.max_tokens is not None and n > req.max_tokens:
        return req.max_tokens, "length"
    return n, "stop"


def jittered_length(cfg: SimConfig, prompt_text: str) -> int:
    """``output_tokens * (1 + u * output_jitter)``, u in [-1, 1] from the prompt and seed; at least 1."""
    u = _stable_int(cfg.seed, prompt_text) / 2**64 * 2 - 1
    return max(1, round(cfg.output_tokens * (1 + u * cfg.output_jitter)))


def plan_answer(req: ChatRequest, cfg: SimConfig) -> Answer:
    """Decide the whole answer up front; decoding then only paces it."""
    if req.tools and req.tool_messages < cfg.tool_call_rounds:
        return _tool_call_answer(req)
    n, finish_reason = answer_length(req, cfg)
    reasoning = min(cfg.reasoning_tokens, n)
    words = tokenize(req.last_user_text) or tokenize(synthetic_text(16, _stable_int(*req.prompt)))
    pieces = [("reasoning" if i < reasoning else "content", words[i % len(words)] + " ") for i in range(n)]
    return Answer(pieces, finish_reason)


def _tool_call_answer(req: ChatRequest) -> Answer:
    """A call to the first tool, ``TOOL_CALL_TOKENS`` tokens long: the head, then argument fragments."""
    round_no = req.tool_messages + 1
    tool = req.tools[0] if isinstance(req.tools[0], dict) else {}
    function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    arguments = json.dumps({"round": round_no})
    call = {"id": f"call_{round_no}", "name": str(function.get("name", "tool")), "arguments": arguments}
    pieces = [("tool_head", "")] + [("tool_args", part) for part in _split_even(arguments, TOOL_CALL_TOKENS - 1)]
    return Answer(pieces, "tool_calls", call)


def _split_even(text: str, parts: int) -> list[str]:
    bounds = [round(i * len(text) / parts) for i in range(parts + 1)]
    return [text[bounds[i] : bounds[i + 1]] for i in range(parts)]


def step_sizes(n_tokens: int, per_step: int) -> list[int]:
    """Tokens per decode step: full steps, then the remainder."""
    full, rest = divmod(n_tokens, per_step)
    return [per_step] * full + ([rest] if rest else [])


def chunk_delta(pieces: list[tuple[str, str]], answer: Answer, first: bool) -> dict:
    """The ``delta`` of the SSE chunk carrying ``pieces`` (one decode step)."""
    delta: dict[str, Any] = {"role": "assistant"} if first else {}
    reasoning = "".join(text for kind, text in pieces if kind == "reasoning")
    content = "".join(text for kind, text in pieces if kind == "content")
    if reasoning:
        delta["reasoning_content"] = reasoning
    if content:
        delta["content"] = content
    if answer.tool_call is not None:
        fragment: dict[str, Any] = {"index": 0}
        if any(kind == "tool_head" for kind, _ in pieces):
            fragment.update(id=answer.tool_call["id"], type="function")
            fragment["function"] = {"name": answer.tool_call["name"], "arguments": ""}
        else:
            fragment["function"] = {}
        fragment["function"]["arguments"] = "".join(text for kind, text in pieces if kind == "tool_args")
        delta["tool_calls"] = [fragment]
    return delta


def full_message(answer: Answer) -> dict:
    """The ``message`` of a non-streaming response."""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(t for k, t in answer.pieces if k == "content")}
    reasoning = "".join(text for kind, text in answer.pieces if kind == "reasoning")
    if reasoning:
        message["reasoning_content"] = reasoning
    if answer.tool_call is not None:
        call = answer.tool_call
        message["content"] = None
        message["tool_calls"] = [
            {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}
        ]
    return message


# ------------------------------------------------------------------ ground truth


@dataclass
class _Trace:
    """One request's ground truth; times are ``time.time()`` epochs, durations seconds."""

    id: str
    arrival: float
    admitted: float | None = None
    queue_s: float = 0.0
    overhead_s: float = 0.0
    prefill_s: float = 0.0
    stall_s: float = 0.0
    decode_s: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    chunk_times: list[float] = field(default_factory=list)  # one per token-carrying SSE chunk
    first_token: float | None = None
    end: float | None = None
    finish_reason: str | None = None
    stream: bool = False
    fault: str | None = None  # comma-joined fault names that took effect, or None


# ---------------------------------------------------------------------- handlers

STATE = web.AppKey("sim_state", SimState)


async def _sleep_until(target: float) -> None:
    """Sleep until ``target`` on the loop clock (no drift across many steps)."""
    delay = target - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


def _error(status: int, message: str, kind: str, dialect: str = "llama.cpp") -> web.Response:
    return web.json_response(dialects.error_body(dialect, status, message, kind), status=status)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


class _Exchange:
    """One chat-completions request, from admission to its last byte."""

    def __init__(self, state: SimState, request: web.Request, req: ChatRequest, trace: _Trace, faults: frozenset):
        self.state, self.cfg, self.request, self.req = state, state.cfg, request, req
        self.trace, self.faults = trace, faults
        self.loop = asyncio.get_running_loop()
        self.arrival_mono = self.loop.time()
        self.applied: list[str] = []  # faults that took effect
        self.answer = plan_answer(req, state.cfg)
        self.response: web.StreamResponse | None = None
        self.created = int(trace.arrival)
        self.rank = dialects.dp_rank(int(trace.id.rsplit("-", 1)[1]))
        state.phases[trace.id] = (self.rank, "waiting")

    def _event(self, name: str, *args: Any) -> None:
        """Tell the dialect's metrics exporter (if any) what just happened."""
        if self.state.metrics is not None:
            getattr(self.state.metrics, name)(self.trace, self.rank, *args)

    async def run(self) -> web.StreamResponse:
        try:
            if self.req.stream:
                self.response = web.StreamResponse(headers=_SSE_HEADERS)
                await self.response.prepare(self.request)
            return await self._serve()
        except ConnectionResetError:
            self.applied.append("client_disconnect")
            return self.response or web.Response(status=499)
        finally:
            self._finish()

    async def _serve(self) -> web.StreamResponse:
        await self.state.slots.acquire()
        try:
            self._admitted()
            await self._overhead_and_prefill()
            await self._stall()
            completed = await self._decode()
        finally:
            self.state.slots.release()
        if not completed:
            self.applied.append("cut_stream")
            if self.request.transport is not None:
                self.request.transport.abort()
            return self.response or web.Response(status=499)
        return await (self._end_stream() if self.req.stream else self._respond())

    def _admitted(self) -> None:
        self.trace.admitted = time.time()
        self.trace.queue_s = self.loop.time() - self.arrival_mono
        self.state.phases[self.trace.id] = (self.rank, "running")
        self._event("admitted")

    async def _overhead_and_prefill(self) -> None:
        cfg, prompt = self.cfg, self.req.prompt
        started = self.loop.time()
        await _sleep_until(started + cfg.overhead_s)
        self.trace.overhead_s = self.loop.time() - started
        cached = self.state.cache.lookup(prompt) if cfg.prefix_cache and self.req.cache_prompt else 0
        self.trace.cached_tokens = cached
        started = self.loop.time()
        await _sleep_until(started + (len(prompt) - cached) / cfg.prefill_tps)
        self.trace.prefill_s = self.loop.time() - started
        self._event("prefilled")
        if cfg.prefix_cache:
            self.state.cache.insert(prompt)

    async def _stall(self) -> None:
        if "stall" in self.faults and self.cfg.fault_stall_s > 0:
            self.applied.append("stall")
            started = self.loop.time()
            await _sleep_until(started + self.cfg.fault_stall_s)
            self.trace.stall_s = self.loop.time() - started

    async def _decode(self) -> bool:
        """Pace the answer's steps; False when the stream was cut before the end."""
        n = self.answer.n_tokens
        sizes = step_sizes(n, tokens_per_step(self.cfg))
        malformed_after = max(1, len(sizes) // 2) if "malformed" in self.faults else None
        cut = "cut_stream" in self.faults
        start, step_s, emitted = self.loop.time(), 1.0 / self.cfg.decode_tps, 0
        for index, size in enumerate(sizes, 1):
            if cut and (emitted >= n // 2 or emitted + size >= n):
                return False  # half sent, and never the final chunk
            await _sleep_until(start + index * step_s)
            pieces = self.answer.pieces[emitted : emitted + size]
            emitted += size
            self._count_step(size, emitted, start)
            await self._emit(index, pieces, last=emitted == n)
            if index == malformed_after and self.req.stream:
                self.applied.append("malformed")
                await self._write_line('{"id": "' + self.trace.id + '", "choices": [{"delta": {"content": "x')
        return True

    def _count_step(self, size: int, emitted: int, start: float) -> None:
        trace = self.trace
        trace.completion_tokens = emitted
        trace.reasoning_tokens = min(emitted, self.answer.reasoning_tokens)  # reasoning comes first
        trace.decode_s = self.loop.time() - start
        if self.cfg.draft_k:
            trace.draft_tokens += self.cfg.draft_k
            trace.accepted_tokens += size - 1
        self._event("step", size)

    async def _emit(self, index: int, pieces: list[tuple[str, str]], last: bool) -> None:
        if not self.req.stream:
            if index == 1:
                self.trace.first_token = time.time()
                self._event("first_token")
            return
        choice = {"index": 0, "delta": chunk_delta(pieces, self.answer, index == 1), "finish_reason": None}
        chunk = self._envelope("chat.completion.chunk", choices=[choice])
        if last:
            choice["finish_reason"] = self.answer.finish_reason
            chunk.update(self._timings())
        stamp = time.time()
        self.trace.chunk_times.append(stamp)
        if index == 1:
            self.trace.first_token = stamp
            self._event("first_token")
        await self.response.write(f"data: {_dumps(chunk)}\n\n".encode())

    async def _write_line(self, data: str) -> None:
        await self.response.write(f"data: {data}\n\n".encode())

    async def _end_stream(self) -> web.StreamResponse:
        if self.req.include_usage:
            if "no_usage" in self.faults:
                self.applied.append("no_usage")
            else:
                chunk = self._envelope("chat.completion.chunk", choices=[], usage=self._usage(), **self._timings())
                await self._write_line(_dumps(chunk))
        await self._write_line("[DONE]")
        await self.response.write_eof()
        return self.response

    async def _respond(self) -> web.Response:
        choice = {"index": 0, "message": full_message(self.answer), "finish_reason": self.answer.finish_reason}
        body = self._envelope("chat.completion", choices=[choice], usage=self._usage(), **self._timings())
        if "no_usage" in self.faults:
            self.applied.append("no_usage")
            del body["usage"]
        text = _dumps(body)
        if "malformed" in self.faults:
            self.applied.append("malformed")
            text = text[: len(text) // 2]
        return web.Response(text=text, content_type="application/json")

    def _envelope(self, obj: str, **fields: Any) -> dict:
        return {"id": self.trace.id, "object": obj, "created": self.created, "model": self.cfg.model, **fields}

    def _usage(self) -> dict:
        return dialects.usage(self.cfg.dialect, self.cfg.prompt_tokens_details, self.trace,
                              self.cfg.cache_block if self.cfg.prefix_cache else 0)

    def _timings(self) -> dict:
        """``{"timings": ...}``: llama.cpp's timings from the simulator's own measurements; other
        dialects send none (``{}``)."""
        if self.cfg.dialect != "llama.cpp":
            return {}
        t = self.trace
        prompt_n = t.prompt_tokens - t.cached_tokens
        return {"timings": {
            "prompt_n": prompt_n,
            "prompt_ms": t.prefill_s * 1000,
            "prompt_per_second": prompt_n / t.prefill_s if t.prefill_s > 0 else 0.0,
            "predicted_n": t.completion_tokens,
            "predicted_ms": t.decode_s * 1000,
            "predicted_per_second": t.completion_tokens / t.decode_s if t.decode_s > 0 else 0.0,
            "cache_n": t.cached_tokens,
            "draft_n": t.draft_tokens,
            "draft_n_accepted": t.accepted_tokens,
        }}

    def _finish(self) -> None:
        self.trace.end = time.time()
        if self.trace.completion_tokens == self.answer.n_tokens:
            self.trace.finish_reason = self.answer.finish_reason
        self.trace.fault = _fault_label(self.applied)
        self.state.phases.pop(self.trace.id, None)
        self._event("finished")
        self.state.truth.append(asdict(self.trace))


def _fault_label(applied: list[str]) -> str | None:
    order = FAULT_NAMES + ("client_disconnect",)
    return ",".join(name for name in order if name in applied) or None


async def handle_chat(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    dialect = state.cfg.dialect
    trace = _Trace(id=state.next_id(), arrival=time.time())
    faults = state.draw_faults()  # before any await: draws follow arrival order
    try:
        req = parse_chat_request(await request.json(), dialect)
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
    return await _Exchange(state, request, req, trace, faults).run()


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
            ids = [_stable_int(w) % TOKEN_ID_SPACE for w in chat_prompt_tokens(body["messages"])]
        elif isinstance(body.get("prompt"), str):
            ids = token_ids(body["prompt"])
        else:
            raise TypeError
    except (ValueError, KeyError, TypeError, AttributeError):
        shape = '{"content": "<text>"}' if cfg.dialect == "llama.cpp" else '{"model": ..., "prompt": "<text>"}'
        return _error(400, f"body must be {shape}", "invalid_request_error", cfg.dialect)
    return web.json_response({"count": len(ids), "max_model_len": dialects.CONTEXT_LENGTH, "tokens": ids,
                              "token_strs": None})


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


async def handle_truth(request: web.Request) -> web.Response:
    return web.json_response(list(request.app[STATE].truth))


async def handle_reset(request: web.Request) -> web.Response:
    request.app[STATE].reset()
    return web.json_response({"status": "ok"})


_ENGINE_ROUTES: dict[str, list[tuple[str, str, Callable[..., Any]]]] = {
    "llama.cpp": [("GET", "/health", handle_health), ("GET", "/props", handle_props), ("GET", "/slots", handle_slots),
                  ("POST", "/tokenize", handle_tokenize), ("GET", "/metrics", handle_metrics)],
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
    for method, path, handler in _ENGINE_ROUTES[cfg.dialect]:
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
