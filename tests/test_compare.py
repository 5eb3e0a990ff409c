"""``leverbench compare`` (issue 41) against the simulator, whose own records are the truth: a slower decode is
reported slower with its ratio near the truth and exit code 1; no change under 10 % jitter is "same" in at least 95
of 100 seeded trials; a machine 20 % slower between the runs is corrected by the drift sentinels; a case whose prompt
was edited is not compared.  Every truth is read off what the simulator logged it did (``tests/sim_truth.py``),
never off its configured rates."""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner
from ledgers import header, ledger, timed, turn
from sim_truth import decode_tps, records_of

from leverbench.analysis.compare import compare_runs, run_view
from leverbench.cli import cli
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import read_ledger
from leverbench.runner.run import Runner

REPEATS = 5
# turns and sentinels long beside what a loaded machine adds to a call (a few ms): 128 ms and 94 ms of decode
SIM = dict(prefill_tps=20000.0, decode_tps=500.0, output_tokens=64)
SENTINEL = 48
CASES = {"read": "summarise the server log for me", "plan": "plan the next step of the refactoring"}


def _experiment(tmp: Path, url: str, cases: dict[str, str], repeats: int) -> Path:
    p = tmp / "exp.toml"
    body = "".join(f'\n[[cases]]\nname = "{n}"\nprompt = "{t}"\nmax_tokens = 64\ntemperature = 0.0\n'
                   for n, t in cases.items())
    p.write_text(f'''
[experiment]
name = "compare"
repeats = {repeats}
baseline = "a"
sentinel_tokens = {SENTINEL}
[[arms]]
name = "a"
role = "baseline"
base_url = "{url}/v1"
model = "sim"
{body}''')
    return p


def _run(tmp: Path, name: str, cases: dict[str, str] = CASES, repeats: int = REPEATS, **sim) -> tuple[Path, list]:
    """A run of the experiment on a fresh simulator; its directory and the simulator's records."""
    (tmp / name).mkdir()
    with SimulatorThread(SimConfig(**{**SIM, **sim})) as s:
        Runner(load(_experiment(tmp / name, s.base_url, cases, repeats)), tmp / name / "run").run()
        truth = s.truth()
    return tmp / name / "run", truth


def _truth_turns(run: Path, truth: list) -> dict[str, list[float]]:
    """Per case, the time the simulator had each turn's request (one call a turn): from its arrival to its end."""
    calls = [r for r in read_ledger(run).records if r["kind"] == "call"]
    out: dict[str, list[float]] = {}
    for c, t in zip(calls, records_of(calls, truth)):
        out.setdefault(c["case"], []).append(t["end"] - t["arrival"])
    return out


def _gm(x: list[float]) -> float:
    return math.exp(statistics.fmean(map(math.log, x)))


def _truth_ratio(base: tuple[Path, list], later: tuple[Path, list], cases: dict[str, str] | None = None) -> float:
    """The geometric mean over the cases of the ratio of the simulator's own turn times, later / baseline."""
    tb, tl = _truth_turns(*base), _truth_turns(*later)
    pairs = cases or {c: c for c in tb}
    return _gm([_gm(tl[lc]) / _gm(tb[bc]) for bc, lc in pairs.items()])


def _sentinel_tps(run: Path, truth: list) -> float:
    sentinels = [r for r in read_ledger(run).records if r["kind"] == "sentinel"]
    return decode_tps(records_of(sentinels, truth))


def _compare(*runs: Path, args: tuple[str, ...] = ()) -> tuple[int, str, dict]:
    res = CliRunner().invoke(cli, ["compare", *map(str, runs), *args])
    as_json = CliRunner().invoke(cli, ["compare", *map(str, runs), *args, "--format", "json"])
    assert res.exit_code == as_json.exit_code, (res.output, as_json.output)
    return res.exit_code, res.output, json.loads(as_json.stdout)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> tuple[Path, list]:
    return _run(tmp_path_factory.mktemp("compare"), "base")


def test_a_decode_8_percent_slower_is_reported_slower_near_the_truth_with_exit_code_1(baseline, tmp_path):
    later = _run(tmp_path, "later", decode_tps=SIM["decode_tps"] / 1.08, engine_version="sim-2")
    code, out, result = _compare(baseline[0], later[0])
    assert code == 1, out
    (c,) = result["comparisons"]
    # what changed comes before any number, and names the engine's version
    assert out.index("What changed") < out.index("x [")
    assert any(r["what"] == "engine_version" and r["later"] == "sim-2" for r in c["changed"])
    assert not c["machine"]["corrected"]  # the arm changed: its sentinels measure the change itself
    (arm,) = c["arm_ratios"]
    truth = _truth_ratio(baseline, later)
    assert truth == pytest.approx(1.08, abs=0.03)
    assert arm["ratio"] == pytest.approx(truth, rel=0.02)
    assert arm["verdict"] == "slower" and arm["low"] > 1.0
    assert "SLOWER" in out and c["slower"]


