"""A load stage across several workers (issue 17), the parts that need no Ray: the schedule computed once
and split (run here on the fake sender's virtual clock, every worker's share from one shared start), the
clock offset, the reader's merge of the workers' shards, the stage row of a stage a worker died in, what
--resume does with it, and the clear error without Ray.  The Ray cluster itself: tests/test_ray_load.py."""

from __future__ import annotations

import asyncio
import builtins
import json
import time
from pathlib import Path

import limits
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledgers import header, write
from test_load import experiment
from test_sender import TRACE, FakeSender, run_virtual, stage

import leverbench.runner.prompts as prompts
from leverbench.analysis.load.stages import load_summary, load_warnings
from leverbench.config import load
from leverbench.errors import BadInput, ConfigError, LedgerError
from leverbench.ledger.reader import read_ledger
from leverbench.runner.load import StageRun
from leverbench.runner.run import Runner
from leverbench.runner.shares import apportion, split
from leverbench.runner.workers import clock_offset
from leverbench.schema.warning_kinds import WarningKind as W

START = 1000.0 + 5.0  # the shared start on the virtual clock (its epoch is test_sender.EPOCH = 1000)


def run_split(tmp: Path, stage_toml: str, latency_s: float, workers: int, monkeypatch) -> list[list]:
    """The stage's schedule computed once and split across *workers*, each share run by its own StageRun
    and fake sender from one shared start (all on one virtual clock): each worker's records."""
    exp, plan, arm = stage(tmp, stage_toml)

    async def go() -> list[list]:
        whole = await StageRun(FakeSender(latency_s), exp, plan, arm).schedule()
        senders = [FakeSender(latency_s) for _ in range(workers)]
        runs = [StageRun(s, exp, plan, arm) for s in senders]
        await asyncio.gather(*(r.run(share, START) for r, share in zip(runs, split(whole, workers))))
        return [s.records for s in senders]

    return run_virtual(go(), monkeypatch)


def single(tmp: Path, stage_toml: str, latency_s: float, monkeypatch) -> list:
    """The stage in one process, as the runner runs it (no split, no shared start)."""
    exp, plan, arm = stage(tmp, stage_toml)
    sender = FakeSender(latency_s)
    run_virtual(StageRun(sender, exp, plan, arm).run(), monkeypatch)
    return sender.records


def offsets(recs: list) -> list[tuple]:
    """(request index, scheduled time after the stage's first, warm-up) of each record, in index order."""
    t0 = min(r.extra["scheduled_t"] for r in recs)
    return sorted((r.repeat, round(r.extra["scheduled_t"] - t0, 9), r.extra["warmup"]) for r in recs)


# ------------------------------------------------------------------ the schedule, split


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.integers(1, 50), min_size=1, max_size=12))
def test_apportion_keeps_the_total_and_the_proportions(total, weights):
    got = apportion(total, weights)
    assert sum(got) == total
    w = sum(weights)
    assert all(abs(g - total * x / w) < 1 for g, x in zip(got, weights))


OPEN = 'mode = "open"\nrate = 8.0\narrival = "poisson"\nseed = 3\nwarmup_requests = 4\nrequests = 30\n'


@pytest.mark.parametrize("workers", [2, 3])
def test_an_open_loop_split_sends_every_arrival_once_at_its_time(tmp_path, monkeypatch, workers):
    """Each arrival of the seeded schedule goes out exactly once, from worker index mod N, at the time
    (after the shared start) the one-process schedule gives it, its warm-up flag the same."""
    one = single(tmp_path, OPEN, 0.4, monkeypatch)
    shards = run_split(tmp_path, OPEN, 0.4, workers, monkeypatch)
    want = offsets(one)
    assert offsets([r for s in shards for r in s]) == want and len(want) == 34
    assert min(r.extra["scheduled_t"] for s in shards for r in s) == START  # from the shared start
    for k, recs in enumerate(shards):
        assert recs and {r.extra["worker"] for r in recs} == {k} and {r.repeat % workers for r in recs} == {k}
        assert all(r.t_send == pytest.approx(r.extra["scheduled_t"], abs=1e-9) for r in recs)  # on time
    assert len({r.extra["load_run"] for s in shards for r in s}) == 1  # one execution, shared by the workers
    assert all("worker" not in r.extra for r in one)  # a stage in one process writes no worker


