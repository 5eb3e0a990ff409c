"""``leverbench compare --format html``: the page of a hand-built comparison (1 baseline, 2 later runs, 2 arms, 1
lever, a refused cell, a corrected machine row) that the schema accepts: one history plot per arm and per lever, each
later point's hover naming its interval and its changed conditions, the runs in the order they started, every ledger
string escaped, nothing fetched; then through the CLI on two small simulator runs."""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import TypeAdapter
from test_compare import SIM, _experiment

from leverbench.cli import cli
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.report.compare_html import render_html
from leverbench.runner.run import Runner
from leverbench.schema.compare_rows import CompareResult

EVIL = "<script>alert(1)</script>"
ARMS = ("current", EVIL)


def _run(path: str, started: str) -> dict[str, Any]:
    return {"path": path, "experiment_name": "nightly", "run_id": path, "started_at": started, "tool_version": "1.0",
            "schema": "leverbench.ledger/1", "arms": list(ARMS), "cases": ["read", "plan"], "warnings": []}


def _figures(ratio: float, low: float, high: float, verdict: str, corrected: float | None = None) -> dict[str, Any]:
    return {"ratio": ratio, "low": low, "high": high, "verdict": verdict, "corrected": corrected is not None,
            "corrected_ratio": corrected, "corrected_low": corrected and corrected * 0.98,
            "corrected_high": corrected and corrected * 1.02, "corrected_verdict": corrected and "same", "note": None}


