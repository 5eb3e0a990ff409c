"""Run the experiment's load stages (issue 5): closed loop, open loop, trace replay.

For each planned stage (sweeps expanded) and each of its arms, one after
another, this module decides *when* each call goes out and hands it to a
:class:`~leverbench.runner.send.Sender` (the stage's own, on its own
connection pool), which streams it and appends its record to the ledger (the
only writer).  It computes no statistics: ``leverbench.analysis.load.stages`` does,
from the ledger.

Every call record of a stage has kind ``load`` and, besides the call's own
fields, in its ``extra``: ``stage``, ``mode``, ``sweep`` (when part of one),
``concurrency`` / ``rate`` + ``arrival`` / ``speed``, ``prefix_sharing``
(closed/open: the share of the prompt common to all the stage's requests, see
:class:`SharedPrefix`), the SLOs, ``scheduled_t`` (epoch s at which the
schedule meant the call to go out), ``warmup`` (bool), ``load_run`` (one id
per execution of a stage on an arm; a resumed run re-runs its stages and the
analysis keeps the latest execution) and ``loop_lag_s`` (the longest
event-loop stall the client saw since the stage's previous send: these
windows tile the stage, so their maximum is the client's worst stall); with
``max_in_flight``, ``slot_wait_s`` (the seconds the call waited for a slot).  How
late a call went out is ``t_send − scheduled_t`` (no separate key: both are
recorded); less ``slot_wait_s``, the client's own lag.  Its
``repeat`` is the request's index in the stage, its ``step`` the round within
a trace session (else 0).  Trace calls add ``target_input_tokens`` /
``target_output_tokens`` (what the trace asked for, after scaling),
``session`` (and the field ``turn_id``: TraceLab sessions); the first
call sent in a trace stage carries ``trace_import`` (rows used,
skipped and why) and ``token_check`` (the synthetic prompts' length checked
with the engine's ``/tokenize``).

Scheduling, and why latency is taken from the schedule: an open-loop stage
sends each call at its scheduled time whether or not earlier calls have
finished (one asyncio task per call); a call that goes out late (the client
lagged, or ``max_in_flight`` was reached) keeps its scheduled time, so the
delay is counted in its latency instead of being silently omitted
("coordinated omission").  A closed-loop stage keeps ``concurrency`` calls in
flight; a call's scheduled time is the end of its client's previous call
(t_send + connect_s + send_s + latency_s), and it is sent then: the runner hands the
previous record to the ledger's writer thread without waiting for its fsync.
A stage's schedule is computed once (:meth:`StageRun.schedule`); a stage with
``workers`` > 1 has it split (:func:`~.shares.split`) and each share sent by
its own process from a shared start (:mod:`.workers`).
Before every stage and arm (and after), the endpoint's Prometheus metrics are
scraped (``metrics`` records with ``when`` = ``"load-start STAGE"`` /
``"load-end STAGE"``) so the analysis can report the server's own queue time.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

from ..config import LoadedExperiment
from ..errors import ConfigError
from ..ledger.records import CallRecord, ErrorClass, completed
from ..ledger.rows import CallExtras, TokenCheckRow
from ..workload.chat import ChatBody, ChatMessage
from ..workload.load import PlannedStage, check_stages, check_trace_paths, expand
from .prompts import ROLE_TOKENS, PromptBuilder, SharedPrefix, words
from .send import Sender, Sent
from .shares import Schedule, TraceCall, open_arrivals
from .trace_plan import plan_trace

LAG_PROBE_S = 0.005  # the loop-lag monitor's sleep
CONNECT_FAILS_ABORT = 20  # consecutive connect failures that end a stage (the endpoint is gone)


def stage_work(exp: LoadedExperiment, arms: list[str]) -> list[tuple[PlannedStage, str]]:
    """The experiment's load stages (sweeps expanded), each with each of its arms (default: all *arms*),
    in the order they run; ConfigError for a stage the experiment file gets wrong."""
    spec = exp.spec
    problems = check_stages(spec.load, [a.name for a in spec.arms], [c.name for c in spec.cases])
    problems += check_trace_paths(spec.load, Path(exp.path).resolve().parent)
    if problems:
        raise ConfigError(str(exp.path), *problems[0])
    return [(p, arm) for p in expand(spec.load) for arm in (p.stage.arms or arms)]


# ------------------------------------------------------------------ client lag


class LoopLag:
    """Measures the event loop's own lag: how late a ``LAG_PROBE_S`` sleep wakes up.

    ``take()`` returns the largest lag seen since the previous ``take()`` and resets it.
    """

    def __init__(self, probe_s: float = LAG_PROBE_S):
        self.probe_s = probe_s
        self.worst = 0.0
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(self.probe_s)
            lag = loop.time() - t - self.probe_s
            if lag > self.worst:
                self.worst = lag

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def take(self) -> float:
        v, self.worst = self.worst, 0.0
        return round(v, 6)


@contextlib.contextmanager
def heap_frozen() -> Iterator[None]:
    """A stage's sends without the collector walking the process's whole heap: what exists when the stage
    starts (the modules the runner imports: scipy, pydantic, the analysis; the experiment; earlier records)
    is collected once, then frozen (:func:`gc.freeze`: the collector no longer scans it), so that a
    collection during the stage walks only what the stage allocates.  A full collection over that heap
    (~10^5 objects) stopped the event loop for 30-100 ms on a 2-core machine, in the middle of every stream
    in flight.  Unfrozen when the stage ends, unless something else had frozen the heap before."""
    gc.collect()
    mine = gc.get_freeze_count() == 0
    gc.freeze()
    try:
        yield
    finally:
        if mine:
            gc.unfreeze()


async def sleep_until(t_epoch: float) -> None:
    """Sleep until the wall-clock time ``t_epoch`` (returns at once when it has passed)."""
    delay = t_epoch - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


# ------------------------------------------------------------------ one stage on one arm


class StageRun:
    """One planned stage of *exp* driven against one arm: its calls go out through *sender*, which records them."""

    def __init__(self, sender: Sender, exp: LoadedExperiment, plan: PlannedStage, arm: str):
        self.sender = sender
        self.exp = exp
        self.plan = plan
        self.s = plan.stage
        self.arm = arm
        self.lag = LoopLag()
        self.run_id = uuid.uuid4().hex[:12]
        self.base = {**plan.params(), "load_run": self.run_id}  # every call's extra starts with these
        self.first_extra: CallExtras = {}
        self.connect_fails = 0
        self.stopped = False
        self.sent = 0  # calls sent (each one record)
        self.sending: set[asyncio.Task] = set()  # the tasks inside _send (waiting for a slot or in a call)
        self.sem: asyncio.Semaphore | None = None

    async def schedule(self) -> Schedule:
        """The whole stage's schedule, computed once (see :mod:`.shares`): a closed loop's clients and
        budget, an open loop's seeded arrivals, a trace's sessions (its import and the /tokenize check
        included: they need the arm)."""
        s = self.s
        whole = Schedule(s.mode, self.run_id, max_in_flight=s.max_in_flight)
        if s.mode == "closed":
            n = self.plan.concurrency or 1
            whole.client_starts = [k * s.ramp_s / n for k in range(n)]
            whole.warmup_requests, whole.requests, whole.timed = s.warmup_requests, s.requests, s.duration_s is not None
        elif s.mode == "open":
            whole.arrivals = open_arrivals(s, self.plan.rate or 1.0)
        else:
            whole.sessions, report = plan_trace(self.exp, self.s)
            builder = self._builder()
            check = await self._token_check(builder, [reqs[0] for _, reqs in whole.sessions[:3]])
            whole.tokens_per_word = builder.tokens_per_word
            whole.first_extra = {"trace_import": report, "token_check": check}
        return whole

    async def run(self, share: Schedule | None = None, start: float | None = None) -> None:
        """Send *share* (default: the whole stage's :meth:`schedule`) from *start* (epoch s, this host's
        clock; default: now, an open loop or trace a little later so that its first send is on time)."""
        self.lag.start()
        try:
            with heap_frozen():
                await self._run(share, start)
        except asyncio.CancelledError:  # Ctrl-C: every call in flight records itself (cancelled) before we stop
            rest = [t for t in self.sending if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
            raise
        finally:
            await self.lag.stop()

    async def _run(self, share: Schedule | None, start: float | None) -> None:
        share = share if share is not None else await self.schedule()
        self.run_id = share.run_id
        self.base = {**self.plan.params(), "load_run": self.run_id}
        if share.worker is not None:  # a shard's records say whose they are
            self.base["worker"] = share.worker
        self.first_extra = dict(share.first_extra)
        self.sem = asyncio.Semaphore(share.max_in_flight) if share.max_in_flight else None
        if self.s.mode == "closed":
            await self._closed(share, start)
        elif self.s.mode == "open":
            await self._open(share, start)
        else:
            await self._trace(share, time.time() + 0.05 if start is None else start)

    # -------------------------------------------------- sending

    async def _send(self, body: ChatBody, case: str, repeat: int, step: int, extra: CallExtras,
                    scheduled_t: float, turn_id: str | None = None) -> Sent:
        """Send one call (waiting for a ``max_in_flight`` slot first), its record's ``extra`` the stage's
        keys, then *extra*, then its schedule; the record comes back from the sender."""
        me = asyncio.current_task()
        self.sending.add(me)
        waited: dict[str, float] = {}
        if self.sem is not None:
            t0 = time.time()
            await self.sem.acquire()
            waited["slot_wait_s"] = time.time() - t0  # the server's backlog at the cap, apart from the client's lag
        try:
            head = CallRecord(kind="load", arm=self.arm, case=case, repeat=repeat, step=step, turn_id=turn_id,
                              extra={**self.base, **extra, "scheduled_t": scheduled_t, "loop_lag_s": self.lag.take(),
                                     **waited})
            if self.first_extra:  # the stage's first call carries the trace import and token check
                head.extra.update(self.first_extra)
                self.first_extra = {}
            self.sent += 1
            sent = await self.sender.send(body, head, defer_counting=True)
        finally:
            self.sending.discard(me)
            if self.sem is not None:
                self.sem.release()
        if sent.record.failed_as(ErrorClass.CONNECT, ErrorClass.TIMEOUT_CONNECT):
            self.connect_fails += 1
            if self.connect_fails >= CONNECT_FAILS_ABORT:
                self.stopped = True
        else:
            self.connect_fails = 0
        return sent

    def _case_body(self) -> tuple[Callable[[int], ChatBody], str]:
        """(request index → body, case name): the case's first call, made distinct per request as the
        stage's ``prefix_sharing`` says (see :class:`SharedPrefix`; the unique words are seeded by the
        stage's seed, this execution's ``load_run`` id and the request index, so that no two requests —
        nor a request of an earlier run against the same server — share them)."""
        from ..workload.cases import first_messages  # noqa: PLC0415

        cases = self.exp.spec.cases
        case = next(c for c in cases if c.name == self.s.case) if self.s.case else cases[0]
        messages = first_messages(self.exp, case)
        tools = self.exp.tools.get(case.name)
        body = self.sender.body(messages, self.s.max_tokens or case.max_tokens, case.temperature, tools=tools)
        shared = SharedPrefix(messages, self.s.prefix_sharing, f"{self.s.seed}:{self.run_id}")

        def body_for(i: int) -> ChatBody:
            return body if shared.at is None else {**body, "messages": shared.for_request(i)}

        return body_for, case.name

    # -------------------------------------------------- closed loop

    async def _closed(self, share: Schedule, start: float | None) -> None:
        """*share*'s clients, each from its start offset (a shared *start*: the first call's schedule is
        then that time), each sending its next request when its previous call ends, until the share's
        budget (warm-up, then measured requests) or the stage's duration is spent."""
        body_for, case = self._case_body()
        s = self.s
        t0 = time.time() if start is None else start
        state = {"next": 0, "measured": 0, "m0": None}

        def claim() -> tuple[int, bool] | None:
            if self.stopped:
                return None
            now = time.time()
            j = state["next"]
            warm = state["m0"] is None and (j < share.warmup_requests or now - t0 < s.warmup_s)
            if not warm:
                if state["m0"] is None:
                    state["m0"] = now
                if share.requests is not None and state["measured"] >= share.requests:
                    return None
                if s.duration_s is not None and now - state["m0"] >= s.duration_s:
                    return None
                state["measured"] += 1
            state["next"] = j + 1
            return share.index(j), warm

        async def client(offset: float) -> None:
            planned = None
            if offset or start is not None:
                planned = t0 + offset
                await sleep_until(planned)
            prev_end: float | None = None
            while (c := claim()) is not None:
                i, warm = c
                scheduled = prev_end if prev_end is not None else planned if planned is not None else time.time()
                body = body_for(i)
                sent = await self._send(body, case, i, 0, {"warmup": warm}, scheduled)
                prev_end = sent.record.t_end

        await asyncio.gather(*(client(offset) for offset in share.client_starts))

    # -------------------------------------------------- open loop

    async def _open(self, share: Schedule, start: float | None) -> None:
        """Each of *share*'s arrivals at *start* (default: a little lead, so that the first send is on
        time) + its offset, whether or not earlier calls have ended."""
        body_for, case = self._case_body()
        t0 = time.time() + 0.05 if start is None else start
        tasks: set[asyncio.Task] = set()
        for i, off, warm in share.arrivals:
            if self.stopped:
                break
            scheduled = t0 + off
            body = body_for(i)  # built before the send time, not after
            await sleep_until(scheduled)
            task = asyncio.create_task(self._send(body, case, i, 0, {"warmup": warm}, scheduled))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*list(tasks))

    # -------------------------------------------------- trace replay

    async def _token_check(self, builder: PromptBuilder, sample: list[TraceCall]) -> TokenCheckRow:
        """Calibrate words per token with /tokenize and check the first prompts' lengths."""
        probe = " ".join(words(512, "leverbench-tokenize-probe"))
        n = await self.sender.count_text_tokens(probe)
        if n is None:
            return {"source": None, "note": "the endpoint offers no /tokenize; prompt lengths unchecked (compare "
                                            "prompt_tokens with target_input_tokens)"}
        tpw = n / 512
        if abs(tpw - 1.0) > 0.02:
            builder.tokens_per_word = tpw
        checks = []
        for r in sample:
            target = r.new_tokens - ROLE_TOKENS
            if target <= 0:
                continue
            text = builder.content(target, f"{r.index}", r.blocks)
            got = await self.sender.count_text_tokens(text)
            if got is not None:
                checks.append((target, got))
        errs = [(g - t) / t for t, g in checks]
        return {"source": "/tokenize", "tokens_per_word": round(tpw, 4), "calibrated": builder.tokens_per_word != 1.0,
                "samples": len(checks), "targets": [t for t, _ in checks], "measured": [g for _, g in checks],
                "rel_error_mean": sum(errs) / len(errs) if errs else None,
                "rel_error_max": max(errs, key=abs) if errs else None}

    def _builder(self) -> PromptBuilder:
        """The trace's prompt builder (Mooncake hash blocks of block_tokens × scale_input tokens)."""
        return PromptBuilder(round(self.s.block_tokens * self.s.scale_input), salt=f"{self.plan.name}")

    async def _trace(self, share: Schedule, t0: float) -> None:
        """*share*'s sessions, each from t0 + its start offset (:meth:`_session`)."""
        builder = self._builder()
        builder.tokens_per_word = share.tokens_per_word
        case = "trace:" + Path(self.s.trace or "").stem
        tasks: list[asyncio.Task] = []
        for start, reqs in share.sessions:
            if self.stopped:
                break
            first = self._user_message(builder, reqs[0], 0)  # built before the send time, not after
            await sleep_until(t0 + start)
            tasks.append(asyncio.create_task(self._session(reqs, first, t0 + start, t0, builder, case)))
        if tasks:
            await asyncio.gather(*tasks)

    def _user_message(self, builder: PromptBuilder, r: TraceCall, rnd: int) -> ChatMessage:
        """The round's new user message: round 0 the whole prompt (hash blocks first), later rounds what they add."""
        roles = ROLE_TOKENS if rnd == 0 else 2 * ROLE_TOKENS  # (assistant +) user
        text = builder.content(max(1, r.new_tokens - roles), f"{r.index}", r.blocks if rnd == 0 else None)
        return {"role": "user", "content": text}

    async def _session(self, reqs: list[TraceCall], first: ChatMessage, scheduled: float, t0: float,
                       builder: PromptBuilder, case: str) -> None:
        """A trace session: its rounds one after another, each after the previous answer and its tool wait."""
        s = self.s
        turn_id = uuid.uuid4().hex[:12] if len(reqs) > 1 else None
        messages: list[ChatMessage] = [first]
        for rnd, r in enumerate(reqs):
            if self.stopped:
                return
            # an endpoint that rejected ignore_eos/min_tokens (a strict API: see .fixed_calls.fixed_length, which the
            # warm-up ran first) gets max_tokens alone: the answer may then end before the trace's length
            force = s.force_output and not self.sender.length_by_prompt
            forced = {"ignore_eos": True, "min_tokens": r.output_tokens} if force else None
            body = self.sender.body(messages, r.output_tokens, 0.0, extra=forced)
            extra: CallExtras = {"warmup": r.index < s.warmup_requests or scheduled - t0 < s.warmup_s,
                                  "target_input_tokens": r.input_tokens, "target_output_tokens": r.output_tokens}
            if s.force_output:
                extra["length_method"] = "ignore_eos" if force else "max_tokens only (engine rejected ignore_eos)"
            if turn_id:
                extra["session"] = turn_id
            sent = await self._send(body, case, r.index, rnd, extra, scheduled, turn_id)
            if sent.record.error is not None and not completed(sent.record.error.cls):
                return  # later rounds build on this answer
            if rnd + 1 < len(reqs):
                nxt = self._user_message(builder, reqs[rnd + 1], rnd + 1)
                messages = [*messages, {"role": "assistant", "content": sent.content}, nxt]
                scheduled = sent.record.t_end + r.tool_wait_s
                await sleep_until(scheduled)
