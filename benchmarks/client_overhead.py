"""How much error does leverbench's own client add to what it measures, and at what load does it give out?

Runs the simulator in a separate process (``leverbench sim``: its own Python
interpreter and event loop, so it does not share the client's), then runs a
leverbench experiment against it whose only load stage is a closed-loop sweep
over concurrency 1, 2, 4, ... 128 (200-token prompts, 50 output tokens), through
the real runner: ``Runner`` → ``run_load`` → ``stream_chat``, ledger writes
(fsync) included.  Every call the client recorded is then matched with the
simulator's own ground truth (``/sim/truth``: time.time() stamps of arrival and
of every chunk it wrote; same machine, same clock) through the server timings
each response carries (``prompt_ms`` and ``predicted_ms``: the simulator's
prefill and decode split at the first token, exact), and the differences are printed side by side:

- TTFT error     = client (send_s +) ttft_s − (sim first_token − sim arrival): what
                   the client adds to time to first token from its connection
                   ready (its queue before the request went out, the way there
                   and back, its read), alike for every client; leverbench's
                   ttft_s alone ("as recorded") leaves out its queue, send_s;
- gap error      = client gap between chunks i−1 and i − the simulator's gap
                   between writing them (absolute value);
- stamp error    = (client t_send + connect_s + send_s + chunk_t[i]) − sim chunk_times[i]:
                   how late the client saw each token after the server wrote it;
- send lag       = t_send − scheduled_t (closed loop: the client's turnaround
                   between one call's end and its next send) and the event-loop
                   stall the runner itself recorded (loop_lag_s);
- e2e            = send lag + connect_s + send_s + latency_s: the latency the
                   load analysis reports (from the schedule).

``--fsync both`` runs the sweep against the same simulator with the ledger's
fsync per record and with it patched out, ``--rounds`` times each in ABBA
order (on, off, off, on, ...: drift of a shared machine falls on both alike),
and prints their latencies side by side: the writer thread appends while the
next call goes out, so the two should agree within the noise.

``--workers 1,2`` runs the sweep once per number of client processes (a
stage's ``workers``: Ray actors, each its own asyncio client and ledger shard;
a local Ray cluster is started for the benchmark, or ``RAY_ADDRESS`` joined),
and prints their TTFT and gap (ITL) errors and send lag side by side, with the
highest concurrency each holds within ``--threshold-ms`` of TTFT error at p99.
A level below the number of workers is skipped (each worker needs a client).
The "client CPU" column is this process's: with workers > 1 the clients are
the actors, so it is left out.

``--bare`` runs, beside leverbench's client and against the same simulator, a bare aiohttp streaming client
(``bare_client.py``: ~30 lines, its own process, no record and no ledger; its TTFT counted from the
connection ready, as one writes it by hand and as leverbench's was before its ledger's version 4;
leverbench's counts from when the request went out, the client's own queue before that recorded apart as
``send_s``: aiohttp on Python 3.11 writes a request from a task of its own, which a loop busy with a burst
reaches late), alternating with it at each level (ABBA over ``--repeats``), and prints them side by side,
every client's TTFT counted alike from its connection ready (leverbench's send_s added back): TTFT error
p50 and p99 per repetition (median [range]) and pooled, leverbench's as it records it (send_s apart) and
its send_s, the error's two parts (out: connection ready to the server's handler, the client's queue, the
request's way there and the server's loop taking it, itself in two where the simulator noted its read of
the request: wire, until that read, and intake, the server's own dispatch to the handler; back: the
server's first-token write to the client's stamp), the error counted from the server's read, the gap
error, each client's CPU per call and the load average.  ``--server-close silent`` has the simulator close
each chat connection after its response, as llama.cpp's server does (``announced``: with
``Connection: close``), so that every call of a lock-step burst opens a connection.  ``--src OLD/src --src
src`` runs the leverbench of each source tree in its own process instead of this one: another commit's
client against this one's, in one run.  On a shared machine compare only within one run: other work moves
the figures between runs by several times.

The highest concurrency whose TTFT and gap errors both stay within 1 ms at p99
is the load this client sustains on this machine.

    .venv/bin/python benchmarks/client_overhead.py            # ~1-2 minutes
    .venv/bin/python benchmarks/client_overhead.py --levels 32,128,256 --sweeps burst --server-close silent \
        --bare --repeats 4                                     # leverbench vs a bare aiohttp client, ~5 minutes
    .venv/bin/python benchmarks/client_overhead.py --levels 128 --sweeps burst --server-close silent --bare \
        --repeats 4 --src /tmp/old/src --src src                # before and after a change, in one run
    .venv/bin/python benchmarks/client_overhead.py --levels 32,128,256 --sweeps burst --server-close silent \
        --bare --repeats 4 --pin                               # the same, the simulator on a CPU of its own
    .venv/bin/python benchmarks/client_overhead.py --levels 1,8,64 --duration 3
    .venv/bin/python benchmarks/client_overhead.py --fsync off  # the ledger's fsync per call patched out
    .venv/bin/python benchmarks/client_overhead.py --fsync both --rounds 2 --levels 1,4,16  # on and off, side by side
    .venv/bin/python benchmarks/client_overhead.py --workers 1,2 --threshold-ms 5  # 1 vs 2 client processes (Ray)
    .venv/bin/python benchmarks/client_overhead.py --tiny --bare --fsync both  # concurrency 1, burst, 0.3 s: seconds

Nothing here is a test: the figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from leverbench.config import load as load_experiment  # noqa: E402
from leverbench.engines.simulator import llama_clocks_ms, synthetic_text  # noqa: E402
from leverbench.ledger.reader import read_ledger  # noqa: E402
from leverbench.runner.run import Runner  # noqa: E402

PROMPT_TOKENS = 200
OUTPUT_TOKENS = 50
SWEEPS = ("burst", "staggered")


def pct(xs: list[float], p: float) -> float:
    """Linear-interpolation percentile (NumPy's default)."""
    s = sorted(xs)
    if not s:
        return math.nan
    r = p / 100 * (len(s) - 1)
    lo = math.floor(r)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (r - lo)


SIM_CODE = """
import gc, sys, time
gc.disable()
from aiohttp import web, web_protocol, web_server
import leverbench.engines.simulator.server as server

class Noting(web_protocol.RequestHandler):  # when the loop read each connection's latest bytes: a truth's received
    __slots__ = ("rx_at",)

    def data_received(self, data):
        self.rx_at = time.time()
        super().data_received(data)

web_server.RequestHandler = Noting
close = sys.argv.pop(1)
build = server.build_app

def closing_app(cfg):
    app = build(cfg)
    chat = cfg.base_path + "/chat/completions"
    if close == "silent":  # llama.cpp's way: the response says keep-alive, then the server closes the connection
        @web.middleware
        async def close_after(request, handler):
            resp = await handler(request)
            if request.path == chat:
                resp.force_close()
            return resp
        app.middlewares.append(close_after)
    elif close == "announced":  # Connection: close in the response's headers
        async def announce(request, resp):  # (runs after aiohttp chose its headers: the header set here)
            if request.path == chat:
                resp.force_close()
                resp.headers["Connection"] = "close"
        app.on_response_prepare.append(announce)
    return app

server.build_app = closing_app
from leverbench.cli import main
sys.argv[0] = "leverbench"
main()
"""


#: ``--pin``: the CPUs the simulator runs on (this process and every client process get the others); empty: all.
SIM_CPUS: set[int] = set()


def start_sim(decode_tps: float, prefill_tps: float, slots: int, close: str = "off") -> tuple[subprocess.Popen, str]:
    """The simulator in its own process.  *close*: "off" (connections kept alive), "silent" (each chat
    connection closed after its response, which said keep-alive: llama.cpp's server does so) or "announced"
    (``Connection: close`` in the response)."""
    # The simulator is the reference: its collector is switched off so that its own GC pauses (its truth list
    # grows to thousands of records) do not show up as client error.  The client keeps its collector.
    cmd = [sys.executable, "-c", SIM_CODE, close, "sim", "--port", "0", "--slots", str(slots), "--decode-tps",
           str(decode_tps), "--prefill-tps", str(prefill_tps), "--output-tokens", str(OUTPUT_TOKENS),
           "--no-prefix-cache"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    err = tempfile.TemporaryFile("w+")  # not a pipe: one nobody reads would block the simulator once full
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                            preexec_fn=(lambda: os.sched_setaffinity(0, SIM_CPUS)) if SIM_CPUS else None)
    line = proc.stdout.readline().strip()
    if not line.startswith("http"):
        proc.kill()
        proc.wait()
        err.seek(0)
        raise SystemExit(f"simulator did not start: {line!r} {err.read()[:2000]}")
    return proc, line


def experiment(tmp: Path, url: str, levels: list[int], warmup_s: float, duration_s: float, ramp_s: float,
               workers: int = 1, sweeps: tuple[str, ...] = SWEEPS) -> Path:
    """The experiment file: one arm (the simulator), one case, and a closed-loop stage per sweep over *levels*:
    ``burst`` (every client starts at once: the loop stays in lock-step, every send in a burst) and
    ``staggered`` (the clients' starts spread over *ramp_s*)."""
    tmp.mkdir(parents=True, exist_ok=True)
    p = tmp / "exp.toml"
    shard = f"workers = {workers}\n" if workers > 1 else ""
    prompt = synthetic_text(PROMPT_TOKENS - 1, "client-overhead")  # + 1 role token = 200 simulator tokens
    stages = {"burst": "", "staggered": f"ramp_s = {ramp_s}\n"}
    text = f'''
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
'''
    for sweep in sweeps:
        ramp = ramp_s if sweep == "staggered" else 0.0
        text += f'''
[[load]]
name = "{sweep}"
mode = "closed"
case = "p200"
concurrency = {levels}
warmup_s = {warmup_s + ramp}
duration_s = {duration_s}
{stages[sweep]}{shard}'''
    p.write_text(text)
    return p


def truth(url: str, reset: bool = False) -> list[dict]:
    """The simulator's ground-truth records so far; with *reset*, forgotten after (the next unit's start clean)."""
    with urllib.request.urlopen(url + "/sim/truth", timeout=60) as r:
        out = json.loads(r.read())
    if reset:
        urllib.request.urlopen(urllib.request.Request(url + "/sim/reset", method="POST"), timeout=60).close()
    return out


def compare(records: list[dict], truths: list[dict]) -> dict[str, dict]:
    """Per stage: the error lists (ms) of every matched call, and the failed calls counted (left out)."""
    by_key = {}
    for t in truths:
        by_key[llama_clocks_ms(t["prefill_s"], t["first_step_s"], t["decode_s"])] = t
    out: dict[str, dict] = {}
    for r in records:
        if r.get("kind") != "load" or r.get("warmup"):
            continue
        st = out.setdefault(r["stage"], {"c": r["concurrency"], "sweep": r["sweep"], "ttft": [], "gap": [],
                                         "stamp": [], "lag": [], "loop": [], "e2e": [], "n": 0, "unmatched": 0,
                                         "failed": 0, "errors": [], "t": [], "out": [], "back": [], "wire": [],
                                         "intake": [], "read": [], "send": [], "ttft_rec": []})
        if r.get("error") is not None:
            st["failed"] += 1
            err = r["error"]
            msg = f"{err['class']}: {err['message'][:60]}…{err['message'][-70:]}" if isinstance(err, dict) else err
            st["errors"].append(str(msg))
            continue
        tm = r.get("timings") or {}
        t = by_key.get((tm.get("prompt_ms"), tm.get("predicted_ms")))
        if t is None or len(t["chunk_times"]) != len(r["chunk_t"]):
            st["unmatched"] += 1
            continue
        st["n"] += 1
        # every client alike from its connection ready; leverbench's own times count from its request out, after
        # its queue (send_s, ledger version 4; the bare client's and an older leverbench's: 0, inside their ttft_s)
        ready = r["t_send"] + (r.get("connect_s") or 0.0)
        send = r.get("send_s") or 0.0
        sent = ready + send
        st["send"].append(send * 1000)
        st["t"].append(sent + r["latency_s"])
        st["t"].append(r["scheduled_t"])
        st["ttft"].append((send + r["ttft_s"] - (t["first_token"] - t["arrival"])) * 1000)
        st["ttft_rec"].append((r["ttft_s"] - (t["first_token"] - t["arrival"])) * 1000)  # as the client records it
        # its two parts: the request's way to the server's handler, and the first token's way back to the stamp
        st["out"].append((t["arrival"] - ready) * 1000)
        st["back"].append((sent + r["ttft_s"] - t["first_token"]) * 1000)
        if t.get("received") is not None:  # out in two: until the server's loop read the request, then its handler
            st["wire"].append((t["received"] - ready) * 1000)
            st["intake"].append((t["arrival"] - t["received"]) * 1000)
            st["read"].append((send + r["ttft_s"] - (t["first_token"] - t["received"])) * 1000)
        ct, tt = r["chunk_t"], t["chunk_times"]
        for i in range(1, len(ct)):
            st["gap"].append(abs((ct[i] - ct[i - 1]) - (tt[i] - tt[i - 1])) * 1000)
        st["stamp"].extend(((sent + c) - s) * 1000 for c, s in zip(ct, tt))
        st["lag"].append((r["t_send"] - r["scheduled_t"]) * 1000)
        st["e2e"].append((sent + r["latency_s"] - r["scheduled_t"]) * 1000)
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
        return self.share_of(self.samples, a, b)

    @staticmethod
    def share_of(samples: list[tuple[float, float]], a: float, b: float) -> float:
        inside = [s for s in samples if a <= s[0] <= b]
        if len(inside) < 2:
            return math.nan
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


Variant = tuple[str, str, int]  # (client: "leverbench" or "bare", the ledger's fsync: "on"/"off"/"-", workers)


def variant_name(v: Variant) -> str:
    client, mode, w = v
    if client == "bare":
        return "bare aiohttp client"
    if client.startswith("src:"):
        return f"leverbench from {client[4:]} (its own process), fsync {mode}"
    return f"leverbench, fsync {mode}, {w} client process{'es' if w > 1 else ''}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="1,2,4,8,16,32,64,128", help="concurrency levels (comma-separated)")
    ap.add_argument("--decode-tps", type=float, default=50.0, help="simulator decode steps per second per request")
    ap.add_argument("--prefill-tps", type=float, default=100_000.0)
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per level")
    ap.add_argument("--duration", type=float, default=6.0, help="measured seconds per level")
    ap.add_argument("--threshold-ms", type=float, default=1.0)
    ap.add_argument("--sweeps", default=",".join(SWEEPS), help="burst (lock-step: every client starts at once), "
                    "staggered (starts spread over one service time), or both (comma-separated)")
    ap.add_argument("--server-close", choices=("off", "silent", "announced"), default="off",
                    help="the simulator closes each chat connection after its response: silent (the response said "
                         "keep-alive: llama.cpp's server does so), announced (Connection: close), or off")
    ap.add_argument("--bare", action="store_true", help="a bare aiohttp client (benchmarks/bare_client.py) in the "
                    "same run, alternating with leverbench's at each level, compared side by side")
    ap.add_argument("--fsync", choices=("on", "off", "both"), default="on",
                    help="the ledger's fsync per record: on, patched out, or both (compared side by side)")
    ap.add_argument("--repeats", "--rounds", type=int, default=1, help="repetitions of each level per client "
                    "variant, in ABBA order (A, B, B, A, ...: drift of a shared machine falls on both alike)")
    ap.add_argument("--src", action="append", default=[], metavar="DIR",
                    help="instead of this process's leverbench, the one of this source tree (a src/ directory), run in "
                         "its own process (as `leverbench run` has it); repeatable, each a variant: --src OLD/src "
                         "--src src compares another commit's client with this one's in one run, ABBA")
    ap.add_argument("--pin", action="store_true", help="the simulator on the last CPU, this process and every "
                    "client process on the others (os.sched_setaffinity): what the client adds when the server "
                    "does not share its cores; a machine with fewer than 2 CPUs refuses it")
    ap.add_argument("--workers", default="1", help="client processes per stage (Ray actors), comma-separated: "
                    "each value a variant, compared side by side")
    ap.add_argument("--tiny", action="store_true", help="--levels 1 --sweeps burst --warmup 0.1 --duration 0.3 "
                    "--decode-tps 1000: every variant asked for in seconds (too few calls to read)")
    if "--tiny" in sys.argv[1:]:
        ap.set_defaults(levels="1", sweeps="burst", warmup=0.1, duration=0.3, decode_tps=1000.0)
    args = ap.parse_args()
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise SystemExit("--pin needs at least 2 CPUs: one for the simulator, the rest for the clients")
        SIM_CPUS.add(cpus[-1])
        os.sched_setaffinity(0, set(cpus[:-1]))  # before any thread or child: they inherit it
    levels = [int(x) for x in args.levels.split(",")]
    workers = [int(x) for x in args.workers.split(",")]
    sweeps = tuple(x for x in args.sweeps.split(",") if x)
    if not sweeps or set(sweeps) - set(SWEEPS):
        raise SystemExit(f"--sweeps: burst, staggered or both, not {args.sweeps!r}")
    modes = ["on", "off"] if args.fsync == "both" else [args.fsync]
    if max(workers) > 1 and modes != ["on"]:
        raise SystemExit("--fsync off/both patches this process's writer only, not the workers': use --fsync on")
    variants: list[Variant] = [("leverbench", m, w) for m in modes for w in workers]
    if args.src:
        if variants != [("leverbench", "on", 1)]:
            raise SystemExit("--src runs leverbench with fsync on and one client process: no --fsync, --workers")
        variants = [(f"src:{Path(d).resolve()}", "on", 1) for d in args.src]
    if args.bare:
        variants.append(("bare", "-", 1))
    # per level, each repetition runs every variant, in reverse order every other time (ABBA)
    order = [(v, c, r) for c in levels for r in range(args.repeats)
             for v in (variants if r % 2 == 0 else variants[::-1]) if c >= v[2]]
    if max(workers) > 1:
        start_ray(max(workers))
    proc, url = start_sim(args.decode_tps, args.prefill_tps, slots=max(levels) * 2, close=args.server_close)
    t_start, load0 = time.time(), os.getloadavg()
    cpu0 = time.process_time()
    sampler = CpuSampler()
    sampler.start()
    ramp = OUTPUT_TOKENS / args.decode_tps  # one service time: the clients' sends spread evenly
    units: list[tuple[Variant, int, int, dict, float]] = []  # variant, level, repeat, its stats by stage, load avg
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for k, (v, c, r) in enumerate(order):
                load1 = os.getloadavg()[0]
                cpu: dict[str, float] = {}  # the bare client's own CPU share, per sweep
                if v[0] == "bare":
                    recs, cpu = run_bare(url, c, sweeps, args.warmup, args.duration, ramp, args.server_close == "off")
                elif v[0].startswith("src:"):
                    exp_path = experiment(tmp / f"exp-{k}", url, [c], args.warmup, args.duration, ramp, 1, sweeps)
                    samples = run_elsewhere(v[0][4:], exp_path, tmp / f"run-{k}")
                    recs = read_ledger(tmp / f"run-{k}").records
                else:
                    exp = load_experiment(experiment(tmp / f"exp-{k}", url, [c], args.warmup, args.duration, ramp,
                                                     v[2], sweeps))
                    with fsync_patched_out(v[1] == "off"):
                        Runner(exp, tmp / f"run-{k}").run()
                    recs = read_ledger(tmp / f"run-{k}").records
                stats = compare(recs, truth(url, reset=True))  # matched now: the records are not kept
                for st in stats.values():
                    st["cpu"] = cpu.get(st["sweep"], math.nan)
                    if v[0].startswith("src:") and st["t"]:  # that process's own share over its calls' span
                        st["cpu"] = CpuSampler.share_of(samples, min(st["t"]), max(st["t"]))
                del recs
                units.append((v, c, r, stats, load1))
                gc.collect()  # between units, outside any measurement: each starts with no garbage pending
    finally:
        sampler.halt.set()
        proc.terminate()
        proc.wait(timeout=10)
    print("client-overhead benchmark: leverbench client (Runner/run_load/stream_chat, one event loop) vs the "
          "simulator's own stamps (separate process)")
    print(f"machine: {os.cpu_count()} cores; prompt {PROMPT_TOKENS} tokens, {OUTPUT_TOKENS} output tokens, "
          f"decode {args.decode_tps:g} tok/s per request; {args.warmup:g} s warm-up + {args.duration:g} s per level; "
          f"server closes connections: {args.server_close}; {args.repeats} repetition(s) per level and variant, "
          f"ABBA; variants: {'; '.join(variant_name(v) for v in variants)}")
    per_unit: dict[Variant, dict[tuple[str, int], list[dict]]] = {v: {} for v in variants}
    for v, _c, _r, stats, load1 in units:
        for st in stats.values():
            st["load"] = load1
            if v[0] == "leverbench":  # this process's share (the workers' CPU is not seen here)
                st["cpu"] = sampler.share(min(st["t"]), max(st["t"])) if v[2] == 1 and st["t"] else math.nan
            per_unit[v].setdefault((st["sweep"], st["c"]), []).append(st)
    pooled = {v: {f"{k[0]}@{k[1]}": pool(sts) for k, sts in sorted(per_unit[v].items())} for v in variants}
    for v in variants:
        print(f"\n=== {variant_name(v)} (every repetition pooled) ===")
        print_tables(pooled[v], args.threshold_ms, sweeps)
    if len(modes) == 2:
        print_fsync_comparison(pooled[("leverbench", "on", 1)], pooled[("leverbench", "off", 1)])
    if len(workers) > 1:
        print_workers_comparison({w: pooled[("leverbench", modes[0], w)] for w in workers}, args.threshold_ms)
    if args.bare:
        print_bare_comparison([(variant_name(v), per_unit[v]) for v in variants if v[0] != "bare"],
                              per_unit[("bare", "-", 1)])
    cpu = time.process_time() - cpu0
    print(f"\nwall clock {time.time() - t_start:.0f} s; client process CPU {cpu:.1f} s; load average (1, 5, 15 min) "
          f"{' '.join(f'{x:.2f}' for x in load0)} at the start, {' '.join(f'{x:.2f}' for x in os.getloadavg())} now")
    if SIM_CPUS:
        print(f"pinned: the simulator on CPU {sorted(SIM_CPUS)}, the clients on CPU {sorted(os.sched_getaffinity(0))}")


ELSEWHERE = """
import json, sys, threading, time
from pathlib import Path
src, exp, out, samples = sys.argv[1:5]
sys.path.insert(0, src)
from leverbench.config import load
from leverbench.runner.run import Runner
rows, halt = [], threading.Event()
def sample():
    while not halt.is_set():
        rows.append((time.time(), time.process_time()))
        halt.wait(0.25)
threading.Thread(target=sample, daemon=True).start()
Runner(load(exp), Path(out)).run()
halt.set()
Path(samples).write_text(json.dumps(rows))
"""


def run_elsewhere(src: str, exp: Path, out: Path) -> list[tuple[float, float]]:
    """The experiment run by the leverbench of the source tree *src* in its own process (the Runner, as
    ``leverbench run`` has it, without the reports); that process's (wall, CPU) samples every 0.25 s."""
    samples = out.with_suffix(".cpu.json")
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run([sys.executable, "-c", ELSEWHERE, src, str(exp), str(out), str(samples)], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"leverbench from {src} failed: {done.stderr[-2000:]}")
    return [tuple(x) for x in json.loads(samples.read_text())]


def run_bare(url: str, c: int, sweeps: tuple[str, ...], warmup_s: float, duration_s: float, ramp_s: float,
             keep_alive: bool) -> tuple[list[dict], dict[str, float]]:
    """The bare client's closed loop at concurrency *c*, once per sweep, each in its own process
    (``bare_client.py``): the case's prompt and a few distinct words per request, as leverbench's stage sends.
    Its calls, and its process's CPU share over each sweep's measured seconds."""
    prompt = synthetic_text(PROMPT_TOKENS - 1, "client-overhead")
    out: list[dict] = []
    cpu: dict[str, float] = {}
    for sweep in sweeps:
        ramp = ramp_s if sweep == "staggered" else 0.0
        cmd = [sys.executable, str(Path(__file__).with_name("bare_client.py")), url + "/v1/chat/completions", str(c),
               str(warmup_s + ramp), str(duration_s), str(ramp), "1" if keep_alive else "0",
               f"{sweep}@{c}-{uuid.uuid4().hex[:8]}", sweep, prompt]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"the bare client failed: {done.stderr[-2000:]}")
        for line in done.stdout.splitlines():
            r = json.loads(line)
            if r["kind"] == "cpu":
                cpu[sweep] = r["share"]
            else:
                out.append(r)
    return out, cpu


