"""A recording's own first screen: its turns, calls and tool rounds, its tokens, the prefix its turns share, where
the engine's time went; and the recording as traffic calls and rates for the rest of the traffic analysis.

Pure functions over :class:`~leverbench.workload.recorded.traffic.RecordingCall` records (in the file's order).

- turns: the recording's (the proxy's grouping); a turn's tool rounds are its calls whose answer asked for a tool.
- tokens: sums over the calls with counts (usage, else llama.cpp's timings: ``counted_by`` says which, per call).
- the prefix every turn shares: the leading messages that every turn's first request has alike (compared whole,
  by hash), and the tools when every turn sent the same; in characters (their canonical JSON), and in tokens at
  the recording's own tokens per character (Σ prompt tokens / Σ request characters over the counted calls: an
  estimate, said so).  Measured where the engine had a prefix cache: the cached tokens of every turn's first call
  after the first one's.  Within a turn each call extends the one before (the grouping's rule): the share of its
  prompt tokens that the previous call's prompt already held, Σ min(prompt_k−1, prompt_k) / Σ prompt_k, k ≥ 1.
- the engine's time (llama.cpp's ``timings``, on the calls that have them): prefill Σ prompt_ms, decode
  Σ predicted_ms, the rest of the calls' latency as the proxy saw it (HTTP, templating, queueing); and the time
  between a turn's calls (from the end of one to the start of the next: the agent's tools, its own work).
- rates (:func:`timing_rates`): prefill Σ (prompt − cached) / Σ prompt_ms, decode Σ completion / Σ predicted_ms.
- cached tokens for the lever estimate (:func:`traffic_calls`): as served, where the engine reported any cached
  token; else what a prefix cache could have served: the previous call's prompt (k ≥ 1), the prefix every turn
  shares (a turn's first call after the first turn), at most the call's prompt.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from ...workload.traces.records import TrafficCall
from .rates import Rates

if TYPE_CHECKING:
    from ...schema.traffic_rows import EngineTime, RecordedTurnRow, RecordingSummary, SharedPrefix
    from ...workload.recorded.traffic import RecordingCall


def _turns(calls: list[RecordingCall]) -> dict[str, list[RecordingCall]]:
    out: dict[str, list[RecordingCall]] = {}
    for c in calls:
        out.setdefault(c.turn, []).append(c)
    return {t: sorted(cs, key=lambda c: c.step) for t, cs in out.items()}


def _counted(calls: list[RecordingCall]) -> list[RecordingCall]:
    return [c for c in calls if c.prompt_tokens is not None]


def _shared_prefix(turns: dict[str, list[RecordingCall]], per_char: float | None) -> SharedPrefix | None:
    """The prefix every turn's first request shares (None: a single turn)."""
    firsts = [cs[0] for cs in turns.values()]
    if len(firsts) < 2:
        return None
    k = 0
    while all(len(c.prefix) > k and c.prefix[k] == firsts[0].prefix[k] for c in firsts):
        k += 1
    tools = firsts[0].tools if firsts[0].tools_key and all(c.tools_key == firsts[0].tools_key for c in firsts) else 0
    chars = (firsts[0].chars[k - 1] if k else 0) + (firsts[0].tools_chars if tools else 0)
    reused = [c.cached_tokens for c in firsts[1:] if c.cached_tokens is not None]
    return {"turns": len(firsts), "messages": k, "tools": tools, "chars": chars,
            "tokens_estimate": chars * per_char if per_char is not None and chars else None,
            "cached_median": statistics.median(reused) if reused and any(reused) else None,
            "cached_calls": len(reused)}


def _within(turns: dict[str, list[RecordingCall]]) -> float | None:
    """Σ min(prompt of the previous call, prompt) / Σ prompt over a turn's later calls with counts."""
    held = total = 0
    for cs in turns.values():
        for prev, c in zip(cs, cs[1:]):
            if prev.prompt_tokens is not None and c.prompt_tokens:
                held += min(prev.prompt_tokens, c.prompt_tokens)
                total += c.prompt_tokens
    return held / total if total else None


def _engine_time(calls: list[RecordingCall], turns: dict[str, list[RecordingCall]]) -> EngineTime:
    timed = [c for c in calls if c.prompt_ms is not None and c.predicted_ms is not None and c.latency_s is not None]
    prefill = sum(c.prompt_ms or 0.0 for c in timed) / 1000
    decode = sum(c.predicted_ms or 0.0 for c in timed) / 1000
    latency = sum(c.latency_s or 0.0 for c in timed)
    between = 0.0
    for cs in turns.values():
        for prev, c in zip(cs, cs[1:]):
            if prev.t_start is not None and prev.latency_s is not None and c.t_start is not None:
                between += max(0.0, c.t_start - (prev.t_start + prev.latency_s))
    return {"calls": len(timed), "latency_s": latency, "prefill_s": prefill, "decode_s": decode,
            "other_s": max(0.0, latency - prefill - decode),
            "calls_latency_s": sum(c.latency_s or 0.0 for c in calls), "between_calls_s": between}


