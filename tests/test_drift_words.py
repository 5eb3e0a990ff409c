"""Issue 42, item 5: every interval on every page is readable or said in words (one rule: ``drift.bounded``),
and a drift the sentinels could not determine is said on the lever's line (interleaved: still cited; blocked
order: refused)."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import pytest
from test_drift import _run

from leverbench.analysis.experiment.drift import SPAN, bounded, change_words, trend
from leverbench.analysis.summary import summarize
from leverbench.ledger.reader import read_ledger
from leverbench.report.first_screen import first_screen
from leverbench.report.guard_tables import drift_table
from leverbench.report.html import render_html
from leverbench.report.markdown import render_markdown

GOLDEN = Path(__file__).parent / "golden"
CHANGE = re.compile(r"\[([+-]?\d+(?:\.\d+)?)%, ([+-]?\d+(?:\.\d+)?)%\]")  # a drift: [-42.4%, +63.6%]
RATIO = re.compile(r"\[(\d+(?:\.\d+)?)–(\d+(?:\.\d+)?|∞)\]")  # a multiplier: [2.04–2.09]


def unreadable(text: str) -> list[str]:
    """The intervals printed in *text* that the rule would have put in words (with room for their rounding)."""
    bad = [m.group(0) for m in CHANGE.finditer(text)
           if not bounded(1 + float(m.group(1)) / 100 + 0.0005, (1 + float(m.group(2)) / 100) / 1.01)]
    bad += [m.group(0) for m in RATIO.finditer(text) if m.group(2) == "∞" or float(m.group(1)) == 0.0
            or not bounded(float(m.group(1)) + 0.005, float(m.group(2)) / 1.01)]
    return bad


def test_the_rule():
    assert bounded(0.5, 4.9) and bounded(1.0, 1.0) and not bounded(0.1, 1.2)
    assert not bounded(0.0, 2.0) and not bounded(1.2, math.inf) and not bounded(None, 2.0) and not bounded(1.0, None)
    assert change_words(-0.03, -0.424, 0.636, 4, 1) == "-3.0% [-42.4%, +63.6%]"
    # the user's drift: +466.6% [-100.0%, +28409316.9%] (a lower end of −99.96 %, never a speed of 0)
    said = change_words(4.666, -0.9996, 284093.169, 4, 1)
    assert said == "no estimate: 4 sentinels scatter too much to bound it" and not unreadable(said)
    assert change_words(3.0, 0.2, 12.0, 5).startswith("above +20% (5 sentinels scatter too much to bound it above")
    assert change_words(-0.8, -0.99, -0.2, 5).startswith("below -20% (")
    assert change_words(0.1, None, None, 2) == "+10% (no interval: 2 sentinels)"
    # the fit itself: a log model's interval never reaches a speed of 0, however few and scattered the sentinels
    wild = trend([0.0, 1 / 3, 2 / 3, 1.0], [0.0, 1.6, -1.6, 0.2])
    assert wild.low > -1.0 and not bounded(1 + wild.low, 1 + wild.high) and "%]" not in wild.words()
    assert SPAN == 10.0


def _scattered(tmp_path: Path) -> Path:
    """demo3's ledger (a real run: 3 arms, 3 repeats, 4 sentinels an arm) with the sentinels of two arms made to
    scatter by a factor of 3 either way, without a trend: their drift can be neither detected nor ruled out."""
    factor = {"cache": [1.0, 3.0, 0.33, 1.0], "cache+drafter": [1.0, 0.33, 3.0, 1.0]}
    seen = {a: 0 for a in factor}
    out = []
    for line in (GOLDEN / "demo3.ledger.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "sentinel" and r.get("arm") in factor and r.get("error") is None:
            f = factor[r["arm"]][seen[r["arm"]] % 4]
            seen[r["arm"]] += 1
            r["ttft_s"] *= f
            r["latency_s"] *= f
            r["timings"] = {**r["timings"], "prompt_ms": r["timings"]["prompt_ms"] * f,
                            "predicted_ms": r["timings"]["predicted_ms"] * f}
        out.append(json.dumps(r))
    assert seen == {"cache": 4, "cache+drafter": 4}
    path = tmp_path / "scattered.ledger.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


def test_scattered_sentinels_give_words_on_every_page_and_the_lever_line_says_undetermined(tmp_path):
    s = json.loads(json.dumps(summarize(read_ledger(_scattered(tmp_path)))))
    pairs = {(p["arm"], p["vs"]): p for p in s["drift_pairs"]}
    assert all(p["undetermined"] and not p["refuses"] for p in pairs.values())
    wide = [p for p in pairs.values() if not bounded(1 + p["decode"]["low"], 1 + p["decode"]["high"])]
    assert wide, "the scatter was meant to give intervals past the rule"
    screen = "\n".join(first_screen(s).lines(width=1000))
    page = render_markdown(s)
    web = html.unescape(re.sub(r"<[^>]+>", " ", render_html(s)))
    for text in (screen, page, web):
        assert not unreadable(text), unreadable(text)
        assert "-100.0%" not in text and "∞" not in text
    for text in (page, web):
        assert "no estimate: 4 sentinels scatter too much to bound it" in text
    levers = [ln for ln in screen.splitlines() if " vs " in ln and "·" in ln]
    assert len(levers) == 2
    for ln in levers:  # both still cited (interleaved), and the line says the drift was not determined
        assert ln.rstrip().endswith("· citable, drift undetermined [1]"), ln
    assert "[1] drift undetermined: the sentinels cannot rule out the arms drifting apart by over 10%" in screen
    assert [w["kind"] for w in s["warning_items"]].count("drift_undetermined") == 1


@pytest.mark.parametrize("name", ["demo1", "demo2", "demo3"])
def test_the_demo_goldens_drift_tables_are_readable(name):
    s = json.loads((GOLDEN / f"{name}.summary.json").read_text())
    rows = drift_table(s).rows
    text = "\n".join(" | ".join(r) for r in rows)
    assert not unreadable(text), unreadable(text)
    if name == "demo3":  # its prefill intervals (e.g. -12.0% [-89.8%, +660.2%]) are in words now
        assert "[-42.4%, +63.6%]" in text and "no estimate: 4 sentinels scatter too much to bound it" in text
        assert "+660.2%" not in text


def _wobbly(order: str):
    """Two arms, 4 rounds: base steady, cached's sentinels wobbling ±10 % with no trend."""
    wobble = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 1.1, 0.9, 1.0]
    steps = 8 if order == "blocked" else 4
    return _run(lambda a, x: wobble[round(x * steps)] if a == "cached" else 1.0, order=order, turns=True)


