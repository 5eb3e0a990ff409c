"""Levers under load at their edges (the review of issue 25): a level where one arm's calls all failed, a pair the
guard refuses whole, multipliers that do not differ from 1 beyond their intervals, a crossover where the ratio is
curved, batching measured with the larger batch as the baseline, waits for a ``max_in_flight`` slot, a
``summary.json`` read back by ``analyze``, the price at a capacity, and how the report says and draws them.

Each test builds a hand-made ledger (records shaped exactly like the runner's, :func:`rec`) whose figures are
worked out by hand in its docstring, or calls the pure functions directly.
"""

from __future__ import annotations

import pytest
from ledgers import header, ledger

from leverbench.analysis.summary import summarize
from leverbench.config import load
from leverbench.errors import ConfigError


def rec(arm: str, stage: str, x: float, i: int, latency: float, *, mode: str = "closed", sweep: str = "s",
        lag: float = 0.0, out: int = 10, error: dict | None = None, slo: dict | None = None, ttft: float = 0.1,
        warmup: bool = False, cached: int = 0, **extra: object) -> dict:
    """One load call at load *x* (a closed loop's concurrency, an open loop's rate), sent *lag* s late."""
    t = 1000.0 + 10 * i + x * 1000
    r = {"kind": "load", "arm": arm, "stage": stage, "sweep": sweep, "mode": mode, "case": "r",
         "concurrency": int(x) if mode == "closed" else None, "rate": float(x) if mode == "open" else None,
         "load_run": "run-1", "prefix_sharing": 0.0, "t_send": t, "scheduled_t": t - lag, "connect_s": 0.0,
         "ttft_s": None if error else ttft, "t_first_answer_s": None if error else ttft, "latency_s": latency,
         "chunk_t": [] if error else [ttft, latency], "completion_tokens": None if error else out,
         "prompt_tokens": None if error else 100, "cached_tokens": None if error else cached, "timings": None,
         "error": error, "warmup": warmup, "repeat": i, "step": 0, **(slo or {}), **extra}
    return r


def level(arm: str, stage: str, x: float, latencies: list[float], **kw: object) -> list[dict]:
    return [rec(arm, stage, x, i, lat, **kw) for i, lat in enumerate(latencies)]


CACHE = {"base": {"prefix_cache": False}, "cache": {"prefix_cache": True}}
FAIL = {"class": "http_500", "message": "x"}


def summ(recs: list[dict], arms: dict = CACHE) -> dict:
    return summarize(ledger(header(arms, ["r"]), recs))


def metric(row: dict, name: str) -> dict:
    return next(m for m in row["metrics"] if m["metric"] == name)


# ------------------------------------------------------------------ finding 7: one sweep, one mode


def test_two_load_entries_with_one_name_are_refused(tmp_path):
    """Two ``[[load]]`` entries named "ramp", a closed loop at 1 and 2 in flight and an open one at 4 and 8
    requests/s: their stages' names differ (ramp@c1, ramp@4rps), but a sweep is one entry, so the analysis would
    put concurrency and rate on one axis. The file is refused, naming the second entry's key."""
    p = tmp_path / "exp.toml"
    p.write_text('''
[experiment]
name = "dup"
baseline = "a"

[[arms]]
name = "a"
role = "baseline"
base_url = "http://127.0.0.1:1/v1"
model = "m"

[[cases]]
name = "c"
prompt = "go"

[[load]]
name = "ramp"
mode = "closed"
concurrency = [1, 2]
requests = 8

[[load]]
name = "ramp"
mode = "open"
rate = [4, 8]
requests = 8
''')
    with pytest.raises(ConfigError) as ei:
        load(p)
    assert ei.value.key == "load[1].name" and "'ramp'" in str(ei.value) and "load[0]" in str(ei.value)


def test_a_ledger_that_mixes_modes_in_one_sweep_keeps_them_apart():
    """A ledger written before that check (one sweep "s": a closed loop at 1 and 2 in flight, an open loop at 4
    requests/s): the closed levels and the open one are two rows, each on its own axis."""
    recs = []
    for c, la in [(1, 0.5), (2, 0.8)]:
        recs += level("base", f"s@c{c}", c, [1.0] * 8) + level("cache", f"s@c{c}", c, [la] * 8, cached=50)
    recs += level("base", "s@4rps", 4, [1.0] * 8, mode="open") + level("cache", "s@4rps", 4, [1.5] * 8, mode="open",
                                                                         cached=50)
    rows = summ(recs)["load_levers"]
    assert sorted((r["x"], tuple(lv["load"] for lv in r["levels"])) for r in rows) == [
        ("concurrency", (1.0, 2.0)), ("rate", (4.0,))]