def pool(sts: list[dict]) -> dict:
    """One stage's stats over its repetitions: the lists joined, the counts summed."""
    out = {"c": sts[0]["c"], "sweep": sts[0]["sweep"]}
    for k, v in sts[0].items():
        if isinstance(v, list):
            out[k] = [x for st in sts for x in st[k]]
        elif k in ("n", "unmatched", "failed"):
            out[k] = sum(st[k] for st in sts)
    out["cpu"] = [st["cpu"] for st in sts]
    out["spans"] = [(min(st["t"]), max(st["t"])) for st in sts if st["t"]]
    return out


def spread(sts: list[dict], key: str, p: float) -> str:
    """The median over repetitions of the p-th percentile, and their range: "12.3 [10.1–15.0]"."""
    xs = sorted(pct(st[key], p) for st in sts)
    if len(xs) == 1:
        return f"{xs[0]:.1f}"
    return f"{pct(xs, 50):.1f} [{xs[0]:.1f}–{xs[-1]:.1f}]"


def errors(st: dict) -> str:
    """The failed calls' errors, the most frequent first, with their counts."""
    counts: dict[str, int] = {}
    for e in st["errors"]:
        counts[e] = counts.get(e, 0) + 1
    return "; ".join(f"{n} × {e}" for e, n in sorted(counts.items(), key=lambda x: -x[1])[:3])


