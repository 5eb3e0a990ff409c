"""A load stage across several client processes: Ray actors, each on its own clock (issue 17).

One asyncio client holds its timing error low up to a point; past it, a stage with ``workers = N``
is sent by N Ray actors (a local cluster, or one joined with ``--ray-address`` / ``RAY_ADDRESS``).
Ray only carries the plan: no request is ever dispatched through it, since its scheduling latency
would enter the measurements.  For each stage on an arm the coordinator (:class:`LoadCluster`):

1. computes the stage's schedule once (:meth:`StageRun.schedule`: seeded arrivals, trace sessions
   kept whole) and splits it (:func:`~leverbench.runner.shares.split`);
2. measures each worker's clock against its own (:func:`clock_offset`: several round trips, the one
   least delayed kept; the offset is known within ± half its round trip);
3. ships each worker its share (:meth:`LoadWorker.prepare`), which opens its ledger shard
   ``RUN_DIR/ledger.d/worker-K.jsonl`` (one writer each; a ``shard`` header when new) and appends
   the stage's ``clock`` record, fsync'd, before anything is sent;
4. once every share has arrived, names a shared start ``START_LEAD_S`` ahead; each worker converts
   it to its own clock (+ its offset) and runs its share there with the same client code as a
   single process (:class:`~leverbench.runner.load.StageRun` through an
   :class:`~leverbench.runner.send.ArmSender`): its schedule, its sends, its per-call times (one
   host's clock), its records appended to its shard as they end.  Their absolute times stay on the
   worker's clock on disk; the reader puts them on the coordinator's by the stage's ``clock`` record
   (:func:`~leverbench.ledger.reader.read_shard`).

A worker that dies (its process killed, its node lost) leaves its calls up to the death in its shard;
the coordinator records which worker, and how many of its scheduled calls have no record, in the
stage's ``stage_end`` (``lost_workers``), replaces the actor before the next stage, and a resumed run
runs that stage again whole (the analysis keeps the latest execution: nothing is counted twice).
Ctrl-C stops every worker's share as it stops a single process: the calls in flight are recorded,
class ``cancelled``.

On a cluster, every node needs leverbench (with this version) and the run directory on a file system
they all mount (checked before each stage), and the arms' endpoints must be reachable from every node.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typing_extensions import TypedDict

from .. import __version__
from ..config import Experiment, LoadedExperiment
from ..errors import BadInput, LedgerError
from ..json_types import JSONObject
from ..ledger.reader import SHARDS_DIR, read_shard
from ..ledger.records import LEDGER_SCHEMA
from ..ledger.rows import LostWorkerRow
from ..ledger.writer import LedgerWriter
from ..workload.load import PlannedStage, expand
from .client import Timeouts, client_session
from .load import StageRun
from .prompts import vocabulary
from .recorder import Recorder
from .send import ArmSender
from .shares import Schedule, split
from .tools_check import ToolsChecks

RAY_EXTRA = "pip install 'leverbench[ray]'"
ACTOR_CPUS = 1  # each worker asks Ray for a core: its event loop needs one to send on time
CLOCK_SAMPLES = 16  # round trips per clock measurement
START_LEAD_S = 0.5  # from naming the shared start to it: more than a call reaching every worker takes
READY_TIMEOUT_S = 120.0  # for a worker to come up (Ray places it where a core is free)
STOP_TIMEOUT_S = 30.0  # for the workers to record their calls in flight after Ctrl-C


def import_ray(why: str) -> Any:
    """The ``ray`` module; BadInput naming the extra to install (and *why* it is needed) when it is missing."""
    try:
        import ray  # noqa: PLC0415 (optional: only stages with workers > 1 need it)
    except ImportError:
        raise BadInput(f"{why} runs on Ray, which is not installed here: {RAY_EXTRA}") from None
    return ray


# ------------------------------------------------------------------ clocks


@dataclass(frozen=True)
class ClockOffset:
    """A worker's clock against the coordinator's: worker time = coordinator time + offset_s (± uncertainty_s)."""

    offset_s: float
    uncertainty_s: float
    rtt_s: float
    samples: int


def clock_offset(samples: list[tuple[float, float, float]]) -> ClockOffset:
    """From round trips (t1: the coordinator's clock as it asked, tw: the worker's as it answered, t2: the
    coordinator's as the answer came), the one with the least round trip t2 − t1 (the least delayed by
    either side's scheduling): offset = tw − (t1 + t2) / 2, uncertainty = (t2 − t1) / 2 (the worker read
    its clock somewhere within [t1, t2])."""
    if not samples:
        raise ValueError("a clock offset needs at least one round trip")
    t1, tw, t2 = min(samples, key=lambda s: s[2] - s[0])
    return ClockOffset(tw - (t1 + t2) / 2, (t2 - t1) / 2, t2 - t1, len(samples))


# ------------------------------------------------------------------ one worker


class WorkerHello(TypedDict):
    """Who a worker is (:meth:`LoadWorker.hello`): its host, process and leverbench version."""

    host: str
    pid: int
    version: str


class ShareDone(TypedDict):
    """What a worker's share came to (:meth:`LoadWorker.run`): calls sent, and whether the stage stopped."""

    sent: int
    stopped: bool


