"""End-to-end runs against the simulator, each measurement checked against what the simulator logged it did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sim_truth
from click.testing import CliRunner

from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread, synthetic_text
from leverbench.ledger.reader import read_ledger
from leverbench.runner.run import Runner

PREFILL_TPS = 100_000.0
DECODE_TPS = 100.0  # slow enough that a loaded machine's few-ms stalls are small beside the decode spans measured
DOC_TOKENS = 12000


def experiment(tmp: Path, arms: dict[str, str], *, repeats: int = 3, probes: bool = True, extra_arm: str = "",
               order: str = "interleaved") -> Path:
    (tmp / "doc.txt").write_text(synthetic_text(DOC_TOKENS, "doc"))
    arm_toml = ""
    for i, (name, url) in enumerate(arms.items()):
        role = "baseline" if i == 0 else "treatment"
        cache = "false" if name == "nocache" else "true"
        arm_toml += f'''
[[arms]]
name = "{name}"
role = "{role}"
base_url = "{url}"
model = "sim"
conditions = {{ prefix_cache = {cache} }}
'''
    probe_toml = '[probes]\noutput_tokens = [16, 128]\nrepeats = 3\n' if probes else ""
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "sim-e2e"
repeats = {repeats}
order = "{order}"
baseline = "{next(iter(arms))}"
sentinel_tokens = 16
{arm_toml}{extra_arm}
[[cases]]
name = "read"
documents = ["doc.txt"]
prompt = "summarise"
max_tokens = 96
temperature = 0.0
[[cases.steps]]
prompt = "more detail please"
max_tokens = 48
[[cases.steps]]
prompt = "one line"
max_tokens = 24

[[cases]]
name = "short"
prompt = "hello there"
max_tokens = 32
{probe_toml}''')
    return p


def sim(**kw) -> SimulatorThread:
    return SimulatorThread(SimConfig(prefill_tps=PREFILL_TPS, decode_tps=DECODE_TPS, output_tokens=200, **kw))


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("simrun")
    with sim(prefix_cache=False) as a, sim(prefix_cache=True) as b:
        exp = experiment(tmp, {"nocache": a.base_url, "cache": b.base_url})
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp / "run")], catch_exceptions=False)
        truth = {"nocache": a.truth(), "cache": b.truth()}
    assert res.exit_code == 0, res.output
    return tmp / "run", res, truth


def served(run_dir: Path, truth: dict[str, list[dict]], kind: str, arm: str, **match) -> list[dict]:
    """The simulator's records of the run's *kind* calls of *arm* that match the fields *match*."""
    recs = [r for r in read_ledger(run_dir).records if r["kind"] == kind and r["arm"] == arm and r["error"] is None
            and all(r.get(k) == v for k, v in match.items())]
    return sim_truth.records_of(recs, truth[arm])


def test_regression_recovers_decode_rate(sim_run):
    run_dir, _, truth = sim_run
    s = json.loads((run_dir / "summary.json").read_text())
    d = next(x for x in s["decomposition"] if x["arm"] == "nocache" and x["case"] == "read")
    assert d["refused"] is None and d["points"] == 9
    # the decode speed the simulator delivered on those nine calls (its set rate, less what a loaded machine took)
    delivered = sim_truth.decode_tps(served(run_dir, truth, "call", "nocache", case="read"))
    assert delivered == pytest.approx(DECODE_TPS, rel=0.5)  # (a sanity bound: the rate that was set, roughly)
    assert d["decode_tps"] == pytest.approx(delivered, rel=0.04)
    assert d["r2"] > 0.98
    short = next(x for x in s["decomposition"] if x["case"] == "short")
    assert "barely vary" in short["refused"]  # same prompt, same length: no honest fit


def test_probes_recover_prefill_and_decode(sim_run):
    run_dir, _, truth = sim_run
    s = json.loads((run_dir / "summary.json").read_text())
    p = next(x for x in s["probes"] if x["arm"] == "nocache")
    # the same two-point measurement made on the simulator's records of the same probe calls: what it did, which a
    # loaded machine moves as it moves the client's clock (the set rates it does not move)
    true, true_cache = (sim_truth.probe(served(run_dir, truth, "probe", arm, probe_tokens=p["n1"]),
                                        served(run_dir, truth, "probe", arm, probe_tokens=p["n2"]))
                        for arm in ("nocache", "cache"))
    assert p["decode_tps"] == pytest.approx(true["decode_tps"], rel=0.04)
    # the probe's prefill is the time until the first token, the step that samples it included (what llama.cpp's
    # prompt_ms reports and the rate model fits): on the simulator, reading the 12k-token request, its prefill_s
    # and first_step_s; the client's clock adds only the loopback
    assert true["prefill_s"] == pytest.approx(p["input_tokens"] / PREFILL_TPS + 1 / DECODE_TPS, rel=0.5)  # (sanity)
    assert p["prefill_s"] == pytest.approx(true["prefill_s"], rel=0.10)
    # probes, regression and the server's timings all find the decode speed the simulator delivered, so they agree
    # within the 5 % tolerance; the agreement is the spread of the three views, fastest / slowest − 1
    for row in s["probes"]:
        delivered = sim_truth.decode_tps(served(run_dir, truth, "call", row["arm"])
                                         + served(run_dir, truth, "probe", row["arm"]))
        views = [row["decode_tps"], row["regression_decode_tps"], row["server_decode_tps"]]
        assert views == pytest.approx([delivered] * 3, rel=0.04), row["arm"]
        assert row["agreement"] == pytest.approx(max(views) / min(views) - 1)
        assert row["agreement"] <= 0.05 and row["agrees"] is True, row
    cache = next(x for x in s["probes"] if x["arm"] == "cache")
    # the simulator reuses the longest whole-block prefix seen before, leaving at least one token to compute
    block = SimConfig().cache_block
    assert cache["cached_tokens"] == (cache["input_tokens"] - 1) // block * block
    # the cache's speedup of the prefill as the simulator's records have it: ~7x quiet, less where a loaded machine
    # stretches what both arms pay alike (reading the 12k-token request, the first token's step); the client's few
    # ms weigh more beside the cached arm's short prefill
    assert cache["prefill_speedup_vs_baseline"] == pytest.approx(true["prefill_s"] / true_cache["prefill_s"], rel=0.25)
    assert true["prefill_s"] / true_cache["prefill_s"] > 2


def test_interleaved_order(sim_run):
    run_dir, _, _ = sim_run
    led = read_ledger(run_dir)
    seq = [(r["repeat"], r["case"], r["arm"]) for r in led.records if r["kind"] == "turn"]
    # a Williams design over (case, repeat): A B, B A, ... so that each arm goes first as often
    expected = [(r, c, a) for r in range(3) for i, c in enumerate(("read", "short"))
                for a in (("nocache", "cache") if (i + r) % 2 == 0 else ("cache", "nocache"))]
    assert seq == expected
    kinds = [(r["kind"], r.get("position"), r.get("repeat")) for r in led.records
             if r["kind"] in ("turn", "probe", "sentinel")]
    # a sentinel of each arm opens every round, and one of each closes the run
    for rep in range(3):
        first = min(i for i, k in enumerate(kinds) if k[0] == "turn" and k[2] == rep)
        assert kinds[first - 2:first] == [("sentinel", "start", rep)] * 2
    assert kinds[-2:] == [("sentinel", "end", 0)] * 2
    assert [k[0] for k in kinds].index("probe") > max(i for i, k in enumerate(kinds) if k[0] == "turn")


def test_report_reproduces_run_from_ledger_alone(sim_run):
    run_dir, run_res, _ = sim_run  # the simulators are stopped by now
    written = json.loads((run_dir / "summary.json").read_text())
    res = CliRunner().invoke(cli, ["report", str(run_dir), "--format", "json", "--no-write"], catch_exceptions=False)
    assert res.exit_code == 0
    assert json.loads(res.output) == written
    table = CliRunner().invoke(cli, ["report", str(run_dir)], catch_exceptions=False)
    # the first screen: the answer, one line per lever with the summary's own figures, then where the report is
    lines = table.output.splitlines()
    assert len(lines) <= 15 and "Turn time per case" not in table.output
    for lever in written["levers"]:
        line = next(ln for ln in lines if ln.strip().startswith(lever["lever"]))
        assert f"{lever['arm']} vs {lever['vs']}" in line and f"{lever['multiplier']:.2f}x" in line
        assert ("· citable" in line) == lever["citable"]
    assert lines[-1].startswith(f"report: {run_dir}/report.html") and f"leverbench report {run_dir} --full" in lines[-1]
    full = CliRunner().invoke(cli, ["report", str(run_dir), "--full"], catch_exceptions=False)
    # the same first screen, but for the warnings line's pointer to the full report (--full lists them below)
    head = table.output.split("report: ")[0].replace(" (the full report lists them)", "")
    assert full.output.startswith(head) and "Turn time per case" in full.output
    # the run printed the same first screen, after its progress, and under 60 lines in all
    assert table.output.split("report: ")[0] in run_res.output and len(run_res.output.splitlines()) < 60
    for c in written["cells"]:
        assert f"{c['median_s']:.1f} s" in full.output


def test_ledger_records_every_call_with_timeline(sim_run):
    run_dir, _, truth = sim_run
    led = read_ledger(run_dir)
    calls = [r for r in led.records if r["kind"] == "call"]
    assert len(calls) == 3 * 2 * (3 + 1)
    for c in calls:
        assert c["error"] is None and c["chunk_t"] and c["chunk_t"] == sorted(c["chunk_t"])
        assert c["prompt_tokens"] and c["completion_tokens"] and c["timings"]
        assert "output_text" not in c and c["output_sha256"]  # store_text is off
    read = [c for c in calls if c["case"] == "read" and c["arm"] == "nocache"]
    assert sorted({c["completion_tokens"] for c in read}) == [24, 48, 96]
    assert led.header["arms"]["nocache"]["discovered"]["props"]["sim"]["decode_tps"] == DECODE_TPS


def test_failed_calls_are_recorded_and_counted(tmp_path):
    with sim() as a, SimulatorThread(SimConfig(decode_tps=DECODE_TPS, fault_http_500=1.0)) as bad:
        exp = experiment(tmp_path, {"nocache": a.base_url, "broken": bad.base_url}, repeats=2, probes=False)
        ledger = Runner(load(exp), tmp_path / "run").run()
    s = summarize(read_ledger(ledger))
    failed = [r for r in read_ledger(ledger).records if r["kind"] == "call" and r["error"]]
    assert failed and all(r["error"]["class"] == "http_status" and "simulated internal error" in r["error"]["message"]
                          for r in failed)
    cell = next(c for c in s["cells"] if c["arm"] == "broken" and c["case"] == "read")
    assert cell["n"] == 0 and cell["failed_turns"] == 2 and cell["failed_calls"] == 2
    assert all(not m["citable"] for m in s["multipliers"])
    # the broken arm: 2 repeats × (read: its first call fails, so the turn stops; short: 1 call) + its 3 sentinels
    # (one opening each of the 2 rounds, one at the end)
    assert s["run"]["failed_calls"] == 2 * 2 + 3
    assert sum(1 for r in read_ledger(ledger).records if r["kind"] == "sentinel" and r["error"]) == 3


def test_unreachable_endpoint_is_recorded_not_fatal(tmp_path):
    with sim() as a:
        exp = experiment(tmp_path, {"nocache": a.base_url, "gone": "http://127.0.0.1:9"}, repeats=1, probes=False)
        ledger = Runner(load(exp), tmp_path / "run").run()
    recs = [r for r in read_ledger(ledger).records if r["kind"] == "call" and r["arm"] == "gone"]
    assert len(recs) == 2 and all(r["error"]["class"] == "connect" for r in recs)  # read's first call, short's call