def pooled(sts: list[dict], key: str, p: float = 99) -> float:
    """The p-th percentile of every repetition's values of *key* together."""
    return pct([x for st in sts for x in st[key]], p)


def cpu_per_call(st: dict) -> float:
    """The client process's CPU ms per measured call over one unit (its share × the calls' span / calls)."""
    if not st["t"] or not st["n"] or math.isnan(st["cpu"]):
        return math.nan
    return st["cpu"] * (max(st["t"]) - min(st["t"])) / st["n"] * 1000


def print_bare_comparison(clients: list[tuple[str, dict[tuple[str, int], list[dict]]]],
                          bare: dict[tuple[str, int], list[dict]]) -> None:
    """Per sweep and level, each leverbench variant's TTFT and gap errors beside the bare client's (ms): each the
    median over repetitions [their range], and the p99 of every repetition's calls pooled (every client's TTFT
    from its connection ready; "as rec.": leverbench's as it records it, its own queue, send_s, apart and
    shown as "send"), with the TTFT error's two parts (pooled p99): out, from the connection ready to the
    server's handler (the client's queue, the request's way there, the server's loop taking it), back,
    from the server's first-token write to the client's stamp of it; out in its two parts where the simulator
    noted when its loop read the request (wire: from the connection ready until then, the client's queue, the
    request's way and the server's loop getting round to reading it; intake: from that read to the handler,
    the server's own dispatch), and the TTFT error counted from the server's read ("read p99": wire + back,
    what is left when the server's dispatch is not counted as the client's); each client's CPU per call."""
    print("\n=== leverbench vs the bare aiohttp client, same run, same server (ms; per repetition: median "
          "[min–max]; pooled: every repetition's calls) ===")
    for i, (name, _) in enumerate(clients):
        print(f"  L{i}: {name}")
    hdr = (f"{'sweep':>9} {'conc':>5} {'client':>6} {'reps':>4} {'calls':>6} {'failed':>6} | {'TTFT err p50':>20} "
           f"{'p99':>20} {'pooled p99':>10} {'as rec.':>7} {'send p99':>8} {'out p99':>7} {'wire':>6} {'intake':>6} "
           f"{'back p99':>8} {'read p99':>8} | {'gap err p99':>20} | "
           f"{'CPU ms/call':>11} | {'load 1m':>12}")
    print(hdr)
    print("-" * len(hdr))
    rows = [(f"L{i}", per) for i, (_, per) in enumerate(clients)] + [("bare", bare)]
    keys = set(bare).union(*(per for _, per in clients))
    for key in sorted(keys, key=lambda k: (SWEEPS.index(k[0]), k[1])):
        for who, per in rows:
            sts = per.get(key)
            if not sts:
                continue
            loads = sorted(st["load"] for st in sts)
            cpu = pct([x for x in map(cpu_per_call, sts) if not math.isnan(x)], 50)
            print(f"{key[0]:>9} {key[1]:>5} {who:>6} {len(sts):>4} {sum(st['n'] for st in sts):>6} "
                  f"{sum(st['failed'] for st in sts):>6} | {spread(sts, 'ttft', 50):>20} {spread(sts, 'ttft', 99):>20} "
                  f"{pooled(sts, 'ttft'):>10.1f} {pooled(sts, 'ttft_rec'):>7.1f} {pooled(sts, 'send'):>8.1f} "
                  f"{pooled(sts, 'out'):>7.1f} {pooled(sts, 'wire'):>6.1f} {pooled(sts, 'intake'):>6.1f} "
                  f"{pooled(sts, 'back'):>8.1f} {pooled(sts, 'read'):>8.1f}"
                  f" | {spread(sts, 'gap', 99):>20} | {cpu:>11.2f} | {loads[0]:>5.2f}–{loads[-1]:<5.2f}")
        for who, per in rows[:-1]:
            if per.get(key) and bare.get(key):
                a, b = pooled(per[key], "ttft"), pooled(bare[key], "ttft")
                wins = sum(pct(x["ttft"], 99) < pct(y["ttft"], 99) for x, y in zip(per[key], bare[key]))
                print(f"{'':>16} => {who}: pooled TTFT err p99 / bare's: {a / b:.2f}x "
                      f"({'below' if a < b else 'NOT below'}); its p99 below the bare client's in {wins} of "
                      f"{min(len(per[key]), len(bare[key]))} repetitions (paired in ABBA order)")
                a, b = pooled(per[key], "read"), pooled(bare[key], "read")
                if not (math.isnan(a) or math.isnan(b)):
                    print(f"{'':>16} => {who}: counted from the server's read of the request (its dispatch left "
                          f"out): pooled p99 {a:.1f} ms, bare's {b:.1f} ms: {a / b:.2f}x")