# ------------------------------------------------------------------ finding 1: capacity below a level that failed


def _row(arm: str, c: int, *, p99: float, failed: int = 0) -> dict:
    d = {"n": 20, "p50": p99 / 2, "p90": p99, "p95": p99, "p99": p99, "mean": p99 / 2, "max": p99}
    lag = {**d, "p50": 0.001, "p99": 0.001, "max": 0.001}
    return {"arm": arm, "stage": f"s@c{c}", "sweep": "s", "mode": "closed", "concurrency": c, "rate": None,
            "speed": None, "slo": {"slo_e2e_s": 0.4}, "requests": 20, "failed": failed, "e2e": d, "ttft": d, "tpot": d,
            "client_lag": lag, "output_tps": 10.0 * c, "requests_per_s": float(c)}


def _cap(lo: float | None, bound: str, upper: float | None = None) -> dict:
    return {"arm": "x", "load": lo, "upper": upper, "bound": bound, "reason": None}


def test_a_capacity_below_a_level_whose_calls_failed_is_bounded_above():
    """p99 e2e 0.2 and 0.3 s at 1 and 2 in flight (SLO 0.4 s: met), then at 4 in flight 5 of 20 calls failed: more
    than the 1 % a p99 allows, so 4 misses the SLO whatever its latencies, and the capacity lies between 2 and 4 —
    not "at least 2". Against a reference that met the SLO at every level up to 4 ("at least 4") the lever's
    capacity multiplier is at most 4 / 4 = 1.0: its capacity is no larger, which "both arms met the SLOs at the
    highest level they ran" denied.  Each combination of bounds, by hand: [2, 4] against ≥ 8: at most 0.5;
    ≥ 8 against [2, 4]: at least 2; 3 against [2, 4]: between 0.75 and 1.5; [2, 4] against [1, 2]: between 1 and 4."""
    from leverbench.analysis.experiment.capacity import capacity_rows
    from leverbench.analysis.experiment.under_load import capacity_pair

    rows = [_row("a", 1, p99=0.2), _row("a", 2, p99=0.3), _row("a", 4, p99=0.01, failed=5)]
    (cap,) = capacity_rows(rows, {})
    assert (cap["load"], cap["upper"], cap["bound"]) == (2.0, 4.0, "between") and "between 2 and 4" in cap["reason"]
    p = capacity_pair({**cap, "arm": "a"}, _cap(4.0, "at least"))
    assert (p["value"], p["bound"], p["low"], p["high"]) == (1.0, "at most", None, 1.0)
    assert p["reason"] is None
    cases = [((2.0, "between", 4.0), (8.0, "at least"), (0.5, "at most")),
             ((8.0, "at least"), (2.0, "between", 4.0), (2.0, "at least")),
             ((3.0, "interpolated"), (2.0, "between", 4.0), (None, "between", 0.75, 1.5)),
             ((2.0, "between", 4.0), (1.0, "between", 2.0), (None, "between", 1.0, 4.0)),
             ((3.0, "interpolated"), (2.0, "interpolated"), (1.5, "exact"))]
    for a, v, want in cases:
        p = capacity_pair(_cap(*a), _cap(*v))
        assert (p["value"], p["bound"]) == want[:2], (a, v, p)
        if want[1] == "between":
            assert (p["low"], p["high"]) == want[2:]
    p = capacity_pair(_cap(8.0, "at least"), _cap(4.0, "at least"))
    assert p["value"] is None and "did not reach either capacity" in p["reason"]
    from leverbench.report.load_levers import capacity_load, capacity_words

    assert capacity_words(capacity_pair(_cap(2.0, "between", 4.0), _cap(1.0, "between", 2.0))) == \
        "between 1.00x and 4.00x"
    assert capacity_load({**cap, "x": "concurrency"}) == "2–4 in flight"


# ------------------------------------------------------------------ finding 12: large loads in words


