"""Levers under load (issue 25): each lever judged at every load level, where it flips, capacity at an SLO and its
price, batching as a lever, the operating point of a trace — against hand computation and the simulator.

The pure parts first (crossover, capacity, calls in flight, the level guard, the bootstrap), each against numbers
worked out by hand in its docstring; then runs against the simulator, whose truth comes from its own logged
records (``/sim/truth``) or, where a truth is a point of its model (the crossover, a capacity), from the model's
formula worked out in the test's docstring.
"""

from __future__ import annotations

import contextlib
import statistics
from pathlib import Path

import numpy as np
import pytest
import sim_truth
from click.testing import CliRunner
from ledgers import header, ledger
from test_load import sim_process

from leverbench.analysis.base.operating_point import in_flight, operating_point, sides
from leverbench.analysis.experiment.capacity import capacity_rows
from leverbench.analysis.experiment.crossover import crossover, pays
from leverbench.analysis.experiment.under_load import RESAMPLES, _interval
from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.config import load
from leverbench.ledger.reader import read_ledger
from leverbench.pipeline.run_files import write_reports
from leverbench.pipeline.traffic_files import analyze_file
from leverbench.report.first_screen import first_screen
from leverbench.runner.run import Runner

TRACES = Path(__file__).parent / "data" / "traces"


# ------------------------------------------------------------------ where it flips


def test_crossover_interpolates_between_the_levels_and_inverts_the_band():
    """Levels 1, 2, 4, 8 with multipliers 2.0, 1.5, 0.8, 0.5 and intervals [1.8, 2.2], [1.3, 1.7], [0.7, 0.9],
    [0.45, 0.55].  The multiplier crosses 1 between 2 and 4: x = 2 + 2 × (1.5 − 1) / (1.5 − 0.8) = 3.428571…;
    the lower bounds fall to 1 between 2 and 4 at 2 + 2 × 0.3 / 0.6 = 3.0; the upper bounds stay below 1 after 2,
    crossing at 2 + 2 × 0.7 / 0.8 = 3.75.  Mirrored (the lever pays above): 0.5, 0.8, 1.5, 2.0 crosses at
    2 + 2 × 0.2 / 0.7 = 2.571428…; the upper bounds rise to 1 at 2 + 2 × 0.1 / 0.8 = 2.25, the lower ones stay
    above 1 after 2 + 2 × 0.3 / 0.6 = 3.0."""
    xs = [1.0, 2.0, 4.0, 8.0]
    c, n = crossover(xs, [2.0, 1.5, 0.8, 0.5], [1.8, 1.3, 0.7, 0.45], [2.2, 1.7, 0.9, 0.55])
    assert n == 1 and c["load"] == pytest.approx(2 + 2 * 0.5 / 0.7) and c["between"] == [2.0, 4.0]
    assert (c["low"], c["high"]) == (pytest.approx(3.0), pytest.approx(3.75))
    assert pays([2.0, 1.5, 0.8, 0.5], n) == "below"
    c, n = crossover(xs, [0.5, 0.8, 1.5, 2.0], [0.45, 0.7, 1.3, 1.8], [0.55, 0.9, 1.7, 2.2])
    assert c["load"] == pytest.approx(2 + 2 * 0.2 / 0.7)
    assert (c["low"], c["high"]) == (pytest.approx(2.25), pytest.approx(3.0))
    assert pays([0.5, 0.8, 1.5, 2.0], n) == "above"
    # an interval that already includes 1 at the first level leaves the crossover's low end open
    c, _ = crossover(xs, [2.0, 1.5, 0.8, 0.5], [0.9, 1.3, 0.7, 0.45], [2.2, 1.7, 0.9, 0.55])
    assert c["low"] is None and c["high"] == pytest.approx(3.75)
    # ... and an upper bound still above 1 at the last level leaves its high end open
    c, _ = crossover(xs, [2.0, 1.5, 0.8, 0.5], [1.8, 1.3, 0.7, 0.45], [2.2, 1.7, 0.9, 1.1])
    assert c["high"] is None
    assert crossover(xs, [2.0, 1.5, 1.2, 1.1], [1.0] * 4, [3.0] * 4) == (None, 0)
    assert pays([2.0, 1.5, 1.2, 1.1], 0) == "every level" and pays([0.9, 0.5], 0) == "no level"
    # intervals that hold 1 at every level: no crossing (finding 5 of the review); without intervals, each
    # multiplier's side of 1
    assert crossover(xs, [2.0, 0.5, 1.5, 0.5], [1.0] * 4, [3.0] * 4) == (None, 0)
    c, n = crossover(xs, [2.0, 0.5, 1.5, 0.5], [None] * 4, [None] * 4)
    assert n == 3 and pays([2.0, 0.5, 1.5, 0.5], n) == "mixed"
    assert c["load"] == pytest.approx(1 + 1 / 1.5)


