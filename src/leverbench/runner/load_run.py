"""The experiment's load stages as the plan has them (:class:`leverbench.runner.plan.LoadStage`): each stage on
each of its arms in turn, through its own connection pool, between scrapes of the arms' counters."""

from __future__ import annotations

from typing import Awaitable, Callable, Mapping, Optional

from ..config import LoadedExperiment
from ..errors import EngineError
from .client import client_session
from .endpoint import ArmEndpoint
from .load import StageRun
from .plan import LoadStage
from .pools import ArmPools
from .recorder import Recorder
from .workers import LoadCluster, RemoteEndpoint, StageOutcome

#: How a stage's counters are scraped: (when, the arms: None for every arm) → a ``metrics`` record each.
ScrapeFn = Callable[[str, Optional[tuple[str, ...]]], Awaitable[None]]


class LoadStages:
    """Runs the plan's load stages of *exp* on the arms' *endpoints*: each through a sender of *senders* on a pool
    of its own, its records handed to *recorder*; a stage with workers > 1 on *cluster* (its calls written to the
    workers' shards, under the run's id *run_id*)."""

    def __init__(self, exp: LoadedExperiment, endpoints: Mapping[str, ArmEndpoint], recorder: Recorder,
                 senders: ArmPools, cluster: Optional[LoadCluster], run_id: str):
        self.exp, self.endpoints, self.recorder, self.senders = exp, endpoints, recorder, senders
        self.cluster, self.run_id = cluster, run_id

    async def run(self, step: LoadStage, scrape: ScrapeFn, drain: Callable[[], None]) -> None:
        """One stage on one arm between scrapes of the step's arms (*scrape*); its records all written before the
        next begins, the GPUs' readings since the last into the ledger (*drain*), then its ``stage_end`` record.
        An engine that died in it ends the run."""
        plan, arm = step.stage, step.arm
        await scrape(f"load-start {plan.name}", step.arms)
        # Reuse connections within the stage (as serving clients do, and as the turns do): a new TCP connection
        # per call costs the client ~0.6 ms and a burst of them serialises.  One pool per stage and arm, closed
        # when it ends, so that tearing down its connections falls between stages, not into the next one's
        # measurements; a connection idle for connections.IDLE_CLOSE_S is dropped before a server would drop it.  A
        # call that opens a connection records that time apart (connect_s).  keep_alive = false: a new
        # connection per call.
        async with client_session(keep_alive=plan.stage.keep_alive) as own:
            stage = StageRun(self.senders.sender(arm, own), self.exp, plan, arm)
            end = await self._send(stage) if plan.stage.workers > 1 else None
            if end is None:
                await stage.run()
                end = StageOutcome(calls=stage.sent, stopped=stage.stopped)
            # the stage's records (and the token counts deferred on its pool) are all on disk before the next
            await self.recorder.flush()
            drain()
        await scrape(f"load-end {plan.name}", step.arms)
        self.recorder.append({"kind": "stage_end", "stage": plan.name, "arm": arm, "load_run": stage.run_id, **end})
        engine = self.endpoints[arm].engine
        if engine is not None and not engine.alive():
            raise EngineError(engine.death_note()
                              or f"the engine of arm {arm!r} died during load stage {plan.name!r}")

    async def _send(self, stage: StageRun) -> StageOutcome:
        """The stage's schedule split across the cluster's Ray actors, each writing its own shard."""
        if self.cluster is None:
            raise RuntimeError(f"load stage {stage.plan.name!r} has workers but the run joined no Ray cluster")
        s = self.senders.settings
        end = await self.cluster.run_stage(stage, RemoteEndpoint.of(self.endpoints[stage.arm]), timeouts=s.timeouts,
                                           retries=s.retries, keep_text=s.keep_text, run_id=self.run_id)
        self.recorder.tally.untallied += int(end.get("calls") or 0)  # in the workers' shards
        return end
