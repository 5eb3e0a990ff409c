"""Cost arithmetic (the article's own figures) and the scenario projection against a hand computation."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from ledgers import call, header, ledger, turn, write

from leverbench.analysis.experiment.cost import costs, turn_cost
from leverbench.analysis.summary import summarize
from leverbench.cli import cli


def test_cost_reproduces_the_articles_figures():
    # four turns: 173.8 s (current) and 67.2 s (cache + drafter) in total, B200 at $5.50 per hour
    cur, fast = turn_cost(173.8 / 4, 5.50), turn_cost(67.2 / 4, 5.50)
    assert round(cur["usd_per_turn"], 4) == 0.0664 and round(fast["usd_per_turn"], 4) == 0.0257
    assert round(cur["gpu_hours_per_1000_turns"], 2) == 12.07 and round(fast["gpu_hours_per_1000_turns"], 2) == 4.67
    assert round(cur["usd_per_1000_turns"], 2) == 66.38 and round(fast["usd_per_1000_turns"], 2) == 25.67
    rows = costs([{"arm": "current", "total_s": 173.8, "cases": 4}, {"arm": "fast", "total_s": 67.2, "cases": 4}],
                 {"current": {"gpu_hour_usd": 5.5, "gpus": 1}, "fast": {"gpu_hour_usd": 5.5, "gpus": 1}}, "current")
    assert round(rows[1]["gpu_hours_returned_per_1000_turns"], 1) == 7.4  # "7.4 GPU-hours per 1,000 turns"
    assert turn_cost(36.0, 2.0, gpus=4)["usd_per_turn"] == pytest.approx(36.0 * 2.0 * 4 / 3600)


def _timed_call(arm, case, r, *, prompt, out, prefill_tps, decode_tps, overhead=0.05, kind="call", cached=0,
                step=0, **kw):
    """A call as llama.cpp times it: its first token one step after prefill, ``predicted_ms`` from the first
    token to the last (out − 1 steps)."""
    uncached = prompt - cached
    prefill = uncached / prefill_tps
    decode = out / decode_tps
    return call(arm, case, r, kind=kind, step=step, prompt=prompt, out=out, cached=cached,
                ttft=overhead + prefill + 1 / decode_tps, latency=overhead + prefill + decode,
                timings={"prompt_n": uncached, "prompt_ms": prefill * 1000, "predicted_n": out,
                         "predicted_ms": (out - 1) / decode_tps * 1000, "cache_n": cached}, **kw)


def _ledger():
    arms = {"base": {"prefix_cache": False}, "cached": {"prefix_cache": True}}
    recs = []
    for r in range(3):
        for case, prompt in (("short", 1000), ("long", 3000)):
            for arm in arms:
                cached = prompt - 10 if arm == "cached" and r > 0 else 0
                calls = [_timed_call(arm, case, r, prompt=prompt, out=100 + 50 * r, prefill_tps=1000.0,
                                     decode_tps=50.0, cached=cached)]
                recs += turn(arm, case, r, calls[0]["latency_s"], calls[0]["completion_tokens"], calls=calls)
    for r in range(2):
        for n in (32, 256):
            for arm in arms:
                cached = 2990 if arm == "cached" else 0
                recs.append(_timed_call(arm, "long", r, kind="probe", prompt=3000, out=n, prefill_tps=1000.0,
                                        decode_tps=50.0, cached=cached, probe_tokens=n))
    head = header(arms, ["short", "long"])
    head["config"]["probes"] = {"output_tokens": [32, 256], "repeats": 2, "case": "long", "tolerance": 0.05}
    return head, recs


def test_projection_matches_hand_computation():
    head, recs = _ledger()
    s = summarize(ledger(head, recs), scenario=(83_000, 5_000))
    p = {a["arm"]: a for a in s["projection"]["arms"]}
    # base: server timings give prefill = uncached / 1000 tok/s exactly; decode from the probes = 50 tok/s
    assert p["base"]["prefill_s"] == pytest.approx(83.0, rel=1e-6)
    assert p["base"]["decode_s"] == pytest.approx(100.0, rel=1e-6)
    assert p["base"]["total_s"] == pytest.approx(183.0, rel=1e-6)
    assert p["base"]["prefill_share"] == pytest.approx(83 / 183)
    assert "extrapolated" in p["base"]["extrapolation"]
    # cached: its probes found 2990 of 3000 prompt tokens cached → 83,000 × (1 − 0.99667) uncached tokens
    hit = 2990 / 3000
    assert p["cached"]["prefill_s"] == pytest.approx(83_000 * (1 - hit) / 1000.0, rel=1e-6)
    lever = s["projection"]["levers"][0]
    assert lever["lever"] == "prefix_cache" and lever["without"] == "base" and lever["with"] == "cached"
    assert lever["saved_s"] == pytest.approx(83.0 - 83_000 * (1 - hit) / 1000.0, rel=1e-6)
    assert lever["phase"] == "prefill" and lever["credited"] is True
    assert "decode is 55%" in s["projection"]["recommendation"]
    # the probes' two-point solution, the regression and the server's timings agree on this exactly linear ledger
    pr = next(x for x in s["probes"] if x["arm"] == "base")
    # (the probe's prefill: t1 less the c1 − 1 tokens decoded after the first = its TTFT, 0.05 + 3.0 + 1 / 50)
    assert pr["decode_tps"] == pytest.approx(50.0) and pr["prefill_s"] == pytest.approx(0.05 + 3.0 + 0.02)
    assert pr["server_decode_tps"] == pytest.approx(50.0) and pr["regression_decode_tps"] == pytest.approx(50.0)
    assert pr["agrees"] is True


def test_project_command(tmp_path):
    head, recs = _ledger()
    write(tmp_path / "run", head, recs)
    res = CliRunner().invoke(cli, ["project", str(tmp_path / "run"), "--input-tokens", "83000", "--output-tokens",
                                   "5000", "--gpu-hour-usd", "5.5", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    base = next(c for c in out["cost"] if c["arm"] == "base")
    assert base["usd_per_turn"] == pytest.approx(183.0 * 5.5 / 3600, rel=1e-6)
    table = CliRunner().invoke(cli, ["project", str(tmp_path / "run"), "--input-tokens", "83000",
                                     "--output-tokens", "5000"])
    assert "Scenario: 83,000 input tokens, 5,000 output tokens" in table.output and "prefix_cache" in table.output
