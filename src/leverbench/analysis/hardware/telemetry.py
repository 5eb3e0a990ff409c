"""What the GPUs did in each phase of the calls, and the energy of a turn (the ``gpu`` records).

**A GPU's series**: its readings (``gpu`` records of one source and device, in time order), read every
``period_s`` (the median interval between them).  NVML's utilisations are the driver's last sample, the
average over its sample period W ("between 1 second and 1/6 second depending on the product"); a DCGM
exporter's page holds what it collected at its last collect interval: a reading shows a window W of the past,
not the instant it was taken.  W is the source's **refresh period**, measured where its readings change (a
steady signal repeats a value however often the source refreshes; a source cannot change twice within its
period): over the intervals between consecutive changed readings (``sm`` or ``dram`` differs from the reading
before), the mean of those no longer than 1.5 × their lower quartile (a sample that repeated its
predecessor's value leaves out a change), and no less than the reading period.  It is not measured — W is the
reading period, each reading covering the interval since the one before — with fewer than
:data:`MIN_CHANGES` changes (a few changes spaced by the work's own phases say nothing of the source), or
when it comes to under 1.5 reading periods (the values change at nearly every reading).

**A reading's window** [c − W, c]: c is when its value was first read — a reading that repeats the one before
less than W after that value first appeared shows the same sample of the source's — else the reading's own
time t.  (Under the driver's sampling the first reading of a new sample comes at most a reading period after
the sample was taken, so the window is the sample's to within that.)

**A call's phases** (a successful call with its first token): sent at s = t_send + connect_s + send_s (opening
a connection, and the client's own queue before the request went out, are neither phase), **prefill**
[s, s + ttft_s) (send → first token: the queue and the prompt), **decode** [s + ttft_s, s + latency_s]
(first → last token).

**A reading's phase**, among one arm's calls in one scope (``turns``: its turns' calls, probes and sentinels,
one at a time; ``load:STAGE``: a load stage's calls): each instant is prefill when it lies in a prefill
interval and in no decode interval, decode in the reverse case, ``overlap`` when in both (calls in different
phases at once: neither's), idle when in none (between calls, inside the scope's span); how many intervals
hold an instant m is #(starts ≤ m) − #(ends < m), for any set of intervals.  A reading counts in a phase when
its whole window lies in that phase (the time of each phase within [a, b] is the difference of its running
total, exact between the intervals' ends); a window across two phases counts in none.  Only the readings of
the GPUs the arm used (the ``gpu`` records naming it) count, those whose windows lie within the span of the
scope's calls.

**Per arm and scope** (:func:`telemetry_rows`): for each phase, the readings counted and the mean SM and
memory-bandwidth utilisation and SM clock (each GPU's mean, averaged over its GPUs) and the mean power and
memory used (summed over its GPUs); the share of readings within calls that saw both phases
(``overlap_share``) or more than one call (``concurrent_share``), of their windows; the share of prefills
shorter than a reading's window (``short_prefill_share``: too short for any window to lie inside); the
sampling's period and resolution (``resolution_s``: the median over the arm's GPUs of their refresh periods W),
and a ``note`` saying what limits the figures.  This is the second source article's table — prefill
compute-bound (SMs busy), decode memory-bandwidth-bound (memory busy, SMs less so) — measured on the run's own
hardware.

**Energy per turn** (:func:`energy_rows`): over each counted turn's model time [t_start, t_start + model_s]
(a turn's declared tool time is not measured), the energy of each of the arm's GPUs — the difference of its
energy counter interpolated at both ends, where the counter covers the turn, else the power readings
integrated (trapezoids, interpolated at the ends) — summed over its GPUs.  A turn whose readings leave a gap
longer than :data:`GAP_PERIODS` reading periods where they are used (the counter: the intervals holding the
turn's ends, the counter counts through the rest; power: every interval the turn overlaps) has no energy, and
the row's ``note`` says why (``unmeasured`` counts such turns and those the readings do not cover); per arm the
median, as J per turn
and kWh per 1,000 turns (J × 1000 / 3.6·10⁶), beside GPU-hours per 1,000 turns (median turn_s × GPUs ×
1000 / 3600).  With arms sharing a GPU at once (engines together, concurrent load) the energy is the GPU's,
not the arm's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Literal, Mapping, Optional

import numpy as np

from ...ledger.rows import CallRow, GpuSamplesRow
from ...schema.hardware_rows import EnergyRow, PhaseRow, TelemetryRow

#: A reading's fields (``gpu.readings.FIELDS``), each a column of the ``gpu`` record.
Field = Literal["sm", "dram", "mem_used_mib", "power_w", "sm_clock_mhz", "energy_j"]
FIELDS: tuple[Field, ...] = ("sm", "dram", "mem_used_mib", "power_w", "sm_clock_mhz", "energy_j")
PHASES = ("prefill", "decode", "overlap", "idle")
SUMMED = ("power_w", "mem_used_mib")  # over an arm's GPUs: summed; the others averaged
MIN_PHASE_READINGS = 3  # fewer readings in a phase: the note says it is not resolved
MIN_CHANGES = 8  # changed readings needed to measure a source's refresh period
GAP_PERIODS = 3.0  # a gap in the readings longer than this many reading periods: no energy across it
PURE = 1.0 - 1e-9  # a window "wholly" in a phase, to rounding
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

    def refresh(self) -> Optional[float]:
        """The source's refresh period W, measured where its readings change (module docstring); None: not
        measurable."""
        period = self.period
        if period is None:
            return None
        u = np.vstack([np.nan_to_num(self.values["sm"], nan=-1.0), np.nan_to_num(self.values["dram"], nan=-1.0)])
        changed = self.t[np.flatnonzero(np.any(np.diff(u, axis=1) != 0, axis=0)) + 1]
        gaps = np.diff(changed)
        if len(changed) < MIN_CHANGES:
            return None
        kept = gaps[gaps <= 1.5 * np.quantile(gaps, 0.25)]
        w = max(float(kept.mean()), period)
        return w if w >= 1.5 * period else None

    def window(self) -> float:
        """W: the refresh period where measured, else the reading period (0: a single reading)."""
        return self.refresh() or self.period or 0.0

    def windows(self) -> tuple[np.ndarray, np.ndarray]:
        """Each reading's window [c − W, c] (module docstring), as (starts, ends)."""
        w, t = self.window(), self.t
        if self.refresh() is None or len(t) < 2:
            return t - w, t
        u = np.vstack([np.nan_to_num(self.values["sm"], nan=-1.0), np.nan_to_num(self.values["dram"], nan=-1.0)])
        new = np.concatenate([[True], np.any(np.diff(u, axis=1) != 0, axis=0)])
        first = np.maximum.accumulate(np.where(new, np.arange(len(t)), 0))  # the reading that first showed each value
        c = np.where(t - t[first] < w, t[first], t)
        return c - w, c


