"""A trace stage is planned before anything starts (issue 28): a trace that cannot be read, a call whose scaled
tokens pass the bound, or a replay longer than a week at its speed is bad input, and no call has been sent
(before: the trace was read after the turns had run, and a slow replay hung for its whole span)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from test_bad_config import experiment, stage

from leverbench.cli import cli
from leverbench.config import load
from leverbench.errors import ConfigError
from leverbench.runner.run import Runner


def _run(tmp: Path, trace_rows: str, lines: str) -> tuple[ConfigError, Path]:
    exp = experiment(tmp, experiment="repeats = 1\nsentinel_tokens = 0",
                     extra=stage(f'trace = "t2.jsonl"\n{lines}', mode="trace"))
    (tmp / "t2.jsonl").write_text(trace_rows)
    out = tmp / "run"
    with pytest.raises(ConfigError) as ei:
        Runner(load(exp), out).run()
    assert not (out / "ledger.jsonl").exists(), "refused after the run had started"
    return ei.value, exp


def test_a_replay_longer_than_a_week_at_its_speed_is_refused_before_anything_starts(tmp_path):
    # two sessions 700 s apart, replayed 1000x slower: the second would start 8 days after the first
    rows = ('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
            '{"timestamp": 700000, "input_length": 10, "output_length": 5, "hash_ids": [2]}\n')
    e, _ = _run(tmp_path, rows, "speed = 0.001")
    assert e.key == "load[0].speed" and "7e+05 s after its first" in str(e) and "a week" in str(e), str(e)


def test_a_call_scaled_past_the_token_bound_is_refused_before_anything_starts(tmp_path):
    rows = '{"timestamp": 0, "input_length": 20000, "output_length": 5, "hash_ids": [1]}\n'
    e, _ = _run(tmp_path, rows, "scale_input = 1000")
    assert e.key == "load[0].scale_input" and "20,000,000 tokens" in str(e) and "10,000,000" in str(e), str(e)


def test_an_unreadable_trace_is_refused_before_the_turns_run(tmp_path):
    e, exp = _run(tmp_path, "not json at all\n", "")
    assert e.key == "load[0].trace" and "t2.jsonl" in str(e), str(e)
    res = CliRunner().invoke(cli, ["run", "--out", str(tmp_path / "cli"), str(exp)])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and lines[-1].startswith("leverbench: error: ") and "load[0].trace" in lines[-1], \
        res.output
    assert "Traceback" not in res.output
