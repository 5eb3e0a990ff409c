"""One chat-completions request, from admission to its last byte, and the ground truth it leaves.

The timing model of the package docstring, step by step: queue for a slot, overhead, prefill of the
uncached tokens, an optional stall, then decode steps paced on the loop clock; faults applied on the way.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from . import dialects
from .answer import ChatRequest, chunk_delta, full_message, plan_answer
from .config import FAULT_NAMES
from .drafter import batch_factor, decode_step_sizes, step_cost
from .state import SimState

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


@dataclass
class Trace:
    """One request's ground truth; times are ``time.time()`` epochs, durations seconds."""

    id: str
    arrival: float
    # when the server's loop read the request (time.time()), before ``arrival`` by the time it took to reach the
    # handler: where its connection notes it (a protocol with ``rx_at``: benchmarks/client_overhead.py's), else None
    received: float | None = None
    admitted: float | None = None
    queue_s: float = 0.0
    overhead_s: float = 0.0
    prefill_s: float = 0.0
    stall_s: float = 0.0
    decode_s: float = 0.0
    first_step_s: float = 0.0  # decode time until the first token (llama.cpp's timings count from it)
    decode_batch: float = 0.0  # mean over its decode steps of the requests decoding at once (itself included)
    decode_steps: int = 0  # decode steps taken (each one SSE chunk; with a drafter, each drafted draft_k tokens)
    # the decode time the timing model set: the sum of its steps' durations (drafter.true_decode_seconds at its
    # decode_batch), which decode_s exceeds by the loop's lateness (waking after a step's end, never before it)
    decode_paced_s: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    # with a drafter, the acceptance its decode used (draft_acceptance, or more from the drafter's memory:
    # SimState.drafter_acceptance); None without a drafter or before its decode started
    draft_acceptance: float | None = None
    chunk_times: list[float] = field(default_factory=list)  # one per token-carrying SSE chunk
    first_token: float | None = None
    end: float | None = None
    finish_reason: str | None = None
    stream: bool = False
    speed_factor: float = 1.0  # every service time of this request was multiplied by it (drift, jitter, cold start)
    fault: str | None = None  # comma-joined fault names that took effect, or None


def llama_clocks_ms(prefill_s: float, first_step_s: float, decode_s: float) -> tuple[float, float]:
    """(prompt_ms, predicted_ms) as llama.cpp's clocks split a request: prompt_ms until the first token
    (the prefill and the step that samples it), predicted_ms from the first token to the last.  The
    llama.cpp dialect sends these; a ground-truth record's ``prefill_s``, ``first_step_s`` and
    ``decode_s`` give the same floats, so a client's call is matched to its truth record by them."""
    return (prefill_s + first_step_s) * 1000, (decode_s - first_step_s) * 1000


async def _sleep_until(target: float) -> None:
    """Sleep until ``target`` on the loop clock (no drift across many steps)."""
    delay = target - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


class Exchange:
    """One chat-completions request, from admission to its last byte."""

    def __init__(self, state: SimState, request: web.Request, req: ChatRequest, trace: Trace, faults: frozenset):
        self.state, self.cfg, self.request, self.req = state, state.cfg, request, req
        self.trace, self.faults = trace, faults
        self.loop = asyncio.get_running_loop()
        self.arrival_mono = self.loop.time()
        self.applied: list[str] = []  # faults that took effect
        self.factor = 1.0  # the request's speed factor (drift, jitter, cold start), drawn at admission
        self.first_step_s = 0.0  # decode time until the first token (llama.cpp's generation clock starts after it)
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
        self.factor = self.trace.speed_factor = self.state.speed_factor(self.trace.admitted)
        self.state.phases[self.trace.id] = (self.rank, "running")
        self._event("admitted")

    async def _overhead_and_prefill(self) -> None:
        cfg, prompt = self.cfg, self.req.prompt
        started = self.loop.time()
        await _sleep_until(started + cfg.overhead_s * self.factor)
        self.trace.overhead_s = self.loop.time() - started
        cached = self.state.cache.lookup(prompt) if cfg.prefix_cache and self.req.cache_prompt else 0
        self.trace.cached_tokens = cached
        started = self.loop.time()
        n = len(prompt) - cached
        work_s = n / cfg.prefill_tps + cfg.prefill_quadratic * n * (cached + n / 2.0)
        await _sleep_until(started + work_s * self.factor)
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
        n, cfg = self.answer.n_tokens, self.cfg
        acceptance = cfg.draft_acceptance
        if cfg.draft_k:
            acceptance = self.trace.draft_acceptance = self.state.drafter_acceptance(self.req.prompt)
        sizes = decode_step_sizes(n, cfg.draft_k, acceptance, cfg.draft_model)  # the drafter's model: .drafter
        malformed_after = max(1, len(sizes) // 2) if "malformed" in self.faults else None
        cut = "cut_stream" in self.faults
        start, step_s, emitted, due = self.loop.time(), 1.0 / cfg.decode_tps, 0, 0.0
        context = len(self.req.prompt)
        state, beside, cost = self.state, cfg.decode_batch_slowdown, step_cost(cfg.draft_k, cfg.draft_cost)
        state.decoding += 1
        batch_sum = 0
        try:
            for index, size in enumerate(sizes, 1):
                if cut and (emitted >= n // 2 or emitted + size >= n):
                    return False  # half sent, and never the final chunk
                k = state.decoding  # the requests decoding now, this one included: the step's batch
                batch_sum += k
                self.trace.decode_batch = batch_sum / index
                step = (step_s + cfg.decode_slowdown_per_ctx * (context + emitted)) * self.factor * \
                    batch_factor(k, cfg.draft_k, beside, cfg.draft_model) * cost  # cost: 1.0 without draft_cost
                due += step
                self.trace.decode_paced_s += step
                await _sleep_until(start + due)
                pieces = self.answer.pieces[emitted : emitted + size]
                emitted += size
                self._count_step(size, emitted, start)
                if index == 1:  # the steps after the first token are paced from it (llama.cpp's generation clock)
                    due = self.first_step_s
                await self._emit(index, pieces, last=emitted == n)
                if index == malformed_after and self.req.stream:
                    self.applied.append("malformed")
                    await self._write_line('{"id": "' + self.trace.id + '", "choices": [{"delta": {"content": "x')
        finally:
            state.decoding -= 1
        return True

    def _count_step(self, size: int, emitted: int, start: float) -> None:
        trace = self.trace
        trace.completion_tokens = emitted
        trace.decode_steps += 1
        trace.reasoning_tokens = min(emitted, self.answer.reasoning_tokens)  # reasoning comes first
        trace.decode_s = self.loop.time() - start
        if emitted == size:
            self.first_step_s = trace.first_step_s = trace.decode_s
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
        prompt_ms, predicted_ms = llama_clocks_ms(t.prefill_s, self.first_step_s, t.decode_s)
        return {"timings": {
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_second": prompt_n / (prompt_ms / 1000) if t.prefill_s > 0 else 0.0,
            "predicted_n": t.completion_tokens,
            "predicted_ms": predicted_ms,
            "predicted_per_second": t.completion_tokens / (predicted_ms / 1000) if predicted_ms > 0 else 0.0,
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
