"""The levers under load in words and tables (issue 25 part 6), from ``summary["load_levers"]`` and
``summary["capacity"]`` (and, for ``analyze`` and ``whatif``, the operating point's sides); formatting only.

:func:`pair_sentence` says one lever pair in one sentence ("the drafter pays 3.76x at 1 in flight, up to about
3.7 in flight, and costs 44% at 8"), the first screen's line for it; :func:`side_sentence` adds where a trace's
traffic lies ("at your p95 of 6 in flight: 0.70x, leave it off").  The tables give every level's multipliers with
their intervals and the guard's verdict, the crossovers, and the capacity at the SLOs with its price.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..levers import registry
from ..readable import ratio_words
from .table import Table

if TYPE_CHECKING:
    from ..schema.load_lever_rows import (
        CapacityPair,
        CapacityRow,
        Crossover,
        LevelValue,
        LeverSide,
        LoadLeverRow,
        MetricRow,
        OperatingPoint,
        PairFigure,
        UnderLoad,
    )
    from ..schema.summary import Summary

METRIC_WORDS = {"e2e_p50": "end-to-end p50", "e2e_p99": "end-to-end p99", "goodput": "goodput",
                "output_tps": "throughput", "ttft_p50": "TTFT p50", "ttft_p99": "TTFT p99", "tpot_p50": "TPOT p50",
                "tpot_p99": "TPOT p99"}
SHORT = {"e2e_p50": "e2e p50", "e2e_p99": "e2e p99", "goodput": "goodput", "output_tps": "tok/s",
         "ttft_p50": "TTFT p50", "ttft_p99": "TTFT p99", "tpot_p50": "TPOT p50", "tpot_p99": "TPOT p99"}
#: The columns of the levels table: the metrics shown, in order.
LEVEL_METRICS = ("e2e_p50", "goodput", "output_tps", "e2e_p99", "ttft_p99", "tpot_p50")


def num(x: float, digits: int = 6) -> str:
    """A number with *digits* significant, never in exponent form: a whole number from 10^(digits − 1) up."""
    return f"{x:.{digits}g}" if abs(x) < 10 ** (digits - 1) else f"{x:.0f}"


def at(x: float, axis: str, digits: int = 6) -> str:
    """A load in words: "4 in flight", "2.5 requests/s", "×4 speed" (*digits* significant: :func:`num`)."""
    v = num(x, digits)
    return f"{v} in flight" if axis == "concurrency" else f"{v} requests/s" if axis == "rate" else f"×{v} speed"


EVEN = 0.005  # a multiplier within this of 1 reads "even" (it rounds to 1.00x)


def _fig(m: float) -> str:
    return "is even (1.00x)" if abs(m - 1.0) < EVEN else f"pays {m:.2f}x" if m >= 1.0 else f"costs {1.0 - m:.0%}"


def _g(x: float | None) -> str:
    return "…" if x is None else num(x, 3)


def loads_words(xs: Sequence[float], axis: str) -> str:
    """Loads in words: "2, 4 and 8 in flight", "2 and 6 requests/s", "×2 and ×4 speed"."""
    vs = [("×" if axis == "speed" else "") + num(x) for x in xs]
    said = vs[0] if len(vs) == 1 else ", ".join(vs[:-1]) + " and " + vs[-1]
    return said + (" in flight" if axis == "concurrency" else " requests/s" if axis == "rate" else " speed")


def pays_clause(points: Sequence[tuple[float, float]], axis: str, pays: str, crossover: Crossover | None,
                crossings: int = 0, scope: str = "measured", unclear: Sequence[float] = ()) -> str:
    """Where one metric's multiplier pays along the levels, from its citable (load, multiplier) points (*scope*:
    "compared" where a level measured was not, every call of an arm having failed there; *unclear*: the loads
    whose interval holds 1, no clear difference)."""
    if not points:
        return "no level to judge"
    (x1, m1), (xn, mn) = points[0], points[-1]
    if pays == "no clear difference":
        span = f"{m1:.2f}x at {at(x1, axis)}" + (f" … {mn:.2f}x at {at(xn, axis)}" if xn != x1 else "")
        return f"shows no clear difference at any level {scope} ({span})"
    none_at = f" (no clear difference at {loads_words(unclear, axis)})" if unclear else ""
    if pays in ("every level", "no level"):
        clear = [p for p in points if p[0] not in set(unclear)] or list(points)
        (x1, m1), (xn, mn) = clear[0], clear[-1]
        if unclear and len(clear) == 1:
            return f"{_fig(m1)} at {at(x1, axis)}{none_at}"

        def one(m: float) -> str:
            return f"{m:.2f}x" if pays == "every level" else f"{1.0 - m:.0%}"
        span = f"{one(m1)} at {at(x1, axis)}" + (f" … {one(mn)} at {at(xn, axis)}" if xn != x1 else "")
        where = f"every level {scope}" if not unclear else "every level where it differs clearly"
        span += f"; no clear difference at {loads_words(unclear, axis)}" if unclear else ""
        return f"{'pays' if pays == 'every level' else 'costs'} at {where} ({span})"
    if crossover is None:
        return f"{_fig(m1)} at {at(x1, axis)}, {_fig(mn)} at {at(xn, axis)}{none_at}"
    a, b = crossover["between"]
    band = f"; sampling only: {_g(crossover['low'])}–{_g(crossover['high'])}" \
        if crossover["low"] is not None or crossover["high"] is not None else ""
    where = f"about {at(crossover['load'], axis, 2)} (between {a:g} and {b:g}{band})"
    mixed = f"; it crosses 1 {crossings} times" if crossings > 1 else ""
    return f"{_fig(m1)} at {at(x1, axis)}, up to {where}, and {_fig(mn)} at {at(xn, axis)}{mixed}{none_at}"


def _unclear(m: MetricRow) -> list[float]:
    return [v["load"] for v in m["levels"] if v["citable"] and v["value"] is not None and not v["clear"]]


def _points(m: MetricRow) -> list[tuple[float, float]]:
    return [(v["load"], float(v["value"])) for v in m["levels"] if v["citable"] and v["value"] is not None]


def _metrics(row: LoadLeverRow) -> dict[str, MetricRow]:
    return {m["metric"]: m for m in row["metrics"]}


def words(lever: str) -> str:
    x = registry.lever(lever)
    return x.words if x is not None else lever


def shown_metrics(row: LoadLeverRow) -> list[MetricRow]:
    """The metrics a pair's sentence says: end-to-end p50, then goodput where the stages set SLOs, else
    throughput (so a lever that helps latency and hurts throughput says both)."""
    ms = _metrics(row)
    rate = ms.get("goodput") if ms.get("goodput") and _points(ms["goodput"]) else ms.get("output_tps")
    return [m for m in (ms.get("e2e_p50"), rate) if m is not None]


def pair_sentence(row: LoadLeverRow) -> str:
    """One lever pair on one sweep in a sentence: its pair, then where it pays on each shown metric."""
    head = f"{words(row['lever'])} under load ({row['arm']} vs {row['vs']}, {row['sweep']})"
    if row["refused"]:
        return f"{head}: not citable ({row['refused']})"
    dead = [(lv, [row[w] for w in ("arm", "vs") if lv["calls"][w] and lv["failed"][w] == lv["calls"][w]])
            for lv in row["levels"] if lv["citable"] and "failed" in lv["reason_codes"]]
    parts = [f"every call of {' and '.join(who)} failed at {at(lv['load'], row['x'])} (goodput and throughput 0 there, "
             "latencies not compared)" for lv, who in dead]
    for m in shown_metrics(row):
        skipped = dead and any(not v["citable"] for v in m["levels"] if v["stage"] in {lv["stage"] for lv, _ in dead})
        parts.append(f"{METRIC_WORDS[m['metric']]} " + pays_clause(_points(m), row["x"], m["pays"], m["crossover"],
                                                                   m["crossings"], "compared" if skipped else
                                                                   "measured", _unclear(m)))
    left = [lv for lv in row["levels"] if not lv["citable"]]
    out = f"{head}: " + "; ".join(parts)
    if left:
        codes = sorted({c for lv in left for c in lv["reason_codes"]})
        out += f" ({len(left)} of {len(row['levels'])} levels left out: {', '.join(codes)})"
    said = capacity_words(row.get("capacity"))
    return out + (f"; capacity at the SLOs {said}" if said else "")


def capacity_words(cap: CapacityPair | None) -> str | None:
    """A lever's capacity multiplier in words ("at least 1.50x", "between 0.75x and 1.50x"); None without one."""
    bound = cap.get("bound") if cap else None
    if not cap or bound is None:
        return None
    if bound == "between":
        return f"between {cap['low']:.2f}x and {cap['high']:.2f}x"
    return {"at least": "at least ", "at most": "at most "}.get(bound, "") + f"{cap['value']:.2f}x"