def _col(values: Iterable[object], n: int) -> np.ndarray:
    out = np.array([v if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
                    for v in values], dtype=float)
    return out if len(out) == n else np.full(n, np.nan)


def series(records: Iterable[GpuSamplesRow]) -> list[Series]:
    """Every GPU's series from the ``gpu`` records (module docstring), in the order first seen."""
    parts: dict[tuple[str, str], list[GpuSamplesRow]] = {}
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


def call_spans(calls: Iterable[CallRow]) -> list[CallSpan]:
    """The spans of call records (dicts: probes, sentinels, load calls; turns' calls as the dataset's columns:
    :func:`.facts.dataset_spans`) that succeeded with a first token; warm-ups and failed calls left out."""
    out: list[CallSpan] = []
    for c in calls:
        kind = c.get("kind")
        ttft, lat, t = c.get("ttft_s"), c.get("latency_s"), c.get("t_send")
        if kind not in ("call", "probe", "sentinel", "load") or c.get("error") is not None:
            continue
        if not (isinstance(ttft, (int, float)) and isinstance(lat, (int, float)) and isinstance(t, (int, float))):
            continue
        scope = f"load:{c.get('stage')}" if kind == "load" else "turns"
        sent = float(t) + float(c.get("connect_s") or 0.0) + float(c.get("send_s") or 0.0)
        out.append((str(c.get("arm")), scope, sent, float(ttft), float(lat)))
    return out


def call_phases(spans: Iterable[CallSpan]) -> dict[tuple[str, str], Phases]:
    """(arm, scope) → the prefill and decode intervals of its calls (module docstring)."""
    got: dict[tuple[str, str], tuple[list[tuple[float, float]], list[tuple[float, float]]]] = {}
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


