"""The engines the tool starts, each start and stop timed and recorded, and engines one at a time.

**Every start** (:meth:`EngineBlocks.start`) takes the next block number (a resumed run's go on from its
ledger's: :func:`leverbench.runner.resume.completed`) before it spawns the engine, and is recorded as an
``engine_start`` record as soon as the server answered ``/health`` — before it is asked what it serves and
warmed, so that an interrupt there leaves no stop without its start — or failed to, with its error: when it
began, how long until the server answered (``ready_s``: process start, model load, the server's own warm-up),
what the engine's log says loading the model took (vLLM), the start timeout and where it came from (the
arm's ``startup_timeout_s``, else derived from the model's size:
:func:`leverbench.engines.process.derived_timeout`), its GPUs and pid.  Its warm-up calls and how long they
took follow in an ``engine_warmed`` record (:meth:`EngineBlocks.warmed`).  **Every stop**
(:meth:`EngineBlocks.stop`) as an ``engine_stop`` record: how long it took, and whether the engine released
its devices (:meth:`leverbench.runner.telemetry.Telemetry.release`); one that did not ends the run
(:class:`~leverbench.errors.EngineError`): the next engine could not have them.

**Engines together** (:func:`leverbench.runner.engine_mode.choose`): every engine starts before the work
(part ``run``) and stops at its end.

**Engines one at a time** (:meth:`EngineBlocks.run`): first a **discovery** start of each arm's engine, in turn
(what it serves goes into the ledger's header, which must come first); then the blocks of
:func:`leverbench.runner.schedule.build_blocks`: for each, the arm's engine started, its endpoint asked again
what it serves, warmed until its sentinel is stable (as before the first round with engines together),
its metrics scraped, its units run, its metrics scraped again, (closing blocks) its load stages run, the
engine stopped and checked.  An adaptive run's extra rounds come as blocks too
(:func:`leverbench.runner.schedule.blocks_of`), before the closing blocks.  An arm with an endpoint of its own
(no engine) runs its blocks in the same order, with nothing to start.  Never are two engines up at once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional, Protocol

import aiohttp

from ..config import Experiment, LoadedExperiment
from ..engines import EngineProcess
from ..errors import EngineError
from ..ledger.rows import EnginesRow, EngineStartRow, EngineStopRow, EngineWarmedRow
from . import telemetry
from .discover import check_prompts_fit, endpoint_info
from .endpoint import ArmEndpoint
from .engine_mode import Devices
from .load import stage_work
from .recorder import Recorder
from .rounds import AdaptiveRounds
from .schedule import Block, Unit, blocks_of, build_blocks
from .telemetry import Telemetry


class BlockRunner(Protocol):
    """What the engine blocks need of the run (:class:`leverbench.runner.run.Runner`)."""

    spec: Experiment
    exp: LoadedExperiment
    out: Path
    endpoints: dict[str, ArmEndpoint]
    telemetry: Optional[Telemetry]
    engines: Optional[EnginesRow]
    engine_devices: dict[str, Devices]
    sizes: dict[str, int]
    stages_done: set[tuple[str, str]]
    progress: Optional[Callable[[Unit, int, int], None]]

    @property
    def recorder(self) -> Recorder: ...
    async def _warm_up(self, arm: str) -> tuple[int, bool]: ...
    async def scrape(self, session: aiohttp.ClientSession, when: str, arms: list[str] | None = None) -> None: ...
    async def do_unit(self, session: aiohttp.ClientSession, unit: Unit, prev: Unit | None, nxt: Unit | None,
                      arms: list[str] | None, finished: int, total: int) -> None: ...
    async def run_load(self, session: aiohttp.ClientSession, arms: list[str] | None = None) -> None: ...
    async def close_pool(self, arm: str) -> None: ...
    def drain_gpu(self) -> None: ...
    def record_engine(self, rec: EngineStartRow) -> None: ...

COLD = "cold (a fresh process)"


def _first_line(exc: BaseException) -> str:
    """An exception as a start record's ``error``: its type and first line (the engine's log has the rest)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


