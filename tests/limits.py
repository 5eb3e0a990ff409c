"""Every time limit the tests use, named once (issue 23: tests that hold on a busy machine).

A limit here bounds how long a test *waits* for something that, on a quiet machine, takes a small fraction of it:
it says "this has hung", never "this was slow".  Each is sized for the worst machine the suite runs on: 2 cores,
both busy with other work (another test suite, an engine), where everything runs 5–10x slower than quiet, with
room on top.  A test that measures speed does not belong in ``tests/`` at all (``benchmarks/``); a test that
checks an accuracy against the simulator compares with what the simulator logged it did (``/sim/truth``),
which a loaded CPU moves as much as the measurement, not with the simulator's set rates.

Not here: the pacing of a scenario (``time.sleep`` between a test's own steps, a simulator's set speeds, a
client timeout that a test makes fire on purpose, such as a 0.3 s first-token timeout against a 2 s stall):
those are the test's input, not a limit on waiting.

The longest wait a test may compose from these stays below :data:`PYTEST_TIMEOUT_S`, the per-test backstop
(pytest-timeout) that ``pyproject.toml`` sets to the same value (``tests/test_limits.py`` checks they agree).
"""

from __future__ import annotations

# ------------------------------------------------------------------ processes

IMPORT_AND_EXIT_S = 120.0
"""A subprocess that imports the tool, does next to nothing and exits (``leverbench --help``, ``python -c``
importing a module, a shell script refusing its arguments).  Quiet: 1–2 s."""

SMALL_COMMAND_S = 300.0
"""A subprocess that runs one short command on small local files and exits (``leverbench report`` of a small
run, a nested ``pytest`` of a one-test file, a headless browser loading one page).  Quiet: 2–5 s."""

SMALL_RUN_S = 600.0
"""A whole small ``leverbench run`` on the simulator (a few arms × cases × repeats, probes, maybe a short load
stage), in a subprocess or in this process, until it has exited.  Quiet: 3–45 s (the longest: the resume tests'
full runs)."""

STOP_S = 120.0
"""A process asked to stop (SIGINT, SIGTERM: a run recording its calls in flight, a server shutting down)
until it has exited.  Quiet: under 1 s."""

KILLED_S = 60.0
"""A process sent SIGKILL (or one that exits by itself at once) until it is reaped.  Quiet: milliseconds."""

# ------------------------------------------------------------------ servers and threads

SERVER_READY_S = 120.0
"""A server this test started (a simulator in a thread or a subprocess, a stub server) until it answers: its
URL printed, its health answered, its 'started' event set.  Quiet: well under 1 s (the interpreter's start
included: 1–2 s)."""

HTTP_S = 60.0
"""One HTTP request to a server on this machine (a simulator's chat answer of a few dozen tokens, its
``/sim/truth``, a health check), until the whole answer is read.  Quiet: milliseconds to 0.5 s."""

THREAD_STOP_S = 60.0
"""A thread (or an event loop on one) asked to stop, until it has finished: a stub server's loop, a helper
thread the test started.  Quiet: milliseconds."""

ENGINE_START_S = 600.0
"""A real engine (llama.cpp's server on the small model the tests use) started until it answers its health check.
Quiet: 2–10 s (loading the model, warming up)."""

ENGINE_CALL_S = 300.0
"""One chat completion of a few dozen tokens on that real engine, until the whole answer is read.  Quiet: 1–5 s
(its 2 threads share the cores with everything else)."""

# ------------------------------------------------------------------ waiting for a condition

PROGRESS_S = 300.0
"""A run (or a server) started by this test until it reaches the point the test waits for: its first turns in
the ledger, a call in flight at the simulator, a load stage started, a worker's first records.  Quiet: 1–10 s
(the interpreter's start, discovery and warm-up included)."""

SETTLE_S = 60.0
"""Something that finishes on its own shortly after the step the test has waited for (the simulator's last
records after the client gave up on a stalled call, a cleanup a signal set off, a process group emptying).
Quiet: up to a few seconds."""

# ------------------------------------------------------------------ the backstop

PYTEST_TIMEOUT_S = 1800
"""The per-test limit of pytest-timeout (``[tool.pytest.ini_options] timeout`` in ``pyproject.toml``): a test
that hangs somewhere no limit above covers is stopped with its stack after this.  The slowest test, the real
engine's end-to-end run, took 370 s on this 2-core machine busy with another engine; 600 s left it no margin."""
