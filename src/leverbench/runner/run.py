"""Run an experiment: set up, plan, execute, write the ledger.

The runner measures and records; it computes no statistics (that is
``leverbench.analysis``).  :class:`Runner` sets the run up — what a resumed
run has done (:mod:`.resume`), each arm's endpoint and engine, the ledger, the
GPUs, whether the engines run together or one at a time (:mod:`.engine_mode`)
— then lays the run out as data before anything is sent
(:func:`.plan.build_plan`: which unit when, the warm-ups, sentinels, probes,
load stages, an adaptive run's looks) and hands the plan to the executor
(:class:`.execute.Executor`) with the parts it runs it with, each narrow (the
ledger, the senders, the engines, the GPUs, the cache states, the load
stages); none of them is given the runner.  Engines are always stopped.

Every call goes out through a :class:`~leverbench.runner.send.Sender` (one per
arm and connection pool), which hands its record to the ledger's writer the
moment it ends, failed or not; the writer (one thread,
:class:`~leverbench.runner.recorder.Recorder`) appends and fsyncs it while the
next call goes out, so the fsync never sits inside a measured interval.  The
run waits for the writer only between units of work (after each turn, probe or
sentinel; at the end of each load stage; at the end of the run, and in any case
before it returns or raises).  A turn's ``turn`` record is written when the
turn ends.  A resumed run skips every unit that already has a successful record
and re-runs the units whose every record failed (the failed records stay in
the ledger, superseded: the analysis counts each unit's first successful
attempt).

Connections: each arm has its own kept-alive pool (:mod:`.pools`), used by its
turns, probes and sentinels; each load stage opens its own pool per arm the
same way.  The time to open a connection is recorded apart as ``connect_s``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import aiohttp

from .. import __version__
from ..config import Experiment, LoadedExperiment
from ..engines import make_engine
from ..engines.vllm import distribution
from ..ledger.rows import EnginesRow
from ..ledger.writer import LedgerWriter
from ..workload.cases import case_size_chars
from ..workload.recorded.expand import with_recorded
from .cache_state import TurnStates, resets_through_endpoints
from .client import Timeouts
from .endpoint import ArmEndpoint, Interrupted, endpoint_headers  # noqa: F401 (Interrupted: the run's public error)
from .engine_blocks import EngineSet
from .engine_mode import Devices, arm_server_state, choose, engine_devices, server_state
from .execute import Executor, Parts, ProgressFn, scrape
from .file_names import file_part
from .header import run_header
from .load_run import LoadStages
from .plan import Plan, build_plan, load_stages
from .pools import ArmPools, SendSettings
from .recorder import CallTally, HeaderFirst, Recorder
from .resume import Resumed, completed, nothing_to_resume
from .rounds import AdaptiveRounds
from .schedule import Unit
from .signals import hold_signals, interrupt_on, release_signals
from .strict_json import check_request_fields
from .telemetry import Telemetry
from .trace_plan import check_traces
from .workers import join_cluster

QUICK_RELEASE_S = 5.0  # a run ending on an error waits this long for its engines' devices to be released


def choose_engines(spec: Experiment, gpus: Telemetry, resumed: EnginesRow | None
                   ) -> tuple[EnginesRow, dict[str, Devices]]:
    """How the engines run (:mod:`.engine_mode`; a resumed run keeps its own) and the GPUs each engine arm's would
    use (the host's, as *gpus* sees them)."""
    host, build = gpus.host_gpus(), (distribution() or (None,))[0]
    devices = {a.name: engine_devices(a.engine, host, build) for a in spec.arms if a.engine is not None}
    return resumed or choose(spec.experiment.engines, devices, spec.experiment.order), devices


class Runner(Executor):
    """One run of *exp* into the run directory *out_dir* (module docstring): :meth:`run` it — set it up, plan it,
    execute the plan (:class:`~.execute.Executor`) — or :meth:`plan` it without sending anything.  *resume*:
    continue the run there; *progress*: told of each unit as it starts; *timeouts*: the calls' (default: the
    experiment's); *ray_address*: the Ray cluster of load stages with workers > 1 (None: ``RAY_ADDRESS``, or a
    local one)."""

    def __init__(self, exp: LoadedExperiment, out_dir: Path, *, resume: bool = False,
                 progress: ProgressFn | None = None, timeouts: Timeouts | None = None, ray_address: str | None = None):
        self.exp = with_recorded(exp)  # a case of recorded turns: a case per turn (the CLI may have done it)
        self.out = Path(out_dir)
        self.resume = resume
        self.progress = progress
        self.send = SendSettings(timeouts or Timeouts(**self.exp.spec.experiment.timeouts.model_dump()),
                                 self.exp.spec.experiment.retries, self.exp.spec.experiment.store_text)
        self.ray_address = ray_address
        self.endpoints: dict[str, ArmEndpoint] = {}
        self._recorder: Recorder | None = None  # hands records to the ledger's writer on its thread (open_ledger)
        self._resumed = Resumed(run_id=uuid.uuid4().hex[:12])  # what the run continues (_completed): nothing yet

    # ------------------------------------------------------------ set-up

    def _prepare_endpoints(self) -> None:
        """Each arm's endpoint, with the engine the tool starts for it (not started)."""
        resettable = resets_through_endpoints(self.exp.spec)
        for i, arm in enumerate(self.exp.spec.arms):
            headers = endpoint_headers(self.exp, i, arm)
            if arm.engine is not None:
                eng = make_engine(arm.name, arm.engine, self.out / f"engine-{file_part(arm.name)}.log",
                                  resettable=resettable)
                self.endpoints[arm.name] = ArmEndpoint(arm, "", eng.model_id, headers, eng)
            else:
                self.endpoints[arm.name] = ArmEndpoint(arm, arm.base_url or "", arm.model or "", headers)

    def _engines(self, gpus: Telemetry, resumed: EnginesRow | None) -> tuple[EnginesRow, dict[str, Devices]]:
        """:func:`choose_engines`, and what each arm learns of it: its server state (cold, warm), an engine arm's
        GPU facts (:mod:`.telemetry`)."""
        row, devices = choose_engines(self.exp.spec, gpus, resumed)
        started = [n for n, ep in self.endpoints.items() if ep.engine is not None]
        if resumed is None:  # a resumed run keeps its header's
            row["server_state"] = server_state(row["mode"], started, self.endpoints)
        for name in self.endpoints:  # a discovered fact: a cold arm and a warm one are no controlled pair
            self.endpoints[name].discovered["server_state"] = arm_server_state(row["mode"], name in started)
        for name, devs in devices.items():
            self.endpoints[name].discovered["gpu"] = dict(gpus.engine_facts(devs))
        return row, devices

    def _completed(self) -> Resumed:
        """What the run continues (:func:`.resume.completed`: the units a resumed run skips, its load stages done,
        its run id, ...), kept; a resumed adaptive run's experiment (its own settings) becomes the run's."""
        got = completed(self.out, self.resume, self.exp)
        self._resumed = replace(got, run_id=got.run_id or self._resumed.run_id)
        self.exp = got.exp or self.exp
        return self._resumed

    @property
    def run_id(self) -> str:
        """The run's id (the header's; a resumed run's: its ledger's)."""
        return self._resumed.run_id or ""

    @property
    def stages_done(self) -> set[tuple[str, str]]:
        """The (load stage, arm) pairs a resumed run has finished."""
        return self._resumed.stages_done

    def _sizes(self) -> dict[str, int]:
        """Each case's size in characters (the probes' default case is the longest)."""
        return {c.name: case_size_chars(self.exp, c) for c in self.exp.spec.cases}

    def plan(self) -> Plan:
        """The run's plan (:mod:`.plan`), nothing sent, started or written: a resumed run's (*resume*, a run in
        *out_dir*) leaves out what it has done."""
        check_request_fields(self.exp)
        check_traces(self.exp)
        got = Resumed() if nothing_to_resume(self.out) is not None else completed(self.out, self.resume, self.exp)
        self.exp = got.exp or self.exp
        gpus = Telemetry.open(0)
        try:
            row, _ = choose_engines(self.exp.spec, gpus, got.engines)
        finally:
            gpus.close()
        return build_plan(self.exp, self._sizes(), row["mode"], done=got.done, stages_done=got.stages_done,
                          resumed=got.header)

    # ------------------------------------------------------------ the ledger

    def open_ledger(self) -> None:
        """Open the run's ledger (appending) and its :class:`Recorder`; the run's API keys are never written."""
        self._recorder = Recorder(LedgerWriter(self.out / "ledger.jsonl", secrets=self.secrets()))

    def secrets(self) -> tuple[str, ...]:
        """The run's API keys: never written to the ledger (nor to its shards)."""
        return tuple(h.removeprefix("Bearer ") for ep in self.endpoints.values() for h in ep.headers.values())

    def check_some_call_succeeded(self) -> None:
        """A run in which every call failed measured nothing: RuntimeFailure (exit 1), the first error's keys
        redacted (:meth:`~leverbench.runner.recorder.CallTally.check`); the CLI calls it after the reports."""
        (self._recorder.tally if self._recorder is not None else CallTally()).check(self.out, self.secrets())

    def close_ledger(self) -> None:
        """Wait until every record handed over is written, however the run ended, and close the file."""
        if self._recorder is not None:
            self._recorder.close()
            self._recorder.writer.close()

    @property
    def recorder(self) -> Recorder:
        if self._recorder is None:
            raise RuntimeError("the run's ledger is not open (Runner.open_ledger)")
        return self._recorder

    async def run_load(self, session: aiohttp.ClientSession, arms: list[str] | None = None) -> None:
        """The experiment's load stages alone (*arms*: only theirs), their counters scraped on *session*, into the
        open ledger: what a run with engines together does after its units (:mod:`.load_run`)."""
        senders = ArmPools(self.recorder, self.endpoints, self.send)
        stages = LoadStages(self.exp, self.endpoints, self.recorder, senders, None, self.run_id)

        async def scraped(when: str, only: tuple[str, ...] | None) -> None:
            await scrape(session, self.endpoints, when, only, self.recorder.append)
        async with senders.closing():
            for step in load_stages(self.exp, list(self.endpoints), self.stages_done, only=arms):
                if self.progress is not None:
                    self.progress(Unit("load", step.arm, step.stage.name, 0), step.index, step.of)
                await stages.run(step, scraped, lambda: None)

    # ------------------------------------------------------------ the run

    def run(self) -> Path:
        """Do the experiment's work (set up, :meth:`plan`, execute); returns the ledger path.  Engines are always
        stopped."""
        check_request_fields(self.exp)  # before anything starts: a request JSON cannot carry
        check_traces(self.exp)  # ... and a trace that cannot be read or replayed
        got = self._completed()
        spec, run_id = self.exp.spec, self.run_id
        self._prepare_endpoints()
        cache = TurnStates(self.exp, self.endpoints, run_id, got.failed)
        # before the engines start and the run's signal handlers are set (ray.init sets its own)
        cluster = join_cluster(spec, got.stages_done, self.out, self.secrets(), self.ray_address)
        sizes = self._sizes()
        self.out.mkdir(parents=True, exist_ok=True)
        self.open_ledger()
        ledger = HeaderFirst(self.recorder, written=got.header)
        gpus = Telemetry.open(spec.experiment.gpu_sample_hz)
        engines: EngineSet | None = None
        try:
            row, devices = self._engines(gpus, got.engines)
            plan = build_plan(self.exp, sizes, row["mode"], done=got.done, stages_done=got.stages_done,
                              resumed=got.header)
            if got.header:  # a resumed run
                at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
                rerun = sum(1 for u in plan.units() if u.key() in got.failed)
                self.recorder.writer.append({"kind": "resume", "at": at, "tool_version": __version__,
                                             "completed_units": len(got.done), "failed_units_rerun": rerun,
                                             "repeats": spec.experiment.repeats})
            engines = EngineSet(self.endpoints, gpus, row["mode"], devices, ledger.append, got.next_block)
            senders = ArmPools(self.recorder, self.endpoints, self.send)
            parts = Parts(
                self.exp, self.endpoints, ledger, functools.partial(run_header, run_id, self.exp, self.endpoints, gpus,
                                                                    row),
                senders, engines, gpus, cache, LoadStages(self.exp, self.endpoints, self.recorder, senders, cluster,
                                                          run_id),
                AdaptiveRounds(spec, self.out / "ledger.jsonl", got.done) if spec.experiment.adaptive else None)
            previous = interrupt_on()  # SIGTERM, SIGHUP: outside the loop
            try:
                self.execute(plan, parts)
            except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, or SIGTERM, SIGHUP (Executor._work)
                raise Interrupted(str(self.out)) from None
            finally:
                release_signals(previous)
        finally:
            if engines is not None:
                stop_engines(engines, ledger, quick=sys.exc_info()[0] is not None)
            gpus.close()
            if cluster is not None:
                cluster.close()
            self.close_ledger()  # every record handed to the writer is written, whatever ended the run
        self.recorder.reap()  # a normal end: a failed append is an error
        return self.out / "ledger.jsonl"


def stop_engines(engines: EngineSet, ledger: HeaderFirst, quick: bool = False) -> None:
    """Stop every engine still running, each stop recorded once the ledger has its header (*quick*: the run is
    ending on an error or an interrupt, its devices' release is waited for a few seconds only); a second Ctrl-C
    (or a SIGTERM) meanwhile waits until they are (they run in their own process group: the terminal's SIGINT
    never reaches them)."""
    held = hold_signals()
    try:
        stops = engines.stop_all(wait_s=QUICK_RELEASE_S if quick else None)
        if ledger.written:
            for rec in stops:
                ledger.recorder.append(rec)
    finally:
        release_signals(held)
