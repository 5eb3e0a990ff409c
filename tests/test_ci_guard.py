"""CI must fail, not skip: tests/conftest.py turns a skip into a failure when both LEVERBENCH_REQUIRE_* are set,
at run time and at collection time (a module that skips itself whole)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import limits

CONFTEST = Path(__file__).with_name("conftest.py")


def _pytest(tmp: Path, source: str, required: bool, **more: str) -> subprocess.CompletedProcess:
    (tmp / "test_probe.py").write_text(source)
    shutil.copy(CONFTEST, tmp / "conftest.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERBENCH_REQUIRE")}
    if required:
        env.update(LEVERBENCH_REQUIRE_ENGINE="1", LEVERBENCH_REQUIRE_CHROMIUM="1")
    env.update(more)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp)], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=limits.SMALL_COMMAND_S)


def test_a_skipped_test_fails_in_ci(tmp_path):
    src = "import pytest\n\ndef test_x():\n    pytest.skip('part missing')\n"
    assert _pytest(tmp_path, src, required=False).returncode == 0
    res = _pytest(tmp_path, src, required=True)
    assert res.returncode == 1 and "skipped although" in res.stdout


def test_a_module_skipped_at_collection_fails_in_ci(tmp_path):
    src = "import pytest\npytest.importorskip('no_such_module_anywhere')\n\ndef test_x():\n    pass\n"
    assert "1 skipped" in _pytest(tmp_path, src, required=False).stdout  # (pytest exits 5: no test ran)
    res = _pytest(tmp_path, src, required=True)
    assert res.returncode != 0 and "skipped at collection" in res.stdout


def test_a_ray_test_is_required_only_where_ray_is(tmp_path):
    """A test marked ray (an optional install) may skip under the engine and browser requirements; with
    LEVERBENCH_REQUIRE_RAY (.ci/run installs the extra and sets it) its skip fails."""
    src = "import pytest\n\n@pytest.mark.ray\ndef test_x():\n    pytest.skip('Ray is not installed')\n"
    assert _pytest(tmp_path, src, required=True).returncode == 0
    res = _pytest(tmp_path, src, required=True, LEVERBENCH_REQUIRE_RAY="1")
    assert res.returncode == 1 and "skipped although LEVERBENCH_REQUIRE_RAY is set" in res.stdout
