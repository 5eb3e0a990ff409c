"""The traffic analysis in words: the conditions its numbers hold under, and the recommendation.

Pure functions over :func:`leverbench.analysis.traffic.analyze.analyze_traffic`'s result (its ``overall``,
``levers``, ``queue``, ``distribution`` and ``extrapolation``) and the rates it used.  The levers' words and
advice beyond those the traffic estimates are their modules' (:mod:`leverbench.levers`): the levers acting on
the dominant phase that only an experiment can measure are named with how to turn them on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ...levers import registry
from ...schema.traffic_rows import PHASES as PHASES
from ...schema.traffic_rows import TrafficPhase as TrafficPhase
from .rates import RateBook

if TYPE_CHECKING:
    from ...schema.traffic_rows import LeverRow, PhaseRow, TrafficResult



def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}" if abs(x) >= 0.1 else f"{x:.1%}"


def phase_share(row: PhaseRow, phase: str) -> float | None:
    """``row``'s share of the time in ``phase`` (one of :data:`PHASES`): its ``<phase>_share``."""
    if phase == "prefill":
        return row["prefill_share"]
    if phase == "decode":
        return row["decode_share"]
    if phase == "queue":
        return row["queue_share"]
    raise KeyError(f"{phase}_share")


def saved_s(lever: LeverRow) -> float:
    """The seconds an estimated lever's row saves."""
    s = lever["saved_s"]
    assert s is not None  # an estimated row has its saving (analyze._lever_row)
    return s


def saved_share(lever: LeverRow) -> float:
    """The share of the time an estimated lever's row saves, where some phase dominates."""
    s = lever["saved_share"]
    assert s is not None  # None only where the total time is 0, and then no phase dominates (recommend returns)
    return s


def conditions(result: TrafficResult, book: RateBook, said: Sequence[str] = ()) -> list[str]:
    """The conditions under which the numbers hold, in words; *said*: the levers' own (their traffic savings'
    ``condition``: the answer cap's when it is the median output)."""
    per = []
    for key, r in book.items():
        who = "" if len(book) == 1 else "all other calls: " if key is None else f"{key}: "
        fit = f" (R² {r.fit['r2']:.2f})" if r.fit and r.fit.get("r2") is not None else ""
        per.append(f"{who}prefill {r.prefill_tps:,.0f} tok/s + {r.prefill_a_s:.3g} s, "
                   f"decode {r.decode_tps:,.1f} tok/s{fit}")
    sources = dict.fromkeys(f"{r.source} (prefill: {r.prefill_source or 'n/a'}; decode: {r.decode_source or 'n/a'})"
                            + (f"; {', '.join(r.conditions)}" if r.conditions else "") for r in book.values())
    out: list[str] = ["rates " + "; ".join(per) + " — " + "; ".join(sources)]
    q = result["queue"]
    if not q["measured"]:
        out.append("queueing " + q["note"] + "; the numbers are for calls served one at a time")
    ex = result.get("extrapolation")
    if ex and ex["calls_beyond"]:
        out.append(f"{pct(ex['share_beyond'])} of the calls have more input than the largest prompt the prefill "
                   f"rate was measured on ({ex['largest_measured']:,.0f} tokens): extrapolated")
    meaning = result.get("cached_meaning")
    if meaning:
        out.append(meaning)
    cache = registry.prompt_cache()
    if result.get("cache_already_on") and cache is not None:
        out.append(f"a {cache.words} was already on (the log's cached tokens were served by it): prefill counts only "
                   "the uncached tokens")
    out += said
    for r in book.values():
        if r.drafter_speedup is not None and r.drafter_source:
            out.append(f"drafter speedup {r.drafter_speedup:.2f}x ({r.drafter_source}); acceptance depends on the text")
            break
    return out