# ------------------------------------------------------------------ capacity at an SLO


def _row(arm: str, c: int, *, p99: float, tps: float, rps: float, failed: int = 0, lag: float = 0.001) -> dict:
    d = {"n": 20, "p50": p99 / 2, "p90": p99, "p95": p99, "p99": p99, "mean": p99 / 2, "max": p99}
    return {"arm": arm, "stage": f"s@c{c}", "sweep": "s", "mode": "closed", "concurrency": c, "rate": None,
            "speed": None, "slo": {"slo_e2e_s": 0.4}, "requests": 20, "failed": failed, "e2e": d, "ttft": d,
            "tpot": d, "client_lag": {**d, "p99": lag}, "output_tps": tps, "requests_per_s": rps}


def test_capacity_interpolates_the_worst_slo_and_prices_it():
    """p99 e2e 0.2, 0.3, 0.5, 0.9 s at 1, 2, 4, 8 in flight against an SLO of 0.4 s: g = 0.5, 0.75, 1.25, 2.25, so
    the capacity lies between 2 and 4 at 2 + 2 × (1 − 0.75) / (1.25 − 0.75) = 3.0; there, throughput 100 → 160
    tok/s reads 130, requests 10 → 16/s read 13.  2 GPUs at $4/h: 2 × 1,000 / (3,600 × 13) = 0.042735 GPU-h per
    1,000 requests ($0.17094), 2 × 10^6 / (3,600 × 130) = 4.2735 per million tokens ($17.094)."""
    levels = [(1, 0.2, 60, 6), (2, 0.3, 100, 10), (4, 0.5, 160, 16), (8, 0.9, 170, 17)]
    rows = [_row("a", c, p99=p, tps=t, rps=r) for c, p, t, r in levels]
    (cap,) = capacity_rows(rows, {"a": {"gpus": 2, "gpu_hour_usd": 4.0}})
    assert (cap["load"], cap["bound"]) == (pytest.approx(3.0), "interpolated")
    assert (cap["output_tps"], cap["requests_per_s"]) == (pytest.approx(130), pytest.approx(13))
    assert cap["gpu_hours_per_1000_requests"] == pytest.approx(2000 / (3600 * 13))
    assert cap["gpu_hours_per_million_output_tokens"] == pytest.approx(2e6 / (3600 * 130))
    assert cap["usd_per_1000_requests"] == pytest.approx(4 * 2000 / (3600 * 13))
    assert [lv["meets"] for lv in cap["levels"]] == [True, True, False, False]
    # every level met: at least the highest; the lowest missed: none; calls failed past what p99 allows: a miss
    # whose ratio is unknown, so the capacity lies between the level before and it
    (cap,) = capacity_rows([_row("a", c, p99=0.1, tps=t, rps=r) for c, _, t, r in levels], {})
    assert (cap["load"], cap["bound"], cap["gpu_hour_usd"]) == (8.0, "at least", None)
    (cap,) = capacity_rows([_row("a", c, p99=1.0, tps=t, rps=r) for c, _, t, r in levels], {})
    assert (cap["load"], cap["bound"]) == (None, "none")
    rows[2] = _row("a", 4, p99=0.3, tps=160, rps=16, failed=1)  # 1 of 20 failed: 5 % > the 1 % p99 allows
    (cap,) = capacity_rows(rows, {})
    assert (cap["load"], cap["upper"], cap["bound"]) == (2.0, 4.0, "between")
    assert cap["reason"] == "calls failed at 4: the capacity lies between 2 and 4"
    # a level where the client fell behind is left out: the capacity interpolates over the others
    rows = [_row("a", c, p99=p, tps=t, rps=r, lag=5.0 if c == 4 else 0.001) for c, p, t, r in levels]
    (cap,) = capacity_rows(rows, {})
    assert cap["load"] == pytest.approx(2 + 6 * 0.25 / 1.5) and not cap["levels"][2]["on_schedule"]


# ------------------------------------------------------------------ the operating point


