"""The calls a what-if serves: a trace's calls, planned as trace replay sends them (issue 15).

:func:`plan_calls` turns :class:`~leverbench.workload.traces.TrafficCall` records into
:class:`PlannedCall` s exactly as a ``[[load]] mode = "trace"`` stage replays them
(:mod:`leverbench.runner.load`), so that a forecast and its verification serve the same calls:

    the first ``requests`` calls of the file; calls grouped into sessions (a call without one is a session
    of its own); a session starts at its first call's arrival_s / speed, counted from the first session's
    start (a session whose first call has no arrival is left out)
    input  I = max(2, round(I_trace · scale_input))       (a single call past max_input_tokens is cut to it;
                                                           a session past it ends there)
    output O = max(1, round(O_trace · scale_output)), ≤ max_tokens
    a session's later round r sends the conversation so far plus its new tokens:
        new_r = max(1, I_r − round(C_r · scale_input));   input_r = input_{r−1} + O_{r−1} + new_r
        and goes out when round r − 1 has ended plus its tool wait / speed

and gives each call its prompt's **pieces** for the prefix cache (:mod:`.prefix_cache`), as replay builds
the text (:class:`leverbench.runner.prompts.PromptBuilder`):

    Mooncake hash ids   one piece per id of round(block_tokens · scale_input) tokens (the last one cut to
                        the prompt's length, its size then in its key), then the call's own unique rest
    a session's round   the previous round's pieces, its answer, then the new tokens
    assumed share s     (``assumed_share``, for calls that record no sharing) the leading ⌊s · I⌋ tokens are
                        text common to every call, in chunks of ``chunk_tokens``; then the unique rest
    otherwise           one unique piece: nothing to reuse
    a chat template     (``template_tokens`` T) replay sends the trace's length as the message's content, and
                        the engine's chat template adds T tokens to it (a system prompt, the roles): a first
                        prompt is then T + I tokens, its first piece the template, common to every call

``served_cached`` keeps the trace's cached tokens (× scale_input) where the serving stack reported them
as read from its cache (``cached_served``): a cache was already on when the trace was recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Hashable, Sequence

from ...schema.whatif_rows import PlanOptions
from ..base.bounds import MAX_TOKENS

if TYPE_CHECKING:
    from ...workload.traces.records import TrafficCall

#: A planned prompt's piece (a :data:`.prefix_cache.Piece`): its key a tuple whose first item is its kind ("h" a
#: Mooncake hash id, "s" a chunk of the assumed common prefix, "u" a call's own tokens, "t" the chat template,
#: "o" an answer), and its tokens.
PlanPiece = tuple[tuple[Hashable, ...], int]


@dataclass
class PlannedCall:
    """One call as the what-if serves it (see the module docstring)."""

    index: int  # the call's position among the trace's usable calls
    session: int  # planned session number, in order of start
    round: int
    input_tokens: int
    output_tokens: int
    pieces: tuple[PlanPiece, ...]
    start_s: float | None = None  # a session's first round: its start after the first session's
    wait_s: float = 0.0  # a later round: seconds after the previous round's end (its tool wait / speed)
    served_cached: int | None = None
    out_piece: PlanPiece | None = None  # the answer, which the session's next round carries


@dataclass
class Plan:
    """The planned calls, by session (each session's rounds in order), and what was left out and why."""

    sessions: list[list[PlannedCall]]
    left_out: dict[str, int] = field(default_factory=dict)
    options: PlanOptions = field(default_factory=PlanOptions)
    has_arrivals: bool = True

    @property
    def calls(self) -> list[PlannedCall]:
        return [c for s in self.sessions for c in s]


def _first_pieces(call: TrafficCall, index: int, inp: int, block: int, assumed_share: float | None,
                  chunk: int) -> tuple[PlanPiece, ...]:
    """The pieces of a session's first prompt (see the module docstring)."""
    out: list[PlanPiece] = []
    used = 0
    if call.prefix_blocks:
        for h in call.prefix_blocks:
            if used >= inp:
                break
            n = min(block, inp - used)
            out.append((("h", h) if n == block else ("h", h, n), n))
            used += n
    elif assumed_share is not None and call.cached_tokens is None:
        shared = int(assumed_share * inp)
        j = 0
        while used < shared:
            n = min(chunk, shared - used)
            out.append((("s", j) if n == chunk else ("s", j, n), n))
            used += n
            j += 1
    if used < inp:
        out.append((("u", index), inp - used))
    return tuple(out)


def plan_calls(calls: Sequence[TrafficCall], *, speed: float = 1.0, scale_input: float = 1.0, scale_output: float = 1.0,
               requests: int | None = None, max_input_tokens: int | None = None, max_tokens: int | None = None,
               block_tokens: int = 512, cached_served: bool = False, assumed_share: float | None = None,
               chunk_tokens: int = 16, template_tokens: int = 0) -> Plan:
    """The calls as trace replay would send them, with their prompts' pieces (see the module docstring).

    Calls without any arrival time (a log that records none) are kept, each a session starting when the
    previous one has ended (``Plan.has_arrivals`` False: the simulation serves them back to back).
    """
    if not all(0 < x < math.inf for x in (speed, scale_input, scale_output)):
        raise ValueError(f"speed, scale_input and scale_output must be positive and finite (got {speed}, "
                         f"{scale_input}, {scale_output})")
    left: dict[str, int] = {}

    def leave(reason: str, n: int = 1) -> None:
        left[reason] = left.get(reason, 0) + n

    calls = list(calls)
    if requests is not None and len(calls) > requests:
        leave("beyond --requests", len(calls) - requests)
        calls = calls[:requests]
    has_arrivals = any(c.arrival_s is not None for c in calls)
    groups: dict[tuple[str, object], list[tuple[int, TrafficCall]]] = {}
    for idx, c in enumerate(calls):
        groups.setdefault(("s", c.session) if c.session is not None else ("r", idx), []).append((idx, c))
    block = max(1, round(block_tokens * scale_input))
    planned: list[tuple[float, int, list[PlannedCall]]] = []
    for rows in groups.values():
        rows.sort(key=lambda ic: (ic[1].round if ic[1].round is not None else 0, ic[0]))
        arrival = rows[0][1].arrival_s
        if has_arrivals and arrival is None:
            leave("no arrival time", len(rows))
            continue
        start = arrival / speed if has_arrivals and arrival is not None else 0.0
        session: list[PlannedCall] = []
        for idx, c in rows:
            inp = max(2, round(c.input_tokens * scale_input))
            out = max(1, round(c.output_tokens * scale_output))
            if max_tokens is not None:
                out = min(out, max_tokens)
            served = (round(c.cached_tokens * scale_input) if cached_served and c.cached_tokens is not None
                      else None)
            if out > MAX_TOKENS or (not session and max_input_tokens is None and inp + template_tokens > MAX_TOKENS):
                raise ValueError(f"call {idx + 1} of the trace would have {inp + template_tokens:,} input and {out:,} "
                                 f"output tokens, more than {MAX_TOKENS:,} (lower the scale, or cap the call with "
                                 "--max-input-tokens / --max-tokens)")
            if not session:
                if max_input_tokens is not None and inp > max_input_tokens:
                    if c.session is not None:
                        leave("session past max_input_tokens", len(rows))
                        break
                    inp = max_input_tokens
                pieces = _first_pieces(c, idx, inp, block, assumed_share, chunk_tokens)
                if template_tokens > 0:
                    pieces, inp = ((("t",), template_tokens), *pieces), inp + template_tokens
                pc = PlannedCall(idx, 0, 0, inp, out, pieces, start_s=start,
                                 served_cached=min(served, inp) if served is not None else None)
            else:
                prev = session[-1]
                new = max(1, inp - round((c.cached_tokens or 0) * scale_input))
                inp = prev.input_tokens + prev.output_tokens + new
                if max_input_tokens is not None and inp > max_input_tokens:
                    leave("session past max_input_tokens", len(rows) - len(session))
                    break
                if inp > MAX_TOKENS:
                    leave(f"session past {MAX_TOKENS:,} tokens", len(rows) - len(session))
                    break
                assert prev.out_piece is not None  # set on every planned call before it joins its session (below)
                pieces = (*prev.pieces, prev.out_piece, (("u", idx), new))
                pc = PlannedCall(idx, 0, len(session), inp, out, pieces, wait_s=(c.tool_wait_s or 0.0) / speed,
                                 served_cached=min(served, inp) if served is not None else None)
            pc.out_piece = (("o", idx), out)
            session.append(pc)
        if session:
            planned.append((start, rows[0][0], session))
    planned.sort(key=lambda p: (p[0], p[1]))
    t0 = planned[0][0] if planned else 0.0
    sessions = []
    for k, (start, _, session) in enumerate(planned):
        for pc in session:
            pc.session = k
        session[0].start_s = start - t0
        sessions.append(session)
    opts: PlanOptions = {"speed": speed, "scale_input": scale_input, "scale_output": scale_output,
                         "requests": requests, "max_input_tokens": max_input_tokens, "max_tokens": max_tokens,
                         "block_tokens": block_tokens, "template_tokens": template_tokens}
    return Plan(sessions, left, opts, has_arrivals)