def recording_summary(calls: list[RecordingCall]) -> RecordingSummary:
    """The recording's first screen, as data (see the module's docstring)."""
    turns = _turns(calls)
    counted = _counted(calls)
    chars = sum((c.chars[-1] if c.chars else 0) + c.tools_chars for c in counted)
    prompt = sum(c.prompt_tokens or 0 for c in counted)
    per_char = prompt / chars if chars and prompt else None
    per_turn = [len(cs) for cs in turns.values()]
    rounds = [sum(1 for c in cs if c.tool_calls) for cs in turns.values()]
    by: dict[str, int] = {}
    for c in calls:
        key = c.counted_by or "none"
        by[key] = by.get(key, 0) + 1
    cached = [c.cached_tokens for c in counted if c.cached_tokens is not None]
    rows: list[RecordedTurnRow] = []
    for t, cs in turns.items():
        cnt = _counted(cs)
        rows.append({"turn": t, "calls": len(cs), "tool_rounds": sum(1 for c in cs if c.tool_calls),
                     "first_prompt": cs[0].prompt_tokens, "last_prompt": cs[-1].prompt_tokens,
                     "prompt_tokens": sum(c.prompt_tokens or 0 for c in cnt) if cnt else None,
                     "cached_tokens": sum(c.cached_tokens or 0 for c in cnt) if cnt else None,
                     "output_tokens": sum(c.completion_tokens or 0 for c in cnt) if cnt else None,
                     "model_s": sum(c.latency_s or 0.0 for c in cs)})
    return {
        "turns": len(turns), "calls": len(calls),
        "calls_per_turn": {"min": min(per_turn), "median": statistics.median(per_turn), "max": max(per_turn)},
        "tool_rounds": sum(rounds), "turns_with_tool_rounds": sum(1 for r in rounds if r),
        "max_tool_rounds": max(rounds),
        "counted_by": by, "counted_calls": len(counted),
        "prompt_tokens": prompt, "cached_tokens": sum(cached) if cached else None, "cached_calls": len(cached),
        "output_tokens": sum(c.completion_tokens or 0 for c in counted),
        "tokens_per_char": per_char, "shared_prefix": _shared_prefix(turns, per_char),
        "within_turn_share": _within(turns), "engine_time": _engine_time(calls, turns), "per_turn": rows,
    }


def cache_served(calls: list[RecordingCall]) -> bool:
    """Whether the engine reported cached tokens that its cache served (any call with a cached token)."""
    return any(c.cached_tokens for c in calls)


def traffic_calls(calls: list[RecordingCall], summary: RecordingSummary) -> list[tuple[RecordingCall, TrafficCall]]:
    """Each call with token counts as a traffic call (its turn the session, its step the round, arrival from its
    start), cached tokens as served or, where none was, as a prefix cache could have served them."""
    served = cache_served(calls)
    prefix = summary.get("shared_prefix")
    shared = prefix.get("tokens_estimate") if prefix else None
    stamps = [c.t_start for c in calls if c.t_start is not None]
    t0 = min(stamps) if stamps else 0.0
    prev: dict[str, RecordingCall] = {}
    out = []
    for c in calls:
        before = prev.get(c.turn)
        prev[c.turn] = c
        if c.prompt_tokens is None or c.completion_tokens is None:
            continue
        if served:
            cached = c.cached_tokens
        elif before is not None and before.prompt_tokens is not None:
            cached = min(before.prompt_tokens, c.prompt_tokens)
        elif c.step == 0 and shared and c.turn != calls[0].turn:
            cached = min(int(shared), c.prompt_tokens)
        else:
            cached = 0
        out.append((c, TrafficCall(input_tokens=c.prompt_tokens, output_tokens=c.completion_tokens,
                                   arrival_s=None if c.t_start is None else c.t_start - t0, cached_tokens=cached,
                                   latency_s=c.latency_s, ttft_s=c.ttft_s, model=c.model, session=c.turn,
                                   round=c.step)))
    return out


def timing_rates(calls: list[RecordingCall]) -> Rates | None:
    """The engine's own rates over the calls with llama.cpp's timings (None: none has them, or no time)."""
    timed = [c for c in calls if c.prompt_ms and c.predicted_ms and c.prompt_tokens is not None
             and c.completion_tokens]
    computed = sum(c.prompt_tokens - (c.cached_tokens or 0) for c in timed if c.prompt_tokens is not None)
    prefill_ms = sum(c.prompt_ms or 0.0 for c in timed)
    decode_ms = sum(c.predicted_ms or 0.0 for c in timed)
    if not timed or computed <= 0 or prefill_ms <= 0 or decode_ms <= 0:
        return None
    inputs = [float(c.prompt_tokens) for c in timed if c.prompt_tokens is not None]
    return Rates(prefill_tps=computed / prefill_ms * 1000, decode_tps=sum(c.completion_tokens or 0 for c in timed)
                 / decode_ms * 1000, source=f"the recording's llama.cpp timings ({len(timed)} calls)",
                 prefill_source="Σ computed prompt tokens / Σ prompt_ms",
                 decode_source="Σ predicted_n / Σ predicted_ms", prefill_input_range=(min(inputs), max(inputs)),
                 conditions=("the engine the recording was made on, as it served the agent",))
