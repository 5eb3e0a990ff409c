"""``leverbench report``: recompute a run's reports from its ledger alone."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import BadInput, RuntimeFailure
from ..report.jsonio import finite
from ..report.markdown import render_markdown
from ..report.terminal import render_terminal
from .common import SALVAGE_HELP, Command, console


def of_run(run_dir: Path, exc: BadInput) -> BadInput:
    """A run's bad input named by its run directory, where the message does not name a file of it already (the
    analysis's errors name the arm and the key, not the file they came from)."""
    text = str(exc)
    return exc if text.startswith(str(run_dir)) else BadInput(f"{run_dir}: {text}")


def of_rates(rates: Path | None, exc: BadInput) -> BadInput:
    """An error about one of the arms (``arm 'x': ...``) of the run given to ``--rates``, named by it."""
    return BadInput(f"--rates {rates}: {exc}") if rates is not None and str(exc).startswith("arm ") else exc


@click.command(name="report", cls=Command)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "md", "json", "html"]), default="table", show_default=True,
              help="table: the first screen (one line per lever, where the time goes; --full: every table); "
                   "md: report.md to stdout; json: summary.json to stdout; "
                   "html: write RUN_DIR/report.html (self-contained, with the side-by-side replay) and print its path.")
@click.option("--write/--no-write", default=True, show_default=True,
              help="Also (re)write summary.json, report.md and report.html in RUN_DIR.")
@click.option("--full", is_flag=True, help="With --format table: every table and warning after the first screen.")
@click.option("--salvage", is_flag=True, help=SALVAGE_HELP)
def report_command(run_dir: Path, fmt: str, write: bool, full: bool, salvage: bool) -> None:
    """Recompute everything from RUN_DIR/ledger.jsonl alone (no server needed) and print it.

    A ledger whose last line was cut by a crash is read with a note; a bad line
    anywhere else stops with an error naming it, unless --salvage."""
    from ..pipeline.run_files import report_dir  # noqa: PLC0415 (numpy and the analysis: ~0.13 s)

    try:
        summary, _ = report_dir(run_dir, salvage=salvage, write=write or fmt == "html")
    except (IsADirectoryError, NotADirectoryError, PermissionError, FileNotFoundError) as exc:
        raise BadInput(f"{exc.filename or run_dir}: cannot write the report there: {exc.strerror or exc}"
                       + ("; move it away, or pass --no-write" if fmt != "html" else "")) from None
    except OSError as exc:  # the disk full, an I/O error: not the input's fault
        raise RuntimeFailure(f"{exc.filename or run_dir}: cannot write the report: {exc.strerror or exc}") from None
    except BadInput as exc:
        raise of_run(run_dir, exc) from None
    if fmt == "html":
        click.echo(str(Path(run_dir) / "report.html"))
    elif fmt == "json":
        click.echo(json.dumps(finite(summary), indent=1, ensure_ascii=False))
    elif fmt == "md":
        click.echo(render_markdown(summary))
    else:
        render_terminal(summary, console, full=full, run_dir=str(run_dir))
