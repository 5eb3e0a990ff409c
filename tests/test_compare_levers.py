"""``leverbench compare`` per lever (issue 41): the prefix cache's multiplier in each run and their ratio, against
the simulator's own records of the turns (``tests/sim_truth.py``), never its configured rates.  The later run's
prefill is four times as slow: the cache, which spares the second step's prefill, pays more."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner
from sim_truth import records_of

from leverbench.cli import cli
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import read_ledger
from leverbench.runner.run import Runner

REPEATS = 4
SIM = dict(prefill_tps=8000.0, decode_tps=800.0, output_tokens=64)
DOC = " ".join(f"line {i}: the server accepted the request and wrote its timings to the log." for i in range(60))
CASES = ("read", "plan")


def _experiment(tmp: Path, url: str) -> Path:
    p = tmp / "exp.toml"
    cases = "".join(f'''
[[cases]]
name = "{n}"
system = "{DOC}"
prompt = "{n}: summarise the log"
max_tokens = 64
temperature = 0.0
[[cases.steps]]
prompt = "and now the next step of {n}"
max_tokens = 64
''' for n in CASES)
    p.write_text(f'''
[experiment]
name = "levers"
repeats = {REPEATS}
baseline = "plain"
[[arms]]
name = "plain"
role = "baseline"
base_url = "{url}/v1"
model = "sim"
request = {{ cache_prompt = false }}
conditions = {{ prefix_cache = false }}
[[arms]]
name = "cache"
base_url = "{url}/v1"
model = "sim"
conditions = {{ prefix_cache = true }}
{cases}''')
    return p


def _run(tmp: Path, name: str, **sim) -> tuple[Path, list]:
    (tmp / name).mkdir()
    with SimulatorThread(SimConfig(**{**SIM, **sim})) as s:
        Runner(load(_experiment(tmp / name, s.base_url)), tmp / name / "run").run()
        truth = s.truth()
    return tmp / name / "run", truth


def _gm(x: list[float]) -> float:
    return math.exp(statistics.fmean(map(math.log, x)))


def _truth_multiplier(run: Path, truth: list) -> float:
    """The simulator's own turn times (Σ over a turn's calls of arrival to end), plain over cache: the geometric
    mean over the cases of the cells' geometric means' ratio."""
    calls = [r for r in read_ledger(run).records if r["kind"] == "call" and r.get("turn_id") is not None]
    turns: dict[tuple[str, str, str], float] = {}
    for c, t in zip(calls, records_of(calls, truth)):
        key = (c["arm"], c["case"], c["turn_id"])
        turns[key] = turns.get(key, 0.0) + t["end"] - t["arrival"]
    cell = {(a, c): _gm([v for (a2, c2, _), v in turns.items() if (a2, c2) == (a, c)]) for a in ("plain", "cache")
            for c in CASES}
    return _gm([cell[("plain", c)] / cell[("cache", c)] for c in CASES])


def test_the_cache_pays_more_when_prefill_is_slower_near_the_truth(tmp_path):
    base = _run(tmp_path, "base")
    later = _run(tmp_path, "later", prefill_tps=SIM["prefill_tps"] / 4, engine_version="sim-2")
    res = CliRunner().invoke(cli, ["compare", str(base[0]), str(later[0]), "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    (c,) = json.loads(res.stdout)["comparisons"]
    (lever,) = c["levers"]
    assert (lever["arm"], lever["vs"], lever["later_arm"], lever["later_vs"]) == ("cache", "plain", "cache", "plain")
    tb, tl = _truth_multiplier(*base), _truth_multiplier(*later)
    assert tb > 1.1 and tl > tb * 1.1, (tb, tl)  # the setting does what the test needs
    assert lever["multiplier_baseline"] == pytest.approx(tb, rel=0.03)
    assert lever["multiplier_later"] == pytest.approx(tl, rel=0.03)
    assert lever["ratio"] == pytest.approx(tl / tb, rel=0.03)
    assert lever["verdict"] == "pays more" and lever["low"] > 1.0, lever
    assert lever["multiplier_baseline_low"] < lever["multiplier_baseline"] < lever["multiplier_baseline_high"]
    text = CliRunner().invoke(cli, ["compare", str(base[0]), str(later[0])])
    assert text.exit_code == res.exit_code
    assert "pays more" in text.output and "Levers" in text.output, text.output


def _lever_arms(head: dict, recs: list, *, fail: bool = False) -> None:
    """Two arms that differ in the drafter alone (d: the lever on); case y's answers twice as long on d (the arms did
    different work within the run); with *fail*, d's first turn of case x failed."""
    head["arms"]["a"]["conditions"] = {"drafter": "none"}
    head["arms"]["d"]["conditions"] = {"drafter": "ngram"}
    for r in recs:
        if r["kind"] == "turn" and (r["arm"], r["case"]) == ("d", "y"):
            r["output_tokens"] *= 2
    if fail:
        first = next(r for r in recs if r["kind"] == "turn" and (r["arm"], r["case"]) == ("d", "x"))
        first["error"] = {"class": "http_5xx", "message": "failed"}
        first["failed_calls"] = 1


