"""The engines the tool starts, each start and stop timed and recorded, and engines one at a time.

**Every start** (:meth:`EngineSet.start`) takes the next block number (a resumed run's go on from its
ledger's: :func:`leverbench.runner.resume.completed`) before it spawns the engine, and is recorded as an
``engine_start`` record as soon as the server answered ``/health`` — before it is asked what it serves and
warmed, so that an interrupt there leaves no stop without its start — or failed to, with its error: when it
began, how long until the server answered (``ready_s``: process start, model load, the server's own warm-up),
what the engine's log says loading the model took (vLLM), the start timeout and where it came from (the
arm's ``startup_timeout_s``, else derived from the model's size:
:func:`leverbench.engines.process.derived_timeout`), its GPUs and pid.  Its warm-up calls and how long they
took follow in an ``engine_warmed`` record (:meth:`EngineSet.warmed`).  **Every stop**
(:meth:`EngineSet.stop`) as an ``engine_stop`` record: how long it took, and whether the engine released
its processes and devices (:meth:`leverbench.engines.Engine.released`, waited on with its GPUs by
:meth:`leverbench.runner.telemetry.Telemetry.release`); one that did not ends the run
(:class:`~leverbench.errors.EngineError`): the next engine could not have them.  The engines are driven through
:class:`leverbench.engines.Engine` alone; which of them run (started, not yet stopped) is kept here
(:meth:`EngineSet.running`).

**Engines together** (:func:`leverbench.runner.engine_mode.choose`): every engine starts before the work
(part ``run``) and stops at its end.  **Engines one at a time**: first a **discovery** start of each arm's engine,
in turn (what it serves goes into the ledger's header, which must come first), then one start per block of the
plan (:class:`leverbench.runner.plan.Block`, parts ``round`` and ``closing``), its endpoint asked again what it
serves (:func:`discover_endpoint`); never are two engines up at once.  When each starts and stops is the plan's
(:mod:`leverbench.runner.plan`) and its executor's (:mod:`leverbench.runner.execute`); :class:`EngineSet` gets
the arms' endpoints, the GPUs' :class:`~leverbench.runner.telemetry.Telemetry`, the mode, the GPUs each engine
uses and where a start's record goes, nothing of the run else.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping, Optional

import aiohttp

from ..config import LoadedExperiment
from ..engines import Readiness
from ..errors import EngineError
from ..ledger.rows import EngineStartRow, EngineStopRow, EngineWarmedRow
from . import telemetry
from .discover import check_prompts_fit, endpoint_info
from .endpoint import ArmEndpoint
from .engine_mode import Devices
from .telemetry import Telemetry

COLD = "cold (a fresh process)"


def _first_line(exc: BaseException) -> str:
    """An exception as a start record's ``error``: its type and first line (the engine's log has the rest)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


