"""The exceptions leverbench raises on purpose, in one place.

Every error a user can cause by input is a :class:`BadInput` (exit code 2);
everything that goes wrong while measuring is a :class:`RuntimeFailure`
(exit code 1).  The CLI maps these to exit codes and prints ``str(err)``;
nothing else should escape to the user as a traceback: any other exception
that reaches the CLI is a bug, told in one line as an internal error with exit
code 70 (EX_SOFTWARE; ``LEVERBENCH_DEBUG=1`` shows its traceback), which no
input should ever get (the fuzz suite, ``tests/test_fuzz.py``, checks it).

    LeverbenchError
    ├── BadInput            exit 2
    │   ├── ConfigError     experiment file: file, key, what is wrong
    │   └── LedgerError     unreadable, foreign or too-new ledger
    ├── RuntimeFailure      exit 1
    │   └── EngineError     a server the tool started did not come up or died
    └── SummaryMismatch     exit 70: a summary leverbench built departs from its own schema (a bug)
"""

from __future__ import annotations


class LeverbenchError(Exception):
    exit_code = 1


class BadInput(LeverbenchError):
    exit_code = 2


class ConfigError(BadInput):
    def __init__(self, file: str, key: str, message: str):
        self.file = file
        self.key = key
        self.message = message
        where = f"{file}: {key}: " if key else f"{file}: "
        super().__init__(where + message)


class LedgerError(BadInput):
    pass


class RuntimeFailure(LeverbenchError):
    exit_code = 1


class EngineError(RuntimeFailure):
    pass


class SummaryMismatch(LeverbenchError):
    """A summary built from a ledger that departs from ``leverbench.summary/1`` (:mod:`leverbench.schema`): a bug
    in leverbench, never the input's fault; exit 70 like every internal error."""

    exit_code = 70
