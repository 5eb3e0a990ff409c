"""``leverbench serve``: the embedded engine, started by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from ..engines.embedded import EmbeddedEngine
from ..engines.llama_flags import FlagError, check
from ..engines.process import spawn, stop_group
from ..errors import BadInput
from ..runner.signals import STOP_SIGNALS, hold_signals, interrupt_on, release_signals
from .common import Command, err_console

STOP_TIMEOUT_S = 10.0  # the engine's own stop, after SIGTERM, before SIGKILL
ORPHAN_GRACE_S = 5.0  # what its process group holds after it has exited


@click.command(name="serve", cls=Command)
@click.option("--port", type=int, default=8080, show_default=True)
@click.option("--threads", type=int, help="CPU threads (default: all cores, at most 8).")
@click.option("--binary", type=click.Path(exists=True, dir_okay=False, executable=True),
              help="A llama-server binary to run instead of the prebuilt engine (it reads every flag itself).")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve_command(port: int, threads: int | None, binary: str | None, args: tuple[str, ...]) -> None:
    """Start the embedded engine (llama.cpp's server from the prebuilt xllamacpp, with
    SmolLM2-135M-Instruct Q4_1) on 127.0.0.1:PORT for manual use; extra ARGS after -- are
    llama-server flags (those the prebuilt engine maps; --binary for any). Ctrl-C, SIGTERM or
    SIGHUP stops it and the engine (exit code 0); the engine also stops if this command is killed."""
    if binary is None:
        try:
            check(list(args))
        except FlagError as exc:
            raise BadInput(str(exc).replace('engine = { kind = "embedded", binary = "PATH" }', "--binary PATH")) \
                from None
    eng = EmbeddedEngine("serve", list(args), Path("/dev/null"), threads=threads, binary=binary)
    eng.port = port
    cmd = eng.command()
    err_console.print("$ " + " ".join(cmd), highlight=False)
    sys.exit(serve_until_stopped(cmd))


def serve_until_stopped(cmd: list[str]) -> int:
    """Run *cmd* until it exits (its exit code) or a stop signal comes (0).  It runs in a process group of its
    own that dies with this process (:func:`~leverbench.engines.process.spawn`): a supervisor's SIGTERM or a
    closed terminal's SIGHUP, left at its default, would end this process and leave the engine holding the
    port; here each stops the engine's whole group first, with further signals held meanwhile."""
    previous = interrupt_on(STOP_SIGNALS)
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = spawn(cmd, stdin=subprocess.DEVNULL)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        held = hold_signals()
        try:
            if proc is not None:
                stop_group(proc, STOP_TIMEOUT_S, ORPHAN_GRACE_S)
        finally:
            release_signals(held)
            release_signals(previous)
