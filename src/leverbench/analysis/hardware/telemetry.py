"""What the GPUs did in each phase of the calls, and the energy of a turn (the ``gpu`` records).

**A GPU's series**: its readings (``gpu`` records of one source and device, in time order).  A reading at
time t covers the interval since the reading before it, (t_prev, t] (the first: one median period before
it) — NVML's utilisations are averages over the driver's last sample period, ending when read — and is
placed at that interval's middle, m = (t_prev + t) / 2.

**A call's phases** (a successful call with its first token): sent at s = t_send + connect_s (opening a
connection is neither phase), **prefill** [s, s + ttft_s) (send → first token: the queue and the prompt),
**decode** [s + ttft_s, s + latency_s] (first → last token).

**A reading's phase**, among one arm's calls in one scope (``turns``: its turns' calls, probes and sentinels,
one at a time; ``load:STAGE``: a load stage's calls): prefill when m lies in a prefill interval and in no
decode interval, decode in the reverse case, ``overlap`` when in both (calls in different phases at once:
neither's), idle when in none (between calls, inside the scope's span); how many intervals hold m is
#(starts ≤ m) − #(ends < m), for any set of intervals.  Only the readings of the GPUs the arm used (the
``gpu`` records naming it) count, within the span of the scope's calls.

**Per arm and scope** (:func:`telemetry_rows`): for each phase, the readings counted and the mean SM and
memory-bandwidth utilisation and SM clock (each GPU's mean, averaged over its GPUs) and the mean power and
memory used (summed over its GPUs); the share of readings within calls that saw both phases
(``overlap_share``) or more than one call (``concurrent_share``); the share of prefills shorter than a
sample period (``short_prefill_share``: too short for any reading to fall inside); the sampling's period
(median interval between readings) and resolution (median interval between readings whose utilisations
changed: a DCGM exporter refreshes its page every collect interval), and a ``note`` saying what limits the
figures.  This is the second source article's table — prefill compute-bound (SMs busy), decode
memory-bandwidth-bound (memory busy, SMs less so) — measured on the run's own hardware.

**Energy per turn** (:func:`energy_rows`): over each counted turn's model time [t_start, t_start + model_s]
(a turn's declared tool time is not measured), the energy of each of the arm's GPUs — the difference of its
energy counter interpolated at both ends, where the counter covers the turn, else the power readings
integrated (trapezoids, interpolated at the ends) — summed over its GPUs; per arm the median, as J per turn
and kWh per 1,000 turns (J × 1000 / 3.6·10⁶), beside GPU-hours per 1,000 turns (median turn_s × GPUs ×
1000 / 3600).  With arms sharing a GPU at once (engines together, concurrent load) the energy is the GPU's,
not the arm's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

import numpy as np

from ...schema.hardware_rows import EnergyRow, PhaseRow, TelemetryRow

FIELDS = ("sm", "dram", "mem_used_mib", "power_w", "sm_clock_mhz", "energy_j")
PHASES = ("prefill", "decode", "overlap", "idle")
SUMMED = ("power_w", "mem_used_mib")  # over an arm's GPUs: summed; the others averaged
MIN_PHASE_READINGS = 3  # fewer readings in a phase: the note says it is not resolved
J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class Series:
    """One GPU's readings (module docstring): its source, device, the arms using it, the fields its
    utilisations came from, the times and each field's values (NaN where not read)."""

    source: str
    device: str
    arms: tuple[str, ...]
    fields: Mapping[str, str]
    t: np.ndarray
    values: Mapping[str, np.ndarray]

    @property
    def period(self) -> Optional[float]:
        """The median interval between readings."""
        return float(np.median(np.diff(self.t))) if len(self.t) > 1 else None

    def midpoints(self) -> np.ndarray:
        """Where each reading is placed: the middle of the interval it covers."""
        if len(self.t) == 0:
            return self.t
        prev = np.concatenate([[self.t[0] - (self.period or 0.0)], self.t[:-1]])
        return (prev + self.t) / 2.0

    def resolution(self) -> Optional[float]:
        """The median interval between readings whose utilisations changed (None: fewer than 3 changes)."""
        u = np.vstack([np.nan_to_num(self.values["sm"], nan=-1.0), np.nan_to_num(self.values["dram"], nan=-1.0)])
        changed = np.flatnonzero(np.any(np.diff(u, axis=1) != 0, axis=0)) + 1
        return float(np.median(np.diff(self.t[changed]))) if len(changed) >= 3 else None


