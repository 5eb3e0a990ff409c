"""How much latency does ``leverbench record`` add to an agent's calls?

Starts the simulator (``leverbench sim``, its own process: the upstream) and the recording proxy (``leverbench
record``, its own process, recording every exchange as it would for a user), then sends the same streamed chat
requests straight to the simulator and through the proxy, at each concurrency level, in ABBA order (direct,
proxy, proxy, direct, ...: a shared machine's drift falls on both alike), and prints side by side:

- TTFT: the client's time from sending to the first body bytes of the stream (the simulator's first token), p50
  and p99, direct and through the proxy, and the TTFT the proxy adds: per round, the difference of the two
  sides' percentiles over that round's calls; printed as the median of the rounds and their range (a single
  pooled difference of two p99s swings either way on a shared machine: the range shows how far);
- end to end: send to the stream's last byte, the p50 and p99 added, the same way;
- the proxy's CPU seconds per measured request (its process's user + system time over them; the warm-up calls
  that open the connection pools left out).

The simulator's own service time is the same either way (no prefix cache, a fixed answer length, slots enough
for every request in flight), so the differences are the extra hop: a loopback connection, the proxy's event
loop, and the recording (captured bytes, parsed and written by its thread, off the path).

    .venv/bin/python benchmarks/proxy_overhead.py                    # concurrency 1 and 32, ~2 minutes
    .venv/bin/python benchmarks/proxy_overhead.py --passthrough --requests 400 --rounds 3
    .venv/bin/python benchmarks/proxy_overhead.py --tiny --passthrough   # concurrency 1 and 4, 8 requests: seconds

Nothing here is a test: the figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
PROMPT_WORDS = 400


def pct(xs: list[float], p: float) -> float:
    """Linear-interpolation percentile (NumPy's default)."""
    s = sorted(xs)
    if not s:
        return math.nan
    r = p / 100 * (len(s) - 1)
    lo = math.floor(r)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (r - lo)


def start(args: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "leverbench", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    line = proc.stdout.readline().strip()
    if not line.startswith("http"):
        proc.kill()
        raise SystemExit(f"leverbench {args[0]} did not start: {line!r} {proc.stderr.read()[:2000]}")
    return proc, line


# the proxy alone, recording nothing (--passthrough): what the hop costs without the recording's thread
PASSTHROUGH = ("import asyncio, sys\nfrom leverbench.proxy.server import RecordingProxy, serve\n"
               "asyncio.run(serve(RecordingProxy(sys.argv[1], None), '127.0.0.1', 0, lambda u: print(u, flush=True)))")


def start_passthrough(upstream: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", PASSTHROUGH, upstream], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    return proc, proc.stdout.readline().strip()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process *pid* so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one(session: aiohttp.ClientSession, url: str, body: bytes) -> tuple[float, float]:
    """(TTFT, end to end) of one streamed call, seconds."""
    t0 = time.perf_counter()
    first = None
    async with session.post(url, data=body, headers={"Content-Type": "application/json",
                                                     "Authorization": "Bearer sk-bench"}) as r:
        r.raise_for_status()
        async for _ in r.content.iter_any():
            if first is None:
                first = time.perf_counter() - t0
    return first if first is not None else math.nan, time.perf_counter() - t0


class Measured(NamedTuple):
    """One run of a level on one side: its calls' TTFTs and end-to-end times, and the side's CPU seconds over
    them (the warm-up left out)."""

    ttft: list[float]
    e2e: list[float]
    cpu_s: float


async def level(url: str, concurrency: int, requests: int, output_tokens: int, pid: int | None) -> Measured:
    """*requests* calls to *url*, *concurrency* at a time (each worker sends its next when its last has ended),
    after a few that open the pools' connections (not counted: neither their times nor the CPU they took in
    process *pid*, the proxy)."""
    words = " ".join(f"w{i}" for i in range(PROMPT_WORDS))
    ttft: list[float] = []
    e2e: list[float] = []
    left = [min(3, concurrency) * 2]  # first a few to open the pools' connections, not counted

    async def worker(session: aiohttp.ClientSession, k: int) -> None:
        n = 0
        while left[0] > 0:
            left[0] -= 1
            n += 1
            body = json.dumps({"model": "sim", "stream": True, "max_tokens": output_tokens,
                               "stream_options": {"include_usage": True},
                               "messages": [{"role": "user", "content": f"{k}-{n} {words}"}]}).encode()
            a, b = await one(session, url, body)
            ttft.append(a)
            e2e.append(b)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session, k) for k in range(min(3, concurrency))))  # warm the pools
        ttft.clear()
        e2e.clear()
        left[0] = requests
        c0 = cpu_s(pid) if pid else 0.0
        await asyncio.gather(*(worker(session, k) for k in range(concurrency)))
        used = cpu_s(pid) - c0 if pid else 0.0
    return Measured(ttft, e2e, used)