@contextlib.contextmanager
def fsync_patched_out(off: bool):
    """With *off*, the ledger writer's ``os.fsync`` does nothing (the writer calls it through its module's ``os``)."""
    import leverbench.ledger.writer as w  # noqa: PLC0415

    if not off:
        yield
        return

    class _NoSync:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def fsync(fd):
            return None

    real, w.os = w.os, _NoSync()
    try:
        yield
    finally:
        w.os = real


def print_fsync_comparison(on: dict[str, dict], off: dict[str, dict]) -> None:
    """Per stage, the latencies with the ledger's fsync and without it (ms)."""
    print("\n=== fsync on vs off: the latencies the analysis reports (ms, from the schedule) ===")
    hdr = (f"{'sweep':>9} {'conc':>5} | {'e2e p50 on':>10} {'off':>7} | {'e2e p99 on':>10} {'off':>7} | "
           f"{'TTFT err p99 on':>15} {'off':>6} | {'send lag p99 on':>15} {'off':>6} | {'calls on':>8} {'off':>5}")
    print(hdr)
    print("-" * len(hdr))
    for stage in on:
        a, b = on[stage], off.get(stage)
        if b is None:
            continue
        print(f"{a['sweep']:>9} {a['c']:>5} | {pct(a['e2e'], 50):>10.1f} {pct(b['e2e'], 50):>7.1f} | "
              f"{pct(a['e2e'], 99):>10.1f} {pct(b['e2e'], 99):>7.1f} | {pct(a['ttft'], 99):>15.2f} "
              f"{pct(b['ttft'], 99):>6.2f} | {pct(a['lag'], 99):>15.2f} {pct(b['lag'], 99):>6.2f} | "
              f"{a['n']:>8} {b['n']:>5}")