def _col(values: Iterable[Any], n: int) -> np.ndarray:
    out = np.array([v if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
                    for v in values], dtype=float)
    return out if len(out) == n else np.full(n, np.nan)


def series(records: Iterable[Mapping[str, Any]]) -> list[Series]:
    """Every GPU's series from the ``gpu`` records (module docstring), in the order first seen."""
    parts: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in records:
        parts.setdefault((str(r.get("source")), str(r.get("device"))), []).append(r)
    out = []
    for (source, device), recs in parts.items():
        t = np.concatenate([np.asarray(r.get("t") or [], dtype=float) for r in recs])
        vals = {f: np.concatenate([_col(r.get(f) or [], len(r.get("t") or [])) for r in recs]) for f in FIELDS}
        order = np.argsort(t, kind="stable")
        arms = tuple(dict.fromkeys(a for r in recs for a in (r.get("arms") or [])))
        out.append(Series(source, device, arms, dict(recs[-1].get("fields") or {}), t[order],
                          {f: v[order] for f, v in vals.items()}))
    return out


@dataclass(frozen=True)
class Phases:
    """One arm's calls in one scope: their prefill and decode intervals (module docstring)."""

    prefill: np.ndarray  # (n, 2): start, end
    decode: np.ndarray

    @property
    def span(self) -> tuple[float, float]:
        both = np.vstack([self.prefill, self.decode])
        return float(both[:, 0].min()), float(both[:, 1].max())


#: One call as the phases need it: (arm, scope, sent s, ttft_s, latency_s) (module docstring).
CallSpan = tuple[str, str, float, float, float]


def call_spans(calls: Iterable[Mapping[str, Any]]) -> list[CallSpan]:
    """The spans of call records (dicts: probes, sentinels, load calls; turns' calls as the dataset's columns:
    :func:`.facts.dataset_spans`) that succeeded with a first token; warm-ups and failed calls left out."""
    out: list[CallSpan] = []
    for c in calls:
        kind = c.get("kind")
        ttft, lat, t = c.get("ttft_s"), c.get("latency_s"), c.get("t_send")
        if kind not in ("call", "probe", "sentinel", "load") or c.get("error") is not None:
            continue
        if not all(isinstance(x, (int, float)) for x in (ttft, lat, t)):
            continue
        scope = f"load:{c.get('stage')}" if kind == "load" else "turns"
        out.append((str(c.get("arm")), scope, float(t) + float(c.get("connect_s") or 0.0), float(ttft), float(lat)))
    return out


def call_phases(spans: Iterable[CallSpan]) -> dict[tuple[str, str], Phases]:
    """(arm, scope) → the prefill and decode intervals of its calls (module docstring)."""
    got: dict[tuple[str, str], tuple[list, list]] = {}
    for arm, scope, s, ttft, lat in spans:
        if not (math.isfinite(s) and math.isfinite(ttft) and math.isfinite(lat)) or lat < ttft:
            continue
        p, d = got.setdefault((arm, scope), ([], []))
        p.append((s, s + ttft))
        d.append((s + ttft, s + lat))
    return {k: Phases(np.array(p, dtype=float), np.array(d, dtype=float)) for k, (p, d) in got.items()}