def test_a_closed_loop_split_keeps_the_concurrency_and_the_budget(tmp_path, monkeypatch):
    """concurrency 5 on 2 workers: 3 + 2 clients, 5 calls in flight at the start; the warm-up (3) and
    measured (20) requests apportioned 3:2, each request index sent once, the clients' ramp kept."""
    toml = 'mode = "closed"\nconcurrency = 5\nwarmup_requests = 3\nrequests = 20\nramp_s = 0.5\n'
    shards = run_split(tmp_path, toml, 1.0, 2, monkeypatch)
    recs = [r for s in shards for r in s]
    assert len(recs) == 23 and len({r.repeat for r in recs}) == 23
    assert sum(r.extra["warmup"] for r in recs) == 3
    assert [len(s) for s in shards] == [14, 9]  # (2 + 12) and (1 + 8)
    assert {r.repeat % 2 for r in shards[0]} == {0} and {r.repeat % 2 for r in shards[1]} == {1}
    firsts = sorted(r.t_send - START for r in recs if r.t_send - START < 0.5 - 1e-9)
    assert firsts == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])  # client k of 5 starts k·ramp_s/5 after the start
    first_sched = sorted(r.extra["scheduled_t"] - START for r in recs)[:5]
    assert first_sched == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])  # their first calls' schedule is the plan's


def test_a_trace_split_keeps_each_session_whole(tmp_path, monkeypatch):
    """TraceLab sessions (multi-round): each session's rounds all go to one worker, in order."""
    path = Path(__file__).parent / "data" / "traces" / "tracelab_replay_multi_session_large.csv"
    toml = f'mode = "trace"\ntrace = "{path}"\nspeed = 50.0\nrequests = 30\nmax_tokens = 4\nscale_input = 0.01\n'
    one = single(tmp_path, toml, 0.05, monkeypatch)
    shards = run_split(tmp_path, toml, 0.05, 2, monkeypatch)
    assert sorted((r.repeat, r.step) for s in shards for r in s) == sorted((r.repeat, r.step) for r in one)
    sessions = [{r.repeat - r.step for r in s} for s in shards]  # a session's rounds share their first index
    assert all(sessions) and not sessions[0] & sessions[1]
    firsts = [min(s, key=lambda r: r.t_send) for s in shards]
    assert "trace_import" in firsts[0].extra and all("trace_import" not in r.extra for r in shards[1])


def test_the_tracelab_sample_is_one_session(tmp_path, monkeypatch):
    """A single session cannot be split: it runs whole on worker 0, worker 1 has nothing to send."""
    toml = f'mode = "trace"\ntrace = "{TRACE}"\ntrace_format = "tracelab-round"\nspeed = 4.0\nrequests = 9\n' \
           'scale_input = 0.01\nmax_tokens = 8\n'
    shards = run_split(tmp_path, toml, 0.2, 2, monkeypatch)
    assert [len(s) for s in shards] == [9, 0]


def test_a_stages_prompts_are_made_before_it_starts(tmp_path, monkeypatch):
    """The prompts' vocabulary (~0.1 s to build, more in a fresh process) is built with the stage's shared
    prefix, before the first send, not inside the first call's lag."""
    exp, plan, arm = stage(tmp_path, 'mode = "closed"\nconcurrency = 1\nrequests = 1\n')
    monkeypatch.setattr(prompts, "_VOCAB", None)
    StageRun(FakeSender(0.1), exp, plan, arm)._case_body()
    assert prompts._VOCAB is not None


