"""Load stages on a local Ray cluster (issue 17): two worker actors on this machine against the simulator in
its own process.  Every scheduled call is in exactly one shard, the merged summary matches a one-process
run's, and a worker killed mid-stage is recorded (and its stage run again by --resume).

Marked ``ray``: skipped where Ray is not installed, required in CI (``.ci/run`` installs the extra with
``scripts/install.sh --ray`` and sets LEVERBENCH_REQUIRE_RAY).  Starting the cluster takes 10-20 s on two
shared cores; it is started once for the module."""

from __future__ import annotations

import logging
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import limits
import pytest
import sim_truth
from test_load import experiment, sim_process

from leverbench.analysis.load.stages import load_summary
from leverbench.config import load
from leverbench.ledger.reader import read_ledger, read_shard
from leverbench.runner.run import Runner
from leverbench.runner.shares import open_arrivals

pytestmark = [pytest.mark.ray, pytest.mark.slow]

OUT_TOKENS = 10
SIM = {"prefill_tps": 1_000_000, "decode_tps": 100.0, "slots": 16, "output_tokens": OUT_TOKENS,
       "prefix_cache": False}  # every call 0.1 s, none waits for a slot
SERVICE_S = OUT_TOKENS / SIM["decode_tps"]
STAGES = '''
[[load]]
name = "closed"
mode = "closed"
concurrency = 4
workers = {w}
warmup_requests = 4
requests = 40

[[load]]
name = "open"
mode = "open"
rate = 20
arrival = "poisson"
seed = 5
workers = {w}
warmup_requests = 4
requests = 40
'''


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of two CPUs (two worker actors), for the module."""
    try:
        import ray  # noqa: PLC0415
    except ImportError:
        pytest.skip("Ray is not installed (pip install 'leverbench[ray]'; scripts/install.sh --ray)")
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def sim_url():
    with sim_process(**SIM) as url:
        yield url


def run_stages(tmp: Path, url: str, workers: int, name: str) -> Path:
    d = tmp / name
    d.mkdir()
    exp = load(experiment(d, {"a": url}, STAGES.format(w=workers), max_tokens=OUT_TOKENS))
    Runner(exp, d / "run").run()
    return d / "run"


def near(a: float, b: float, rel: float, abs_: float) -> bool:
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def test_two_workers_send_every_call_once_and_match_one_process(ray_cluster, sim_url, tmp_path):
    one = run_stages(tmp_path, sim_url, 1, "one")
    two = run_stages(tmp_path, sim_url, 2, "two")
    assert not (one / "ledger.d").exists()
    assert '"kind":"load"' not in (two / "ledger.jsonl").read_text()  # the workers' calls are in their shards
    shards = {k: read_shard(two / "ledger.d" / f"worker-{k}.jsonl") for k in (0, 1)}
    led = read_ledger(two)
    assert led.warnings == []
    loads = list(led.of_kind("load"))
    assert len([r for r in read_ledger(one).of_kind("load")]) == len(loads) == 88
    for k, shard in shards.items():  # each shard holds its own worker's calls, and only those
        mine = [r for r in shard.records if r["kind"] == "load"]
        assert mine and {r["worker"] for r in mine} == {k} and {r["workers"] for r in mine} == {2}
        assert {r["repeat"] % 2 for r in mine} == {k}  # closed: index w + 2j; open: arrival i to worker i mod 2
    # every scheduled call in exactly one shard: the open loop's 44 arrivals, the closed loop's 44 requests
    assert sorted(r["repeat"] for r in loads if r["stage"] == "open") == list(range(44))
    assert len({r["repeat"] for r in loads if r["stage"] == "closed"}) == 44
    exp = load(experiment(tmp_path / "two", {"a": sim_url}, STAGES.format(w=2), max_tokens=OUT_TOKENS))
    plan = exp.spec.load[1]
    want = [round(off, 6) for _, off, _ in open_arrivals(plan, 20.0)]
    opened = sorted((r for r in loads if r["stage"] == "open"), key=lambda r: r["repeat"])
    assert [round(r["scheduled_t"] - opened[0]["scheduled_t"], 6) for r in opened] == pytest.approx(want, abs=2e-3)
    ends = list(led.of_kind("stage_end"))
    assert [(e["stage"], e["calls"], e["workers"], e["lost_workers"]) for e in ends] == \
        [("closed", 44, 2, []), ("open", 44, 2, [])]
    clocks = list(led.of_kind("clock"))
    assert sorted((c["stage"], c["worker"]) for c in clocks) == [("closed", 0), ("closed", 1), ("open", 0), ("open", 1)]
    # one host's clock: the true offset is 0, which the estimate must hold within its own uncertainty (the worker
    # read its clock within the round trip), however long a loaded machine made that
    assert all(abs(c["offset_s"]) <= c["uncertainty_s"] + 1e-6 and 0 < c["uncertainty_s"] < 1 for c in clocks)

    # the same calls measured by one process and by two workers, each against the simulator's record of them:
    # both see what it did (the client's clock never before the server's, and late by its own overhead only,
    # which a loaded machine stretches, more for two worker processes than one: 15 vs 40 ms seen, so the runs
    # are not held to each other's overhead); the simulator served both runs alike
    truth = sim_truth.fetch(sim_url)
    rows = {d: {r["stage"]: r for r in load_summary(read_ledger(d))} for d in (one, two)}
    for stage in ("closed", "open"):
        a, b = rows[one][stage], rows[two][stage]
        assert (a["requests"], a["ok"], a["workers"]) == (40, 40, 1) and (b["requests"], b["ok"], b["workers"]) == \
            (40, 40, 2)
        server = {}
        for d in (one, two):
            calls = [r for r in read_ledger(d).of_kind("load") if r["stage"] == stage and not r["warmup"]]
            served = sim_truth.records_of(calls, truth)
            server[d] = {"ttft": statistics.median(t["first_token"] - t["arrival"] for t in served),
                         "e2e": statistics.median(t["end"] - t["arrival"] for t in served)}
            for metric in ("ttft", "e2e"):
                overhead = rows[d][stage][metric]["p50"] - server[d][metric]
                assert -0.002 < overhead < SERVICE_S, (d.name, stage, metric, overhead)
        for metric in ("ttft", "e2e"):
            assert near(server[one][metric], server[two][metric], 0.2, 0.01), (stage, metric, server)
        if stage == "open":  # the offered rate, whoever sends it
            assert near(a["output_tps"], b["output_tps"], 0.2, 0), (stage, a["output_tps"], b["output_tps"])
            assert near(a["requests_per_s"], b["requests_per_s"], 0.2, 0)
        for r in (a, b):  # closed: the clients' calls back to back, each its e2e (Little's law)
            assert stage == "open" or near(r["requests_per_s"], 4 / r["e2e"]["mean"], 0.2, 0), r
        # on schedule: a loaded machine's scheduling delay, not a lag that grows (a sender that waited for the
        # answers would fall seconds behind)
        assert b["client_lag"]["p50"] < SERVICE_S and b["lost_workers"] == []


def test_a_worker_killed_mid_stage_is_recorded_and_resume_runs_the_stage_again(ray_cluster, sim_url, tmp_path):
    """SIGKILL worker 1's process once it has recorded 5 calls of a 60-call open stage: its calls up to then
    stay in its shard, the stage's row says which worker died and how many of its 30 scheduled calls have
    no record, nothing is counted twice; --resume runs the stage again whole, and the analysis keeps that."""
    stage = '[[load]]\nname = "steady"\nmode = "open"\nrate = 20\narrival = "constant"\nworkers = 2\nrequests = 60\n'
    exp = load(experiment(tmp_path, {"a": sim_url}, stage, max_tokens=OUT_TOKENS))
    out = tmp_path / "run"
    shard1 = out / "ledger.d" / "worker-1.jsonl"
    killed: list[int] = []

    def kill_worker_1() -> None:
        deadline = time.monotonic() + limits.PROGRESS_S
        while time.monotonic() < deadline and not killed:
            recs = read_shard(shard1, salvage=True).records if shard1.exists() and shard1.stat().st_size else []
            if sum(r["kind"] == "load" for r in recs) >= 5:
                pid = next(r["pid"] for r in recs if r["kind"] == "clock")
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.02)

    killer = threading.Thread(target=kill_worker_1, daemon=True)
    killer.start()
    Runner(exp, out).run()
    killer.join(timeout=limits.THREAD_STOP_S)
    assert killed
    led = read_ledger(out)
    [end] = led.of_kind("stage_end")
    [lost] = end["lost_workers"]
    recorded = sum(1 for r in led.of_kind("load") if r["worker"] == 1)
    assert (lost["worker"], lost["scheduled"], lost["recorded"]) == (1, 30, recorded) and 5 <= recorded < 30
    assert lost["never_sent"] == 30 - recorded and "died" in lost["error"]
    assert sum(1 for r in led.of_kind("load") if r["worker"] == 0) == 30  # worker 0 sent its whole share
    assert end["calls"] == 30 + recorded and end["workers"] == 2
    [row] = load_summary(led)
    assert row["requests"] == 30 + recorded and len({r["repeat"] for r in led.of_kind("load")}) == 30 + recorded
    assert row["lost_workers"] == [lost] and any(f"{30 - recorded} of its 30 scheduled" in w for w in row["warnings"])

    Runner(exp, out, resume=True).run()  # the stage lost a worker: run again whole, by a new worker 1
    led = read_ledger(out)
    ends = list(led.of_kind("stage_end"))
    assert [len(e["lost_workers"]) for e in ends] == [1, 0]
    [row] = load_summary(led)
    assert (row["requests"], row["ok"], row["lost_workers"]) == (60, 60, [])  # the latest execution only
    assert not any("died" in w for w in row["warnings"])
    again = [r for r in read_shard(shard1).records if r["kind"] == "load" and r["load_run"] == ends[1]["load_run"]]
    assert len(again) == 30


def test_sigterm_mid_stage_records_every_workers_calls_in_flight(ray_cluster, tmp_path):
    """`leverbench run` joined to the cluster (--ray-address), stopped by SIGTERM (as Ctrl-C) while each
    worker has calls in flight: each worker records its calls in flight (class cancelled) in its shard
    before the run exits 130; the stage has no stage_end (--resume runs it again whole)."""
    stage = '[[load]]\nname = "slow"\nmode = "open"\nrate = 10\narrival = "constant"\nworkers = 2\nrequests = 200\n'
    with sim_process(**{**SIM, "decode_tps": 10.0}) as url:  # every call 1 s: ~5 in flight per worker
        exp = experiment(tmp_path, {"a": url}, stage, max_tokens=OUT_TOKENS)
        out = tmp_path / "run"
        cmd = [sys.executable, "-c", "import sys; from leverbench.cli import main; sys.argv[0] = 'leverbench'; main()",
               "run", str(exp), "--out", str(out), "--ray-address", ray_cluster.get_runtime_context().gcs_address]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            shard1 = out / "ledger.d" / "worker-1.jsonl"
            deadline = time.monotonic() + limits.PROGRESS_S
            while time.monotonic() < deadline and proc.poll() is None:
                if shard1.exists() and shard1.read_text().count('"kind":"load"') >= 3:
                    break
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=limits.STOP_S)
        finally:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "ledger.d" in err
    led = read_ledger(out)
    cancelled = [r for r in led.of_kind("load") if (r["error"] or {}).get("class") == "cancelled"]
    assert {r["worker"] for r in cancelled} == {0, 1}
    assert list(led.of_kind("stage_end")) == []
