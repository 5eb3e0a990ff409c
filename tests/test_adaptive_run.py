"""Issue 16 end to end against the simulator: an adaptive run adds repeats only to the comparisons still open,
in counterbalanced order, stops each when decided, at max_repeats or at max_gpu_hours, and a resumed adaptive
run continues where it stopped.

Three arms on simulators whose speeds are set: ``fast`` decodes twice as fast as the baseline ``base`` (a
lever with a large true effect), ``same`` as fast as it (a lever with none); each differs from ``base`` in one
declared knob (kernel, tuning), so each comparison is a lever's controlled pair.  Turns are one call of 10
tokens: 0.1 s on base and same, 0.05 s on fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.config import load, with_adaptive
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import read_ledger
from leverbench.runner.run import Runner
from leverbench.runner.schedule import arm_order

# (the fixture run stays in the README's command: the executor's adaptive looks; the runs of their own are slow)
KNOBS = {"base": 'kernel = "plain", tuning = "off"', "fast": 'kernel = "fused", tuning = "off"',
         "same": 'kernel = "plain", tuning = "on"'}
DECODE_TPS = {"base": 100.0, "fast": 200.0, "same": 100.0}
CASES = ("one", "two", "three")
MAX_REPEATS = 6


def experiment(tmp: Path, urls: dict[str, str], adaptive: str | None = f"{{ max_repeats = {MAX_REPEATS} }}") -> Path:
    t = f'''
[experiment]
name = "adaptive"
repeats = 2
baseline = "base"
sentinel_tokens = 8
{f"adaptive = {adaptive}" if adaptive else ""}
'''
    for i, (a, u) in enumerate(urls.items()):
        t += f'''
[[arms]]
name = "{a}"
role = "{'baseline' if i == 0 else 'treatment'}"
base_url = "{u}"
model = "sim"
conditions = {{ {KNOBS[a]} }}
'''
    t += "".join(f'\n[[cases]]\nname = "{c}"\nprompt = "case {c}"\nmax_tokens = 10\n' for c in CASES)
    t += "\n[probes]\noutput_tokens = [4, 12]\nrepeats = 1\n"
    p = tmp / "exp.toml"
    p.write_text(t)
    return p


def sims(*arms: str) -> list[SimulatorThread]:
    return [SimulatorThread(SimConfig(decode_tps=DECODE_TPS[a], output_tokens=10, prefill_tps=1e5)) for a in arms]


def turns(led) -> list[dict]:
    return [r for r in led.records if r["kind"] == "turn"]


@pytest.fixture(scope="module")
def adaptive_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adaptive")
    arms = ("base", "fast", "same")
    servers = sims(*arms)
    for s in servers:
        s.start()
    try:
        exp = experiment(tmp, {a: s.base_url for a, s in zip(arms, servers)})
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp / "run")], catch_exceptions=False)
    finally:
        for s in servers:
            s.stop()
    assert res.exit_code == 0, res.output
    return tmp / "run", res.output


def _verdict(summary: dict, arm: str) -> dict:
    return next(v for v in summary["verdicts"] if v["arm"] == arm)


def test_a_large_effect_pays_after_few_repeats_and_no_effect_does_not(adaptive_run):
    out, _ = adaptive_run
    s = json.loads((out / "summary.json").read_text())
    assert [(v["arm"], v["vs"], v["lever"]) for v in s["verdicts"]] == [("fast", "base", "kernel"),
                                                                      ("same", "base", "tuning")]
    fast = _verdict(s, "fast")
    # 3 cases: after 2 repeats the interval is still the whole line; the true ratio is 2
    assert (fast["verdict"], fast["stopped_by"], fast["method"]) == ("pays", "decided", "confidence sequence")
    assert fast["looks"] <= 4 and 1.10 < fast["low"] <= 2.0
    same = _verdict(s, "same")
    assert ((same["verdict"] in ("equivalent", "does not pay") and same["stopped_by"] == "decided")
            or (same["verdict"], same["stopped_by"], same["looks"]) == ("undecided", "max_repeats", MAX_REPEATS))
    assert same["verdict"] != "pays"
    for v in s["verdicts"]:
        assert set(v["repeats"]) == set(CASES) and all(n == v["looks"] for n in v["repeats"].values())
        assert v["gpu_hours"] > 0 and v["confidence"] == 0.95 and v["min_effect"] == 1.10
    assert s["adaptive"]["stopped_by"] in ("decided", "max_repeats")


def test_repeats_go_only_to_the_comparisons_still_open(adaptive_run):
    """Each arm's cells got as many repeats as the longest-running comparison it is in; rounds name only the
    comparisons open at their start."""
    out, _ = adaptive_run
    s = summarize(read_ledger(out))
    looks = {v["arm"]: v["looks"] for v in s["verdicts"]}
    want = {"fast": looks["fast"], "same": looks["same"], "base": max(looks.values())}
    got = {}
    for t in turns(read_ledger(out)):
        got.setdefault(t["arm"], {}).setdefault(t["case"], set()).add(t["repeat"])
    for arm, n in want.items():
        assert {c: len(r) for c, r in got[arm].items()} == dict.fromkeys(CASES, n), arm
        assert all(r == set(range(n)) for r in got[arm].values())
    for rnd in s["adaptive"]["rounds"]:
        open_at = [a for a, n in looks.items() if n > rnd["repeat"]]
        assert rnd["comparisons"] == [f"{a} vs base" for a in open_at]


def test_the_ledger_holds_the_counterbalanced_order(adaptive_run):
    out, _ = adaptive_run
    led = read_ledger(out)
    seq = [(t["repeat"], t["case"], t["arm"]) for t in turns(led)]
    groups: dict[tuple[int, str], list[str]] = {}
    for r, c, a in seq:
        groups.setdefault((r, c), []).append(a)
    firsts = set()
    for (r, c), arms in groups.items():
        order = [a for a in ("base", "fast", "same") if a in arms]
        assert arms == arm_order(order, CASES.index(c), r, len(CASES)), (r, c)  # a row of the Williams design
        firsts.add(arms[0])
    assert len(firsts) >= 2  # the first place goes round
    # the rounds come after the initial repeats, before the probes and the closing sentinels
    kinds = [(r["kind"], r.get("repeat"), r.get("position")) for r in led.records
             if r["kind"] in ("turn", "probe", "sentinel")]
    last_turn = max(i for i, k in enumerate(kinds) if k[0] == "turn")
    assert all(k[0] != "probe" for k in kinds[:last_turn]) and kinds[-1][2] == "end"
    # every round opens with a sentinel of each arm in it
    for r in {r for r, _, _ in seq}:
        first = min(i for i, k in enumerate(kinds) if k[0] == "turn" and k[1] == r)
        assert kinds[first - 1][0] == "sentinel" and kinds[first - 1][1:] == (r, "start"), r
    assert [r for _, r, _ in (k for k in kinds if k[0] == "turn")] == sorted(r for r, _, _ in seq)


def test_the_report_shows_each_levers_verdict_and_repeats(adaptive_run):
    out, printed = adaptive_run
    s = json.loads((out / "summary.json").read_text())
    md = (out / "report.md").read_text()
    for v in s["verdicts"]:
        assert f"| {v['lever']} | {v['arm']} vs base | {v['verdict']} |" in md
        assert f"| {v['looks']} per case | {v['gpu_hours']:.3g} |" in md
    for v in s["verdicts"]:  # the first screen: each lever's verdict and interval, as the summary has them
        assert f"{v['arm']} vs base" in printed and f"{v['verdict']} {v['ratio']:.2f}x [{v['low']:.2f}–" in printed
    assert "Verdicts per lever" not in printed  # the tables are for --full and the files
    html = (out / "report.html").read_text()
    assert "Verdicts per lever (anytime-valid 95% confidence sequence" in html and "fast vs base" in html
    assert "adaptive: up to 6" in printed


@pytest.mark.slow
def test_max_gpu_hours_stops_the_run_after_the_initial_repeats(tmp_path):
    arms = ("base", "fast", "same")
    servers = sims(*arms)
    for s in servers:
        s.start()
    try:
        exp = experiment(tmp_path, {a: s.base_url for a, s in zip(arms, servers)},
                         adaptive=f"{{ max_repeats = {MAX_REPEATS}, max_gpu_hours = 0.0001 }}")
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")], catch_exceptions=False)
    finally:
        for s in servers:
            s.stop()
    assert res.exit_code == 0, res.output
    led = read_ledger(tmp_path / "run")
    # 18 turns (6 of 0.05 s, 12 of 0.1 s): 0.0004 GPU-hours before the first look; 3 cases × 2 repeats decide
    # nothing (the interval is still the whole line), so only the budget stops the run there
    assert sorted({t["repeat"] for t in turns(led)}) == [0, 1]
    s = summarize(led)
    assert [(v["verdict"], v["stopped_by"], v["looks"]) for v in s["verdicts"]] == [
        ("undecided", "max_gpu_hours", 2)] * 2
    assert s["adaptive"]["stopped_by"] == "max_gpu_hours" and s["adaptive"]["rounds"] == []
    assert s["adaptive"]["gpu_hours"] > 0.0001
    assert [r["kind"] for r in led.records if r["kind"] in ("probe", "sentinel")][-3:] == ["sentinel"] * 3


class Stop(Exception):
    pass


@pytest.mark.slow
def test_a_resumed_adaptive_run_continues_where_it_stopped(tmp_path):
    """Stopped in its first round (after one of that round's turns), then resumed without --adaptive: the run's
    own adaptive settings from its ledger; no unit runs twice, and the rounds go on until decided."""
    arms = ("base", "fast")
    servers = sims(*arms)
    for s in servers:
        s.start()
    seen = []

    def stop_in_round(unit, done, total):
        if unit.kind == "turn" and unit.repeat == 2:
            seen.append(unit)
            if len(seen) == 2:
                raise Stop

    try:
        path = experiment(tmp_path, {a: s.base_url for a, s in zip(arms, servers)}, adaptive=None)
        runner = CliRunner().invoke(cli, ["run", str(path), "--out", str(tmp_path / "x"), "--adaptive", "--repeats",
                                          "1"])
        assert runner.exit_code == 2 and "at least 2 repeats" in runner.output
        with pytest.raises(Stop):
            Runner(with_adaptive(load(path), True), tmp_path / "run", progress=stop_in_round).run()
        before = turns(read_ledger(tmp_path / "run"))
        assert [(t["repeat"], t["case"], t["arm"]) for t in before if t["repeat"] == 2] == [(2, "one", "base")]
        Runner(load(path), tmp_path / "run", resume=True).run()
    finally:
        for s in servers:
            s.stop()
    led = read_ledger(tmp_path / "run")
    keys = [(t["arm"], t["case"], t["repeat"]) for t in turns(led)]
    assert len(keys) == len(set(keys))  # nothing ran twice
    assert len([r for r in led.records if r["kind"] == "resume"]) == 1
    assert led.header["config"]["experiment"]["adaptive"]["max_repeats"] == 12  # --adaptive's default
    s = summarize(led)
    (v,) = s["verdicts"]
    assert (v["verdict"], v["stopped_by"]) == ("pays", "decided") and v["looks"] >= 3
    assert {(a, c, r) for a in arms for c in CASES for r in range(v["looks"])} == set(keys)
    assert s["adaptive"]["rounds"][0] == {"repeat": 2, "comparisons": ["fast vs base"], "cells": 6}
    # the first round's other turns ran after the resume, in their counterbalanced places
    resumed_at = next(i for i, r in enumerate(led.records) if r["kind"] == "resume")
    after = [(r["repeat"], r["case"], r["arm"]) for r in led.records[resumed_at:] if r["kind"] == "turn"]
    assert after[:5] == [(2, "one", "fast"), (2, "two", "base"), (2, "two", "fast"), (2, "three", "fast"),
                         (2, "three", "base")]  # arm_order(["base", "fast"], c, 2, cases=3): rows 0, 0, 1
