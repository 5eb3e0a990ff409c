"""``leverbench serve``: the embedded engine, started by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from ..engines.embedded import EmbeddedEngine
from ..engines.llama_flags import FlagError, check
from ..errors import BadInput
from .common import Command, err_console


@click.command(name="serve", cls=Command)
@click.option("--port", type=int, default=8080, show_default=True)
@click.option("--threads", type=int, help="CPU threads (default: all cores, at most 8).")
@click.option("--binary", type=click.Path(exists=True, dir_okay=False, executable=True),
              help="A llama-server binary to run instead of the prebuilt engine (it reads every flag itself).")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve_command(port: int, threads: int | None, binary: str | None, args: tuple[str, ...]) -> None:
    """Start the embedded engine (llama.cpp's server from the prebuilt xllamacpp, with
    SmolLM2-135M-Instruct Q4_1) on 127.0.0.1:PORT for manual use; extra ARGS after -- are
    llama-server flags (those the prebuilt engine maps; --binary for any). Ctrl-C stops it."""
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
    try:
        sys.exit(subprocess.call(cmd))
    except KeyboardInterrupt:
        sys.exit(0)