def test_large_loads_and_rates_read_as_whole_numbers():
    """A drafter paying 1.5x at 64 in flight and costing 10 % at 128 crosses at 64 + 64 × 0.5 / 0.6 = 117.3: the
    sentence says "about 117 in flight", not "1.2e+02"; the tables print 117 and a throughput of 12,345 tokens/s
    without an exponent either."""
    from leverbench.analysis.experiment.crossover import crossover, pays
    from leverbench.report.load_levers import capacity_table, crossover_table, pays_clause

    xs, ms = [64.0, 128.0, 256.0], [1.5, 0.9, 0.5]
    c, n = crossover(xs, ms, [1.4, 0.85, 0.45], [1.6, 0.95, 0.55])
    text = pays_clause(list(zip(xs, ms)), "concurrency", pays(ms, n), c, n)
    assert "up to about 117 in flight" in text and "e+" not in text, text
    m = {"metric": "e2e_p50", "default": True, "pays": "below", "crossover": c, "reason": None, "crossings": 1,
         "levels": []}
    summary = {"load_levers": [{"lever": "drafter", "arm": "d", "vs": "p", "sweep": "s", "x": "concurrency",
                                "metrics": [m], "capacity": None}],
               "capacity": [{"arm": "d", "sweep": "s", "x": "concurrency", "slo": {"slo_e2e_s": 1.0},
                             "percentile": 99.0, "load": 150.0, "upper": None, "bound": "interpolated", "reason": None,
                             "output_tps": 12345.0, "requests_per_s": 1234.5, "gpus": 1.0, "gpu_hour_usd": None,
                             "gpu_hours_per_1000_requests": 0.000225, "gpu_hours_per_million_output_tokens": 0.0225,
                             "usd_per_1000_requests": None, "usd_per_million_output_tokens": None, "levels": []}]}
    cells = [str(x) for t in (crossover_table(summary), capacity_table(summary)) for row in t.rows for x in row]
    assert not any("e+" in x for x in cells), cells
    assert any(x.startswith("117 (64–128") for x in cells) and "12345" in cells, cells


# ------------------------------------------------------------------ finding 2: no capacity multiplier past the guard


def _capacity_sweep(out_cache: int = 10, cached: int = 50) -> list[dict]:
    """Base 0.5, 1.0, 1.6, 3.0 s a call at 1, 2, 4, 8 in flight, the cache arm 0.3, 0.6, 0.9, 1.5 s; SLO e2e 1.2 s:
    base's capacity 2 + 2 × (1 − 1/1.2) / (1.6/1.2 − 1/1.2) = 2.667, the cache arm's 4 + 4 × (1 − 0.75) / (1.25 −
    0.75) = 6: a multiplier of 2.25 when the pair may be cited."""
    slo = {"slo_e2e_s": 1.2}
    recs = []
    for c, lb, la in [(1, 0.5, 0.3), (2, 1.0, 0.6), (4, 1.6, 0.9), (8, 3.0, 1.5)]:
        recs += level("base", f"s@c{c}", c, [lb] * 12, slo=slo)
        recs += level("cache", f"s@c{c}", c, [la] * 12, cached=cached, slo=slo, out=out_cache)
    return recs


def test_the_capacity_multiplier_is_not_cited_past_the_guard():
    """The same sweep three ways.  Citable: the multiplier is 6 / 2.667 = 2.25 and the first screen says it.  The
    cache arm answering 50 % longer at every level (the guard refuses every level for volume): each arm's own
    capacity stays in ``capacity[]``, but the lever's multiplier is None with the reason, and neither the first
    screen nor the capacity table's notes cite it.  The cache never engaging (the pair refused whole): likewise."""
    from leverbench.report.first_screen import first_screen
    from leverbench.report.load_levers import capacity_table

    s = summ(_capacity_sweep())
    cap = s["load_levers"][0]["capacity"]
    assert (cap["value"], cap["bound"]) == (pytest.approx(6 / (2 + 2 * (1 - 1 / 1.2) / (0.6 / 1.2))), "exact")
    assert "capacity at the SLOs 2.25x" in next(x for x in first_screen(s).lines(width=600) if "under load" in x)
    for recs, why in ((_capacity_sweep(out_cache=15), "no level the guard lets through"),
                      (_capacity_sweep(cached=0), "did not engage")):
        s = summ(recs)
        cap = s["load_levers"][0]["capacity"]
        assert cap["value"] is None and cap["bound"] is None and why in cap["reason"], cap
        assert {c["arm"]: c["bound"] for c in s["capacity"]} == {"base": "interpolated", "cache": "interpolated"}
        said = next(x for x in first_screen(s).lines(width=600) if "under load" in x)
        assert "capacity at the SLOs" not in said, said
        note = capacity_table(s).notes[-1]
        assert "capacity multiplier none" in note and why in note and "x" not in note.split("none")[1][:2], note


