"""A recording's own part of ``leverbench analyze``'s output: the lines under the headline (turns, calls per turn,
tool rounds, tokens and where their counts came from, the prefix the turns share, where the engine's time went)
and a table of the turns.  Formats :func:`leverbench.analysis.traffic.recording.recording_summary`'s result
(``result["recording"]``); computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .table import Table

if TYPE_CHECKING:
    from ..schema.traffic_rows import RecordingSummary


def _n(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}" if abs(x) >= 100 or x == int(x) else f"{x:.3g}"


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "–"


def _s(n: float, one: str, many: str | None = None) -> str:
    return f"{_n(n)} {one if n == 1 else (many or one + 's')}"


def _prefix_line(r: RecordingSummary) -> str:
    sp = r["shared_prefix"]
    within = r["within_turn_share"]
    inside = (f"; within a turn, {within:.0%} of a later call's prompt tokens repeat the call before it"
              if within is not None else "")
    if sp is None:
        return "Shared prefix: one turn, nothing shared across turns" + inside
    what = [_s(sp["messages"], "message") for _ in (0,) if sp["messages"]] + \
        [_s(sp["tools"], "tool schema") for _ in (0,) if sp["tools"]]
    if not what:
        return f"Shared prefix: the {sp['turns']} turns' first requests differ from their first message" + inside
    est = (f", ≈ {_n(sp['tokens_estimate'])} tokens at the recording's {r['tokens_per_char']:.3g} tokens per "
           "character" if sp["tokens_estimate"] else "")
    reused = (f"; measured: the engine's cache served a median of {_n(sp['cached_median'])} tokens of a turn's "
              "first call" if sp["cached_median"] is not None else "")
    return (f"Shared prefix: every turn's first request opens with the same {' and '.join(what)} "
            f"({sp['chars']:,} characters{est}){reused}{inside}")


def _time_line(r: RecordingSummary) -> str:
    t = r["engine_time"]
    between = (f"; between a turn's calls (the agent's tools, its own work): {t['between_calls_s']:.3g} s"
               if r["calls"] > r["turns"] else "")
    if not t["calls"]:
        return (f"Where the time went: the calls took {t['calls_latency_s']:.3g} s as the proxy saw them; no engine "
                f"timings to split it{between}")
    lat = t["latency_s"]
    return (f"Where the time went (the engine's timings, {_s(t['calls'], 'call')}, {lat:.3g} s of latency): "
            f"prefill {_share(t['prefill_s'], lat)}, decode {_share(t['decode_s'], lat)}, other "
            f"{_share(t['other_s'], lat)}{between}")


def recording_lines(r: RecordingSummary | None) -> list[str]:
    """The recording's lines (none for other traffic: *r* None)."""
    if not r:
        return []
    cpt = r["calls_per_turn"]
    spread = f"{_n(cpt['min'])}–{_n(cpt['max'])}, median {_n(cpt['median'])}" if cpt["min"] != cpt["max"] else \
        _n(cpt["min"])
    rounds = (f"tool rounds: {r['tool_rounds']} in {_s(r['turns_with_tool_rounds'], 'turn')} (at most "
              f"{r['max_tool_rounds']} in a turn)" if r["tool_rounds"] else "tool rounds: none (no answer asked for "
              "a tool)")
    by = r["counted_by"]
    counted = ", ".join(f"{k} at {n} of {r['calls']} calls" for k, n in by.items() if k != "none")
    missing = by.get("none", 0)
    cached = (f" (cached {_n(r['cached_tokens'])}, {_share(r['cached_tokens'], r['prompt_tokens'])})"
              if r["cached_tokens"] is not None else " (cached: not reported)")
    tokens = (f"Tokens: prompt {_n(r['prompt_tokens'])}{cached}, output {_n(r['output_tokens'])}; counts from "
              f"{counted or 'nowhere'}" + (f"; {_s(missing, 'call')} without counts (streamed without usage, no "
                                           "engine timings)" if missing else ""))
    return [f"Recording: {_s(r['turns'], 'turn')}, {_s(r['calls'], 'call')} (per turn: {spread}); {rounds}",
            tokens, _prefix_line(r), _time_line(r)]


def turns_table(r: RecordingSummary | None) -> Table | None:
    """The recording's turns (None for other traffic: *r* None)."""
    if not r:
        return None
    rows = [[t["turn"], str(t["calls"]), str(t["tool_rounds"]), f"{_n(t['first_prompt'])} → {_n(t['last_prompt'])}",
             _n(t["prompt_tokens"]), _n(t["cached_tokens"]), _n(t["output_tokens"]), f"{t['model_s']:.3g}"]
            for t in r["per_turn"]]
    return Table("turns", "Turns as recorded (prompt tokens of the first call → the last)",
                 ["turn", "calls", "tool rounds", "prompt", "prompt Σ", "cached Σ", "output Σ", "calls s"], rows)
