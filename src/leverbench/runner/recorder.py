"""Records handed to the ledger's writer without holding up the next call.

The fsync of every append can stall for milliseconds on a busy disk (100 ms and more on a shared
one); it must not sit inside a measured interval.  One worker thread appends (it keeps the ledger's
order and its single writer); the run waits for it only at the safe points (:meth:`Recorder.flush`:
after each unit of work, at the end of each load stage and of the run).  The thread takes every record
handed over since it last looked and writes them with one fsync (a group commit): when 128 streams of a
load stage end together, one write and one fsync instead of 128, and a thread that wakes, and contends for
the interpreter with the event loop, once instead of some 500 times.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Coroutine, cast

from ..errors import RuntimeFailure
from ..ledger.records import CALL_KINDS, CallRecord, TurnRecord
from ..ledger.rows import LedgerRow
from ..ledger.writer import LedgerWriter

LATER_S = 0.0005  # the most of one turn of the event loop that Recorder.later's work takes
Record = CallRecord | TurnRecord | LedgerRow  # a typed record, or a row of another kind (metrics, stage_end, ...)


def as_line(record: Record) -> LedgerRow:
    """The record's ledger object, taken now: a typed record's :meth:`to_dict`, a copy of a dict."""
    return cast(LedgerRow, dict(record)) if isinstance(record, dict) else record.to_dict()


@dataclass
class Tally:
    """The calls of one kind of work that went through the recorder: how many, how many failed, the first error."""

    calls: int = 0
    failed: int = 0
    first_error: str | None = None

    def add(self, line: LedgerRow) -> None:
        self.calls += 1
        err = line.get("error")
        if err is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = f"{err.get('class')}: {err.get('message')}" if isinstance(err, dict) else str(err)


@dataclass
class CallTally:
    """What the run's calls came to (this session's: a resumed run's own), counted as they are recorded: the
    measured calls (turns' calls, probes, sentinels, load) and the warm-up calls apart.  A load stage run on
    Ray workers writes its calls to its shards, not through the recorder: they are *untallied*."""

    measured: Tally = field(default_factory=Tally)
    warmup: Tally = field(default_factory=Tally)
    untallied: int = 0

    def add(self, line: LedgerRow) -> None:
        kind = line.get("kind")
        if kind in CALL_KINDS:
            self.measured.add(line)
        elif kind == "warmup":
            self.warmup.add(line)

    def every_call_failed(self) -> Tally | None:
        """The tally when every call failed (the measured ones; with none, the warm-ups), else None."""
        if self.untallied:
            return None
        t = self.measured if self.measured.calls else self.warmup
        return t if t.calls and t.failed == t.calls else None

    def check(self, out: Path, secrets: tuple[str, ...] = ()) -> None:
        """A run in which every call failed (an endpoint down, a wrong URL or model) measured nothing: a
        :class:`~leverbench.errors.RuntimeFailure` (exit 1) saying so, with the first error (*secrets*, the
        run's keys, written as ``***``, as the ledger's writer does) and where the ledger is."""
        failed = self.every_call_failed()
        if failed is None:
            return
        first = " ".join(str(failed.first_error).split())
        for secret in secrets:
            if secret:
                first = first.replace(secret, "***")
        raise RuntimeFailure(f"every call failed ({failed.failed} of {failed.calls}): first error: {first}; "
                             f"the ledger is in {out}")


class Recorder:
    """Hands records to *writer* on its own thread (see the module's docstring), tallying the calls
    (:class:`CallTally`)."""

    def __init__(self, writer: LedgerWriter):
        self.writer = writer
        self.tally = CallTally()
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger")
        self._pending: deque[Future] = deque()  # writes handed to the writer thread, oldest first
        self._lines: deque[LedgerRow] = deque()  # records handed over that no write has taken yet
        self._queued = False  # a write is submitted that has not yet begun taking self._lines
        self._background: set[asyncio.Task] = set()  # deferred work, each appending its record when done
        self._later: deque[Callable[[], None]] = deque()  # work after the loop's waiting I/O (see later)
        self._later_timer: asyncio.TimerHandle | None = None
        self._later_error: BaseException | None = None

    def append(self, record: Record) -> None:
        """Hand *record* (as it is now: :func:`as_line`) to the writer thread and return at once.  A failed
        earlier append (disk full) is raised here or at :meth:`flush`."""
        self.reap()
        line = as_line(record)
        self.tally.add(line)
        self._lines.append(line)
        if not self._queued:  # else the write already submitted takes this one too
            self._queued = True
            self._pending.append(self._io.submit(self._write_queued))

    def append_now(self, record: Record) -> None:
        """Append and wait for the write, blocking the loop: for a record written while the run is being
        cancelled, which must be on disk before the run's task ends and the engines are stopped.  The same
        single worker thread as :meth:`append` keeps the ledger's order (what :meth:`later` holds goes first)."""
        self._all_later()
        line = as_line(record)
        self.tally.add(line)
        self._lines.append(line)
        self._io.submit(self._write_queued).result()

    def _write_queued(self) -> None:
        """On the writer thread: every record handed over so far, in order, written with one fsync."""
        self._queued = False  # first: a record handed over from now on submits the next write
        batch = []
        while self._lines:
            batch.append(self._lines.popleft())
        if batch:
            self.writer.append_many(batch)

    def later(self, work: Callable[[], None]) -> None:
        """Run *work* (it finishes a record and appends it) soon, after the I/O the loop has waiting: a timer
        due now runs after the callbacks of the sockets that are ready, and takes at most ``LATER_S`` of one
        turn of the loop, the rest in the next.  When 128 streams end together, their records' last fields
        and appends no longer stand between their ends and the next sends, nor before the chunks that arrive
        meanwhile.  In order; :meth:`flush` and :meth:`close` run what is left first."""
        self._later.append(work)
        if self._later_timer is None:
            self._later_timer = asyncio.get_running_loop().call_later(0, self._run_later)

    def _run_later(self) -> None:
        self._later_timer = None
        t = time.perf_counter()
        while self._later and time.perf_counter() - t < LATER_S:
            self._run_one_later()
        if self._later:
            self._later_timer = asyncio.get_running_loop().call_later(0, self._run_later)

    def _run_one_later(self) -> None:
        try:
            self._later.popleft()()
        except Exception as exc:  # raised at the next append or flush (a callback's error would only be logged)
            self._later_error = self._later_error or exc

    def _all_later(self) -> None:
        """Run every piece of :meth:`later` work left, now."""
        if self._later_timer is not None:
            self._later_timer.cancel()
            self._later_timer = None
        while self._later:
            self._run_one_later()

    def defer(self, work: Coroutine[Any, Any, None]) -> None:
        """Run *work* (which appends its record when done) in the background; :meth:`flush` waits for it."""
        self._background.add(asyncio.create_task(work))

    async def flush(self) -> None:
        """Wait until every record handed over so far is written and fsync'd, deferred work first.  Called
        only outside measured intervals."""
        self._all_later()
        while self._background:
            await asyncio.gather(*list(self._background))
            self._background = {t for t in self._background if not t.done()}
        if self._pending:  # one thread, in order: when the last is done, all are (it took what came before it)
            await asyncio.wait([asyncio.wrap_future(self._pending[-1])])
        self.reap()

    def reap(self) -> None:
        """Forget the appends that are done, oldest first; raise the first one that failed."""
        if self._later_error is not None:
            error, self._later_error = self._later_error, None
            raise error
        while self._pending and self._pending[0].done():
            self._pending.popleft().result()

    def close(self) -> None:
        """Wait until every record handed over is written, however the run ended (a failed append is
        raised by :meth:`reap` after)."""
        self._all_later()
        self._io.shutdown(wait=True)


class HeaderFirst:
    """The run's records with its header first: a record handed over before the header is written (an engine's
    start, and with engines one at a time its discovery stop: they come before what the header says) is held,
    and appended right after the header (:meth:`header`); once it is written (*written*: a resumed run's ledger
    has its own), straight to *recorder*."""

    def __init__(self, recorder: Recorder, written: bool):
        self.recorder, self.written = recorder, written
        self._held: list[Record] = []

    def append(self, record: Record) -> None:
        (self.recorder.append if self.written else self._held.append)(record)

    def header(self, record: Record | None) -> None:
        """Append the run's header (None: the ledger has its own), then the records held."""
        if record is not None:
            self.recorder.append(record)
        self.written = True
        for held in self._held:
            self.recorder.append(held)
        self._held.clear()