def _cell(arm: str, case: str, figures: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
    return {**figures, "arm": arm, "later_arm": arm, "case": case, "later_case": case, "n_baseline": 3, "n_later": 3,
            "baseline_s": 1.0, "later_s": figures["ratio"], "refused": reason is not None, "reason": reason,
            "failed_baseline": 0, "failed_later": 1 if reason else 0, "output_baseline": 64.0, "output_later": 64.0,
            "equal_work": False, "later_equal_work_s": None}


def _comparison(path: str, started: str, k: float, *, corrected: bool) -> dict[str, Any]:
    """A later run whose arms are *k* times the baseline's, the machine corrected for where *corrected*."""
    fix = 1.0 if corrected else None
    verdict = "slower" if k > 1.05 else "same"
    arm_rows = [{**_figures(k, k * 0.97, k * 1.03, verdict, fix), "arm": a, "later_arm": a, "cases": 2,
                 "refused_cases": 0} for a in ARMS]
    cells = [_cell("current", "read", _figures(k, k * 0.95, k * 1.05, verdict, fix)),
             _cell("current", "plan", _figures(k, k * 0.95, k * 1.05, verdict, fix)),
             _cell(EVIL, "read", _figures(k, k * 0.95, k * 1.05, verdict, fix)),
             _cell(EVIL, "plan", {**_figures(k, k * 0.9, k * 1.1, "refused", fix), "corrected_verdict": "refused"},
                   reason="a call failed in the later run (1)")]
    speed = {"change": -0.1, "low": -0.12, "high": -0.08, "sentinels_baseline": 4, "sentinels_later": 4}
    return {
        "later": _run(path, started),
        "changed": [{"scope": "run", "arm": None, "what": "tool_version", "baseline": "1.0", "later": f"1.{k}"},
                    {"scope": "host", "arm": None, "what": "cpu", "baseline": "old", "later": "new"},
                    {"scope": "arm", "arm": EVIL, "what": "engine_version", "baseline": "b1", "later": f"b-{path}"},
                    {"scope": "arm", "arm": "current", "what": "model_file", "baseline": "m1", "later": "m2"}],
        "arms": [{"arm": a, "later": a, "how": "name", "changed": []} for a in ARMS],
        "cases": [{"case": "read", "later": "read", "how": "prompt hash", "compared": True, "reason": None},
                  {"case": "plan", "later": "plan", "how": "prompt hash", "compared": True, "reason": None},
                  {"case": "edited", "later": None, "how": None, "compared": False,
                   "reason": "not compared: its prompts differ"}],
        "machine": {"reference": ["current"], "decode": speed, "prefill": None, "detected": corrected,
                    "corrected": corrected, "gated": False, "tolerance": 0.02,
                    "text": "decode 10 % slower" + (": corrected" if corrected else ""),
                    "notes": ["prefill not measured: the sentinel's prompt is short"]},
        "cells": cells, "arm_ratios": arm_rows,
        "levers": [{"lever": "prefix_cache", "arm": EVIL, "vs": "current", "later_arm": EVIL, "later_vs": "current",
                    "compared": True, "cases": 2, "refused_cases": 1, "multiplier_baseline": 2.0,
                    "multiplier_baseline_low": 1.8, "multiplier_baseline_high": 2.2, "multiplier_later": 2.0 / k,
                    "multiplier_later_low": 1.7 / k, "multiplier_later_high": 2.3 / k, "ratio": 1 / k,
                    "low": 0.9 / k, "high": 1.1 / k, "verdict": "pays less" if k > 1.05 else "same",
                    "refused": False, "reason": None, "note": None}],
        "slower": [f"{path}: arm current 1.200x"] if k > 1.05 else [], "undecided": [],
        "refused": [f"{path}: {EVIL} plan: a call failed in the later run (1)"]}


def _result() -> dict[str, Any]:
    """The comparisons given out of order: 'late' (started last) before 'early'."""
    return {"schema": "leverbench.compare/2", "baseline": _run("runs/base", "2026-01-01T00:00:00+00:00"),
            "threshold": 1.05, "confidence": 0.99, "correct_machine": False, "strict": False,
            "comparisons": [_comparison("runs/late", "2026-01-03T00:00:00+00:00", 1.2, corrected=False),
                            _comparison("runs/early", "2026-01-02T00:00:00+00:00", 1.01, corrected=True)],
            "slower": True, "exit_code": 1}


class _Page(HTMLParser):
    """The page's SVG plots, each with the ``<title>`` of its point groups, and every src/href."""

    def __init__(self) -> None:
        super().__init__()
        self.plots: list[dict[str, Any]] = []
        self.links: list[str] = []
        self.tags: list[str] = []
        self._title: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.links += [v or "" for k, v in attrs if k in ("src", "href")]
        if tag == "svg":
            self.plots.append({"label": dict(attrs)["aria-label"], "titles": []})
        if tag == "title" and self.plots:
            self._title = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self._title is not None:
            self.plots[-1]["titles"].append("".join(self._title))
            self._title = None

    def handle_data(self, data: str) -> None:
        if self._title is not None:
            self._title.append(data)


def _parse(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    p.close()
    return p


def test_the_page_has_one_plot_per_arm_and_lever_points_in_start_order_with_their_conditions():
    result = _result()
    assert TypeAdapter(CompareResult).validate_python(copy.deepcopy(result)) == result
    page = render_html(result)  # type: ignore[arg-type]
    p = _parse(page)
    labels = [x["label"] for x in p.plots]
    assert labels == ["arm current: later / baseline, per run", f"arm {EVIL}: later / baseline, per run",
                      f"prefix_cache: {EVIL} vs current, its multiplier per run"]
    for plot in p.plots:
        points = [t for t in plot["titles"] if t.startswith("runs/")]
        # the runs in the order they started, not the order given; the corrected figure a second point of its run
        assert [t.split("\n")[0] for t in points if not t.startswith("corrected")][:3] == \
            ["runs/base", "runs/early", "runs/late"], points
    current, evil, lever = ({t.split("\n")[0]: t for t in x["titles"] if t.startswith("runs/")} for x in p.plots)
    late = current["runs/late"]
    assert "1.200x [1.164, 1.236] slower" in late and "started 2026-01-03T00:00:00+00:00" in late
    # its conditions: the run's and the host's, and this arm's own only
    assert "tool_version: 1.0 → 1.1.2" in late and "host: cpu: old → new" in late
    assert "arm current: model_file: m1 → m2" in late and "engine_version" not in late
    assert f"arm {EVIL}: engine_version: b1 → b-runs/late" in evil["runs/late"]
    assert "model_file" not in evil["runs/late"]
    assert "corrected for the machine: 1.000x [0.980, 1.020] same" in current["runs/early"]
    assert "multiplier 1.667x [1.417, 1.917]" in lever["runs/late"] and "pays less" in lever["runs/late"]
    assert "model_file" in lever["runs/late"] and "engine_version" in lever["runs/late"]  # both arms of the pair
    assert "the baseline's multiplier: 2.000x [1.800, 2.200]" in lever["runs/base"]
    # the order of the page: what changed before any number, the refused cell with its reason
    assert page.index("What changed") < page.index("1.200x") < page.index("History")
    assert "refused: a call failed in the later run (1)" in page and "its prompts differ" in page
    # escaped everywhere; nothing fetched
    assert EVIL not in page and "&lt;script&gt;" in page and "script" not in p.tags
    assert not re.search(r"(src|href)\s*=\s*[\"']?\s*(https?:)?//", page)
    assert all(not x.startswith(("http", "//")) for x in p.links), p.links


def test_the_page_works_without_levers():
    result = _result()
    for c in result["comparisons"]:
        del c["levers"]  # a result from before the analysis fills them in
    p = _parse(render_html(result))  # type: ignore[arg-type]
    assert len(p.plots) == 2
    assert "No lever was compared" in render_html(result)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("compare-html")
    out = []
    for name, speed in (("base", 1.0), ("later", 1 / 1.08)):
        (tmp / name).mkdir()
        with SimulatorThread(SimConfig(**{**SIM, "decode_tps": SIM["decode_tps"] * speed})) as s:
            exp = _experiment(tmp / name, s.base_url, {"read": "summarise the log"}, 3)
            Runner(load(exp), tmp / name / "run").run()
        out.append(tmp / name / "run")
    return out[0], out[1]


def test_through_the_cli_the_page_parses_and_exits_as_the_table_does(two_runs):
    base, later = map(str, two_runs)
    table = CliRunner().invoke(cli, ["compare", base, later])
    res = CliRunner().invoke(cli, ["compare", base, later, "--format", "html"])
    assert res.exit_code == table.exit_code, (res.output, table.output)
    page = res.stdout
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    p = _parse(page)
    assert [x["label"] for x in p.plots] == ["arm a: later / baseline, per run"]
    assert any(t.startswith(later) for t in p.plots[0]["titles"])
    as_json = json.loads(CliRunner().invoke(cli, ["compare", base, later, "--format", "json"]).stdout)
    assert as_json["exit_code"] == res.exit_code


def test_the_baselines_lever_point_comes_from_a_comparison_that_measured_it_and_extreme_ratios_stay_on_the_axis():
    """The first comparison's lever refused (its figures shown): the baseline's point is the second's (1.8x here);
    a ratio of 1e12 is drawn at the axis' edge, whose ticks stay few and readable; starts with other UTC offsets
    are ordered by the instant, not the text."""
    result = _result()
    first = result["comparisons"][0]["levers"][0]
    first.update(multiplier_baseline=2.5, multiplier_baseline_low=2.4, multiplier_baseline_high=2.6,
                 refused=True, verdict="refused", reason="read: current: failed calls: 1 in the later run")
    result["comparisons"][1]["levers"][0].update(multiplier_baseline=1.8, multiplier_baseline_low=1.7,
                                                 multiplier_baseline_high=1.9)
    result["comparisons"][0]["arm_ratios"][0].update(ratio=1e12, low=1e-9, high=1e30)
    result["comparisons"][0]["later"]["started_at"] = "2026-01-02T05:00:00+09:00"  # 20:00 UTC the day before
    p = _parse(render_html(result))  # type: ignore[arg-type]
    (lever,) = [x for x in p.plots if x["label"].startswith("prefix_cache")]
    assert any("the baseline's multiplier: 1.800x [1.700, 1.900]" in t for t in lever["titles"]), lever["titles"]
    (arm,) = [x for x in p.plots if x["label"].startswith("arm current")]
    ticks = [t for t in arm["titles"] if t.startswith("runs/")]
    assert [t.split("\n")[0] for t in ticks] == ["runs/base", "runs/late", "runs/early"]  # 'late' started first now
    page = render_html(result)  # type: ignore[arg-type]
    svg = page.split('aria-label="arm current')[1].split("</svg>")[0]
    ticks = re.findall(r'class="tick" text-anchor="end">([^<]*)<', svg)
    assert 3 <= len(ticks) <= 20 and all(len(t) <= 6 for t in ticks), ticks
