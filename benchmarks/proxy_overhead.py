"""How much latency does ``leverbench record`` add to an agent's calls?

Starts the simulator (``leverbench sim``, its own process: the upstream) and the recording proxy (``leverbench
record``, its own process, recording every exchange as it would for a user), then sends the same streamed chat
requests straight to the simulator and through the proxy, at each concurrency level, in ABBA order (direct,
proxy, proxy, direct, ...: a shared machine's drift falls on both alike), and prints side by side:

- TTFT: the client's time from sending to the first body bytes of the stream (the simulator's first token), p50
  and p99, direct and through the proxy, and the difference of each: the TTFT the proxy adds;
- end to end: send to the stream's last byte, p50 and p99, and the difference;
- the proxy's CPU seconds per request (its process's user + system time over the requests it passed).

The simulator's own service time is the same either way (no prefix cache, a fixed answer length, slots enough
for every request in flight), so the differences are the extra hop: a loopback connection, the proxy's event
loop, and the recording (captured bytes, parsed and written by its thread, off the path).

    .venv/bin/python benchmarks/proxy_overhead.py                    # concurrency 1 and 32, ~1 minute
    .venv/bin/python benchmarks/proxy_overhead.py --levels 1,8,32,64 --requests 400 --rounds 4

Nothing here is a test: the figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


async def level(url: str, concurrency: int, requests: int, output_tokens: int) -> tuple[list[float], list[float]]:
    """*requests* calls to *url*, *concurrency* at a time (each worker sends its next when its last has ended)."""
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
        await asyncio.gather(*(worker(session, k) for k in range(concurrency)))
    return ttft, e2e


def main() -> None:
    ap = argparse.ArgumentParser(description="The latency leverbench record adds (see the module's docstring).")
    ap.add_argument("--levels", default="1,32", help="concurrency levels (default 1,32)")
    ap.add_argument("--requests", type=int, default=200, help="requests per level, per round and side")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, each in ABBA order (direct, proxy, proxy, direct)")
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--decode-tps", type=float, default=200.0)
    ap.add_argument("--passthrough", action="store_true",
                    help="also the proxy recording nothing (what the hop costs without the recording)")
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
                  f"{PROMPT_WORDS + 2}-token prompts; {os.cpu_count()} CPUs; added = through the proxy − direct\n")
            head = (f"{'conc':>4} {'side':>9} | {'TTFT p50':>9} {'added':>7} | {'TTFT p99':>9} {'added':>7} | "
                    f"{'e2e p50 added':>13} {'e2e p99 added':>13} | {'proxy CPU/req':>13}")
            print(head + "\n" + "-" * len(head))
            for c in levels:
                got: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in sides}
                cpu = dict.fromkeys(sides, 0.0)
                for r in range(a.rounds):
                    order = sides if r % 2 == 0 else sides[::-1]
                    for side in [*order, *order[::-1]]:
                        c0 = cpu_s(pids[side]) if side in pids else 0.0
                        t, e = asyncio.run(level(urls[side] + "/v1/chat/completions", c, a.requests, a.output_tokens))
                        if side in pids:
                            cpu[side] += cpu_s(pids[side]) - c0
                        got[side][0].extend(t)
                        got[side][1].extend(e)
                dt, de = got["direct"]
                for side in sides:
                    t, e = got[side]
                    ms = [1000 * x for x in (pct(t, 50), pct(t, 50) - pct(dt, 50), pct(t, 99), pct(t, 99) - pct(dt, 99),
                                             pct(e, 50) - pct(de, 50), pct(e, 99) - pct(de, 99), cpu[side] / len(t))]
                    if side == "direct":
                        print(f"{c:>4} {side:>9} | {ms[0]:>6.2f} ms {'':>7} | {ms[2]:>6.2f} ms {'':>7} | {'':>13} "
                              f"{'':>13} |")
                        continue
                    print(f"{c:>4} {side:>9} | {ms[0]:>6.2f} ms {ms[1]:>+7.2f} | {ms[2]:>6.2f} ms {ms[3]:>+7.2f} | "
                          f"{ms[4]:>+10.2f} ms {ms[5]:>+10.2f} ms | {ms[6]:>10.3f} ms", flush=True)
        finally:
            for proc in reversed(procs):
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=60)
                if proc is proxy:
                    print("\nproxy: " + err.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