class EngineSet:
    """The engines the tool starts, by arm (module docstring): each start and stop, timed and recorded, and which
    run now.  *endpoints*: the arms' (an engine arm's ``engine`` is driven; its base URL and discovered facts are
    set as it starts); *gpus*: the run's GPUs (each engine's memory before its start, its release after its stop);
    *mode*: together or one at a time (each start record's); *devices*: the GPUs each engine uses; *record*: where
    each start's record goes as soon as it answered or failed; *first_block*: the block number of the first start
    (a resumed run's go on from its ledger's)."""

    def __init__(self, endpoints: Mapping[str, ArmEndpoint], gpus: Telemetry, mode: str,
                 devices: Mapping[str, Devices], record: Callable[[EngineStartRow], object], first_block: int = 0):
        self.endpoints, self.gpus, self.mode, self.devices, self.record = endpoints, gpus, mode, devices, record
        self.count = first_block  # engine starts so far (each record's ``block``)
        self.before: dict[str, dict[str, float]] = {}  # arm → its GPUs' memory used before its engine started
        self.blocks: dict[str, int] = {}  # arm → the block of its running engine

    def start(self, arm: str, part: str, repeat: Optional[int] = None) -> EngineStartRow:
        """Start *arm*'s engine under the next block number (blocking until it is healthy); its ``engine_start``
        record, handed to *record* as soon as it answered, or when it failed (with its error; then the error is
        raised on)."""
        ep = self.endpoints[arm]
        engine = ep.engine
        assert engine is not None
        devs = self.devices.get(arm)
        block, self.count = self.count, self.count + 1
        self.blocks[arm] = block
        self.before[arm] = self.gpus.memory(devs)
        t0, before = time.time(), engine.ready()
        rec: EngineStartRow = {
            "kind": "engine_start", "arm": arm, "mode": self.mode, "block": block,
            "round": repeat if part in ("round", "restart") else None, "part": part, "t": round(t0, 4), "ready_s": None,
            "model_load_s": None, "server_state": COLD, "timeout_s": before.timeout_s,
            "timeout_from": before.timeout_from, "devices": list(devs) if devs else None, "pid": None,
            "error": None}
        try:
            ep.base_url = engine.start()
            ep.discovered.update(engine.facts())
        except BaseException as exc:
            failed = self._started(rec, engine.ready(), t0)
            if failed["pid"] is None:  # nothing was spawned: nothing to stop
                self.blocks.pop(arm, None)
            self.record({**failed, "error": _first_line(exc)})
            raise
        now = engine.ready()
        rec = {**self._started(rec, now, t0), "ready_s": round(now.ready_s or 0.0, 4), "model_load_s": now.model_load_s}
        self.record(rec)
        return rec

    @staticmethod
    def _started(rec: EngineStartRow, ready: Readiness, t0: float) -> EngineStartRow:
        """*rec* with what the engine knows once its process was spawned (this start's, not an earlier one's)."""
        at = ready.spawned_at if ready.spawned_at is not None and ready.spawned_at >= t0 else None
        return {**rec, "t": round(t0 if at is None else at, 4), "timeout_s": ready.timeout_s,
                "timeout_from": ready.timeout_from, "pid": None if at is None else ready.pid}

    def running(self, arm: str) -> bool:
        """Whether *arm*'s engine runs: started (spawned, at least) and not stopped since."""
        return arm in self.blocks

    def died(self) -> Optional[str]:
        """Why an engine that runs is dead (its death note; "an engine died" where it has none); None while every
        running engine is alive."""
        dead = [ep.engine.death_note() for name, ep in self.endpoints.items()
                if ep.engine is not None and self.running(name) and not ep.engine.alive()]
        return (dead[0] or "an engine died") if dead else None

    def warmed(self, arm: str, seconds: float, calls: int, settled: bool) -> EngineWarmedRow:
        """The ``engine_warmed`` record of *arm*'s running engine: its warm-up calls, their seconds, whether its
        sentinel settled."""
        return {"kind": "engine_warmed", "arm": arm, "block": self.blocks.get(arm, self.count - 1),
                "warmup_s": round(seconds, 4), "warmup_calls": calls, "settled": settled}

    def stop(self, arm: str, wait_s: float | None = None) -> EngineStopRow:
        """Stop *arm*'s engine and check that it released its devices (waiting up to *wait_s*); its
        ``engine_stop`` record."""
        engine = self.endpoints[arm].engine
        assert engine is not None
        t, t0 = time.time(), time.monotonic()
        engine.stop()
        stop_s = time.monotonic() - t0
        wait = telemetry.RELEASE_WAIT_S if wait_s is None else wait_s
        released, check, left = self.gpus.release(self.devices.get(arm), engine.released().group,
                                                  self.before.pop(arm, {}), wait,
                                                  processes=lambda: engine.released().left)
        return {"kind": "engine_stop", "arm": arm, "block": self.blocks.pop(arm, self.count - 1), "t": round(t, 4),
                "stop_s": round(stop_s, 4), "released": released, "check": check, "leftover": left}

    def stop_all(self, wait_s: float | None = None) -> list[EngineStopRow]:
        """Stop every engine still running (the run's end, however it ended); their records."""
        return [self.stop(name, wait_s) for name in self.endpoints if self.running(name)]

    @staticmethod
    def stopped(rec: EngineStopRow) -> EngineStopRow:
        """*rec*, or EngineError when its engine was seen not to release its devices (unchecked: None, goes on)."""
        if rec["released"] is False:
            raise EngineError(f"arm {rec['arm']!r}: its engine stopped but did not release its devices within the "
                              f"wait: {rec['check']}; the next engine could not have them")
        return rec


async def discover_endpoint(session: aiohttp.ClientSession, exp: LoadedExperiment, ep: ArmEndpoint, arm: str) -> None:
    """Ask *arm*'s endpoint (*ep*) what it serves, into its ``discovered`` (an engine just started: the header has
    what its discovery start found; this block's answers serve the block, e.g. whether a drafter runs); a case of
    *exp* that cannot fit is refused before any call."""
    murl = ep.arm.metrics_url
    gpu = ep.discovered.get("gpu")
    ep.discovered.update(await endpoint_info(session, ep.base_url, ep.headers, metrics_url=murl,
                                             metrics_headers=ep.headers_for(murl) if murl else None,
                                             known=ep.discovered))
    if gpu is not None:
        ep.discovered["gpu"] = gpu
    check_prompts_fit(exp, arm, ep.discovered)
