"""Run an experiment: start engines, do the scheduled work, write the ledger.

The runner measures and records; it computes no statistics (that is
``leverbench.analysis``).  Every call is handed to the ledger's writer the
moment it ends, failed or not; the writer (one thread) appends and fsyncs it
while the next call goes out, so the fsync never sits inside a measured
interval.  The run waits for the writer only between units of work (after
each turn, probe or sentinel; at the end of each load stage; at the end of the
run, and in any case before it returns or raises).  A turn's ``turn`` record
is written when the turn ends.  A resumed run skips every unit that already
has a successful record and re-runs the units whose every record failed (the
failed records stay in the ledger, superseded: the analysis counts each unit's
first successful attempt).

Connections: each arm has its own kept-alive pool (see
:func:`~leverbench.runner.client.client_session`), used by its turns, probes
and sentinels; each load stage opens its own pool per arm the same way.  The
time to open a connection is recorded apart as ``connect_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import signal
import threading
import time
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import aiohttp

from .. import __version__
from ..config import Arm, Case, LoadedExperiment
from ..engines import EngineProcess, make_engine
from ..errors import BadInput, ConfigError, EngineError
from ..ledger.reader import read_ledger
from ..ledger.records import LEDGER_SCHEMA
from ..ledger.writer import LedgerWriter
from ..redact import redact_tree, redact_url, same_origin
from ..workload.cases import case_size_chars, first_messages, next_messages, step_prompts
from .client import CallCancelled, Timeouts, client_session, messages_sha256, stream_chat
from .discover import api_root, chat_url, endpoint_info, host_info, scrape_metrics
from .load import run_load
from .schedule import SENTINEL_CASE, Unit, build_schedule

SENTINEL_PROMPT = "Count upward from 1, one number per line, and keep going."
FORCE_FIELDS = ("ignore_eos", "min_tokens")  # how a probe forces its output length, where the engine allows it
LONG_ANSWER = ("Answer at great length: write many long, detailed paragraphs and keep writing; "
               "do not stop early or summarise.")
LENGTH_BY_FIELDS = "ignore_eos"
LENGTH_BY_PROMPT = "prompt (engine rejected ignore_eos)"


@dataclass
class ArmEndpoint:
    arm: Arm
    base_url: str
    model: str
    headers: dict[str, str]
    engine: EngineProcess | None = None
    discovered: dict[str, Any] = field(default_factory=dict)
    length_by_prompt: bool = False  # the endpoint rejected ignore_eos/min_tokens: probes ask for length instead

    def headers_for(self, url: str) -> dict[str, str]:
        """The key's headers for a request to *url*: only on the arm's own origin (scheme, host and
        port of base_url), or to its metrics_url when the arm sets ``metrics_send_key``; else none."""
        if same_origin(url, self.base_url) or (self.arm.metrics_send_key and url == self.arm.metrics_url):
            return self.headers
        return {}


class Interrupted(Exception):
    """The run was stopped (Ctrl-C); what finished, and the calls in flight (class cancelled), are in the ledger."""


ProgressFn = Callable[[Unit, int, int], None]


def _headers(exp: LoadedExperiment, i: int, arm: Arm) -> dict[str, str]:
    if not arm.api_key_env:
        return {}
    key = os.environ.get(arm.api_key_env)
    if not key:
        raise ConfigError(str(exp.path), f"arms[{i}].api_key_env",
                          f"environment variable {arm.api_key_env} is not set (it should hold the API key)")
    return {"Authorization": f"Bearer {key}"}


class Runner:
    def __init__(self, exp: LoadedExperiment, out_dir: Path, *, resume: bool = False,
                 progress: ProgressFn | None = None, timeouts: Timeouts | None = None):
        self.exp = exp
        self.spec = exp.spec
        self.out = Path(out_dir)
        self.resume = resume
        self.progress = progress
        self.timeouts = timeouts or Timeouts(**self.spec.experiment.timeouts.model_dump())
        self.retries = self.spec.experiment.retries
        self.endpoints: dict[str, ArmEndpoint] = {}
        self.writer: LedgerWriter | None = None
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger")
        self._pending: deque[Future] = deque()  # appends handed to the writer thread, oldest first
        self._background: set[asyncio.Task] = set()  # deferred token counts, each appending its record when done
        self._pools: dict[str, aiohttp.ClientSession] = {}  # per arm: its turns', probes' and sentinels' connections
        self._failed: set[tuple] = set()  # on resume: units whose every record failed (run again)
        self._fresh = False  # --resume found a ledger that holds no run yet: start it afresh
        self.stages_done: set[tuple[str, str]] = set()  # on resume: (load stage, arm) pairs that finished
        self.keep_text = self.spec.experiment.store_text

    # ------------------------------------------------------------ set-up

    def _prepare_endpoints(self) -> None:
        for i, arm in enumerate(self.spec.arms):
            headers = _headers(self.exp, i, arm)
            if arm.engine is not None:
                eng = make_engine(arm.name, arm.engine, self.out / f"engine-{_safe(arm.name)}.log")
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
        (they run in their own session: the terminal's SIGINT never reaches them)."""
        held = _hold_signals()
        try:
            for ep in self.endpoints.values():
                if ep.engine is not None:
                    ep.engine.stop()
        finally:
            _release_signals(held)

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
        if led.header.get("config") != self.exp.snapshot():
            old = led.header.get("config", {}).get("experiment", {}).get("repeats")
            new = self.spec.experiment.repeats
            cfg_old = {**led.header.get("config", {}), "experiment": {**led.header["config"].get("experiment", {}), "repeats": new}}
            if cfg_old != self.exp.snapshot():
                raise BadInput(f"{self.out}: the experiment changed since this run started; resume needs the same "
                               "experiment file (only --repeats may grow)")
            if new < (old or 0):
                raise BadInput(f"{self.out}: --repeats {new} is fewer than the run's {old}")
        units = [(Unit.of_record(r).key(), r.get("error") is None) for r in led.records
                 if r.get("kind") in ("turn", "probe", "sentinel")]
        self.stages_done = {(r.get("stage"), r.get("arm")) for r in led.of_kind("stage_end")}
        done = {k for k, ok in units if ok}
        self._failed = {k for k, _ in units} - done
        return done

    def _header(self) -> dict[str, Any]:
        return {
            "kind": "run",
            "schema": LEDGER_SCHEMA,
            "tool_version": __version__,
            "run_id": uuid.uuid4().hex[:12],
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

    # ------------------------------------------------------------ calls

    def _body(self, ep: ArmEndpoint, messages: list[dict[str, Any]], max_tokens: int, temperature: float,
              extra: dict[str, Any] | None = None, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": ep.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": temperature}
        if tools:
            body["tools"] = tools
        body.update(ep.arm.request)
        if extra:
            body.update(extra)
        return body

    async def _call(self, session: aiohttp.ClientSession, ep: ArmEndpoint, body: dict[str, Any],
                    meta: dict[str, Any], *, think_tags: bool = False, defer_counting: bool = False) -> dict[str, Any]:
        """One call, recorded; with ``retries`` set, a failed attempt is recorded and tried again
        (``_retried_s`` on the returned record: the seconds its retried attempts took).
        A fixed-length call (``meta`` has ``length_method`` and ``probe_tokens``) gets :func:`length_check`'s fields; one
        the endpoint rejected for its forcing fields is not tried again (the caller falls back).

        A call the server sent no usage for is counted with its tokenizer (:func:`count_tokens`): harness
        time that must not enter a measurement.  It is recorded as ``harness_s`` (a turn leaves it out of
        its time); with *defer_counting* (load stages, whose next send must not wait for it) the counting
        and the record's append happen in the background (:meth:`_flush` waits for them) and the record
        comes back without its counts."""
        retried_s = 0.0
        for attempt in range(self.retries + 1):
            cancelled: asyncio.CancelledError | None = None
            try:
                rec = await stream_chat(session, chat_url(ep.base_url), body, headers=ep.headers,
                                        timeouts=self.timeouts, keep_text=self.keep_text, think_tags=think_tags)
            except CallCancelled as exc:  # Ctrl-C: the call in flight is recorded (class cancelled), then we stop
                rec, cancelled = exc.record, exc
            content = rec.pop("_content")
            reasoning = rec.pop("_reasoning")
            uncounted = rec["error"] is not None and rec["error"]["class"] == "no_usage"
            if uncounted and not defer_counting:
                h0 = time.perf_counter()
                try:
                    await count_tokens(session, ep.base_url, ep.headers, body["messages"], content + reasoning, rec)
                except asyncio.CancelledError as exc:  # Ctrl-C while counting: recorded uncounted (below), then stop
                    cancelled = exc
                rec["harness_s"] = time.perf_counter() - h0
            messages = body["messages"]
            sent = {k: v for k, v in body.items() if k not in ("messages", "tools")}
            out = {**meta, **rec, "request": sent, "input_sha256": messages_sha256(messages),
                   "input_chars": sum(len(m.get("content") or "") for m in messages),
                   "tools_sent": len(body.get("tools") or [])}
            if self.retries:
                out["attempt"] = attempt
            if self.keep_text:
                out["input_messages"] = messages
            if cancelled is not None:
                self._append_now(out)
                raise cancelled
            if rec["error"] is not None and ep.engine is not None and (note := ep.engine.death_note()):
                out["error"] = {"class": "engine_died", "message": note[:2000]}
            if "length_method" in meta and "probe_tokens" in meta:
                out.update(length_check(out, body, meta["probe_tokens"]))
            will_retry = (out["error"] is not None and attempt < self.retries and out["error"]["class"] != "engine_died"
                          and not out.get("rejected_fields"))
            if will_retry:
                out["retried"] = True
                retried_s += (out.get("connect_s") or 0.0) + out["latency_s"]
            if uncounted and defer_counting:
                self._background.add(asyncio.create_task(self._count_then_append(
                    session, ep, body["messages"], content + reasoning, out)))
            else:
                await self._append(out)  # returns at once: the next call is not held up by the fsync
            if not will_retry:
                break
        out["_content"] = content
        out["_retried_s"] = retried_s
        return out

    async def _append(self, record: dict[str, Any]) -> None:
        """Hand a copy of *record* to the ledger's writer thread and return at once.

        The fsync can stall for milliseconds on a busy disk (100 ms and more on a shared one); it must
        not delay the next call.  One worker thread keeps the ledger's order and its single writer;
        :meth:`_flush` waits for it at the safe points.  A failed earlier append (disk full) is raised
        here or there.  The copy is shallow: what the record holds must not be changed afterwards."""
        assert self.writer is not None
        self._reap()
        self._pending.append(self._io.submit(self.writer.append, dict(record)))

    def _reap(self) -> None:
        """Forget the appends that are done, oldest first; raise the first one that failed."""
        while self._pending and self._pending[0].done():
            self._pending.popleft().result()

    async def _count_then_append(self, session: aiohttp.ClientSession, ep: ArmEndpoint,
                                 messages: list[dict[str, Any]], output: str, out: dict[str, Any]) -> None:
        """A deferred :func:`count_tokens` (see :meth:`_call`): count, then append the record."""
        record = dict(out)
        h0 = time.perf_counter()
        try:
            await count_tokens(session, ep.base_url, ep.headers, messages, output, record)
        except asyncio.CancelledError:  # Ctrl-C while counting: the call is recorded all the same, uncounted
            self._append_now(out)
            raise
        record["harness_s"] = time.perf_counter() - h0
        await self._append(record)

    async def _flush(self) -> None:
        """Wait until every record handed over so far is written and fsync'd.  Called only outside
        measured intervals: after each unit, at the end of each load stage and of the run.  Deferred
        token counts (:meth:`_call`) are waited for first."""
        while self._background:
            await asyncio.gather(*list(self._background))
            self._background = {t for t in self._background if not t.done()}
        if self._pending:  # one thread, in order: when the last is done, all are
            await asyncio.wait([asyncio.wrap_future(self._pending[-1])])
        self._reap()

    def pool(self, arm: str) -> aiohttp.ClientSession:
        """The arm's kept-alive connection pool (for its turns, probes and sentinels)."""
        if arm not in self._pools:
            self._pools[arm] = client_session()
        return self._pools[arm]

    def _append_now(self, record: dict[str, Any]) -> None:
        """Append and wait for the write, blocking the loop: for a record written while the run is being
        cancelled, which must be on disk before the run's task ends and the engines are stopped.  The same
        single worker thread as :meth:`_append` keeps the ledger's order."""
        assert self.writer is not None
        self._io.submit(self.writer.append, record).result()

    def _tool_results(self, case: Case, calls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
        """Answer each tool call from the case's script; returns the tool messages and their declared seconds."""
        script = self.exp.tool_scripts.get(case.name, {})
        msgs, seconds = [], 0.0
        for tc in calls:
            entry = script.get(tc.get("name") or "", script.get("default", "(no result scripted for this tool)"))
            latency = case.tool_latency_s
            if isinstance(entry, dict) and "result" in entry:
                latency = float(entry.get("latency_s", latency))
                entry = entry["result"]
            text = entry if isinstance(entry, str) else json.dumps(entry)
            msgs.append({"role": "tool", "tool_call_id": tc.get("id") or "", "content": text})
            seconds += latency
        return msgs, seconds

    async def _turn(self, session: aiohttp.ClientSession, unit: Unit) -> None:
        """One agent turn: its scripted steps, each continued through tool calls until the model
        answers without one or the case's step limit is reached.  ``turn_s`` is the full wall clock
        (connect time included); each call's own times are in its record."""
        ep = self.endpoints[unit.arm]
        case = next(c for c in self.spec.cases if c.name == unit.case)
        tools = self.exp.tools.get(case.name)
        turn_id = uuid.uuid4().hex[:12]
        messages = first_messages(self.exp, case)
        t0 = time.perf_counter()
        t_start = time.time()
        calls: list[dict[str, Any]] = []
        tool_s = 0.0
        step_limit = failed_out = False
        scripted = step_prompts(case)
        for k, (prompt, max_tokens) in enumerate(scripted):
            if k > 0:
                messages = next_messages(messages, calls[-1]["_content"], prompt)
            while True:
                body = self._body(ep, messages, max_tokens, case.temperature, tools=tools)
                meta = {"kind": "call", "arm": unit.arm, "case": unit.case, "repeat": unit.repeat,
                        "step": len(calls), "scripted_step": k, "turn_id": turn_id}
                rec = await self._call(session, ep, body, meta, think_tags=case.think_tags)
                calls.append(rec)
                if rec["error"] is not None and rec["error"]["class"] != "no_usage":
                    failed_out = True  # later calls depend on this answer
                    break
                if not (tools and rec.get("tool_calls")):
                    break
                if len(calls) >= case.max_steps:
                    step_limit = True
                    break
                results, seconds = self._tool_results(case, rec["tool_calls"])
                tool_s += seconds
                messages = [*messages, assistant_tool_message(rec["_content"], rec["tool_calls"]), *results]
            if failed_out or step_limit:
                break
        model_s = time.perf_counter() - t0 - sum(c.get("harness_s") or 0.0 for c in calls)  # not the tokenizer's
        failed = [c for c in calls if c["error"] is not None]
        err = None
        if failed:
            err = {"class": failed[0]["error"]["class"], "message": f"{len(failed)} of {len(calls)} calls failed"}
        await self._append({
            "kind": "turn", "arm": unit.arm, "case": unit.case, "repeat": unit.repeat, "turn_id": turn_id,
            "t_start": t_start, "turn_s": model_s + tool_s, "model_s": model_s, "tool_s": tool_s,
            "calls": len(calls), "scripted_steps": len(scripted), "failed_calls": len(failed),
            "step_limit": step_limit, "empty_answers": sum(1 for c in calls if c.get("empty_answer")),
            "retried_s": sum(c["_retried_s"] for c in calls),
            "output_tokens": _sum_or_none(c.get("completion_tokens") for c in calls),
            "prompt_tokens": _sum_or_none(c.get("prompt_tokens") for c in calls),
            "reasoning_tokens": _sum_or_none(c.get("reasoning_tokens") or 0 for c in calls),
            "error": err,
        })

    async def _fixed_length(self, session: aiohttp.ClientSession, unit: Unit) -> None:
        """A probe or sentinel: one call whose output length is forced with ``ignore_eos`` +
        ``min_tokens`` (``max_tokens`` = n).  An endpoint that rejects those fields (HTTP 400/422)
        gets the same prompt again without them, with :data:`LONG_ANSWER` appended so that
        ``max_tokens`` ends the answer; the rejected attempt stays in the ledger (``retried``,
        ``rejected_fields``), and the arm's later probes ask that way straight away."""
        ep = self.endpoints[unit.arm]
        n = unit.probe_tokens or 1
        if unit.kind in ("sentinel", "warmup"):
            messages = [{"role": "user", "content": SENTINEL_PROMPT}]
        else:
            case = next(c for c in self.spec.cases if c.name == unit.case)
            messages = first_messages(self.exp, case)
        meta = {"kind": unit.kind, "arm": unit.arm, "case": unit.case, "repeat": unit.repeat, "step": 0,
                "probe_tokens": n, "position": unit.position}
        if not ep.length_by_prompt:
            body = self._body(ep, messages, n, 0.0, extra={"ignore_eos": True, "min_tokens": n})
            rec = await self._call(session, ep, body, {**meta, "length_method": LENGTH_BY_FIELDS})
            if not rec.get("rejected_fields"):
                return
        body = self._body(ep, ask_at_length(messages), n, 0.0)
        rec = await self._call(session, ep, body, {**meta, "length_method": LENGTH_BY_PROMPT})
        if rec["error"] is None:
            ep.length_by_prompt = True

    async def _scrape(self, session: aiohttp.ClientSession, when: str, arms: list[str] | None = None) -> None:
        """Scrape each arm's (or the given arms') Prometheus metrics into a ``metrics`` record."""
        for name, ep in self.endpoints.items():
            if arms is not None and name not in arms:
                continue
            url = ep.arm.metrics_url or (api_root(ep.base_url) + "/metrics")
            samples = await scrape_metrics(session, url, ep.headers_for(url))
            if samples is not None:
                await self._append({"kind": "metrics", "arm": name, "when": when, "t": time.time(),
                                    "samples": samples})

    async def _main(self, units: list[Unit], done: set[tuple]) -> None:
        # SIGTERM (kill, timeout) stops the run as Ctrl-C does: the calls in flight are recorded as cancelled
        _on_main_thread(asyncio.get_running_loop().add_signal_handler, signal.SIGTERM, asyncio.current_task().cancel)
        # discovery, metrics scrapes: a connection each; model calls go through each arm's kept-alive pool
        async with client_session(keep_alive=False) as session, self._arm_pools():
            for ep in self.endpoints.values():
                murl = ep.arm.metrics_url
                ep.discovered.update(await endpoint_info(session, ep.base_url, ep.headers, metrics_url=murl,
                                                         metrics_headers=ep.headers_for(murl) if murl else None,
                                                         known=ep.discovered))
            if not self.resume or self._fresh:
                await self._append(self._header())
            for name in self.endpoints:  # a fresh server's first call is slow; measure it, don't count it
                await self._fixed_length(self.pool(name), Unit("warmup", name, SENTINEL_CASE, 0, 8))
            await self._flush()
            todo = [u for u in units if u.key() not in done]
            total = len(units)
            finished = total - len(todo)
            # The server's counters are scraped around each arm's block (its turns, probes and sentinels: in
            # blocked order around each arm's own units, so arms sharing one endpoint are told apart, else
            # around all of them) and around each run of probes (one prompt sent again: what a cache finds).
            blocked = self.spec.experiment.order == "blocked"

            def block_arms(u: Unit) -> list[str] | None:  # whose endpoints a scrape around *u* covers
                return [u.arm] if blocked else None
            for k, unit in enumerate(todo):
                prev = todo[k - 1] if k else None
                if prev is None or (blocked and unit.arm != prev.arm):
                    if prev is not None:
                        await self._scrape(session, "after", block_arms(prev))
                    await self._scrape(session, "before", block_arms(unit))
                if unit.kind == "probe" and (prev is None or prev.kind != "probe" or (blocked and prev.arm != unit.arm)):
                    await self._scrape(session, "probes-before", block_arms(unit))
                if self.progress:
                    self.progress(unit, finished, total)
                if unit.kind == "turn":
                    await self._turn(self.pool(unit.arm), unit)
                else:
                    await self._fixed_length(self.pool(unit.arm), unit)
                await self._flush()  # between units: nothing is being measured
                finished += 1
                nxt = todo[k + 1] if k + 1 < len(todo) else None
                if unit.kind == "probe" and (nxt is None or nxt.kind != "probe" or (blocked and nxt.arm != unit.arm)):
                    await self._scrape(session, "probes-after", block_arms(unit))
                dead = [ep.engine.death_note() for ep in self.endpoints.values() if ep.engine and not ep.engine.alive()]
                if dead:
                    raise EngineError(dead[0] or "an engine died")
            if todo:
                await self._scrape(session, "after", block_arms(todo[-1]))
            await run_load(self, session)
            if self.progress:
                self.progress(Unit("done", "", "", 0), finished, total)
            await self._flush()

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
        done = self._completed()
        self._prepare_endpoints()
        sizes = {c.name: case_size_chars(self.exp, c) for c in self.spec.cases}
        units = build_schedule(self.spec, sizes)
        self.out.mkdir(parents=True, exist_ok=True)
        keys = tuple(h.removeprefix("Bearer ") for ep in self.endpoints.values() for h in ep.headers.values())
        self.writer = LedgerWriter(self.out / "ledger.jsonl", secrets=keys)
        try:
            if self.resume and not self._fresh:
                failed = sum(1 for u in units if u.key() in self._failed)
                self.writer.append({"kind": "resume", "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                                    "tool_version": __version__, "completed_units": len(done),
                                    "failed_units_rerun": failed, "repeats": self.spec.experiment.repeats})
            previous = _on_main_thread(signal.signal, signal.SIGTERM, _sigterm_as_interrupt)  # outside the loop
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
            self._io.shutdown(wait=True)  # every record handed to the writer is written, whatever ended the run
            self.writer.close()
        self._reap()  # a normal end: a failed append is an error
        return self.out / "ledger.jsonl"


def holds_a_run(path: Path) -> bool:
    """Whether a ledger holds its run header: a first line written whole.  A file without one (empty, or a
    header cut by a crash) is what a run stopped before its first record leaves: no measurement in it."""
    with open(path, "rb") as fh:
        return fh.readline().endswith(b"\n")


def _sigterm_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


_HELD = (signal.SIGINT, signal.SIGTERM)


def _on_main_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` where signals can be handled (the main thread); elsewhere (a test's thread) None."""
    return fn(*args) if threading.current_thread() is threading.main_thread() else None


def _hold_signals() -> dict[int, Any]:
    """Ignore Ctrl-C and SIGTERM (on the main thread), returning the handlers to put back."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, signal.SIG_IGN) for s in _HELD}


def _release_signals(held: dict[int, Any]) -> None:
    for s, handler in held.items():
        signal.signal(s, handler)


def assistant_tool_message(content: str, tool_calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "content": content or None,
            "tool_calls": [{"id": tc.get("id") or f"call_{i}", "type": "function",
                            "function": {"name": tc.get("name") or "", "arguments": tc.get("arguments") or "{}"}}
                           for i, tc in enumerate(tool_calls)]}


async def count_tokens(session: aiohttp.ClientSession, base_url: str, headers: dict[str, str],
                       messages: list[dict[str, Any]], output: str, rec: dict[str, Any]) -> None:
    """When the server sent no usage: count with its own tokenizer (llama.cpp's /apply-template +
    /tokenize) and say so in ``token_source``; the call then counts as measured."""
    root = api_root(base_url)
    timeout = aiohttp.ClientTimeout(total=30)

    async def post(path: str, payload: dict[str, Any]) -> Any:
        async with session.post(root + path, json=payload, headers=headers, timeout=timeout) as resp:
            if resp.status != 200:
                return None
            return await resp.json(content_type=None)

    try:
        source = "tokenize (chat template applied)"
        tmpl = await post("/apply-template", {"messages": messages})
        prompt = tmpl.get("prompt") if isinstance(tmpl, dict) else None
        if not isinstance(prompt, str):
            source = "tokenize (message contents, no chat template)"
            prompt = "\n".join(str(m.get("content") or "") for m in messages)
        tin = await post("/tokenize", {"content": prompt})
        tout = await post("/tokenize", {"content": output})
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return
    if not (isinstance(tin, dict) and isinstance(tout, dict) and isinstance(tin.get("tokens"), list)
            and isinstance(tout.get("tokens"), list)):
        return
    rec.update(prompt_tokens=len(tin["tokens"]), completion_tokens=len(tout["tokens"]), token_source=source,
               usage_missing=True, error=None)


def length_check(rec: dict[str, Any], body: dict[str, Any], n: int) -> dict[str, Any]:
    """Fields for a fixed-length call's record: ``rejected_fields`` (+ ``retried``) when the endpoint
    refused a body that carried :data:`FORCE_FIELDS` with HTTP 400 or 422 (a strict API); else,
    for a call that succeeded, ``length_verified`` = the engine generated exactly ``n`` tokens."""
    sent = [f for f in FORCE_FIELDS if f in body]
    if rec["error"] is not None and rec.get("status") in (400, 422) and sent:
        return {"rejected_fields": sent, "retried": True}
    if rec["error"] is None:
        return {"length_verified": rec.get("completion_tokens") == n}
    return {}


def ask_at_length(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same conversation with :data:`LONG_ANSWER` appended to its last user message (or added
    as one), so that the prompt, and the prefill it costs, stay nearly the same."""
    out = [dict(m) for m in messages]
    last = out[-1] if out else None
    if last is None or last.get("role") != "user":
        return [*out, {"role": "user", "content": LONG_ANSWER}]
    content = last.get("content")
    if isinstance(content, list):
        last["content"] = [*content, {"type": "text", "text": LONG_ANSWER}]
    else:
        last["content"] = f"{content or ''}\n\n{LONG_ANSWER}"
    return out


def _sum_or_none(values: Any) -> int | None:
    vals = list(values)
    if not vals or any(v is None for v in vals):
        return None
    return int(sum(vals))


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
