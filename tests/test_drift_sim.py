"""Issue 22's drift, end to end against simulators that drift: a speed that changes over wall time (alike for
simulators that share a start time), per-request jitter, a cold start.  The truth is what the simulators
logged they did: each request's speed factor, so each turn's time at the run's first speed is known."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.engines.simulator import SimConfig, SimulatorThread, synthetic_text
from leverbench.ledger.reader import read_ledger

DOC_TOKENS = 1500
COMMON = dict(prefill_tps=3000.0, decode_tps=100.0, output_tokens=30, cache_block=16)
DRIFT = 0.08  # per second: the runs take several seconds
pytestmark = pytest.mark.slow  # ~45 s on a busy 2-core machine: .ci/run runs it


def _experiment(tmp: Path, urls: dict[str, str], order: str, extra: str = "", repeats: int = 4) -> Path:
    (tmp / "doc.txt").write_text(synthetic_text(DOC_TOKENS, "drift"))
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "drift"
repeats = {repeats}
order = "{order}"
baseline = "nocache"
sentinel_tokens = 16
cache_between_turns = "keep"  # one call a turn: the cache engages on the repeats' revisits, as these tests want
[[arms]]
name = "nocache"
role = "baseline"
base_url = "{urls['nocache']}/v1"
model = "sim"
conditions = {{ prefix_cache = false }}
[[arms]]
name = "cache"
base_url = "{urls['cache']}/v1"
model = "sim"
conditions = {{ prefix_cache = true }}
{extra}
[[cases]]
name = "read"
documents = ["doc.txt"]
prompt = "summarise"
max_tokens = 64
''')
    return p


def _run(tmp: Path, order: str, drift: dict[str, float], **sim) -> tuple[dict, dict[str, list[dict]], Path]:
    t0 = time.time()
    cfgs = {arm: SimConfig(prefix_cache=arm == "cache", drift_per_s=drift.get(arm, 0.0), drift_t0=t0,
                           **{**COMMON, **sim}) for arm in ("nocache", "cache")}
    with SimulatorThread(cfgs["nocache"]) as a, SimulatorThread(cfgs["cache"]) as b:
        exp = _experiment(tmp, {"nocache": a.base_url, "cache": b.base_url}, order)
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp / "run")], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        truth = {"nocache": a.truth(), "cache": b.truth()}
    return summarize(read_ledger(tmp / "run")), truth, tmp / "run"


def _undrifted_median(run: Path, truth: list[dict], arm: str) -> float:
    """The median of the arm's turns each at the speed factor 1: its measured time less what its drift added
    (the simulator's service time × (1 − 1 / its speed factor)); one call per turn, matched in order."""
    calls = [t for t in truth if t["prompt_tokens"] > DOC_TOKENS / 2]  # the turns' calls (not sentinels)
    turns = [r for r in read_ledger(run).records if r["kind"] == "turn" and r["arm"] == arm]
    assert len(calls) == len(turns)
    service = [t["overhead_s"] + t["prefill_s"] + t["decode_s"] for t in calls]
    return statistics.median(r["turn_s"] - s * (1 - 1 / t["speed_factor"]) for r, t, s in zip(turns, calls, service))


def _total(s):
    return next(m for m in s["multipliers"] if m["arm"] == "cache" and m["vs"] == "nocache" and m["scope"] == "total")


def _factors(truth: list[dict]) -> list[float]:
    return [t["speed_factor"] for t in truth if t["prompt_tokens"] > DOC_TOKENS / 2]


def test_common_drift_over_an_interleaved_run_leaves_the_multiplier_citable_and_true(tmp_path):
    s, truth, run = _run(tmp_path, "interleaved", {"nocache": DRIFT, "cache": DRIFT})
    f = _factors(truth["nocache"]) + _factors(truth["cache"])
    assert max(f) / min(f) - 1 >= 0.30  # the machine slowed by at least 30 % during the run
    m = _total(s)
    assert m["citable"], m["reason"]
    want = _undrifted_median(run, truth["nocache"], "nocache") / _undrifted_median(run, truth["cache"], "cache")
    assert m["value"] == pytest.approx(want, rel=0.05)
    assert s["drift_common"]["adjusted"] and "alike for every arm" in s["drift_common"]["text"]
    assert not any(p["refuses"] for p in s["drift_pairs"])


def test_the_same_drift_on_one_arm_refuses_its_comparison(tmp_path):
    s, truth, _ = _run(tmp_path, "interleaved", {"cache": DRIFT})
    assert max(_factors(truth["cache"])) >= 1.3 and max(_factors(truth["nocache"])) == 1.0
    m = _total(s)
    assert not m["citable"] and "drift" in m["reason_codes"] and "drifted differently" in m["reason"]


def test_blocked_order_with_common_drift_is_refused(tmp_path):
    s, _, _ = _run(tmp_path, "blocked", {"nocache": DRIFT, "cache": DRIFT})
    m = _total(s)
    assert not m["citable"] and "drift" in m["reason_codes"] and "blocked order" in m["reason"]


def test_jitter_without_drift_refuses_nothing_and_a_cold_engine_is_warmed(tmp_path):
    """Every request 10 % slower or faster at random (lognormal), and the first 3 requests of each engine slow
    (4×, 3×, 2×): the warm-up runs until two sentinels agree, and no drift is read into the noise."""
    s, truth, _ = _run(tmp_path, "interleaved", {}, speed_jitter=0.10, cold_requests=3, cold_factor=4.0)
    assert not any(p["refuses"] for p in s["drift_pairs"]), s["drift_pairs"]
    m = _total(s)
    assert "drift" not in m["reason_codes"]
    for d in s["drift"]:
        assert d["warmup"]["calls"] >= 4 and d["warmup"]["settled"], d["warmup"]  # past the cold ones, two that agree
