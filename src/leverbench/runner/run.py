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
import signal
import time
import uuid
from pathlib import Path
from typing import AsyncIterator, Callable

import aiohttp

from .. import __version__
from ..analysis.experiment.drift import sentinel_rate, settled
from ..config import LoadedExperiment
from ..engines import make_engine
from ..errors import BadInput, EngineError
from ..ledger.reader import read_ledger
from ..ledger.records import LEDGER_SCHEMA, CallRecord
from ..ledger.rows import RunHeaderRow
from ..ledger.writer import LedgerWriter
from ..redact import redact_tree, redact_url
from ..workload.cases import case_size_chars
from .client import Timeouts, client_session
from .discover import api_root, endpoint_info, host_info, scrape_metrics
from .endpoint import ArmEndpoint, Interrupted, endpoint_headers  # noqa: F401 (Interrupted: the run's public error)
from .file_names import file_part
from .fixed_length import LENGTH_BY_FIELDS, LENGTH_BY_PROMPT, LENGTH_NATURAL, ask_at_length, sentinel_messages
from .load import StageRun, stage_work
from .probe_prompt import probe_messages, serves_with_drafter
from .recorder import CallTally, Recorder
from .rounds import AdaptiveRounds, resumed_adaptive
from .schedule import SENTINEL_CASE, Unit, build_schedule
from .send import ArmSender
from .signals import hold_signals, on_main_thread, release_signals, sigterm_as_interrupt
from .strict_json import check_request_fields
from .trace_plan import check_traces
from .turn import run_turn
from .workers import LoadCluster, RemoteEndpoint, StageOutcome, join_cluster

WARMUP_MAX_CALLS = 8  # warm-up calls per arm at most, until its sentinel rate is stable


ProgressFn = Callable[[Unit, int, int], None]


