"""A turn's companions: each turn timed while other requests are in flight on its arm (``[experiment] in_flight``).

At ``in_flight`` = N > 1 each measured turn has N − 1 **companions**: clients of a closed loop on the turn's arm,
on a connection pool of their own, each sending a copy of the turn's case's first call (its messages, its
``max_tokens``, its tools) and, as soon as one ends, the next, until the turn has ended.  Each copy's prompt
begins with a few seeded words of its own (:class:`OwnPrompts`), so that no companion finds another's prompt, or
the turn's, in a prefix cache: they are other users' requests of the same shape, not repeats of the turn.

**When the turn starts**: :data:`SETTLE_S` after every companion's first request has gone out (its body written),
so that the turn meets the server's queue behind them, as one client of a steady closed loop of N does: with S
slots and requests of one size, such a client waits for N / S service times a request, and so does the turn (the
simulator's ``true_turn_seconds(..., concurrency=N)``).  (The settling time is outside the turn's time; on a path
slower than it, the turn may overtake a companion's request: the server's own queue counters would show it.)
A companion whose call fails stops (its failure recorded): the turn goes on, but was not timed at N in flight.

**When it ends**: no companion sends a new call once the turn has ended; those in flight are waited for, so
that every call is in the ledger and the next unit starts on an idle server.

**In the ledger** (schema v6): each companion call is a call record of kind ``companion`` with the turn's arm,
case and repeat, its ``step`` the copy's index and ``extra.companion`` its client; the turn record gets
``in_flight`` (N), ``companion_calls`` and ``companion_failed``.  Analysis sums a cell's failed companions
(``cells[].companion_failed``, :func:`leverbench.analysis.experiment.cells.cells`) and the guard refuses that
cell's comparisons, since its turns were not timed at the load they claim.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from types import TracebackType
from typing import Callable, Optional

import aiohttp

from ..config import LoadedExperiment
from ..config.experiment import Case
from ..ledger.records import CallRecord, TurnRecord, completed
from ..workload.cases import first_messages
from ..workload.chat import ChatBody, ChatMessage
from .client import client_session
from .prompts import UNIQUE_WORDS, SharedPrefix, words
from .schedule import Unit
from .send import Sender

SETTLE_S = 0.05  # s from the companions' first requests written until the turn starts: the server has read them
#: How a companion's sender is made: on the companions' own connection pool.
SenderOn = Callable[[aiohttp.ClientSession], Sender]


class OwnPrompts:
    """Each companion request's messages: the case's first messages with seeded words of its own at the start
    (:class:`~.prompts.SharedPrefix` at ``prefix_sharing`` 0), or, where no message has text content (a recorded
    turn's content-part lists), as a text part before the first list's parts."""

    def __init__(self, messages: list[ChatMessage], salt: str):
        self.messages, self.salt = messages, salt
        self.shared = SharedPrefix(messages, 0.0, salt)

    def for_request(self, i: int) -> list[ChatMessage]:
        if self.shared.at is not None:
            return self.shared.for_request(i)
        unique = " ".join(words(UNIQUE_WORDS, f"{self.salt}:{i}"))
        for j, m in enumerate(self.messages):
            parts = m.get("content")
            if isinstance(parts, list):
                out = list(self.messages)
                out[j] = {**m, "content": [{"type": "text", "text": unique}, *parts]}
                return out
        return self.messages  # (no content to make its own: only a message without content; none sends that)


class Companions:
    """The N − 1 companions of one turn (module docstring): ``async with Companions(...) as c:`` runs the turn
    between their first sends and their last calls' ends; :meth:`stamp` puts what they did on its record."""

    def __init__(self, sender_on: SenderOn, exp: LoadedExperiment, unit: Unit, case: Case, in_flight: int):
        self.sender_on, self.exp, self.unit, self.case = sender_on, exp, unit, case
        self.in_flight = in_flight
        self.calls = self.failed = self.sent = 0
        self._ended = False
        self._all_sent = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._session: Optional[aiohttp.ClientSession] = None

    def _on_sent(self) -> None:
        self.sent += 1
        if self.sent >= self.in_flight - 1:
            self._all_sent.set()

    async def __aenter__(self) -> Companions:
        n = self.in_flight - 1
        if n < 1:
            return self
        self._session = client_session(on_sent=self._on_sent)
        sender = self.sender_on(self._session)
        messages = first_messages(self.exp, self.case)
        body = sender.body(messages, self.case.max_tokens, self.case.temperature,
                           tools=self.exp.tools.get(self.case.name))
        prompts = OwnPrompts(messages, f"companion:{uuid.uuid4().hex}")
        for i in range(n):
            self._tasks.append(asyncio.create_task(self._client(sender, body, prompts, i, n)))
        try:  # the turn goes once every first request is out, or a companion ended (its call failed before it went)
            started = asyncio.create_task(self._all_sent.wait())
            await asyncio.wait([started, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
            started.cancel()
            await asyncio.sleep(SETTLE_S)
        except BaseException as exc:  # (Ctrl-C while they start: their calls cut and recorded, the pool closed)
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def _client(self, sender: Sender, body: ChatBody, prompts: OwnPrompts, i: int, n: int) -> None:
        k = i
        while not self._ended:
            head = CallRecord(kind="companion", arm=self.unit.arm, case=self.unit.case, repeat=self.unit.repeat,
                              step=k, extra={"companion": i})
            copy: ChatBody = {**body, "messages": prompts.for_request(k)}
            # (counted at once where the server sends no usage: a deferred count would outlive the pool it counts on)
            sent = await sender.send(copy, head, think_tags=self.case.think_tags)
            self.calls += 1
            err = sent.record.error
            if err is not None and not completed(err.cls):
                self.failed += 1
                return
            k += n

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._ended = True
        if exc is not None:  # the turn did not finish (Ctrl-C, an engine died): the calls in flight are cut
            for t in self._tasks:
                t.cancel()
        try:
            await asyncio.gather(*self._tasks, return_exceptions=exc is not None)
        finally:
            if self._session is not None:
                await self._session.close()

    def stamp(self, rec: TurnRecord) -> TurnRecord:
        """The turn's record with its load: ``in_flight``, ``companion_calls``, ``companion_failed``."""
        if self.in_flight <= 1:
            return rec
        return dataclasses.replace(rec, in_flight=self.in_flight, companion_calls=self.calls,
                                   companion_failed=self.failed)