def holding(intervals: np.ndarray, m: np.ndarray) -> np.ndarray:
    """How many of *intervals* (n, 2) hold each point of *m*: #(starts ≤ m) − #(ends < m)."""
    if len(intervals) == 0:
        return np.zeros(len(m), dtype=int)
    starts, ends = np.sort(intervals[:, 0]), np.sort(intervals[:, 1])
    return np.searchsorted(starts, m, side="right") - np.searchsorted(ends, m, side="left")


def label(m: np.ndarray, ph: Phases) -> tuple[np.ndarray, np.ndarray]:
    """Each point's phase (module docstring) as an index into :data:`PHASES`, and how many calls held it."""
    p, d = holding(ph.prefill, m), holding(ph.decode, m)
    out = np.full(len(m), PHASES.index("idle"))
    out[(p > 0) & (d == 0)] = PHASES.index("prefill")
    out[(d > 0) & (p == 0)] = PHASES.index("decode")
    out[(p > 0) & (d > 0)] = PHASES.index("overlap")
    return out, p + d


def _mean(x: np.ndarray) -> Optional[float]:
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else None


def phase_row(per_device: list[tuple[Series, np.ndarray]]) -> PhaseRow:
    """One phase over the arm's GPUs: each GPU's readings in it (a mask), combined (module docstring)."""
    samples = int(sum(mask.sum() for _, mask in per_device))
    row: dict[str, Any] = {"samples": samples}
    for f in ("sm", "dram", "power_w", "mem_used_mib", "sm_clock_mhz"):
        means = [m for s, mask in per_device if mask.any() and (m := _mean(s.values[f][mask])) is not None]
        if not means:
            row[f] = None
        else:
            row[f] = float(sum(means)) if f in SUMMED else float(np.mean(means))
            if f in ("sm", "dram"):
                row[f] = min(1.0, max(0.0, row[f]))
    return row  # type: ignore[return-value]


def _note(row: TelemetryRow, short_ms: float) -> Optional[str]:
    said = []
    if (row["concurrent_share"] or 0) > 0:
        said.append(f"calls ran at once ({row['concurrent_share']:.0%} of the readings within calls saw more than "
                    f"one; {row['overlap_share'] or 0:.0%} saw prefill and decode together, counted as overlap): the "
                    "phases overlap, and each phase's figures hold the others' calls too")
    if row["prefill"]["samples"] < MIN_PHASE_READINGS:
        short = row["short_prefill_share"] or 0.0
        said.append(f"only {row['prefill']['samples']} reading(s) fell in prefill ({short:.0%} of the prefills "
                    f"lasted under a sample period, {short_ms:.0f} ms): prefill is not resolved; raise gpu_sample_hz "
                    "or send longer prompts")
    if row["resolution_s"] is not None and row["period_s"] and row["resolution_s"] > 2.5 * row["period_s"]:
        said.append(f"the source refreshed its values every {row['resolution_s']:.2g} s (read every "
                    f"{row['period_s']:.2g} s): phases shorter than that are not resolved")
    return "; ".join(said) or None