class StageOutcome(TypedDict, total=False):
    """The keys a load stage's ``stage_end`` record gets from its run (``rows.StageEndRow``'s): calls and
    stopped; on several workers also workers and lost_workers (:meth:`LoadCluster.run_stage`)."""

    calls: int
    stopped: bool
    workers: int
    lost_workers: list[LostWorkerRow]


@dataclass(frozen=True)
class RemoteEndpoint:
    """What a worker needs of an arm's endpoint (an ``ArmEndpoint`` without its engine: an engine the
    tool started is watched by the coordinator, after the stage)."""

    base_url: str
    model: str
    headers: dict[str, str]
    request: JSONObject  # the arm's extra request fields (the experiment file's JSON)
    length_by_prompt: bool
    tools_checks: ToolsChecks = field(default_factory=ToolsChecks, compare=False)  # each worker asks again

    @classmethod
    def of(cls, ep: Any) -> RemoteEndpoint:
        """From the runner's ``ArmEndpoint``."""
        return cls(ep.base_url, ep.model, ep.headers, ep.request, ep.length_by_prompt)

    def death_note(self) -> str | None:
        return None


@dataclass
class StageJob:
    """Everything a worker needs to run its share of a stage, shipped before the start."""

    exp: LoadedExperiment
    plan: PlannedStage
    arm: str
    share: Schedule
    endpoint: RemoteEndpoint
    timeouts: Timeouts
    retries: int
    keep_text: bool
    run_id: str  # the run's (its shard's header names it)
    clock: ClockOffset
    t_clock: float  # the coordinator's time of the clock measurement
    nonce: str = field(default_factory=lambda: uuid.uuid4().hex)  # the coordinator finds its clock record by it


