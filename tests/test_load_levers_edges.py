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
