"""Issue 11, end to end against the simulator: knobs discovered from the endpoints (not declared) decide which
comparison is controlled, and vLLM's default flags (no cached tokens in usage) still credit the prefix cache."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from ledgers import warned

from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.engines.simulator import SimConfig, SimulatorThread, synthetic_text
from leverbench.ledger.reader import read_ledger
from leverbench.schema.warning_kinds import WarningKind as W

PREFILL_TPS = 4000.0
DECODE_TPS = 400.0
DOC_TOKENS = 1500


def _experiment(tmp, urls: dict[str, str]) -> str:
    (tmp / "doc.txt").write_text(synthetic_text(DOC_TOKENS, "verdicts"))
    roles = {"base": "baseline", "control": "control", "treatment": "treatment"}
    arms = "".join(f'''
[[arms]]
name = "{a}"
role = "{roles[a]}"
base_url = "{url}/v1"
model = "sim"
''' for a, url in urls.items())  # no conditions declared: every knob is discovered
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "verdicts"
repeats = 3
baseline = "base"
sentinel_tokens = 16
{arms}
[[cases]]
name = "read"
documents = ["doc.txt"]
prompt = "summarise"
max_tokens = 64
[[cases.steps]]
prompt = "more"
max_tokens = 96

[probes]
output_tokens = [16, 128]
repeats = 2
''')
    return str(p)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verdicts")
    common = dict(dialect="vllm", prefill_tps=PREFILL_TPS, decode_tps=DECODE_TPS, output_tokens=200, cache_block=16)
    with SimulatorThread(SimConfig(engine_version="1", prefix_cache=False, **common)) as base, \
            SimulatorThread(SimConfig(engine_version="2", prefix_cache=True, **common)) as control, \
            SimulatorThread(SimConfig(engine_version="2", prefix_cache=True, draft_k=4, draft_acceptance=0.75,
                                      **common)) as treatment:
        exp = _experiment(tmp, {"base": base.base_url, "control": control.base_url, "treatment": treatment.base_url})
        res = CliRunner().invoke(cli, ["run", exp, "--out", str(tmp / "run")], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        truth = {"base": base.truth(), "control": control.truth()}
    return summarize(read_ledger(tmp / "run")), truth


def _total(s, arm, vs):
    return next(m for m in s["multipliers"] if m["arm"] == arm and m["vs"] == vs and m["scope"] == "total")


@pytest.mark.slow
def test_discovered_knobs_decide_the_controlled_pair(run):
    s, _ = run
    knobs = {a["name"]: a["knobs"] for a in s["arms"]}
    assert knobs["base"]["engine"] == "vllm" and knobs["base"]["engine_version"] == "1"
    assert (knobs["control"]["engine_version"], knobs["control"]["prefix_cache"]) == ("2", True)
    assert knobs["treatment"]["drafter"] is True and all(a["conditions"] == {} for a in s["arms"])
    drafter = _total(s, "treatment", "control")
    assert drafter["controlled"] is True and drafter["knobs"] == ["drafter"]
    # 4 tokens per decode step instead of 1: the turn's decode is ~4x faster, prefill the same (each turn cold:
    # its first call prefills the document on both arms, 0.38 s, beside 0.4 s of decode against 0.1 s): ~1.6x
    assert 1.3 < drafter["value"] < 2.5
    cache = _total(s, "control", "base")
    assert cache["controlled"] is False and cache["knobs"] == ["engine_version", "prefix_cache"]
    levers = {l["lever"]: l for l in s["levers"]}
    assert (levers["drafter"]["arm"], levers["drafter"]["vs"]) == ("treatment", "control")
    assert levers["prefix_cache"]["arm"] is None and "engine_version = '1'" in levers["prefix_cache"]["reason"]
    assert levers["engine_version"]["arm"] is None  # version and cache changed together: nothing measures either


@pytest.mark.slow
def test_vllm_default_flags_cache_is_engaged_from_its_counters(run):
    s, truth = run
    eng = {e["arm"]: e for e in s["engaged"]}
    # usage carries no cached_tokens on vLLM's default flags: the share comes from its counters
    assert eng["control"]["prefix_cache"] is True
    assert eng["control"]["cached_share_source"].startswith("server metrics")
    served = [t for t in truth["control"]]
    want = sum(t["cached_tokens"] for t in served) / sum(t["prompt_tokens"] for t in served)
    assert eng["control"]["cached_share"] == pytest.approx(want, abs=0.02)
    assert eng["treatment"]["drafter"] is True and eng["treatment"]["acceptance"] == pytest.approx(0.75, abs=0.01)
    rates = {r["arm"]: r for r in s["rates"]}
    # a sane prefill rate: the simulator's own, not prompt tokens / cached TTFT (tens of thousands of tok/s); its
    # own as it delivered it, which a loaded machine slows (its records' prefill times, late wake-ups included):
    # the cache arm's from its counters (every request's uncached tokens and prefill seconds), the other's from
    # the client's time to first token of its long prompts (the server's from arrival, reading the request too)
    delivered = {"control": sum(t["prompt_tokens"] - t["cached_tokens"] for t in truth["control"])
                 / sum(t["prefill_s"] for t in truth["control"])}
    long = [t for t in truth["base"] if t["prompt_tokens"] > DOC_TOKENS]
    delivered["base"] = sum(t["prompt_tokens"] for t in long) / sum(t["first_token"] - t["arrival"] for t in long)
    for arm in ("control", "base"):
        assert delivered[arm] == pytest.approx(PREFILL_TPS, rel=0.5), arm  # (sanity: the set rate, roughly)
        assert rates[arm]["prefill_tps"] == pytest.approx(delivered[arm], rel=0.15), (arm, delivered)
    assert not warned(s, W.NOT_ENGAGED)
    lever = next(l for l in s["projection"]["levers"] if l["lever"] == "drafter")
    assert lever["credited"] is True and lever["phase"] == "decode"


def test_a_load_stages_cached_share_on_vllm_defaults_comes_from_its_counters(tmp_path):
    """vLLM's default flags put no cached tokens in usage: the stage's share is the server's own counters',
    never 0 for "not reported"."""
    from one_arm import one_arm_experiment

    from leverbench.analysis.load.stages import load_summary
    from leverbench.config import load
    from leverbench.runner.run import Runner

    stage = ('[[load]]\nname = "half"\nmode = "closed"\nconcurrency = 2\nrequests = 12\nprefix_sharing = 0.5\n'
             'warmup_requests = 2\n')
    cfg = SimConfig(dialect="vllm", prefill_tps=200_000.0, decode_tps=2000.0, output_tokens=4, cache_block=4)
    with SimulatorThread(cfg) as s:
        exp = one_arm_experiment(tmp_path, s.base_url + "/v1", tail=stage)
        long_prompt = synthetic_text(400, "share")  # 400 words: each request's 4 unique ones replace a few
        exp.write_text(exp.read_text().replace('prompt = "hi"', f'prompt = "{long_prompt}"'))
        Runner(load(exp), tmp_path / "run").run()
        truth = s.truth()
    row = next(r for r in load_summary(read_ledger(tmp_path / "run")) if r["stage"] == "half")
    assert row["cached_share_source"] == "server counters over the stage" and row["cached_tokens"] is None
    stage_truth = truth[-14:]  # the stage's 2 warm-up and 12 measured requests (its counters cover all 14)
    want = sum(t["cached_tokens"] for t in stage_truth) / sum(t["prompt_tokens"] for t in stage_truth)
    assert row["cached_share"] == pytest.approx(want, abs=1e-9) and row["cached_share"] == pytest.approx(0.5, abs=0.05)


TOKENIZER_DELAY_S = 0.02  # each /tokenize answer waits this long, so the harness's round trips are plainly visible


def test_counting_tokens_for_a_server_without_usage_stays_out_of_the_turn(tmp_path, monkeypatch):
    import asyncio

    from one_arm import one_arm_experiment

    from leverbench.config import load
    from leverbench.engines.simulator import server
    from leverbench.runner.run import Runner

    async def slow_tokenize(request):
        await asyncio.sleep(TOKENIZER_DELAY_S)
        return await server.handle_tokenize(request)

    for dialect, routes in server._ENGINE_ROUTES.items():
        monkeypatch.setitem(server._ENGINE_ROUTES, dialect,
                            [(m, path, slow_tokenize if path == "/tokenize" else h) for m, path, h in routes])
    with SimulatorThread(SimConfig(prefill_tps=200_000.0, decode_tps=400.0, output_tokens=8, fault_no_usage=1.0)) as s:
        exp = one_arm_experiment(tmp_path, s.base_url + "/v1",
                                 tail='[[cases.steps]]\nprompt = "more"\nmax_tokens = 8\n')
        Runner(load(exp), tmp_path / "run").run()
    recs = read_ledger(tmp_path / "run").records
    calls = [r for r in recs if r["kind"] == "call"]
    (turn,) = [r for r in recs if r["kind"] == "turn"]
    assert all(c["usage_missing"] and c["harness_s"] > 0 and c["error"] is None for c in calls)
    wall = sum((c["connect_s"] or 0) + c["latency_s"] for c in calls)
    # the turn is its calls' time (plus microseconds between them), not their tokenizer round trips too
    assert turn["turn_s"] == pytest.approx(wall, abs=0.005)
    assert all(c["harness_s"] >= TOKENIZER_DELAY_S for c in calls)
    assert turn["turn_s"] < wall + sum(c["harness_s"] for c in calls) - TOKENIZER_DELAY_S