def capacity_load(c: CapacityRow, digits: int = 3, unit: bool = True) -> str:
    """An arm's capacity on its sweep's axis in words: "≥ 8 in flight", "2–4 in flight" (between a level that met
    the SLOs and the next, whose calls failed), "3.4 in flight" (*unit* False: the number alone); "none"."""
    load, upper = c["load"], c.get("upper")
    if load is None:
        return "none"
    top = upper if c["bound"] == "between" and upper is not None else load
    head = f"{num(load, digits)}–" if top != load else "≥ " if c["bound"] == "at least" else ""
    return head + (at(top, c["x"], digits) if unit else num(top, digits))


def under_load_sentence(u: UnderLoad, side: LeverSide | None = None) -> str:
    """A lever pair a ``--rates`` run measured under load (``analyze``'s and ``whatif``'s compact row), in one
    sentence, and where this traffic lies against it: "the drafter (cache+drafter vs cache, ramp) pays 1.80x at
    1 in flight, up to about 3.5 in flight (…), and costs 20% at 8 in flight; at your p95 of 6 in flight, …"."""
    points = [(float(x), float(m)) for x, m in u["levels"]]
    text = (f"the {u['words']} ({u['arm']} vs {u['vs']}, {u['sweep']}, {METRIC_WORDS.get(u['metric'], u['metric'])}) "
            + pays_clause(points, u["x"], u["pays"], u["crossover"], unclear=u.get("unclear") or ()))
    said = side_sentence(side) if side is not None else ""
    return text + (f"; {said}" if said else "")