def test_calls_in_flight_are_time_weighted():
    """Arrivals 0, 1, 1.5, 4 s lasting 2, 2, 1, 1 s: in flight 1 over [0, 1), 2 over [1, 1.5), 3 over [1.5, 2),
    2 over [2, 2.5), 1 over [2.5, 3), 0 over [3, 4), 1 over [4, 5]: of the 5 s, 0 for 1 s, 1 for 2.5 s, 2 for 1 s,
    3 for 0.5 s; cumulative shares 0.2, 0.7, 0.9, 1.0: p50 1, p95 3; mean (2.5 + 2 + 1.5) / 5 = 1.2; max 3.
    Arrival rate (4 − 1) / (4 − 0) = 0.75 per second."""
    arrival, duration = np.array([0.0, 1.0, 1.5, 4.0]), np.array([2.0, 2.0, 1.0, 1.0])
    fl = in_flight(arrival, duration)
    assert (fl["p50"], fl["p95"], fl["max"], fl["span_s"]) == (1.0, 3.0, 3.0, 5.0)
    assert fl["mean"] == pytest.approx(1.2)
    point = operating_point(arrival, duration, "hand")
    assert point["arrival_rate"] == pytest.approx(0.75)
    # a brute-force count at 100,000 instants spread over the span agrees
    t = np.linspace(0, 5, 100_000, endpoint=False) + 2.5e-5
    counts = ((arrival[None, :] <= t[:, None]) & (t[:, None] < (arrival + duration)[None, :])).sum(axis=1)
    assert np.percentile(counts, 50, method="inverted_cdf") == 1 and counts.mean() == pytest.approx(1.2, abs=1e-3)


def _lever_row(points: list[tuple[float, float]], x: str = "concurrency") -> dict:
    levels = [{"stage": f"s{i}", "load": a, "value": m, "low": None, "high": None, "citable": True}
              for i, (a, m) in enumerate(points)]
    return {"lever": "drafter", "arm": "d", "vs": "p", "sweep": "s", "x": x,
            "metrics": [{"metric": "e2e_p50", "levels": levels, "pays": "below", "crossover": None}]}


def test_the_side_of_a_crossover_at_the_traffic_s_load():
    """A drafter pays 1.8x at 1 in flight, 1.2x at 2, 0.8x at 4: at a p95 of 3 in flight the multiplier is
    1.2 + (0.8 − 1.2) × 0.5 = 1.0 → not > 1: "leave it off"; at a p95 of 1.5: 1.5x, "turn it on"; at 6, beyond the
    levels measured, the nearest level's 0.8x.  An open-loop sweep is judged at the traffic's arrival rate."""
    row = _lever_row([(1, 1.8), (2, 1.2), (4, 0.8)])
    point = {"calls": 10, "arrival_rate": 2.0, "in_flight": {"p50": 1, "p95": 3, "mean": 1, "max": 4, "span_s": 9},
             "duration_source": "hand", "sides": []}
    (s,) = sides([row], point)
    assert (s["multiplier"], s["advice"], s["measured"], s["at_what"]) == (pytest.approx(1.0), "leave it off", True,
                                                                           "p95")
    point["in_flight"]["p95"] = 1.5
    assert sides([row], point)[0]["multiplier"] == pytest.approx(1.5) and sides([row], point)[0]["advice"] == \
        "turn it on"
    point["in_flight"]["p95"] = 6
    (s,) = sides([row], point)
    assert s["multiplier"] == pytest.approx(0.8) and not s["measured"]
    (s,) = sides([_lever_row([(1, 1.1), (3, 2.1)], x="rate")], point)
    assert (s["at"], s["multiplier"], s["at_what"]) == (2.0, pytest.approx(1.6), "arrival rate")
    assert sides([_lever_row([(1, 1.1)], x="speed")], point) == []  # a trace's speed compares with no traffic


# ------------------------------------------------------------------ the level guard, on a hand-made ledger


def _load(arm: str, stage: str, c: int, i: int, latency: float, *, lag: float = 0.0, out: int = 10,
          error: dict | None = None) -> dict:
    t = 1000.0 + 10 * i + c * 1000
    return {"kind": "load", "arm": arm, "stage": stage, "sweep": "s", "mode": "closed", "case": "r",
            "concurrency": c, "load_run": "run-1", "prefix_sharing": 0.0, "t_send": t, "scheduled_t": t - lag,
            "connect_s": 0.0, "ttft_s": None if error else 0.1, "t_first_answer_s": None if error else 0.1,
            "latency_s": latency, "chunk_t": [] if error else [0.1, latency],
            "completion_tokens": None if error else out, "prompt_tokens": None if error else 100,
            "cached_tokens": None if error else (50 if arm == "cache" else 0), "timings": None, "error": error,
            "warmup": False, "repeat": i,
            "step": 0, "slo_e2e_s": 0.9}