# ------------------------------------------------------------------ finding 3: a level where every call failed


def test_a_level_where_every_call_of_an_arm_failed_counts_and_is_named():
    """Base takes 1.0 s a call at 1, 2 and 4 in flight; the cache arm 0.5 and 0.8 s at 1 and 2, and at 4 every one
    of its 12 calls fails (HTTP 500) after 10 ms.  SLO e2e 1.5 s.  At 4 the cache arm served nothing: its goodput
    and throughput are 0, multipliers 0 / base's = 0 (interval [0, 0]) — the lever's result there, so the level
    counts (code ``failed``) and those multipliers are citable; its "end-to-end p50" of 10 ms (1.0 / 0.01 = 100x)
    is no latency, so the latency multipliers there are not.  The sentence names the level and does not say the
    lever pays "at every level measured"; the capacity multiplier is at most 4 / 4 = 1.0 (base met the SLO up to 4,
    the cache arm's capacity lies between 2 and 4)."""
    from leverbench.report.first_screen import first_screen
    from leverbench.report.load_levers import levels_table

    slo = {"slo_e2e_s": 1.5}
    recs = []
    for c, la in [(1, 0.5), (2, 0.8)]:
        recs += level("base", f"s@c{c}", c, [1.0] * 12, slo=slo) + level("cache", f"s@c{c}", c, [la] * 12, cached=50,
                                                                         slo=slo)
    recs += level("base", "s@c4", 4, [1.0] * 12, slo=slo)
    recs += level("cache", "s@c4", 4, [0.01] * 12, error=FAIL, slo=slo)
    s = summ(recs)
    (row,) = s["load_levers"]
    top = row["levels"][-1]
    assert top["citable"] and top["reason_codes"] == ["failed"] and "every call of cache failed" in top["reason"]
    assert top["failed"] == {"arm": 12, "vs": 0} and top["calls"] == {"arm": 12, "vs": 12}
    for name in ("goodput", "output_tps"):
        v = metric(row, name)["levels"][-1]
        assert (v["value"], v["low"], v["high"], v["citable"]) == (0.0, 0.0, 0.0, True), (name, v)
    e2e = metric(row, "e2e_p50")["levels"][-1]
    assert e2e["value"] == pytest.approx(100.0) and not e2e["citable"]
    said = next(x for x in first_screen(s).lines(width=600) if "under load" in x)
    assert "every call of cache failed at 4 in flight" in said and "every level measured" not in said, said
    assert "goodput" in said and "costs 100% at 4 in flight" in said, said
    assert "capacity at the SLOs at most 1.00x" in said, said
    cells = levels_table(s).rows[-1]
    assert "rates only" in cells, cells


# ------------------------------------------------------------------ finding 5: crossings beyond the noise


def test_a_crossing_needs_levels_clearly_on_either_side_of_one():
    """A level is on a side of 1 only when its whole interval is: above (low > 1, the lever pays beyond doubt) or
    below (high < 1).  Multipliers 0.999, 1.001, 0.999, 1.001 with intervals ±4 % wobble across 1 three times but
    differ from it nowhere: no crossing, "no clear difference".  2, 1, 2 (exact: every resample alike) only touches
    1 at the middle level: no crossing, it pays wherever it differs.  2, 1, 0.5 crosses between the two clear levels
    1 and 4, at 2 where the multiplier is 1."""
    from leverbench.analysis.experiment.crossover import crossover, pays, sides

    xs = [2.0, 4.0, 6.0, 8.0]
    ms = [0.999, 1.001, 0.999, 1.001]
    lows, highs = [m - 0.04 for m in ms], [m + 0.04 for m in ms]
    assert crossover(xs, ms, lows, highs) == (None, 0)
    assert pays(ms, 0, sides(ms, lows, highs)) == "no clear difference"
    xs = [1.0, 2.0, 4.0]
    assert crossover(xs, [2.0, 1.0, 2.0], [2.0, 1.0, 2.0], [2.0, 1.0, 2.0]) == (None, 0)
    assert pays([2.0, 1.0, 2.0], 0, sides([2.0, 1.0, 2.0], [2.0, 1.0, 2.0], [2.0, 1.0, 2.0])) == "every level"
    c, n = crossover(xs, [2.0, 1.0, 0.5], [2.0, 1.0, 0.5], [2.0, 1.0, 0.5])
    assert n == 1 and c["load"] == 2.0 and c["between"] == [1.0, 4.0]


