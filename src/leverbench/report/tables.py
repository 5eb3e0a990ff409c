"""The report's tables as plain rows of strings, built from ``summary.json``.

Both the terminal and the Markdown report render these same tables, so the two never disagree.  Nothing here
computes a statistic: it only formats what the analysis returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from ..knob_values import is_on
from ..levers import Lever, registry
from ..readable import ratio_words
from .conditions import conditions_table, repeats_table, tools_table
from .guard_tables import drift_table, equal_work_table, multiplier_table
from .hardware_tables import hardware_tables
from .load_tables import load_tables
from .rate_tables import (
    decomposition_table,
    metrics_table,
    probe_table,
    rate_model_table,
    server_table,
    shares_table,
)
from .recorded_tables import recorded_table
from .table import Table, pct, s

if TYPE_CHECKING:
    from ..schema.experiment_rows import MultiplierRow, VerdictRow
    from ..schema.summary import Summary


def mult(m: MultiplierRow | None) -> str:
    """A multiplier row as the results cite it: its value, else "(value) not citable", with its equal-work figure
    where that one may be cited."""
    if not m or m.get("value") is None:
        return "—"
    v = f"{m['value']:.2f}x"
    if m["citable"]:
        return v
    ew = m.get("equal_work")
    if ew and ew.get("citable") and ew.get("value") is not None and m.get("reason_codes") == ["volume"]:
        return f"({v}) not citable; {ew['value']:.2f}x at equal work"
    return f"({v}) not citable"


def _arms(summary: Summary) -> list[str]:
    return [a["name"] for a in summary["arms"]]


def result_table(summary: Summary) -> Table:
    arms = _arms(summary)
    base = summary["baseline"]
    cell = {(c["arm"], c["case"]): c for c in summary["cells"]}
    rows = []
    for case in summary["cases"]:
        row = [case]
        for a in arms:
            c = cell[(a, case)]
            if c["median_s"] is None:
                row.append(f"no successful turn ({c['failed_turns']} failed)")
                continue
            txt = f"{c['median_s']:.1f} s [{c['min_s']:.1f}–{c['max_s']:.1f}] n={c['n']}"
            if c["failed_turns"]:
                txt += f" ({c['failed_turns']} failed)"
            if c.get("empty_answers"):
                txt += f" ({c['empty_answers']} empty answer{'s' if c['empty_answers'] > 1 else ''})"
            if c.get("step_limited"):
                txt += f" ({c['step_limited']} cut by step limit)"
            if c.get("overlaps_baseline") is False:
                txt += " disjoint"
            row.append(txt)
        rows.append(row)
    tot = {t["arm"]: t for t in summary["totals"]}
    rows.append(["total"] + [f"{tot[a]['total_s']:.1f} s" if tot[a]["total_s"] is not None else "incomplete"
                             for a in arms])
    mtot = {m["arm"]: m for m in summary["multipliers"] if m["scope"] == "total" and m["vs"] == base}
    rows.append([f"vs {base}"] + ["1.00x (baseline)" if a == base else mult(mtot.get(a)) for a in arms])
    vs_base = {v["arm"]: v for v in summary.get("verdicts") or [] if v["vs"] == base}
    if vs_base:
        conf = next(iter(vs_base.values()))["confidence"]
        rows.append([f"ratio vs {base} [{pct(conf)} interval]"]
                    + ["—" if a not in vs_base else _verdict_ratio(vs_base[a]) for a in arms])
    common = summary.get("drift_common") or {}
    adjusted = ["Times put on the speed at the run's first sentinel: the machine's speed changed during the run "
                "alike for every arm (see Drift), and each call's prefill and decode time is scaled by that common "
                "trend at its time."] if common.get("adjusted") else []
    return Table("results", "Turn time per case: median of the repeats [observed range]"
                 + (", on one speed (common drift adjusted)" if common.get("adjusted") else ""), ["case", *arms], rows,
                 notes=["'disjoint': the arm's range does not overlap the baseline's."] + adjusted
                 + (["ratio: the geometric mean over cases of the paired per-repeat ratios (baseline / arm), with its "
                     "interval (see Verdicts)."] if vs_base else []))


def _verdict_ratio(v: VerdictRow) -> str:
    """A verdict row's ratio and interval, saying where it was taken at equal work or refused."""
    txt = ratio_interval(v)
    if v.get("measure") == "equal work":
        txt += " at equal work"
    if v.get("refused"):
        txt = f"({txt}) not citable"
    return txt


