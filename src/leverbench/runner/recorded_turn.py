"""One recorded turn replayed on an arm, in the case's ``replay`` mode, through a Sender.

- ``recorded`` (the default): each step sends the recorded request as it is (its messages, with the recorded
  answers and tool results; its tools; its sampling parameters), whatever the arm answered before: every arm
  receives the same requests, the fixed workload a comparison of serving configurations needs.
- ``live``: the first request as recorded; then the arm's own tool calls drive the turn, each answered from the
  recording by tool name and arguments (:class:`~leverbench.workload.recorded.live.ToolResults`), the agent's
  own next messages kept (:func:`~leverbench.workload.recorded.live.user_steps`); where the arm's path departs
  from the recording, the call's record says how (``departed``).

A request's body is the recorded one with the arm's model, the client's ``stream`` and ``stream_options``, and
the arm's own request fields over the recording's (the arm's ``cache_prompt = false`` holds whatever the agent
sent).  Each call's record carries ``replay`` (the mode), ``recorded_step`` (the recorded call it stands for),
``recorded_prompt_tokens`` (the recording's usage: the fidelity check, ``analysis.experiment.fidelity``),
``as_recorded`` (its messages are that call's) and, where the recording masked text, ``recorded_redactions``;
a live call's ``departed`` names tool calls by their arguments' hashes unless the experiment stores text.
The gaps between the recorded calls (the agent's tools, its own work) are not replayed: ``tool_s`` is 0.
"""

from __future__ import annotations

import time
import uuid
from typing import Callable

from ..config import Case, LoadedExperiment
from ..ledger.records import CallError, CallRecord, TurnRecord, completed
from ..ledger.rows import CallExtras
from ..recording import RecordedCall, RecordedTurn
from ..workload.cases import recorded_messages
from ..workload.chat import ChatBody, ChatMessage
from ..workload.recorded.grouping import prefix_hashes
from ..workload.recorded.live import ToolResults, departure, user_steps
from .schedule import Unit
from .send import Sender, Sent
from .turn import assistant_tool_message, sum_or_none

OWNED = ("model", "messages", "tools", "stream", "stream_options")  # the runner's (and the arm's) in a replayed body


def replay_body(sender: Sender, call: RecordedCall, messages: list[ChatMessage] | None = None) -> ChatBody:
    """The body that replays *call* on the sender's arm (see the module's docstring); *messages* in place of the
    recorded ones (a live replay's)."""
    body = sender.body(recorded_messages(call.messages) if messages is None else messages, None, None,
                       tools=call.tools)
    for k, v in call.request.items():
        if k not in OWNED:
            body.setdefault(k, v)  # type: ignore[misc]  # the recorded request's fields: its JSON
    return body


def _extra(mode: str, k: int, call: RecordedCall, as_recorded: bool) -> CallExtras:
    extra: CallExtras = {"scripted_step": k, "replay": mode, "recorded_step": k,
                         "recorded_prompt_tokens": call.prompt_tokens, "as_recorded": as_recorded}
    if call.redactions:
        extra["recorded_redactions"] = call.redactions
    return extra