def test_workers_must_each_get_a_client_and_a_slot(tmp_path):
    base = {"a": "http://127.0.0.1:9"}
    with pytest.raises(ConfigError, match="each of the 3 needs at least one client"):
        load(experiment(tmp_path, base, '[[load]]\nname = "c"\nconcurrency = [4, 2]\nworkers = 3\nrequests = 5\n'))
    with pytest.raises(ConfigError, match="max_in_flight"):
        load(experiment(tmp_path, base, '[[load]]\nname = "o"\nmode = "open"\nrate = 5\nrequests = 5\n'
                                         'max_in_flight = 1\nworkers = 2\n'))
    with pytest.raises(ConfigError, match="workers"):
        load(experiment(tmp_path, base, '[[load]]\nname = "o"\nmode = "open"\nrate = 5\nrequests = 5\nworkers = 0\n'))


# ------------------------------------------------------------------ clocks


def test_the_clock_offset_comes_from_the_least_delayed_round_trip():
    """A worker 2.5 ms ahead: round trips delayed on the way out or back put the midpoint off by up to half
    their delay; the least delayed one is kept, its half round trip the uncertainty, which holds the truth."""
    true = 0.0025
    trips = [(10.0, 0.004, 0.0002), (11.0, 0.0003, 0.0003), (12.0, 0.0001, 0.006)]  # (t1, out, back)
    samples = [(t1, t1 + out + true, t1 + out + back) for t1, out, back in trips]
    c = clock_offset(samples)
    assert (c.rtt_s, c.samples) == (pytest.approx(0.0006), 3)
    assert c.uncertainty_s == pytest.approx(0.0003) and abs(c.offset_s - true) <= c.uncertainty_s + 1e-12
    worst = [(t1, tw, t2) for t1, tw, t2 in samples if t2 - t1 > 0.004]
    assert abs(clock_offset(worst[:1]).offset_s - true) > 0.001  # a delayed trip alone is off by more
    with pytest.raises(ValueError):
        clock_offset([])


# ------------------------------------------------------------------ the reader's merge of the shards


def load_rec(stage: str, repeat: int, t: float, load_run: str, worker: int | None = None, **kw) -> dict:
    rec = {"kind": "load", "arm": "a", "case": "c", "repeat": repeat, "step": 0, "stage": stage, "mode": "open",
           "rate": 10.0, "scheduled_t": t, "warmup": False, "load_run": load_run, "loop_lag_s": 0.0, "t_send": t,
           "connect_s": 0.0, "ttft_s": 0.05, "t_first_answer_s": 0.05, "latency_s": 0.2, "chunk_t": [0.05, 0.2],
           "chunk_chars": [3, 3], "status": 200, "error": None, "prompt_tokens": 10, "completion_tokens": 2,
           "token_source": "usage", **kw}
    if worker is not None:
        rec.update(workers=2, worker=worker)
    return rec


def shard_lines(worker: int, records: list[dict], run_id: str = "test") -> list[str]:
    head = {"kind": "shard", "schema": "leverbench.ledger/1", "tool_version": "test", "run_id": run_id,
            "worker": worker, "host": "h", "pid": 1}
    return [json.dumps(r) for r in [head, *records]]


def clock(worker: int, load_run: str, t: float) -> dict:
    return {"kind": "clock", "stage": "s", "arm": "a", "load_run": load_run, "worker": worker, "t": t,
            "offset_s": 0.0, "uncertainty_s": 0.0004, "rtt_s": 0.0008, "samples": 16}


def run_dir(tmp: Path, main: list[dict], shards: dict[int, list[str]]) -> Path:
    d = write(tmp / "run", header({"a": {}}, ["c"]), main)
    (d / "ledger.d").mkdir(exist_ok=True)
    for k, lines in shards.items():
        (d / "ledger.d" / f"worker-{k}.jsonl").write_text("".join(line + "\n" for line in lines))
    return d