def per_round(mine: list[tuple[list[float], list[float]]], base: list[tuple[list[float], list[float]]], i: int,
              p: float) -> list[float]:
    """Per round, the p-th percentile of *mine*'s calls less *base*'s (i: 0 TTFT, 1 end to end)."""
    return [pct(m[i], p) - pct(b[i], p) for m, b in zip(mine, base)]


def spread(xs: list[float]) -> str:
    """Per-round values, in ms: their median and, in brackets, their range (min..max)."""
    ms = sorted(1000 * x for x in xs)
    med = ms[len(ms) // 2] if len(ms) % 2 else (ms[len(ms) // 2 - 1] + ms[len(ms) // 2]) / 2
    return f"{med:+6.2f} [{ms[0]:+.2f}..{ms[-1]:+.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description="The latency leverbench record adds (see the module's docstring).")
    ap.add_argument("--levels", default="1,32", help="concurrency levels (default 1,32)")
    ap.add_argument("--requests", type=int, default=200,
                    help="measured requests per level, side and round (half in each of the round's two runs)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each in ABBA order (direct, proxy, proxy, direct)")
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--decode-tps", type=float, default=200.0)
    ap.add_argument("--passthrough", action="store_true",
                    help="also the proxy recording nothing (what the hop costs without the recording)")
    ap.add_argument("--tiny", action="store_true", help="--levels 1,4 --requests 8 --rounds 1: seconds")
    if "--tiny" in sys.argv[1:]:
        ap.set_defaults(levels="1,4", requests=8, rounds=1)
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    sim, sim_url = start(["sim", "--port", "0", "--slots", str(max(levels) * 2), "--decode-tps", str(a.decode_tps),
                          "--prefill-tps", "1000000", "--output-tokens", str(a.output_tokens), "--no-prefix-cache"])
    procs = [sim]
    with tempfile.TemporaryDirectory() as tmp:
        proxy, proxy_v1 = start(["record", "--upstream", sim_url + "/v1", "--listen", "127.0.0.1:0", "--out", tmp])
        procs.append(proxy)
        urls = {"direct": sim_url, "proxy": proxy_v1.removesuffix("/v1")}  # it prints its URL with the upstream's path
        pids = {"proxy": proxy.pid}
        if a.passthrough:
            passthrough, urls["no record"] = start_passthrough(sim_url + "/v1")
            procs.append(passthrough)
            pids["no record"] = passthrough.pid
        sides = list(urls)
        try:
            print(f"simulator {sim_url}, proxy {urls['proxy']} (recording to {tmp}); {a.requests} streamed requests "
                  f"per level, side and round, {a.rounds} rounds in ABBA order, {a.output_tokens} output tokens, "
                  f"{PROMPT_WORDS + 2}-token prompts; {os.cpu_count()} CPUs; added = through the proxy − direct, "
                  "per round (both sides' percentiles of that round's calls): the median of the rounds "
                  "[their range]; CPU: the proxy's, per measured request (warm-up left out)\n")
            head = (f"{'conc':>4} {'side':>9} | {'TTFT p50':>9} {'added p50 [range]':>24} | {'TTFT p99':>9} "
                    f"{'added p99 [range]':>24} | {'e2e p50 added':>24} {'e2e p99 added':>24} | {'CPU/req':>9}")
            print(head + "\n" + "-" * len(head))
            for c in levels:
                runs: dict[str, list[list[Measured]]] = {k: [[] for _ in range(a.rounds)] for k in sides}
                for r in range(a.rounds):
                    order = sides if r % 2 == 0 else sides[::-1]
                    for side in [*order, *order[::-1]]:
                        runs[side][r].append(asyncio.run(level(urls[side] + "/v1/chat/completions", c,
                                                               max(1, a.requests // 2), a.output_tokens,
                                                               pids.get(side))))
                rnd = {k: [([t for m in ms for t in m.ttft], [e for m in ms for e in m.e2e]) for ms in v]
                       for k, v in runs.items()}  # per side, per round: (ttft, e2e)
                for side in sides:
                    t = [x for tt, _ in rnd[side] for x in tt]
                    if side == "direct":
                        print(f"{c:>4} {side:>9} | {1000 * pct(t, 50):>6.2f} ms {'':>24} | "
                              f"{1000 * pct(t, 99):>6.2f} ms {'':>24} | {'':>24} {'':>24} |", flush=True)
                        continue
                    added = functools.partial(per_round, rnd[side], rnd["direct"])
                    n = sum(len(m.ttft) for ms in runs[side] for m in ms)
                    cpu = sum(m.cpu_s for ms in runs[side] for m in ms) / max(n, 1)
                    print(f"{c:>4} {side:>9} | {1000 * pct(t, 50):>6.2f} ms {spread(added(0, 50)):>24} | "
                          f"{1000 * pct(t, 99):>6.2f} ms {spread(added(0, 99)):>24} | {spread(added(1, 50)):>24} "
                          f"{spread(added(1, 99)):>24} | {1000 * cpu:>6.3f} ms", flush=True)
        finally:
            for proc in reversed(procs):
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=60)
                if proc is proxy:
                    print("\nproxy: " + err.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
