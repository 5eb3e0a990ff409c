"""The rate model against the simulator's context-dependent mode, whose coefficients are set (issue 15).

The simulator's prefill of n uncached tokens after k cached ones takes n / prefill_tps + c·n·(k + n/2), and
a decode step at a context of L tokens 1 / decode_tps + d1·L: the rate model's b, c, d0 and d1 exactly
(a = 0: the llama.cpp dialect's ``prompt_ms`` is the prefill alone).  A run with probes at three depths
and agent turns must recover them within 5 %.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from leverbench.analysis.rates.rate_model import prefill_seconds
from leverbench.cli import cli
from leverbench.engines.simulator import SimConfig, SimulatorThread, synthetic_text
from leverbench.ledger.reader import read_ledger

# slow enough that a loaded machine's late wake-ups (a few ms) are small beside what is measured
PREFILL_TPS = 5_000.0  # b = 200 µs per token
PREFILL_QUADRATIC = 2e-7  # c: at n = 1,600 uncached tokens the quadratic term is 0.26 s, about as much as b·n
DECODE_TPS = 200.0  # d0 = 5 ms per token
SLOWDOWN = 4e-6  # d1: at a context of 1,600 tokens a step takes 5 + 6.4 ms
DEPTHS = [256, 768, 1536]
pytestmark = pytest.mark.slow  # ~30 s (the fit's oracles: test_rate_model.py) on a busy 2-core machine: .ci/run runs it


def _experiment(tmp: Path, arms: dict[str, tuple[str, str]]) -> Path:
    (tmp / "doc.txt").write_text(synthetic_text(1600, "rate-model-doc"))
    arm_toml = "".join(f'''
[[arms]]
name = "{name}"
role = "{"baseline" if i == 0 else "treatment"}"
base_url = "{url}"
model = "sim"
conditions = {{ {conditions} }}
''' for i, (name, (url, conditions)) in enumerate(arms.items()))
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "rate-model"
repeats = 2
baseline = "{next(iter(arms))}"
sentinel_tokens = 0
{arm_toml}
[[cases]]
name = "read"
documents = ["doc.txt"]
prompt = "summarise"
max_tokens = 64
[[cases.steps]]
prompt = "more detail please"
max_tokens = 16
[[cases.steps]]
prompt = "one line"
max_tokens = 40

[probes]
output_tokens = [16, 64]
repeats = 2
depths = {DEPTHS}
''')
    return p


def _sim(**kw) -> SimulatorThread:
    return SimulatorThread(SimConfig(prefill_tps=PREFILL_TPS, prefill_quadratic=PREFILL_QUADRATIC,
                                     decode_tps=DECODE_TPS, decode_slowdown_per_ctx=SLOWDOWN, output_tokens=500,
                                     **kw))


@pytest.fixture(scope="module")
def context_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ratemodel")
    with _sim(prefix_cache=False) as a, _sim(prefix_cache=True) as b, _sim(draft_k=3, draft_acceptance=0.67) as c:
        exp = _experiment(tmp, {"nocache": (a.base_url, "prefix_cache = false"),
                                "cache": (b.base_url, "prefix_cache = true"),
                                "drafter": (c.base_url, 'prefix_cache = true, drafter = "sim"')})
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp / "run")], catch_exceptions=False)
        (tmp / "run" / "truth-nocache.json").write_text(json.dumps(a.truth()))  # what the simulator did
    assert res.exit_code == 0, res.output
    return tmp / "run"


def _model(run: Path, arm: str) -> dict:
    s = json.loads((run / "summary.json").read_text())
    return next(x for x in s["rate_models"] if x["arm"] == arm)


def _served_prefill(run: Path) -> tuple[float, float]:
    """b and c of prompt_s = a + b·n + c·n·(k + n/2) fitted (least squares) to what the simulator logged it did
    for each call (n uncached tokens after k cached; prompt_s its prefill and first step, as its timings say)."""
    truth = json.loads((run / "truth-nocache.json").read_text())
    n = np.array([t["prompt_tokens"] - t["cached_tokens"] for t in truth], dtype=float)
    k = np.array([t["cached_tokens"] for t in truth], dtype=float)
    y = np.array([t["prefill_s"] + t["first_step_s"] for t in truth], dtype=float)
    (_, b, c), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(n), n, n * (k + n / 2)]), y, rcond=None)
    return float(b), float(c)


def test_the_fitted_model_recovers_the_set_coefficients(context_run):
    """Without a cache every call computes its whole prompt (k = 0) at lengths from 256 to 1,600 tokens:
    b and c (the n²/2 curvature) are determined; decode contexts span 256 to 1,600 tokens: d0 and d1."""
    m = _model(context_run, "nocache")
    p, d = m["prefill"], m["decode"]
    assert p["source"] == d["source"] == "server timings"
    assert p["quadratic"] and d["context_fitted"]
    # the oracle is what the simulator did: its logged prefill and first step (llama.cpp's prompt_ms holds both,
    # and a loaded machine's late wake-ups in each: the served rate, not the set one), fitted to the same model
    # by least squares; the set rates only bound it loosely
    b, c = _served_prefill(context_run)
    assert p["b_s_per_token"] == pytest.approx(b, rel=0.05) and b == pytest.approx(1 / PREFILL_TPS, rel=0.25)
    assert p["c_s_per_token2"] == pytest.approx(c, rel=0.05) and c == pytest.approx(PREFILL_QUADRATIC, rel=0.25)
    # the llama.cpp dialect's prompt_ms is the prefill and the first token's step (5 ms here, into a), and on a
    # loaded machine what the prefill's sleep overslept, as the simulator recorded it (its prefill_s less the
    # work its rates set)
    late = [t["prefill_s"] - (n := t["prompt_tokens"] - t["cached_tokens"]) / PREFILL_TPS
            - PREFILL_QUADRATIC * n * (t["cached_tokens"] + n / 2)
            for t in json.loads((context_run / "truth-nocache.json").read_text())]
    assert p["a_s"] < 0.01 + max(0.0, statistics.fmean(late)), (p["a_s"], statistics.fmean(late))
    assert d["d0_s_per_token"] == pytest.approx(1 / DECODE_TPS, rel=0.05)
    assert d["d1_s_per_token_per_ctx"] == pytest.approx(SLOWDOWN, rel=0.05)
    assert d["range_context"][1] > DEPTHS[-1]  # the deepest probe is inside the fitted contexts


def test_a_cache_arm_recovers_decode_and_predicts_its_prefill(context_run):
    """With a cache, almost every call after the first finds its prompt cached (a few uncached tokens after
    k cached ones: ~1 ms, the size of a late wake-up), so b and c are not separately determined there; the
    model still predicts the calls that computed their prompt, and decode is recovered as without a cache."""
    m = _model(context_run, "cache")
    d = m["decode"]
    assert d["d0_s_per_token"] == pytest.approx(1 / DECODE_TPS, rel=0.05)
    assert d["d1_s_per_token_per_ctx"] == pytest.approx(SLOWDOWN, rel=0.05)
    n = m["prefill"]["range_uncached"][1]
    true = n / PREFILL_TPS + PREFILL_QUADRATIC * n * n / 2
    assert prefill_seconds(m, n, 0) == pytest.approx(true, rel=0.05)


def test_probes_reach_their_depths_and_agree_at_their_context(context_run):
    s = json.loads((context_run / "summary.json").read_text())
    rows = [p for p in s["probes"] if p["arm"] == "nocache"]
    assert [p["depth"] for p in rows] == DEPTHS
    for p in rows:
        # the prompt cut or padded to the depth (the sim's /tokenize counts words, its prompt also one per role)
        assert p["input_tokens"] == pytest.approx(p["depth"], abs=8)
        true_tps = 1.0 / (1 / DECODE_TPS + SLOWDOWN * p["context_tokens"])
        assert p["decode_tps"] == pytest.approx(true_tps, rel=0.05)
        assert p["server_decode_tps"] == pytest.approx(true_tps, rel=0.05)
        assert p["views"] == ["probe", "regression", "server"] and p["agrees"] is True, p
    # decode slows with depth: the deepest probe's rate is well below the shallowest's
    assert rows[-1]["decode_tps"] < 0.75 * rows[0]["decode_tps"]


def test_a_drafter_arm_probes_natural_answers(context_run):
    led = read_ledger(context_run)
    probes = [r for r in led.records if r["kind"] == "probe"]
    assert {r["length_method"].split(" ")[0] for r in probes if r["arm"] == "drafter"} == {"natural"}
    assert {r["length_method"] for r in probes if r["arm"] != "drafter"} == {"ignore_eos"}
    assert all("ignore_eos" not in r["request"] for r in probes if r["arm"] == "drafter")
    s = json.loads((context_run / "summary.json").read_text())
    m = next(x for x in s["rate_models"] if x["arm"] == "drafter")
    # acceptance over its natural answers (turns and probes): Σ accepted / Σ drafted; 1 + round(3 × 0.67) = 3
    # tokens a step, 2 of 3 drafts accepted, less on an answer's last, shorter step
    natural = [r["timings"] for r in led.records if r["kind"] in ("call", "probe") and r["arm"] == "drafter"]
    want = sum(t["draft_n_accepted"] for t in natural) / sum(t["draft_n"] for t in natural)
    assert m["decode"]["acceptance"] == pytest.approx(want) and 0.55 < want < 2 / 3
    # its natural probes are in the check (the simulator's drafter emits whole steps of 3 tokens, its first
    # chunk included, so its per-token time is not the smooth d0 + d1·L the model assumes: the model is no view)
    row = next(p for p in s["probes"] if p["arm"] == "drafter" and p["depth"] == DEPTHS[0])
    assert row["natural"] is True and row["forced_on_drafter"] is False
    # checked against the same calls' server timings (a drafter's speed depends on the text)
    assert row["views"] == ["probe", "server"] and row["agrees"] is True, row
    # the per-call regression on the client's stream is shown, over completion − 1 tokens as on a real engine
    # (whose first chunk is the prefill's one token); the simulator's first chunk holds a whole step (3 tokens),
    # which reads a short answer a few % fast, and its last, partial step a few % slow
    assert row["regression_source"] == "per-call fit, client stream"
    assert row["regression_decode_tps"] == pytest.approx(row["decode_tps"], rel=0.10)