class _Turn:
    """A replay in progress: its calls so far, through one sender."""

    def __init__(self, sender: Sender, unit: Unit, case: Case, turn: RecordedTurn, keep_text: bool = False):
        self.sender, self.unit, self.case, self.turn = sender, unit, case, turn
        self.keep_text = keep_text  # a departure's text shows the tool calls' arguments (else their hashes)
        self.turn_id = uuid.uuid4().hex[:12]
        self.calls: list[Sent] = []
        self.failed = self.step_limit = False
        self.results = ToolResults(turn, keep_text)
        self.answers: list[tuple[str, str | None]] = []  # the last call's tool calls answered: (result, note)

    async def send(self, body: ChatBody, extra: CallExtras,
                   note: Callable[[CallRecord], None] | None = None) -> Sent:
        u = self.unit
        head = CallRecord(kind="call", arm=u.arm, case=u.case, repeat=u.repeat, step=len(self.calls),
                          turn_id=self.turn_id, extra=extra)
        sent = await self.sender.send(body, head, think_tags=self.case.think_tags, note=note)
        self.calls.append(sent)
        self.failed = _failed(sent.record)  # later calls depend on this answer
        return sent

    async def recorded(self) -> None:
        """Each recorded request, as recorded."""
        for k, call in enumerate(self.turn.calls):
            await self.send(replay_body(self.sender, call), _extra("recorded", k, call, True))
            if self.failed:
                return

    def _answer(self, at: RecordedCall | None) -> Callable[[CallRecord], None]:
        """The note (see :meth:`Sender.send`) that answers a live call's tool calls from the recording and says
        where the call departed from *at*, the recorded call at its place (None: the recording had answered)."""
        def note(rec: CallRecord) -> None:
            asked = [(tc.get("name") or "", tc.get("arguments") or "{}") for tc in rec.tool_calls or []]
            self.answers = [] if _failed(rec) else [self.results.answer(name, args) for name, args in asked]
            said = "; ".join(n for n in [departure(asked, at, self.keep_text), *(why for _, why in self.answers)] if n)
            if said:
                rec.extra["departed"] = said
        return note

    async def live(self) -> None:
        """The arm's tool calls drive each user step (see the module's docstring)."""
        calls = self.turn.calls
        messages: list[ChatMessage] = []
        for step in user_steps(self.turn):
            if step.replace or not self.calls:
                messages = recorded_messages(step.messages)
            else:
                messages = [*messages, {"role": "assistant", "content": self.calls[-1].content},
                            *recorded_messages(step.messages)]
            k = step.first
            while True:
                past = k > step.last  # the recording's step had answered by now
                at = calls[min(k, step.last)]  # the recorded call at this place (its sampling; past the step: its last)
                sent = await self.send(replay_body(self.sender, at, messages),
                                       _extra("live", min(k, step.last), at, not past and _same(messages, at)),
                                       self._answer(None if past else at))
                rec = sent.record
                if self.failed:
                    return
                if not rec.tool_calls:
                    break
                if len(self.calls) >= self.case.max_steps:
                    self.step_limit = True
                    return
                messages = [*messages, assistant_tool_message(sent.content, rec.tool_calls),
                            *({"role": "tool", "tool_call_id": tc.get("id") or f"call_{i}", "content": text}
                              for i, (tc, (text, _)) in enumerate(zip(rec.tool_calls, self.answers)))]
                k += 1


def _failed(rec: CallRecord) -> bool:
    return rec.error is not None and not completed(rec.error.cls)


def _same(messages: list[ChatMessage], call: RecordedCall) -> bool:
    """Whether *messages* are the recorded call's own (compared as the turns are grouped: canonical JSON)."""
    mine, theirs = prefix_hashes(list(messages)), prefix_hashes(list(call.messages))
    return len(mine) == len(theirs) and (not mine or mine[-1] == theirs[-1])


async def run_recorded_turn(sender: Sender, exp: LoadedExperiment, unit: Unit, case: Case) -> TurnRecord:
    """The recorded turn of *case* replayed on *unit*'s arm; its :class:`TurnRecord` (for the caller to append).
    ``turn_s`` = ``model_s``: the first call's start to the last token, less the tokenizer's harness time."""
    replay = _Turn(sender, unit, case, exp.recorded[case.name], exp.spec.experiment.store_text)
    t0, t_start = time.perf_counter(), time.time()
    await (replay.live() if case.replay == "live" else replay.recorded())
    recs = [c.record for c in replay.calls]
    model_s = time.perf_counter() - t0 - sum(r.harness_s or 0.0 for r in recs)
    failed = [r.error for r in recs if r.error is not None]
    return TurnRecord(
        arm=unit.arm, case=unit.case, repeat=unit.repeat, turn_id=replay.turn_id, t_start=t_start, turn_s=model_s,
        model_s=model_s, tool_s=0.0, calls=len(recs), scripted_steps=len(replay.turn.calls), failed_calls=len(failed),
        step_limit=replay.step_limit, empty_answers=sum(1 for r in recs if r.empty_answer),
        retried_s=sum(c.retried_s for c in replay.calls), output_tokens=sum_or_none(r.completion_tokens for r in recs),
        prompt_tokens=sum_or_none(r.prompt_tokens for r in recs),
        reasoning_tokens=sum_or_none(r.reasoning_tokens or 0 for r in recs),
        error=CallError(failed[0].cls, f"{len(failed)} of {len(recs)} calls failed") if failed else None)
