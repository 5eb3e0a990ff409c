"""``leverbench compare`` at equal work (issue 41): a later run whose model answers 25 % longer is put on the
baseline's work by its own decode speed and compared there, against the simulator's own records; an answer twice
as long is beyond the correction's limit and refused."""

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

SIM = dict(prefill_tps=20000.0, decode_tps=500.0, output_tokens=64)
CASES = {"read": "summarise the server log for me", "plan": "plan the next step of the refactoring"}


def _run(tmp: Path, name: str, **sim) -> tuple[Path, list]:
    (tmp / name).mkdir()
    body = "".join(f'\n[[cases]]\nname = "{n}"\nprompt = "{t}"\nmax_tokens = 160\ntemperature = 0.0\n'
                   for n, t in CASES.items())
    with SimulatorThread(SimConfig(**{**SIM, **sim})) as s:
        exp = tmp / name / "exp.toml"
        exp.write_text(f'[experiment]\nname = "work"\nrepeats = 4\nbaseline = "a"\n[[arms]]\nname = "a"\n'
                       f'role = "baseline"\nbase_url = "{s.base_url}/v1"\nmodel = "sim"\n{body}')
        Runner(load(exp), tmp / name / "run").run()
        truth = s.truth()
    return tmp / name / "run", truth


def _gm(x: list[float]) -> float:
    return math.exp(statistics.fmean(map(math.log, x)))


def _truth(run: Path, truth: list, tokens: float | None = None) -> dict[str, float]:
    """Per case the geometric mean of the simulator's own turn times (one call a turn: arrival to end); with
    *tokens*, each turn's decode scaled by the simulator's own time a step to that many tokens."""
    calls = [r for r in read_ledger(run).records if r["kind"] == "call" and r.get("turn_id")]
    out: dict[str, list[float]] = {}
    for c, t in zip(calls, records_of(calls, truth)):
        s = t["end"] - t["arrival"]
        if tokens is not None:
            n = c["completion_tokens"]
            s += (tokens - n) * t["decode_s"] / (n - 1)
        out.setdefault(c["case"], []).append(s)
    return {k: _gm(v) for k, v in out.items()}


def _compare(a: Path, b: Path) -> tuple[int, dict, str]:
    res = CliRunner().invoke(cli, ["compare", str(a), str(b), "--format", "json"])
    text = CliRunner().invoke(cli, ["compare", str(a), str(b)])
    assert res.exit_code == text.exit_code, (res.output, text.output)
    return res.exit_code, json.loads(res.stdout), text.output


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> tuple[Path, list]:
    return _run(tmp_path_factory.mktemp("work"), "base")


def test_longer_answers_are_compared_at_the_baselines_work_near_the_truth(baseline, tmp_path):
    later = _run(tmp_path, "longer", output_tokens=80)
    code, result, text = _compare(baseline[0], later[0])
    (c,) = result["comparisons"]
    tb, tl = _truth(*baseline), _truth(*later, tokens=64)
    for cell in c["cells"]:
        assert cell["equal_work"] and not cell["refused"], cell
        assert (cell["output_baseline"], cell["output_later"]) == (64, 80)
        assert "put on the baseline's work: 25% more tokens a turn (64 → 80)" in cell["note"]
        assert cell["ratio"] == pytest.approx(tl[cell["case"]] / tb[cell["case"]], rel=0.03)
    (arm,) = c["arm_ratios"]
    assert arm["verdict"] == "same" and code == 0, text
    assert "put on the baseline's work" in text


def test_answers_twice_as_long_are_beyond_the_correction_and_refused(baseline, tmp_path):
    later = _run(tmp_path, "double", output_tokens=128)
    code, result, text = _compare(baseline[0], later[0])
    (c,) = result["comparisons"]
    for cell in c["cells"]:
        assert cell["refused"] and not cell["equal_work"], cell
        assert "output volume differs: 64 → 128" in cell["reason"] and "beyond 25%" in cell["reason"], cell
    assert c["arm_ratios"][0]["verdict"] == "refused" and code == 0
