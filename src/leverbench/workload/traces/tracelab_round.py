"""``tracelab-round``: TraceLab's JSON-lines round traces of coding agents.

``input_tokens_total`` (prefix included), ``prefix_tokens`` (cached),
``output_tokens`` (as the provider counted them; OpenAI-style counts include
reasoning tokens), ``model``, ``session_id``, ``round_index``,
``timing_events``, ``tools``.  latency_s ≈ last assistant event − last input
event (log timestamps, not a client measurement); tool_wait_s = last tool
result − first tool call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import Format, Sniff
from .files import jsonl, read_text
from .records import Rows, Skip, TrafficCall, TrafficLoad, count, opt_count, opt_seconds, opt_str, timestamp

_INPUT_EVENTS = {"user_message", "tool_result"}


def round_timing(events: Any) -> tuple[float | None, float | None]:
    """(start, latency) of a TraceLab round from its timing_events.

    start = the last input event (user message or tool result) — the request
    cannot go out before it; end = the last later event (reasoning, text,
    tool_call, usage_report); latency = end − start.
    """
    if not isinstance(events, list):
        return None, None
    stamped = [(str(e.get("event_type")), timestamp(e.get("timestamp"))) for e in events if isinstance(e, dict)]
    stamped = [(k, t) for k, t in stamped if t is not None]
    starts = [t for k, t in stamped if k in _INPUT_EVENTS]
    if not starts:
        return (stamped[0][1] if stamped else None), None
    start = max(starts)
    ends = [t for k, t in stamped if k not in _INPUT_EVENTS and t >= start]
    return start, (opt_seconds(max(ends) - start) if ends else None)


def tool_wait(tools: Any) -> float | None:
    if not isinstance(tools, list):
        return None
    emitted = [timestamp(t.get("emitted_at")) for t in tools if isinstance(t, dict)]
    results = [timestamp(t.get("result_at")) for t in tools if isinstance(t, dict)]
    emitted = [t for t in emitted if t is not None]
    results = [t for t in results if t is not None]
    if not emitted or not results:
        return None
    return opt_seconds(max(0.0, max(results) - min(emitted)))


def load(path: Path, **_: Any) -> TrafficLoad:
    rows = Rows()
    for line, obj in jsonl(read_text(path), rows):
        try:
            inp = count(obj.get("input_tokens_total"), "input_tokens_total")
            out = count(obj.get("output_tokens"), "output_tokens")
        except Skip as s:
            rows.skip(s.reason, line)
            continue
        cached = opt_count(obj.get("prefix_tokens"))
        start, latency = round_timing(obj.get("timing_events"))
        if latency is None:
            rows.soft["no timing events to estimate latency"] += 1
        rows.add(TrafficCall(input_tokens=inp, output_tokens=out,
                             cached_tokens=min(cached, inp) if cached is not None else None,
                             latency_s=latency, model=opt_str(obj.get("model")),
                             session=opt_str(obj.get("session_id")), round=opt_count(obj.get("round_index")),
                             tool_wait_s=tool_wait(obj.get("tools"))), start)
    return rows.load(path, "tracelab-round", cached_served=True, notes=[
        "cached = prefix_tokens (what the provider read from its cache); latency ≈ last assistant event − last "
        "input event in the agent's log (not a client measurement)"])


def detect(s: Sniff) -> bool:
    return (s.obj is not None and "input_tokens_total" in s.obj
            and ("prefix_tokens" in s.obj or "timing_events" in s.obj))


FORMAT = Format("tracelab-round", detect, load)
