"""The executor: runs a run's :class:`~leverbench.runner.plan.Plan`, step by step, into the ledger.

It decides nothing of what is sent: the plan says which unit comes when, where the counters are scraped, which
engine starts for which block; an adaptive run's looks (:class:`~leverbench.runner.plan.Look`) are its only
decision points, each answered from the ledger (:class:`~leverbench.runner.rounds.AdaptiveRounds`) and put into
the plan (:meth:`~leverbench.runner.plan.Plan.after_look`).  What it runs the plan with are the run's parts
(:class:`Parts`), each made for it and narrow: the ledger (header first), the arms' senders, the engines, the
GPUs, the turns' cache states, the load stages, the looks.

Between steps only (nothing is being measured) it waits for the ledger's writer, and takes the GPUs' readings
into the ledger: after each unit of work, at the end of each load stage and block, at the end.  After each unit an
engine that died ends the run (:class:`~leverbench.errors.EngineError`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import aiohttp

from ..config import LoadedExperiment
from ..errors import EngineError
from ..ledger.records import CallRecord
from ..ledger.rows import MetricsRow, RunHeaderRow
from .cache_state import TurnStates, with_cache
from .client import client_session
from .companions import Companions
from .discover import api_root, scrape_metrics
from .endpoint import ArmEndpoint
from .engine_blocks import EngineSet, discover_endpoint
from .fixed_calls import fixed_length
from .load_run import LoadStages
from .plan import Block, CacheBefore, Do, LoadStage, Look, Plan, Scrape, Step, WarmUp
from .pools import ArmPools
from .recorded_turn import run_recorded_turn
from .recorder import HeaderFirst, Recorder
from .rounds import AdaptiveRounds
from .schedule import SENTINEL_CASE, Unit
from .signals import cancel_on
from .telemetry import Telemetry
from .turn import run_turn

RESTART_TOKENS = 8  # the short call after an engine's restart (a fresh process's first call is slow)

#: What the run is told as it goes: the unit about to run (kinds ``engine`` and ``load`` too; ``done`` at the
#: end), how many are finished, of how many.
ProgressFn = Callable[[Unit, int, int], None]


async def scrape(session: aiohttp.ClientSession, endpoints: Mapping[str, ArmEndpoint], when: str,
                 arms: Optional[tuple[str, ...] | list[str]], append: Callable[[MetricsRow], object]) -> None:
    """Scrape each arm's (of *arms*; None: every arm's) Prometheus metrics into a ``metrics`` record (*append*)."""
    for name, ep in endpoints.items():
        if arms is not None and name not in arms:
            continue
        url = ep.arm.metrics_url or (api_root(ep.base_url) + "/metrics")
        samples = await scrape_metrics(session, url, ep.headers_for(url))
        if samples is not None:
            append({"kind": "metrics", "arm": name, "when": when, "t": time.time(), "samples": samples})


@dataclass(frozen=True)
class Parts:
    """What the executor runs a plan with (module docstring): the experiment and the arms' endpoints; the ledger,
    its header first (*header*: the header's record, made once discovery is done); each arm's senders; the
    engines; the GPUs; the turns' cache states; the load stages; an adaptive run's looks (None: not adaptive)."""

    exp: LoadedExperiment
    endpoints: Mapping[str, ArmEndpoint]
    ledger: HeaderFirst
    header: Callable[[], RunHeaderRow]
    senders: ArmPools
    engines: EngineSet
    gpus: Telemetry
    cache: TurnStates
    stages: LoadStages
    rounds: Optional[AdaptiveRounds]


class Executor:
    """Runs a plan with its parts (:meth:`execute`; module docstring), telling :attr:`progress` as it goes.
    :class:`leverbench.runner.run.Runner` is one: it sets the run up and plans it first."""

    progress: Optional[ProgressFn] = None
    current: Plan  # the plan being run (an adaptive run's: with the rounds its looks added so far)
    p: Parts
    finished: int  # units finished (a resumed run's done ones included), for the progress
    total: int  # units in all (with the rounds added so far), for the progress

    @property
    def _records(self) -> Recorder:
        """Where the work's records go (the header is written by then)."""
        return self.p.ledger.recorder

    def execute(self, plan: Plan, parts: Parts) -> None:
        """Run *plan* with *parts*: with engines together each engine started first (each start recorded as it
        answered; its warm-up once the header is written), then the rest in an event loop (:meth:`_work`)."""
        self.current, self.p = plan, parts
        self.finished, self.total = plan.done, plan.total
        for arm in plan.starts:
            parts.engines.start(arm, "run")
        asyncio.run(self._work())

    async def _work(self) -> None:
        """Everything after the engines' starts: discovery and the header, the warm-ups, the cache states, the
        steps, in the plan's order."""
        # SIGTERM (kill, timeout) and SIGHUP stop the run as Ctrl-C does: the calls in flight are recorded as cancelled
        task = asyncio.current_task()
        assert task is not None
        cancel_on(asyncio.get_running_loop(), task.cancel)
        p, plan = self.p, self.current
        # discovery, metrics scrapes: a connection each; model calls go through each arm's kept-alive pool
        async with client_session(keep_alive=False) as session, p.senders.closing():
            await self._discover(session)
            p.gpus.start(p.engines.devices)
            for w in plan.warm_ups:  # a fresh server's first calls are slow: record, don't count them
                t0 = time.monotonic()
                calls, ok = await self._warm_up(w)
                if p.endpoints[w.arm].engine is not None:
                    self._records.append(p.engines.warmed(w.arm, time.monotonic() - t0, calls, ok))
            if plan.cache_states is not None:
                for rec in await p.cache.plan(session, p.senders.sender, check=plan.cache_states.check):
                    self._records.append(rec)
            k = 0
            while k < len(self.current.steps):
                step = self.current.steps[k]
                if isinstance(step, Look):
                    await self._look(k, step)
                    continue
                await self._step(session, step)
                k += 1
            self._tell(Unit("done", "", "", 0), self.finished, self.total)
            await self._records.flush()
            p.gpus.stop()
            self._drain()

    # ------------------------------------------------------------ before the work

    async def _discover(self, session: aiohttp.ClientSession) -> None:
        """What each endpoint serves (engines one at a time: each by its discovery start), and its GPUs' facts from
        a DCGM exporter where an endpoint has one; then the header, then the records held for it."""
        p = self.p
        for arm in self.current.discovery:
            p.engines.start(arm, "discovery")
            await discover_endpoint(session, p.exp, p.endpoints[arm], arm)
            p.ledger.append(p.engines.stopped(p.engines.stop(arm)))
        for name, ep in p.endpoints.items():
            if ep.engine is None or p.engines.running(name):
                await discover_endpoint(session, p.exp, ep, name)
            if ep.engine is None:
                url = ep.arm.gpu_metrics_url or ep.arm.metrics_url
                facts = await asyncio.to_thread(p.gpus.endpoint_facts, name, url, ep.headers_for(url) if url else {})
                ep.discovered["gpu"] = dict(facts)
        p.ledger.header(p.header() if self.current.header else None)

    async def _warm_up(self, w: WarmUp) -> tuple[int, bool]:
        """Warm *w*'s arm (:class:`~leverbench.runner.plan.WarmUp`): its calls and whether its sentinel's decode rate
        settled — two in a row within the drift tolerance (:func:`~leverbench.analysis.experiment.drift.settled`)."""
        from ..analysis.experiment.drift import sentinel_rate, settled  # noqa: PLC0415 (scipy: after the header)
        tolerance = self.p.exp.spec.experiment.drift_tolerance
        rates: list[float | None] = []
        for i in range(w.max_calls):
            unit = Unit("warmup", w.arm, SENTINEL_CASE, i, w.tokens)
            rec = await self._fixed_length(self.p.senders.pool(w.arm), unit)
            await self._records.flush()
            rates.append(sentinel_rate(rec.to_dict()) if rec is not None else None)
            if settled(rates, tolerance):
                break
        return len(rates), settled(rates, tolerance)

    # ------------------------------------------------------------ the steps

    async def _look(self, k: int, look: Look) -> None:
        """An adaptive run's look: the round's records on disk, the next round decided from them, in the plan."""
        if self.p.rounds is None:
            raise RuntimeError("the plan has a look but the run is not adaptive")
        await self._records.flush()
        units, after = self.p.rounds.next_round(look.repeat)
        self.current = self.current.after_look(k, units, None if after is None else Look(after))
        self.total += len(units)

    async def _step(self, session: aiohttp.ClientSession, step: Step) -> None:
        if isinstance(step, Scrape):
            await self._scrape(session, step)
        elif isinstance(step, Do):
            await self.do_unit(session, step)
        elif isinstance(step, LoadStage):
            self._tell(Unit("load", step.arm, step.stage.name, 0), step.index, step.of)
            await self.p.stages.run(step, lambda when, arms: self._scrape(session, Scrape(when, arms)), self._drain)
        elif isinstance(step, Block):
            await self._block(session, step)
        else:
            raise TypeError(f"not a step the executor runs: {step!r}")

    async def _scrape(self, session: aiohttp.ClientSession, s: Scrape) -> None:
        await scrape(session, self.p.endpoints, s.when, s.arms, self._records.append)

    async def do_unit(self, session: aiohttp.ClientSession, step: Do) -> None:
        """One unit of work, its records on disk after it, then (a run of probes' last) the scrape after it; an
        engine that died ends the run."""
        unit = step.unit
        self._tell(unit, self.finished, self.total)
        if unit.kind == "turn":
            await self._turn(self.p.senders.pool(unit.arm), unit, step.cache)
        else:
            await self._fixed_length(self.p.senders.pool(unit.arm), unit)
        await self._records.flush()  # between units: nothing is being measured
        self._drain()
        if step.then is not None:
            await self._scrape(session, step.then)
        dead = self.p.engines.died()
        if dead is not None:
            raise EngineError(dead)
        self.finished += 1

    async def _turn(self, session: aiohttp.ClientSession, unit: Unit, cache: Optional[CacheBefore]) -> None:
        """One agent turn (:func:`.turn.run_turn`; a recorded one: :func:`.recorded_turn.run_recorded_turn`), its arm
        first brought to the declared cache state (:meth:`.cache_state.TurnStates.prepare`), timed beside its
        companions (``in_flight`` > 1: :mod:`.companions`); its record appended."""
        p = self.p
        case = next(c for c in p.exp.spec.cases if c.name == unit.case)
        first = cache is None or cache.first_of_recording is not False
        row, salt = await p.cache.prepare(session, unit.arm, case, unit.repeat, p.senders.sender, self._restart,
                                          self._records.append, first=first)
        sender = p.senders.sender(unit.arm)  # the arm's pool: a new one where its engine was restarted
        async with Companions(lambda own: p.senders.sender(unit.arm, own), p.exp, unit, case,
                              p.exp.spec.experiment.in_flight) as companions:
            rec = await (run_recorded_turn(sender, p.exp, unit, case) if unit.case in p.exp.recorded
                         else run_turn(sender, p.exp, unit, salt=salt))
        self._records.append(with_cache(companions.stamp(rec), row))

    async def _restart(self, arm: str, repeat: int) -> None:
        """*arm*'s engine stopped and started again, each recorded, its counters scraped on either side (a window
        never spans a restart), a new pool; then one short call (warmup, position restart)."""
        p = self.p
        await scrape(p.senders.pool(arm), p.endpoints, "after", [arm], self._records.append)
        await p.senders.close(arm)
        self._records.append(p.engines.stopped(await asyncio.to_thread(p.engines.stop, arm)))
        await asyncio.to_thread(p.engines.start, arm, "restart", repeat)
        await scrape(p.senders.pool(arm), p.endpoints, "before", [arm], self._records.append)
        await self._fixed_length(p.senders.pool(arm),
                                 Unit("warmup", arm, SENTINEL_CASE, repeat, RESTART_TOKENS, position="restart"))

    async def _fixed_length(self, session: aiohttp.ClientSession, unit: Unit) -> CallRecord | None:
        """A probe, sentinel or warm-up call (:func:`.fixed_calls.fixed_length`) on the arm's *session*."""
        p = self.p
        return await fixed_length(p.senders.sender(unit.arm, session), p.endpoints[unit.arm], p.exp, session, unit)

    async def _block(self, session: aiohttp.ClientSession, b: Block) -> None:
        """One arm's block, engines one at a time (:class:`~leverbench.runner.plan.Block`): its engine started (the
        start recorded as soon as it answered, or failed), asked what it serves and warmed; its steps; its pool
        closed, its engine stopped and checked (at once, however the block ended)."""
        p = self.p
        if b.engine:
            self._tell(Unit("engine", b.arm, "start", b.repeat), self.finished, self.total)
            p.engines.start(b.arm, b.part, b.repeat)
        try:
            if b.engine and b.warm_up is not None:
                await discover_endpoint(session, p.exp, p.endpoints[b.arm], b.arm)
                t0 = time.monotonic()
                calls, settled = await self._warm_up(b.warm_up)
                self._records.append(p.engines.warmed(b.arm, time.monotonic() - t0, calls, settled))
            for step in b.steps:
                await self._step(session, step)
            await self._records.flush()
            await p.senders.close(b.arm)
        except BaseException:  # interrupted, an engine died: stop it now (the run's end records and checks)
            if p.engines.running(b.arm):
                self._records.append(p.engines.stop(b.arm))
            raise
        if b.engine:
            stop = p.engines.stop(b.arm)
            self._records.append(stop)
            await self._records.flush()
            p.engines.stopped(stop)
        self._drain()

    def _drain(self) -> None:
        """The GPU readings taken since the last drain, into the ledger (between units of work)."""
        for rec in self.p.gpus.records():
            self._records.append(rec)

    def _tell(self, unit: Unit, finished: int, total: int) -> None:
        if self.progress is not None:
            self.progress(unit, finished, total)