def test_an_open_loop_below_saturation_shows_no_clear_goodput_difference():
    """An open loop at 2, 4, 6 and 8 requests/s whose every call meets the SLO on both arms: goodput is the offered
    rate on both (the cache arm's last call sent 0.1 s early or late moves its window by a fraction of a per cent).
    Each level's goodput interval holds 1, so the summary, its metric row and the first screen say there is no
    clear difference, and name no crossover."""
    import numpy as np

    from leverbench.report.first_screen import first_screen

    rng = np.random.default_rng(8)
    slo = {"slo_e2e_s": 2.0}
    recs = []
    for r, shift in [(2, 0.1), (4, -0.1), (6, 0.1), (8, -0.1)]:
        recs += level("base", f"o@{r}rps", r, list(1.0 + 0.05 * rng.standard_normal(12)), mode="open", sweep="o",
                      slo=slo)
        rs = level("cache", f"o@{r}rps", r, list(0.9 + 0.045 * rng.standard_normal(12)), mode="open", sweep="o",
                   slo=slo, cached=50)
        rs[-1]["t_send"] += shift
        rs[-1]["scheduled_t"] += shift
        recs += rs
    s = summ(recs)
    g = metric(s["load_levers"][0], "goodput")
    assert all(v["low"] < 1.0 < v["high"] for v in g["levels"]), g["levels"]
    assert (g["pays"], g["crossover"], g["crossings"]) == ("no clear difference", None, 0)
    assert g["reason"] == "no clear difference at any level measured (2–8)"
    said = next(x for x in first_screen(s).lines(width=600) if "under load" in x)
    assert "goodput shows no clear difference at any level measured" in said and "crosses" not in said, said


# ------------------------------------------------------------------ finding 6: the crossover of two straight lines


def test_the_crossover_interpolates_the_difference_of_the_arms():
    """The simulator's drafter model without its noise: end-to-end 0.216 + 0.024 c without the drafter and
    −0.036 + 0.096 c with it (tests/test_load_levers.py), at 2 and 4 in flight 0.264 / 0.156 s and 0.312 / 0.348 s.
    The two lines meet at c = 0.252 / 0.072 = 3.5.  Their ratio is curved: interpolating the multipliers 1.692 and
    0.897 puts the crossing at 2 + 2 × 0.692 / 0.796 = 3.74, outside an interval of the sampling alone (here every
    resample is alike, so it is a point); interpolating the difference of the arms' p50s, 0.108 and −0.036, gives
    2 + 2 × 0.108 / 0.144 = 3.5.  The sentence calls the band what it is, the sampling's part only; and the
    operating point at 3 in flight reads the same lines: (0.216 + 0.072) / (−0.036 + 0.288) = 1.143x, not the
    multipliers' straight line (1.692 + 0.897) / 2 = 1.294x."""
    from leverbench.analysis.base.operating_point import sides
    from leverbench.report.first_screen import first_screen

    recs = []
    for c in (2, 4):
        recs += level("base", f"s@c{c}", c, [0.216 + 0.024 * c] * 12)
        recs += level("cache", f"s@c{c}", c, [-0.036 + 0.096 * c] * 12, cached=50)
    s = summ(recs)
    (row,) = s["load_levers"]
    e2e = metric(row, "e2e_p50")
    assert e2e["crossover"]["load"] == pytest.approx(3.5) and e2e["crossover"]["between"] == [2.0, 4.0]
    said = next(x for x in first_screen(s).lines(width=600) if "under load" in x)
    assert "up to about 3.5 in flight (between 2 and 4; sampling only: 3.5–3.5)" in said, said
    point = {"calls": 10, "arrival_rate": 1.0, "in_flight": {"p50": 2, "p95": 3, "mean": 2, "max": 4, "span_s": 9},
             "duration_source": "hand", "sides": []}
    (side,) = sides([row], point)
    assert side["multiplier"] == pytest.approx(0.288 / 0.252)