def ratio_interval(v: VerdictRow) -> str:
    """A verdict row's ratio and its interval: '1.87x [1.73–2.03]'; an interval not bounded (an unbounded end, or
    ends over tenfold apart: :func:`leverbench.readable.bounded`) in words (:func:`leverbench.readable.ratio_words`):
    '3.00x [above 1.60x: its repeats bound it below only]', '1.27x [no interval: its repeats do not bound it]'."""
    if v.get("ratio") is None:
        return "—"
    return f"{v['ratio']:.2f}x {ratio_words(v.get('low'), v.get('high'))}"


def _repeats_per_case(repeats: dict[str, int]) -> str:
    """'3 per case' when every case has as many, else 'a 3, b 5'."""
    counts = set(repeats.values())
    if len(counts) == 1:
        return f"{counts.pop()} per case"
    return ", ".join(f"{c} {n}" for c, n in repeats.items())


def verdicts_table(summary: Summary) -> Table:
    """Per lever (each decided comparison): the verdict, the ratio with its interval, the repeats it used and the
    GPU-hours, against what a fixed design of the same confidence would have needed."""
    rows_in = summary.get("verdicts") or []
    rows = []
    for v in rows_in:
        fixed = "—" if v["fixed_design_gpu_hours"] is None else \
            f"{v['fixed_design_gpu_hours']:.3g} ({v['fixed_design_repeats']} per case)"
        why = v.get("reason") or ""
        if v.get("stopped_by") not in (None, "decided"):
            why = "; ".join(x for x in (f"stopped by {v['stopped_by']}", why) if x)
        if v.get("refused") and not v.get("reason"):
            why = "; ".join(x for x in (f"refused: {v['refused']}", why) if x)
        ratio = ratio_interval(v) + (" at equal work" if v.get("measure") == "equal work" else "")
        rows.append([v["lever"] or f"(uncontrolled: {', '.join(v['knobs']) or 'no knob'})", f"{v['arm']} vs {v['vs']}",
                     v["verdict"], ratio, _repeats_per_case(v["repeats"]), f"{v['gpu_hours']:.3g}", fixed,
                     why])
    # (the design's figures are every verdict's; without one, the defaults the words are written with)
    first = rows_in[0] if rows_in else None
    confidence, min_effect = (first["confidence"], first["min_effect"]) if first else (0.95, 1.1)
    power = first["fixed_design_power"] if first else 0.9
    sequential = first is not None and first["method"] == "confidence sequence"
    how = (f"anytime-valid {pct(confidence)} confidence sequence, repeats added until decided" if sequential
           else f"{pct(confidence)} t-interval over the fixed repeats")
    ad = summary.get("adaptive")
    notes = [f"pays: the interval lies above {min_effect:.2f}x; does not pay: below it; equivalent: inside "
             f"[{1 / min_effect:.2f}x, {min_effect:.2f}x]; undecided: none of these when the "
             "repeats ran out. A comparison the guard refuses never pays.",
             "ratio: geometric mean over cases of reference / arm, paired repeat by repeat (not the total multiplier); "
             "'at equal work': the arm's turns corrected to the reference's work (see Equal work), where the arms' "
             "output volumes differ and that correction may be cited.",
             f"fixed design: the repeats per case a fixed number of repeats at the same confidence needs to reach the "
             f"same verdict with {pct(power)} power, were the observed effect and noise true."]
    if ad:
        limit = "" if ad["max_gpu_hours"] is None else f", at most {ad['max_gpu_hours']:g} GPU-hours"
        notes.append(f"Adaptive: {ad['initial_repeats']} repeats, then one more per round to the comparisons still "
                     f"open (up to {ad['max_repeats']}{limit}); {len(ad['rounds'])} round(s) added, "
                     f"{ad['gpu_hours']:.3g} GPU-hours of turns in all; stopped: {ad['stopped_by']}.")
    return Table("verdicts", f"Verdicts per lever ({how}; min effect {min_effect:.2f}x)",
                 ["lever", "comparison", "verdict", "ratio [interval]", "repeats", "GPU-h spent",
                  "fixed design GPU-h", "why"], rows, notes=notes)