def test_undetermined_drift_is_cited_interleaved_and_refused_blocked():
    inter = _wobbly("interleaved")
    [pair] = inter["drift_pairs"]
    assert pair["undetermined"] and not pair["refuses"]
    total = next(m for m in inter["multipliers"] if m["scope"] == "total" and m["arm"] == "cached")
    assert total["citable"]
    lines = first_screen(inter).lines(width=1000)
    [lever] = [ln for ln in lines if "cached vs base" in ln]
    assert "citable, drift undetermined [1]" in lever and "not citable" not in lever

    blocked = _wobbly("blocked")
    [pair] = blocked["drift_pairs"]
    assert pair["undetermined"] and pair["refuses"] and "cached's drift is undetermined" in pair["reason"]
    total = next(m for m in blocked["multipliers"] if m["scope"] == "total" and m["arm"] == "cached")
    assert not total["citable"] and total["reason_codes"] == ["drift"] and "blocked order" in total["reason"]
    [lever] = [ln for ln in first_screen(blocked).lines(width=1000) if "cached vs base" in ln]
    assert "not citable: drift undetermined (blocked order)" in lever
    assert not [w for w in blocked["warning_items"] if w["kind"] == "drift_undetermined"]  # refused: said so
    assert [w for w in blocked["warning_items"] if w["kind"] == "drift_differential"]


def test_a_verdict_interval_too_wide_keeps_the_side_it_bounds():
    from leverbench.readable import ratio_words  # noqa: PLC0415

    inf = float("inf")
    assert ratio_words(1.73, 2.03) == "[1.73–2.03]"
    assert ratio_words(1.6, inf) == ratio_words(1.6, 20.0) == "[above 1.60x: its repeats bound it below only]"
    assert ratio_words(0.02, 0.9) == "[below 0.90x: its repeats bound it above only]"
    assert ratio_words(0.0, inf) == ratio_words(0.05, 3.0) == ratio_words(None, None) == \
        "[no interval: its repeats do not bound it]"


def test_a_side_close_to_one_is_written_with_the_digits_that_tell_it():
    from leverbench.readable import ratio_words  # noqa: PLC0415

    assert ratio_words(1.003, float("inf")) == "[above 1.003x: its repeats bound it below only]"
    assert ratio_words(0.01, 0.9996) == "[below 0.9996x: its repeats bound it above only]"
