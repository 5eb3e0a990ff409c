"""Test-wide setup: ``tests/`` on the import path (for ``ledgers``), and no skipped test in CI.

``.ci/run`` sets LEVERBENCH_REQUIRE_ENGINE=1, LEVERBENCH_REQUIRE_CHROMIUM=1, LEVERBENCH_REQUIRE_VLLM=1,
LEVERBENCH_REQUIRE_RAY=1 and LEVERBENCH_REQUIRE_COMPILED_LLAMA=1: then every part a test needs must be there,
and a test that skips anyway (a skip added later, a missing data file someone guarded with a skip) is
reported as a failure, not passed over.
"""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# every summary a test builds is checked against leverbench.summary/1 (analysis.summary.summarize), in this
# process and in the leverbench commands the tests start
os.environ["LEVERBENCH_CHECK_SUMMARY"] = "1"

REQUIRE_ALL = all(os.environ.get(v) for v in ("LEVERBENCH_REQUIRE_ENGINE", "LEVERBENCH_REQUIRE_CHROMIUM"))
REQUIRE_VLLM = bool(os.environ.get("LEVERBENCH_REQUIRE_VLLM"))
REQUIRE_RAY = bool(os.environ.get("LEVERBENCH_REQUIRE_RAY"))
REQUIRE_COMPILED = bool(os.environ.get("LEVERBENCH_REQUIRE_COMPILED_LLAMA"))
# optional installs: a test with one of these markers is required only when its variable is set
OPTIONAL = {"vllm": (REQUIRE_VLLM, "LEVERBENCH_REQUIRE_VLLM is"), "ray": (REQUIRE_RAY, "LEVERBENCH_REQUIRE_RAY is"),
            "compiled_llama": (REQUIRE_COMPILED, "LEVERBENCH_REQUIRE_COMPILED_LLAMA is")}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skip is a failure when CI requires every part: the tests marked ``vllm`` when
    LEVERBENCH_REQUIRE_VLLM is set (vLLM is an optional install), those marked ``ray`` when
    LEVERBENCH_REQUIRE_RAY is (the extra leverbench[ray]), those marked ``compiled_llama`` when
    LEVERBENCH_REQUIRE_COMPILED_LLAMA is (scripts/install.sh --compile-llama), every other test when
    LEVERBENCH_REQUIRE_ENGINE and LEVERBENCH_REQUIRE_CHROMIUM are."""
    outcome = yield
    rep = outcome.get_result()
    marker = next((m for m in OPTIONAL if item.get_closest_marker(m)), None)
    required, what = OPTIONAL[marker] if marker else \
        (REQUIRE_ALL, "LEVERBENCH_REQUIRE_ENGINE and LEVERBENCH_REQUIRE_CHROMIUM are")
    if required and rep.skipped and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = f"skipped although {what} set (CI runs every test): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same at collection: a module that skips itself whole (``pytest.importorskip``, a module-level
    ``pytest.skip``) is a failure in CI."""
    outcome = yield
    rep = outcome.get_result()
    if REQUIRE_ALL and rep.outcome == "skipped":
        rep.outcome = "failed"
        rep.longrepr = (f"{collector.nodeid}: skipped at collection although LEVERBENCH_REQUIRE_ENGINE and "
                        f"LEVERBENCH_REQUIRE_CHROMIUM are set (CI runs every test): {rep.longrepr}")
