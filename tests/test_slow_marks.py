"""The README's test command leaves the slow tests to CI and says so (issue 39 §8, tests/conftest.py): a bare
``pytest`` deselects the tests marked ``slow`` and counts them in its summary; LEVERBENCH_SLOW=1 (``.ci/run``
sets it) runs them; named files or ``-m`` run what they name; and CI's LEVERBENCH_REQUIRE_* without
LEVERBENCH_SLOW is an error, never a pass that left them out."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import limits

TESTS = Path(__file__).parent
ROOT = TESTS.parent
PROBE = '''import pytest


def test_fast():
    pass


@pytest.mark.slow
def test_slow():
    pass


@pytest.mark.slow
@pytest.mark.vllm
def test_slow_vllm():
    pass
'''
INI = "[pytest]\ntestpaths = .\nmarkers =\n    slow: x\n    vllm: x\n"  # as pyproject.toml: tests found by testpaths


def _pytest(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """pytest in *tmp* (the probe module, this suite's conftest.py) with *args*, under none of CI's variables but
    *env*."""
    (tmp / "test_probe.py").write_text(PROBE)
    (tmp / "pytest.ini").write_text(INI)
    shutil.copy(TESTS / "conftest.py", tmp / "conftest.py")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEVERBENCH_REQUIRE") and k != "LEVERBENCH_SLOW"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=tmp,
                          env={**clean, **env}, capture_output=True, text=True, timeout=limits.SMALL_COMMAND_S)


def test_a_bare_pytest_leaves_the_slow_tests_out_and_says_so(tmp_path):
    res = _pytest(tmp_path)
    assert res.returncode == 0, res.stdout
    assert "1 passed, 2 deselected" in res.stdout
    assert "2 slow tests not run: .ci/run runs them (LEVERBENCH_SLOW=1" in res.stdout


def test_leverbench_slow_named_files_and_m_run_them(tmp_path):
    for args, env, ran in (((), {"LEVERBENCH_SLOW": "1"}, "3 passed in"), (("test_probe.py",), {}, "3 passed in"),
                           (("-m", "slow"), {}, "2 passed, 1 deselected in")):  # -m deselects test_fast itself
        res = _pytest(tmp_path, *args, **env)
        assert res.returncode == 0 and ran in res.stdout, (args, env, res.stdout)
        assert "not run" not in res.stdout, (args, env, res.stdout)


def test_ci_s_variables_without_leverbench_slow_are_an_error_not_a_pass(tmp_path):
    required = {"LEVERBENCH_REQUIRE_ENGINE": "1", "LEVERBENCH_REQUIRE_CHROMIUM": "1"}
    res = _pytest(tmp_path, **required)
    assert res.returncode != 0 and "LEVERBENCH_SLOW is not set" in res.stdout + res.stderr
    assert "passed" not in res.stdout
    # an optional install's variable requires its own tests: the slow vLLM one here
    res = _pytest(tmp_path, LEVERBENCH_REQUIRE_VLLM="1")
    assert res.returncode != 0 and "LEVERBENCH_REQUIRE_VLLM is set" in res.stdout + res.stderr
    res = _pytest(tmp_path, LEVERBENCH_SLOW="1", **required)
    assert res.returncode == 0 and "3 passed" in res.stdout, res.stdout


def test_ci_runs_the_readmes_test_command_with_the_slow_tests_on():
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^export .*\bLEVERBENCH_SLOW=1\b", ci, re.M), ".ci/run does not turn the slow tests on"
    assert ci.rstrip().splitlines()[-1] == ".venv/bin/pytest"


def test_the_readmes_command_keeps_a_real_engine_end_to_end_run():
    """The embedded llama.cpp engine is what a user runs first: its end-to-end test carries the engine's marks and
    no ``slow`` (read from the file: collecting it would start nothing but cost an interpreter)."""
    text = (TESTS / "test_engine.py").read_text()
    assert "def test_end_to_end_on_llama_server(" in text and re.search(r"^pytestmark = ENGINE_MARKS$", text, re.M)
    assert "slow" not in text.lower(), "tests/test_engine.py is the README command's real-engine run: keep it fast"
