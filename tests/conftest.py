"""Test-wide setup: ``tests/`` on the import path (for ``ledgers``), no skipped test in CI, and the slow tests
behind LEVERBENCH_SLOW (issue 39 §8).

``.ci/run`` sets LEVERBENCH_REQUIRE_ENGINE=1, LEVERBENCH_REQUIRE_CHROMIUM=1, LEVERBENCH_REQUIRE_VLLM=1,
LEVERBENCH_REQUIRE_RAY=1 and LEVERBENCH_REQUIRE_COMPILED_LLAMA=1: then every part a test needs must be there,
and a test that skips anyway (a skip added later, a missing data file someone guarded with a skip) is
reported as a failure, not passed over.

The README's test command (a bare ``pytest``) leaves out the tests marked ``slow`` (the real engines' longer
runs, vLLM, Ray, the compiled llama-server, the crash-and-resume and load runs: chosen by their measured
durations) and says so in its summary; ``.ci/run`` sets LEVERBENCH_SLOW=1 and runs them all.  A ``pytest``
given files, test ids or ``-m`` runs what it was given, slow or not.  Where CI's variables require a part and
LEVERBENCH_SLOW is unset, a slow test that would be left out stops the session instead (CI runs every test).
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
SLOW = bool(os.environ.get("LEVERBENCH_SLOW"))
NOT_RUN = pytest.StashKey[int]()  # how many slow tests this session left out


def _required(item: pytest.Item) -> str | None:
    """The variables that require *item* to run, in the words the errors below use; None where none is set."""
    marker = next((m for m in OPTIONAL if item.get_closest_marker(m)), None)
    required, what = OPTIONAL[marker] if marker else \
        (REQUIRE_ALL, "LEVERBENCH_REQUIRE_ENGINE and LEVERBENCH_REQUIRE_CHROMIUM are")
    return what if required else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skip is a failure when CI requires every part: the tests marked ``vllm`` when
    LEVERBENCH_REQUIRE_VLLM is set (vLLM is an optional install), those marked ``ray`` when
    LEVERBENCH_REQUIRE_RAY is (the extra leverbench[ray]), those marked ``compiled_llama`` when
    LEVERBENCH_REQUIRE_COMPILED_LLAMA is (scripts/install.sh --compile-llama), every other test when
    LEVERBENCH_REQUIRE_ENGINE and LEVERBENCH_REQUIRE_CHROMIUM are."""
    outcome = yield
    rep = outcome.get_result()
    what = _required(item)
    if what and rep.skipped and not hasattr(rep, "wasxfail"):
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without LEVERBENCH_SLOW, a bare ``pytest`` (the README's command: no files, ids or ``-m`` given) leaves
    out the tests marked ``slow``; :func:`pytest_terminal_summary` counts them.  Under a LEVERBENCH_REQUIRE_*
    that requires one of them it is an error instead: CI would pass without having run it."""
    if SLOW or config.args_source == pytest.Config.ArgsSource.ARGS or config.getoption("markexpr"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    required = sorted({what for item in slow if (what := _required(item))})
    if required:
        raise pytest.UsageError(f"{len(slow)} tests are marked slow and LEVERBENCH_SLOW is not set, although "
                                f"{'; '.join(required)} set (CI runs every test): .ci/run sets LEVERBENCH_SLOW=1")
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
        config.stash[NOT_RUN] = len(slow)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The slow tests left out, counted where a reader of the summary sees them (never left out silently)."""
    n = config.stash.get(NOT_RUN, 0)
    if n:
        terminalreporter.write_line(f"{n} slow tests not run: .ci/run runs them (LEVERBENCH_SLOW=1; or name "
                                    f"their files: pytest tests/test_x.py)", yellow=True, bold=True)