class LoadWorker:
    """One worker's client process (a Ray actor: :class:`LoadCluster` makes it one).  Its methods are
    coroutines, run on the actor's event loop: :meth:`stop` can reach a share while it runs."""

    def __init__(self, worker: int, shard: str, secrets: tuple[str, ...]):
        self.worker, self.shard, self.secrets = worker, Path(shard), secrets
        self.job: StageJob | None = None
        self.writer: LedgerWriter | None = None
        self.task: asyncio.Task | None = None

    async def hello(self) -> WorkerHello:
        return {"host": socket.gethostname(), "pid": os.getpid(), "version": __version__}

    async def clock(self) -> float:
        return time.time()

    async def prepare(self, job: StageJob) -> int | None:
        """Open the shard (its header first when new: BadInput when it belongs to another run) and append
        the stage's ``clock`` record, fsync'd; keep *job* for :meth:`run`.  Returns the calls scheduled."""
        header = _first_record(self.shard)
        if header is not None and header.get("run_id") != job.run_id:
            raise BadInput(f"{self.shard}: a shard of run {header.get('run_id')!r}, not of this run "
                           f"({job.run_id!r}); move it out of the run directory")
        self.writer = LedgerWriter(self.shard, secrets=self.secrets)
        me = await self.hello()
        if header is None:
            self.writer.append({"kind": "shard", "schema": LEDGER_SCHEMA, "tool_version": __version__,
                                "run_id": job.run_id, "worker": self.worker, "host": me["host"], "pid": me["pid"],
                                "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
        self.writer.append({"kind": "clock", "stage": job.plan.name, "arm": job.arm, "load_run": job.share.run_id,
                            "worker": self.worker, "host": me["host"], "pid": me["pid"], "t": job.t_clock,
                            "offset_s": job.clock.offset_s, "uncertainty_s": job.clock.uncertainty_s,
                            "rtt_s": job.clock.rtt_s, "samples": job.clock.samples, "nonce": job.nonce})
        vocabulary()  # what the share's prompts are made of, built before the start (a fresh process has none)
        self.job = job
        return job.share.scheduled

    async def run(self, start: float) -> ShareDone:
        """Run the prepared share from the shared *start* (the coordinator's clock; + the offset: this
        host's); every record is on disk when it returns.  Cancelled (:meth:`stop`): the calls in flight
        are recorded first."""
        job, writer = self.job, self.writer
        if job is None or writer is None:
            raise RuntimeError("LoadWorker.run before prepare")
        self.task = asyncio.current_task()
        recorder = Recorder(writer)
        stage: StageRun | None = None
        try:
            async with client_session(keep_alive=job.plan.stage.keep_alive) as session:
                sender = ArmSender(recorder, session, job.endpoint, timeouts=job.timeouts, retries=job.retries,
                                   keep_text=job.keep_text)
                stage = StageRun(sender, job.exp, job.plan, job.arm)
                await stage.run(job.share, start + job.clock.offset_s)
                await recorder.flush()
        finally:
            self.task = None
            recorder.close()
            writer.close()
            self.job = self.writer = None
        return {"sent": stage.sent, "stopped": stage.stopped}

    async def stop(self) -> None:
        """Cancel the running share (Ctrl-C on the coordinator)."""
        if self.task is not None:
            self.task.cancel()


# ------------------------------------------------------------------ the coordinator


def join_cluster(spec: Experiment, done: set[tuple[str, str]], run_dir: Path, secrets: tuple[str, ...],
                 address: str | None) -> LoadCluster | None:
    """A :class:`LoadCluster` when a load stage still to run (not in *done*: (stage, arm) pairs) has
    workers > 1, else None; BadInput naming the stage and the extra to install when Ray is missing."""
    arms = [a.name for a in spec.arms]
    todo = [(i, p) for i, st in enumerate(spec.load) for p in expand([st])
            if st.workers > 1 and any((p.name, a) not in done for a in st.arms or arms)]
    if not todo:
        return None
    i, p = todo[0]
    return LoadCluster(run_dir, secrets, address, f"load[{i}] {p.name!r} (workers = {p.stage.workers})")



class LoadCluster:
    """The coordinator's side: Ray joined (``address``: see ``ray.init``; none and no ``RAY_ADDRESS``: a
    local cluster) or already up in this process, and one actor per worker, kept across stages."""

    def __init__(self, run_dir: Path, secrets: tuple[str, ...], address: str | None, why: str):
        self.ray = import_ray(why)
        self.own = not self.ray.is_initialized()
        if self.own:
            self.ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
        self.shards = Path(run_dir).resolve() / SHARDS_DIR
        self.secrets = secrets
        self.actors: dict[int, Any] = {}
        self._actor_class = self.ray.remote(num_cpus=ACTOR_CPUS, max_restarts=0)(LoadWorker)

    def close(self) -> None:
        """End the workers (and Ray, when this cluster started it)."""
        for actor in self.actors.values():
            self.ray.kill(actor)
        self.actors.clear()
        if self.own:
            self.ray.shutdown()

    def shard(self, k: int) -> Path:
        return self.shards / f"worker-{k}.jsonl"

    async def _actor(self, k: int) -> Any:
        """Worker *k*'s actor: the live one, else a new one once it answers (BadInput on a version mismatch)."""
        if k not in self.actors:
            self.shards.mkdir(parents=True, exist_ok=True)
            actor = self._actor_class.remote(k, str(self.shard(k)), self.secrets)
            try:
                me = await asyncio.wait_for(_wait(actor.hello.remote()), READY_TIMEOUT_S)
            except asyncio.TimeoutError:
                self.ray.kill(actor)
                raise BadInput(f"Ray placed no worker {k} within {READY_TIMEOUT_S:.0f} s: each worker needs a "
                               f"free CPU ({self.ray.available_resources().get('CPU', 0):g} available)") from None
            if me["version"] != __version__:
                self.ray.kill(actor)
                raise BadInput(f"worker {k} on {me['host']} runs leverbench {me['version']}, this one {__version__}: "
                               "install the same version on every node")
            self.actors[k] = actor
        return self.actors[k]

    async def _clock(self, actor: Any) -> ClockOffset:
        samples = []
        for _ in range(CLOCK_SAMPLES):
            t1 = time.time()
            tw = await _wait(actor.clock.remote())
            samples.append((t1, tw, time.time()))
        return clock_offset(samples)

    async def run_stage(self, stage: StageRun, endpoint: RemoteEndpoint, *, timeouts: Timeouts, retries: int,
                        keep_text: bool, run_id: str) -> StageOutcome:
        """Run *stage* (built on the coordinator's sender, for the schedule) on its workers; the keys its
        ``stage_end`` record gets: calls, stopped, workers, lost_workers (see the module docstring)."""
        n = stage.s.workers
        shares = split(await stage.schedule(), n)
        actors = [await self._actor(k) for k in range(n)]
        jobs = []
        for k, actor in enumerate(actors):  # one at a time: each round trip alone
            t_clock = time.time()
            jobs.append(StageJob(stage.exp, stage.plan, stage.arm, shares[k], endpoint, timeouts, retries,
                                 keep_text, run_id, await self._clock(actor), t_clock))
        await asyncio.gather(*(_wait(a.prepare.remote(job)) for a, job in zip(actors, jobs)))
        for k, job in enumerate(jobs):
            if not _holds(self.shard(k), job.nonce):
                raise BadInput(f"worker {k} wrote its shard where this machine does not see it ({self.shard(k)}): "
                               "on a cluster the run directory must be on a file system every node mounts")
        start = time.time() + START_LEAD_S
        refs = [a.run.remote(start) for a in actors]
        try:
            results = await asyncio.gather(*(_wait(r) for r in refs), return_exceptions=True)
        except asyncio.CancelledError:  # Ctrl-C: every worker records its calls in flight, then we stop
            await asyncio.gather(*(_wait(a.stop.remote()) for a in actors), return_exceptions=True)
            # the awaits above were cancelled with us (the workers' shares were not): await the shares anew
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(_wait(r) for r in refs), return_exceptions=True),
                                       STOP_TIMEOUT_S)
            raise
        calls, stopped = 0, False
        lost: list[LostWorkerRow] = []
        for k, res in enumerate(results):
            if isinstance(res, self.ray.exceptions.RayActorError):  # the worker died: its shard says how far it got
                self.actors.pop(k, None)
                recorded = self._recorded(k, stage.run_id)
                scheduled = shares[k].scheduled
                lost.append({"worker": k, "error": str(res).splitlines()[0][:500], "scheduled": scheduled,
                             "recorded": recorded, "never_sent": None if scheduled is None else scheduled - recorded})
                calls += recorded
            elif isinstance(res, BaseException):
                raise res
            else:
                calls += res["sent"]
                stopped = stopped or res["stopped"]
        return {"calls": calls, "stopped": stopped, "workers": n, "lost_workers": lost}

    def _recorded(self, k: int, load_run: str) -> int:
        """Calls of the execution *load_run* in worker *k*'s shard (final attempts: a retried one is not a call)."""
        shard = read_shard(self.shard(k), salvage=True)
        return 0 if shard is None else sum(1 for r in shard.records if r.get("kind") == "load"
                                           and r.get("load_run") == load_run and not r.get("retried"))


async def _wait(ref: Any) -> Any:
    """The value of a Ray object ref, awaited without blocking the event loop."""
    return await ref


def _first_record(path: Path) -> JSONObject | None:
    """The first line of the file at *path* as a JSON object (not yet checked: a shard header, or not); None
    when there is none (no file, or empty);
    LedgerError naming the file when it is no JSON object (a header cut by a crash as it was written)."""
    try:
        with open(path, "rb") as fh:
            line = fh.readline()
    except FileNotFoundError:
        return None
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        raise LedgerError(f"{path}: line 1 is not a shard header (a worker killed as it wrote it?); the shard "
                          f"cannot be read or appended to: move it out of {SHARDS_DIR}/ and run again")
    return obj


def _holds(path: Path, nonce: str) -> bool:
    """Whether the file at *path*, as this machine sees it, ends with a record carrying *nonce*."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 4096))
            return nonce.encode() in fh.read()
    except OSError:
        return False