def levers_table(summary: Summary) -> Table:
    """The headline: each lever, the controlled comparison that measures it, and whether it may be cited (the
    equal-work figure where the measured one is refused for its output volume alone)."""
    rows = []
    for l in summary.get("levers") or []:
        if l["arm"] is None:
            rows.append([l["lever"], "none", "—", "—", "—", "—", l["reason"] or ""])
            continue
        value = "—" if l["multiplier"] is None else f"{l['multiplier']:.2f}x"
        if l.get("measure") == "equal work":
            value += " at equal work"
        engaged = "—" if l["engaged"] is None else ("yes" if l["engaged"] else "NO")
        rows.append([l["lever"], f"{l['arm']} vs {l['vs']}", value if l["citable"] else f"({value}) not citable",
                     "yes" if l["citable"] else "no", engaged, s(l.get("gpu_hours_returned_per_1000_turns"), 2),
                     l.get("note") or l["reason"] or ""])
    return Table("levers",
                 "Levers: each measured by two arms that differ in that knob only (total time, reference / arm)",
                 ["lever", "measured by", "multiplier", "citable", "engaged", "GPU-h returned per 1000 turns",
                  "reason"],
                 rows, notes=["Knobs are the arms' declared conditions and what leverbench discovered from their "
                              "endpoints (engine and version, model, served flags). A comparison that differs in more "
                              "than one knob mixes their effects: it is shown under Multipliers, marked uncontrolled.",
                              "'at equal work': the arms generated different volumes, so the measured multiplier is "
                              "refused; each of the arm's turns is timed at the reference's work instead (its measured "
                              "time corrected by its own rate model for the difference only: see Equal work)."])


def volume_table(summary: Summary) -> Table:
    arms = _arms(summary)
    cell = {(c["arm"], c["case"]): c for c in summary["cells"]}
    rows = []
    for case in summary["cases"]:
        rows.append([case] + [f"{s(cell[(a, case)]['output_tokens_median'], 0)} / "
                              f"{s(cell[(a, case)]['input_tokens_median'], 0)}" for a in arms])
    tot = {t["arm"]: t for t in summary["totals"]}
    rows.append(["total"] + [s(tot[a]["output_tokens"], 0) for a in arms])
    tools = [r for r in summary.get("tools") or [] if isinstance(r, dict)]
    dropped = sorted({r["case"] for r in tools if r.get("dropped")})
    unknown = sorted({r["case"] for r in tools if r.get("not_known")} - set(dropped))
    what = "system prompt included"
    if dropped:
        what += "; tool schemas only where they reached the model: dropped for " + ", ".join(dropped)
    if unknown:
        what += "; whether the tool schemas reached the model is not known for " + ", ".join(unknown)
    if tools and not dropped and not unknown:
        what = "system prompt and tool schemas included"
    elif tools:
        what += " (see Tools)"
    return Table("volume", "Tokens per turn: generated (reasoning included: the guard's output volume) / input as the "
                 f"server counted it ({what}; medians)", ["case", *arms], rows)


def projection_table(summary: Summary) -> Table | None:
    p = summary.get("projection")
    if not p:
        return None
    rows = []
    for a in p["arms"]:
        if "refused" in a:
            rows.append([a["arm"], "—", "—", "—", a["refused"]])
            continue
        pre = f"{a['prefill_s']:.2f}" + (f" ({pct(a['prefill_share'])})" if a["prefill_share"] is not None else "") \
            if a["prefill_s"] is not None else "—"
        dec = f"{a['decode_s']:.2f}" + (f" ({pct(a['decode_share'])})" if a["decode_share"] is not None else "") \
            if a["decode_s"] is not None else "—"
        src = [f"decode {s(a['decode_tps'])} tok/s from {a['decode_source']}"
               + (f" ({a['decode_extrapolation']})" if a.get("decode_extrapolation") else "")
               if a["decode_s"] is not None else f"decode not projected: {a['decode_refused']}",
               f"prefill {a['extrapolation']}" if a["prefill_s"] is not None
               else f"prefill not projected: {a['prefill_refused']}"]
        rows.append([a["arm"], pre, dec, "—" if a["total_s"] is None else f"{a['total_s']:.2f}", "; ".join(src)])
    notes = []
    for l in p["levers"]:
        tag = "" if l["credited"] else " — NOT credited: the lever did not engage"
        if not l.get("citable", True):
            tag += f" — NOT citable: {l['reason']}"
        speed = "—" if l["speedup"] is None else f"{l['speedup']:.2f}x"
        phase = "both phases" if l["phase"] == "both" else f"its own phase, {l['phase']}"
        share = "" if l["saved_share"] is None else f"{pct(l['saved_share'])} of the turn, "
        notes.append(f"lever {l['lever']}: {l['without']} → {l['with']} returns {l['saved_s']:.2f} s "
                     f"({share}{speed}), acting on {phase}{tag}")
    recommendation = p.get("recommendation")
    if recommendation:
        notes.append(recommendation)
    return Table("projection", f"Scenario: {p['input_tokens']:,} input tokens, {p['output_tokens']:,} output tokens",
                 ["arm", "prefill s", "decode s", "total s", "from"], rows, notes)