class EngineBlocks:
    """The runner's engine starts and stops (module docstring); ``early``: records made before the ledger's
    header was written (the runner appends them right after it)."""

    def __init__(self, runner: BlockRunner):
        self.r = runner
        self.count = 0  # engine starts so far (each record's ``block``)
        self.before: dict[str, dict[str, float]] = {}  # arm → its GPUs' memory used before its engine started
        self.blocks: dict[str, int] = {}  # arm → the block of its running engine
        self.finished = 0
        self.total = 0

    # ------------------------------------------------------------ one start, one stop

    def start(self, arm: str, part: str, repeat: Optional[int] = None) -> EngineStartRow:
        """Start *arm*'s engine under the next block number (blocking until it is healthy); its ``engine_start``
        record, handed to the runner (``record_engine``) as soon as it answered, or when it failed (with its
        error; then the error is raised on)."""
        r = self.r
        ep = r.endpoints[arm]
        assert ep.engine is not None and r.telemetry is not None and r.engines is not None
        devs = r.engine_devices.get(arm)
        block, self.count = self.count, self.count + 1
        self.blocks[arm] = block
        self.before[arm] = r.telemetry.memory(devs)
        t0 = time.time()
        rec: EngineStartRow = {
            "kind": "engine_start", "arm": arm, "mode": r.engines["mode"], "block": block,
            "round": repeat if part in ("round", "restart") else None, "part": part, "t": round(t0, 4), "ready_s": None,
            "model_load_s": None, "server_state": COLD, "timeout_s": ep.engine.startup_timeout_s,
            "timeout_from": ep.engine.timeout_from, "devices": list(devs) if devs else None, "pid": None,
            "error": None}
        try:
            ep.base_url = ep.engine.start()
            ep.discovered.update(ep.engine.discover())
        except BaseException as exc:
            r.record_engine({**self._started(rec, ep.engine, t0), "error": _first_line(exc)})
            raise
        rec = {**self._started(rec, ep.engine, t0), "ready_s": round(ep.engine.ready_s or 0.0, 4),
               "model_load_s": ep.engine.model_load_s()}
        r.record_engine(rec)
        return rec

    @staticmethod
    def _started(rec: EngineStartRow, engine: EngineProcess, t0: float) -> EngineStartRow:
        """*rec* with what the engine knows once its process was spawned (this start's, not an earlier one's)."""
        spawned = engine.t_start is not None and engine.t_start >= t0
        return {**rec, "t": round(engine.t_start if spawned else t0, 4), "timeout_s": engine.startup_timeout_s,
                "timeout_from": engine.timeout_from,
                "pid": engine.proc.pid if spawned and engine.proc is not None else None}

    def warmed(self, arm: str, seconds: float, calls: int, settled: bool) -> EngineWarmedRow:
        """The ``engine_warmed`` record of *arm*'s running engine: its warm-up calls, their seconds, whether its
        sentinel settled."""
        return {"kind": "engine_warmed", "arm": arm, "block": self.blocks.get(arm, self.count - 1),
                "warmup_s": round(seconds, 4), "warmup_calls": calls, "settled": settled}

    def stop(self, arm: str, wait_s: float | None = None) -> EngineStopRow:
        """Stop *arm*'s engine and check that it released its devices (waiting up to *wait_s*); its
        ``engine_stop`` record."""
        r = self.r
        ep = r.endpoints[arm]
        assert ep.engine is not None and r.telemetry is not None
        pgid = ep.engine.proc.pid if ep.engine.proc is not None else None
        t, t0 = time.time(), time.monotonic()
        ep.engine.stop()
        stop_s = time.monotonic() - t0
        wait = telemetry.RELEASE_WAIT_S if wait_s is None else wait_s
        released, check, left = r.telemetry.release(r.engine_devices.get(arm), pgid, self.before.pop(arm, {}), wait)
        ep.engine.proc = None
        return {"kind": "engine_stop", "arm": arm, "block": self.blocks.pop(arm, self.count - 1), "t": round(t, 4),
                "stop_s": round(stop_s, 4), "released": released, "check": check, "leftover": left}

    def stop_all(self, wait_s: float | None = None) -> list[EngineStopRow]:
        """Stop every engine still running (the run's end, however it ended); their records."""
        out = []
        for name, ep in self.r.endpoints.items():
            if ep.engine is not None and ep.engine.proc is not None:
                out.append(self.stop(name, wait_s))
        return out

    # ------------------------------------------------------------ one at a time

    async def discover_endpoint(self, session: aiohttp.ClientSession, arm: str) -> None:
        """Ask the endpoint of *arm*'s engine, just started, what it serves (the header has what the
        discovery start found; this block's answers serve the block, e.g. whether a drafter runs)."""
        ep = self.r.endpoints[arm]
        murl = ep.arm.metrics_url
        gpu = ep.discovered.get("gpu")
        ep.discovered.update(await endpoint_info(session, ep.base_url, ep.headers, metrics_url=murl,
                                                 metrics_headers=ep.headers_for(murl) if murl else None,
                                                 known=ep.discovered))
        if gpu is not None:
            ep.discovered["gpu"] = gpu
        check_prompts_fit(self.r.exp, arm, ep.discovered)  # a case that cannot fit: refused before any call

    @staticmethod
    def stopped(rec: EngineStopRow) -> EngineStopRow:
        """*rec*, or EngineError when its engine was seen not to release its devices (unchecked: None, goes on)."""
        if rec["released"] is False:
            raise EngineError(f"arm {rec['arm']!r}: its engine stopped but did not release its devices within the "
                              f"wait: {rec['check']}; the next engine could not have them")
        return rec

    async def run(self, session: aiohttp.ClientSession, done: set[tuple]) -> None:
        """The run's blocks, one engine at a time (module docstring)."""
        r = self.r
        arms = list(r.endpoints)
        blocks = build_blocks(r.spec, r.sizes)
        rounds = AdaptiveRounds(r.spec, r.out / "ledger.jsonl", done) if r.spec.experiment.adaptive else None
        self.total = sum(len(b.units) for b in blocks)
        self.finished = sum(1 for b in blocks for u in b.units if u.key() in done)
        closing = [b for b in blocks if b.part == "closing"]
        for b in blocks:
            if b.part == "round":
                await self.block(session, b, done)
        while rounds is not None:
            await r.recorder.flush()  # the round's turns on disk: the next round is decided from them
            extra = rounds.next_units()
            if not extra:
                break
            self.total += len(extra)
            for b in blocks_of(arms, extra, extra[0].repeat):
                await self.block(session, b, done)
        for b in closing:
            await self.block(session, b, done, load=True)
        if r.progress:
            r.progress(Unit("done", "", "", 0), self.finished, self.total)

    async def block(self, session: aiohttp.ClientSession, b: Block, done: set[tuple], load: bool = False) -> None:
        """One arm's block (module docstring); nothing when its units are done and its load stages too."""
        r = self.r
        todo = [u for u in b.units if u.key() not in done]
        stages = load and any((plan.name, arm) not in r.stages_done
                              for plan, arm in stage_work(r.exp, list(r.endpoints)) if arm == b.arm)
        if not todo and not stages:
            return
        ep = r.endpoints[b.arm]
        if ep.engine is not None:
            if r.progress:
                r.progress(Unit("engine", b.arm, "start", b.repeat), self.finished, self.total)
            self.start(b.arm, b.part, b.repeat)  # recorded as soon as it answered (or failed)
        try:
            if ep.engine is not None:
                await self.discover_endpoint(session, b.arm)
                t0 = time.monotonic()
                calls, settled = await r._warm_up(b.arm)
                r.recorder.append(self.warmed(b.arm, time.monotonic() - t0, calls, settled))
            await r.scrape(session, "before", [b.arm])
            for k, unit in enumerate(todo):
                prev, nxt = (todo[k - 1] if k else None), (todo[k + 1] if k + 1 < len(todo) else None)
                await r.do_unit(session, unit, prev, nxt, [b.arm], self.finished, self.total)
                self.finished += 1
            await r.scrape(session, "after", [b.arm])
            if stages:
                await r.run_load(session, arms=[b.arm])
            await r.recorder.flush()
            await r.close_pool(b.arm)
        except BaseException:  # interrupted, an engine died: stop it now (the run's end records and checks)
            if ep.engine is not None and ep.engine.proc is not None:
                r.recorder.append(self.stop(b.arm))
            raise
        if ep.engine is not None:
            rec_stop = self.stop(b.arm)
            r.recorder.append(rec_stop)
            await r.recorder.flush()
            self.stopped(rec_stop)
        r.drain_gpu()
