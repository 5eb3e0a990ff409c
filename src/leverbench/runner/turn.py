"""One agent turn: its scripted steps, each continued through tool calls, sent through a Sender.

The turn's calls go out one after another, each through the arm's
:class:`~leverbench.runner.send.Sender` (which records it); a tool call is answered from the case's
script, its declared latency counted as tool time; the turn ends when the model answers without a
tool call, at the case's step limit, or at a failed call (later calls depend on its answer).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ..config import Case, LoadedExperiment
from ..ledger.records import CallError, CallRecord, TurnRecord, completed
from ..ledger.rows import ToolCallRow
from ..workload.cases import first_messages, next_messages, step_prompts
from ..workload.chat import ChatMessage
from .cache_state import salted
from .schedule import Unit
from .send import Sender, Sent


async def run_turn(sender: Sender, exp: LoadedExperiment, unit: Unit, *, salt: str | None = None) -> TurnRecord:
    """The turn *unit* of *exp*, sent through *sender*; its :class:`TurnRecord` (for the caller to append).
    *salt*: a tag put before its first prompt (:func:`~leverbench.runner.cache_state.salted`: where the experiment's
    declared cache state says its turns stop sharing their prefix), kept through the turn's later calls.

    ``turn_s`` = model_s + tool_s: model_s is the wall clock from the first call's start to the last
    token (connect times included), less the tokenizer's harness time (``harness_s``); tool_s the tool
    results' scripted latencies.  Each call's own times are in its record."""
    case = next(c for c in exp.spec.cases if c.name == unit.case)
    tools = exp.tools.get(case.name)
    turn_id = uuid.uuid4().hex[:12]
    messages = first_messages(exp, case)
    if salt is not None:
        messages = salted(messages, salt, exp.spec.experiment.cache_between_turns)
    t0 = time.perf_counter()
    t_start = time.time()
    calls: list[Sent] = []
    tool_s = 0.0
    step_limit = failed_out = False
    scripted = step_prompts(case)
    for k, (prompt, max_tokens) in enumerate(scripted):
        if k > 0:
            messages = next_messages(messages, calls[-1].content, prompt)
        while True:
            body = sender.body(messages, max_tokens, case.temperature, tools=tools)
            head = CallRecord(kind="call", arm=unit.arm, case=unit.case, repeat=unit.repeat, step=len(calls),
                              turn_id=turn_id, extra={"scripted_step": k})
            sent = await sender.send(body, head, think_tags=case.think_tags)
            calls.append(sent)
            rec = sent.record
            if rec.error is not None and not completed(rec.error.cls):
                failed_out = True  # later calls depend on this answer
                break
            if not (tools and rec.tool_calls):
                break
            if len(calls) >= case.max_steps:
                step_limit = True
                break
            results, seconds = tool_results(exp, case, rec.tool_calls)
            tool_s += seconds
            messages = [*messages, assistant_tool_message(sent.content, rec.tool_calls), *results]
        if failed_out or step_limit:
            break
    recs = [c.record for c in calls]
    model_s = time.perf_counter() - t0 - sum(r.harness_s or 0.0 for r in recs)  # not the tokenizer's
    failed = [r.error for r in recs if r.error is not None]
    return TurnRecord(
        arm=unit.arm, case=unit.case, repeat=unit.repeat, turn_id=turn_id,
        t_start=t_start, turn_s=model_s + tool_s, model_s=model_s, tool_s=tool_s,
        calls=len(recs), scripted_steps=len(scripted), failed_calls=len(failed),
        step_limit=step_limit, empty_answers=sum(1 for r in recs if r.empty_answer),
        retried_s=sum(c.retried_s for c in calls),
        output_tokens=sum_or_none(r.completion_tokens for r in recs),
        prompt_tokens=sum_or_none(r.prompt_tokens for r in recs),
        reasoning_tokens=sum_or_none(r.reasoning_tokens or 0 for r in recs),
        error=CallError(failed[0].cls, f"{len(failed)} of {len(recs)} calls failed") if failed else None,
    )


def tool_results(exp: LoadedExperiment, case: Case, calls: list[ToolCallRow]) -> tuple[list[ChatMessage], float]:
    """Answer each tool call from the case's script; returns the tool messages and their declared seconds."""
    script = exp.tool_scripts.get(case.name, {})
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


def assistant_tool_message(content: str, tool_calls: list[ToolCallRow]) -> ChatMessage:
    return {"role": "assistant", "content": content or None,
            "tool_calls": [{"id": tc.get("id") or f"call_{i}", "type": "function",
                            "function": {"name": tc.get("name") or "", "arguments": tc.get("arguments") or "{}"}}
                           for i, tc in enumerate(tool_calls)]}


def sum_or_none(values: Any) -> int | None:
    vals = list(values)
    if not vals or any(v is None for v in vals):
        return None
    return int(sum(vals))
