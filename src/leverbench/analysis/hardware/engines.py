"""The engines the tool started: how they ran (together or one at a time), each start and stop, per arm.

From the header's ``engines`` and the ``engine_start`` / ``engine_stop`` / ``engine_warmed`` records.  A start
and its stop share arm and ``block``: a stop is paired with the latest start of its arm and block that began
before it and has no stop yet (a run resumed by a leverbench that numbered its starts from 0 again repeats
blocks); its warm-up comes from the ``engine_warmed`` record of its arm and block (a version 2 ledger held it
in the start record).  An engine's lifetime runs from its start's ``t`` to its stop's ``t + stop_s`` (to the
end of time when no stop was recorded); ``overlaps`` counts the pairs of lifetimes of different arms that
overlap: every pair with engines together, none with engines one at a time (else a warning).  A start that
failed carries its ``error`` (counted per arm: ``failed``).  A start whose ``ready_s`` used more than
:data:`TIMEOUT_USED_WARN` of its timeout is warned about (a larger model, a slower disk, and the next start
fails), and so is a stop that did not release its devices.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Optional, Sequence, Union

from ...ledger.rows import EnginesRow, EngineStopRow, EngineWarmedRow, RunHeaderRow
from ...ledger.rows import EngineStartRow as StartRecord
from ...schema.hardware_rows import EngineArmRow, EnginesSection, EngineStartRow, Mode
from ...schema.warning_kinds import RunWarning, WarningKind
from ..base.stats import median

TIMEOUT_USED_WARN = 0.8
MODES: tuple[Mode, ...] = ("together", "one at a time")
#: A start as :func:`paired` reads it: its record, or its row in the section (arm, block, t alike).
Start = Union[StartRecord, EngineStartRow]


def _num(v: object) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _count(v: object) -> Optional[int]:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _mode(v: object) -> Optional[Mode]:
    return next((m for m in MODES if m == v), None)


def paired(starts: Sequence[Start], stops: Iterable[EngineStopRow]) -> list[Optional[EngineStopRow]]:
    """Each start's stop (None where none), by arm and block and time (module docstring)."""
    out: list[Optional[EngineStopRow]] = [None for _ in starts]
    order = sorted(range(len(starts)), key=lambda i: _num(starts[i].get("t")) or 0.0)
    for e in sorted(stops, key=lambda x: _num(x.get("t")) or 0.0):
        key, te = (e.get("arm"), e.get("block")), _num(e.get("t"))
        mine = [i for i in order if (starts[i].get("arm"), starts[i].get("block")) == key and not out[i]
                and (te is None or (_num(starts[i].get("t")) or 0.0) <= te)]
        if mine:
            out[mine[-1]] = e
    return out


def _warm_up(s: StartRecord, w: Optional[EngineWarmedRow]
             ) -> tuple[Optional[float], Optional[int], Optional[bool]]:
    """(warmup_s, warmup_calls, settled) as recorded: each from *w*, the start's ``engine_warmed`` record, where it
    holds it, else from the start record (a version 2 ledger's held them)."""
    return (w["warmup_s"] if w is not None and "warmup_s" in w else s.get("warmup_s"),
            w["warmup_calls"] if w is not None and "warmup_calls" in w else s.get("warmup_calls"),
            w["settled"] if w is not None and "settled" in w else s.get("settled"))


def start_rows(starts: Iterable[StartRecord], stops: Iterable[EngineStopRow],
               warmed: Iterable[EngineWarmedRow] = ()) -> list[EngineStartRow]:
    """Each engine start with its stop and its warm-up (module docstring), in the order recorded."""
    starts = list(starts)
    warm = {(w.get("arm"), w.get("block")): w for w in warmed}
    out: list[EngineStartRow] = []
    for s, e in zip(starts, paired(starts, stops)):
        warmup_s, warmup_calls, settled = _warm_up(s, warm.get((s.get("arm"), s.get("block"))))
        error = s.get("error")
        out.append({"arm": str(s["arm"]), "block": _count(s.get("block")), "part": s.get("part"),
                    "round": _count(s.get("round")), "t": _num(s.get("t")), "ready_s": _num(s.get("ready_s")),
                    "model_load_s": _num(s.get("model_load_s")), "warmup_s": _num(warmup_s),
                    "warmup_calls": _count(warmup_calls), "settled": settled,
                    "timeout_s": _num(s.get("timeout_s")), "timeout_from": s.get("timeout_from"),
                    "error": error if isinstance(error, str) else None,
                    "stop_s": _num(e.get("stop_s")) if e else None, "stopped": bool(e),
                    "released": e.get("released") if e else None, "check": e.get("check") if e else None})
    return out


