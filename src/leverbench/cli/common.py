"""What every ``leverbench`` command shares: its consoles and its one error handler.

Exit codes: 0 ok, 1 runtime failure, 2 bad input, 70 an internal error (a bug: EX_SOFTWARE).  A command
raises a :class:`~leverbench.errors.LeverbenchError` (never prints its own error): the command class below
prints ``leverbench: error: MESSAGE`` on stderr and exits with the error's code, whether the command runs
under the group or alone.  Anything else that escapes a command (a ``TypeError``, a ``RecursionError``, a
``MemoryError``) is a bug in leverbench: it is told in one line, ``leverbench: internal error: TYPE: MESSAGE``,
with exit code 70, and ``LEVERBENCH_DEBUG=1`` lets it through with its traceback.  Click's own exits and
usage errors, Ctrl-C and ``sys.exit`` pass untouched.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

import click
from rich.console import Console

from ..errors import BadInput, LeverbenchError, RuntimeFailure

err_console = Console(stderr=True)
console = Console() if Console().is_terminal else Console(width=150)  # pipes and CI logs get wide tables

EX_SOFTWARE = 70
"""The exit code of an internal error (sysexits.h's EX_SOFTWARE): never what bad input should get."""

DEBUG_ENV = "LEVERBENCH_DEBUG"
_MESSAGE_CHARS = 300  # an internal error's message, cut to one readable line


def one_line(text: str) -> str:
    """*text* as one printable line: a line break or other control character in it (a key or a cell of the
    user's file quoted in a message) written as its escape, ``\\n``, so an error stays the one line it promises."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def fail(exc: LeverbenchError) -> None:
    """The one error path: the message, as one line (:func:`one_line`), on stderr; the error's exit code."""
    click.echo(f"leverbench: error: {one_line(str(exc))}", err=True)
    sys.exit(exc.exit_code)


def internal_error(exc: BaseException) -> None:
    """The last resort for an exception that is no :class:`LeverbenchError`: one line naming it, exit 70."""
    msg = " ".join(str(exc).split())  # one line, whatever the message holds (newlines, control characters)
    msg = "".join(ch if ch.isprintable() else "?" for ch in msg)
    if len(msg) > _MESSAGE_CHARS:
        msg = msg[:_MESSAGE_CHARS] + "…"
    click.echo(f"leverbench: internal error: {type(exc).__name__}: {msg} (a bug in leverbench; rerun with "
               f"{DEBUG_ENV}=1 for the traceback and report it)", err=True)
    sys.exit(EX_SOFTWARE)


# a path the user named that cannot be used as named: bad input; any other error of the system (a full disk,
# too many open files) is a runtime failure
_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.ENOENT, errno.EACCES, errno.EPERM,
                          errno.EROFS, errno.ELOOP, errno.EEXIST, errno.EINVAL})


def path_error(exc: OSError) -> LeverbenchError:
    """An OSError about a path (one a command's option or argument named, a file it writes) as one line naming
    it; the last resort after the commands' own checks, which name the option too."""
    name = os.fsdecode(exc.filename)
    if len(name) > 120:
        name = name[:60] + "…" + name[-40:]
    msg = f"{name}: {exc.strerror or exc}"
    return BadInput(msg) if exc.errno in _PATH_ERRNOS else RuntimeFailure(msg)


class Command(click.Command):
    """A leverbench command: a :class:`LeverbenchError` it raises ends it through :func:`fail`, any other
    exception through :func:`internal_error` (unless ``LEVERBENCH_DEBUG=1``)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LeverbenchError as exc:
            fail(exc)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise  # click's own: it prints and exits as it does for every command
        except Exception as exc:  # noqa: BLE001 (the last resort: KeyboardInterrupt and SystemExit are not caught)
            if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
                raise
            if isinstance(exc, OSError) and exc.filename is not None:
                fail(path_error(exc))  # a path that cannot be used: named, in one line
            internal_error(exc)


SALVAGE_HELP = "Read a damaged ledger past its bad lines (each one reported) instead of stopping at the first."
