"""Benchmark: a 1,000,000-call ledger read and summarised into summary.json (target, issue 39: read +
summarise under 5 s on this 2-core machine).

Writes a synthetic ledger shaped exactly as the runner writes one today (``synthetic_ledger.py``: 3 arms, turns
of 4 calls, 16 chunks per answer, warm-ups, reset checks, cache states, a sentinel of every arm per round,
metrics scrapes; 1,000,000 calls are 84 cases of 992 repeats, the reader refusing more than 1,000), then times,
in a fresh process of its own (nothing else loaded, so that its memory is the analysis's): reading it,
computing the summary, and writing summary.json.  Prints each phase, read + summarise against the target, the
total, the CPU time and the peak memory: resident (ru_maxrss) and, on Linux, anonymous (sampled every 10 ms; a
memory-mapped file's pages are not in it).  The machine's load average is printed beside them: on a shared
machine the wall time includes waiting for a core, the CPU time does not.

    .venv/bin/python benchmarks/analysis_speed.py [--calls 1000000] [--dir DIR] [--reuse] [--profile N] [--cold]
    .venv/bin/python benchmarks/analysis_speed.py --tiny                       # 3,000 calls, seconds
    .venv/bin/python benchmarks/analysis_speed.py --reuse --src /tmp/old/src --src src --rounds 2
    .venv/bin/python benchmarks/analysis_speed.py --ledger runs/NAME/ledger.jsonl   # a ledger of one's own

``--reuse`` keeps a ledger an earlier run with the same ``--calls`` wrote in ``--dir``.  A read that keeps a
large ledger's columns beside it (``ledger.jsonl.columns``, leverbench.ledger.sidecar) reads it faster from its
second read on: ``--cold`` removes them before each measurement, so that every read is a first read.  ``--profile N``
prints the N costliest functions of the read and of the summary (cProfile, by cumulative time, file:line; the
profiler slows both).  ``--src DIR`` (repeatable) times the leverbench of each source tree (a ``src/``
directory) on the same ledger, each in its own process, in ABBA order over ``--rounds``, and prints them side
by side (wall and CPU): another commit's analysis against this one's in one run; each source writes its
summary.json to ``DIR/summary-A``, ``-B``, ..., and whether they are the same bytes is said.  A ledger this large
is read by polars (see leverbench.ledger.reader).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TARGET_S = 5.0  # read + summarise (issue 39)
TINY_CALLS = 3000
FORMAT = "3"  # of the ledger written (a ledger of another format is not reused): 3, the runner's shape of v5
PHASES = ("read", "summarise", "write")


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


def _cpu_s() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def _top(prof: cProfile.Profile, n: int) -> str:
    """The *n* costliest functions of *prof* by cumulative time, each with its file:line."""
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(n)
    text = out.getvalue()
    return text[text.find("   ncalls"):].rstrip()


def measure(path: Path, out_dir: Path, profile: int = 0) -> dict:
    """Read *path*, summarise it and write summary.json to *out_dir*, each phase timed (in this process: the
    leverbench on its import path); the profiles' texts under "profiles" when *profile* > 0."""
    from leverbench.analysis.summary import summarize  # noqa: PLC0415 (the --src tree's, in its process)
    from leverbench.ledger.reader import read_ledger  # noqa: PLC0415
    from leverbench.report.jsonio import finite  # noqa: PLC0415

    profs = {p: cProfile.Profile() for p in PHASES[:2]} if profile else {}
    times: dict[str, float] = {}
    cpu: dict[str, float] = {}
    cpu0 = _cpu_s()

    def lap(phase: str, t0: float, c0: float) -> tuple[float, float]:
        times[phase], cpu[phase] = time.perf_counter() - t0, _cpu_s() - c0
        return time.perf_counter(), _cpu_s()

    with PeakAnon() as anon:
        t, c = time.perf_counter(), cpu0
        with profs.get("read") or _nothing():
            led = read_ledger(path)
        t, c = lap("read", t, c)
        with profs.get("summarise") or _nothing():
            s = summarize(led)
        t, c = lap("summarise", t, c)
        (out_dir / "summary.json").write_text(json.dumps(finite(s)))
        lap("write", t, c)
    return {"calls": s["run"]["calls"], "times": times, "cpu": cpu, "cpu_s": _cpu_s() - cpu0,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "anon_mib": anon.peak_kb / 1024,
            "profiles": {k: _top(p, profile) for k, p in profs.items()}}


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def measured_elsewhere(src: Path | None, path: Path, out_dir: Path, profile: int) -> dict:
    """:func:`measure` in a fresh process: this script with the leverbench of *src* (None: this tree's, as
    installed) first on its import path."""
    env = dict(os.environ) | ({"PYTHONPATH": str(src)} if src else {})
    cmd = [sys.executable, __file__, "--child", "--ledger", str(path), "--dir", str(out_dir), "--profile", str(profile)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the measurement{f' with {src}' if src else ''} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def kept_columns(ledger: Path) -> Path:
    """Where a read keeps *ledger*'s columns for the next read (leverbench.ledger.sidecar)."""
    from leverbench.ledger.sidecar import path_of  # noqa: PLC0415 (this tree's: the file's place and name)

    return path_of(ledger)


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def print_one(m: dict) -> None:
    t, c = m["times"], m["cpu"]
    both, total = t["read"] + t["summarise"], sum(t.values())
    print(f"calls: {m['calls']:,} (the summary's: turn calls and sentinels)")
    print(f"read ledger       {t['read']:6.2f} s   (cpu {c['read']:.2f} s)")
    print(f"summarise         {t['summarise']:6.2f} s   (cpu {c['summarise']:.2f} s)")
    print(f"read + summarise  {both:6.2f} s   (target < {TARGET_S:g} s: {'met' if both < TARGET_S else 'NOT met'})")
    print(f"write json        {t['write']:6.2f} s   (cpu {c['write']:.2f} s)")
    print(f"total             {total:6.2f} s")
    print(f"cpu               {m['cpu_s']:6.2f} s   (the measuring process, all its threads: on a busy machine the "
          "wall time waits for a core, this does not)")
    print(f"peak memory       {m['rss_mib']:6.0f} MiB resident, {m['anon_mib']:.0f} MiB anonymous")
    for phase, text in m["profiles"].items():
        print(f"\n--- profile of {phase} (cumulative time; the profiler slows it) ---\n{text}")


def print_side_by_side(labels: list[str], runs: dict[str, list[dict]], outs: dict[str, Path]) -> None:
    """Each source's medians over its rounds (wall and CPU), and its ratio to the first's (read + summarise);
    whether their summary.json files (*outs*: each source's, of its last round) are the same bytes."""
    print(f"\n=== side by side: medians of {len(runs[labels[0]])} round(s), each its own process, ABBA ===")
    head = (f"{'source':40s} {'read s':>7} {'summ. s':>8} {'read+summ. s':>13} {'total s':>8} {'peak MiB':>9} "
            f"{'vs first':>9}")
    print(head + "\n" + "-" * len(head))
    first = None
    cpu_lines = []
    for label in labels:
        med = {p: statistics.median(m["times"][p] for m in runs[label]) for p in PHASES}
        cpu = {p: statistics.median(m["cpu"][p] for m in runs[label]) for p in PHASES}
        both = med["read"] + med["summarise"]
        first = first or both
        rss = max(m["rss_mib"] for m in runs[label])
        print(f"{label[-40:]:40s} {med['read']:7.2f} {med['summarise']:8.2f} {both:13.2f} {sum(med.values()):8.2f} "
              f"{rss:9.0f} {both / first:8.2f}x")
        cpu_lines.append(f"{label[-40:]:40s} read {cpu['read']:6.2f}, summarise {cpu['summarise']:6.2f}, "
                         f"read + summarise {cpu['read'] + cpu['summarise']:6.2f}; anonymous peak "
                         f"{max(m['anon_mib'] for m in runs[label]):.0f} MiB")
    print("cpu s (medians; the measuring process, all its threads: a busy machine's wall time waits for a core):")
    print("\n".join(cpu_lines))
    calls = {m["calls"] for ms in runs.values() for m in ms}
    print(f"calls in each summary: {', '.join(f'{c:,}' for c in sorted(calls))}"
          + ("" if len(calls) == 1 else "  (the sources disagree)"))
    texts = {label: (outs[label] / "summary.json").read_bytes() for label in labels}
    same = len(set(texts.values())) == 1
    print(f"summary.json: {'the same bytes from every source' if same else 'DIFFERS between the sources'} "
          f"({', '.join(str(outs[label] / 'summary.json') for label in labels)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=None, help="calls in the synthetic ledger (default 1,000,000)")
    ap.add_argument("--tiny", action="store_true", help=f"{TINY_CALLS:,} calls: finishes in seconds")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "lb-analysis-bench")
    ap.add_argument("--reuse", action="store_true", help="keep the ledger an earlier run with the same --calls wrote")
    ap.add_argument("--ledger", type=Path, help="time this ledger (a run's) instead of writing one")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest functions per phase")
    ap.add_argument("--src", action="append", type=Path, default=[], metavar="DIR",
                    help="a source tree (src/) whose leverbench to time, in its own process; repeatable")
    ap.add_argument("--rounds", type=int, default=1, help="with --src: rounds, ABBA")
    ap.add_argument("--cold", action="store_true",
                    help="remove the columns a read keeps beside the ledger before each measurement: first reads only")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    if a.child:
        print(json.dumps(measure(a.ledger, a.dir, a.profile)))
        return 0
    calls = a.calls if a.calls is not None else TINY_CALLS if a.tiny else 1_000_000
    path = a.ledger
    if path is None:
        path, stamp = a.dir / "ledger.jsonl", a.dir / "ledger.calls"
        if a.reuse and path.exists() and stamp.exists() and stamp.read_text() == f"{calls} v{FORMAT}":
            print(f"reusing {path} ({path.stat().st_size / 1e6:.0f} MB)")
        else:
            sys.path.insert(0, str(Path(__file__).parent))
            from synthetic_ledger import write_ledger  # noqa: PLC0415 (only to write one)

            stamp.unlink(missing_ok=True)
            t = time.perf_counter()
            cases, repeats = write_ledger(path, calls)
            stamp.write_text(f"{calls} v{FORMAT}")
            print(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB: {cases} cases × {repeats} repeats × 3 arms × "
                  f"4 calls) in {time.perf_counter() - t:.1f} s (not timed)")
    print(f"{os.cpu_count()} CPUs; {load_average()} at the start")
    kept = kept_columns(path)
    print(f"{kept}: removed before each measurement (--cold: every read a first read)" if a.cold else
          f"{kept}: {'there' if kept.exists() else 'not there'} (a read that keeps columns reads this ledger faster "
          "from its second read on; --cold times first reads)")
    if not a.src:
        if a.cold:
            kept.unlink(missing_ok=True)
        print_one(measured_elsewhere(None, path, a.dir, a.profile))
    else:
        labels = [f"{chr(65 + i)}: {s.resolve()}" for i, s in enumerate(a.src)]
        outs = {label: a.dir / f"summary-{label[0]}" for label in labels}  # each source's summary.json, to compare
        runs: dict[str, list[dict]] = {k: [] for k in labels}
        for r in range(a.rounds):
            for label, src in (list(zip(labels, a.src)) if r % 2 == 0 else list(zip(labels, a.src))[::-1]):
                outs[label].mkdir(exist_ok=True)
                if a.cold:
                    kept.unlink(missing_ok=True)
                m = measured_elsewhere(src.resolve(), path, outs[label], a.profile)
                runs[label].append(m)
                t, c = m["times"], m["cpu"]
                print(f"round {r + 1}, {label}: read {t['read']:.2f} s (cpu {c['read']:.2f}), summarise "
                      f"{t['summarise']:.2f} s (cpu {c['summarise']:.2f}), peak {m['rss_mib']:.0f} MiB resident, "
                      f"{m['anon_mib']:.0f} MiB anonymous  [{load_average()}]", flush=True)
                for phase, text in m["profiles"].items():
                    print(f"--- profile of {phase} ---\n{text}")
        print_side_by_side(labels, runs, outs)
    print(f"{load_average()} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