def engine_seconds(starts: Sequence[Start], stops: Iterable[EngineStopRow]) -> float:
    """The engine-seconds of a run: over every engine start, from the start's beginning to the end of its stop
    (the stop's ``t`` + ``stop_s``; a start never stopped, e.g. a run cut off, counts to its start's end, its
    ``ready_s``, or nothing): what the engines cost, starts and warm-ups included (a tune's budget,
    :mod:`leverbench.tune`)."""
    total = 0.0
    for s, e in zip(starts, paired(starts, stops)):
        if (t := _num(s.get("t"))) is None:
            continue
        end = ((_num(e.get("t")) or t) + (_num(e.get("stop_s")) or 0.0)) if e else t + (_num(s.get("ready_s")) or 0.0)
        total += max(end - t, 0.0)
    return total


def overlaps(starts: Sequence[Start], stops: Iterable[EngineStopRow]) -> int:
    """How many pairs of engine lifetimes of different arms overlapped in time (module docstring)."""
    spans = [(s.get("arm"), t, (_num(e.get("t")) or 0.0) + (_num(e.get("stop_s")) or 0.0) if e else math.inf)
             for s, e in zip(starts, paired(starts, stops)) if (t := _num(s.get("t"))) is not None]
    return sum(1 for i, (a, s0, e0) in enumerate(spans) for b, s1, e1 in spans[i + 1:]
               if a != b and s0 < e1 and s1 < e0)


def arm_rows(rows: list[EngineStartRow]) -> list[EngineArmRow]:
    """Each arm's starts summed up: medians and the slowest, the slowest start's share of its timeout, whether
    every stop released its devices (False: one did not; None: none recorded, or one whose GPUs were not
    checked: ``unchecked`` counts those)."""
    out: list[EngineArmRow] = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        ready = [r["ready_s"] for r in mine if r["ready_s"] is not None]
        used = [r["ready_s"] / r["timeout_s"] for r in mine if r["ready_s"] is not None and r["timeout_s"]]
        loads = [r["model_load_s"] for r in mine if r["model_load_s"] is not None]
        warm = [r["warmup_s"] for r in mine if r["warmup_s"] is not None and r["part"] != "discovery"]
        released = [r["released"] for r in mine if r["released"] is not None]
        unchecked = sum(1 for r in mine if r["stopped"] and r["released"] is None)
        out.append({"arm": arm, "starts": len(mine), "failed": sum(1 for r in mine if r["error"] is not None),
                    "ready_s_median": median(ready) if ready else None,
                    "ready_s_max": max(ready) if ready else None,
                    "model_load_s_median": median(loads) if loads else None,
                    "warmup_s_median": median(warm) if warm else None,
                    "timeout_s": mine[-1]["timeout_s"], "timeout_from": mine[-1]["timeout_from"],
                    "timeout_used": max(used) if used else None,
                    "released": False if False in released else (True if released and not unchecked else None),
                    "unchecked": unchecked})
    return out


def engines_section(header: RunHeaderRow, starts: Iterable[StartRecord], stops: Iterable[EngineStopRow],
                    warmed: Iterable[EngineWarmedRow] = ()) -> tuple[EnginesSection, list[RunWarning]]:
    """``summary.json`` ``engines`` and its warnings (module docstring)."""
    stops = list(stops)
    engines = header.get("engines")
    e: EnginesRow | None = engines if isinstance(engines, Mapping) else None
    rows = start_rows(starts, stops, warmed)
    mode = _mode(e.get("mode")) if e else None
    section: EnginesSection = {"mode": mode, "declared": _mode(e.get("declared")) if e else None,
                               "reason": e.get("reason") if e else None,
                               "server_state": e.get("server_state") if e else None, "starts": rows,
                               "arms": arm_rows(rows), "overlaps": overlaps(rows, stops)}
    warnings = []
    if mode == "one at a time" and section["overlaps"]:
        warnings.append(RunWarning(WarningKind.ENGINES_OVERLAP, f"engines one at a time, yet {section['overlaps']} "
                                   "pair(s) of engines were up at once (their start and stop records overlap)"))
    for r in rows:
        if r["released"] is False:
            warnings.append(RunWarning(WarningKind.ENGINE_NOT_RELEASED, f"arm {r['arm']!r}: its engine (start "
                                       f"{r['block']}) stopped without releasing its devices: {r['check']}", r["arm"]))
    for a in section["arms"]:
        if a["timeout_used"] is not None and a["timeout_used"] > TIMEOUT_USED_WARN:
            warnings.append(RunWarning(WarningKind.ENGINE_START_SLOW, f"arm {a['arm']!r}: its slowest engine start "
                                       f"took {a['ready_s_max']:.0f} s, {a['timeout_used']:.0%} of its start timeout "
                                       f"({a['timeout_s']:.0f} s, {a['timeout_from']}); a slower one fails: raise "
                                       "the arm's engine startup_timeout_s", a["arm"]))
    return section, warnings