def start_ray(n: int) -> None:
    """Ray for the workers: RAY_ADDRESS's cluster, else a local one of *n* CPUs (one per worker actor)."""
    import logging  # noqa: PLC0415

    from leverbench.runner.workers import import_ray  # noqa: PLC0415

    ray = import_ray("--workers above 1")
    address = os.environ.get("RAY_ADDRESS")
    ray.init(address=address or "local", num_cpus=None if address else n, include_dashboard=False,
             logging_level=logging.WARNING)


def print_workers_comparison(by_w: dict[int, dict[str, dict]], thr: float) -> None:
    """Per sweep and concurrency, each number of workers side by side: TTFT and gap (ITL) error at p99 and
    the send lag at p99 (ms); then the highest concurrency each holds within *thr* ms of TTFT error at p99."""
    ws = sorted(by_w)
    cols = lambda: " ".join(f"{'w' + str(w):>6}" for w in ws)  # noqa: E731
    print("\n=== client processes side by side: errors against the simulator's stamps and send lag, p99 (ms) ===")
    for sweep in ("burst", "staggered"):
        per = {w: {st["c"]: st for st in by_w[w].values() if st["sweep"] == sweep} for w in ws}
        levels = sorted(set().union(*(p.keys() for p in per.values())))
        hdr = f"{sweep:>9} {'conc':>5} | TTFT err {cols()} | gap err {cols()} | send lag {cols()} | calls {cols()}"
        print()
        print(hdr)
        print("-" * len(hdr))
        for c in levels:
            def cells(key: str, c: int = c, per: dict = per) -> str:
                return " ".join(f"{pct(per[w][c][key], 99):>6.2f}" if c in per[w] else f"{'-':>6}" for w in ws)

            calls = " ".join(f"{per[w][c]['n'] if c in per[w] else '-':>6}" for w in ws)
            print(f"{'':>9} {c:>5} | {'':>8} {cells('ttft')} | {'':>7} {cells('gap')} | {'':>8} {cells('lag')} | "
                  f"{'':>5} {calls}")
        for w in ws:
            best = None
            for c in sorted(per[w]):
                if pct(per[w][c]["ttft"], 99) > thr:
                    break
                best = c
            print(f"=> {sweep}, {w} worker(s): highest concurrency (every level up to it) with TTFT error p99 <= "
                  f"{thr:g} ms: {best if best is not None else 'none'}")