def time_in(ph: Phases, a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """The time each of [a, b] spends in each phase, in calls and with more than one call (``calls``,
    ``concurrent``): each one's running total over the elementary intervals between the calls' ends
    (module docstring), read at b and at a."""
    x = np.unique(np.concatenate([ph.prefill.ravel(), ph.decode.ravel()]))
    lab, n = label((x[:-1] + x[1:]) / 2.0, ph)
    seg = np.diff(x)
    parts = {p: lab == i for i, p in enumerate(PHASES)} | {"calls": n > 0, "concurrent": n > 1}
    out = {}
    for name, on in parts.items():
        run = np.concatenate([[0.0], np.cumsum(seg * on)])
        out[name] = np.interp(b, x, run) - np.interp(a, x, run)
    return out


def window_label(ph: Phases, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                    np.ndarray]:
    """For windows [a, b]: the phase each lies wholly in (an index into :data:`PHASES`, −1: across two), and
    whether it saw calls, more than one, calls in both phases at once (a zero-length window: its instant's)."""
    point, n = label(b, ph)
    width = b - a
    if not np.any(width > 0):
        return point, n > 0, n > 1, point == PHASES.index("overlap")
    spent = time_in(ph, a, b)
    safe = np.where(width > 0, width, 1.0)
    out = np.full(len(b), -1)
    for i, p in enumerate(PHASES):
        out[spent[p] >= PURE * safe] = i
    idle_out = (spent["calls"] <= 0) & (out == -1)  # outside the calls' span altogether: idle
    out[idle_out] = PHASES.index("idle")
    zero = width <= 0
    out[zero] = point[zero]
    calls = np.where(zero, n > 0, spent["calls"] > 0)
    concurrent = np.where(zero, n > 1, spent["concurrent"] > 0)
    overlap = np.where(zero, point == PHASES.index("overlap"), spent["overlap"] > 0)
    return out, calls, concurrent, overlap


def _mean(x: np.ndarray) -> Optional[float]:
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else None


def phase_row(per_device: list[tuple[Series, np.ndarray]]) -> PhaseRow:
    """One phase over the arm's GPUs: each GPU's readings in it (a mask), combined (module docstring)."""
    def combined(f: str) -> Optional[float]:
        means = [m for s, mask in per_device if mask.any() and (m := _mean(s.values[f][mask])) is not None]
        if not means:
            return None
        v = float(sum(means)) if f in SUMMED else float(np.mean(means))
        return min(1.0, max(0.0, v)) if f in ("sm", "dram") else v

    return {"samples": int(sum(mask.sum() for _, mask in per_device)), "sm": combined("sm"),
            "dram": combined("dram"), "power_w": combined("power_w"), "mem_used_mib": combined("mem_used_mib"),
            "sm_clock_mhz": combined("sm_clock_mhz")}


def _note(row: TelemetryRow, short_ms: float) -> Optional[str]:
    said = []
    if (row["concurrent_share"] or 0) > 0:
        said.append(f"calls ran at once ({row['concurrent_share']:.0%} of the readings within calls saw more than "
                    f"one; {row['overlap_share'] or 0:.0%} saw prefill and decode together, counted as overlap): the "
                    "phases overlap, and each phase's figures hold the others' calls too")
    if row["prefill"]["samples"] < MIN_PHASE_READINGS:
        short = row["short_prefill_share"] or 0.0
        said.append(f"only {row['prefill']['samples']} reading(s) fell in prefill ({short:.0%} of the prefills "
                    f"lasted under a reading's window, {short_ms:.0f} ms): prefill is not resolved; raise "
                    "gpu_sample_hz or send longer prompts")
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
        in_calls = concurrent = overlap = samples = 0
        for s in mine:
            a, c = s.windows()
            inside = (a >= lo - 1e-9) & (c <= hi + 1e-9)
            lab, calls, many, both = window_label(ph, a, c)
            for i, p in enumerate(PHASES):
                per[p].append((s, inside & (lab == i)))
            samples += int(inside.sum())
            in_calls += int((inside & calls).sum())
            concurrent += int((inside & many).sum())
            overlap += int((inside & both).sum())
        periods = [sp for s in mine if (sp := s.period) is not None]
        period = float(np.median(periods)) if periods else None
        res = [r for s in mine if (r := s.refresh()) is not None]
        window = max([s.window() for s in mine] + [period or 0.0])
        lengths = ph.prefill[:, 1] - ph.prefill[:, 0]
        row: TelemetryRow = {
            "arm": arm, "scope": scope, "source": mine[0].source, "devices": [s.device for s in mine],
            "samples": samples, "period_s": period, "resolution_s": float(np.median(res)) if res else None,
            "prefill": phase_row(per["prefill"]), "decode": phase_row(per["decode"]),
            "overlap": phase_row(per["overlap"]), "idle": phase_row(per["idle"]),
            "overlap_share": overlap / in_calls if in_calls else None,
            "concurrent_share": concurrent / in_calls if in_calls else None,
            "short_prefill_share": float((lengths < window).mean()) if window and len(lengths) else None,
            "note": None}
        row["note"] = _note(row, window * 1000.0)
        out.append(row)
    order = {a: i for i, a in enumerate(arms)}
    return sorted(out, key=lambda r: (order[r["arm"]], r["scope"] != "turns", r["scope"]))


def _gap(t: np.ndarray, t0: float, t1: float, ends_only: bool) -> float:
    """The longest interval between readings *t* that holds t0 or t1 (*ends_only*), or that [t0, t1] overlaps."""
    i0 = max(int(np.searchsorted(t, t0, side="right")) - 1, 0)
    i1 = min(int(np.searchsorted(t, t1, side="left")), len(t) - 1)
    if ends_only:
        return float(max(t[min(i0 + 1, len(t) - 1)] - t[i0], t[i1] - t[max(i1 - 1, 0)]))
    return float(np.max(np.diff(t[i0:i1 + 1]))) if i1 > i0 else 0.0


def turn_energy(s: Series, t0: float, t1: float) -> tuple[Optional[float], Optional[str], Optional[str]]:
    """(the energy (J) of GPU *s* over [t0, t1], from what, None) (module docstring), or (None, None, why not):
    neither its counter nor its power readings cover the interval, or they leave a gap in it."""
    why: Optional[str] = None
    limit = GAP_PERIODS * (s.period or 0.0)
    for f, src in (("energy_j", "energy counter"), ("power_w", "power readings")):
        v, ok = s.values[f], np.isfinite(s.values[f])
        tt, vv = s.t[ok], v[ok]
        if len(tt) < 2 or tt[0] > t0 or tt[-1] < t1:
            continue
        gap = _gap(tt, t0, t1, ends_only=f == "energy_j")
        if gap > limit:
            why = why or (f"a gap of {gap:.2g} s in the readings (more than {GAP_PERIODS:g} sample periods, "
                   f"{limit:.2g} s) {'at its start or end' if f == 'energy_j' else 'within it'}")
            continue
        if f == "energy_j":
            return float(np.interp(t1, tt, vv) - np.interp(t0, tt, vv)), src, None
        inner = (tt > t0) & (tt < t1)
        x = np.concatenate([[t0], tt[inner], [t1]])
        y = np.concatenate([[np.interp(t0, tt, vv)], vv[inner], [np.interp(t1, tt, vv)]])
        return float(np.sum((y[1:] + y[:-1]) / 2.0 * np.diff(x))), src, None
    return None, None, why or "the readings do not cover it"


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
        missed: dict[str, int] = {}
        for _, t0, model_s, turn_s in (t for t in turns if t[0] == arm):
            parts = [turn_energy(s, t0, t0 + model_s) for s in mine]
            if all(j is not None for j, _, _ in parts):
                joules.append(sum(j for j, _, _ in parts if j is not None))
                sources |= {src for _, src, _ in parts if src}
            else:
                why = next(w for j, _, w in parts if j is None and w is not None)  # (a part without energy says why)
                missed[why] = missed.get(why, 0) + 1
            secs.append(turn_s)
        j = float(np.median(joules)) if joules else None
        note = "; ".join(f"{n} turn(s) not measured: {w}" for w, n in missed.items()) or None
        out.append({"arm": arm, "turns": len(joules), "unmeasured": sum(missed.values()), "gpus": len(mine),
                    "j_per_turn": j, "kwh_per_1000_turns": j * 1000.0 / J_PER_KWH if j is not None else None,
                    "gpu_hours_per_1000_turns": float(np.median(secs)) * len(mine) * 1000.0 / 3600.0 if secs else None,
                    "source": " and ".join(sorted(sources)) or None, "note": note})
    return out
