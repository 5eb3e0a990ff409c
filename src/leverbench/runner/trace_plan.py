"""A trace stage's plan, made from its traffic file before anything is sent: the sessions to replay (each call's
tokens scaled, its start divided by the speed) and the import report.  The run plans every trace stage once
before anything starts (:func:`check_traces`), so a trace that cannot be read, or whose plan is past the bounds
(a call's scaled tokens, a replay longer than a week at its speed), is bad input then, not after the turns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..bounds import MAX_TOKENS
from ..config import LoadedExperiment
from ..config.limits import MAX_STAGE_S
from ..config.stages import LoadStage
from ..errors import BadInput, ConfigError
from ..ledger.rows import TraceImportRow
from .shares import TraceCall


def check_traces(exp: LoadedExperiment) -> None:
    """Every trace stage of *exp* read and planned, before anything starts: a trace that cannot be read, or a plan
    past the bounds, is a ConfigError now, not after the turns have run."""
    for stage in exp.spec.load:
        if stage.mode == "trace":
            plan_trace(exp, stage)


def _trace_path(exp: LoadedExperiment, stage: LoadStage) -> Path:
    p = Path(stage.trace or "")
    return p if p.is_absolute() else (Path(exp.path).resolve().parent / p)

def plan_trace(exp: LoadedExperiment, stage: LoadStage) -> tuple[list[tuple[float, list[TraceCall]]], TraceImportRow]:
    """A trace stage's sessions as (start offset in s after the stage starts, calls in round order), and the
    import report; ConfigError for a trace that cannot be read or a plan past the bounds (a call's scaled
    tokens, the replay's length at its speed)."""
    from ..workload.traces import load_traffic  # noqa: PLC0415

    s = stage
    path = _trace_path(exp, stage)
    i = next((k for k, st in enumerate(exp.spec.load) if st is stage), 0)
    try:
        tl = load_traffic(path, s.trace_format)
    except BadInput as exc:  # names the file and the problem
        raise ConfigError(str(exp.path), f"load[{i}].trace", str(exc)) from None
    left_out: dict[str, int] = {}

    def leave(reason: str, n: int = 1) -> None:
        left_out[reason] = left_out.get(reason, 0) + n

    calls = tl.calls
    if s.requests is not None and len(calls) > s.warmup_requests + s.requests:
        leave("beyond warmup_requests + requests", len(calls) - s.warmup_requests - s.requests)
        calls = calls[: s.warmup_requests + s.requests]
    sessions: dict[Any, list[tuple[int, Any]]] = {}
    for idx, c in enumerate(calls):
        key = ("s", c.session) if c.session is not None else ("r", idx)
        sessions.setdefault(key, []).append((idx, c))
    planned: list[tuple[float, list[TraceCall]]] = []
    horizon = None if s.duration_s is None else s.warmup_s + s.duration_s
    for rows in sessions.values():
        rows.sort(key=lambda ic: (ic[1].round if ic[1].round is not None else 0, ic[0]))
        first = rows[0][1]
        if first.arrival_s is None:
            leave("no arrival time", len(rows))
            continue
        start = first.arrival_s / s.speed
        if horizon is not None and start >= horizon:
            leave("arrives after warmup_s + duration_s", len(rows))
            continue
        reqs = []
        for idx, c in rows:
            inp = max(2, round(c.input_tokens * s.scale_input))
            if inp > MAX_TOKENS:
                raise ConfigError(str(exp.path), f"load[{i}].scale_input",
                                  f"{s.scale_input:g} × line {idx + 1}'s {c.input_tokens:,} input tokens is "
                                  f"{inp:,} tokens, past the {MAX_TOKENS:,} one call may send (lower scale_input, "
                                  "or cap calls with max_input_tokens)")
            new = inp if len(reqs) == 0 else max(1, inp - round((c.cached_tokens or 0) * s.scale_input))
            if s.max_input_tokens is not None and inp > s.max_input_tokens:
                if len(reqs) == 0 and c.session is None:
                    inp = new = s.max_input_tokens  # a single call is cut to the cap
                else:
                    leave("session past max_input_tokens", len(rows) - len(reqs))
                    break
            out = max(1, round(c.output_tokens * s.scale_output))
            if s.max_tokens is not None:
                out = min(out, s.max_tokens)
            reqs.append(TraceCall(idx, inp, out, new, c.prefix_blocks, (c.tool_wait_s or 0.0) / s.speed))
        if reqs:
            planned.append((start, reqs))
    planned.sort(key=lambda p: p[0])
    if planned:
        t_first = planned[0][0]
        planned = [(t - t_first, r) for t, r in planned]
    if planned and planned[-1][0] > MAX_STAGE_S:
        raise ConfigError(str(exp.path), f"load[{i}].speed",
                          f"at speed {s.speed:g} the replay's last session starts {planned[-1][0]:.3g} s after its "
                          f"first; the limit is {MAX_STAGE_S:g} s (a week) per stage (raise speed, or set "
                          "duration_s or requests)")
    report = TraceImportRow(path=str(stage.trace), fmt=tl.fmt, rows_used=tl.used, rows_skipped=dict(tl.skipped),
                            left_out=left_out, replayed=sum(len(r) for _, r in planned), sessions=len(planned),
                            notes=list(tl.notes))
    return planned, report