def operating_lines(point: OperatingPoint | None, rows: Sequence[UnderLoad]) -> list[str]:
    """A trace's operating point, then each lever the ``--rates`` run measured under load and this traffic's side
    of it (``analyze``, ``whatif``)."""
    out = []
    if point is not None:
        fl = point["in_flight"]
        rate = f"{point['arrival_rate']:.3g} requests/s" if point["arrival_rate"] is not None else "no arrival rate"
        out.append(f"Operating point: {point['calls']:,} calls with arrival times, {rate}"
                   + (f"; calls in flight p50 {fl['p50']:g}, p95 {fl['p95']:g} (mean {fl['mean']:.3g}, max "
                      f"{fl['max']:g}; {point['duration_source']})" if fl else ""))
    sides = (point.get("sides") if point else None) or []
    for u in rows:
        side = next((s for s in sides if (s["arm"], s["vs"], s["sweep"]) == (u["arm"], u["vs"], u["sweep"])), None)
        out.append("Under load: " + under_load_sentence(u, side))
    return out


def side_sentence(side: LeverSide) -> str:
    """Where a trace's traffic lies against one lever pair: "at your p95 of 6 in flight: 0.70x, leave it off"."""
    if side["multiplier"] is None:
        return ""
    beyond = "" if side["measured"] else " (beyond the levels measured: the nearest level's)"
    your = f"your {side['at_what']} of {at(side['at'], side['x'])}"
    return (f"at {your}, the {words(side['lever'])} {_fig(side['multiplier'])}{beyond} "
            f"({METRIC_WORDS.get(side['metric'], side['metric'])}): {side['advice']}")


# ---------------------------------------------------------------- tables


def _mult(v: LevelValue | None) -> str:
    if not v or v.get("value") is None:
        return "—"
    text = f"{v['value']:.2f}x"
    if v.get("low") is not None and v.get("high") is not None:
        text += " " + ratio_words(v["low"], v["high"])
    return text if v.get("citable") else f"({text})"


