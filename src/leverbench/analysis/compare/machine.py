"""The machine's speed between two runs, from the drift sentinels both ran, and the later run's turns put on the
baseline's speed where that is what changed.

A sentinel (:mod:`..experiment.drift`) is the same short call every time — the same prompt behind a fresh tag and the
same forced length — so its decode speed (tokens after the first over the time after the first) measures the arm's
endpoint, not the case.  Its time to the first token (llama.cpp's ``prompt_ms`` where sent) is the prefill of a short
prompt *and the step that samples the first token* (and any wait for the engine's next step): on a 72-token prompt
mostly decode — on the simulator a decode 8 % slower moved it by 17 %.  So the sentinels measure **prefill** only
where their time to the first token is at least :data:`PREFILL_STEPS` decode steps (the sentinel's own 1 / decode
speed; the median over the reference sentinels of both runs), so that the decode in it is at most about a quarter of
it; the prefill time is then the time to the first token less one decode step.  Otherwise only decode is corrected,
and the row says so.

Across runs, the sentinels of an arm measure the machine only where nothing else about the arm changed: an engine
upgrade, another model file, another flag, another GPU changes the sentinel's speed too, and correcting by it would
take out the very change being compared.  So:

- the **reference** arms are the matched arms whose knobs are all the same in both runs, on a host whose facts are the
  same, whose sentinels are the same call (forced length, prompt length), and which did not drift within either run;
- per phase, the speed ratio later / baseline is the geometric mean over the reference arms of each arm's ratio of
  geometric-mean sentinel speeds, with a Welch interval on log speeds (:mod:`.stats`), at 99.5 % each (the two
  phases together at 99 %: a correction not needed moves every ratio of the run by the sentinels' own scatter, so
  it must be rare where nothing changed — with 10 % noise per request and 9 sentinels a run, a spurious one moves
  the ratios by about 15 %);
- the reference arms must **agree**: where two of them have intervals of a phase's log ratio (each at 99.5 %) that do
  not overlap, the change is not one machine's speed, and nothing is corrected (said);
- the machine's speed **changed** when either phase's interval excludes 1; then the later run's turns are also put on
  the baseline's speed: each of its calls' prefill time (time to first token) times the prefill ratio f_p, its
  decode time (the rest of the call) times the decode ratio f_d — turn_s + Σ ttft·(f_p − 1) + (latency − ttft)·(f_d
  − 1), as a run's own common drift is taken out (:func:`..experiment.drift.adjusted_turn_s`) — and the correction's
  own uncertainty (each phase's standard error weighted by the phase's share of the later cell's time) is added to
  the corrected intervals.  The corrected figures are shown beside the measured ones; the exit code follows the
  measured ones unless ``--correct-machine`` (:mod:`.compare`): nothing the ledgers record tells a slower machine from
  a slower engine that reports the same version, so correcting is the user's call.  An arm that is the only
  reference arm is corrected by its own sentinels alone, which take out any change of its own endpoint (said);
- no correction where nothing shows a change, where no arm is a reference (each arm's reason is said: a knob changed,
  it drifted within a run, it ran another sentinel; or the host changed: then the sentinels measure the change
  compared), or where a run has no sentinels (said: the machine's speed between the runs is unknown and inside the
  ratios).

An arm that drifted within either run (its own trend detected, :func:`..experiment.drift.drift`) has no one speed in
that run: its cells are refused (:mod:`.compare`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...schema.compare_rows import ArmMatch, ChangedRow, MachineRow, SpeedChange
from .runs import RunView, Sentinel
from .stats import LogDiff, geomean, welch

CONFIDENCE = 1.0 - 0.01 / 2  # each of the two phases (module docstring)
PREFILL_STEPS = 8.0  # the sentinels' time to first token must be this many decode steps to time prefill


@dataclass(frozen=True)
class Machine:
    """The row, and the speed ratios (later / baseline) used to correct, with their log standard errors."""

    row: MachineRow
    f_decode: float = 1.0
    f_prefill: float = 1.0
    se_decode: float = 0.0
    se_prefill: float = 0.0
    df: float | None = None


def _decode(s: Sentinel) -> float | None:
    return s.decode


def _prefill(s: Sentinel) -> float | None:
    """The sentinel's prefill speed: 1 / (time to first token − one decode step), or None."""
    if not s.first_s or not s.decode:
        return None
    pre = s.first_s - 1.0 / s.decode
    return 1.0 / pre if pre > 0 else None


