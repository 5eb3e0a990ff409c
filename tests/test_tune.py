"""``leverbench tune`` end to end on the simulator started through a command template (issue 40): the search
finds the configuration the simulator's own formula says is faster, every race is a run with its ledger, a tune
cut short resumes from its races' ledgers without running a finished race again, and a tune file that is wrong
says where in one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from limits import SERVER_READY_S

from leverbench.cli import cli
from leverbench.config.tune import load_tune
from leverbench.engines.simulator.drafter import expected_tokens_per_step, step_cost
from leverbench.errors import ConfigError
from leverbench.ledger.reader import read_ledger
from leverbench.tune.run import run_tune

SIM = ("{python} -m leverbench sim --port {port} --model tune-test --decode-tps 400 --prefill-tps 100000 "
       "--draft-model expected --draft-acceptance 0.75 --draft-cost 0.15 --draft-k {k}")
P, C, TOKENS = 0.75, 0.15, 40


def tune_file(tmp: Path, *, knobs: str = "k = [0, 4]", more: str = "", command: str = SIM,
              values: str | None = None, max_repeats: int = 6) -> Path:
    p = tmp / "tune.toml"
    vals = values if values is not None else f'{{ python = "{sys.executable}" }}'
    p.write_text(f'''
[experiment]
name = "tune-test"
repeats = 2
sentinel_tokens = 0

[[arms]]
name = "sim"
engine = {{ kind = "command", command = "{command}", values = {vals}, startup_timeout_s = {SERVER_READY_S} }}

[tune]
knobs = {{ {knobs} }}
min_effect = 1.10
max_repeats = {max_repeats}
{more}

[[cases]]
name = "quote"
prompt = "{' '.join(f'w{i}' for i in range(40))} quote it"
max_tokens = {TOKENS}
temperature = 0.0

[[cases]]
name = "sum"
prompt = "{' '.join(f'v{i}' for i in range(60))} sum it"
max_tokens = {TOKENS}
temperature = 0.0
''')
    return p


def decode_steps_cost(k: int) -> float:
    """The simulator's own decode cost of an answer at draft length *k* (its drafter's formula, in plain steps):
    ceil(n / E(k)) steps of (1 + c·k) each."""
    import math  # noqa: PLC0415

    return math.ceil(TOKENS / expected_tokens_per_step(k, P)) * step_cost(k, C)


def test_a_tune_finds_the_faster_draft_length_and_every_race_is_a_run(tmp_path):
    assert decode_steps_cost(4) < decode_steps_cost(0) / 1.10  # the truth: k = 4 pays by more than the least effect
    tune = load_tune(tune_file(tmp_path))
    out = tmp_path / "out"
    summary = run_tune(tune, out)
    (point,) = summary["points"]
    assert point["best"] == {"k": 4}
    assert point["path"][0]["outcome"] == "better"
    vs = point["against_baseline"]
    assert vs is not None and vs["outcome"] == "better" and vs["ratio"] > 1.10
    assert point["command"].endswith("--draft-k 4") and "{port}" in point["command"]
    for race in point["path"]:  # each race a run of its own, its calls in its ledger
        led = read_ledger(Path(race["run_dir"]))
        assert {a for a in led.header["arms"]} == {"k=0", "k=4"}
        assert race["engine_s"] > 0
    assert json.loads((out / "tune.json").read_text())["points"][0]["best"] == {"k": 4}
    lines = (out / "tune.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "tune" and len(lines) == 1 + point["races"] == 1 + len(point["path"])


def test_a_resumed_tune_reads_its_finished_races_back(tmp_path):
    tune = load_tune(tune_file(tmp_path, knobs="k = [0, 2, 4]"))
    out = tmp_path / "out"
    first = run_tune(tune, out)
    ledger = out / "races" / "001" / "ledger.jsonl"
    before = ledger.read_bytes()
    log = out / "tune.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:10])  # the last race's line cut by a kill
    again = run_tune(tune, out)
    assert ledger.read_bytes() == before  # race 1 was read back, not run again
    assert again["points"][0]["best"] == first["points"][0]["best"]
    assert [r["outcome"] for r in again["points"][0]["path"]] == [r["outcome"] for r in first["points"][0]["path"]]


def test_the_command_refuses_a_second_tune_in_the_same_directory_without_resume(tmp_path):
    f = tune_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "tune.jsonl").write_text('{"kind": "tune", "schema": "leverbench.tune/1"}\n')
    res = CliRunner().invoke(cli, ["tune", str(f), "--out", str(out)])
    assert res.exit_code == 2 and "--resume" in res.output


@pytest.mark.parametrize(("kw", "key", "words"), [
    ({"knobs": "n = [1, 2]"}, "tune.knobs.n", "is no placeholder"),
    ({"knobs": "k = [0, 4]", "more": "baseline = { k = 2 }"}, "tune", "not one of its values"),
    ({"knobs": "k = [0, 4]", "more": "exclude = [{ k = 0 }]"}, "tune.exclude", "excludes the baseline"),
    ({"knobs": "k = [0, 4]", "more": "concurrency = [1, 4, 1]"}, "tune", "names a point twice"),
    ({"knobs": "k = [0, 4]", "more": "concurrency = [0]"}, "tune.concurrency[0]", "from 1 to"),
    ({"knobs": "k = [0, 4]", "more": "confidence = 1.5"}, "tune", "confidence"),
    ({"knobs": "k = [0, 4]", "more": "budget = 10"}, "tune.budget", "unknown key"),
])
def test_a_wrong_tune_file_says_where(tmp_path, kw, key, words):
    with pytest.raises(ConfigError) as got:
        load_tune(tune_file(tmp_path, **kw))
    assert got.value.key.startswith(key) and words in got.value.message


def test_a_tune_file_without_a_tune_table_or_a_template_says_so(tmp_path):
    p = tune_file(tmp_path)
    text = p.read_text()
    p.write_text(text.replace("[tune]", "[other]").replace("knobs = {", "x = {"))
    with pytest.raises(ConfigError) as got:
        load_tune(p)
    assert got.value.key == "tune" and "[tune]" in got.value.message
    p.write_text(text.replace('kind = "command", command = "' + SIM + '", ', 'kind = "sim", '))
    with pytest.raises(ConfigError) as got:
        load_tune(p)
    assert got.value.key == "arms[0].engine" and "command template" in got.value.message


# ------------------------------------------------------------------ review: what a verdict makes of a race


def _verdict(verdict: str, ratio: float | None, refused: str | None = None) -> dict:
    return {"arm": "b", "vs": "a", "verdict": verdict, "ratio": ratio, "low": None, "high": None,
            "refused": refused, "reason": None, "repeats": {"a": 4, "b": 4}}


@pytest.mark.parametrize(("row", "outcome"), [
    (_verdict("pays", 1.3), "better"),
    (_verdict("equivalent", 1.01), "same"),
    (_verdict("does not pay", 0.8), "worse"),  # (no interval: the ratio says)
    ({**_verdict("does not pay", 0.98), "low": 0.9, "high": 1.04}, "same"),  # not shown slower
    (_verdict("does not pay", 1.03), "same"),  # faster, but by less than the least effect
    (_verdict("undecided", 1.2), "undecided"),
    (_verdict("open", 1.2), "undecided"),
    (_verdict("pays", 1.9, refused="the arms' answers differ in length"), "refused"),  # never a win
    (None, "refused"),
])
def test_a_race_s_outcome_is_its_verdict_and_a_refused_one_never_wins(row, outcome):
    from leverbench.tune.races import outcome_of  # noqa: PLC0415

    assert outcome_of(row)[0] == outcome


def _back(verdict: str, ratio: float, low: float, high: float, refused: str | None = None) -> dict:
    """The incumbent k=4 against the candidate k=0 (a lever's verdict runs toward the lever on: k=4 drafts)."""
    return {"arm": "k=4", "vs": "k=0", "verdict": verdict, "ratio": ratio, "low": low, "high": high,
            "refused": refused, "reason": None, "repeats": {"k=4": 4, "k=0": 4}, "min_effect": 1.05}


@pytest.mark.parametrize(("row", "outcome"), [
    (_back("pays", 1.4, 1.3, 1.5), "worse"),  # the lever the candidate turns off pays: the candidate is worse
    (_back("equivalent", 1.0, 0.97, 1.03), "same"),
    (_back("does not pay", 0.7, 0.65, 0.75), "better"),  # the candidate's interval [1.33, 1.54] lies above 1.05
    (_back("does not pay", 0.98, 0.9, 1.02), "undecided"),  # [0.98, 1.11]: the least effect still inside
    (_back("does not pay", 1.0, 0.97, 1.0), "same"),  # [1.00, 1.03]: no better by the least effect
    (_back("does not pay", 1.02, 0.99, 1.04), "same"),  # [0.96, 1.01]: not shown slower
    (_back("does not pay", 1.03, 1.01, 1.04), "worse"),  # [0.96, 0.99]: slower, by less than the least effect
    (_back("undecided", 0.9, 0.7, 1.2), "undecided"),
    (_back("does not pay", 0.5, 0.4, 0.6, refused="failed calls"), "refused"),  # never a win
])
def test_a_race_whose_verdict_runs_the_other_way_is_read_from_the_candidate_s_side(tmp_path, row, outcome):
    from leverbench.tune.races import result_of  # noqa: PLC0415

    summary = {"verdicts": [row]}
    got = result_of(summary, _NoLedger(), (("k", 4),), (("k", 0),), 1, tmp_path)  # type: ignore[arg-type]
    assert got.outcome == outcome
    assert got.ratio == pytest.approx(1 / row["ratio"])
    assert (got.low, got.high) == pytest.approx((1 / row["high"], 1 / row["low"]))


class _NoLedger:
    """A race's ledger without engines (no engine-seconds)."""

    def of_kind(self, *kinds):
        return iter(())


def test_the_answer_keeps_the_baseline_when_the_winner_is_not_confirmed_against_it():
    from leverbench.report.tune import point_lines  # noqa: PLC0415

    race = {"incumbent": {"k": 0}, "candidate": {"k": 4}, "point": 1, "outcome": "undecided", "ratio": 1.2,
            "low": 0.9, "high": 1.6, "engine_s": 10.0, "repeats": 6, "reason": "no verdict", "run_dir": None}
    point = {"point": 1, "recommended": {"k": 0}, "recommended_words": "k=0", "command": "sim --draft-k 0",
             "best": {"k": 4}, "best_words": "k=4", "is_baseline": False, "confirmed": False,
             "against_baseline": race, "stopped": "converged", "engine_s": 10.0, "grid_engine_s": 10.0,
             "grid_configurations": 2, "races": 1, "path": [race], "final": [race], "not_excluded": []}
    text = "\n".join(point_lines(point, 0.95))
    assert "run k=0" in text and "the baseline stays" in text and "k=4" in text and "undecided" in text


# ------------------------------------------------------------------ review: resume, a changed file, a failed start


def test_a_tune_resumes_twice_after_cut_lines_and_never_reruns_a_finished_race(tmp_path):
    tune = load_tune(tune_file(tmp_path, knobs="k = [0, 2, 4]"))
    out = tmp_path / "out"
    first = run_tune(tune, out)
    log = out / "tune.jsonl"
    ledgers = {p: p.read_bytes() for p in sorted((out / "races").glob("*/ledger.jsonl"))}
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n")  # the last race's line lost entirely: its run had finished
    run_tune(tune, out)
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:12])  # then cut mid-write
    again = run_tune(tune, out)
    run_tune(tune, out)  # and once more: the cut line was dropped, not written onto
    assert {p: p.read_bytes() for p in sorted((out / "races").glob("*/ledger.jsonl"))} == ledgers
    assert again["points"][0]["best"] == first["points"][0]["best"]
    assert all(json.loads(x) for x in log.read_text().splitlines())


