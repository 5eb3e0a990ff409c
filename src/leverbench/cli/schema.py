"""``leverbench schema``: the JSON Schema of a file leverbench writes, or a file checked against it."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import BadInput
from .common import Command


@click.command(name="schema", cls=Command)
@click.argument("which", type=click.Choice(["summary", "compare"]))
@click.option("--check", "check", type=click.Path(path_type=Path), default=None, metavar="PATH",
              help="Check PATH (a summary.json or the run directory that holds it) against the schema instead of "
                   "printing it: one line per problem, exit code 2 when it departs.")
def schema_command(which: str, check: Path | None) -> None:
    """Print the JSON Schema of WHICH (summary: summary.json, leverbench.summary/1; compare: the output of
    leverbench compare --format json, leverbench.compare/2).

    The schema is derived from the typed rows the analysis builds and the
    reports read (leverbench.schema); a copy is in docs/summary.schema.json.
    Every key is named, no other key is allowed, and the numbers a reader
    computes with carry their bounds.
    """
    if which == "compare":
        from ..schema.compare_rows import compare_json_schema  # noqa: PLC0415 (pydantic)

        if check is not None:
            raise BadInput("--check reads a summary.json: give `leverbench schema summary --check PATH`")
        click.echo(compare_json_schema(), nl=False)
        return
    from ..pipeline.summary_file import read_summary  # noqa: PLC0415 (pydantic)
    from ..schema.check import summary_json_schema  # noqa: PLC0415

    if check is None:
        click.echo(summary_json_schema(), nl=False)
        return
    read_summary(check, whole=True)
    click.echo(f"{check}: fits leverbench.summary/1")
