"""The first screen (report/first_screen.py): the answer first, a shared reason once, at most about 15 lines, and the
same lines at the top of the terminal, report.md and report.html."""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path

from rich.console import Console

from leverbench.report.first_screen import LINES, clauses, first_screen, total_tells
from leverbench.report.html import render_html
from leverbench.report.markdown import render_markdown
from leverbench.report.terminal import render_terminal

GOLDEN = Path(__file__).parent / "golden"


def _summary(name: str) -> dict:
    return json.loads((GOLDEN / f"{name}.summary.json").read_text())


def test_each_lever_has_one_line_with_the_summarys_own_figures() -> None:
    s = _summary("demo3")
    hint = "every table: leverbench report RUN --full"
    lines = first_screen(s, report_path="RUN/report.html", full_hint=hint).lines()
    assert len(lines) <= LINES
    assert lines[0].startswith("leverbench: agent-turns: 3 arms × 4 cases × 3 repeats")
    for lever in s["levers"]:
        mine = [ln for ln in lines if ln.strip().startswith(lever["lever"] + " ")]
        assert len(mine) == 1
        v = next(v for v in s["verdicts"] if v["arm"] == lever["arm"] and v["vs"] == lever["vs"])
        assert f"{v['verdict']} {v['ratio']:.2f}x [{v['low']:.2f}–{v['high']:.2f}]" in mine[0]
        # one figure per lever: the total only where it lies outside the verdict's interval (issue 38)
        assert (f"total {lever['multiplier']:.2f}x" in mine[0]) == total_tells(v, lever["multiplier"])
        # cited, and the line says its drift was not determined (issue 42: 4 sentinels an arm rule out nothing)
        assert mine[0].endswith("· citable, drift undetermined [1]")
    base = [r for r in s["time_shares"] if r["arm"] == "current"]
    prefill = sum(r["prefill_s"] for r in base) / sum(r["turn_s"] for r in base)
    assert f"prefill {round(100 * prefill)}%" in next(ln for ln in lines if ln.startswith("Where the time goes"))
    assert lines[-1] == "report: RUN/report.html · every table: leverbench report RUN --full"
    lines = first_screen(_summary("demo2")).lines()  # a ledger before v5 whose repeats revisited: refused, and
    line = next(ln for ln in lines if ln.strip().startswith("prefix_cache "))  # headed by its first visits
    assert "(first visits 2.05x (no interval); across repeats" in line and "not citable: repeats revisited" in line


def test_a_reason_shared_by_several_levers_is_said_once() -> None:
    s = _summary("demo2")
    shared = "output volume spread 12.0% > 5%; the arms drifted differently (decode ratio moved 30% ± 8%)"
    for lever in s["levers"]:
        lever.update(citable=False, reason=shared)
    for m in s["multipliers"]:
        if m["scope"] == "total":
            m.update(citable=False, reason_codes=["volume", "drift"], reason=shared)
    lines = first_screen(s).lines()
    levers = [ln for ln in lines if ln.startswith("  ") and " vs " in ln]
    assert len(levers) == 2 and all("not citable: output volumes differ, an arm's speed drifted [1][2]" in ln
                                    for ln in levers)
    assert all(f"({lever['multiplier']:.2f}x" not in ln for ln, lever in zip(levers, s["levers"]))  # nothing bare
    assert sum("output volume spread 12.0% > 5%" in ln for ln in lines) == 1
    assert sum("drifted differently (decode ratio" in ln for ln in lines) == 1


def test_a_refused_figure_is_in_parentheses_with_why_in_a_phrase() -> None:
    s = _summary("demo1")  # its prefix cache is refused for output volume (at equal work too), and its repeats
    #                        revisited the cache (a ledger before v5): the first-visit figure heads the line
    line = next(ln for ln in first_screen(s).lines() if ln.strip().startswith("prefix_cache"))
    assert "(first visits 1.28x (no interval); across repeats undecided 2.56x [1.53–4.27])" in line
    assert "not citable: repeats revisited, output volumes differ [1][2][3][4]" in line


def test_the_total_is_shown_only_where_it_tells_what_the_verdicts_ratio_does_not() -> None:
    """Issue 38: one figure per lever; the total multiplier too only where it falls outside the verdict's interval
    (the cases' time weights move it away from the per-case ratio)."""
    s = _summary("demo3")
    lever = s["levers"][0]
    v = next(v for v in s["verdicts"] if v["arm"] == lever["arm"] and v["vs"] == lever["vs"])
    inside, outside = (v["low"] + v["high"]) / 2, v["high"] * 1.5
    assert not total_tells(v, inside) and total_tells(v, outside) and total_tells(None, inside)
    for total, shown in ((inside, False), (outside, True)):
        lever["multiplier"] = total
        line = next(ln for ln in first_screen(s).lines() if ln.strip().startswith(lever["lever"] + " "))
        assert (f"total {total:.2f}x" in line) == shown


def test_many_notes_keep_the_screen_short_and_say_how_many_are_left_out() -> None:
    s = _summary("handmade")  # five levers, failed calls, unmeasurable levers: thirteen notes
    lines = first_screen(s).lines()
    assert len(lines) <= LINES
    assert any(ln.strip().startswith("(+") and "more notes" in ln for ln in lines)
    assert all(len(ln) < 400 for ln in lines if ln.startswith("  ["))


def test_clauses_split_at_the_top_level_only() -> None:
    assert clauses("a; b (c; d); e") == ["a", "b (c; d)", "e"]
    assert clauses("one") == ["one"] and clauses("") == []