# ------------------------------------------------------------------ finding 4: batching toward the larger batch


def test_batching_is_judged_toward_the_larger_batch_whichever_arm_is_the_baseline():
    """Four slots (the baseline) against one, on an open loop at 4 and 11 requests/s: one slot queues (0.12 and
    0.6 s a call against four slots' 0.08 s).  Roles alone would make the pair "one vs four", its multipliers
    0.67 and 0.13, and a queue-dominated ``analyze`` would then advise "it paid at none of them, so add capacity
    first" — the opposite of what was measured.  A queueing lever is judged toward the larger batch: "four vs
    one", 0.12 / 0.08 = 1.5x and 0.6 / 0.08 = 7.5x, paying at every level; and so the advice says."""
    from leverbench.analysis.base.operating_point import under_load
    from leverbench.analysis.traffic.words import _queue_words

    recs = []
    for r, lo in [(4, 0.12), (11, 0.6)]:
        recs += level("four", f"open@{r}rps", r, [0.08] * 12, mode="open", sweep="open", ttft=0.01)
        recs += level("one", f"open@{r}rps", r, [lo] * 12, mode="open", sweep="open", ttft=0.01)
    s = summ(recs, arms={"four": {"slots": 4}, "one": {"slots": 1}})
    (row,) = s["load_levers"]
    assert (row["lever"], row["arm"], row["vs"]) == ("slots", "four", "one")
    assert [v["value"] for v in metric(row, "e2e_p50")["levels"]] == [pytest.approx(1.5), pytest.approx(7.5)]
    said = _queue_words({"under_load": under_load(s["load_levers"]), "operating_point": None})
    assert "slots (four vs one, 'open')" in said and "paying at every level measured" in said, said
    assert "add capacity" not in said


# ------------------------------------------------------------------ finding 8: the client's lag, and only its own


def test_the_lag_guard_judges_the_measured_calls_and_not_a_wait_for_a_slot():
    """Two ways a level looked late without the client falling behind.  (1) Two warm-up calls of the cache arm
    sent 0.5 s late, its 12 measured calls on time: the warm-up is left out of the latencies and so of the lag, and
    the level stays citable.  (2) An open loop at 11 requests/s whose one-slot arm filled ``max_in_flight``: its
    calls waited 0.4 s for a slot (``slot_wait_s``) and went out that late. The wait is the server's backlog,
    counted in the latency from the schedule (end-to-end 0.9 + 0.4 = 1.3 s against 0.08 s: 16.25x), not the client
    falling behind: the level, where batching pays most, is kept."""
    recs = []
    for c, la in [(1, 0.5), (2, 1.5)]:
        recs += level("base", f"s@c{c}", c, [1.0] * 12)
        recs += [rec("cache", f"s@c{c}", c, 100 + i, 0.5, warmup=True, cached=50, lag=0.5) for i in range(2)]
        recs += level("cache", f"s@c{c}", c, [la] * 12, cached=50)
    (row,) = summ(recs)["load_levers"]
    assert all(lv["citable"] for lv in row["levels"]), [lv["reason"] for lv in row["levels"]]
    assert row["levels"][0]["client_lag_p99_s"] == {"arm": 0.0, "vs": 0.0}

    recs = []
    for r, lo, wait in [(4, 0.12, 0.0), (11, 0.9, 0.4)]:
        recs += level("four", f"open@{r}rps", r, [0.08] * 16, mode="open", sweep="open", ttft=0.01)
        recs += level("one", f"open@{r}rps", r, [lo] * 16, mode="open", sweep="open", ttft=0.01, lag=wait,
                      slot_wait_s=wait)
    s = summ(recs, arms={"one": {"slots": 1}, "four": {"slots": 4}})
    (row,) = s["load_levers"]
    top = row["levels"][-1]
    assert top["citable"] and top["client_lag_p99_s"]["vs"] == pytest.approx(0.0), top
    assert metric(row, "e2e_p50")["levels"][-1]["value"] == pytest.approx(1.3 / 0.08)
    one = next(r for r in s["load"] if r["arm"] == "one" and r["rate"] == 11)
    assert one["slot_wait"]["p99"] == pytest.approx(0.4) and one["client_lag"]["p99"] == pytest.approx(0.0)


