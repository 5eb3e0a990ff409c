"""The command package: one module per command, one error handler, a ``--help`` that loads nothing heavy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import limits
import pytest
from click.testing import CliRunner

from leverbench.cli import cli
from leverbench.cli.common import Command
from leverbench.cli.replay import replay_command
from leverbench.cli.sim import sim_command

GOLDEN = Path(__file__).parent / "golden"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def test_every_command_goes_through_the_one_error_handler():
    assert sorted(cli.commands) == ["analyze", "compare", "project", "record", "replay", "report", "run", "schema",
                                    "serve", "sim", "tune", "whatif"]
    assert all(isinstance(c, Command) for c in cli.commands.values())
    for c in cli.commands.values():
        assert type(c).__module__ == "leverbench.cli.common"
        assert c.callback.__module__ == f"leverbench.cli.{c.name}"  # one module per command


def test_python_m_leverbench_cli_and_a_help_that_loads_nothing_heavy():
    code = ("import sys, runpy; sys.argv = ['leverbench', '--help']\n"
            "try:\n    runpy.run_module('leverbench.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('numpy', 'polars', 'pydantic', 'aiohttp', 'jinja2') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV,
                         timeout=limits.IMPORT_AND_EXIT_S)
    assert res.returncode == 0, res.stderr
    *help_lines, loaded = res.stdout.strip().splitlines()
    assert loaded == "[]"  # --help stays fast: the heavy parts load when a command runs
    assert all(f"  {c} " in "\n".join(help_lines) for c in cli.commands)
    res = subprocess.run([sys.executable, "-m", "leverbench.cli", "sim", "--help"], capture_output=True, text=True,
                         env=ENV, timeout=limits.IMPORT_AND_EXIT_S)
    assert res.returncode == 0 and "--prefill-tps" in res.stdout
    res = subprocess.run([sys.executable, "-m", "leverbench", "sim", "--help"], capture_output=True, text=True,
                         env=ENV, timeout=limits.IMPORT_AND_EXIT_S)
    assert res.returncode == 0 and "--prefill-tps" in res.stdout  # python -m leverbench as well


def test_errors_of_a_command_run_alone_print_one_line_and_exit_with_their_code(tmp_path):
    res = CliRunner().invoke(sim_command, ["--slots", "0"])
    assert (res.exit_code, res.output) == (2, "leverbench: error: slots must be >= 1\n")
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(GOLDEN / "handmade.ledger.jsonl", run / "ledger.jsonl")
    res = CliRunner().invoke(replay_command, [str(run), "--case", "short", "--out", str(tmp_path / "no" / "page.html")])
    assert res.exit_code == 1 and f"leverbench: error: cannot write {tmp_path / 'no' / 'page.html'}: " in res.output
    res = CliRunner().invoke(cli, ["analyze", str(run / "ledger.jsonl"), "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--out writes --format md, json or html" in res.output


@pytest.mark.parametrize("fmt", ["json", "md"])
def test_report_writes_the_run_directory_and_prints(tmp_path, fmt):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(GOLDEN / "sim.ledger.jsonl", run / "ledger.jsonl")
    res = CliRunner().invoke(cli, ["report", str(run), "--format", fmt])
    assert res.exit_code == 0, res.output
    assert {p.name for p in run.iterdir()} == {"ledger.jsonl", "summary.json", "report.md", "report.html"}
    if fmt == "json":
        assert json.loads(res.output) == json.loads((run / "summary.json").read_text())
    else:
        assert res.output == (run / "report.md").read_text() + "\n"