def print_tables(stats: dict[str, dict], thr: float, sweeps: tuple[str, ...] = SWEEPS) -> None:
    """The per-level error tables of each sweep (*stats*: :func:`pool`'s, by stage; the client CPU the median
    over repetitions of this process's share, left out where the clients are Ray workers)."""
    hdr = (f"{'conc':>5} {'calls':>6} {'req/s':>7} {'chunks/s':>9} | {'TTFT err ms p50':>15} {'p99':>7} | "
           f"{'gap err ms p50':>14} {'p99':>7} | {'stamp err p50':>13} {'p99':>7} | {'send lag p99':>12} "
           f"{'loop stall max':>14} {'client CPU':>10}")
    for sweep, title in (("burst", "clients start together (closed loop in lock-step: every send comes in a burst of "
                                   "`conc`)"),
                         ("staggered", "clients' starts spread over one service time (sends evenly spaced)")):
        if sweep not in sweeps:
            continue
        rows = [st for st in stats.values() if st["sweep"] == sweep]
        print()
        print(f"{sweep}: {title}")
        print(hdr)
        print("-" * len(hdr))
        for st in rows:
            span = sum(b - a for a, b in st["spans"]) or math.nan
            rps = st["n"] / span
            cpu = pct([x for x in st["cpu"] if not math.isnan(x)], 50)
            print(f"{st['c']:>5} {st['n']:>6} {rps:>7.1f} {rps * OUTPUT_TOKENS:>9.0f} | {pct(st['ttft'], 50):>15.2f} "
                  f"{pct(st['ttft'], 99):>7.2f} | {pct(st['gap'], 50):>14.2f} {pct(st['gap'], 99):>7.2f} | "
                  f"{pct(st['stamp'], 50):>13.2f} {pct(st['stamp'], 99):>7.2f} | {pct(st['lag'], 99):>12.2f} "
                  f"{max(st['loop'] or [math.nan]):>14.2f} "
                  + (f"{cpu:>9.0%}" if not math.isnan(cpu) else f"{'-':>9}")
                  + (f"  ({st['unmatched']} unmatched)" if st["unmatched"] else "")
                  + (f"  ({st['failed']} FAILED, left out: {errors(st)})" if st["failed"] else ""))
        for what, keys in (("TTFT error", ("ttft",)), ("gap error", ("gap",)), ("TTFT and gap error", ("ttft", "gap"))):
            best = None
            for st in sorted(rows, key=lambda x: x["c"]):
                if all(pct(st[k], 99) <= thr for k in keys):
                    best = st["c"]
                else:
                    break
            print(f"=> highest concurrency (every level up to it) with {what} p99 <= {thr:g} ms: "
                  f"{best if best is not None else 'none'}")


if __name__ == "__main__":
    main()