def _arm_diffs(base: RunView, later: RunView, pairs: Sequence[tuple[str, str]], speed: Callable[[Sentinel],
               float | None]) -> list[tuple[str, LogDiff, int, int]]:
    out = []
    for b, lt in pairs:
        xb = [v for v in map(speed, base.sentinels.get(b, [])) if v]
        xl = [v for v in map(speed, later.sentinels.get(lt, [])) if v]
        d = welch(xb, xl)
        if d is not None:
            out.append((b, d, len(xb), len(xl)))
    return out


def _phase(diffs: Sequence[tuple[str, LogDiff, int, int]]) -> tuple[SpeedChange | None, LogDiff | None]:
    g = geomean([d for _, d, _, _ in diffs])
    if g is None:
        return None, None
    iv = g.interval(CONFIDENCE)
    return {"change": math.expm1(g.d), "low": iv[0] - 1.0 if iv else None, "high": iv[1] - 1.0 if iv else None,
            "sentinels_baseline": sum(x[2] for x in diffs), "sentinels_later": sum(x[3] for x in diffs)}, g


def _disagree(diffs: Sequence[tuple[str, LogDiff, int, int]]) -> str | None:
    """The reference arms whose intervals of the log ratio do not overlap, in words; None where they agree."""
    known = [(a, d.d, iv) for a, d, _, _ in diffs if (iv := d.interval(CONFIDENCE)) is not None]
    for i, (a, da, (lo_a, hi_a)) in enumerate(known):
        for b, db, (lo_b, hi_b) in known[i + 1:]:
            if hi_a < lo_b or hi_b < lo_a:
                return (f"{a} {math.expm1(da):+.1%} [{lo_a - 1:+.1%}, {hi_a - 1:+.1%}] against "
                        f"{b} {math.expm1(db):+.1%} [{lo_b - 1:+.1%}, {hi_b - 1:+.1%}]")
    return None


def _prefill_steps(base: RunView, later: RunView, refs: Sequence[tuple[str, str]]) -> tuple[float | None, str]:
    """The reference sentinels' median time to first token in decode steps (both runs), and it in words."""
    steps, first, prompt = [], [], []
    for run, arms in ((base, [b for b, _ in refs]), (later, [lt for _, lt in refs])):
        for s in (s for a in arms for s in run.sentinels.get(a, [])):
            if s.first_s and s.decode:
                steps.append(s.first_s * s.decode)
                first.append(s.first_s)
            if s.prompt_tokens:
                prompt.append(s.prompt_tokens)
    if not steps:
        return None, "no sentinel with both a time to first token and a decode speed"
    n = float(np.median(steps))
    tokens = f"on its {int(np.median(prompt))}-token prompt" if prompt else ""
    return n, (f"the sentinel's time to first token, {float(np.median(first)) * 1000:.1f} ms {tokens}, is "
               f"{n:.1f} decode steps, under {PREFILL_STEPS:g}: mostly decode")


def _not_reference(base: RunView, later: RunView, b: str, lt: str, changed: Sequence[ChangedRow]) -> str | None:
    """Why the matched arm (*b*, *lt*) is no reference arm, in words; None where it is one."""
    knobs = [c["what"] for c in changed if c["scope"] == "arm" and c["arm"] == b]
    if knobs:
        return f"{b} changed ({', '.join(knobs[:3])})"
    for who, run, a in (("baseline", base, b), ("later run", later, lt)):
        if a in run.drifted:
            return f"{b} drifted within the {who}"
    if not _same_call(base, later, b, lt):
        return f"{b} ran another sentinel call (forced length or prompt) or none"
    return None


def _same_call(base: RunView, later: RunView, b: str, lt: str) -> bool:
    kb = {(s.tokens, s.chars) for s in base.sentinels.get(b, [])}
    kl = {(s.tokens, s.chars) for s in later.sentinels.get(lt, [])}
    return bool(kb) and kb == kl