def test_c_a_machine_20_percent_slower_between_the_runs_is_corrected_by_the_sentinels(baseline, tmp_path):
    later = _run(tmp_path, "slow-machine", prefill_tps=SIM["prefill_tps"] * 0.8, decode_tps=SIM["decode_tps"] * 0.8)
    code, out, result = _compare(baseline[0], later[0], args=("--correct-machine",))
    (c,) = result["comparisons"]
    assert c["changed"] == [] and c["machine"]["corrected"] and c["machine"]["gated"], c["machine"]
    assert "Corrected for the machine (sentinels: decode -" in out and "the exit code follows it" in out
    # the truth: the simulator's own turn times, each run on its own machine speed as the sentinels' records give it
    machine = _sentinel_tps(*later) / _sentinel_tps(*baseline)
    raw = _truth_ratio(baseline, later)
    assert raw > 1.2  # uncorrected, the later run is 25 % slower
    (arm,) = c["arm_ratios"]
    assert arm["corrected_ratio"] == pytest.approx(raw * machine, rel=0.03)
    assert arm["corrected_verdict"] == "same" and code == 0, out
    # without --correct-machine the measured verdicts gate: slower, exit code 1, and the line names the correction
    code, out, result = _compare(baseline[0], later[0])
    assert code == 1 and result["comparisons"][0]["arm_ratios"][0]["verdict"] == "slower"
    assert "the arm is the same (measured: slower); pass --correct-machine to gate on that" in out


def test_d_a_case_whose_prompt_was_edited_is_not_compared_and_a_renamed_one_is(baseline, tmp_path):
    later = _run(tmp_path, "edited", cases={"read-renamed": CASES["read"], "plan": CASES["plan"] + " (edited)"})
    code, out, result = _compare(baseline[0], later[0])
    (c,) = result["comparisons"]
    by = {k["case"]: k for k in c["cases"]}
    assert not by["plan"]["compared"] and "prompts differ" in by["plan"]["reason"]
    assert by["read"]["compared"] and by["read"]["later"] == "read-renamed" and by["read"]["how"] == "prompt hash"
    assert [(x["case"], x["later_case"]) for x in c["cells"]] == [("read", "read-renamed")]
    assert "case plan: not compared: its prompts differ" in out
    assert code == 0


def test_bad_input_is_one_line_with_exit_code_2(baseline, tmp_path):
    other, _ = _run(tmp_path, "other", cases={"x": "something else entirely"}, repeats=2)
    res = CliRunner().invoke(cli, ["compare", str(baseline[0]), str(other)])
    assert res.exit_code == 2 and "nothing to compare" in res.output and len(res.output.strip().splitlines()) == 1
    res = CliRunner().invoke(cli, ["compare", str(baseline[0])])
    assert res.exit_code == 2
    broken = tmp_path / "broken"
    broken.mkdir()
    lines = (baseline[0] / "ledger.jsonl").read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "run_id": "a copy"})  # (the same run twice is bad input)
    (broken / "ledger.jsonl").write_text("\n".join([*lines[:5], "{not json", *lines[5:]]) + "\n")
    res = CliRunner().invoke(cli, ["compare", str(baseline[0]), str(broken)])
    assert res.exit_code == 2 and str(broken) in res.output
    assert CliRunner().invoke(cli, ["compare", str(baseline[0]), str(broken), "--salvage"]).exit_code == 0


# ---------------------------------------------------------------- (b) no change under jitter: 100 seeded trials

JITTER = 0.10
B_CASES, B_REPEATS = 8, 8
B_SIM = dict(prefill_tps=20000.0, decode_tps=1000.0, output_tokens=64, speed_jitter=JITTER)


def _b_cases(n: int) -> dict[str, str]:
    return {f"c{i}": f"case number {i}: " + "word " * (4 * i) for i in range(n)}


