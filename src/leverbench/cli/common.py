"""What every ``leverbench`` command shares: its consoles and its one error handler.

Exit codes: 0 ok, 1 runtime failure, 2 bad input.  A command raises a
:class:`~leverbench.errors.LeverbenchError` (never prints its own error): the
command class below prints ``leverbench: error: MESSAGE`` on stderr and exits
with the error's code, whether the command runs under the group or alone.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.console import Console

from ..errors import LeverbenchError

err_console = Console(stderr=True)
console = Console() if Console().is_terminal else Console(width=150)  # pipes and CI logs get wide tables


def fail(exc: LeverbenchError) -> None:
    """The one error path: the message on stderr, the error's exit code."""
    click.echo(f"leverbench: error: {exc}", err=True)
    sys.exit(exc.exit_code)


class Command(click.Command):
    """A leverbench command: a :class:`LeverbenchError` it raises ends it through :func:`fail`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LeverbenchError as exc:
            fail(exc)


SALVAGE_HELP = "Read a damaged ledger past its bad lines (each one reported) instead of stopping at the first."
