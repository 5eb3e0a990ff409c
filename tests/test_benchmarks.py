"""Every benchmark in ``benchmarks/`` runs at its tiny size (issue 39: ``analysis_speed.py`` had stopped running
when the reader began refusing its ledger, and nothing noticed).

Each benchmark runs as a user runs it, a subprocess of ``benchmarks/NAME.py --tiny`` (what its tiny mode
leaves out, its own docstring says), and must exit 0 and print its figures; one that compares (two clients,
fsync on and off, the proxy and a straight call, two source trees) must print the comparison.  The figures
themselves are the machine's, never checked here.  The benchmark that starts the real engine carries the
``engine`` marks (tests/engine_marks.py), the one that starts a Ray cluster ``ray``.  The synthetic ledger
``analysis_speed.py`` times is checked against a real run's: every record's keys, in order, as the runner
writes them today on the simulator.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from engine_marks import ENGINE_MARKS
from limits import SMALL_RUN_S
from test_run_sim import experiment

from leverbench.cli import cli
from leverbench.config.limits import MAX_REPEATS
from leverbench.engines.simulator import SimConfig, SimulatorThread

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
HELPERS = {"bare_client.py": "client_overhead.py --bare runs it", "synthetic_ledger.py": "analysis_speed.py's"}
NUMBER = r"[\d,.]+"


def bench(name: str, *args: str, timeout: float = SMALL_RUN_S) -> str:
    """``benchmarks/NAME *args``'s standard output; it must exit 0."""
    done = subprocess.run([sys.executable, str(BENCH / name), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{name} {' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
    return done.stdout


def lines_like(out: str, pattern: str) -> list[str]:
    return [line for line in out.splitlines() if re.search(pattern, line)]


def test_every_benchmark_is_run_here():
    """A benchmark added to benchmarks/ without a test here fails this (a helper module says whose it is)."""
    mine = Path(__file__).read_text()
    for path in sorted(BENCH.glob("*.py")):
        if path.name in HELPERS:
            continue
        tree = ast.parse(path.read_text())
        assert any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body), path.name
        assert f'"{path.name}"' in mine, f"benchmarks/{path.name} has no tiny run in {Path(__file__).name}"


# ---------------------------------------------------------------- analysis_speed.py


@pytest.fixture(scope="module")
def analysis_tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("analysis-speed")
    return bench("analysis_speed.py", "--tiny", "--dir", str(d), "--profile", "3"), d


def test_analysis_speed_prints_its_phases_and_profiles(analysis_tiny):
    out, d = analysis_tiny
    # 3,000 calls: 4 cases × 62 repeats (3000 // 48) × 3 arms × 4 calls = 2,976 turn calls, and a sentinel of
    # each arm opening each of the 62 rounds and one closing the run: 189; the summary counts both
    assert f"calls: {2976 + 3 * 62 + 3:,} " in out
    assert "4 cases × 62 repeats" in out
    for phase in ("read ledger", "summarise", "read \\+ summarise", "write json", "total", "cpu"):
        assert lines_like(out, rf"^{phase} +{NUMBER} s"), phase
    assert lines_like(out, r"target < 5 s: (met|NOT met)")
    assert lines_like(out, rf"^peak memory +{NUMBER} MiB resident, {NUMBER} MiB anonymous")
    read, summary = out.split("--- profile of read")[1].split("--- profile of summarise")
    assert "reader.py" in read and "summary.py" in summary and "filename:lineno" in summary
    assert json.loads((d / "summary.json").read_text())["run"]["calls"] == 2976 + 3 * 62 + 3


def test_analysis_speed_compares_two_source_trees(analysis_tiny):
    """``--src`` twice: each tree's leverbench in its own process, on the same (reused) ledger, side by side."""
    _, d = analysis_tiny
    out = bench("analysis_speed.py", "--tiny", "--dir", str(d), "--reuse", "--src", "src", "--src", "src")
    assert out.startswith("reusing ")
    assert len(lines_like(out, r"^round 1, [AB]: ")) == 2
    table = out.split("=== side by side")[1]
    assert len(lines_like(table, rf"^[AB]: .*src +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}x$")) == 2
    assert f"calls in each summary: {2976 + 3 * 62 + 3:,}\n" in table


def test_a_million_calls_fit_the_readers_repeats():
    """The issue's figure: 1,000,000 calls spread over 84 cases (repeats at most MAX_REPEATS, the reader's bound)."""
    sys.path.insert(0, str(BENCH))
    try:
        import synthetic_ledger  # noqa: PLC0415
    finally:
        sys.path.remove(str(BENCH))
    assert synthetic_ledger.shape(1_000_000) == (84, 1_000_000 // (3 * 4 * 84))
    for n in (1, 48, 3000, 48_000, 48_001, 5_000_000):
        cases, repeats = synthetic_ledger.shape(n)
        assert cases >= 4 and 1 <= repeats <= MAX_REPEATS and cases * repeats * 12 <= max(n, 48), n


def _keys(path: Path) -> tuple[dict, dict[tuple, set[tuple]]]:
    """The header, and per (kind, position) the key sequences of a ledger's records."""
    lines = path.read_text().splitlines()
    out: dict[tuple, set[tuple]] = {}
    for line in lines[1:]:
        r = json.loads(line)
        out.setdefault((r["kind"], r.get("position")), set()).add(tuple(r))
    return json.loads(lines[0]), out


def test_the_synthetic_ledger_is_shaped_as_a_real_run(analysis_tiny, tmp_path):
    """The oracle: a run of the runner on the simulator (three arms: no cache, cache, cache and a drafter; turns of
    scripted steps), written today.  Every kind of record the benchmark writes has the keys, in their order,
    of that kind in the real run, and the header the same keys down to the experiment's settings."""
    _, d = analysis_tiny
    sims = [SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=2000.0, output_tokens=20, prefix_cache=cache,
                                      draft_k=k, draft_acceptance=0.5 if k else 0.0))
            for cache, k in ((False, 0), (True, 0), (True, 4))]
    with sims[0] as a, sims[1] as b, sims[2] as c:
        extra = (f'\n[[arms]]\nname = "drafter"\nrole = "treatment"\nbase_url = "{c.base_url}"\nmodel = "sim"\n'
                 'conditions = { prefix_cache = true, drafter = "sim K=4" }\n')
        exp = experiment(tmp_path, {"nocache": a.base_url, "cache": b.base_url}, repeats=2, probes=False,
                         extra_arm=extra)
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    real_head, real = _keys(tmp_path / "run" / "ledger.jsonl")
    head, mine = _keys(d / "ledger.jsonl")
    assert set(mine) == {("warmup", None), ("warmup", "check"), ("cache_reset", None), ("metrics", None),
                         ("sentinel", "start"), ("sentinel", "end"), ("call", None), ("turn", None)}
    for kind, shapes in mine.items():
        assert shapes <= real.get(kind, set()), (kind, shapes - real.get(kind, set()), real.get(kind))
    assert list(head) == list(real_head)
    assert list(head["config"]) == list(real_head["config"])
    assert list(head["config"]["experiment"]) == list(real_head["config"]["experiment"])
    assert {tuple(v) for v in head["arms"].values()} == {tuple(v) for v in real_head["arms"].values()}
    assert list(head["engines"]) == list(real_head["engines"])


# ---------------------------------------------------------------- the others


@pytest.mark.slow
def test_analyze_speed():
    out = bench("analyze_speed.py", "--tiny")
    assert "leverbench analyze, 20,000 calls:" in out
    for log in ("calls.csv", "calls.jsonl"):
        assert lines_like(out, rf"{log}: median {NUMBER} s wall .* CPU, of 1; peak RSS {NUMBER} MiB")
        assert lines_like(out, rf"{log} +polars: +{NUMBER} s wall")  # the in-process engines compared
    assert lines_like(out, rf"peak anonymous RSS {NUMBER} MiB for a {NUMBER} MiB log \(ok\)")
    held = out.split("the same, every row held in memory")[1]  # the spill to disk compared with none
    assert lines_like(held, rf"^  {NUMBER} s wall, peak anonymous RSS {NUMBER} MiB: ")


def test_whatif_speed():
    out = bench("whatif_speed.py", "--tiny")
    for loop in ("no cache", "finite cache"):
        assert lines_like(out, rf"^hand-written loop, {loop} +{NUMBER} s +{NUMBER} calls/s  e2e p50 {NUMBER} s")
    try:
        import simpy  # noqa: F401, PLC0415 (optional: only the benchmark compares with it)
    except ImportError:
        assert "SimPy not importable" in out
    else:
        assert lines_like(out, rf"^SimPy Resource .* calls/s .* max \|Δe2e\| vs the loop {NUMBER}")


def test_adaptive_study():
    out = bench("adaptive_study.py", "--tiny")
    assert "50 experiments per row" in out
    for table in range(1, 6):
        assert f"# {table}. " in out
    assert lines_like(out, rf"^\({NUMBER} s\)$")


@pytest.mark.slow
def test_client_overhead_against_a_bare_client_and_fsync_off():
    out = bench("client_overhead.py", "--tiny", "--bare", "--fsync", "both")
    for variant in ("leverbench, fsync on, 1 client process", "leverbench, fsync off, 1 client process",
                    "bare aiohttp client"):
        assert f"=== {variant} (every repetition pooled) ===" in out
    assert lines_like(out.split("=== fsync on vs off")[1], rf"^ +burst +1 \| +{NUMBER} +{NUMBER} \|")
    versus = out.split("=== leverbench vs the bare aiohttp client")[1]
    for client in ("L0", "L1", "bare"):
        assert lines_like(versus, rf"^ +burst +1 +{client} +1 +\d+ +0 \|"), client
    assert lines_like(versus, r"=> L0: pooled TTFT err p99 / bare's: ")
    assert lines_like(out, rf"^wall clock {NUMBER} s; client process CPU {NUMBER} s")


@pytest.mark.slow
@pytest.mark.ray
def test_client_overhead_with_two_ray_workers():
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'leverbench[ray]'; scripts/install.sh --ray)")
    out = bench("client_overhead.py", "--tiny", "--levels", "2", "--workers", "1,2")
    for w in ("1 client process", "2 client processes"):
        assert f"=== leverbench, fsync on, {w} (every repetition pooled) ===" in out
    side = out.split("=== client processes side by side")[1]
    assert lines_like(side, rf"^ +2 \| +{NUMBER} +{NUMBER} \|")
    for w in (1, 2):
        assert lines_like(side, rf"^=> burst, {w} worker\(s\): highest concurrency")