def _synthetic(rng: random.Random, cases: dict[str, str], repeats: int, prompt_tokens: dict[str, int]) -> list[dict]:
    """The records of a run on the simulator's timing model: every service time (prefill, decode) of a request times a
    lognormal factor of mean 1 and CV :data:`JITTER` (``simulator.state``: exp(N(−s²/2, s²)), s² = log(1 + CV²)), a
    sentinel (:data:`SENTINEL` forced tokens on a 72-token prompt) for the arm at every round's start and at the end."""
    s = math.sqrt(math.log1p(JITTER ** 2))

    def f() -> float:
        return math.exp(rng.gauss(-s * s / 2, s))

    def sentinel(r: int, position: str, t: float) -> dict:
        k = f()
        return timed("a", "(sentinel)", r, kind="sentinel", prompt=72, cached=0, out=SENTINEL, prefill_tps=20000.0 / k,
                     decode_tps=1000.0 / k, probe_tokens=SENTINEL, position=position, input_chars=372, t_send=t)

    recs, t = [], 0.0
    for r in range(repeats):
        recs.append(sentinel(r, "start", t))
        for name in cases:
            k = f()
            call = timed("a", name, r, prompt=prompt_tokens[name], cached=0, out=64, prefill_tps=20000.0 / k,
                         decode_tps=1000.0 / k, input_sha256=hashlib.sha256(cases[name].encode()).hexdigest())
            recs += turn("a", name, r, call["latency_s"] + 0.002, 64, calls=[call])
            t += 1.0
    recs.append(sentinel(0, "end", t))
    return recs


def _synthetic_view(rng: random.Random, label: str, cases: dict[str, str], repeats: int = B_REPEATS):
    head = {**header({"a": {}}, list(cases), repeats=repeats), "run_id": label}
    return run_view(label, ledger(head, _synthetic(rng, cases, repeats, {c: 8 + 4 * i for i, c in enumerate(cases)})))


def test_b_no_change_under_10_percent_jitter_is_the_same_in_at_least_95_of_100_trials():
    cases = _b_cases(B_CASES)
    same, exit0 = 0, 0
    for seed in range(100):
        rng = random.Random(seed)
        result = compare_runs(_synthetic_view(rng, "base", cases), [_synthetic_view(rng, "later", cases)])
        (arm,) = result["comparisons"][0]["arm_ratios"]
        same += arm["verdict"] == "same"
        exit0 += not result["exit_code"]
    assert same >= 95 and exit0 >= 95, (same, exit0)


def _log_sd(groups: list[list[float]]) -> float:
    """The pooled standard deviation of log times within groups."""
    ss = sum(sum((math.log(x) - statistics.fmean(map(math.log, g))) ** 2 for x in g) for g in groups)
    return math.sqrt(ss / sum(len(g) - 1 for g in groups))


def test_b_the_synthetic_runs_match_real_simulator_runs_under_the_same_jitter(tmp_path):
    """Two real runs of the simulator with 10 % jitter: the speed factors it drew scatter as the synthetic model's
    do, its turns' model times (those factors times the set rates, from its own records: what the synthetic ledgers
    draw) agree with the synthetic turns, the measured turns scatter at least as much (a loaded machine only adds)
    and not much more, and compare says "same" of them too."""
    cases = _b_cases(4)
    real = [_run(tmp_path, name, cases=cases, repeats=6, **B_SIM) for name in ("one", "two")]
    code, out, result = _compare(real[0][0], real[1][0])
    assert code == 0 and result["comparisons"][0]["arm_ratios"][0]["verdict"] == "same", out
    views = [run_view(p, read_ledger(p)) for p, _ in real]
    prompt = {c: int(statistics.median(r["prompt_tokens"] for r in read_ledger(real[0][0]).records
                                       if r["kind"] == "call" and r["case"] == c)) for c in cases}
    synthetic = run_view("synthetic", ledger(header({"a": {}}, list(cases), repeats=40),
                                             _synthetic(random.Random(7), cases, 40, prompt)))
    s = math.sqrt(math.log1p(JITTER ** 2))
    factors = [t["speed_factor"] for _, truth in real for t in truth]
    assert statistics.stdev(map(math.log, factors)) == pytest.approx(s, rel=0.3)
    for c in cases:
        calls = [r for r in read_ledger(real[0][0]).records if r["kind"] == "call" and r["case"] == c]
        model = [t["speed_factor"] * ((t["prompt_tokens"] - t["cached_tokens"]) / B_SIM["prefill_tps"]
                                      + (t["completion_tokens"] - 1) / B_SIM["decode_tps"])
                 for t in records_of(calls, real[0][1])]
        assert _gm(model) == pytest.approx(_gm(synthetic.cells[("a", c)].turn_s) - 0.002, rel=0.1)
    sd_real = _log_sd([cell.turn_s for v in views for cell in v.cells.values()])
    sd_syn = _log_sd([cell.turn_s for cell in synthetic.cells.values()])
    assert sd_syn == pytest.approx(JITTER, rel=0.2)
    assert 0.8 * sd_syn <= sd_real <= 1.5 * sd_syn