def test_terminal_markdown_and_html_open_with_the_same_lines() -> None:
    s = _summary("demo1")
    want = first_screen(s, full_hint=None).lines(width=1000)
    console = Console(record=True, width=250)  # a lever's line is never cut: room for demo1's longest
    render_terminal(copy.deepcopy(s), console)
    printed = console.export_text().splitlines()
    assert printed == first_screen(s, full_hint="every table: --full").lines(width=249)  # the console's width
    assert "Turn time per case" not in "\n".join(printed)
    console = Console(record=True, width=250)
    render_terminal(copy.deepcopy(s), console, full=True)
    full = console.export_text()
    assert full.splitlines()[:len(want)] == first_screen(s, full_hint=None).lines(width=249)
    assert "Turn time per case" in full
    md = render_markdown(s).splitlines()
    assert md[:3] == ["# leverbench: agent-turns", "", "```text"] and md[3:3 + len(want)] == want
    page = render_html(s)
    block = page[page.index('<pre class="answer">') + len('<pre class="answer">'):page.index("</pre>")]
    assert html.unescape(block).splitlines() == want
    assert page.index('<pre class="answer">') < page.index("The run's conditions")


def test_a_lever_no_pair_measures_says_why_on_its_own_line_and_each_lever_keeps_a_note() -> None:
    s = _summary("handmade")
    lines = first_screen(s).lines()
    drafter = next(ln for ln in lines if ln.strip().startswith("drafter"))
    assert "no pair measures it  no controlled pair measures drafter" in drafter
    flaky = next(ln for ln in lines if "flaky vs base" in ln)
    assert flaky.endswith("[3][4][5][6][7]; drift unknown")
    assert any(ln.startswith("  [3] ") for ln in lines)  # its first note stays
    assert all(ln.count("[2]") <= 1 for ln in lines if " vs " in ln)  # a note is marked once per line


def test_lines_fit_the_terminal_and_warnings_name_a_few_kinds() -> None:
    s = _summary("handmade")
    lines = first_screen(s).lines(width=80)
    levers = [ln for ln in lines if ln.startswith("  ") and (" vs " in ln or "no pair" in ln)]
    assert all(len(ln) <= 80 for ln in lines if ln not in levers)
    warn = next(ln for ln in lines if "warnings:" in ln)
    assert "+9 more kinds" in warn or len(warn) == 80


def test_an_adaptive_run_says_how_many_repeats_the_verdicts_took() -> None:
    s = _summary("demo2")
    s["adaptive"] = {"max_repeats": 6, "initial_repeats": 2}
    s["verdicts"][0]["repeats"] = {c: 4 for c in s["verdicts"][0]["repeats"]}
    s["verdicts"][1]["repeats"] = {c: 2 for c in s["verdicts"][1]["repeats"]}
    assert "× 2–4 repeats (adaptive, up to 6)," in first_screen(s).lines()[0]


def test_common_drift_is_a_line_of_its_own_and_no_report_path_when_none_was_written(tmp_path: Path) -> None:
    s = _summary("demo2")
    s["drift_common"] = {"text": "the machine slowed 30% during the run, alike for every arm", "detected": True}
    lines = first_screen(s).lines()
    assert lines[1] == "Drift: the machine slowed 30% during the run, alike for every arm"
    console = Console(record=True, width=120)
    render_terminal(s, console, run_dir=str(tmp_path))  # no report.html there
    out = console.export_text()
    assert "report.html" not in out and f"every table: leverbench report {tmp_path} --full" in out


def test_odd_summaries_do_not_crash_it() -> None:
    for s in ({}, {"levers": [{"lever": "x", "arm": None}]}, {"levers": [{"lever": "x", "arm": "a", "vs": "b",
              "multiplier": None, "citable": False}], "verdicts": [{"arm": "a", "vs": "b", "verdict": "open",
              "ratio": None, "min_effect": None, "confidence": None}]},
              {"baseline": "a", "time_shares": [{"arm": "a", "turn_s": 1.0}]}):
        assert first_screen(s).lines()


def test_an_undecided_verdict_says_what_decides_it() -> None:
    """The demo's drafter is often undecided at 3 repeats: its line says so with a note on how many repeats a
    fixed design would need (the verdict's own fixed_design_repeats), or, in an adaptive run, to raise the cap."""
    s = _summary("demo3")
    v = s["verdicts"][1]
    v.update(verdict="undecided", refused=None, fixed_design_repeats=18)
    lines = first_screen(s).lines()
    line = next(ln for ln in lines if ln.strip().startswith(v["lever"] + " "))
    mark = re.search(rf"undecided {v['ratio']:.2f}x \[{v['low']:.2f}–{v['high']:.2f}\] \[(\d)\]", line)
    assert mark and line.endswith("· citable, drift undetermined [1]")
    assert f"  [{mark[1]}] undecided: more repeats decide it (about 18 per case: --repeats 18)" in "\n".join(lines)
    v["fixed_design_repeats"] = None  # an effect at the bound: no number of repeats up to 10,000 decides it
    assert "lies at the 1.10x bound, where no practical number of repeats decides it" in "\n".join(
        first_screen(s).lines())
    v["reason"] = "no spread: each case gave the same ratio on every repeat; no verdict"  # its own reason first
    assert "undecided: no spread: each case gave the same ratio on every repeat" in "\n".join(first_screen(s).lines())
    v["reason"] = None
    s["adaptive"] = {"max_repeats": 6, "initial_repeats": 2}
    v["stopped_by"] = "max_repeats"
    assert "raise max_repeats" in "\n".join(first_screen(s).lines())
    v["stopped_by"] = "max_gpu_hours"
    assert "undecided: stopped by max_gpu_hours" in "\n".join(first_screen(s).lines())