class Runner:
    def __init__(self, exp: LoadedExperiment, out_dir: Path, *, resume: bool = False,
                 progress: ProgressFn | None = None, timeouts: Timeouts | None = None, ray_address: str | None = None):
        self.exp = exp
        self.spec = exp.spec
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
        self._fresh = False  # --resume found a ledger that holds no run yet: start it afresh
        self.stages_done: set[tuple[str, str]] = set()  # on resume: (load stage, arm) pairs that finished
        self.keep_text = self.spec.experiment.store_text
        self.run_id = uuid.uuid4().hex[:12]  # the header's (a resumed run's: its ledger's)
        self.ray_address = ray_address  # load stages with workers > 1: the Ray cluster (None: RAY_ADDRESS, or local)
        self.cluster: LoadCluster | None = None

    # ------------------------------------------------------------ set-up

    def _prepare_endpoints(self) -> None:
        for i, arm in enumerate(self.spec.arms):
            headers = endpoint_headers(self.exp, i, arm)
            if arm.engine is not None:
                eng = make_engine(arm.name, arm.engine, self.out / f"engine-{file_part(arm.name)}.log")
                self.endpoints[arm.name] = ArmEndpoint(arm, "", eng.model_id, headers, eng)
            else:
                self.endpoints[arm.name] = ArmEndpoint(arm, arm.base_url or "", arm.model or "", headers)

    def _start_engines(self) -> None:
        for ep in self.endpoints.values():
            if ep.engine is not None:
                ep.base_url = ep.engine.start()
                ep.discovered.update(ep.engine.discover())

    def stop_engines(self) -> None:
        """Stop every engine the tool started; a second Ctrl-C (or a SIGTERM) meanwhile waits until they are
        (they run in their own process group: the terminal's SIGINT never reaches them)."""
        held = hold_signals()
        try:
            for ep in self.endpoints.values():
                if ep.engine is not None:
                    ep.engine.stop()
        finally:
            release_signals(held)

    def _completed(self) -> set[tuple]:
        """The units a resumed run skips: those with a successful record (a failed unit is run again)."""
        ledger_path = self.out / "ledger.jsonl"
        if ledger_path.exists() and not holds_a_run(ledger_path):
            # stopped before its first record (engine start, discovery): nothing measured, nothing to keep
            ledger_path.unlink()
            self._fresh = True
            return set()
        if not ledger_path.exists():
            if self.resume:
                raise BadInput(f"{self.out}: nothing to resume (no ledger.jsonl); run without --resume")
            return set()
        if not self.resume:
            raise BadInput(f"{self.out} already holds a ledger; pass --resume to continue it or choose another --out")
        led = read_ledger(ledger_path)
        self.exp = resumed_adaptive(self.exp, led.header.get("config") or {}, self.out)
        self.spec = self.exp.spec
        if led.header.get("config") != self.exp.snapshot():
            old = led.header.get("config", {}).get("experiment", {}).get("repeats")
            new = self.spec.experiment.repeats
            cfg_old = {**led.header.get("config", {}),
                       "experiment": {**led.header["config"].get("experiment", {}), "repeats": new}}
            if cfg_old != self.exp.snapshot():
                raise BadInput(f"{self.out}: the experiment changed since this run started; resume needs the same "
                               "experiment file (only --repeats may grow)")
            if new < (old or 0):
                raise BadInput(f"{self.out}: --repeats {new} is fewer than the run's {old}")
        units = [(Unit.of_record(r).key(), r.get("error") is None) for r in led.records
                 if r.get("kind") in ("turn", "probe", "sentinel")]
        self.run_id = led.header.get("run_id", self.run_id)
        # a stage one of whose workers died is run again whole (its stage_end says which, and what was lost)
        self.stages_done = {(r.get("stage"), r.get("arm")) for r in led.of_kind("stage_end")
                            if not r.get("lost_workers")}
        done = {k for k, ok in units if ok}
        self._failed = {k for k, _ in units} - done
        return done

    def _header(self) -> RunHeaderRow:
        return {
            "kind": "run",
            "schema": LEDGER_SCHEMA,
            "tool_version": __version__,
            "run_id": self.run_id,
            "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "host": host_info(),
            "experiment_file": str(self.exp.path),
            "config": self.exp.snapshot(),
            "arms": {
                name: {"role": ep.arm.role, "conditions": ep.arm.conditions, "discovered": redact_tree(ep.discovered),
                       "endpoint": "embedded" if ep.engine else redact_url(api_root(ep.base_url)), "model": ep.model}
                for name, ep in self.endpoints.items()
            },
        }

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
        """One agent turn (:func:`~leverbench.runner.turn.run_turn`) on the arm's pool; its record appended."""
        self.recorder.append(await run_turn(self.sender(unit.arm, session), self.exp, unit))

    async def _warm_up(self, arm: str) -> None:
        """Warm *arm*'s endpoint before the first measured round: the sentinel's call (kind ``warmup``, repeat
        0, 1, …) until its decode rate is stable — two in a row within the drift tolerance
        (:func:`~leverbench.analysis.experiment.drift.settled`) — or :data:`WARMUP_MAX_CALLS` were sent.  The calls
        are in the ledger (the analysis reports whether the arm settled); without sentinels
        (``sentinel_tokens = 0``), one short call."""
        n = self.spec.experiment.sentinel_tokens
        rates: list[float | None] = []
        for i in range(WARMUP_MAX_CALLS if n > 0 else 1):
            rec = await self._fixed_length(self.pool(arm), Unit("warmup", arm, SENTINEL_CASE, i, n or 8))
            await self.recorder.flush()
            rates.append(sentinel_rate(rec.to_dict()) if rec is not None else None)
            if settled(rates, self.spec.experiment.drift_tolerance):
                break

    async def _fixed_length(self, session: aiohttp.ClientSession, unit: Unit) -> CallRecord | None:
        """A probe or sentinel: one call whose output length is forced with ``ignore_eos`` +
        ``min_tokens`` (``max_tokens`` = n).  An endpoint that rejects those fields (HTTP 400/422)
        gets the same prompt again without them, with :data:`LONG_ANSWER` appended so that
        ``max_tokens`` ends the answer; the rejected attempt stays in the ledger (``retried``,
        ``rejected_fields``), and the arm's later probes ask that way straight away.  A probe on an arm
        with a drafter is not forced (:data:`LENGTH_NATURAL`: ``max_tokens`` = n only), so that its decode
        is that of a natural answer.  A probe with a ``depth`` sends its case's prompt cut or padded to
        that many tokens (:mod:`.probe_prompt`, measured once per arm, case and depth)."""
        ep = self.endpoints[unit.arm]
        sender = self.sender(unit.arm, session)
        n = unit.probe_tokens or 1
        if unit.kind in ("sentinel", "warmup"):
            messages = sentinel_messages()
        else:
            case = next(c for c in self.spec.cases if c.name == unit.case)
            messages = await probe_messages(session, ep, self.exp, case, unit.depth)
        depth = {"probe_depth": unit.depth} if unit.depth is not None else {}

        def head(length_method: str) -> CallRecord:
            return CallRecord(kind=unit.kind, arm=unit.arm, case=unit.case, repeat=unit.repeat, step=0,
                              extra={"probe_tokens": n, "position": unit.position, "length_method": length_method,
                                     **depth})
        if unit.kind == "probe" and serves_with_drafter(ep.arm.conditions, ep.discovered):
            return (await sender.send(sender.body(messages, n, 0.0), head(LENGTH_NATURAL))).record
        if not ep.length_by_prompt:
            body = sender.body(messages, n, 0.0, extra={"ignore_eos": True, "min_tokens": n})
            sent = await sender.send(body, head(LENGTH_BY_FIELDS), forced_tokens=n)
            if not sent.record.rejected_fields:
                return sent.record
        body = sender.body(ask_at_length(messages), n, 0.0)
        sent = await sender.send(body, head(LENGTH_BY_PROMPT), forced_tokens=n)
        if sent.record.error is None:
            ep.length_by_prompt = True
        return sent.record

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

    async def _main(self, units: list[Unit], done: set[tuple]) -> None:
        # SIGTERM (kill, timeout) stops the run as Ctrl-C does: the calls in flight are recorded as cancelled
        on_main_thread(asyncio.get_running_loop().add_signal_handler, signal.SIGTERM, asyncio.current_task().cancel)
        # discovery, metrics scrapes: a connection each; model calls go through each arm's kept-alive pool
        async with client_session(keep_alive=False) as session, self._arm_pools():
            for ep in self.endpoints.values():
                murl = ep.arm.metrics_url
                ep.discovered.update(await endpoint_info(session, ep.base_url, ep.headers, metrics_url=murl,
                                                         metrics_headers=ep.headers_for(murl) if murl else None,
                                                         known=ep.discovered))
            if not self.resume or self._fresh:
                self.recorder.append(self._header())
            for name in self.endpoints:  # a fresh server's first calls are slow: record them, don't count them
                await self._warm_up(name)
            todo = [u for u in units if u.key() not in done]
            total = len(units)
            finished = total - len(todo)
            # adaptive: after the initial repeats, before the probes and closing sentinels, round after round
            rounds = AdaptiveRounds(self.spec, self.out / "ledger.jsonl", done) if self.spec.experiment.adaptive \
                else None
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
                if unit.kind == "probe" and (prev is None or prev.kind != "probe"
                                             or (blocked and prev.arm != unit.arm)):  # probes: their arm's block
                    await self.scrape(session, "probes-before", block_arms(unit))
                if self.progress:
                    self.progress(unit, finished, total)
                if unit.kind == "turn":
                    await self._turn(self.pool(unit.arm), unit)
                else:
                    await self._fixed_length(self.pool(unit.arm), unit)
                await self.recorder.flush()  # between units: nothing is being measured
                finished += 1
                nxt = todo[k + 1] if k + 1 < len(todo) else None
                if unit.kind == "probe" and (nxt is None or nxt.kind != "probe" or (blocked and nxt.arm != unit.arm)):
                    await self.scrape(session, "probes-after", block_arms(unit))
                dead = [ep.engine.death_note() for ep in self.endpoints.values() if ep.engine and not ep.engine.alive()]
                if dead:
                    raise EngineError(dead[0] or "an engine died")
            if todo:
                await self.scrape(session, "after", block_arms(todo[-1]))
            await self.run_load(session)
            if self.progress:
                self.progress(Unit("done", "", "", 0), finished, total)
            await self.recorder.flush()

    async def run_load(self, session: aiohttp.ClientSession) -> None:
        """The experiment's load stages (:mod:`.load`), each on each of its arms in turn through its own
        :class:`~leverbench.runner.send.Sender`, between metrics scrapes (on *session*); a stage's records
        are all written before the next one begins."""
        if not self.spec.load:
            return
        work = stage_work(self.exp, list(self.endpoints))
        for n, (plan, arm) in enumerate(work):
            if (plan.name, arm) in self.stages_done:  # a resumed run: this stage finished on this arm
                continue
            if self.progress:
                self.progress(Unit("load", arm, plan.name, 0), n, len(work))
            await self.scrape(session, f"load-start {plan.name}")
            # Reuse connections within the stage (as serving clients do, and as the turns do): a new TCP connection
            # per call costs the client ~0.6 ms and a burst of them serialises.  One pool per stage and arm, closed
            # when it ends, so that tearing down its connections falls between stages, not into the next one's
            # measurements; a connection idle for connections.IDLE_CLOSE_S is dropped before a server would drop it.  A
            # call that opens a connection records that time apart (connect_s).  keep_alive = false: a new
            # connection per call.
            async with client_session(keep_alive=plan.stage.keep_alive) as own:
                stage = StageRun(self.sender(arm, own), self.exp, plan, arm)
                if plan.stage.workers > 1:  # its schedule split across Ray actors, each writing its own shard
                    assert self.cluster is not None
                    end = await self.cluster.run_stage(stage, RemoteEndpoint.of(self.endpoints[arm]),
                                                       timeouts=self.timeouts, retries=self.retries,
                                                       keep_text=self.keep_text, run_id=self.run_id)
                    self.tally.untallied += int(end.get("calls") or 0)  # in the workers' shards
                else:
                    await stage.run()
                    end = StageOutcome(calls=stage.sent, stopped=stage.stopped)
                # the stage's records (and the token counts deferred on its pool) are all on disk before the next
                await self.recorder.flush()
            await self.scrape(session, f"load-end {plan.name}")
            self.recorder.append({"kind": "stage_end", "stage": plan.name, "arm": arm, "load_run": stage.run_id,
                                  **end})
            ep = self.endpoints[arm]
            if ep.engine is not None and not ep.engine.alive():
                raise EngineError(ep.engine.death_note()
                                  or f"the engine of arm {arm!r} died during load stage {plan.name!r}")

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
        # before the engines start and the run's signal handlers are set (ray.init sets its own)
        self.cluster = join_cluster(self.spec, self.stages_done, self.out, self.secrets(), self.ray_address)
        sizes = {c.name: case_size_chars(self.exp, c) for c in self.spec.cases}
        units = build_schedule(self.spec, sizes)
        self.out.mkdir(parents=True, exist_ok=True)
        self.open_ledger()
        try:
            if self.resume and not self._fresh:
                failed = sum(1 for u in units if u.key() in self._failed)
                at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
                self.writer.append({"kind": "resume", "at": at, "tool_version": __version__,
                                    "completed_units": len(done), "failed_units_rerun": failed,
                                    "repeats": self.spec.experiment.repeats})
            previous = on_main_thread(signal.signal, signal.SIGTERM, sigterm_as_interrupt)  # outside the loop
            try:
                self._start_engines()
                asyncio.run(self._main(units, done))
            except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, or SIGTERM (see _main)
                raise Interrupted(str(self.out)) from None
            finally:
                if previous is not None:
                    signal.signal(signal.SIGTERM, previous)
        finally:
            self.stop_engines()
            if self.cluster is not None:
                self.cluster.close()
            self.close_ledger()  # every record handed to the writer is written, whatever ended the run
        self.recorder.reap()  # a normal end: a failed append is an error
        return self.out / "ledger.jsonl"


def holds_a_run(path: Path) -> bool:
    """Whether a ledger holds its run header: a first line written whole.  A file without one (empty, or a
    header cut by a crash) is what a run stopped before its first record leaves: no measurement in it."""
    with open(path, "rb") as fh:
        return fh.readline().endswith(b"\n")
