"""Whether the embedded engine (the prebuilt xllamacpp and SmolLM2) is installed, and the marks a module of tests
that starts it carries: ``engine``, and a skip without it unless LEVERBENCH_REQUIRE_ENGINE is set (CI sets it; a
skip is then a failure: tests/conftest.py); ``slow`` as well where its runs take minutes."""

from __future__ import annotations

import os

import pytest

from leverbench.engines.embedded import model_path, prebuilt_available
from leverbench.errors import EngineError

try:
    model_path()
    HAVE_ENGINE = prebuilt_available()
except EngineError:
    HAVE_ENGINE = False

ENGINE_MARKS = [
    pytest.mark.engine,
    pytest.mark.skipif(not HAVE_ENGINE and not os.environ.get("LEVERBENCH_REQUIRE_ENGINE"),
                       reason="embedded engine not installed (scripts/install.sh)"),
]
SLOW_ENGINE_MARKS = [*ENGINE_MARKS, pytest.mark.slow]
"""A module whose real-engine runs take minutes: left out of the README's test command, run by ``.ci/run``
(LEVERBENCH_SLOW=1: tests/conftest.py).  tests/test_engine.py's end-to-end run stays in the README's command."""
