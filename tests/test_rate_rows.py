"""The summary's rate sections fit their schema (:mod:`leverbench.schema.rate_rows`, issue 24 part 3): the
golden summaries' and a simulated run's with load stages (a sweep: load rows, curves and a batch slowdown)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leverbench.schema.check import summary_problems

GOLDEN = Path(__file__).parent / "golden"
RATE_SECTIONS = ("decomposition", "probes", "server", "time_shares", "projection", "rates", "rate_models", "load",
                 "load_curves", "server_metrics")


def _rate_problems(summary: dict) -> list[str]:
    return [str(p) for p in summary_problems(summary) if p.where.split(".", 1)[0].split("[")[0] in RATE_SECTIONS]


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.summary.json")))
def test_golden_rate_sections_fit(name: str) -> None:
    summary = json.loads((GOLDEN / name).read_text())
    assert _rate_problems(summary) == []


def _experiment(tmp: Path, url: str) -> Path:
    """Two arms on one simulator (the cache arm's prefix cache on), probes, a closed sweep with an SLO and an
    open stage: every rate section has rows."""
    p = tmp / "exp.toml"
    arms = "".join(f'''
[[arms]]
name = "{name}"
role = "{role}"
base_url = "{url}"
model = "sim"
conditions = {{ prefix_cache = {cache} }}
''' for name, role, cache in (("base", "baseline", "false"), ("cache", "treatment", "true")))
    p.write_text(f'''
[experiment]
name = "rate-rows"
repeats = 2
baseline = "base"
sentinel_tokens = 0
{arms}
[probes]
output_tokens = [8, 32]
repeats = 2

[[cases]]
name = "short"
prompt = "{'tell me about the weather today ' * 20}"
max_tokens = 24
[[cases.steps]]
prompt = "and more"
max_tokens = 12

[[load]]
name = "ramp"
mode = "closed"
concurrency = [1, 2, 4]
requests = 6
warmup_requests = 1
slo_ttft_s = 1.0
max_tokens = 8

[[load]]
name = "open"
mode = "open"
rate = 20
requests = 6
max_tokens = 8
''')
    return p


@pytest.mark.slow
def test_a_simulated_run_with_load_stages_fits(tmp_path: Path) -> None:
    from leverbench.analysis.summary import summarize
    from leverbench.config import load
    from leverbench.engines.simulator import SimConfig, SimulatorThread
    from leverbench.ledger.reader import read_ledger
    from leverbench.runner.run import Runner

    cfg = SimConfig(prefill_tps=200_000, decode_tps=2_000, slots=2, prefix_cache=True, cache_block=16)
    with SimulatorThread(cfg) as sim:
        Runner(load(_experiment(tmp_path, sim.base_url)), tmp_path / "run").run()
    summary = summarize(read_ledger(tmp_path / "run"))
    assert summary_problems(summary) == []
    assert len(summary["load"]) == 2 * 4 and summary["load_curves"] and summary["probes"]
    assert any(m["batch"] for m in summary["rate_models"])
    assert summary["projection"] is not None and summary["server_metrics"]


def test_the_schema_is_strict_and_bounded() -> None:
    """An unknown key, a missing one, a string for a number and a rate, a coefficient or a span out of the
    summary reader's bounds are each a problem, named where it is."""
    summary = json.loads((GOLDEN / "demo1.summary.json").read_text())
    summary["probes"][0]["bogus"] = 1
    del summary["server"][0]["turns"]
    summary["time_shares"][0]["turn_s"] = "5.9"
    summary["rates"][0]["decode_tps"] = 0.0001  # below TPS_RANGE[0] and not 0 (not measured)
    summary["rate_models"][0]["prefill"]["b_s_per_token"] = -1e-3
    summary["rate_models"][0]["decode"]["range_context"] = [515]
    problems = _rate_problems(summary)
    assert [p.split(":")[0] for p in problems] == [
        "probes[0].bogus", "server[0].turns", "time_shares[0].turn_s", "rates[0].decode_tps",
        "rate_models[0].prefill.b_s_per_token", "rate_models[0].decode.range_context"], problems
