"""What a review of issue 28 found still ending in exit 70 (an internal error): a path that cannot be used as
named (``run --out`` under a file, a name past the file system's limit), an API key with a line end in it, a
TOML date in an arm's conditions.  Each is one error line now, exit 2, naming the path or the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.cli import cli

TINY = '''[experiment]
name = "tiny"
baseline = "a"
repeats = 1
sentinel_tokens = 0
[[arms]]
name = "a"
role = "baseline"
base_url = "http://127.0.0.1:1/v1"
model = "m"
{arm}
[[cases]]
name = "c"
prompt = "hi"
max_tokens = 1
'''
LONG = "x" * 300


def _one_error(res, *needles: str) -> str:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert "Traceback" not in res.output and "internal error" not in res.output, res.output
    assert res.exit_code == 2 and lines and lines[-1].startswith("leverbench: error: "), res.output
    assert sum("leverbench: error:" in line for line in lines) == 1, res.output
    for n in needles:
        assert n in lines[-1], lines[-1]
    return lines[-1]


def _exp(tmp: Path, arm: str = "") -> Path:
    p = tmp / "tiny.toml"
    p.write_text(TINY.format(arm=arm))
    return p


@pytest.mark.parametrize(("out", "needle"), [("tiny.toml/x", "Not a directory"), (f"runs/{LONG}", "too long")],
                         ids=["under-a-file", "name-too-long"])
def test_a_run_directory_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, out, needle):
    monkeypatch.chdir(tmp_path)
    exp = _exp(tmp_path)
    _one_error(CliRunner().invoke(cli, ["run", str(exp), "--out", out]), needle)


def test_a_path_past_the_file_systems_limit_is_one_line(tmp_path):
    _one_error(CliRunner().invoke(cli, ["project", str(tmp_path / LONG), "--input-tokens", "10",
                                        "--output-tokens", "10"]), "too long")


def test_an_api_key_with_a_line_end_is_refused_naming_its_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("LB_TEST_KEY", "sk-abc\r")  # read from a file with Windows line ends
    exp = _exp(tmp_path, 'api_key_env = "LB_TEST_KEY"')
    line = _one_error(CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")]),
                      "arms[0].api_key_env", "LB_TEST_KEY", "U+000D")
    assert "sk-abc" not in line  # the key itself is never printed


def test_a_toml_date_in_conditions_is_refused_when_loaded(tmp_path):
    exp = _exp(tmp_path, "conditions = { measured = 2024-01-01 }")
    _one_error(CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")]),
               "conditions.measured", "quote it")
    assert not (tmp_path / "run" / "ledger.jsonl").exists()
