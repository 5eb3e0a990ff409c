"""Benchmark: analysis of a 1,000,000-call ledger into summary.json (target: under 10 s).

Writes a synthetic ledger shaped exactly like the runner's (3 arms × 4 cases, turns of 4 calls,
chunk timelines of 16 chunks, a warm-up call and metrics scrapes before and after per arm), then
times, in one run: reading it, computing the summary, and writing summary.json.  Prints each phase,
the total, the CPU time and the peak memory: resident (ru_maxrss, of this process and of any child
it waited for) and, on Linux, anonymous (sampled; a memory-mapped file's pages are not in it).

    .venv/bin/python benchmarks/analysis_speed.py [--calls 1000000] [--dir /tmp/lb-bench] [--reuse]

``--reuse`` keeps a ledger that an earlier run with the same ``--calls`` wrote in ``--dir``.
A ledger this large is read by polars (see leverbench.ledger.reader).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from leverbench.analysis.summary import summarize
from leverbench.ledger.reader import read_ledger
from leverbench.ledger.records import LEDGER_SCHEMA
from leverbench.report.jsonio import finite

ARMS = {"current": {"prefix_cache": False, "drafter": "none"}, "cache": {"prefix_cache": True, "drafter": "none"},
        "cache+drafter": {"prefix_cache": True, "drafter": "ngram"}}
CASES = ["a", "b", "c", "d"]
CALLS_PER_TURN = 4
FORMAT = "2"  # of the ledger written (a ledger of another format is not reused)


def write_ledger(path: Path, n_calls: int) -> None:
    rnd = random.Random(1)
    repeats = max(1, n_calls // (len(ARMS) * len(CASES) * CALLS_PER_TURN))
    head = {"kind": "run", "schema": LEDGER_SCHEMA, "tool_version": "bench", "run_id": "bench", "started_at": "",
            "host": {}, "experiment_file": "bench.toml",
            "config": {"experiment": {"name": "bench", "repeats": repeats, "order": "interleaved",
                                      "baseline": "current", "volume_tolerance_cell": 0.2,
                                      "volume_tolerance_total": 0.05},
                       "arms": [{"name": a} for a in ARMS], "cases": [{"name": c} for c in CASES]},
            "arms": {a: {"role": "baseline" if a == "current" else "treatment", "conditions": c, "discovered": {}}
                     for a, c in ARMS.items()}}
    speed = {"current": 1.0, "cache": 0.8, "cache+drafter": 0.4}

    def scrapes(when: str) -> str:
        return "".join(json.dumps({"kind": "metrics", "arm": a, "when": when, "t": 1.7e9, "samples": {
            "llamacpp:prompt_tokens_total": 0.0, "llamacpp:kv_cache_usage_ratio": "NaN"}}) + "\n" for a in ARMS)

    with open(path, "w") as fh:
        fh.write(json.dumps(head) + "\n")
        for arm in ARMS:
            fh.write(json.dumps({"kind": "warmup", "arm": arm, "case": CASES[0], "latency_s": 0.5,
                                 "error": None}) + "\n")
        fh.write(scrapes("before"))
        for r in range(repeats):
            for case in CASES:
                for arm in ARMS:
                    tid = uuid.uuid4().hex[:12]
                    total = 0.0
                    for step in range(CALLS_PER_TURN):
                        out = rnd.randint(20, 200)
                        lat = speed[arm] * (0.5 + out / 50.0) * rnd.uniform(0.97, 1.03)
                        total += lat
                        chunk_t = [round(0.4 * lat + i * lat / 27, 6) for i in range(16)]
                        fh.write(json.dumps({
                            "kind": "call", "arm": arm, "case": case, "repeat": r, "step": step, "turn_id": tid,
                            "t_send": 1.7e9 + total, "ttft_s": 0.4 * lat, "latency_s": lat, "chunk_t": chunk_t,
                            "chunk_chars": [4] * 16, "status": 200, "error": None, "prompt_tokens": 1000 + 100 * step,
                            "completion_tokens": out, "cached_tokens": 0, "reasoning_tokens": None,
                            "token_source": "usage", "content_chars": 4 * out, "reasoning_chars": 0,
                            "finish_reason": "stop", "tool_calls": None,
                            "timings": {"prompt_n": 1000, "prompt_ms": 300.0 * speed[arm], "predicted_n": out,
                                        "predicted_ms": out * 20.0 * speed[arm], "cache_n": 0},
                            "request": {"max_tokens": 256}, "input_sha256": "0" * 64,
                            "output_sha256": "0" * 64}) + "\n")
                    fh.write(json.dumps({"kind": "turn", "arm": arm, "case": case, "repeat": r, "turn_id": tid,
                                         "turn_s": total, "calls": CALLS_PER_TURN, "failed_calls": 0,
                                         "output_tokens": 400, "prompt_tokens": 4600, "error": None}) + "\n")
        fh.write(scrapes("after"))


def cpu_s() -> float:
    """CPU seconds used so far by this process and the children it waited for."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class PeakAnon:
    """The largest anonymous resident memory (RssAnon, Linux) seen while it runs, sampled every 10 ms."""

    def __enter__(self) -> PeakAnon:
        self.peak_kb, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                m = re.search(r"RssAnon:\s+(\d+)", Path("/proc/self/status").read_text())
            except OSError:
                return
            self.peak_kb = max(self.peak_kb, int(m.group(1)) if m else 0)
            self._stop.wait(0.01)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "lb-analysis-bench")
    ap.add_argument("--reuse", action="store_true", help="keep the ledger an earlier run with the same --calls wrote")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    path, stamp = a.dir / "ledger.jsonl", a.dir / "ledger.calls"
    if a.reuse and path.exists() and stamp.exists() and stamp.read_text() == f"{a.calls} v{FORMAT}":
        print(f"reusing {path} ({path.stat().st_size / 1e6:.0f} MB)")
    else:
        t = time.perf_counter()
        write_ledger(path, a.calls)
        stamp.write_text(f"{a.calls} v{FORMAT}")
        print(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s (not timed)")
    cpu0 = cpu_s()
    with PeakAnon() as anon:
        t0 = time.perf_counter()
        led = read_ledger(path)
        t1 = time.perf_counter()
        s = summarize(led)
        t2 = time.perf_counter()
        (a.dir / "summary.json").write_text(json.dumps(finite(s)))
        t3 = time.perf_counter()
    cpu = cpu_s() - cpu0
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"calls: {s['run']['calls']:,}")
    print(f"read ledger   {t1 - t0:6.2f} s")
    print(f"summarize     {t2 - t1:6.2f} s")
    print(f"write json    {t3 - t2:6.2f} s")
    print(f"total         {t3 - t0:6.2f} s   (target < 10 s: {'met' if t3 - t0 < 10 else 'NOT met'})")
    print(f"cpu           {cpu:6.2f} s   (this process and its children)")
    print(f"peak memory   {me.ru_maxrss / 1024:6.0f} MiB resident, {anon.peak_kb / 1024:.0f} MiB anonymous"
          + (f"; children {kids.ru_maxrss / 1024:.0f} MiB resident" if kids.ru_maxrss else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