# ------------------------------------------------------------------ finding 9: analyze and whatif read load_levers


def test_a_summary_read_back_has_its_levers_under_load_checked(tmp_path):
    """``analyze --rates`` and ``whatif --rates`` read ``load_levers`` from a summary.json: a row cut short (a level
    without ``citable``: an internal KeyError before), a negative multiplier (it printed "costs 600%") or an axis
    that is none are refused on reading, naming where; the row as written reads back."""
    import copy
    import json

    from leverbench.errors import BadInput
    from leverbench.json_types import finite
    from leverbench.pipeline.summary_file import read_summary

    recs = []
    for c in (1, 2):
        recs += level("base", f"s@c{c}", c, [1.0] * 8) + level("cache", f"s@c{c}", c, [0.5] * 8, cached=50)
    good = json.loads(json.dumps(finite(summ(recs))))
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(good))
    assert read_summary(path)["load_levers"][0]["arm"] == "cache"
    cut = copy.deepcopy(good)
    del cut["load_levers"][0]["metrics"][0]["levels"][0]["citable"]
    negative = copy.deepcopy(good)
    negative["load_levers"][0]["metrics"][0]["levels"][0]["value"] = -5.0
    axis = copy.deepcopy(good)
    axis["load_levers"][0]["x"] = "bogus"
    for bad, where in ((cut, "load_levers[0].metrics[0].levels[0].citable"),
                       (negative, "load_levers[0].metrics[0].levels[0].value"), (axis, "load_levers[0].x")):
        path.write_text(json.dumps(bad))
        with pytest.raises(BadInput, match=where.replace("[", r"\[").replace("]", r"\]")):
            read_summary(path)


# ------------------------------------------------------------------ finding 10: the price at a capacity


def test_a_closed_loops_capacity_is_priced_by_littles_law():
    """A closed loop at 1 and 2 in flight, every call 0.5 s with 10 output tokens, SLO e2e 1 s: met at both, so
    the capacity is at least 2 in flight.  With N calls always in flight, the loop serves N · n / Σ e2e = 2 × 12 /
    6 = 4 requests/s and 4 × 10 = 40 output tokens/s — whatever the stage's sending window (here the calls are
    spread over 110 s, which the window would read as 0.1 requests/s).  So at 2 GPUs, 2 × 1,000 / (3,600 × 4) =
    0.1389 GPU-hours per 1,000 requests and 2 × 10^6 / (3,600 × 40) = 13.89 per million tokens: the two prices
    agree on 10 tokens a request."""
    slo = {"slo_e2e_s": 1.0}
    recs = []
    for c in (1, 2):
        recs += level("base", f"s@c{c}", c, [0.5] * 12, slo=slo) + level("cache", f"s@c{c}", c, [0.5] * 12,
                                                                         cached=50, slo=slo)
    s = summarize(ledger(header({"base": {"prefix_cache": False, "gpus": 2}, "cache": {"prefix_cache": True}},
                                ["r"]), recs))
    caps = {c["arm"]: c for c in s["capacity"]}
    base = caps["base"]
    assert (base["load"], base["bound"]) == (2.0, "at least")
    assert (base["requests_per_s"], base["output_tps"]) == (pytest.approx(4.0), pytest.approx(40.0))
    assert base["gpu_hours_per_1000_requests"] == pytest.approx(2000 / (3600 * 4))
    assert base["gpu_hours_per_million_output_tokens"] == pytest.approx(2e6 / (3600 * 40))
    assert base["throughput_source"] == "calls in flight"


# ------------------------------------------------------------------ finding 11: the plot's scale


