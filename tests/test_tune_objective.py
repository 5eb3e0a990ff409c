"""``leverbench tune`` with the objective GPU-hours a turn (issue 40): a configuration 1.5x faster on twice the GPUs
is worse in GPU-hours though better in time; each race's ratio is its run's own time ratio × the incumbent's GPUs /
the candidate's (the run's own verdict row is the oracle), its arms declare their GPUs, and a wrong ``gpus`` says
where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_tune import tune_file

from leverbench.config.tune import load_tune
from leverbench.errors import ConfigError
from leverbench.ledger.reader import read_ledger
from leverbench.report.tune import render_tune
from leverbench.tune.races import in_gpu_hours
from leverbench.tune.run import run_tune
from leverbench.tune.space import RaceResult

SIM = "{python} -m leverbench sim --port {port} --model tune-test --decode-tps {dtps} --prefill-tps 100000"


def test_twice_the_gpus_for_a_1_5x_faster_turn_is_worse_in_gpu_hours(tmp_path):
    tune = load_tune(tune_file(tmp_path, knobs="dtps = [200, 300]", command=SIM,
                               more='objective = "gpu_hours"\ngpus = { dtps = [1, 2] }'))
    summary = run_tune(tune, tmp_path / "out")
    (point,) = summary["points"]
    (race,) = point["path"]
    assert point["recommended"] == {"dtps": 200} and point["is_baseline"]
    assert race["outcome"] == "worse" and race["high"] < 1.0
    run = Path(race["run_dir"])
    (row,) = [v for v in json.loads((run / "summary.json").read_text())["verdicts"] if v["arm"] == "dtps=300"]
    assert row["verdict"] == "pays" and row["ratio"] > 1.3  # in time it is better (the run's own verdict) ...
    assert race["ratio"] == pytest.approx(row["ratio"] / 2)  # ... and in GPU-hours half that
    assert (race["low"], race["high"]) == (pytest.approx(row["low"] / 2), pytest.approx(row["high"] / 2))
    arms = read_ledger(run).header["arms"]  # (the GPUs are the tune's, not declared: the race stays controlled)
    assert all("gpus" not in arms[a]["conditions"] for a in arms)
    (v,) = [v for v in json.loads((run / "summary.json").read_text())["verdicts"] if v["arm"] == "dtps=300"]
    assert v["knobs"] == ["value:dtps"] and v["lever"] is not None
    assert summary["objective"] == "gpu_hours" and summary["gpus"] == {"dtps=200": 1, "dtps=300": 2}
    text = render_tune(summary)
    assert "objective: GPU-hours a turn" in text and "worse, 0." in text


def _race(outcome: str, ratio: float, low: float | None, high: float | None) -> RaceResult:
    return RaceResult((("g", 1),), (("g", 2),), 1, outcome, ratio, low, high, 10.0, 4)  # type: ignore[arg-type]


@pytest.mark.parametrize(("time", "scale", "outcome"), [
    ((2.4, 2.3, 2.5), 0.5, "better"),     # 2.4x faster on twice the GPUs: 1.2x in GPU-hours [1.15–1.25]
    ((1.5, 1.4, 1.6), 0.5, "worse"),      # 0.75x [0.70–0.80]
    ((1.9, 1.8, 2.06), 0.5, "same"),      # [0.90–1.03]: below the least effect 1.05, not below 1
    ((2.0, 1.9, 2.4), 0.5, "undecided"),  # [0.95–1.20] holds 1.05
])
def test_the_gpu_hours_outcome_is_read_off_the_scaled_interval(time, scale, outcome):
    got = in_gpu_hours(_race("better", *time), scale, 1.05)
    assert got.outcome == outcome and got.ratio == pytest.approx(time[0] * scale)
    assert in_gpu_hours(_race("refused", *time), scale, 1.05).outcome == "refused"
    assert in_gpu_hours(_race("better", *time), 1.0, 1.05).outcome == "better"  # the same GPUs: the time's outcome


@pytest.mark.parametrize(("more", "words"), [
    ('gpus = "nope"', "gpus names 'nope', which is not a knob"),
    ('gpus = { dtps = [1] }', "one GPU count (a whole number of at least 1) per value of the knob (2"),
    ('objective = "p99"', "objective"),
    ('objective = "gpu_hours"', 'objective "gpu_hours" needs each configuration\'s GPUs'),
])
def test_a_wrong_gpus_or_objective_says_where(tmp_path, more, words):
    with pytest.raises(ConfigError) as err:
        load_tune(tune_file(tmp_path, knobs="dtps = [200, 300]", command=SIM, more=more))
    assert "tune." in str(err.value) and words in str(err.value), str(err.value)


def test_an_unbalanced_brace_in_the_template_is_one_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"arms\[0\]\.engine\.command: .*unbalanced"):
        load_tune(tune_file(tmp_path, knobs="dtps = [200, 300]", command=SIM + " --x {dtps"))


def test_a_knob_named_as_the_gpus_must_hold_counts():
    from pydantic import ValidationError

    from leverbench.config.tune import TuneSpec

    with pytest.raises(ValidationError, match="its values are the GPU counts, whole numbers of at least 1, not 'a'"):
        TuneSpec.model_validate({"knobs": {"m": ["a", "b"]}, "gpus": "m"})
    assert TuneSpec.model_validate({"knobs": {"tp": [1, 2]}, "gpus": "tp"}).gpus_of({"tp": 2}) == 2