def test_the_guard_per_level_on_a_hand_made_ledger():
    """Two arms that differ in the prefix cache, at 1 and 2 in flight, 8 calls each.  At c=1 the reference takes
    1.0 s a call and the cache arm 0.5 s: every e2e percentile's multiplier is 1.0 / 0.5 = 2.0, with a bootstrap
    interval of [2.0, 2.0] (every resample is the same); goodput (SLO 0.9 s): the reference meets none, so no
    multiplier.  At c=2 the cache arm's client sent 0.5 s behind its schedule (lag p99 0.5 s > max(10 ms, 10 % ×
    its e2e p50 of 1.0 s)): the level is marked and left out, so its crossover is taken over c=1 alone ("pays at
    every level measured").  One failed call (HTTP 500 after 0.05 s) is counted, not refused, and shows at its
    elapsed time in the e2e p50: sorted 0.05, 0.5 × 7 → p50 0.5."""
    recs = [_load("base", "s@c1", 1, i, 1.0) for i in range(8)]
    recs += [_load("cache", "s@c1", 1, i, 0.5) for i in range(7)]
    recs.append(_load("cache", "s@c1", 1, 7, 0.05, error={"class": "http_500", "message": "x"}))
    recs += [_load("base", "s@c2", 2, i, 1.0) for i in range(8)]
    recs += [_load("cache", "s@c2", 2, i, 0.5, lag=0.5) for i in range(8)]
    s = summarize(ledger(header({"base": {"prefix_cache": False}, "cache": {"prefix_cache": True}}, ["r"]), recs))
    (row,) = s["load_levers"]
    assert (row["lever"], row["arm"], row["vs"], row["x"]) == ("prefix_cache", "cache", "base", "concurrency")
    l1, l2 = row["levels"]
    assert l1["citable"] and l1["failed"] == {"arm": 1.0, "vs": 0.0} and l1["calls"] == {"arm": 8.0, "vs": 8.0}
    assert not l2["citable"] and l2["reason_codes"] == ["client_lag"] and "fell behind" in l2["reason"]
    m = {x["metric"]: x for x in row["metrics"]}
    v1, v2 = m["e2e_p50"]["levels"]
    assert (v1["value"], v1["low"], v1["high"]) == (pytest.approx(2.0), pytest.approx(2.0), pytest.approx(2.0))
    assert v2["value"] == pytest.approx(1.0 / 1.0) and not v2["citable"]  # e2e from the schedule: 0.5 + 0.5 lag
    assert m["e2e_p50"]["pays"] == "every level" and m["e2e_p50"]["crossover"] is None
    assert m["e2e_p50"]["reason"] == "pays at every level measured (1–1)"
    assert m["goodput"]["levels"][0]["value"] is None
    # unequal work refuses a level: the cache arm's answers 20 % longer than the reference's
    recs2 = [r if r["arm"] == "base" else {**r, "completion_tokens": 12 if r["completion_tokens"] else None}
             for r in recs]
    s2 = summarize(ledger(header({"base": {"prefix_cache": False}, "cache": {"prefix_cache": True}}, ["r"]), recs2))
    assert s2["load_levers"][0]["levels"][0]["reason_codes"] == ["volume"]
    assert s2["load_levers"][0]["metrics"][0]["reason"] == "no level the guard lets through"
    # what refuses the pair (here: the cache never engaged) refuses every level, and says so
    recs3 = [{**r, "cached_tokens": 0} if r["arm"] == "cache" and r["cached_tokens"] else r for r in recs]
    s3 = summarize(ledger(header({"base": {"prefix_cache": False}, "cache": {"prefix_cache": True}}, ["r"]), recs3))
    row3 = s3["load_levers"][0]
    assert row3["refused"] == "the lever prefix_cache did not engage on cache"
    assert [lv["reason_codes"][0] for lv in row3["levels"]] == ["not_engaged", "not_engaged"]
    assert "not citable" in first_screen(s3).lines(width=400)[2]


def test_the_bootstrap_interval_agrees_with_a_plain_resampling():
    """The interval of a p50 ratio between two samples of 40 exponential draws, by scipy's bootstrap, against a
    hand-rolled percentile bootstrap (numpy, 20,000 resamples of each sample independently): the ends agree within
    5 %, and both contain the ratio of the samples' own medians."""
    rng = np.random.default_rng(7)
    a, r = rng.exponential(1.0, 40), rng.exponential(2.0, 40)

    def stat(i, j, axis=-1):
        return np.percentile(r[j.astype(int)], 50, axis=axis) / np.percentile(a[i.astype(int)], 50, axis=axis)
    lo, hi = _interval(stat, a.size, r.size)
    hand = np.random.default_rng(11)
    ia, ir = hand.integers(0, 40, (20_000, 40)), hand.integers(0, 40, (20_000, 40))
    reps = np.median(r[ir], axis=1) / np.median(a[ia], axis=1)
    assert lo == pytest.approx(np.percentile(reps, 2.5), rel=0.05)
    assert hi == pytest.approx(np.percentile(reps, 97.5), rel=0.05)
    assert lo < np.median(r) / np.median(a) < hi and RESAMPLES >= 1000


# ------------------------------------------------------------------ against the simulator