def test_a_resume_refuses_a_changed_tune_file_but_takes_a_new_budget(tmp_path):
    from leverbench.errors import BadInput  # noqa: PLC0415

    out = tmp_path / "out"
    run_tune(load_tune(tune_file(tmp_path)), out)
    with pytest.raises(BadInput, match="changed since"):
        run_tune(load_tune(tune_file(tmp_path, more="confidence = 0.9")), out)
    run_tune(load_tune(tune_file(tmp_path, more="budget_engine_s = 5000")), out)


def test_a_configuration_whose_engine_does_not_start_is_a_refused_race(tmp_path):
    tune = load_tune(tune_file(tmp_path, knobs="k = [0]"))  # (a second knob below: slots 0 does not start)
    f = tune_file(tmp_path, knobs="k = [0], slots = [1, 0]", command=SIM + " --slots {slots}")
    summary = run_tune(load_tune(f), tmp_path / "out")
    (point,) = summary["points"]
    assert point["recommended"] == {"k": 0, "slots": 1}
    (race,) = point["path"]
    assert race["outcome"] == "refused" and "did not start" in race["reason"]
    assert tune.baseline == {"k": 0}


@pytest.mark.parametrize(("kw", "key", "words"), [
    ({"knobs": 'k = [0, 1, "1"]'}, "tune", "same value"),
    ({"knobs": "k = [1, true]"}, "tune", "same value"),
    ({"knobs": "k = [0, \"4'\"]"}, "tune.knobs", "k=4'"),
])
def test_a_value_the_command_cannot_take_is_refused_when_the_file_is_read(tmp_path, kw, key, words):
    with pytest.raises(ConfigError) as got:
        load_tune(tune_file(tmp_path, **kw))
    assert got.value.key.startswith(key) and words in got.value.message