def recommend(result: TrafficResult) -> str:
    """One paragraph: the dominant phase, the lever to try first, its gain with range, and its conditions."""
    ov = result["overall"]
    dom = ov["dominant"]
    if dom is None:
        return "The modelled time is zero: these calls have no tokens to prefill or decode."
    shares = ", ".join(f"{p} {pct(phase_share(ov, p))}" for p in PHASES if p != "queue" or result["queue"]["measured"])
    ratio = result["distribution"]["input_output_ratio"]  # None: no output tokens at all
    tokens = f"input:output tokens {ratio:.1f}:1" if ratio is not None else "no output tokens"
    text = [f"{dom.capitalize()} dominates: {pct(phase_share(ov, dom))} of the modelled time ({shares}; {tokens})."]
    levers = result["levers"]
    est = [l for l in levers if l["estimated"] and saved_s(l) > 0]
    best = est[0] if est else None
    firsts = {x.words for x in registry.traffic_levers() if x.traffic and x.traffic.first}
    target = next((l for l in levers if l["phase"] == dom and l["lever"] in firsts and not l.get("already_on")), None)
    on = next((l for l in levers if l.get("already_on")), None)
    if on is not None:
        text.append(f"The {on['lever']} is already on: it served {pct(on['served_share'])} of the input tokens, "
                    f"a realized saving of {on['realized_saved_s']:.3g} s ({pct(on['realized_share'])} of the time "
                    f"these calls would take without it, {on['realized_gpu_hours_per_1000_calls']:.3g} GPU-hours per "
                    "1,000 calls); the other levers are ranked against the time actually spent.")
    if dom == "queue":
        text.append(_queue_words(result))
    elif (target is not None and not target["estimated"]
          and (best is None or (target["ceiling_share"] or 0) > saved_share(best))):
        reason = target["reason"]
        assert reason is not None  # a lever not estimated and not already on says why (its module's `unknown`)
        text.append(f"Try a {target['lever']} first: it targets the dominant phase, but "
                    f"{reason.split(';')[0]}, so its gain is somewhere between 0 and "
                    f"{pct(target['ceiling_share'])} (all of {dom}).")
        if best is not None:
            text.append(f"Of the levers this traffic lets us estimate, the {_lever_words(best)} would remove "
                        f"{_gain(best, result)}.")
    elif best is not None:
        text.append(f"Try the {_lever_words(best)} first: it would remove {_gain(best, result)}.")
        if best["phase"] != dom and on is not None and on["phase"] == dom:
            text.append(f"{dom.capitalize()} still dominates with the {on['lever']} on: longer shared prefixes or a "
                        "larger cache would add to its saving (leverbench whatif simulates a cache of finite size).")
        elif best["phase"] != dom:
            text.append(f"It works on {best['phase']}, not on the dominant phase, whose levers return less here.")
    else:
        text.append("None of the estimated levers would save time on this traffic.")
    neg = [l for l in levers if l["estimated"] and saved_s(l) < 0]
    for l in neg:
        text.append(f"The {_lever_words(l)} would add time ({pct(-saved_share(l))}): do not turn it on as measured.")
    if dom != "queue" and (others := _to_measure(dom, {str(l["lever"]) for l in levers})):
        text.append(f"An experiment can measure the other levers acting on {dom}: {others}.")
    cond = result.get("conditions") or []
    if cond:
        text.append("This holds for " + "; ".join(cond) + ".")
    return " ".join(text)


def _lever_words(l: LeverRow) -> str:
    return l["lever"] + (f" ({l['parameter']})" if l.get("parameter") else "")


def _gain(l: LeverRow, result: TrafficResult) -> str:
    s = f"{pct(l['saved_share'])} of the time"
    rng = l.get("range")
    if rng:
        lo, hi = rng
        s += f" (range {pct(lo)} to {pct(hi)}, {l['range_source']})"
    s += f", {l['saved_s_per_call']:.3g} s per call, {l['gpu_hours_per_1000_calls']:.3g} GPU-hours per 1,000 calls"
    if l.get("usd_per_1000_calls") is not None:
        s += f" (${l['usd_per_1000_calls']:,.2f})"
    return s


_METRIC_WORDS = {"e2e_p50": "end-to-end p50", "goodput": "goodput", "output_tps": "throughput"}


def load_words(x: float, axis: str) -> str:
    """A load level in words: "4 in flight", "2.5 requests/s", "×4 trace speed"."""
    return f"{x:g} in flight" if axis == "concurrency" else f"{x:g} requests/s" if axis == "rate" else f"×{x:g} speed"


def _queue_words(result: TrafficResult) -> str:
    """What to do about a queue that dominates: the lever acting on queueing (batching) that the ``--rates`` run
    measured under load, with its multipliers level by level and where this traffic lies (``under_load``,
    ``operating_point``); without such a measurement, capacity or batching in general."""
    measured = [u for u in result.get("under_load") or [] if u["queueing"] and u["levels"]]
    if not measured:
        return f"No lever here targets queueing: add capacity or {_queue_lever()} first."
    u = max(measured, key=lambda u: max(v for _, v in u["levels"]))
    levels = ", ".join(f"{v:.2f}x at {load_words(x, u['x'])}" for x, v in u["levels"])
    said = (f"Queueing is {u['words']}'s to shorten, and the --rates run measured it under load: {u['lever']} "
            f"({u['arm']} vs {u['vs']}, '{u['sweep']}') multiplies the {_METRIC_WORDS.get(u['metric'], u['metric'])} "
            f"by {levels}")
    cross = f" and crosses 1 at about {load_words(u['crossover']['load'], u['x'])}" if u["crossover"] else ""
    said += {"every level": ", paying at every level measured.", "no level": ": it paid at none of them, so add "
             "capacity first.", "no clear difference": ": no clear difference at any of them, so add capacity "
             "first."}.get(u["pays"], f"{cross}.")
    point = result.get("operating_point")
    side = next((s for s in (point.get("sides") if point else None) or []
                 if (s["arm"], s["vs"], s["sweep"]) == (u["arm"], u["vs"], u["sweep"])), None)
    if side is not None and side["multiplier"] is not None:
        said += (f" At this traffic's {side['at_what']} ({load_words(side['at'], side['x'])}) it is "
                 f"{side['multiplier']:.2f}x{'' if side['measured'] else ' (beyond the levels measured: the nearest)'}"
                 f": {side['advice']}.")
    return said


def _queue_lever() -> str:
    """The words of the first lever that acts on queueing (the batching lever's: "batching")."""
    return next((x.words for x in registry.levers() if "queueing" in x.phases), "more slots")


def _to_measure(phase: str, named: set[str]) -> str:
    """The levers that act on *phase* alone among the phases (not on the whole call), other than those the
    traffic analysis named, each with its advice: "" when none."""
    words = [f"the {x.words} ({x.advice})" if x.advice else f"the {x.words}" for x in registry.levers()
             if phase in x.phases and "both" not in x.phases and x.words not in named]
    return "; ".join(words)
