"""The experiment's load stages, run by the runner: each stage on each of its arms in turn."""

from __future__ import annotations

from typing import Callable, Optional, Protocol

import aiohttp

from ..config import Experiment, LoadedExperiment
from ..errors import EngineError
from .client import Timeouts, client_session
from .endpoint import ArmEndpoint
from .load import StageRun, stage_work
from .recorder import CallTally, Recorder
from .schedule import Unit
from .send import ArmSender
from .workers import LoadCluster, RemoteEndpoint, StageOutcome


class StageRunner(Protocol):
    """What running the load stages needs of the run (:class:`leverbench.runner.run.Runner`)."""

    spec: Experiment
    exp: LoadedExperiment
    endpoints: dict[str, ArmEndpoint]
    stages_done: set[tuple[str, str]]
    progress: Optional[Callable[[Unit, int, int], None]]
    cluster: Optional[LoadCluster]
    timeouts: Timeouts
    retries: int
    keep_text: bool
    run_id: str
    tally: CallTally

    @property
    def recorder(self) -> Recorder: ...
    def sender(self, arm: str, session: aiohttp.ClientSession | None = None) -> ArmSender: ...
    async def scrape(self, session: aiohttp.ClientSession, when: str, arms: list[str] | None = None) -> None: ...
    def drain_gpu(self) -> None: ...


async def run_load(r: StageRunner, session: aiohttp.ClientSession, arms: list[str] | None = None) -> None:
    """The experiment's load stages (:mod:`.load`), each on each of its arms in turn through its own
    :class:`~leverbench.runner.send.Sender`, between metrics scrapes (on *session*, of *arms*); a stage's
    records are all written before the next one begins.  *arms*: only theirs (engines one at a time: the
    arm's closing block)."""
    if not r.spec.load:
        return
    work = stage_work(r.exp, list(r.endpoints))
    for n, (plan, arm) in enumerate(work):
        if (plan.name, arm) in r.stages_done or (arms is not None and arm not in arms):
            continue  # a resumed run: this stage finished on this arm; or another arm's
        if r.progress:
            r.progress(Unit("load", arm, plan.name, 0), n, len(work))
        await r.scrape(session, f"load-start {plan.name}", arms)
        # Reuse connections within the stage (as serving clients do, and as the turns do): a new TCP connection
        # per call costs the client ~0.6 ms and a burst of them serialises.  One pool per stage and arm, closed
        # when it ends, so that tearing down its connections falls between stages, not into the next one's
        # measurements; a connection idle for connections.IDLE_CLOSE_S is dropped before a server would drop it.  A
        # call that opens a connection records that time apart (connect_s).  keep_alive = false: a new
        # connection per call.
        async with client_session(keep_alive=plan.stage.keep_alive) as own:
            stage = StageRun(r.sender(arm, own), r.exp, plan, arm)
            if plan.stage.workers > 1:  # its schedule split across Ray actors, each writing its own shard
                assert r.cluster is not None
                end = await r.cluster.run_stage(stage, RemoteEndpoint.of(r.endpoints[arm]),
                                                timeouts=r.timeouts, retries=r.retries,
                                                keep_text=r.keep_text, run_id=r.run_id)
                r.tally.untallied += int(end.get("calls") or 0)  # in the workers' shards
            else:
                await stage.run()
                end = StageOutcome(calls=stage.sent, stopped=stage.stopped)
            # the stage's records (and the token counts deferred on its pool) are all on disk before the next
            await r.recorder.flush()
            r.drain_gpu()
        await r.scrape(session, f"load-end {plan.name}", arms)
        r.recorder.append({"kind": "stage_end", "stage": plan.name, "arm": arm, "load_run": stage.run_id,
                           **end})
        ep = r.endpoints[arm]
        if ep.engine is not None and not ep.engine.alive():
            raise EngineError(ep.engine.death_note()
                              or f"the engine of arm {arm!r} died during load stage {plan.name!r}")
