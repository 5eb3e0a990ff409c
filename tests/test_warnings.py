"""The closed list of warnings: each has a kind, the arm/case it concerns and its text; reports group by kind."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rich.console import Console

from leverbench.analysis.summary import summarize
from leverbench.ledger.reader import read_ledger
from leverbench.report.html import render_html
from leverbench.report.markdown import render_markdown
from leverbench.report.terminal import render_terminal
from leverbench.schema.warning_kinds import RunWarning, WarningKind, warning_groups

GOLDEN = Path(__file__).parent / "golden"
ANALYSIS = Path(__file__).parents[1] / "src" / "leverbench" / "analysis"


def _handmade() -> dict:
    return summarize(read_ledger(GOLDEN / "handmade.ledger.jsonl"))


def test_every_kind_has_a_name_and_a_heading_and_is_raised_somewhere():
    values = [k.value for k in WarningKind]
    assert len(set(values)) == len(values) and all(re.fullmatch(r"[a-z_]+", v) for v in values)
    assert all(k.heading and k.heading[0].isupper() for k in WarningKind)
    source = "".join(p.read_text() for p in ANALYSIS.rglob("*.py") if p.name != "warning_kinds.py")
    unused = [k.name for k in WarningKind if f"WarningKind.{k.name}" not in source]
    assert unused == []  # no kind the analysis never raises


def test_items_carry_kind_arm_case_and_the_texts_in_order():
    s = _handmade()
    assert [w["text"] for w in s["warning_items"]] == s["warnings"]
    assert all(list(w) == ["kind", "arm", "case", "text"] for w in s["warning_items"])
    assert [(w["kind"], w["arm"], w["case"]) for w in s["warning_items"]] == [
        ("orphan_calls", None, None), ("superseded", None, None), ("drift", "base", None),
        ("drift_unknown", "flaky", None), ("drift_differential", "spec", None), ("drift_undetermined", None, None),
        ("probe_disobeyed", "cache", "long"), ("probe_failed", "flaky", "long"),
        ("client_server_disagree", "flaky", "reason"), ("failed_calls", "flaky", "tools"),
        ("uncontrolled", "spec", None), ("uncontrolled", "eagle", None), ("step_limit", "spec", "tools"),
        ("empty_answer", "flaky", "reason"), ("retried", None, None)]


def test_an_item_is_json_ready():
    w = RunWarning(WarningKind.DRIFT, "drift: arm 'a' ...", "a")
    assert json.loads(json.dumps(w.as_dict())) == {"kind": "drift", "arm": "a", "case": None,
                                                   "text": "drift: arm 'a' ..."}


def test_groups_keep_first_raised_order_and_each_text_under_its_kind():
    s = _handmade()
    groups = warning_groups(s)
    assert [k for k, _, _ in groups] == list(dict.fromkeys(w["kind"] for w in s["warning_items"]))
    uncontrolled = next(g for g in groups if g[0] == "uncontrolled")
    assert uncontrolled[1] == WarningKind.UNCONTROLLED.heading and len(uncontrolled[2]) == 2
    assert sum(len(t) for _, _, t in groups) == len(s["warnings"])
    # a summary written before warning_items existed: one group, the texts as they are
    old = {"warnings": ["a", "b"]}
    assert warning_groups(old) == [("", "Warnings", ["a", "b"])] and warning_groups({"warnings": []}) == []


def test_reports_group_warnings_by_kind():
    s = _handmade()
    md = render_markdown(s).split("## Warnings\n", 1)[1]
    headings = re.findall(r"^### (.+) \(`(\w+)`\)$", md, flags=re.M)
    assert [k for _, k in headings] == [k for k, _, _ in warning_groups(s)]
    # each text sits under its own kind's heading
    sections = dict(zip([k for _, k in headings], re.split(r"^### .+$", md, flags=re.M)[1:], strict=True))
    for w in s["warning_items"]:
        assert f"- {w['text']}" in sections[w["kind"]]
    html = render_html(s)
    assert all(f'id="warn-{k}"' in html for k, _, _ in warning_groups(s))
    console = Console(width=400, record=True)
    render_terminal(s, console, full=True)  # the first screen counts them by kind; --full lists them
    out = console.export_text()
    assert out.index(f"{WarningKind.DRIFT.heading} [drift]") < out.index("drift: arm 'base'") < out.index(
        f"{WarningKind.DRIFT_UNKNOWN.heading} [drift_unknown]")


def test_a_run_without_warnings_says_none():
    s = summarize(read_ledger(GOLDEN / "sim.ledger.jsonl"))
    s["warnings"], s["warning_items"] = [], []
    assert render_markdown(s).endswith("## Warnings\n\n- none\n")