def machine_speed(base: RunView, later: RunView, arms: Sequence[ArmMatch], changed: Sequence[ChangedRow]) -> Machine:
    """The machine's speed between the runs and whether the later turns are corrected (module docstring)."""
    tol = base.drift_tolerance
    host = [c["what"] for c in changed if c["scope"] == "host"]
    matched = [(m["arm"], m["later"]) for m in arms if m["later"] is not None]
    why_not = {b: _not_reference(base, later, b, lt, changed) for b, lt in matched}
    refs = [(b, lt) for b, lt in matched if why_not[b] is None]

    def row(text: str, detected: bool = False, corrected: bool = False, dec: SpeedChange | None = None,
            pre: SpeedChange | None = None, reference: Sequence[str] = (), notes: Sequence[str] = ()) -> MachineRow:
        return {"reference": list(reference), "decode": dec, "prefill": pre, "detected": detected,
                "corrected": corrected, "gated": False, "tolerance": tol, "text": text, "notes": list(notes)}

    if not any(base.sentinels.get(b) for b, _ in matched) or not any(later.sentinels.get(lt) for _, lt in matched):
        who = "either run" if not any(base.sentinels.values()) and not any(later.sentinels.values()) else \
            "one of the runs"
        return Machine(row(f"machine speed between the runs unknown: {who} ran no drift sentinels "
                           "(sentinel_tokens = 0); any change of the machine's speed is inside the ratios"))
    if host:
        return Machine(row("not corrected: the host changed (" + ", ".join(host[:4]) + "), so the sentinels "
                           "measure the change compared, not the machine's state"))
    if not refs:
        return Machine(row("not corrected: no matched arm's sentinels measure the machine apart from the change "
                           "compared (" + "; ".join(str(w) for w in why_not.values()) + ")"))
    names = [b for b, _ in refs]
    steps, steps_words = _prefill_steps(base, later, refs)
    use_prefill = steps is not None and steps >= PREFILL_STEPS
    dd = _arm_diffs(base, later, refs, _decode)
    pd = _arm_diffs(base, later, refs, _prefill) if use_prefill else []
    dec, gd = _phase(dd)
    pre, gp = _phase(pd)
    notes = [] if use_prefill else [f"prefill not measured by the sentinels ({steps_words}): decode only is "
                                    "corrected"]
    shown = [c for c in (dec, pre) if c is not None and c["low"] is not None and c["high"] is not None
             and (c["low"] > 0 or c["high"] < 0)]
    words = "; ".join(f"{phase} {_words(c)}" for phase, c in (("decode", dec), ("prefill", pre)) if c is not None)
    if not shown or gd is None:
        return Machine(row(f"sentinels of {', '.join(names)}: {words or 'no speed to read'}: no change of the "
                           "machine's speed shown, not corrected", dec=dec, pre=pre, reference=names, notes=notes))
    split = [f"{phase}: {w}" for phase, x in (("decode", dd), ("prefill", pd)) if (w := _disagree(x))]
    if split:
        return Machine(row(f"not corrected: the reference arms disagree on the machine's speed ({'; '.join(split)}: "
                           "intervals that do not overlap), so the change is not the machine's alone", True,
                           dec=dec, pre=pre, reference=names, notes=notes))
    if len(refs) == 1:
        notes.append(f"arm {names[0]} is the only reference arm: it is corrected by its own sentinels alone, which "
                     "would take out a change of its own endpoint the ledgers do not record")
    text = (f"changed: the sentinels of {', '.join(names)} (unchanged in every knob) ran {words} in the later run; "
            "the later turns put on the baseline's speed are shown beside the measured ones")
    se_d = gd.se or 0.0
    se_p = (gp.se or 0.0) if gp is not None else 0.0
    dfs = [g.df for g in (gd, gp) if g is not None and g.df]
    return Machine(row(text, True, True, dec, pre, names, notes), math.exp(gd.d),
                   math.exp(gp.d) if gp is not None else 1.0, se_d, se_p, min(dfs) if dfs else None)


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
