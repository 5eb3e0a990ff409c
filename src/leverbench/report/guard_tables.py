"""The guard's tables, built from ``summary.json``: the multipliers and why each may be cited, equal work,
and drift (what it does to each comparison).  Like :mod:`.tables`, they only format what the analysis
returned."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..readable import SPAN, change_words
from .table import Table, pct

if TYPE_CHECKING:
    from ..schema.check_rows import TrendRow
    from ..schema.summary import Summary


def multiplier_table(summary: Summary) -> Table:
    rows = []
    for m in summary["multipliers"]:
        knobs = ", ".join(m["knobs"]) or "none"
        unknown = m.get("unknown_knobs") or []
        what = f"controlled: {knobs}" if m["controlled"] else f"UNCONTROLLED: {knobs}"
        if unknown:
            what += f" ({', '.join(unknown)} unknown on one arm)"
        ew = m.get("equal_work")
        at_ew = "—" if not ew or ew.get("value") is None else (f"{ew['value']:.2f}x" if ew["citable"]
                                                             else f"({ew['value']:.2f}x) not citable")
        rows.append([f"{m['arm']} vs {m['vs']}", m["scope"].removeprefix("case:"),
                     "—" if m["value"] is None else f"{m['value']:.2f}x",
                     pct(m["volume_spread"], 1), "yes" if m["citable"] else "no", at_ew, what,
                     m["reason"] or "" if not ew or ew["citable"] else f"{m['reason']}; at equal work: {ew['reason']}"])
    t = summary["tolerances"]
    return Table("multipliers", "Multipliers (reference time / arm time) and the guard",
                 ["comparison", "scope", "multiplier", "volume spread", "citable", "at equal work",
                  "knobs that differ", "reason"], rows,
                 notes=[f"A cell multiplier is citable when the two arms' generated tokens differ by at most "
                        f"{pct(t['volume_cell'])}, a total at most {pct(t['volume_total'])}; never with failed calls, "
                        "retried attempts, fewer than 2 successful repeats, or drift that biases the comparison "
                        "(its two arms drifted differently; in blocked order, any drift).",
                        "at equal work: where the volumes differ beyond tolerance, the arm's turns corrected by its "
                        "own rate model to the reference's work (see Equal work)."])


def equal_work_table(summary: Summary) -> Table | None:
    """Per comparison: how many calls gave the same output on both arms, where the others part, and the
    correction to equal work where the volumes differ."""
    rows = []
    for e in summary.get("equal_work") or []:
        same = "—" if not e["calls"] else f"{e['identical']} of {e['calls']} ({pct(e['identical_share'])})"
        part = "—" if e["divergence_chars_median"] is None else f"character {e['divergence_chars_median']:.0f}"
        tot = e.get("total")
        fig = "—" if not tot or tot.get("value") is None else (
            f"{tot['value']:.2f}x" + ("" if tot["citable"] else f" not citable: {tot['reason']}"))
        rows.append([f"{e['arm']} vs {e['vs']}", same, part, pct(e["token_change"], 1) if e["token_change"] is not None
                     else "—", pct(e["correction_share"], 1), fig])
    if not rows:
        return None
    return Table("equal_work", "Equal work: the same outputs, and the multiplier at the reference's work",
                 ["comparison", "identical outputs", "median divergence", "arm's tokens vs reference",
                  "correction (share of the arm's time)", "total at equal work"], rows,
                 notes=["Outputs are compared call by call (same case, repeat and step) at temperature 0; identical: "
                        "the same answer and token count. Greedy speculative decoding and batched kernels are not "
                        "bit-exact on real engines, so answers part and volumes differ.",
                        "At equal work each of the arm's turns is its measured time plus what its own rate model says "
                        "the difference in work costs (prompt, cached and generated tokens of each step); citable "
                        "when that correction is under a quarter of the time and the rate model passes its "
                        "cross-check (the probes)."])


def _trend(t: TrendRow | None) -> str:
    """A trend row's change and interval (:func:`.drift.change_words`: in words where the interval is not
    :func:`.drift.bounded`)."""
    if not t or t.get("change") is None:
        return "—"
    return change_words(t["change"], t.get("low"), t.get("high"), t.get("points") or 2, digits=1)


def drift_table(summary: Summary) -> Table | None:
    """Per arm: its sentinels' speed trend over the run (decode, prefill) and its warm-up; per comparison: what
    drift does to it; and the common drift in words."""
    if not summary["drift"]:
        return None
    tol = pct(summary["tolerances"]["drift"])
    rows = []
    for d in summary["drift"]:
        if "decode" not in d:  # a summary written before the series: start and end only
            rows.append([d["arm"], "2", _trend({"change": d["change"]}), "—", "DRIFTED" if d["drifted"] else "ok", ""])
            continue
        w = d.get("warmup")
        warm = "—" if not w else f"{w['calls']} call(s), {'settled' if w['settled'] else 'NOT settled'}"
        state = "unknown" if d["unknown"] else ("DRIFTED" if d["drifted"] else "ok")
        rows.append([d["arm"], str(d["sentinels"]), _trend(d["decode"]), _trend(d["prefill"]), state, warm])
    for p in summary.get("drift_pairs") or []:
        if p["order"] == "blocked":
            rows.append([f"{p['arm']} vs {p['vs']}", "—", "—", "—", "REFUSED" if p["refuses"] else "ok",
                         p["reason"] or "blocked order: neither arm drifted"])
        else:
            state = "REFUSED" if p["refuses"] else ("undetermined" if p.get("undetermined") else "ok")
            vague = ("fewer than 3 sentinels: unknown" if p["points"] < 3 else
                     "its interval cannot rule out a differential drift beyond the tolerance (few sentinels, or "
                     "noisy ones)")
            why = p["reason"] or (f"{vague}; not refused for it: the interleaved order leaves a steady drift's ratio "
                                  "the run's average; more repeats narrow it" if p.get("undetermined") else "")
            rows.append([f"{p['arm']} vs {p['vs']} (ratio)", str(p["points"]), _trend(p["decode"]),
                         _trend(p["prefill"]), state, why])
    common = summary.get("drift_common")
    text = common.get("text") if common else None
    notes = [f"Speed over the run from the sentinels that open every round: its change from start to end with its "
             f"95 % interval. An arm drifted when the interval excludes 0 and the change is beyond {tol}; a "
             "comparison is refused for drift when the ratio of its arms' speeds drifted so (interleaved order), or "
             "when either arm drifted, or its drift is unknown or undetermined (blocked order). Fewer than 3 "
             f"sentinels: unknown. An interval whose ends lie over {SPAN:.0f}x apart (as speed ratios) is said in "
             "words: the sentinels do not bound it."]
    if text:
        notes.insert(0, text[0].upper() + text[1:] + ".")
    return Table("drift", "Drift: each arm's speed over the run, and what it does to each comparison",
                 ["arm / comparison", "sentinels", "decode speed", "prefill speed", f"beyond {tol}?", "warm-up / why"],
                 rows, notes=notes)
