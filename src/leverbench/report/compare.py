"""``leverbench compare``'s output for the terminal and as Markdown: what changed first, then the machine's speed,
the cases not compared, each arm's geometric mean and each cell's ratio, and the lines that say what got slower.

Built from :func:`leverbench.analysis.compare.compare_runs`'s result; nothing here computes a figure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .markdown import md_table
from .table import Table

if TYPE_CHECKING:
    from ..json_types import JSONValue
    from ..schema.compare_rows import ArmRow, ChangedRow, CompareResult, Figures, LeverRow, RunComparison


def shown(v: JSONValue) -> str:
    if v is None:
        return "(none)"
    text = v if isinstance(v, str) else str(v)
    return text if len(text) <= 60 else text[:57] + "…"


def change_line(row: ChangedRow) -> str:
    """One changed condition: ``arm cache: engine_version b4500 → b4600``."""
    where = f"arm {row['arm']}: " if row["scope"] == "arm" else "host: " if row["scope"] == "host" else ""
    return f"{where}{row['what']} {shown(row['baseline'])} → {shown(row['later'])}"


def ratio_text(ratio: float | None, low: float | None, high: float | None) -> str:
    """``1.081x [1.052, 1.111]`` (later / baseline), ``1.081x`` without an interval, ``—`` without a ratio."""
    if ratio is None:
        return "—"
    return f"{ratio:.3f}x" + (f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else "")


def verdict_words(v: str | None) -> str:
    """A verdict as the output says it: "same" as "same within the threshold", none as "—"."""
    return "same within the threshold" if v == "same" else v or "—"


def cases_text(r: ArmRow | LeverRow) -> str:
    """An arm's or lever's compared cases, with those refused: ``3 (+1 refused)``."""
    return f"{r['cases']}" + (f" (+{r['refused_cases']} refused)" if r["refused_cases"] else "")


def _verdict(r: Figures) -> str:
    return verdict_words(r["verdict"])


def _corrected(r: Figures) -> str:
    return ratio_text(r["corrected_ratio"], r["corrected_low"], r["corrected_high"]) + \
        f" {verdict_words(r['corrected_verdict'])}"


def _is(v: str | None) -> str:
    return "the same" if v == "same" else v or "unknown"


def gate_line(c: RunComparison, correct_machine: bool) -> str | None:
    """Where the later turns were corrected for the machine: what the correction says of each arm, and which verdicts
    the exit code follows (``--correct-machine``); None where nothing was corrected."""
    m = c["machine"]
    if not m["corrected"]:
        return None
    phases = "; ".join(f"{ph} {x['change']:+.1%}" for ph, x in (("decode", m["decode"]), ("prefill", m["prefill"]))
                       if x is not None and x["change"] is not None)
    arms = c["arm_ratios"]
    said = ", ".join(("the arm" if len(arms) == 1 else f"arm {r['arm']}") + f" is {_is(r['corrected_verdict'])}"
                     + ("" if r["corrected_verdict"] == r["verdict"] else f" (measured: {_is(r['verdict'])})")
                     for r in arms)
    if correct_machine:
        return f"Corrected for the machine (sentinels: {phases}): {said}; the exit code follows it (--correct-machine)"
    return f"Corrected for the machine (sentinels: {phases}), {said}; pass --correct-machine to gate on that"


def lines(c: RunComparison, baseline: str, correct_machine: bool = False) -> list[str]:
    """The words before the tables: the runs, what changed, the machine's speed, the cases not compared."""
    out = [f"{c['later']['path']} against {baseline} (later / baseline: above 1x the later run is slower)"]
    changed = c["changed"]
    out.append("What changed: " + ("nothing the ledgers record (conditions, knobs, host, tool, schema)"
                                   if not changed else f"{len(changed)} condition(s)"))
    out += [f"  - {change_line(r)}" for r in changed]
    out.append(f"Machine speed: {c['machine']['text']}")
    out += [f"  {note}" for note in c["machine"]["notes"]]
    gate = gate_line(c, correct_machine)
    out += [gate] if gate else []
    missing = [m for m in c["arms"] if m["later"] is None]
    out += [f"  arm {m['arm']}: no arm of the later run matches it (by knobs or name; --match BASE=LATER)"
            for m in missing]
    renamed = [m for m in c["arms"] if m["later"] is not None and m["later"] != m["arm"]]
    out += [f"  arm {m['arm']} is compared with {m['later']} (matched by {m['how']})" for m in renamed]
    for k in c["cases"]:
        if not k["compared"]:
            out.append(f"  case {k['case']}: {k['reason']}")
        elif k["later"] != k["case"]:
            out.append(f"  case {k['case']} is compared with {k['later']} (the same {k['how']})")
    return out


def arm_table(c: RunComparison) -> Table:
    corrected = c["machine"]["corrected"]
    rows = [[r["arm"] if r["arm"] == r["later_arm"] else f"{r['arm']} → {r['later_arm']}",
             cases_text(r), ratio_text(r["ratio"], r["low"], r["high"]),
             _verdict(r) + (f" ({r['note']})" if r["note"] else ""),
             *([_corrected(r)] if corrected else [])]
            for r in c["arm_ratios"]]
    return Table("compare_arms", "Per arm: geometric mean over the compared cases",
                 ["arm", "cases", "later / baseline [interval]", "verdict",
                  *(["corrected for the machine"] if corrected else [])], rows)