def telemetry_rows(all_series: list[Series], spans: Iterable[CallSpan], arms: list[str]) -> list[TelemetryRow]:
    """Per arm and scope, what its GPUs did in each phase (module docstring); arms without readings: none."""
    out: list[TelemetryRow] = []
    for (arm, scope), ph in call_phases(spans).items():
        mine = [s for s in all_series if arm in s.arms and len(s.t)]
        if arm not in arms or not mine:
            continue
        lo, hi = ph.span
        per: dict[str, list[tuple[Series, np.ndarray]]] = {p: [] for p in PHASES}
        in_calls = concurrent = overlap = 0
        for s in mine:
            m = s.midpoints()
            inside = (m >= lo) & (m <= hi)
            lab, n = label(m, ph)
            for i, p in enumerate(PHASES):
                per[p].append((s, inside & (lab == i)))
            in_calls += int((inside & (n > 0)).sum())
            concurrent += int((inside & (n > 1)).sum())
            overlap += int((inside & (lab == PHASES.index("overlap"))).sum())
        periods = [p for s in mine if (p := s.period) is not None]
        period = float(np.median(periods)) if periods else None
        res = [r for s in mine if (r := s.resolution()) is not None]
        lengths = ph.prefill[:, 1] - ph.prefill[:, 0]
        row: TelemetryRow = {
            "arm": arm, "scope": scope, "source": mine[0].source, "devices": [s.device for s in mine],
            "samples": int(sum(((s.midpoints() >= lo) & (s.midpoints() <= hi)).sum() for s in mine)),
            "period_s": period, "resolution_s": float(np.median(res)) if res else None,
            **{p: phase_row(per[p]) for p in PHASES},  # type: ignore[typeddict-item]
            "overlap_share": overlap / in_calls if in_calls else None,
            "concurrent_share": concurrent / in_calls if in_calls else None,
            "short_prefill_share": float((lengths < period).mean()) if period and len(lengths) else None,
            "note": None}
        row["note"] = _note(row, (period or 0.0) * 1000.0)
        out.append(row)
    order = {a: i for i, a in enumerate(arms)}
    return sorted(out, key=lambda r: (order[r["arm"]], r["scope"] != "turns", r["scope"]))


def turn_energy(s: Series, t0: float, t1: float) -> tuple[Optional[float], Optional[str]]:
    """The energy (J) of GPU *s* over [t0, t1], and from what (module docstring); (None, None) when neither its
    counter nor its power readings cover the interval."""
    e, t = s.values["energy_j"], s.t
    ok = np.isfinite(e)
    if ok.sum() >= 2 and t[ok][0] <= t0 and t[ok][-1] >= t1:
        return float(np.interp(t1, t[ok], e[ok]) - np.interp(t0, t[ok], e[ok])), "energy counter"
    p = s.values["power_w"]
    ok = np.isfinite(p)
    if ok.sum() >= 2 and t[ok][0] <= t0 and t[ok][-1] >= t1:
        tt, pp = t[ok], p[ok]
        inner = (tt > t0) & (tt < t1)
        x = np.concatenate([[t0], tt[inner], [t1]])
        y = np.concatenate([[np.interp(t0, tt, pp)], pp[inner], [np.interp(t1, tt, pp)]])
        return float(np.sum((y[1:] + y[:-1]) / 2.0 * np.diff(x))), "power readings"
    return None, None


#: One counted, successful turn as the energy needs it: (arm, t_start, model_s, turn_s).
TurnSpan = tuple[str, float, float, float]


def energy_rows(all_series: list[Series], turns: Iterable[TurnSpan], arms: list[str]) -> list[EnergyRow]:
    """Per arm with readings, the energy per turn (module docstring)."""
    turns = [t for t in turns if all(math.isfinite(x) for x in t[1:])]
    out: list[EnergyRow] = []
    for arm in arms:
        mine = [s for s in all_series if arm in s.arms and len(s.t)]
        if not mine:
            continue
        joules, secs, sources = [], [], set()
        for _, t0, model_s, turn_s in (t for t in turns if t[0] == arm):
            parts = [turn_energy(s, t0, t0 + model_s) for s in mine]
            if all(j is not None for j, _ in parts):
                joules.append(sum(j for j, _ in parts if j is not None))
                sources |= {src for _, src in parts if src}
            secs.append(turn_s)
        j = float(np.median(joules)) if joules else None
        out.append({"arm": arm, "turns": len(joules), "gpus": len(mine), "j_per_turn": j,
                    "kwh_per_1000_turns": j * 1000.0 / J_PER_KWH if j is not None else None,
                    "gpu_hours_per_1000_turns": float(np.median(secs)) * len(mine) * 1000.0 / 3600.0 if secs else None,
                    "source": " and ".join(sorted(sources)) or None})
    return out
