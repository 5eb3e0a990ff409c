"""Benchmark: ``leverbench analyze`` on production-size traffic logs (issue 13; target: 10,000,000 calls in under 10 s).

Writes synthetic per-call logs into a temporary directory (deleted at the end; never in the repository): a CSV and
a JSON-lines file of ``--calls`` calls, three integer columns each (input_tokens, output_tokens, cached_tokens,
lengths drawn like a chat service's: log-normal inputs around 2k tokens, outputs around 150), then times, as a user
would run it, ``leverbench analyze FILE --prefill-tps 2000 --decode-tps 50 --format json`` (a fresh process each
time: start-up, reading, analysis and output), ``--repeats`` times each, and prints every time, the median, the
child's CPU time (user + system) and peak RSS, and the load average.  On a shared machine the wall time includes
waiting for a core; the CPU time does not, and bounds the wall time on two free cores from above.

``--engines`` also times the same read and reduction (sums per input bucket, value counts of the output lengths)
done in process by polars (what leverbench uses), pyarrow and DuckDB, where installed, on the same files.

``--big-calls N --memory-mb M --data-limit-mb D`` shows a log larger than memory analysed without loading it
whole: it writes a CSV of N calls, then runs ``analyze`` on it with at most M MiB of usable rows kept in memory
(``LEVERBENCH_TRAFFIC_MEMORY_MB``; the rest spills to temporary Arrow files scanned lazily) under a limit of D MiB
on the process's data (RLIMIT_DATA, as ``ulimit -d``: heap and private mappings, which is where a loaded log would
go), smaller than the file; the peak anonymous RSS (sampled from /proc) is printed beside the file size.  The
same run with the spill budget above the file's size (the rows held in memory, as before) shows the limit bites.
(An address-space limit, ``ulimit -v``, does not fit: polars maps the file and reserves memory for its threads.)

    .venv/bin/python benchmarks/analyze_speed.py [--calls 10000000] [--repeats 3] [--engines]
    .venv/bin/python benchmarks/analyze_speed.py --calls 0 --big-calls 160000000 --memory-mb 64 --data-limit-mb 1536
    .venv/bin/python benchmarks/analyze_speed.py --tiny    # every part at 20,000 calls: seconds
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl

CHUNK = 5_000_000


def write_log(path: Path, n: int, kind: str, seed: int = 1) -> None:
    """n calls: input ~ lognormal(7.5, 1.2) + 1 (≤ 200,000), output ~ lognormal(5, 1) + 1 (≤ 8,000), cached ≤ input."""
    rng = np.random.default_rng(seed)
    with open(path, "wb") as fh:
        for start in range(0, n, CHUNK):
            k = min(CHUNK, n - start)
            inp = np.minimum(rng.lognormal(7.5, 1.2, k).astype(np.int64) + 1, 200_000)
            df = pl.DataFrame({"input_tokens": inp,
                               "output_tokens": np.minimum(rng.lognormal(5.0, 1.0, k).astype(np.int64) + 1, 8_000),
                               "cached_tokens": (inp * rng.random(k)).astype(np.int64)})
            if kind == "csv":
                df.write_csv(fh, include_header=start == 0)
            else:
                df.write_ndjson(fh)


def _peak_anon(pid: int, out: list[int]) -> None:
    """Sample /proc/PID/status every 20 ms: out[0] = the peak RssAnon in KiB (memory that is no file's page cache)."""
    while True:
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("RssAnon:"):
                        out[0] = max(out[0], int(line.split()[1]))
        except OSError:
            return
        time.sleep(0.02)


def run_analyze(path: Path, env: dict[str, str], data_limit_mb: int | None = None,
                anon: list[int] | None = None) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds (user + system), peak RSS MiB, exit code) of one ``leverbench analyze`` process;
    ``anon`` receives the peak anonymous RSS (KiB)."""
    cmd = [sys.executable, "-m", "leverbench.cli", "analyze", str(path), "--prefill-tps", "2000", "--decode-tps", "50",
           "--format", "json"]

    def limit() -> None:
        if data_limit_mb:
            b = data_limit_mb << 20
            resource.setrlimit(resource.RLIMIT_DATA, (b, b))

    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit)
    if anon is not None:
        threading.Thread(target=_peak_anon, args=(p.pid, anon), daemon=True).start()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        print(f"    analyze exited {p.returncode}: {err.strip()[-400:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, p.returncode


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def time_cli(path: Path, repeats: int, env: dict[str, str]) -> None:
    size = path.stat().st_size / 1e6
    walls, cpus, rss = [], [], []
    for _ in range(repeats):
        before = load()
        w, c, r, rc = run_analyze(path, env)
        walls.append(w)
        cpus.append(c)
        rss.append(r)
        print(f"  {path.name} ({size:,.0f} MB): {w:6.2f} s wall, {c:6.2f} s CPU, peak RSS {r:,.0f} MiB"
              f"{'' if rc == 0 else ' FAILED'}  [{before}]", flush=True)
    print(f"  {path.name}: median {statistics.median(walls):.2f} s wall (min {min(walls):.2f}, max {max(walls):.2f}), "
          f"{statistics.median(cpus):.2f} s CPU, of {repeats}; peak RSS {max(rss):,.0f} MiB  [{load()}]", flush=True)


# ---------------------------------------------------------------- the same reduction in three engines

EDGES = [1024, 4096, 16384, 65536]


def by_polars(path: Path) -> float:
    lf = pl.scan_csv(path) if path.suffix == ".csv" else pl.scan_ndjson(path)
    bucket = pl.sum_horizontal(*[(pl.col("input_tokens") >= e).cast(pl.Int8) for e in EDGES])
    sums = lf.group_by(bucket.alias("b")).agg(pl.len(), pl.col("input_tokens").sum(), pl.col("output_tokens").sum(),
                                              pl.col("cached_tokens").sum())
    counts = lf.group_by("output_tokens").len()
    a, _ = pl.collect_all([sums, counts], engine="streaming")
    return float(a.get_column("input_tokens").sum())


def by_pyarrow(path: Path) -> float:
    import pyarrow.compute as pc  # noqa: PLC0415
    import pyarrow.csv as pcsv  # noqa: PLC0415
    import pyarrow.json as pjson  # noqa: PLC0415

    t = pcsv.read_csv(path) if path.suffix == ".csv" else pjson.read_json(path)
    b = pc.add(pc.add(pc.greater_equal(t["input_tokens"], EDGES[0]).cast("int8"),
                      pc.greater_equal(t["input_tokens"], EDGES[1]).cast("int8")),
               pc.add(pc.greater_equal(t["input_tokens"], EDGES[2]).cast("int8"),
                      pc.greater_equal(t["input_tokens"], EDGES[3]).cast("int8")))
    g = t.append_column("b", b).group_by("b").aggregate(
        [("input_tokens", "sum"), ("output_tokens", "sum"), ("cached_tokens", "sum"), ("input_tokens", "count")])
    t.group_by("output_tokens").aggregate([("output_tokens", "count")])
    return float(pc.sum(g["input_tokens_sum"]).as_py())


def by_duckdb(path: Path) -> float:
    import duckdb  # noqa: PLC0415

    con = duckdb.connect()
    con.execute(f"SET threads={os.environ.get('POLARS_MAX_THREADS', '2')}")
    src = (f"read_csv('{path}')" if path.suffix == ".csv" else
           f"read_json('{path}', format='newline_delimited', columns={{input_tokens: 'BIGINT', "
           "output_tokens: 'BIGINT', cached_tokens: 'BIGINT'})")
    con.execute(f"CREATE TEMP VIEW t AS SELECT * FROM {src}")
    total = con.execute("SELECT sum(s) FROM (SELECT (input_tokens >= 1024)::INT + (input_tokens >= 4096)::INT + "
                        "(input_tokens >= 16384)::INT + (input_tokens >= 65536)::INT AS b, count(*), "
                        "sum(input_tokens) AS s, sum(output_tokens), sum(cached_tokens) FROM t GROUP BY b)").fetchone()
    con.execute("SELECT output_tokens, count(*) FROM t GROUP BY output_tokens").fetchall()
    return float(total[0])


def time_engines(paths: list[Path], repeats: int) -> None:
    engines: dict[str, Callable[[Path], float]] = {"polars": by_polars}
    for name, fn, module in (("pyarrow", by_pyarrow, "pyarrow"), ("duckdb", by_duckdb, "duckdb")):
        try:
            __import__(module)
            engines[name] = fn
        except ImportError:
            print(f"  {name}: not installed, left out")
    print("\nThe same read + reduction in process (medians of %d):" % repeats)
    for path in paths:
        for name, fn in engines.items():
            times, cpus, check = [], [], None
            for _ in range(repeats):
                t, r = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
                check = fn(path)
                times.append(time.perf_counter() - t)
                u = resource.getrusage(resource.RUSAGE_SELF)
                cpus.append(u.ru_utime + u.ru_stime - r.ru_utime - r.ru_stime)
            print(f"  {path.name:>14} {name:>8}: {statistics.median(times):6.2f} s wall, "
                  f"{statistics.median(cpus):6.2f} s CPU  (Σ input {check:.6g})  [{load()}]", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=10_000_000, help="calls per log for the timed runs (0: none)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="POLARS_MAX_THREADS (the target is for 2 cores)")
    ap.add_argument("--engines", action="store_true", help="also time polars, pyarrow and DuckDB on the same files")
    ap.add_argument("--big-calls", type=int, default=0, help="calls in the out-of-core log (0: no such run)")
    ap.add_argument("--memory-mb", type=float, default=256, help="LEVERBENCH_TRAFFIC_MEMORY_MB for the big run")
    ap.add_argument("--data-limit-mb", type=int, help="RLIMIT_DATA for the big run (MiB)")
    ap.add_argument("--dir", type=Path, help="where to write the logs (default: a temporary directory, removed)")
    ap.add_argument("--tiny", action="store_true", help="--calls 20000 --repeats 1 --engines --big-calls 20000 "
                    "--memory-mb 0.1 --data-limit-mb 2048: every part in seconds (the limit does not bite)")
    if "--tiny" in sys.argv[1:]:
        ap.set_defaults(calls=20_000, repeats=1, engines=True, big_calls=20_000, memory_mb=0.1, data_limit_mb=2048)
    a = ap.parse_args()
    env = {**os.environ, "POLARS_MAX_THREADS": str(a.threads), "OPENBLAS_NUM_THREADS": "1",
           "_RJEM_MALLOC_CONF": "background_thread:false"}
    os.environ["POLARS_MAX_THREADS"] = str(a.threads)
    print(f"{os.cpu_count()} CPUs, POLARS_MAX_THREADS={a.threads}, polars {pl.__version__}; {load()}")
    with tempfile.TemporaryDirectory(prefix="lb-analyze-bench-", dir=a.dir) as tmp:
        d = Path(tmp)
        paths = []
        if a.calls:
            for kind in ("csv", "jsonl"):
                p = d / f"calls.{kind}"
                t = time.perf_counter()
                write_log(p, a.calls, kind)
                print(f"wrote {p.name}: {a.calls:,} calls, {p.stat().st_size / 1e6:,.0f} MB "
                      f"in {time.perf_counter() - t:.1f} s", flush=True)
                paths.append(p)
            print(f"\nleverbench analyze, {a.calls:,} calls:")
            for p in paths:
                time_cli(p, a.repeats, env)
            if a.engines:
                time_engines(paths, a.repeats)
            for p in paths:
                p.unlink()
        if a.big_calls:
            p = d / "big.csv"
            t = time.perf_counter()
            write_log(p, a.big_calls, "csv", seed=2)
            size = p.stat().st_size
            print(f"\nwrote {p.name}: {a.big_calls:,} calls, {size / 2**20:,.0f} MiB "
                  f"in {time.perf_counter() - t:.1f} s", flush=True)
            big_env = {**env, "LEVERBENCH_TRAFFIC_MEMORY_MB": str(a.memory_mb), "TMPDIR": str(d)}
            limit = f", data limited to {a.data_limit_mb:,} MiB (ulimit -d)" if a.data_limit_mb else ""
            print(f"leverbench analyze {p.name} with {a.memory_mb:g} MiB of rows in memory{limit}  [{load()}]",
                  flush=True)
            anon = [0]
            w, c, r, rc = run_analyze(p, big_env, a.data_limit_mb, anon)
            print(f"  {w:.1f} s wall, {c:.1f} s CPU, peak RSS {r:,.0f} MiB, "
                  f"peak anonymous RSS {anon[0] / 1024:,.0f} MiB for a {size / 2**20:,.0f} MiB log "
                  f"({'ok' if rc == 0 else 'FAILED'})  [{load()}]", flush=True)
            if a.data_limit_mb:
                held = {**big_env, "LEVERBENCH_TRAFFIC_MEMORY_MB": str(2 * size / 2**20)}
                print(f"the same, every row held in memory (LEVERBENCH_TRAFFIC_MEMORY_MB={2 * size / 2**20:,.0f})",
                      flush=True)
                anon = [0]
                w, c, r2, rc2 = run_analyze(p, held, a.data_limit_mb, anon)
                print(f"  {w:.1f} s wall, peak anonymous RSS {anon[0] / 1024:,.0f} MiB: "
                      f"{'ok' if rc2 == 0 else 'FAILED, as it must under the limit'}  [{load()}]", flush=True)
            if rc:
                return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