def test_the_plot_is_scaled_on_the_citable_multipliers():
    """The sweep of finding 3 with a level at 8 where every call of the cache arm failed after 10 ms: its end-to-end
    p50 "multiplier" 1.0 / 0.01 = 100x is not citable, the citable ones lie within 0 and 2.  The y axis is scaled on
    those (its top tick below 3, not 100 squashing them flat); the 100x is drawn clipped at the top, with a marker
    that says so."""
    import re

    from leverbench.report.svg_levers import svg_lever_load

    slo = {"slo_e2e_s": 1.5}
    recs = []
    for c, la in [(1, 0.5), (2, 0.8), (4, 1.2)]:
        recs += level("base", f"s@c{c}", c, [1.0] * 12, slo=slo) + level("cache", f"s@c{c}", c, [la] * 12, cached=50,
                                                                         slo=slo)
    recs += level("base", "s@c8", 8, [1.0] * 12, slo=slo) + level("cache", "s@c8", 8, [0.01] * 12, error=FAIL, slo=slo)
    s = summ(recs)
    svg = str(svg_lever_load(s["load_levers"][0], s["capacity"]))
    yticks = [float(v) for v in re.findall(r'text-anchor="end">([0-9.]+)</text>', svg)]
    assert yticks and max(yticks) < 3.0, yticks
    assert "above the plot: 100.00x" in svg and 'class="clipped"' in svg


# ------------------------------------------------------------------ finding 13: the rows' types


def test_the_level_rows_hold_counts_shares_and_where_the_gpu_count_came_from():
    """A level's ``calls`` and ``failed`` are counts, its ``cached_share`` a share: a summary that says 2.5 calls,
    −1 failed or a cached share of 1.5 departs from the schema.  A capacity's price names where its GPU count came
    from: the arm's conditions, or assumed (1: none given), and the capacity table says so."""
    import copy
    import json

    from leverbench.analysis.experiment.capacity import capacity_rows
    from leverbench.json_types import finite
    from leverbench.report.load_levers import capacity_table
    from leverbench.schema.check import summary_problems

    slo = {"slo_e2e_s": 1.0}
    recs = []
    for c in (1, 2):
        recs += level("base", f"s@c{c}", c, [0.5] * 8, slo=slo) + level("cache", f"s@c{c}", c, [0.4] * 8, cached=50,
                                                                        slo=slo)
    s = summ(recs)
    good = json.loads(json.dumps(finite(s)))
    lv = good["load_levers"][0]["levels"][0]
    assert lv["calls"] == {"arm": 8, "vs": 8} and all(isinstance(v, int) for v in lv["calls"].values())
    assert lv["cached_share"]["arm"] == pytest.approx(0.5)
    assert summary_problems(good) == []
    for key, who, value in (("calls", "arm", 2.5), ("failed", "vs", -1), ("cached_share", "arm", 1.5)):
        bad = copy.deepcopy(good)
        bad["load_levers"][0]["levels"][0][key][who] = value
        assert any(p.where == f"load_levers[0].levels[0].{key}.{who}" for p in summary_problems(bad)), (key, value)
    caps = {c["arm"]: c for c in s["capacity"]}
    assert (caps["cache"]["gpus"], caps["cache"]["gpus_source"]) == (1.0, "assumed")
    notes = " ".join(capacity_table(s).notes)
    assert "base, cache: 1 GPU assumed (no gpus in the arm's conditions)" in notes, notes
    (cap,) = capacity_rows([_row("a", 1, p99=0.2), _row("a", 2, p99=0.3)], {"a": {"gpus": 2}})
    assert (cap["gpus"], cap["gpus_source"]) == (2.0, "conditions")


def test_the_side_of_a_lever_with_no_clear_difference_gives_no_advice_either_way():
    """A lever whose multiplier shows no clear difference at any level (each interval holds 1): at the traffic's
    load its 1.001x is no reason to turn it on, nor its 0.999x to leave it off."""
    from leverbench.analysis.base.operating_point import sides

    levels = [{"stage": f"s{i}", "load": x, "value": m, "low": m - 0.04, "high": m + 0.04, "citable": True,
               "clear": False} for i, (x, m) in enumerate([(1.0, 1.001), (4.0, 0.999)])]
    row = {"lever": "drafter", "arm": "d", "vs": "p", "sweep": "s", "x": "concurrency",
           "metrics": [{"metric": "e2e_p50", "levels": levels, "pays": "no clear difference", "crossover": None}]}
    point = {"calls": 10, "arrival_rate": 2.0, "in_flight": {"p50": 1, "p95": 2, "mean": 1, "max": 4, "span_s": 9},
             "duration_source": "hand", "sides": []}
    (s,) = sides([row], point)
    assert (s["side"], s["advice"]) == ("no clear difference", "either: no clear difference measured")