def _n(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _engagement(eng: Mapping[str, PairFigure]) -> str:
    return "; ".join(f"{k} {_n(p.get('arm'))}/{_n(p.get('vs'))}" for k, p in eng.items()) or "—"


def levels_table(summary: Summary) -> Table | None:
    """Per lever pair and level: the multipliers with their 95 % intervals, failures, the lever's own server
    figures on each arm, and the guard's verdict."""
    rows = []
    for r in summary.get("load_levers") or []:
        by = {m["metric"]: {v["stage"]: v for v in m["levels"]} for m in r["metrics"]}
        for lv in r["levels"]:
            rows.append([f"{words(r['lever'])}: {r['arm']} vs {r['vs']} ({r['sweep']})", at(lv["load"], r["x"]),
                         *[_mult(by.get(k, {}).get(lv["stage"])) for k in LEVEL_METRICS],
                         f"{lv['failed']['arm']:.0f}/{lv['failed']['vs']:.0f}", _engagement(lv["engagement"]),
                         ("rates only" if "failed" in lv["reason_codes"] else "yes") if lv["citable"] else "no",
                         lv["reason"] or ""])
    if not rows:
        return None
    return Table("load_levers", "Levers under load: each pair's multipliers at every level both arms ran",
                 ["lever: pair (sweep)", "load", *[SHORT[k] for k in LEVEL_METRICS], "failed arm/vs",
                  "server figures arm/vs", "citable", "reason"], rows,
                 notes=["A multiplier > 1: the lever pays at that level (reference time / arm time for a latency, arm "
                        "rate / reference rate for a throughput); [low–high]: 95 % bootstrap interval over the level's "
                        "calls; in parentheses: a level the guard leaves out (the client fell behind its schedule, "
                        "unequal work, too few calls) or a figure without its value. Failed calls count in the "
                        "latencies at their elapsed time and miss every SLO; where every call of an arm failed, the "
                        "level counts for goodput and throughput alone (citable: rates only). Server figures: the "
                        "lever's own counters over the stage (e.g. a drafter's acceptance), each arm's."])


def crossover_table(summary: Summary) -> Table | None:
    """Per lever pair and metric: where it pays and the load at which it crosses 1."""
    rows = []
    for r in summary.get("load_levers") or []:
        for m in r["metrics"]:
            c = m["crossover"]
            cross = "—" if c is None else (f"{num(c['load'], 3)} ({c['between'][0]:g}–{c['between'][1]:g}; "
                                           f"sampling only {_g(c['low'])}–{_g(c['high'])})")
            rows.append([f"{words(r['lever'])}: {r['arm']} vs {r['vs']} ({r['sweep']})", METRIC_WORDS[m["metric"]]
                         + (" ◆" if m["default"] else ""), m["pays"], cross, m["reason"] or ""])
    if not rows:
        return None
    return Table("load_crossovers", "Where each lever flips: the load at which its multiplier crosses 1",
                 ["lever: pair (sweep)", "metric", "pays", "crossover (between levels; sampling interval)", "note"],
                 rows,
                 notes=["Between two citable levels whose intervals lie on opposite sides of 1, where the difference "
                        "of the two arms' statistics, interpolated linearly, is 0; the interval is where the "
                        "multipliers' 95 % bounds cross 1 the same way (… : beyond the levels measured), the "
                        "sampling's part of the uncertainty only: between two levels the curve's shape is not "
                        "measured. ◆: reported by default."])


def capacity_table(summary: Summary) -> Table | None:
    """Per arm and sweep: the highest load meeting the SLOs, its throughput and the price of capacity there."""
    rows = []
    for c in summary.get("capacity") or []:
        slo = ", ".join(f"{k.removeprefix('slo_').removesuffix('_s').upper()} ≤ {v * 1000:g} ms"
                        for k, v in c["slo"].items() if isinstance(v, (int, float)))  # (every SLO is a number)
        load = capacity_load(c)
        usd, usd_m = c["usd_per_1000_requests"], c["usd_per_million_output_tokens"]
        rows.append([c["arm"], c["sweep"], f"p{c['percentile']:g}: {slo}", load, _g(c["output_tps"]),
                     _g(c["requests_per_s"]), _g(c["gpu_hours_per_1000_requests"]),
                     _g(c["gpu_hours_per_million_output_tokens"]), "—" if usd is None else f"${usd:,.4g}",
                     "—" if usd_m is None else f"${usd_m:,.4g}", c["reason"] or ""])
    if not rows:
        return None
    notes = ["Capacity: the highest load whose percentile of each SLO's metric meets it, interpolated linearly "
             "between the last level that meets them and the first that does not (≥: every level met them; a–b: "
             "level b's calls failed, so the capacity lies between them). "
             "GPU-hours per 1,000 requests = GPUs × 1,000 / (3,600 × requests/s there); per million output tokens "
             "= GPUs × 10^6 / (3,600 × output tokens/s there)."]
    assumed = [c["arm"] for c in summary.get("capacity") or [] if c.get("gpus_source") == "assumed"]
    if assumed:
        notes.append(f"{', '.join(dict.fromkeys(assumed))}: 1 GPU assumed (no gpus in the arm's conditions): set "
                     "conditions.gpus for the price of the GPUs the arm uses")
    for r in summary.get("load_levers") or []:
        cap = r.get("capacity")
        if cap:
            said = capacity_words(cap) or f"none ({cap['reason']})"
            notes.append(f"{words(r['lever'])} ({r['arm']} vs {r['vs']}, {r['sweep']}): capacity multiplier {said}")
    return Table("capacity", "Capacity at the SLOs, and its price", ["arm", "sweep", "SLOs", "capacity", "out tok/s",
                 "req/s", "GPU-h / 1k req", "GPU-h / M tok", "$ / 1k req", "$ / M tok", "note"], rows, notes)


def lever_load_tables(summary: Summary) -> list[Table]:
    """The tables of the levers under load that have rows."""
    return [t for t in (levels_table(summary), crossover_table(summary), capacity_table(summary)) if t is not None]
