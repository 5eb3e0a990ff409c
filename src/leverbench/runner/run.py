"""Run an experiment: start engines, do the scheduled work, write the ledger.

The runner measures and records; it computes no statistics (that is
``leverbench.analysis``).  Every call goes out through a
:class:`~leverbench.runner.send.Sender` (one per arm and connection pool),
which hands its record to the ledger's writer the moment it ends, failed or
not; the writer (one thread, :class:`~leverbench.runner.recorder.Recorder`)
appends and fsyncs it while the next call goes out, so the fsync never sits
inside a measured interval.  The run waits for the writer only between units
of work (after each turn, probe or sentinel; at the end of each load stage; at
the end of the run, and in any case before it returns or raises).  A turn's ``turn`` record
is written when the turn ends.  A resumed run skips every unit that already
has a successful record and re-runs the units whose every record failed (the
failed records stay in the ledger, superseded: the analysis counts each unit's
first successful attempt).

Connections: each arm has its own kept-alive pool (see
:func:`~leverbench.runner.connections.client_session`), used by its turns, probes
and sentinels; each load stage opens its own pool per arm the same way.  The
time to open a connection is recorded apart as ``connect_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import sys
import time
import uuid
from pathlib import Path
from typing import AsyncIterator, Callable

import aiohttp

from .. import __version__
from ..config import LoadedExperiment
from ..engines import make_engine
from ..engines.vllm import distribution
from ..errors import EngineError
from ..ledger.records import CallRecord
from ..ledger.rows import EnginesRow, EngineStartRow
from ..ledger.writer import LedgerWriter
from ..workload.cases import case_size_chars
from ..workload.recorded.expand import with_recorded
from .cache_state import TurnStates, resets_through_endpoints, with_cache
from .client import Timeouts, client_session
from .discover import api_root, scrape_metrics
from .endpoint import ArmEndpoint, Interrupted, endpoint_headers  # noqa: F401 (Interrupted: the run's public error)
from .engine_blocks import EngineBlocks
from .engine_mode import ONE_AT_A_TIME, Devices, arm_server_state, choose, engine_devices, server_state
from .file_names import file_part
from .fixed_calls import fixed_length
from .header import run_header
from .load_run import run_load
from .recorded_turn import run_recorded_turn
from .recorder import CallTally, Recorder
from .resume import completed
from .rounds import AdaptiveRounds
from .schedule import SENTINEL_CASE, Unit, build_schedule
from .send import ArmSender
from .signals import cancel_on, hold_signals, interrupt_on, release_signals
from .strict_json import check_request_fields
from .telemetry import Telemetry
from .trace_plan import check_traces
from .turn import run_turn
from .workers import LoadCluster, join_cluster

WARMUP_MAX_CALLS = 8  # warm-up calls per arm at most, until its sentinel rate is stable
QUICK_RELEASE_S = 5.0  # a run ending on an error waits this long for its engines' devices to be released


ProgressFn = Callable[[Unit, int, int], None]


class Runner:
    def __init__(self, exp: LoadedExperiment, out_dir: Path, *, resume: bool = False,
                 progress: ProgressFn | None = None, timeouts: Timeouts | None = None, ray_address: str | None = None):
        self.exp = with_recorded(exp)  # a case of recorded turns: a case per turn (the CLI may have done it)
        self.spec = self.exp.spec
        self.out = Path(out_dir)
        self.resume = resume
        self.progress = progress
        self.timeouts = timeouts or Timeouts(**self.spec.experiment.timeouts.model_dump())
        self.retries = self.spec.experiment.retries
        self.endpoints: dict[str, ArmEndpoint] = {}
        self.writer: LedgerWriter | None = None
        self._recorder: Recorder | None = None  # hands records to the writer's thread (open_ledger)
        self.tally = CallTally()  # this session's calls: how many failed (the recorder's, once it is open)
        self._pools: dict[str, aiohttp.ClientSession] = {}  # per arm: its turns', probes' and sentinels' connections
        self._failed: set[tuple] = set()  # on resume: units whose every record failed (run again)
        self._fresh = False  # --resume found no run (no ledger, or one without its header): start it afresh
        self.stages_done: set[tuple[str, str]] = set()  # on resume: (load stage, arm) pairs that finished
        self.keep_text = self.spec.experiment.store_text
        self.run_id = uuid.uuid4().hex[:12]  # the header's (a resumed run's: its ledger's)
        self.ray_address = ray_address  # load stages with workers > 1: the Ray cluster (None: RAY_ADDRESS, or local)
        self.cluster: LoadCluster | None = None
        self.telemetry: Telemetry | None = None  # the run's GPUs: facts, readings, release checks
        self.engines: EnginesRow | None = None  # together or one at a time, and why (the header's)
        self.engine_devices: dict[str, Devices] = {}  # arm → the GPUs its engine would use (None: the CPU)
        self.blocks = EngineBlocks(self)
        self.sizes: dict[str, int] = {}  # case → its size in characters (the probes' default case)
        self._early: list = []  # engine records made before the header, appended right after it
        self._header_written = False  # records may follow (a resumed run's ledger has its header)
        self._resumed_engines: EnginesRow | None = None  # a resumed run's choice (its header's)
        self.turn_states = TurnStates(self.exp, self.endpoints, self.run_id)  # the cache state before each turn (run)

    # ------------------------------------------------------------ set-up

    def _prepare_endpoints(self) -> None:
        resettable = resets_through_endpoints(self.spec)
        for i, arm in enumerate(self.spec.arms):
            headers = endpoint_headers(self.exp, i, arm)
            if arm.engine is not None:
                eng = make_engine(arm.name, arm.engine, self.out / f"engine-{file_part(arm.name)}.log",
                                  resettable=resettable)
                self.endpoints[arm.name] = ArmEndpoint(arm, "", eng.model_id, headers, eng)
            else:
                self.endpoints[arm.name] = ArmEndpoint(arm, arm.base_url or "", arm.model or "", headers)

    def _choose_engines(self, resumed: EnginesRow | None) -> None:
        """Which GPUs each engine would use, together or one at a time (:mod:`.engine_mode`; a resumed run keeps
        its own), each arm's server state (cold, warm) and each engine arm's GPU facts (:mod:`.telemetry`)."""
        assert self.telemetry is not None
        host, build = self.telemetry.host_gpus(), (distribution() or (None,))[0]
        self.engine_devices = {name: engine_devices(ep.arm.engine, host, build)
                               for name, ep in self.endpoints.items() if ep.arm.engine is not None}
        self.engines = resumed or choose(self.spec.experiment.engines, self.engine_devices, self.spec.experiment.order)
        mode, started = self.engines["mode"], [n for n, ep in self.endpoints.items() if ep.engine is not None]
        if resumed is None:  # a resumed run keeps its header's
            self.engines["server_state"] = server_state(mode, started, self.endpoints)
        for name in self.endpoints:  # a discovered fact: a cold arm and a warm one are no controlled pair
            self.endpoints[name].discovered["server_state"] = arm_server_state(mode, name in started)
        for name, devs in self.engine_devices.items():
            self.endpoints[name].discovered["gpu"] = dict(self.telemetry.engine_facts(devs))

    def _start_engines(self) -> None:
        """Engines together: every engine started now (each start recorded as it answered: :meth:`record_engine`;
        its warm-up once the header is written)."""
        for name, ep in self.endpoints.items():
            if ep.engine is not None:
                self.blocks.start(name, "run")

    def record_engine(self, rec: EngineStartRow) -> None:
        """An engine's start record: into the ledger, or kept until its header is written (then appended)."""
        (self.recorder.append if self._header_written else self._early.append)(rec)

    def stop_engines(self, quick: bool = False) -> None:
        """Stop every engine still running, each stop recorded (*quick*: the run is ending on an error or an
        interrupt, its devices' release is waited for a few seconds only); a second Ctrl-C (or a SIGTERM)
        meanwhile waits until they are (they run in their own process group: the terminal's SIGINT never
        reaches them)."""
        held = hold_signals()
        try:
            stops = self.blocks.stop_all(wait_s=QUICK_RELEASE_S if quick else None)
            if self._recorder is not None and self._header_written:
                for rec in stops:
                    self._recorder.append(rec)
        finally:
            release_signals(held)

    def _completed(self) -> set[tuple]:
        """The units a resumed run skips (:func:`.resume.completed`), and what else it takes from its ledger."""
        got = completed(self.out, self.resume, self.exp)
        self._fresh, self._failed, self.stages_done = got.fresh, got.failed, got.stages_done
        self._resumed_engines, self._header_written = got.engines, got.header
        self.blocks.count = got.next_block  # engine starts numbered on from the ledger's
        if got.exp is not None:
            self.exp, self.spec = got.exp, got.exp.spec
        self.run_id = got.run_id or self.run_id
        return got.done

    # ------------------------------------------------------------ the ledger, and calls

    def open_ledger(self) -> None:
        """Open the run's ledger (appending) and its :class:`Recorder`; the run's API keys are never written."""
        self.writer = LedgerWriter(self.out / "ledger.jsonl", secrets=self.secrets())
        self._recorder = Recorder(self.writer)
        self.tally = self._recorder.tally

    def secrets(self) -> tuple[str, ...]:
        """The run's API keys: never written to the ledger (nor to its shards)."""
        return tuple(h.removeprefix("Bearer ") for ep in self.endpoints.values() for h in ep.headers.values())

    def check_some_call_succeeded(self) -> None:
        """A run in which every call failed measured nothing: RuntimeFailure (exit 1), the first error's keys
        redacted (:meth:`~leverbench.runner.recorder.CallTally.check`); the CLI calls it after the reports."""
        self.tally.check(self.out, self.secrets())

    def close_ledger(self) -> None:
        """Wait until every record handed over is written, however the run ended, and close the file."""
        if self._recorder is not None:
            self._recorder.close()
        if self.writer is not None:
            self.writer.close()

    @property
    def recorder(self) -> Recorder:
        if self._recorder is None:
            raise RuntimeError("the run's ledger is not open (Runner.open_ledger)")
        return self._recorder

    def sender(self, arm: str, session: aiohttp.ClientSession | None = None) -> ArmSender:
        """The :class:`~leverbench.runner.send.Sender` of *arm*'s calls through *session* (default: the arm's pool)."""
        return ArmSender(self.recorder, session if session is not None else self.pool(arm), self.endpoints[arm],
                         timeouts=self.timeouts, retries=self.retries, keep_text=self.keep_text)

    def pool(self, arm: str) -> aiohttp.ClientSession:
        """The arm's kept-alive connection pool (for its turns, probes and sentinels)."""
        if arm not in self._pools:
            self._pools[arm] = client_session()
        return self._pools[arm]

    async def _turn(self, session: aiohttp.ClientSession, unit: Unit) -> None:
        """One agent turn (:func:`.turn.run_turn`; a recorded one: :func:`.recorded_turn.run_recorded_turn`), its arm
        first brought to the declared cache state (:meth:`.cache_state.TurnStates.prepare`); its record appended."""
        case = next(c for c in self.spec.cases if c.name == unit.case)
        cache, salt = await self.turn_states.prepare(session, unit.arm, case, unit.repeat, self.sender, self._restart,
                                                     self.recorder.append)
        sender = self.sender(unit.arm)  # the arm's pool: a new one where its engine was restarted
        rec = await (run_recorded_turn(sender, self.exp, unit, case) if unit.case in self.exp.recorded
                     else run_turn(sender, self.exp, unit, salt=salt))
        self.recorder.append(with_cache(rec, cache))

    async def _restart(self, arm: str, repeat: int) -> None:
        """*arm*'s engine stopped and started again, each recorded, its counters scraped on either side (a window
        never spans a restart), a new pool; then one short call (warmup, position restart)."""
        await self.scrape(self.pool(arm), "after", [arm])
        await self.close_pool(arm)
        self.recorder.append(self.blocks.stopped(await asyncio.to_thread(self.blocks.stop, arm)))
        await asyncio.to_thread(self.blocks.start, arm, "restart", repeat)
        await self.scrape(self.pool(arm), "before", [arm])
        await self._fixed_length(self.pool(arm), Unit("warmup", arm, SENTINEL_CASE, repeat, 8, position="restart"))

    async def _warm_up(self, arm: str) -> tuple[int, bool]:
        """Warm *arm*'s endpoint before the first measured round: the sentinel's call (kind ``warmup``, repeat
        0, 1, …) until its decode rate is stable — two in a row within the drift tolerance
        (:func:`~leverbench.analysis.experiment.drift.settled`) — or :data:`WARMUP_MAX_CALLS` were sent.  The calls
        are in the ledger (the analysis reports whether the arm settled); without sentinels
        (``sentinel_tokens = 0``), one short call."""
        from ..analysis.experiment.drift import sentinel_rate, settled  # noqa: PLC0415 (scipy: after the header)
        n = self.spec.experiment.sentinel_tokens
        rates: list[float | None] = []
        for i in range(WARMUP_MAX_CALLS if n > 0 else 1):
            rec = await self._fixed_length(self.pool(arm), Unit("warmup", arm, SENTINEL_CASE, i, n or 8))
            await self.recorder.flush()
            rates.append(sentinel_rate(rec.to_dict()) if rec is not None else None)
            if settled(rates, self.spec.experiment.drift_tolerance):
                break
        return len(rates), settled(rates, self.spec.experiment.drift_tolerance)

    async def _fixed_length(self, session: aiohttp.ClientSession, unit: Unit) -> CallRecord | None:
        """A probe, sentinel or warm-up call (:func:`.fixed_calls.fixed_length`) on the arm's *session*."""
        return await fixed_length(self.sender(unit.arm, session), self.endpoints[unit.arm], self.exp, session, unit)

    async def scrape(self, session: aiohttp.ClientSession, when: str, arms: list[str] | None = None) -> None:
        """Scrape each arm's (or the given arms') Prometheus metrics into a ``metrics`` record."""
        for name, ep in self.endpoints.items():
            if arms is not None and name not in arms:
                continue
            url = ep.arm.metrics_url or (api_root(ep.base_url) + "/metrics")
            samples = await scrape_metrics(session, url, ep.headers_for(url))
            if samples is not None:
                self.recorder.append({"kind": "metrics", "arm": name, "when": when, "t": time.time(),
                                      "samples": samples})

    async def _discover(self, session: aiohttp.ClientSession) -> None:
        """What each endpoint serves (its engine's, one at a time, by its discovery start), and its GPUs'
        facts from a DCGM exporter where an endpoint has one; the header, then the engines' early records."""
        if self.engines and self.engines["mode"] == ONE_AT_A_TIME and (not self.resume or self._fresh):
            for name, ep in self.endpoints.items():
                if ep.engine is not None:
                    self.blocks.start(name, "discovery")
                    await self.blocks.discover_endpoint(session, name)
                    self._early.append(self.blocks.stopped(self.blocks.stop(name)))
        for name, ep in self.endpoints.items():
            if ep.engine is None or ep.engine.proc is not None:
                await self.blocks.discover_endpoint(session, name)
            if ep.engine is None and self.telemetry is not None:
                url = ep.arm.gpu_metrics_url or ep.arm.metrics_url
                facts = await asyncio.to_thread(self.telemetry.endpoint_facts, name, url,
                                                ep.headers_for(url) if url else {})
                ep.discovered["gpu"] = dict(facts)
        if not self.resume or self._fresh:
            self.recorder.append(run_header(self.run_id, self.exp, self.endpoints, self.telemetry, self.engines))
        self._header_written = True
        for rec in self._early:
            self.recorder.append(rec)
        self._early.clear()

    async def _main(self, units: list[Unit], done: set[tuple]) -> None:
        # SIGTERM (kill, timeout) and SIGHUP stop the run as Ctrl-C does: the calls in flight are recorded as cancelled
        cancel_on(asyncio.get_running_loop(), asyncio.current_task().cancel)
        # discovery, metrics scrapes: a connection each; model calls go through each arm's kept-alive pool
        async with client_session(keep_alive=False) as session, self._arm_pools():
            await self._discover(session)
            if self.telemetry is not None:
                self.telemetry.start(self.engine_devices)
            one = self.engines is not None and self.engines["mode"] == ONE_AT_A_TIME
            for name, ep in self.endpoints.items():  # a fresh server's first calls are slow: record, don't count them
                if one and ep.engine is not None:
                    continue  # warmed in each of its blocks
                t0 = time.monotonic()
                calls, ok = await self._warm_up(name)
                if ep.engine is not None:
                    self.recorder.append(self.blocks.warmed(name, time.monotonic() - t0, calls, ok))
            if self.spec.experiment.adaptive or any(u.kind == "turn" and u.key() not in done for u in units):
                for rec in await self.turn_states.plan(session, self.sender, check=not one):  # one at a time: none up
                    self.recorder.append(rec)
            if one:
                await self.blocks.run(session, done)
            else:
                await self._run_units(session, units, done)
                await self.run_load(session)
                if self.progress:
                    self.progress(Unit("done", "", "", 0), len(units), len(units))
            await self.recorder.flush()
            if self.telemetry is not None:
                self.telemetry.stop()
            self.drain_gpu()

    async def _run_units(self, session: aiohttp.ClientSession, units: list[Unit], done: set[tuple]) -> None:
        """The units in schedule order, with engines together (an adaptive run's rounds added after the initial
        repeats, before the probes and closing sentinels)."""
        todo = [u for u in units if u.key() not in done]
        total = len(units)
        finished = total - len(todo)
        # adaptive: after the initial repeats, before the probes and closing sentinels, round after round
        rounds = AdaptiveRounds(self.spec, self.out / "ledger.jsonl", done) if self.spec.experiment.adaptive else None
        cut = next((k for k, u in enumerate(todo) if u.kind == "probe" or u.position == "end"), len(todo))
        # The server's counters are scraped around each arm's block (its turns, probes and sentinels: in
        # blocked order around each arm's own units, so arms sharing one endpoint are told apart, else
        # around all of them) and around each run of probes (one prompt sent again: what a cache finds).
        blocked = self.spec.experiment.order == "blocked"

        def block_arms(u: Unit) -> list[str] | None:  # whose endpoints a scrape around *u* covers
            return [u.block or u.arm] if blocked else None
        k = -1
        while True:
            k += 1
            if rounds is not None and k == cut:
                await self.recorder.flush()  # the round's turns on disk: the next round is decided from them
                extra = rounds.next_units()
                todo[k:k] = extra
                cut, total = cut + len(extra), total + len(extra)
                rounds = rounds if extra else None
            if k >= len(todo):
                break
            unit = todo[k]
            prev = todo[k - 1] if k else None
            if prev is None or (blocked and (unit.block or unit.arm) != (prev.block or prev.arm)):
                if prev is not None:
                    await self.scrape(session, "after", block_arms(prev))
                await self.scrape(session, "before", block_arms(unit))
            await self.do_unit(session, unit, prev, todo[k + 1] if k + 1 < len(todo) else None, block_arms(unit),
                               finished, total)
            finished += 1
        if todo:
            await self.scrape(session, "after", block_arms(todo[-1]))

    async def do_unit(self, session: aiohttp.ClientSession, unit: Unit, prev: Unit | None, nxt: Unit | None,
                      arms: list[str] | None, finished: int, total: int) -> None:
        """One unit of work (a turn, probe or sentinel), its records on disk after it; a run of probes between
        metrics scrapes of *arms* (None: every arm); an engine that died ends the run."""
        blocked = self.spec.experiment.order == "blocked"
        if unit.kind == "probe" and (prev is None or prev.kind != "probe" or (blocked and prev.arm != unit.arm)):
            await self.scrape(session, "probes-before", arms)  # probes: their arm's block
        if self.progress:
            self.progress(unit, finished, total)
        if unit.kind == "turn":
            await self._turn(self.pool(unit.arm), unit)
        else:
            await self._fixed_length(self.pool(unit.arm), unit)
        await self.recorder.flush()  # between units: nothing is being measured
        self.drain_gpu()
        if unit.kind == "probe" and (nxt is None or nxt.kind != "probe" or (blocked and nxt.arm != unit.arm)):
            await self.scrape(session, "probes-after", arms)
        dead = [ep.engine.death_note() for ep in self.endpoints.values() if ep.engine and ep.engine.proc is not None
                and not ep.engine.alive()]
        if dead:
            raise EngineError(dead[0] or "an engine died")

    def drain_gpu(self) -> None:
        """The GPU readings taken since the last drain, into the ledger (called between units of work)."""
        if self.telemetry is not None:
            for rec in self.telemetry.records():
                self.recorder.append(rec)

    async def close_pool(self, arm: str) -> None:
        """Close *arm*'s connection pool (its engine is about to stop; the next block's listens elsewhere)."""
        pool = self._pools.pop(arm, None)
        if pool is not None:
            await pool.close()

    async def run_load(self, session: aiohttp.ClientSession, arms: list[str] | None = None) -> None:
        """The experiment's load stages (:func:`.load_run.run_load`); *arms*: only theirs."""
        await run_load(self, session, arms)

    @contextlib.asynccontextmanager
    async def _arm_pools(self) -> AsyncIterator[None]:
        """Close the arms' connection pools (see :meth:`pool`) when the work ends, however it ends."""
        try:
            yield
        finally:
            for pool in self._pools.values():
                await pool.close()
            self._pools.clear()

    def run(self) -> Path:
        """Do the experiment's work; returns the ledger path.  Engines are always stopped."""
        check_request_fields(self.exp)  # before anything starts: a request JSON cannot carry
        check_traces(self.exp)  # ... and a trace that cannot be read or replayed
        done = self._completed()
        self._prepare_endpoints()
        self.turn_states = TurnStates(self.exp, self.endpoints, self.run_id, self._failed)
        # before the engines start and the run's signal handlers are set (ray.init sets its own)
        self.cluster = join_cluster(self.spec, self.stages_done, self.out, self.secrets(), self.ray_address)
        self.sizes = {c.name: case_size_chars(self.exp, c) for c in self.spec.cases}
        units = build_schedule(self.spec, self.sizes)
        self.out.mkdir(parents=True, exist_ok=True)
        self.open_ledger()
        self.telemetry = Telemetry.open(self.spec.experiment.gpu_sample_hz)
        try:
            self._choose_engines(self._resumed_engines)
            if self.resume and not self._fresh:
                failed = sum(1 for u in units if u.key() in self._failed)
                at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
                self.writer.append({"kind": "resume", "at": at, "tool_version": __version__,
                                    "completed_units": len(done), "failed_units_rerun": failed,
                                    "repeats": self.spec.experiment.repeats})
            previous = interrupt_on()  # SIGTERM, SIGHUP: outside the loop
            try:
                if self.engines is not None and self.engines["mode"] != ONE_AT_A_TIME:
                    self._start_engines()
                asyncio.run(self._main(units, done))
            except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, or SIGTERM, SIGHUP (see _main)
                raise Interrupted(str(self.out)) from None
            finally:
                release_signals(previous)
        finally:
            self.stop_engines(quick=sys.exc_info()[0] is not None)
            self.telemetry.close()
            if self.cluster is not None:
                self.cluster.close()
            self.close_ledger()  # every record handed to the writer is written, whatever ended the run
        self.recorder.reap()  # a normal end: a failed append is an error
        return self.out / "ledger.jsonl"