def test_the_reader_merges_the_shards_and_keeps_the_latest_execution(tmp_path):
    """A stage run on 2 workers, cut short (no stage_end), then run again whole by --resume: each worker's
    shard holds both executions.  Reading the run (its directory or its ledger.jsonl) gives every shard
    record once, by time, with its worker; the analysis counts the second execution only."""
    first = [load_rec("s", i, 100.0 + i, "run1", worker=i % 2) for i in range(6)]
    again = [load_rec("s", i, 200.0 + i, "run2", worker=i % 2) for i in range(10)]
    shards = {k: shard_lines(k, [clock(k, "run1", 99.0)] + [r for r in first if r["worker"] == k]
                             + [clock(k, "run2", 199.0)] + [r for r in again if r["worker"] == k]) for k in (0, 1)}
    end = {"kind": "stage_end", "stage": "s", "arm": "a", "load_run": "run2", "calls": 10, "workers": 2,
           "lost_workers": []}
    d = run_dir(tmp_path, [end], shards)
    for path in (d, d / "ledger.jsonl"):
        led = read_ledger(path)
        loads = list(led.of_kind("load"))
        assert [(r["load_run"], r["repeat"]) for r in loads] == [("run1", i) for i in range(6)] + \
            [("run2", i) for i in range(10)]
        assert [r["worker"] for r in loads] == [i % 2 for i in range(6)] + [i % 2 for i in range(10)]
        assert [s["worker"] for s in led.shards] == [0, 1] and len(list(led.of_kind("clock"))) == 4
        assert led.records[0]["kind"] == "stage_end" and led.warnings == []
        [row] = load_summary(led)
        assert (row["requests"], row["workers"], row["lost_workers"]) == (10, 2, [])  # the latest execution only


def test_a_shards_cut_line_is_read_past_as_a_ledgers_is(tmp_path):
    """A worker killed while writing leaves a cut last line (ignored, with a warning naming the shard);
    when a later stage's worker appends (its clock record first), the cut line is read past too.  A
    bad line anywhere else is damage: LedgerError naming the shard, or skipped with --salvage."""
    recs = [load_rec("s", i, 100.0 + i, "r", worker=1) for i in range(3)]
    lines = shard_lines(1, [clock(1, "r", 99.0), *recs])
    cut = lines[-1][:40]
    d = run_dir(tmp_path, [], {1: lines[:-1] + [cut]})
    (d / "ledger.d" / "worker-1.jsonl").write_text("\n".join(lines[:-1] + [cut]))  # no newline: a cut write
    led = read_ledger(d)
    assert len(list(led.of_kind("load"))) == 2
    assert len(led.warnings) == 1 and "worker-1.jsonl: line 5 is incomplete" in led.warnings[0]
    later = [clock(1, "r2", 150.0), load_rec("s2", 0, 151.0, "r2", worker=1)]
    run_dir(tmp_path, [], {1: lines[:-1] + [cut] + [json.dumps(r) for r in later]})
    led = read_ledger(d)
    assert len(list(led.of_kind("load"))) == 3 and "cut off, then resumed" in led.warnings[0]
    run_dir(tmp_path, [], {1: lines[:2] + ["{damaged"] + lines[2:]})
    with pytest.raises(LedgerError, match="worker-1.jsonl: line 3 is not valid JSON"):
        read_ledger(d)
    led = read_ledger(d, salvage=True)
    assert len(list(led.of_kind("load"))) == 3 and "skipped (--salvage)" in led.warnings[0]