#: Two arms whose truth crosses at 3.5 requests in flight.  Each decode step takes s × (1 + β × (k − 1)), k the
#: requests decoding at once (the simulator's decode_batch_slowdown).  "plain": s = 20 ms, β = 0.1, one token a
#: step, so 12 steps for the answer's 12 tokens; "drafter": s = 10 ms, β = 1.6, two tokens a step (2 drafts, half
#: accepted: 1 + round(2 × 0.5) = 2), 6 steps.  In a closed loop of c, k = c, and end-to-end (prefill is
#: negligible at 10^6 tokens/s):
#:     plain:   12 × 0.020 × (1 + 0.1 (c − 1)) = 0.216 + 0.024 c
#:     drafter:  6 × 0.010 × (1 + 1.6 (c − 1)) = −0.036 + 0.096 c
#: equal at c = 0.252 / 0.072 = 3.5: the drafter pays below 3.5 in flight (4x alone) and costs above it.
OUT = 12
PLAIN = dict(prefill_tps=1_000_000, decode_tps=50, decode_batch_slowdown=0.1, output_tokens=OUT, slots=8,
             prefix_cache=False)
DRAFTER = dict(prefill_tps=1_000_000, decode_tps=100, decode_batch_slowdown=1.6, output_tokens=OUT, slots=8,
               prefix_cache=False, draft_k=2, draft_acceptance=0.5)
TRUE_CROSSOVER = 0.252 / 0.072
#: The TPOT SLO of the sweep, and the drafter's capacity at it by the model: its TPOT at c, over the 11 tokens
#: after the first and the 5 steps after the first one, is 5 × 0.010 × (1 + 1.6 (c − 1)) / 11; ≤ 0.045 s while
#: 1 + 1.6 (c − 1) ≤ 0.045 × 11 / 0.05 = 9.9, so up to c = 1 + 8.9 / 1.6 = 6.5625.  The plain arm's TPOT is its
#: step, 0.020 × (1 + 0.1 (c − 1)) ≤ 0.034 s at 8: it meets the SLO at every level (capacity "at least 8").
SLO_TPOT = 0.045
TRUE_DRAFTER_CAPACITY = 1 + (SLO_TPOT * 11 / 0.05 - 1) / 1.6
PROMPT = " ".join(f"w{i}" for i in range(40))  # long enough for the rate model's prefill points (≥ 16 tokens)


def _experiment(tmp: Path, arms: dict[str, tuple[str, dict]], body: str, *, max_tokens: int = OUT) -> Path:
    arm_toml = "".join(f'''
[[arms]]
name = "{name}"
role = "{'baseline' if i == 0 else 'treatment'}"
base_url = "{url}"
model = "sim"
conditions = {{ {", ".join(f"{k} = {v!r}".replace("'", '"') for k, v in cond.items())} }}
''' for i, (name, (url, cond)) in enumerate(arms.items()))
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "load-levers"
repeats = 1
baseline = "{next(iter(arms))}"
sentinel_tokens = 0
{arm_toml}
[[cases]]
name = "agent"
prompt = "{PROMPT}"
max_tokens = {max_tokens}
temperature = 0.0

