"""The machine's speed between two runs, from the drift sentinels both ran, and the later run's turns put on the
baseline's speed where that is what changed.

A sentinel (:mod:`..experiment.drift`) is the same short call every time — the same prompt behind a fresh tag and the
same forced length — so its decode speed (tokens after the first over the time after the first) and prefill speed
(1 / time to first token, llama.cpp's own timings where sent) measure the arm's endpoint, not the case.  Across runs,
the sentinels of an arm measure the machine only where nothing else about the arm changed: an engine upgrade, another
model file, another flag, another GPU changes the sentinel's speed too, and correcting by it would take out the very
change being compared.  So:

- the **reference** arms are the matched arms whose knobs are all the same in both runs, on a host whose facts are the
  same, whose sentinels are the same call (forced length, prompt length), and which did not drift within either run;
- per phase, the speed ratio later / baseline is the geometric mean over the reference arms of each arm's ratio of
  geometric-mean sentinel speeds, with a Welch interval on log speeds (:mod:`.stats`), at 99.5 % each (the two
  phases together at 99 %: a correction not needed moves every ratio of the run by the sentinels' own scatter, so
  it must be rare where nothing changed — with 10 % noise per request and 9 sentinels a run, a spurious one moves
  the ratios by about 15 %);
- the machine's speed **changed** when either phase's interval excludes 1; then every later turn is put on the
  baseline's speed: each of its calls' prefill time (time to first token) times the prefill ratio f_p, its decode
  time (the rest of the call) times the decode ratio f_d — turn_s + Σ ttft·(f_p − 1) + (latency − ttft)·(f_d − 1),
  as a run's own common drift is taken out (:func:`..experiment.drift.adjusted_turn_s`) — and the correction's own
  uncertainty (each phase's standard error weighted by the phase's share of the later cell's time) is added to the
  cells' intervals;
- no correction where nothing shows a change, where no arm is a reference (every arm changed, or the host did: then
  the sentinels measure the change compared, and it is said), or where a run has no sentinels (said: the machine's
  speed between the runs is unknown and inside the ratios).

An arm that drifted within either run (its own trend detected, :func:`..experiment.drift.drift`) has no one speed in
that run: its cells are refused (:mod:`.compare`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...schema.compare_rows import ArmMatch, ChangedRow, MachineRow, SpeedChange
from .runs import RunView
from .stats import LogDiff, geomean, welch

CONFIDENCE = 1.0 - 0.01 / 2  # each of the two phases (module docstring)


@dataclass(frozen=True)
class Machine:
    """The row, and the speed ratios (later / baseline) used to correct, with their log standard errors."""

    row: MachineRow
    f_decode: float = 1.0
    f_prefill: float = 1.0
    se_decode: float = 0.0
    se_prefill: float = 0.0
    df: float | None = None


def _phase(base: RunView, later: RunView, pairs: Sequence[tuple[str, str]], decode: bool
           ) -> tuple[SpeedChange | None, LogDiff | None]:
    diffs, nb, nl = [], 0, 0
    for b, lt in pairs:
        xb = [s.decode if decode else s.prefill for s in base.sentinels.get(b, [])]
        xl = [s.decode if decode else s.prefill for s in later.sentinels.get(lt, [])]
        d = welch([x for x in xb if x], [x for x in xl if x])
        if d is not None:
            diffs.append(d)
            nb, nl = nb + len([x for x in xb if x]), nl + len([x for x in xl if x])
    g = geomean(diffs)
    if g is None:
        return None, None
    iv = g.interval(CONFIDENCE)
    return {"change": math.expm1(g.d), "low": iv[0] - 1.0 if iv else None, "high": iv[1] - 1.0 if iv else None,
            "sentinels_baseline": nb, "sentinels_later": nl}, g


def _same_call(base: RunView, later: RunView, b: str, lt: str) -> bool:
    kb = {(s.tokens, s.chars) for s in base.sentinels.get(b, [])}
    kl = {(s.tokens, s.chars) for s in later.sentinels.get(lt, [])}
    return bool(kb) and kb == kl


def machine_speed(base: RunView, later: RunView, arms: Sequence[ArmMatch], changed: Sequence[ChangedRow]) -> Machine:
    """The machine's speed between the runs and whether the later turns are corrected (module docstring)."""
    tol = base.drift_tolerance
    host = [c["what"] for c in changed if c["scope"] == "host"]
    matched = [(m["arm"], m["later"]) for m in arms if m["later"] is not None]
    refs = [(b, lt) for b, lt in matched if not any(c["scope"] == "arm" and c["arm"] == b for c in changed)
            and b not in base.drifted and lt not in later.drifted and _same_call(base, later, b, lt)]

    def row(text: str, detected: bool = False, corrected: bool = False, dec: SpeedChange | None = None,
            pre: SpeedChange | None = None, reference: Sequence[str] = ()) -> MachineRow:
        return {"reference": list(reference), "decode": dec, "prefill": pre, "detected": detected,
                "corrected": corrected, "tolerance": tol, "text": text}

    if not any(base.sentinels.get(b) for b, _ in matched) or not any(later.sentinels.get(lt) for _, lt in matched):
        who = "either run" if not any(base.sentinels.values()) and not any(later.sentinels.values()) else \
            "one of the runs"
        return Machine(row(f"machine speed between the runs unknown: {who} ran no drift sentinels "
                           "(sentinel_tokens = 0); any change of the machine's speed is inside the ratios"))
    if host:
        return Machine(row("not corrected: the host changed (" + ", ".join(host[:4]) + "), so the sentinels "
                           "measure the change compared, not the machine's state"))
    if not refs:
        return Machine(row("not corrected: every matched arm changed in a knob (or drifted, or ran another "
                           "sentinel), so no arm's sentinels measure the machine apart from the change compared"))
    dec, gd = _phase(base, later, refs, True)
    pre, gp = _phase(base, later, refs, False)
    names = [b for b, _ in refs]
    shown = [(phase, c) for phase, c in (("decode", dec), ("prefill", pre)) if c is not None and c["low"] is not None
             and c["high"] is not None and (c["low"] > 0 or c["high"] < 0)]
    words = "; ".join(f"{phase} {_words(c)}" for phase, c in (("decode", dec), ("prefill", pre)) if c is not None)
    if not shown or gd is None:
        return Machine(row(f"sentinels of {', '.join(names)}: {words or 'no speed to read'}: no change of the "
                           "machine's speed shown, not corrected", dec=dec, pre=pre, reference=names))
    text = (f"corrected for the machine's speed: the sentinels of {', '.join(names)} (unchanged in every knob) ran "
            f"{words} in the later run; its turns are put on the baseline's speed")
    se_d = gd.se or 0.0
    se_p = (gp.se or 0.0) if gp is not None else 0.0
    dfs = [g.df for g in (gd, gp) if g is not None and g.df]
    return Machine(row(text, True, True, dec, pre, names), math.exp(gd.d), math.exp(gp.d) if gp is not None else 1.0,
                   se_d, se_p, min(dfs) if dfs else None)