def lever_table(c: RunComparison) -> Table | None:
    """Each lever both runs measured: its multiplier in each run and their ratio (None: no lever)."""
    rows = [[r["lever"], f"{r['arm']} vs {r['vs']}" + ("" if (r["arm"], r["vs"]) == (r["later_arm"], r["later_vs"])
                                                      or not r["compared"]
                                                      else f" → {r['later_arm']} vs {r['later_vs']}"),
             cases_text(r) if r["compared"] else "not compared",
             ratio_text(r["multiplier_baseline"], r["multiplier_baseline_low"], r["multiplier_baseline_high"]),
             ratio_text(r["multiplier_later"], r["multiplier_later_low"], r["multiplier_later_high"]),
             ratio_text(r["ratio"], r["low"], r["high"]),
             verdict_words(r["verdict"]) + (f": {r['reason']}" if r["reason"] else "")
             + (f" ({r['note']})" if r["note"] else "")]
            for r in c.get("levers", [])]
    if not rows:
        return None
    return Table("compare_levers", "Levers: each run's multiplier (reference time / arm time) and their ratio",
                 ["lever", "arm vs reference", "cases", "baseline run", "later run", "later / baseline [interval]",
                  "verdict"], rows)


def _tables(c: RunComparison) -> list[Table]:
    levers = lever_table(c)
    return [arm_table(c), *([levers] if levers else []), cell_table(c)]


def cell_table(c: RunComparison) -> Table:
    rows = []
    corrected = c["machine"]["corrected"]
    for r in c["cells"]:
        t = "—" if r["baseline_s"] is None or r["later_s"] is None else f"{r['baseline_s']:.3f} → {r['later_s']:.3f}"
        if r["later_equal_work_s"] is not None:
            t += f" ({r['later_equal_work_s']:.3f} at equal work)"
        rows.append([r["arm"], r["case"], f"{r['n_baseline']} / {r['n_later']}", t,
                     ratio_text(r["ratio"], r["low"], r["high"]),
                     _verdict(r) + (f": {r['reason']}" if r["reason"] else "")
                     + (f" ({r['note']})" if r["note"] else ""),
                     *([_corrected(r)] if corrected else [])])
    return Table("compare_cells", "Per arm and case", ["arm", "case", "repeats", "turn s (geometric mean)",
                                                      "later / baseline [interval]", "verdict",
                                                      *(["corrected for the machine"] if corrected else [])], rows)


def closing(result: CompareResult) -> list[str]:
    """The last lines: how the intervals were taken, what is slower (or that nothing is shown slower), and how many
    rows are undecided beyond the threshold or refused (each listed with ``--strict``, which fails on them)."""
    out = [f"Intervals at {result['confidence']:.1%} each (together 95 %); threshold {result['threshold']:g}x: "
           "slower = above it with the whole interval above 1x; verdicts "
           + ("corrected for the machine (--correct-machine)." if result["correct_machine"] else "as measured.")]
    slower = [line for c in result["comparisons"] for line in c["slower"]]
    undecided = [line for c in result["comparisons"] for line in c["undecided"]]
    refused = [line for c in result["comparisons"] for line in c["refused"]]
    out += [f"SLOWER: {line}" for line in slower]
    if result["strict"]:
        out += [f"UNDECIDED: {line}" for line in undecided] + [f"REFUSED: {line}" for line in refused]
    counts = ", ".join(x for x in (f"{len(undecided)} row(s) undecided beyond the threshold" if undecided else "",
                                   f"{len(refused)} refused" if refused else "") if x)
    head = f"{len(slower)} row(s) slower" if slower else "Nothing shown slower than the threshold"
    if counts:
        out.append(f"{head}; {counts}: see above" + ("" if result["strict"] else " (--strict fails on them)") + ".")
    elif not slower:
        out.append(f"{head}.")
    return out


def render_markdown(result: CompareResult) -> str:
    """The comparison as Markdown."""
    base = result["baseline"]
    parts = [f"# leverbench compare: {base['path']} (experiment {base['experiment_name']})", ""]
    for c in result["comparisons"]:
        words = lines(c, base["path"], result["correct_machine"])
        parts += [f"## {words[0]}", "", *(f"{w}" if w.startswith("  ") else f"{w}  " for w in words[1:]), ""]
        for t in _tables(c):
            parts += [md_table(t), ""]
    parts += [f"{line}  " for line in closing(result)]
    return "\n".join(parts) + "\n"


def render_text(result: CompareResult) -> tuple[list[str], list[tuple[list[str], list[Table]]], list[str]]:
    """The parts the terminal prints: a heading, per comparison its lines and tables, the closing lines."""
    base = result["baseline"]
    head = [f"leverbench compare: baseline {base['path']} (experiment {base['experiment_name']}, "
            f"{len(base['arms'])} arm(s), {len(base['cases'])} case(s))"]
    return head, [(lines(c, base["path"], result["correct_machine"]), _tables(c))
                  for c in result["comparisons"]], \
        closing(result)