[probes]
output_tokens = [4, {max_tokens}]
repeats = 2
{body}''')
    return p


@contextlib.contextmanager
def _quiet_disk():
    """The ledger's fsync per record can stall this shared machine's disk for 100 ms and more, which the client
    would then be late by (its lag is what the guard judges); durability is not under test here."""
    import leverbench.ledger.writer as writer

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(writer.os, "fsync", lambda fd: None)
        yield


SWEEP = f'''
[[load]]
name = "ramp"
mode = "closed"
concurrency = [1, 2, 4, 8]
ramp_s = 0.2
warmup_requests = 8
requests = 24
slo_tpot_s = {SLO_TPOT}
'''


@pytest.fixture(scope="module")
def drafter_run(tmp_path_factory):
    """The drafter against plain decoding, swept at 1, 2, 4 and 8 in flight (~30 s); with each arm's truth."""
    tmp = tmp_path_factory.mktemp("drafter")
    with _quiet_disk(), sim_process(**PLAIN) as plain, sim_process(**DRAFTER) as drafter:
        price = {"gpus": 2, "gpu_hour_usd": 3.0}
        exp = load(_experiment(tmp, {"plain": (plain, {"drafter": "none", **price}),
                                     "drafter": (drafter, {"drafter": "ngram", **price})},
                               SWEEP))
        Runner(exp, tmp / "run").run()
        truth = {"plain": sim_truth.fetch(plain), "drafter": sim_truth.fetch(drafter)}
    led = read_ledger(tmp / "run")
    return tmp / "run", summarize(led), led, truth


@pytest.mark.slow
def test_the_drafter_pays_alone_costs_in_a_batch_and_flips_where_the_simulator_does(drafter_run):
    run, s, led, truth = drafter_run
    (row,) = s["load_levers"]
    assert (row["lever"], row["arm"], row["vs"], row["sweep"], row["x"]) == ("drafter", "drafter", "plain", "ramp",
                                                                              "concurrency")
    assert [lv["load"] for lv in row["levels"]] == [1.0, 2.0, 4.0, 8.0] and all(lv["citable"] for lv in row["levels"])
    e2e = next(m for m in row["metrics"] if m["metric"] == "e2e_p50")
    for lv in e2e["levels"]:
        c = lv["load"]
        # the truth at this level, from what the simulator logged it did: its records of each arm's measured calls,
        # from arrival to last byte; and the batch each of them decoded in
        served = {}
        for arm in ("plain", "drafter"):
            calls = [r for r in led.records if r["kind"] == "load" and r["arm"] == arm and r["stage"] == lv["stage"]
                     and not r["warmup"]]
            served[arm] = sim_truth.records_of(calls, truth[arm])
            assert statistics.median(t["decode_batch"] for t in served[arm]) >= 0.75 * c, (arm, c)
        true_m = (statistics.median(t["end"] - t["arrival"] for t in served["plain"])
                  / statistics.median(t["end"] - t["arrival"] for t in served["drafter"]))
        model_pays = c < TRUE_CROSSOVER
        assert (true_m > 1) is model_pays, (c, true_m)  # the simulator did what its model says
        assert (lv["value"] > 1) is model_pays, (c, lv["value"])  # ... and the reported multiplier says so
        # the client's own time per call (its network, its loop) adds alike to both arms' e2e and pulls the
        # ratio toward 1: at 1 in flight, 65 ms against 245 ms, 20 ms of it would be 17 %
        assert lv["value"] == pytest.approx(true_m, rel=0.2)
        assert lv["low"] <= lv["value"] <= lv["high"]
    cross = e2e["crossover"]
    assert e2e["pays"] == "below" and 2.0 < cross["load"] < 4.0 and cross["between"] == [2.0, 4.0]
    # capacity at the TPOT SLO: the drafter's within 10 % of its model's, the plain arm's beyond the sweep
    caps = {c["arm"]: c for c in s["capacity"]}
    assert caps["drafter"]["bound"] == "interpolated"
    assert caps["drafter"]["load"] == pytest.approx(TRUE_DRAFTER_CAPACITY, rel=0.10)
    assert (caps["plain"]["load"], caps["plain"]["bound"]) == (8.0, "at least")
    # its price there: 2 GPUs at $3 over the throughput at the capacity
    d = caps["drafter"]
    assert d["gpu_hours_per_million_output_tokens"] == pytest.approx(2e6 / (3600 * d["output_tps"]))
    assert d["usd_per_1000_requests"] == pytest.approx(3.0 * 2000 / (3600 * d["requests_per_s"]))
    assert row["capacity"]["value"] == pytest.approx(d["load"] / 8.0) and row["capacity"]["bound"] == "at most"
    # the drafter's own acceptance, from the server's counters over each stage, beside each level
    assert [lv["engagement"]["drafter_acceptance"]["arm"] for lv in row["levels"]] == [0.5] * 4


@pytest.mark.slow
def test_the_report_draws_and_says_it(drafter_run, tmp_path):
    run, s, _, _ = drafter_run
    lines = first_screen(s).lines(width=400)
    said = next(x for x in lines if "under load" in x)
    assert "drafter under load (drafter vs plain, ramp): end-to-end p50 pays" in said
    assert "up to about 3" in said and "(between 2 and 4" in said and "at 8 in flight" in said
    write_reports(run, s, read_ledger(run))
    html = (run / "report.html").read_text()
    assert 'id="levers-under-load"' in html and "drafter under load: drafter vs plain" in html
    assert "crosses at" in html and "SLO capacity" in html
    md = (run / "report.md").read_text()
    assert "Where each lever flips" in md and "Capacity at the SLOs, and its price" in md


def _brute_in_flight(arrival: list[float], duration: list[float]) -> tuple[float, float]:
    """p50 and p95 of the calls in flight, counted at every event's midpoint-weighted interval by plain Python:
    the oracle for :func:`in_flight`."""
    events = sorted({*arrival, *(a + d for a, d in zip(arrival, duration))})
    spans = []
    for a, b in zip(events, events[1:]):
        mid = (a + b) / 2
        spans.append((sum(1 for x, d in zip(arrival, duration) if x <= mid < x + d), b - a))
    spans.sort()
    total, acc, out = sum(w for _, w in spans), 0.0, {}
    for n, w in spans:
        acc += w
        for q in (0.5, 0.95):
            if q not in out and acc >= q * total - 1e-9:
                out[q] = n
    return out[0.5], out[0.95]


@pytest.mark.parametrize("name", ["mooncake_conversation_trace.jsonl", "AzureLLMInferenceTrace_conv.csv"])
def test_analyze_prints_the_operating_point_of_a_trace(name):
    """The public traces' arrival rate and calls in flight at rates given by hand (prefill 5,000 tokens/s + 0.1 s,
    decode 50 tokens/s: no latency recorded, so each call lasts its service time alone), against a count in plain
    Python over the same calls."""
    import polars as pl

    from leverbench.workload.traces import load_traffic

    res = CliRunner().invoke(cli, ["analyze", str(TRACES / name), "--prefill-tps", "5000", "--prefill-a-s", "0.1",
                                   "--decode-tps", "50"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    frame = load_traffic(TRACES / name).frame.collect()
    arrival = frame.get_column("arrival").to_list()
    duration = (0.1 + frame.get_column("input").cast(pl.Float64) / 5000
                + frame.get_column("output").cast(pl.Float64) / 50).to_list()
    p50, p95 = _brute_in_flight(arrival, duration)
    rate = (len(arrival) - 1) / (max(arrival) - min(arrival))
    text = " ".join(res.output.split())
    assert f"Operating point: {len(arrival):,} calls with arrival times, {rate:.3g} requests/s" in text
    assert f"calls in flight p50 {p50:g}, p95 {p95:g}" in text
    assert "service time at the rates, alone" in text


@pytest.mark.slow
def test_analyze_and_whatif_say_which_side_of_the_crossover_the_traffic_lies(drafter_run, tmp_path):
    """With --rates from the swept run, the Mooncake slice's p95 in flight (as served at the run's rates) is judged
    against the drafter's crossover: its multiplier there is the run's end-to-end p50 multipliers interpolated
    linearly at that load (the nearest level's beyond them), and the advice follows its side of 1."""
    run, s, _, _ = drafter_run
    e2e = next(m for m in s["load_levers"][0]["metrics"] if m["metric"] == "e2e_p50")
    xs, ms = [v["load"] for v in e2e["levels"]], [v["value"] for v in e2e["levels"]]
    result = analyze_file(TRACES / "mooncake_conversation_trace.jsonl", rates_dir=run)
    point = result["operating_point"]
    (side,) = point["sides"]
    p95 = point["in_flight"]["p95"]
    assert side["at"] == p95 and side["multiplier"] == pytest.approx(float(np.interp(p95, xs, ms)))
    assert side["advice"] == ("turn it on" if np.interp(p95, xs, ms) > 1 else "leave it off")
    res = CliRunner().invoke(cli, ["analyze", str(TRACES / "mooncake_conversation_trace.jsonl"), "--rates", str(run)],
                             env={"COLUMNS": "400"})
    text = " ".join(res.output.split())
    assert res.exit_code == 0 and "Under load: the drafter (drafter vs plain, ramp, end-to-end p50) pays" in text
    assert f"at your p95 of {p95:g} in flight" in text and side["advice"] in text
    # whatif: the same, at the calls in flight as the reference arm serves them, simulated
    res = CliRunner().invoke(cli, ["whatif", str(TRACES / "mooncake_conversation_trace.jsonl"), "--rates", str(run),
                                   "--requests", "40", "--json"])
    assert res.exit_code == 0, res.output
    import json

    w = json.loads(res.output)
    wp = w["operating_point"]
    ref_arm = next(a for a in w["arms"] if a["arm"] == w["reference"])
    assert wp["in_flight"] == ref_arm["operating_point"]["in_flight"] and wp["sides"][0]["lever"] == "drafter"
    assert wp["sides"][0]["at"] == next(a for a in w["arms"] if a["arm"] == "plain")["operating_point"]["in_flight"][
        "p95"]


OPEN = '''
[[load]]
name = "open"
mode = "open"
rate = [4, 11]
arrival = "poisson"
seed = 3
requests = 24
slo_e2e_s = 0.3
'''


@pytest.mark.slow
def test_batching_is_a_lever_and_the_recommendation_names_it_for_queueing(tmp_path):
    """One slot against four (8 tokens at 100 steps/s: 80 ms a call) on an open loop at 4 and 11 requests/s: one
    slot queues (at 11/s it is busy 88 % of the time), four do not.  The pair differs in the slots alone, so it
    measures batching: its end-to-end p50 multiplier pays at the higher rate beyond doubt (its interval above 1),
    and the queue is real (the simulator's logged waits).  Then ``analyze`` of a log whose time is mostly queueing
    (TTFT 0.4–0.8 s on calls whose prefill takes milliseconds), with --rates from that run, names batching with
    that measured effect instead of "add capacity" — which it still says from a summary without the load levers."""
    with _quiet_disk(), sim_process(prefill_tps=1_000_000, decode_tps=100, output_tokens=8, slots=1,
                                    prefix_cache=False) as one, \
            sim_process(prefill_tps=1_000_000, decode_tps=100, output_tokens=8, slots=4, prefix_cache=False) as four:
        Runner(load(_experiment(tmp_path, {"one": (one, {}), "four": (four, {})}, OPEN, max_tokens=8)),
               tmp_path / "run").run()
        waits = {arm: statistics.fmean(t["queue_s"] for t in sim_truth.fetch(url) if t["prompt_tokens"] > 20)
                 for arm, url in (("one", one), ("four", four))}
    assert waits["one"] > 0.02 > waits["four"]
    s = summarize(read_ledger(tmp_path / "run"))
    (row,) = s["load_levers"]
    assert (row["lever"], row["arm"], row["vs"], row["x"]) == ("slots", "four", "one", "rate")
    e2e = next(m for m in row["metrics"] if m["metric"] == "e2e_p50")
    hi = e2e["levels"][-1]
    assert hi["load"] == 11.0 and hi["citable"] and hi["low"] > 1.0, hi
    assert "batching under load (four vs one, open)" in first_screen(s).lines(width=400)[2]
    log = tmp_path / "queue.csv"
    log.write_text("arrival_s,input_tokens,output_tokens,ttft_s,latency_s\n" + "".join(
        f"{i * 0.1:.3f},40,8,{0.4 + 0.01 * i:.3f},{0.48 + 0.01 * i:.3f}\n" for i in range(40)))
    result = analyze_file(log, rates_dir=tmp_path / "run")
    rec = result["recommendation"]
    assert result["overall"]["dominant"] == "queue"
    assert "Queueing is batching's to shorten, and the --rates run measured it under load: slots (four vs one, " \
           "'open') multiplies the end-to-end p50 by" in rec and f"{hi['value']:.2f}x at 11 requests/s" in rec
    assert "add capacity" not in rec and "At this traffic's arrival rate (10 requests/s)" in rec
    # the same run's summary without its levers under load: the old advice
    import json

    from leverbench.report.jsonio import finite

    bare = {**finite(s), "load_levers": []}
    (tmp_path / "bare.json").write_text(json.dumps(bare))
    rec = analyze_file(log, rates_dir=tmp_path / "bare.json")["recommendation"]
    assert "No lever here targets queueing: add capacity or batching first." in rec


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "vllm-load.toml"


@pytest.mark.slow
def test_the_vllm_load_example_is_valid_and_runs_on_simulator_arms(tmp_path):
    """``examples/vllm-load.toml`` (cache against cache + an n-gram drafter on vLLM, --max-num-seqs 4, a closed
    loop at 1, 2, 4, 8) loads as it is; then the same experiment, each arm's engine swapped for a simulator that
    speaks vLLM's dialect (4 sequences at once; the drafter arm 4 tokens a step alone and dear in a batch), runs
    whole, and the summary has the drafter's row at every level with vLLM's own spec-decode counters beside each
    level (drafter_acceptance = accepted / drafted tokens over the stage: 3 of 5 drafts, 0.6)."""
    import tomllib

    from fuzz_inputs import to_toml

    exp = load(EXAMPLE)
    assert [a.name for a in exp.spec.arms] == ["cache", "cache+ngram"]
    assert exp.spec.load[0].concurrency == [1, 2, 4, 8]
    assert CliRunner().invoke(cli, ["run", "--help"]).exit_code == 0
    doc = tomllib.loads(EXAMPLE.read_text())
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "findings.md").write_text((EXAMPLE.parent / "docs" / "findings.md").read_text())
    vllm = dict(dialect="vllm", prefill_tps=200_000, output_tokens=64, slots=4, prefix_cache=True)
    with _quiet_disk(), sim_process(**vllm, decode_tps=400, decode_batch_slowdown=0.05) as cache, \
            sim_process(**vllm, decode_tps=250, decode_batch_slowdown=0.6, draft_k=5, draft_acceptance=0.6) as ngram:
        for arm, url in zip(doc["arms"], (cache, ngram)):
            del arm["engine"]
            arm.update(base_url=url + "/v1", model="sim")
        doc["load"][0]["ramp_s"] = 0.1
        (tmp_path / "exp.toml").write_text(to_toml(doc))
        Runner(load(tmp_path / "exp.toml"), tmp_path / "run").run()
    s = summarize(read_ledger(tmp_path / "run"))
    (row,) = s["load_levers"]
    assert (row["lever"], row["arm"], row["vs"]) == ("drafter", "cache+ngram", "cache")
    assert [lv["load"] for lv in row["levels"]] == [1.0, 2.0, 4.0, 8.0]
    for lv in row["levels"]:
        assert lv["engagement"]["drafter_acceptance"]["arm"] == pytest.approx(0.6), lv
        assert lv["engagement"]["drafter_acceptance"]["vs"] is None
    assert {c["arm"] for c in s["capacity"]} == {"cache", "cache+ngram"}
