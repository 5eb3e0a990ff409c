"""How much error does leverbench's own client add to what it measures, and at what load does it give out?

Runs the simulator in a separate process (``leverbench sim``: its own Python
interpreter and event loop, so it does not share the client's), then runs a
leverbench experiment against it whose only load stage is a closed-loop sweep
over concurrency 1, 2, 4, ... 128 (200-token prompts, 50 output tokens), through
the real runner: ``Runner`` → ``run_load`` → ``stream_chat``, ledger writes
(fsync) included.  Every call the client recorded is then matched with the
simulator's own ground truth (``/sim/truth``: time.time() stamps of arrival and
of every chunk it wrote; same machine, same clock) through the server timings
each response carries (``predicted_ms`` = the simulator's ``decode_s`` × 1000,
exact), and the differences are printed side by side:

- TTFT error     = client ttft_s − (sim first_token − sim arrival): what the
                   client adds to time to first token (connect, send, read);
- gap error      = client gap between chunks i−1 and i − the simulator's gap
                   between writing them (absolute value);
- stamp error    = (client t_send + chunk_t[i]) − sim chunk_times[i]: how late
                   the client saw each token after the server wrote it;
- send lag       = t_send − scheduled_t (closed loop: the client's turnaround
                   between one call's end and its next send) and the event-loop
                   stall the runner itself recorded (loop_lag_s).

The highest concurrency whose TTFT and gap errors both stay within 1 ms at p99
is the load this client sustains on this machine.

    .venv/bin/python benchmarks/client_overhead.py            # ~1-2 minutes
    .venv/bin/python benchmarks/client_overhead.py --levels 1,8,64 --duration 3
    .venv/bin/python benchmarks/client_overhead.py --no-fsync  # the ledger's fsync per call patched out

Nothing here is a test: the figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from leverbench.config import load as load_experiment  # noqa: E402
from leverbench.engines.simulator import synthetic_text  # noqa: E402
from leverbench.ledger.reader import read_ledger  # noqa: E402
from leverbench.runner.run import Runner  # noqa: E402

PROMPT_TOKENS = 200
OUTPUT_TOKENS = 50


def pct(xs: list[float], p: float) -> float:
    """Linear-interpolation percentile (NumPy's default)."""
    s = sorted(xs)
    if not s:
        return math.nan
    r = p / 100 * (len(s) - 1)
    lo = math.floor(r)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (r - lo)


def start_sim(decode_tps: float, prefill_tps: float, slots: int) -> tuple[subprocess.Popen, str]:
    # The simulator is the reference: its collector is switched off so that its own GC pauses (its truth list
    # grows to thousands of records) do not show up as client error.  The client keeps its collector.
    code = "import gc, sys; gc.disable(); from leverbench.cli import main; sys.argv[0] = 'leverbench'; main()"
    cmd = [sys.executable, "-c", code, "sim", "--port", "0", "--slots", str(slots), "--decode-tps", str(decode_tps),
           "--prefill-tps", str(prefill_tps), "--output-tokens", str(OUTPUT_TOKENS), "--no-prefix-cache"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline().strip()
    if not line.startswith("http"):
        proc.kill()
        raise SystemExit(f"simulator did not start: {line!r} {proc.stderr.read()[:2000]}")
    return proc, line


def experiment(tmp: Path, url: str, levels: list[int], warmup_s: float, duration_s: float, ramp_s: float) -> Path:
    p = tmp / "exp.toml"
    prompt = synthetic_text(PROMPT_TOKENS - 1, "client-overhead")  # + 1 role token = 200 simulator tokens
    p.write_text(f'''
[experiment]
name = "client-overhead"
repeats = 1
baseline = "sim"
sentinel_tokens = 0

[[arms]]
name = "sim"
role = "baseline"
base_url = "{url}"
model = "sim"

[[cases]]
name = "p200"
prompt = "{prompt}"
max_tokens = {OUTPUT_TOKENS}
temperature = 0.0

[[load]]
name = "burst"
mode = "closed"
case = "p200"
concurrency = {levels}
warmup_s = {warmup_s}
duration_s = {duration_s}

[[load]]
name = "staggered"
mode = "closed"
case = "p200"
concurrency = {levels}
ramp_s = {ramp_s}
warmup_s = {warmup_s + ramp_s}
duration_s = {duration_s}
''')
    return p


def truth(url: str) -> list[dict]:
    with urllib.request.urlopen(url + "/sim/truth", timeout=60) as r:
        return json.loads(r.read())


def compare(records: list[dict], truths: list[dict]) -> dict[str, dict]:
    """Per stage: the error lists (ms) of every matched call."""
    by_key = {}
    for t in truths:
        by_key[(t["prefill_s"] * 1000, t["decode_s"] * 1000)] = t
    out: dict[str, dict] = {}
    for r in records:
        if r.get("kind") != "load" or r.get("warmup") or r.get("error") is not None:
            continue
        st = out.setdefault(r["stage"], {"c": r["concurrency"], "sweep": r["sweep"], "ttft": [], "gap": [], "stamp": [], "lag": [],
                                         "loop": [], "n": 0, "unmatched": 0, "t": []})
        tm = r.get("timings") or {}
        t = by_key.get((tm.get("prompt_ms"), tm.get("predicted_ms")))
        if t is None or len(t["chunk_times"]) != len(r["chunk_t"]):
            st["unmatched"] += 1
            continue
        st["n"] += 1
        st["t"].append(r["t_send"] + r["latency_s"])
        st["t"].append(r["scheduled_t"])
        st["ttft"].append((r["ttft_s"] - (t["first_token"] - t["arrival"])) * 1000)
        ct, tt = r["chunk_t"], t["chunk_times"]
        for i in range(1, len(ct)):
            st["gap"].append(abs((ct[i] - ct[i - 1]) - (tt[i] - tt[i - 1])) * 1000)
        st["stamp"].extend(((r["t_send"] + c) - s) * 1000 for c, s in zip(ct, tt))
        st["lag"].append((r["t_send"] - r["scheduled_t"]) * 1000)
        st["loop"].append((r.get("loop_lag_s") or 0.0) * 1000)
    return out


class CpuSampler(threading.Thread):
    """(wall, process CPU) every 0.25 s, to tell how busy the client process was during each level."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, float]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.samples.append((time.time(), time.process_time()))
            self.halt.wait(0.25)

    def share(self, a: float, b: float) -> float:
        """Process CPU seconds per wall second between a and b (1.0 = one core busy)."""
        inside = [s for s in self.samples if a <= s[0] <= b]
        if len(inside) < 2:
            return math.nan
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="1,2,4,8,16,32,64,128", help="concurrency levels (comma-separated)")
    ap.add_argument("--decode-tps", type=float, default=50.0, help="simulator decode steps per second per request")
    ap.add_argument("--prefill-tps", type=float, default=100_000.0)
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per level")
    ap.add_argument("--duration", type=float, default=6.0, help="measured seconds per level")
    ap.add_argument("--threshold-ms", type=float, default=1.0)
    ap.add_argument("--no-fsync", action="store_true", help="patch out the ledger's fsync per record (to see its cost)")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    if args.no_fsync:
        import leverbench.ledger.writer as w

        class _NoSync:  # the writer calls os.fsync through its module's ``os``
            def __getattr__(self, name):
                return getattr(os, name)

            @staticmethod
            def fsync(fd):
                return None

        w.os = _NoSync()
    proc, url = start_sim(args.decode_tps, args.prefill_tps, slots=max(levels) * 2)
    t_start = time.time()
    cpu0 = time.process_time()
    sampler = CpuSampler()
    sampler.start()
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            ramp = OUTPUT_TOKENS / args.decode_tps  # one service time: the clients' sends spread evenly
            exp = load_experiment(experiment(tmp, url, levels, args.warmup, args.duration, ramp))
            Runner(exp, tmp / "run").run()
            records = read_ledger(tmp / "run").records
            stats = compare(records, truth(url))
    finally:
        sampler.halt.set()
        proc.terminate()
        proc.wait(timeout=10)
    print(f"client-overhead benchmark: leverbench client (Runner/run_load/stream_chat, one event loop, ledger fsync "
          f"{'OFF' if args.no_fsync else 'on'}) vs the simulator's own stamps (separate process)")
    print(f"machine: {os.cpu_count()} cores; prompt {PROMPT_TOKENS} tokens, {OUTPUT_TOKENS} output tokens, "
          f"decode {args.decode_tps:g} tok/s per request; {args.warmup:g} s warm-up + {args.duration:g} s per level")
    hdr = (f"{'conc':>5} {'calls':>6} {'req/s':>7} {'chunks/s':>9} | {'TTFT err ms p50':>15} {'p99':>7} | "
           f"{'gap err ms p50':>14} {'p99':>7} | {'stamp err p50':>13} {'p99':>7} | {'send lag p99':>12} "
           f"{'loop stall max':>14} {'client CPU':>10}")
    for sweep, title in (("burst", "clients start together (closed loop in lock-step: every send comes in a burst of "
                                   "`conc`)"),
                         ("staggered", "clients' starts spread over one service time (sends evenly spaced)")):
        rows = [st for st in stats.values() if st["sweep"] == sweep]
        print()
        print(f"{sweep}: {title}")
        print(hdr)
        print("-" * len(hdr))
        thr = args.threshold_ms
        for st in rows:
            span = (max(st["t"]) - min(st["t"])) if st["t"] else math.nan
            rps = st["n"] / span if span else math.nan
            print(f"{st['c']:>5} {st['n']:>6} {rps:>7.1f} {rps * OUTPUT_TOKENS:>9.0f} | {pct(st['ttft'], 50):>15.2f} "
                  f"{pct(st['ttft'], 99):>7.2f} | {pct(st['gap'], 50):>14.2f} {pct(st['gap'], 99):>7.2f} | "
                  f"{pct(st['stamp'], 50):>13.2f} {pct(st['stamp'], 99):>7.2f} | {pct(st['lag'], 99):>12.2f} "
                  f"{max(st['loop'] or [math.nan]):>14.2f} {sampler.share(min(st['t']), max(st['t'])):>9.0%}"
                  + (f"  ({st['unmatched']} unmatched)" if st["unmatched"] else ""))
        for what, keys in (("TTFT error", ("ttft",)), ("gap error", ("gap",)), ("TTFT and gap error", ("ttft", "gap"))):
            best = None
            for st in sorted(rows, key=lambda x: x["c"]):
                if all(pct(st[k], 99) <= thr for k in keys):
                    best = st["c"]
                else:
                    break
            print(f"=> highest concurrency (every level up to it) with {what} p99 <= {thr:g} ms: "
                  f"{best if best is not None else 'none'}")
    cpu = time.process_time() - cpu0
    print(f"\nwall clock {time.time() - t_start:.0f} s; client process CPU {cpu:.1f} s; load average now "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
