"""The output-volume guard and the result table, on hand-made ledgers."""

from __future__ import annotations

import pytest
from ledgers import call, header, ledger, turn, warned

from leverbench.analysis.summary import summarize
from leverbench.schema.warning_kinds import WarningKind as W

ARMS = {"base": {"prefix_cache": False, "drafter": "none"}, "fast": {"prefix_cache": False, "drafter": "ngram"}}


def _run(base_out: int, fast_out: int, *, fast_times=(5.0, 5.2, 4.8), base_times=(10.0, 11.0, 9.0)) -> dict:
    recs = []
    for r, (bt, ft) in enumerate(zip(base_times, fast_times)):
        recs += turn("base", "c", r, bt, base_out)
        recs += turn("fast", "c", r, ft, fast_out)
    return summarize(ledger(header(ARMS, ["c"]), recs))


def _mult(s: dict, scope: str) -> dict:
    return next(m for m in s["multipliers"] if m["scope"] == scope)


def test_thirty_percent_spread_is_refused():
    s = _run(100, 130)
    m = _mult(s, "case:c")
    assert m["value"] == pytest.approx(10.0 / 5.0)
    assert m["citable"] is False
    assert "spread 30.0% > 20%" in m["reason"]
    assert _mult(s, "total")["citable"] is False


def test_two_percent_spread_is_citable():
    s = _run(100, 102)
    m = _mult(s, "case:c")
    assert m["citable"] is True and m["reason"] is None
    assert m["volume_spread"] == pytest.approx(0.02)
    assert _mult(s, "total")["citable"] is True
    assert _mult(s, "total")["value"] == pytest.approx(2.0)


def test_total_tolerance_is_tighter_than_cell():
    s = _run(100, 110)  # 10 %: citable per cell, not as a total
    assert _mult(s, "case:c")["citable"] is True
    t = _mult(s, "total")
    assert t["citable"] is False and "spread 10.0% > 5%" in t["reason"]


def test_cell_median_range_and_overlap():
    s = _run(100, 100)
    cell = {c["arm"]: c for c in s["cells"]}
    assert cell["base"]["median_s"] == 10.0 and cell["base"]["min_s"] == 9.0 and cell["base"]["max_s"] == 11.0
    assert cell["fast"]["overlaps_baseline"] is False
    s2 = _run(100, 100, fast_times=(9.5, 8.0, 8.5))
    assert {c["arm"]: c for c in s2["cells"]}["fast"]["overlaps_baseline"] is True


def test_failed_call_is_kept_and_counted_and_blocks_citation():
    recs = []
    for r in range(3):
        recs += turn("base", "c", r, 10.0, 100)
        err = {"class": "http_status", "message": "HTTP 500"} if r == 1 else None
        recs += turn("fast", "c", r, 5.0, 100, error=err)
    s = summarize(ledger(header(ARMS, ["c"]), recs))
    cell = next(c for c in s["cells"] if c["arm"] == "fast")
    assert cell["n"] == 2 and cell["failed_turns"] == 1 and cell["failed_calls"] == 1
    assert s["run"]["failed_calls"] == 1
    m = _mult(s, "case:c")
    assert m["citable"] is False and "failed call" in m["reason"]
    assert warned(s, W.FAILED_CALLS, "fast", "c")


def test_fewer_than_two_repeats_is_not_citable():
    recs = turn("base", "c", 0, 10.0, 100) + turn("fast", "c", 0, 5.0, 100)
    s = summarize(ledger(header(ARMS, ["c"], repeats=1), recs))
    assert "fewer than 2" in _mult(s, "case:c")["reason"]


def test_uncontrolled_comparison_names_the_knobs():
    arms = {"base": {"prefix_cache": False, "drafter": "none"}, "both": {"prefix_cache": True, "drafter": "ngram"}}
    recs = []
    for r in range(2):
        recs += turn("base", "c", r, 10.0, 100) + turn("both", "c", r, 5.0, 100)
    s = summarize(ledger(header(arms, ["c"]), recs))
    m = _mult(s, "total")
    assert m["controlled"] is False and m["knobs"] == ["drafter", "prefix_cache"]
    assert warned(s, W.UNCONTROLLED, "both")


def test_orphan_calls_of_a_cut_turn_are_not_counted():
    recs = turn("base", "c", 0, 10.0, 100) + turn("base", "c", 1, 10.0, 100)
    recs.append(call("base", "c", 2, latency=99.0, out=100, turn_id="cut-off"))
    s = summarize(ledger(header({"base": {}}, ["c"]), recs))
    cell = s["cells"][0]
    assert cell["n"] == 2 and cell["max_s"] == 10.0
    assert [w["kind"] for w in s["warning_items"]] == [W.ORPHAN_CALLS, W.DRIFT_UNKNOWN]  # and no sentinels
