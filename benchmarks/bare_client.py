"""The reference for ``client_overhead.py --bare``: a bare aiohttp streaming client, about 30 lines of what one
would write by hand, run against the same server as leverbench's client, in its own process (a fresh
interpreter that imports aiohttp alone: its collector does not scan what leverbench loaded, as a script of
one's own would not).

It does nothing leverbench does around a call (no record, no ledger, no retries, no checks): a closed loop of
``concurrency`` tasks, each POSTing the next request as soon as its previous stream ends, reading the SSE
lines with aiohttp's own ``readline`` and stamping each line with ``time.perf_counter()`` as it is read.  Its
TTFT counts from when the connection was ready (aiohttp's ``on_connection_create_end``; the post itself on a
reused one), as leverbench's ``ttft_s`` does, so the two are compared like for like.  Each call comes back as
a dict with the keys of a ledger load record that ``client_overhead.compare`` reads.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, Callable

import aiohttp


async def _ready(session: Any, ctx: Any, params: Any) -> None:
    ctx.trace_request_ctx["ready"] = time.perf_counter()


async def closed_loop(url: str, body_for: Callable[[int], dict], concurrency: int, *, warmup_s: float,
                      duration_s: float, starts: list[float], keep_alive: bool, stage: str, sweep: str) -> list[dict]:
    """A closed loop of *concurrency* clients (client k from ``starts[k]`` s after the start) for warmup_s +
    duration_s; one dict per call (a failed one with its ``error``), and last this process's CPU share over
    the measured seconds (``{"kind": "cpu", "share": ...}``)."""
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(_ready)
    connector = aiohttp.TCPConnector(limit=0, force_close=not keep_alive)
    out: list[dict] = []
    t_start = time.time()
    t_warm, t_stop = t_start + warmup_s, t_start + warmup_s + duration_s
    count = iter(range(10**9))

    async def client(offset: float) -> None:
        planned = t_start + offset
        await asyncio.sleep(max(0.0, planned - time.time()))
        scheduled = planned
        while (t_send := time.time()) < t_stop:
            ctx: dict[str, float] = {}
            p0 = time.perf_counter()
            chunk_t, timings, ok = [], None, False
            try:
                async with session.post(url, json=body_for(next(count)), trace_request_ctx=ctx) as resp:
                    async for line in resp.content:
                        now = time.perf_counter()
                        if not line.startswith(b"data: {"):
                            ok = ok or line.startswith(b"data: [DONE]")
                            continue
                        obj = json.loads(line[6:])
                        if any((ch.get("delta") or {}).get("content") for ch in obj.get("choices") or []):
                            chunk_t.append(now)
                        timings = obj.get("timings") or timings
            except aiohttp.ClientError:
                ok = False
            end = time.perf_counter()
            ready = ctx.get("ready", p0)
            if not (ok and chunk_t):
                out.append({"kind": "load", "stage": stage, "sweep": sweep, "concurrency": concurrency,
                            "warmup": t_send < t_warm, "error": "failed"})
            else:
                out.append({"kind": "load", "stage": stage, "sweep": sweep, "concurrency": concurrency,
                            "warmup": t_send < t_warm, "error": None, "timings": timings, "t_send": t_send,
                            "connect_s": ready - p0, "ttft_s": chunk_t[0] - ready, "latency_s": end - ready,
                            "chunk_t": [t - ready for t in chunk_t], "scheduled_t": scheduled, "loop_lag_s": 0.0})
            scheduled = t_send + (end - p0)

    async def cpu() -> dict:  # (not part of the client: the benchmark's measure of it)
        await asyncio.sleep(t_warm - time.time())
        c0, w0 = time.process_time(), time.time()
        await asyncio.sleep(t_stop - time.time())
        return {"kind": "cpu", "share": (time.process_time() - c0) / (time.time() - w0)}

    async with aiohttp.ClientSession(connector=connector, trace_configs=[trace]) as session:
        *_, share = await asyncio.gather(*(client(s) for s in starts), cpu())
    return [*out, share]


if __name__ == "__main__":  # URL CONCURRENCY WARMUP_S DURATION_S RAMP_S KEEP_ALIVE(0/1) STAGE SWEEP PROMPT
    url, c, warm, dur, ramp, keep, stage, sweep, prompt = sys.argv[1:]
    n = int(c)

    def body_for(i: int) -> dict:
        return {"model": "sim", "messages": [{"role": "user", "content": f"{prompt} {stage} {i}"}],
                "max_tokens": 50, "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}

    calls = asyncio.run(closed_loop(url, body_for, n, warmup_s=float(warm), duration_s=float(dur),
                                    starts=[k * float(ramp) / n for k in range(n)], keep_alive=keep == "1",
                                    stage=stage, sweep=sweep))
    sys.stdout.write("".join(json.dumps(r) + "\n" for r in calls))