def test_a_lever_case_is_refused_where_an_arm_failed_or_the_arms_did_different_work_within_a_run():
    from test_compare_guard import DECODE, _compare, _run

    arms = {"a": (DECODE, DECODE), "d": (DECODE * 1.5, DECODE * 1.5)}
    base = _run("b", arms, edit=_lever_arms)
    later = _run("l", arms, seed=1, edit=lambda h, r: _lever_arms(h, r, fail=True))
    (c,) = _compare(base, later)["comparisons"]
    (lever,) = c["levers"]
    assert lever["lever"] == "drafter" and (lever["arm"], lever["vs"]) == ("d", "a")
    assert (lever["cases"], lever["refused_cases"]) == (1, 2) and not lever["refused"]
    assert "x: d: failed calls: 1 in the later run" in lever["reason"]
    assert "y: d and a did different work within base on y" in lever["reason"]
    # the one compared case: the lever pays 1.5x in both runs (its decode), the same across them
    assert lever["multiplier_baseline"] == pytest.approx(1.5, rel=0.03)
    assert lever["ratio"] == pytest.approx(1.0, abs=0.03) and lever["verdict"] == "same"
    assert all(not line.startswith("lever") for line in c["slower"])  # never gated


def test_a_lever_case_whose_arms_were_put_on_equal_work_is_refused_not_compared_at_other_work():
    """The later run's answers 22 % longer on both arms: each cell is compared at equal work, but a multiplier is
    not put on equal work, so the lever's cases are refused, saying so (its figures still shown)."""
    from test_compare_guard import DECODE, _compare, _run

    def longer(head: dict, recs: list) -> None:
        _lever_arms(head, recs, fail=True)
        for r in recs:
            if r["kind"] == "turn":
                r["output_tokens"] = int(r["output_tokens"] * 1.22)

    arms = {"a": (DECODE, DECODE), "d": (DECODE * 1.5, DECODE * 1.5)}
    (c,) = _compare(_run("b", arms, edit=_lever_arms), _run("l", arms, seed=1, edit=longer))["comparisons"]
    assert all(cell["equal_work"] for cell in c["cells"] if cell["case"] != "y"), c["cells"]
    (lever,) = c["levers"]
    assert lever["refused"] and lever["verdict"] == "refused" and lever["cases"] == 0
    assert "its work changed between the runs" in lever["reason"]
    x = next(part for part in lever["reason"].split(" | ") if part.startswith("x: "))
    assert "d: failed calls: 1 in the later run" in x and "d: its work changed" in x  # both reasons kept
    assert lever["ratio"] is not None  # shown, as a refused cell's ratio is


def test_a_lever_the_later_run_measures_from_the_other_arm_is_compared_the_right_way_round():
    """Two batch sizes, neither "off": each run takes its baseline arm as the reference; the later run's baseline is
    the other arm, so its ratios are taken the other way round (and said); an arm not matched is said too."""
    from test_compare_guard import DECODE, _compare, _run

    def batch(baseline: str):
        def edit(head: dict, recs: list) -> None:
            head["arms"]["a"]["conditions"] = {"batch": 256}
            head["arms"]["d"]["conditions"] = {"batch": 2048}
            for name, arm in head["arms"].items():
                arm["role"] = "baseline" if name == baseline else "treatment"
            head["config"]["experiment"]["baseline"] = baseline
        return edit

    arms = {"a": (DECODE, DECODE), "d": (DECODE * 1.25, DECODE * 1.25)}
    base = _run("b", arms, edit=batch("a"))
    (same,) = _compare(base, _run("l", arms, seed=1, edit=batch("a")))["comparisons"][0]["levers"]
    (flipped,) = _compare(base, _run("f", arms, seed=2, edit=batch("d")))["comparisons"][0]["levers"]
    for row in (same, flipped):
        assert (row["arm"], row["vs"]) == ("d", "a") and row["multiplier_baseline"] == pytest.approx(1.25, rel=0.03)
        assert row["multiplier_later"] == pytest.approx(1.25, rel=0.03) and row["verdict"] == "same", row
    assert flipped["note"].startswith("the later run measures it with d as the reference")
    result = _compare(base, _run("g", {"a": arms["a"]}, seed=3))
    (gone,) = result["comparisons"][0]["levers"]
    assert gone["refused"] and not gone["compared"] and gone["refused_cases"] == 0
    assert gone["reason"] == "not compared: arm d has no match in the later run"
    from leverbench.report.compare import lever_table
    from leverbench.report.compare_html import render_html

    (row,) = lever_table(result["comparisons"][0]).rows
    assert row[1:3] == ["d vs a", "not compared"], row
    assert 'aria-label="batch: d vs a' not in render_html(result)  # no empty plot for a lever never compared