def _words(c: SpeedChange) -> str:
    if c["change"] is None:
        return "unknown"
    if c["low"] is None or c["high"] is None:
        return f"{c['change']:+.1%} (no interval)"
    return f"{c['change']:+.1%} [{c['low']:+.1%}, {c['high']:+.1%}]"


def corrected_turns(run: RunView, m: Machine) -> np.ndarray:
    """The later run's turn times on the baseline's machine speed (module docstring); as measured without one."""
    T, C = run.ds.turn, run.ds.call
    if not m.row["corrected"]:
        return np.asarray(T.turn_s, float)
    ttft = np.where(np.isnan(C.ttft_s), 0.0, C.ttft_s)
    dec = np.where(np.isnan(C.latency_s), 0.0, C.latency_s) - ttft
    change = ttft * (m.f_prefill - 1.0) + dec * (m.f_decode - 1.0)
    change = np.where(np.isfinite(change) & (C.turn >= 0), change, 0.0)
    out: np.ndarray = T.turn_s + np.bincount(np.maximum(C.turn, 0), weights=change, minlength=len(T))[:len(T)]
    return out


def shares(run: RunView, rows: Sequence[int]) -> tuple[float, float]:
    """The prefill and decode shares of the time of the later turns *rows* (their calls' ttft and the rest)."""
    T, C = run.ds.turn, run.ds.call
    sel = np.isin(C.turn, np.asarray(rows, np.int64))
    ttft = float(np.nansum(C.ttft_s[sel]))
    dec = float(np.nansum(C.latency_s[sel])) - ttft
    total = float(np.nansum(T.turn_s[np.asarray(rows, np.int64)])) if len(rows) else 0.0
    return (ttft / total, dec / total) if total > 0 else (0.0, 0.0)