def test_a_missing_shard_is_damage_not_fewer_calls(tmp_path):
    """A stage that ended on 2 workers (its stage_end says so) whose worker-1 shard is gone (a run directory
    copied without ledger.d/, a file removed): half its calls would vanish from the summary without a word.
    LedgerError naming the missing shard; with --salvage the rest is read, with a warning naming it."""
    recs = [load_rec("s", i, 100.0 + i, "r", worker=i % 2) for i in range(10)]
    end = {"kind": "stage_end", "stage": "s", "arm": "a", "load_run": "r", "calls": 10, "workers": 2,
           "lost_workers": []}
    d = run_dir(tmp_path, [end], {0: shard_lines(0, [clock(0, "r", 99.0)] + [r for r in recs if r["worker"] == 0])})
    for path in (d, d / "ledger.jsonl"):
        with pytest.raises(LedgerError, match=r"worker-1\.jsonl is missing.*stage 's' on arm 'a' ran on 2 workers"):
            read_ledger(path)
    led = read_ledger(d, salvage=True)
    assert len(list(led.of_kind("load"))) == 5
    assert len(led.warnings) == 1 and "worker-1.jsonl is missing" in led.warnings[0]


def test_a_shard_of_another_run_is_refused(tmp_path):
    d = run_dir(tmp_path, [], {0: shard_lines(0, [load_rec("s", 0, 1.0, "r", worker=0)], run_id="other")})
    with pytest.raises(LedgerError, match="a shard of run 'other', not of this run"):
        read_ledger(d)


def test_an_empty_shard_is_nothing_measured(tmp_path):
    d = run_dir(tmp_path, [load_rec("s", 0, 1.0, "r")], {0: []})
    assert [r["kind"] for r in read_ledger(d).records] == ["load"]


# ------------------------------------------------------------------ a worker that died


LOST = {"worker": 1, "error": "The actor died unexpectedly before finishing this task.", "scheduled": 15,
        "recorded": 6, "never_sent": 9}


def test_a_stage_a_worker_died_in_says_which_and_what_was_lost(tmp_path):
    recs = [load_rec("s", i, 100.0 + i * 0.1, "r", worker=i % 2) for i in range(30) if i % 2 == 0 or i < 12]
    end = {"kind": "stage_end", "stage": "s", "arm": "a", "load_run": "r", "calls": 21, "workers": 2,
           "lost_workers": [LOST]}
    d = run_dir(tmp_path, [end], {k: shard_lines(k, [r for r in recs if r["worker"] == k]) for k in (0, 1)})
    [row] = load_summary(read_ledger(d))
    assert (row["requests"], row["workers"], row["lost_workers"]) == (21, 2, [LOST])
    [w] = [w for w in load_warnings([row]) if w.kind == W.LOAD_WORKER_LOST]
    assert "worker 1 of 2 died" in w.text and "9 of its 15 scheduled calls have no record" in w.text


def test_resume_runs_a_stage_a_worker_died_in_again(tmp_path):
    """--resume skips a stage that finished (stage_end) and runs one again whole whose stage_end lost a worker."""
    toml = '[[load]]\nname = "ok"\nmode = "open"\nrate = 5\nrequests = 2\n' \
           '[[load]]\nname = "s"\nmode = "open"\nrate = 5\nrequests = 2\n'
    exp = load(experiment(tmp_path, {"a": "http://127.0.0.1:9/v1"}, toml))
    ends = [{"kind": "stage_end", "stage": "ok", "arm": "a", "load_run": "x", "calls": 2},
            {"kind": "stage_end", "stage": "s", "arm": "a", "load_run": "y", "calls": 1, "workers": 2,
             "lost_workers": [LOST]}]
    head = {**header({"a": {}}, ["short"]), "config": exp.snapshot()}
    d = write(tmp_path / "run", head, ends)
    (d / "ledger.d").mkdir()
    for k in (0, 1):  # the stage's shards (empty: nothing measured)
        (d / "ledger.d" / f"worker-{k}.jsonl").touch()
    runner = Runner(exp, tmp_path / "run", resume=True)
    runner._completed()
    assert runner.stages_done == {("ok", "a")} and runner.run_id == "test"


# ------------------------------------------------------------------ without Ray