def _holds_for(summary: Summary, arm: str) -> str:
    """The conditions a figure holds for: hardware, engine, cache, drafter, concurrency (declared or discovered)."""
    a = next((x for x in summary["arms"] if x["name"] == arm), None)
    c = (a.get("knobs") or a["conditions"]) if a else {}
    host = summary["run"].get("host")
    hw = c.get("gpu") or c.get("hardware") or c.get("device") or (host.get("cpu") if host else None) or "?"
    gpus = f" ×{c['gpus']}" if c.get("gpus") else ""
    engine = (" ".join(str(x) for x in (c.get("engine"), c.get("engine_version")) if x)
              or (a.get("model") if a else None) or "engine ?")
    parts = [f"{hw}{gpus}", engine, *(_stated(x, c) for x in registry.levers() if x.stated),
             f"concurrency {summary['run'].get('concurrency', 1)}"]
    return ", ".join(parts)


def _stated(x: Lever, knobs: Mapping[str, object]) -> str:
    """A lever's state among a figure's conditions, as its module says to state it (``stated``): "prefix cache on",
    "drafter ngram"; "?" where the knobs do not have it."""
    value = knobs.get(x.name)
    if x.name not in knobs:
        return f"{x.words} ?"
    if x.stated == "switch":
        return f"{x.words} {'on' if is_on(value) else 'off'}"
    return f"{x.words} {value if is_on(value) else 'none'}"


def cost_table(summary: Summary) -> Table | None:
    if not summary["cost"]:
        return None
    rows = []
    for c in summary["cost"]:
        citable = c.get("citable")
        rows.append([c["arm"], s(c["turn_s"]), "—" if c["usd_per_turn"] is None else f"${c['usd_per_turn']:.4f}",
                     f"{c['gpu_hours_per_1000_turns']:.2f}",
                     "—" if c["usd_per_1000_turns"] is None else f"${c['usd_per_1000_turns']:.2f}",
                     s(c.get("gpu_hours_returned_per_1000_turns"), 2),
                     "—" if citable is None else "yes" if citable else "no", c.get("reason") or "",
                     _holds_for(summary, c["arm"])])
    return Table("cost", "Cost of a turn in GPU time (one dedicated stream)",
                 ["arm", "mean turn s", "$ per turn", "GPU-h per 1000 turns", "$ per 1000 turns", "GPU-h returned",
                  "citable", "reason", "holds for"], rows,
                 notes=["usd_per_turn = turn_s × gpu_hour_usd × gpus / 3600; GPU-hours per 1000 turns = "
                        "turn_s × gpus × 1000 / 3600."])


def reasoning_table(summary: Summary) -> Table | None:
    rows = [[r["arm"], r["case"] or "—", str(r["generated_tokens"]),
             f"{r['reasoning_tokens']} ({pct(r['reasoning_share'])})", str(r["answer_tokens"]),
             f"{r['reasoning_chars']} / {r['answer_chars']}", s(r["ttft_median_s"], 2),
             s(r["first_answer_median_s"], 2), str(r["empty_answers"]), r["source"]]
            for r in summary.get("reasoning", [])]
    if not rows:
        return None
    return Table("reasoning", "Reasoning and answer: generated tokens split where the engine says so",
                 ["arm", "case", "generated", "reasoning", "answer", "chars reasoning / answer", "TTFT s",
                  "first answer token s", "empty answers", "split from"], rows,
                 notes=["An empty answer is a call that used all of max_tokens and returned no visible text."])


def discipline_table(summary: Summary) -> Table | None:
    rows = [[d["arm"], d["case"], d["variant"].removeprefix(d["case"]).strip(" []"), s(d["case_s"]), s(d["variant_s"]),
             f"{s(d['saved_s'])} ({pct(d['saved_share'])})",
             f"{s(d['output_tokens'], 0)} → {s(d['variant_output_tokens'], 0)}", pct(d["volume_spread"], 1)]
            for d in summary.get("prompt_discipline", [])]
    if not rows:
        return None
    return Table("discipline", "Prompt discipline: the same turn with a changed instruction (median turn seconds)",
                 ["arm", "case", "variant", "case s", "variant s", "saved", "generated tokens", "volume spread"], rows,
                 notes=["This saving comes from generating fewer tokens, not from a faster engine; because the output "
                        "volume differs by design it is never quoted as a multiplier."])


def all_tables(summary: Summary) -> list[Table]:
    tabs = [levers_table(summary), verdicts_table(summary), conditions_table(summary), repeats_table(summary),
            tools_table(summary), result_table(summary),
            volume_table(summary), multiplier_table(summary), equal_work_table(summary), recorded_table(summary),
            discipline_table(summary),
            reasoning_table(summary),
            shares_table(summary), decomposition_table(summary), probe_table(summary), rate_model_table(summary),
            server_table(summary),
            metrics_table(summary), projection_table(summary), cost_table(summary), drift_table(summary),
            *load_tables(summary), *hardware_tables(summary)]
    return [t for t in tabs if t is not None and t.rows]