@pytest.mark.slow
def test_proxy_overhead():
    out = bench("proxy_overhead.py", "--tiny", "--passthrough")
    for c in (1, 4):
        assert lines_like(out, rf"^ +{c} +direct \| +{NUMBER} ms")
        for side in ("proxy", "no record"):
            assert lines_like(out, rf"^ +{c} +{side} \| +{NUMBER} ms +[+-]{NUMBER} \[.*\] \|.* {NUMBER} ms$"), (c, side)
    assert lines_like(out, r"^proxy: recorded \d+ exchange\(s\) \(0 failed\)")


def test_fuzz_inputs(tmp_path):
    out = bench("fuzz_inputs.py", "--tiny", "--out", str(tmp_path))
    assert lines_like(out, r"^6 inputs in \d+ s \(experiment 2, ledger 2, traffic 2\); exit codes: .*; "
                           r"0 with a problem")
    assert json.loads((tmp_path / "summary.json").read_text())["inputs"] == 6


def _marked(marks: list) -> Any:
    def wrap(f: Any) -> Any:
        for m in marks:
            f = m(f)
        return f
    return wrap


@pytest.mark.slow
@_marked(ENGINE_MARKS)
def test_engine_session():
    out = bench("engine_session.py", "--tiny")
    for way in ("own session", "process group"):
        assert lines_like(out, rf"^  {way} +busy median +{NUMBER} \[{NUMBER}\] +quiet +{NUMBER}$"), way
    assert lines_like(out, rf"ratio \(process group / own session\), busy: {NUMBER}x")


def test_tune_grid(tmp_path):
    """``tune_grid.py`` writes a tune file's full grid as one experiment: examples/tune-sim.toml's 5 draft lengths ×
    3 slot counts, 15 arms, each its configuration's values, the baseline the tune's, at the point asked for."""
    from leverbench.config import load  # noqa: PLC0415

    out = tmp_path / "grid.toml"
    assert "wrote" in bench("tune_grid.py", "examples/tune-sim.toml", "--point", "4", "--repeats", "3", "--out",
                            str(out))
    exp = load(out)
    arms = {a.name: a for a in exp.spec.arms}
    assert len(arms) == 5 * 3 and exp.spec.experiment.in_flight == 4 and exp.spec.experiment.repeats == 3
    assert exp.spec.experiment.baseline == "k=0 slots=1" and arms["k=0 slots=1"].role == "baseline"
    engine = arms["k=4 slots=2"].engine
    assert engine is not None and (engine.values["k"], engine.values["slots"]) == (4, 2)