def test_workers_without_ray_is_a_clear_error_naming_the_extra(tmp_path, monkeypatch):
    """workers = 2 and no Ray: BadInput (exit 2) naming the stage and `pip install 'leverbench[ray]'`, before
    any engine starts or any ledger is written."""
    real = builtins.__import__

    def no_ray(name, *args, **kw):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    exp = load(experiment(tmp_path, {"a": "http://127.0.0.1:9/v1"},
                          '[[load]]\nname = "c"\nconcurrency = 2\nworkers = 2\nrequests = 5\n'))
    with pytest.raises(BadInput, match=r"load\[0\] 'c' \(workers = 2\) runs on Ray, which is not installed here: "
                                       r"pip install 'leverbench\[ray\]'"):
        Runner(exp, tmp_path / "run").run()
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ Ctrl-C on the coordinator


class _Ref:
    """A fake Ray object ref: awaited any number of times, and cancelling an await of it (as asyncio does to
    what a cancelled task awaits) does not stop the remote call, as it does not stop an actor's task."""

    def __init__(self, task: asyncio.Future):
        self.task = task

    def __await__(self):
        return asyncio.shield(self.task).__await__()


class _Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return _Ref(asyncio.ensure_future(self.fn(*args)))


class _Worker:
    """A fake worker actor: its share runs until stop, then takes RECORD_S to record its calls in flight."""

    RECORD_S = 0.3

    def __init__(self, shard: Path):
        self.shard, self.stop_ev, self.running, self.recorded = shard, asyncio.Event(), False, False
        self.clock, self.stop = _Method(self._clock), _Method(self._stop)
        self.prepare, self.run = _Method(self._prepare), _Method(self._run)

    async def _clock(self):
        import time  # noqa: PLC0415
        return time.time()

    async def _prepare(self, job):
        self.shard.write_text(json.dumps({"nonce": job.nonce}) + "\n")  # where the coordinator looks for it
        return job.share.scheduled

    async def _run(self, start):
        self.running = True
        await self.stop_ev.wait()
        await asyncio.sleep(self.RECORD_S)  # the calls in flight recorded (cancelled), the shard closed
        self.recorded = True
        return {"sent": 1, "stopped": True}

    async def _stop(self):
        self.stop_ev.set()


def test_ctrl_c_waits_for_every_worker_to_record_its_calls_in_flight(tmp_path):
    """Ctrl-C (the coordinator's stage task cancelled): each worker is told to stop, and the coordinator
    waits (up to STOP_TIMEOUT_S) until each worker's share has returned, its calls in flight recorded,
    before it goes on to end the workers (LoadCluster.close kills them)."""
    from leverbench.runner.workers import LoadCluster  # noqa: PLC0415

    exp, plan, arm = stage(tmp_path, 'mode = "open"\nrate = 5\nrequests = 10\nworkers = 2\n')
    cluster = object.__new__(LoadCluster)
    cluster.ray = type("FakeRay", (), {"exceptions": type("E", (), {"RayActorError": RuntimeError})})
    cluster.shards = tmp_path / "ledger.d"
    cluster.shards.mkdir()
    cluster.secrets = ()

    async def go() -> list[_Worker]:
        cluster.actors = {k: _Worker(cluster.shard(k)) for k in (0, 1)}
        run = StageRun(FakeSender(0.1), exp, plan, arm)
        task = asyncio.ensure_future(cluster.run_stage(run, None, timeouts=None, retries=0, keep_text=False,
                                                       run_id="test"))
        deadline = time.monotonic() + limits.PROGRESS_S
        while not all(w.running for w in cluster.actors.values()):  # until the workers are sending
            assert time.monotonic() < deadline and not task.done(), "the workers never started their shares"
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return list(cluster.actors.values())

    workers = asyncio.run(go())
    assert all(w.stop_ev.is_set() for w in workers)
    assert all(w.recorded for w in workers)  # not killed before they wrote their calls in flight