def test_the_baseline_is_the_knob_s_own_value_and_adaptive_is_the_tune_s(tmp_path):
    assert load_tune(tune_file(tmp_path, more="baseline = { k = 0.0 }")).baseline == {"k": 0}
    p = tune_file(tmp_path, max_repeats=2)
    p.write_text(p.read_text().replace("repeats = 2\n", "repeats = 3\n", 1))
    with pytest.raises(ConfigError) as got:
        load_tune(p)
    assert got.value.key == "experiment.repeats" and "more than tune.max_repeats" in got.value.message
    p = tune_file(tmp_path)
    p.write_text(p.read_text().replace("sentinel_tokens = 0", "sentinel_tokens = 0\nadaptive = true"))
    with pytest.raises(ConfigError) as got:
        load_tune(p)
    assert got.value.key == "experiment.adaptive"


def test_a_stop_signal_held_while_engines_stop_stops_the_tune_before_its_next_race():
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415

    from leverbench.runner.run import Interrupted  # noqa: PLC0415
    from leverbench.runner.signals import hold_signals, release_signals  # noqa: PLC0415
    from leverbench.tune.races import _stop_if_asked  # noqa: PLC0415

    held = hold_signals()
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # (held: remembered, nothing else)
    finally:
        release_signals(held)
    with pytest.raises(Interrupted):
        _stop_if_asked()
    _stop_if_asked()  # taken: the next race is not stopped by the same signal
