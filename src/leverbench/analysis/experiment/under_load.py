"""Does the lever still pay under load? Each lever's controlled pair at every load level both arms ran
(issue 25 parts 1, 2 and 4).

For each controlled comparison that measures a lever (:func:`..base.knobs.comparisons`: two arms that differ in
one knob, the lever's; batching's slots and batch limits among them, judged toward the larger batch whatever the
roles: :func:`toward_larger_batch`) and each sweep (one ``[[load]]`` entry, one
mode: a ledger that gave two entries one name keeps their modes apart; a stage that is no sweep is its own), the
**levels** are the stages both arms ran, in load order (a closed loop's concurrency, an open loop's rate, a
trace's replay speed: :func:`..load.levels.level_load`).  At each level, with A the arm that has the lever and R
the reference:

    latency metrics (TTFT, TPOT, end-to-end; p50 and p99):  multiplier = R's percentile / A's percentile
    rate metrics (output tokens/s, goodput):                multiplier = A's rate / R's rate

each taken from the stage rows (:mod:`..load.stages`: failed calls count in TTFT and end-to-end at their
elapsed time and never meet an SLO), so > 1 means the lever pays at that level.  Beside each, its
``denominator`` (A's percentile, R's rate): denominator × (multiplier − 1) is the difference of the two arms'
statistics, which the crossover interpolates (:mod:`.crossover`).

**The guard, per level** (a level it refuses keeps its figures, marked, and is left out of the crossover):

- the same work: output tokens per successful call within ``volume_tolerance_total`` of each other
  (spread = (max − min) / min, as the turns' guard), and the same ``prefix_sharing`` (codes ``volume``,
  ``volume_unknown``, ``prefix_sharing``);
- the client on schedule on both arms: client lag p99 within :func:`..load.levels.lag_budget` (code
  ``client_lag``: the load offered was lower than planned);
- at least :data:`MIN_CALLS` measured calls on each arm (code ``calls``);
- what refuses the pair itself (a contradicted knob, the lever not engaging on A, R using it too: the reasons
  of the turns' comparison other than drift, which sentinels measure between turns, not during load stages:
  deliberately left out) refuses every level;
- failed calls are counted, not refused: in the latencies at their elapsed time, in goodput as misses, and per
  level in ``failed``; a level where every call of an arm failed counts too (code ``failed``: that arm's goodput
  and throughput are 0 there, the lever's result), its latency multipliers alone left out (a failed call's time
  is no latency, and there is no work to compare).

**The interval per level** is a bootstrap over calls (scipy's ``bootstrap``, percentile method, 95 %,
:data:`RESAMPLES` resamples, fewer for a level of more than 500 calls a side, seeded): each arm's measured calls
at the level are resampled independently — a stage runs once per arm, so there are no repeated stages to take an
interval over, while a level has tens of calls whose spread is what the percentiles and rates are uncertain by.
A latency percentile is recomputed on the resample; a rate (Little's law: with N calls in flight, throughput =
N · Σ w / Σ e2e) is the measured rate scaled by the resample's Σ w / Σ e2e over the sample's, w the output tokens
of each successful call (throughput) or 1 for each call that met every SLO (goodput).  That is exact in a closed
loop, where N is set, and conservative in an open one, whose offered rate both arms share.  Calls within a stage
are not independent (they share the server), so the interval is a lower bound on the uncertainty a repeat of the
stage would show.

**Where it flips**: per metric, :mod:`.crossover` (the first crossing of 1, interpolated, with its interval).
**Capacity**: the lever's capacity multiplier at the SLOs is the ratio of the two arms' capacities on the
sweep (:mod:`.capacity`); none, with the reason, where the pair is refused or the guard lets no level through.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Literal, Mapping, Sequence

import numpy as np
from scipy.stats import bootstrap

from ...levers import registry
from ...schema.reason_codes import FAILED, VOLUME, VOLUME_UNKNOWN
from ..load.levels import LevelCalls, level_load, on_schedule
from .capacity import at_percentile
from .crossover import crossover, pays, sides

if TYPE_CHECKING:
    from ...json_types import JSONValue
    from ...schema.load_lever_rows import (
        CapacityPair,
        CapacityRow,
        LevelValue,
        LoadLevel,
        LoadLeverRow,
        MetricRow,
        PairFigure,
    )
    from ...schema.load_rows import LoadRow
    from ..base.guard import Reason
    from ..base.knobs import Comparison

CLIENT_LAG, PREFIX_SHARING, CALLS = "client_lag", "prefix_sharing", "calls"
MIN_CALLS = 5
CONFIDENCE = 0.95
RESAMPLES = 2000
#: A level of many calls gets fewer resamples (its interval is narrow, and each resample costs its calls): at
#: most RESAMPLE_BUDGET values drawn per metric, and never fewer than MIN_RESAMPLES resamples.
RESAMPLE_BUDGET, MIN_RESAMPLES = 2_000_000, 200
SEED = 25
#: A metric compared at each level: (name, kind, the stage row's key, percentile).
Metric = tuple[str, str, Literal["e2e", "ttft", "tpot", "goodput_rps", "output_tps"], int]
#: The metrics compared at each level.  Latency metrics ("time") are better lower, rates better higher.
METRICS: tuple[Metric, ...] = (
    ("e2e_p50", "time", "e2e", 50), ("goodput", "rate", "goodput_rps", 0), ("output_tps", "rate", "output_tps", 0),
    ("e2e_p99", "time", "e2e", 99), ("ttft_p50", "time", "ttft", 50), ("ttft_p99", "time", "ttft", 99),
    ("tpot_p50", "time", "tpot", 50), ("tpot_p99", "time", "tpot", 99))
#: The metrics whose crossover is reported by default (issue 25: end-to-end p50 and goodput).
DEFAULT_METRICS = ("e2e_p50", "goodput")


# ---------------------------------------------------------------- one level


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) and x >= 0 else None


def _interval(stat: Callable[..., np.ndarray], na: int, nr: int) -> tuple[float | None, float | None]:
    """The 95 % percentile-bootstrap interval of stat(arm indices, reference indices) (see the docstring)."""
    data = (np.arange(na, dtype=float), np.arange(nr, dtype=float))
    b = int(min(RESAMPLES, max(MIN_RESAMPLES, RESAMPLE_BUDGET // (na + nr))))
    with np.errstate(all="ignore"):
        res = bootstrap(data, stat, vectorized=True, paired=False, n_resamples=b, batch=250,
                        confidence_level=CONFIDENCE, method="percentile", random_state=np.random.default_rng(SEED))
    lo, hi = res.confidence_interval
    return _finite(lo), _finite(hi)


Value = tuple[float | None, float | None, float | None, float | None]  # multiplier, low, high, denominator
NO_VALUE: Value = (None, None, None, None)


def _time_value(metric: Metric, ra: LoadRow, rr: LoadRow, ca: LevelCalls, cr: LevelCalls) -> Value:
    """(R's percentile / A's, low, high, A's percentile) of a latency metric."""
    _, _, key, q = metric
    da, dr = ra.get(key), rr.get(key)  # (a latency's: its distribution, or None)
    if not isinstance(da, dict) or not isinstance(dr, dict) or not at_percentile(da, q) > 0:
        return NO_VALUE
    value, den = at_percentile(dr, q) / at_percentile(da, q), float(at_percentile(da, q))
    a, r = getattr(ca, key), getattr(cr, key)
    a, r = a[~np.isnan(a)], r[~np.isnan(r)]
    if a.size < 2 or r.size < 2:
        return value, None, None, den

    def stat(i: np.ndarray, j: np.ndarray, axis: int = -1) -> np.ndarray:
        out: np.ndarray = np.percentile(r[j.astype(int)], q, axis=axis) / np.percentile(a[i.astype(int)], q, axis=axis)
        return out
    return (value, *_interval(stat, a.size, r.size), den)


def _rate_value(metric: Metric, ra: LoadRow, rr: LoadRow, ca: LevelCalls, cr: LevelCalls) -> Value:
    """(A's rate / R's, low, high, R's rate) of a rate metric, its interval by Little's law (see the docstring)."""
    name, _, key, _ = metric
    pa, pr = ra.get(key), rr.get(key)  # (a rate's: a number, or None)
    if not isinstance(pa, (int, float)) or not isinstance(pr, (int, float)) or not pr > 0:
        return NO_VALUE
    pa, pr = float(pa), float(pr)
    wa, wr = (ca.good.astype(float), cr.good.astype(float)) if name == "goodput" else (ca.output, cr.output)
    ea, er = np.nan_to_num(ca.e2e), np.nan_to_num(cr.e2e)
    rho_a, rho_r = wa.sum() / ea.sum(), wr.sum() / er.sum()
    if not rho_r > 0 or not np.isfinite(rho_a):
        return pa / pr, None, None, pr

    def stat(i: np.ndarray, j: np.ndarray, axis: int = -1) -> np.ndarray:
        i, j = i.astype(int), j.astype(int)
        xa = pa * (wa[i].sum(axis=axis) / ea[i].sum(axis=axis)) / rho_a if rho_a > 0 else np.zeros(i.shape[0])
        out: np.ndarray = xa / (pr * (wr[j].sum(axis=axis) / er[j].sum(axis=axis)) / rho_r)
        return out
    return (pa / pr, *_interval(stat, ca.n, cr.n), pr)


def _pair(a: float | None, r: float | None) -> PairFigure:
    return {"arm": a, "vs": r}


def _engagement(knob: str, ra: LoadRow, rr: LoadRow) -> dict[str, PairFigure]:
    """The server's own figures of the lever's engagement at this level (its module names them:
    :class:`leverbench.levers.MetricTable`), each arm's; those neither arm's metrics gave are left out."""
    x = registry.lever(knob)
    if x is None:
        return {}
    names = [n.removeprefix("llamacpp_").removeprefix("sglang_") for n, *_ in x.metrics.shares]
    names += [n for n, _ in x.metrics.deltas] + [n for n, _ in x.metrics.gauges]
    fa, fr = ra.get("server_figures") or {}, rr.get("server_figures") or {}
    return {n: _pair(fa.get(n), fr.get(n)) for n in dict.fromkeys(names) if n in fa or n in fr}


def _per_call(r: LoadRow) -> float | None:
    return r["output_tokens"] / r["ok"] if r.get("ok") else None


def level_guard(ra: LoadRow, rr: LoadRow, ca: LevelCalls | None, cr: LevelCalls | None, tolerance: float,
                pair_reasons: Sequence[Reason]) -> tuple[list[Reason], LoadLevel]:
    """The guard's reasons to refuse one level (see the module docstring), and the level's row without its
    verdict (``citable``/``reason`` are set from the reasons by the caller)."""
    reasons: list[Reason] = list(pair_reasons)
    na, nr = (ca.n if ca else 0), (cr.n if cr else 0)
    if min(na, nr) < MIN_CALLS:
        reasons.append((CALLS, f"too few measured calls ({ra['arm']} {na}, {rr['arm']} {nr}; at least {MIN_CALLS})"))
    sched = {r["arm"]: on_schedule(r) for r in (ra, rr)}
    late = [f"{a} {p99 * 1000:.0f} ms > {b * 1000:.0f} ms" for a, (ok, p99, b) in sched.items()
            if not ok and p99 is not None]  # (behind schedule: a lag p99 past its budget)
    if late:
        reasons.append((CLIENT_LAG, "the client fell behind its schedule (lag p99 " + ", ".join(late) +
                        "): the load offered was lower than planned"))
    if ra.get("prefix_sharing") != rr.get("prefix_sharing"):
        reasons.append((PREFIX_SHARING, f"prefix sharing differs ({ra.get('prefix_sharing')} vs "
                                        f"{rr.get('prefix_sharing')})"))
    va, vr = _per_call(ra), _per_call(rr)
    dead = [r["arm"] for r in (ra, rr) if r.get("requests") and not r.get("ok")]
    notes: list[Reason] = []
    if dead:  # no work to compare: the failure is the lever's result there
        notes.append((FAILED, f"every call of {' and '.join(dead)} failed: its goodput and throughput count (0), its "
                              "latencies are not compared"))
    elif va is None or vr is None or not min(va, vr) > 0:
        reasons.append((VOLUME_UNKNOWN, "output volume unknown (no successful call with tokens on an arm)"))
    elif (max(va, vr) - min(va, vr)) / min(va, vr) > tolerance:
        reasons.append((VOLUME, f"output volumes differ: {va:.1f} vs {vr:.1f} tokens per call (spread "
                                f"{(max(va, vr) - min(va, vr)) / min(va, vr):.1%} > {tolerance:.0%})"))
    _, x = level_load(ra)
    said = reasons + notes
    level: LoadLevel = {
        "stage": ra["stage"], "load": float(x or 0.0), "citable": not reasons,
        "reason": "; ".join(text for _, text in said) or None, "reason_codes": list(dict.fromkeys(c for c, _ in said)),
        "calls": {"arm": na, "vs": nr}, "failed": {"arm": int(ra["failed"]), "vs": int(rr["failed"])},
        "output_tokens_per_call": _pair(va, vr),
        "client_lag_p99_s": _pair(sched[ra["arm"]][1], sched[rr["arm"]][1]),
        "lag_budget_s": _pair(sched[ra["arm"]][2], sched[rr["arm"]][2]),
        "cached_share": {"arm": ra.get("cached_share"), "vs": rr.get("cached_share")}, "engagement": {}}
    return reasons, level


# ---------------------------------------------------------------- a pair on a sweep


def _metric_row(metric: Metric, levels: list[LoadLevel], values: list[Value], has_slo: bool
                ) -> MetricRow:
    def citable(lv: LoadLevel, v: float | None) -> bool:  # a failed call's time is no latency
        return lv["citable"] and v is not None and not (metric[1] == "time" and FAILED in lv["reason_codes"])
    vals: list[LevelValue] = []
    for lv, (v, lo, hi, den) in zip(levels, values):
        (side,) = sides([v or 0.0], [lo], [hi])
        vals.append({"stage": lv["stage"], "load": lv["load"], "value": v, "low": lo, "high": hi, "denominator": den,
                     "citable": citable(lv, v), "clear": v is not None and side != 0})
    use = [v for v in vals if v["citable"]]
    scope = "compared" if any(lv["citable"] and not v["citable"] for lv, v in zip(levels, vals)) else "measured"
    # (a citable level has its value: every one of *use*)
    xs, ms = [v["load"] for v in use], [float(v["value"]) for v in use if v["value"] is not None]
    lows, highs = [v["low"] for v in use], [v["high"] for v in use]
    cross, n = crossover(xs, ms, lows, highs, [v["denominator"] for v in use])
    where = pays(ms, n, sides(ms, lows, highs))
    unclear = [f"{v['load']:g}" for v in use if not v["clear"]]
    reason = None
    if metric[0] == "goodput" and not has_slo:
        reason = "no SLO set on the stage: no goodput"
    elif not use:
        reason = "no level the guard lets through"
    elif where == "no clear difference":
        reason = f"no clear difference at any level {scope} ({xs[0]:g}–{xs[-1]:g})"
    elif cross is None:
        reason = (f"pays at every level {scope}" if where == "every level" else
                  f"pays at none of the levels {scope}") + f" ({xs[0]:g}–{xs[-1]:g})" + \
            (f"; no clear difference at {', '.join(unclear)}" if unclear else "")
    elif n > 1:
        reason = f"crosses 1 {n} times; the first is given"
    return {"metric": metric[0], "default": metric[0] in DEFAULT_METRICS, "levels": vals, "pays": where,
            "crossover": cross, "reason": reason, "crossings": n}


def _span(row: CapacityRow) -> tuple[float, float] | None:
    """The range an arm's capacity lies in: [load, load] interpolated, [load, ∞) at least, [load, upper) between."""
    lo = row["load"]
    if lo is None:
        return None
    hi = lo if row["bound"] == "interpolated" else row.get("upper") if row["bound"] == "between" else None
    return lo, (hi if hi is not None else np.inf)


def capacity_pair(arm: CapacityRow | None, vs: CapacityRow | None) -> CapacityPair | None:
    """The lever's capacity multiplier: the arm's capacity / the reference's (:mod:`.capacity`); where either is a
    bound, the range [arm's low / vs's high, arm's high / vs's low] that the two allow, cited by its finite end
    ("at least", "at most") or both ("between"); None when the sweep sets no SLO."""
    if arm is None or vs is None:
        return None
    out: CapacityPair = {"arm_load": arm["load"], "vs_load": vs["load"], "value": None, "low": None, "high": None,
                         "bound": None, "reason": None}
    a, v = _span(arm), _span(vs)
    if a is None or v is None or not v[0] > 0:
        who = " and ".join(r["arm"] for r in (arm, vs) if r["load"] is None)
        out["reason"] = f"{who}: no capacity at the SLOs ({'; '.join(r['reason'] or '' for r in (arm, vs))})"
        return out
    low, high = a[0] / v[1], a[1] / v[0]
    if not low > 0 and not np.isfinite(high):
        out["reason"] = "both arms met the SLOs at the highest level they ran: the sweep did not reach either capacity"
        return out
    out["low"], out["high"] = (low if low > 0 else None), (high if np.isfinite(high) else None)
    if low == high:
        out["value"], out["bound"] = low, "exact"
    elif out["high"] is None:
        out["value"], out["bound"] = low, "at least"
    elif out["low"] is None:
        out["value"], out["bound"] = high, "at most"
    else:
        out["bound"] = "between"
    return out


def _guarded(cap: CapacityPair | None, pair_reasons: Sequence[Reason], levels: list[LoadLevel]
             ) -> CapacityPair | None:
    """The capacity multiplier as the guard lets it be cited: none, with the reason, when the pair is refused or
    no level is citable (each arm's own capacity stays in ``capacity[]``)."""
    if cap is None:
        return None
    why = "; ".join(text for _, text in pair_reasons) or (
        None if any(lv["citable"] for lv in levels) else "no level the guard lets through")
    if why is None:
        return cap
    return {**cap, "value": None, "low": None, "high": None, "bound": None, "reason": f"not citable ({why})"}


def pair_on_sweep(c: Comparison, sweep: str, rows: list[tuple[LoadRow, LoadRow]],
                  calls: Mapping[tuple[str, str], LevelCalls], tolerance: float, pair_reasons: Sequence[Reason],
                  capacity: Mapping[tuple[str, str, str], CapacityRow]) -> LoadLeverRow:
    """One lever pair's row on one sweep: *rows* the (arm's, reference's) stage rows of each level."""
    assert c.lever is not None
    rows = sorted(rows, key=lambda p: level_load(p[0])[1] or 0.0)
    levels: list[LoadLevel] = []
    values: dict[str, list[Value]] = defaultdict(list)
    for ra, rr in rows:
        ca, cr = calls.get((c.arm, ra["stage"])), calls.get((c.vs, rr["stage"]))
        _, level = level_guard(ra, rr, ca, cr, tolerance, pair_reasons)
        level["engagement"] = _engagement(c.lever, ra, rr)
        levels.append(level)
        for m in METRICS:
            fn = _time_value if m[1] == "time" else _rate_value
            values[m[0]].append(fn(m, ra, rr, ca, cr) if ca is not None and cr is not None and min(ca.n, cr.n) >= 2
                                else NO_VALUE)
    has_slo = any(ra.get("slo") for ra, _ in rows)
    r0 = rows[0][0]
    axis = level_load(r0)[0]
    return {"lever": c.lever, "arm": c.arm, "vs": c.vs, "sweep": sweep, "mode": r0.get("mode"),
            "x": axis, "levels": levels,
            "metrics": [_metric_row(m, levels, values[m[0]], has_slo) for m in METRICS],
            "capacity": _guarded(capacity_pair(capacity.get((c.arm, sweep, axis)), capacity.get((c.vs, sweep, axis))),
                                 pair_reasons, levels),
            "refused": "; ".join(text for _, text in pair_reasons) or None}


def _number(v: JSONValue) -> float | None:
    """A knob's value as a number (not a bool; a number's text too); None: no number."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):  # (float() of any other JSON fails)
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def toward_larger_batch(c: Comparison, knobs: Mapping[str, Mapping[str, JSONValue]]) -> Comparison:
    """A queueing lever's pair (batching: :mod:`leverbench.levers`) with the larger batch as the arm and the
    smaller as the reference, whichever the roles made the reference — so that > 1 means more batching pays
    (the advice of ``analyze`` follows it); any other pair, or values that are not numbers, as it is."""
    lever = c.lever
    x = registry.lever(lever or "")
    if lever is None or x is None or "queueing" not in x.phases:
        return c
    a, v = _number(knobs.get(c.arm, {}).get(lever)), _number(knobs.get(c.vs, {}).get(lever))
    return replace(c, arm=c.vs, vs=c.arm) if a is not None and v is not None and v > a else c


def load_levers(comps: Sequence[Comparison], rows: Sequence[LoadRow], calls: Mapping[tuple[str, str], LevelCalls],
                tolerance: float, reasons: Mapping[tuple[str, str], Sequence[Reason]],
                capacity: Sequence[CapacityRow], knobs: Mapping[str, Mapping[str, JSONValue]] | None = None
                ) -> list[LoadLeverRow]:
    """Every controlled lever pair on every sweep (or stage) both its arms ran: see the module docstring.
    *reasons*: per comparison (arm, vs), what refuses it whole (drift left out); *capacity*: :mod:`.capacity`'s
    rows; *knobs*: each arm's, to judge batching toward the larger batch (:func:`toward_larger_batch`)."""
    by_arm: dict[str, dict[str, LoadRow]] = defaultdict(dict)
    for r in rows:
        if level_load(r)[1] is not None:
            by_arm[r["arm"]][r["stage"]] = r
    cap: dict[tuple[str, str, str], CapacityRow] = {(r["arm"], r["sweep"], r["x"]): r for r in capacity}
    out: list[LoadLeverRow] = []
    for c0 in comps:
        if c0.lever is None or not c0.controlled:
            continue
        c = toward_larger_batch(c0, knobs or {})
        both: dict[tuple[str, str], list[tuple[LoadRow, LoadRow]]] = defaultdict(list)
        for stage, ra in by_arm.get(c.arm, {}).items():
            rr = by_arm.get(c.vs, {}).get(stage)
            if rr is not None:  # a sweep is one mode (one axis), even in a ledger that gave two entries one name
                both[(ra.get("sweep") or stage, level_load(ra)[0])].append((ra, rr))
        pair_reasons = [r for r in reasons.get((c0.arm, c0.vs), ()) if r[0] != "drift"]
        out += [pair_on_sweep(c, sweep, pairs, calls, tolerance, pair_reasons, cap)
                for (sweep, _), pairs in both.items()]
    return out
