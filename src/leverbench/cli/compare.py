"""``leverbench compare``: runs compared with a baseline run, with the guard across runs and an exit code CI can gate
on (0: nothing slower than the threshold, 1: something is, or with ``--strict`` a row undecided beyond it or refused;
2: bad input)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import BadInput
from .common import SALVAGE_HELP, Command, console
from .report import of_run


def _pairs(match: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for m in match:
        base, eq, later = m.partition("=")
        if not eq or not base or not later:
            raise BadInput(f"--match {m!r}: give BASE_ARM=LATER_ARM (an arm of the baseline, the later run's arm)")
        out.append((base, later))
    return out


@click.command(name="compare", cls=Command)
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--baseline", type=click.Path(path_type=Path), default=None, metavar="RUN",
              help="The run the others are compared with (default: the first RUN).")
@click.option("--threshold", type=float, default=1.05, show_default=True,
              help="The factor beyond which a change counts: slower = later / baseline above it with the whole "
                   "interval above 1x (faster: below 1/threshold).")
@click.option("--match", "match", multiple=True, metavar="BASE=LATER",
              help="Compare the baseline's arm BASE with the later run's arm LATER (repeatable); other arms are "
                   "matched by their knobs, then by name.")
@click.option("--format", "fmt", type=click.Choice(["table", "md", "json", "html"]), default="table",
              show_default=True,
              help="table: the terminal's view; md: Markdown; json: the comparison (leverbench schema compare); "
                   "html: one self-contained page with the history plots per arm and lever (redirect it to a file).")
@click.option("--correct-machine", is_flag=True,
              help="Gate the exit code on the verdicts corrected for the machine's speed (from the drift sentinels) "
                   "instead of the measured ones; both are shown either way.")
@click.option("--strict", is_flag=True,
              help="Exit 1 also when a row is undecided beyond the threshold (toward slower) or refused by the guard.")
@click.option("--salvage", is_flag=True, help=SALVAGE_HELP)
def compare_command(runs: tuple[Path, ...], baseline: Path | None, threshold: float, match: tuple[str, ...],
                    fmt: str, correct_machine: bool, strict: bool, salvage: bool) -> None:
    """Compare RUN directories with a baseline run: what changed between them (before any number), the machine's
    speed from the drift sentinels, and per arm and case the ratio of the later run's turn times to the
    baseline's with an interval for unpaired repeats and a verdict (faster, slower, same, undecided); a cell whose
    answers changed length is put on the baseline's work where the correction is small, else refused. Per lever, its
    multiplier in each run and their ratio (pays more, pays less, same; never gated).

    Cases are matched by what they sent, arms by knobs or name. Exit code 0 when nothing is slower than the
    threshold, 1 when something is (the lines that say what come last; with --strict also a row undecided beyond
    the threshold or refused), 2 for bad input."""
    from ..analysis.compare import compare_runs, run_view  # noqa: PLC0415 (numpy, scipy)
    from ..ledger.reader import read_ledger  # noqa: PLC0415
    from ..report.compare import render_markdown, render_text  # noqa: PLC0415

    base_path = baseline if baseline is not None else runs[0]
    laters = [r for r in runs if r != base_path]
    if not laters:
        raise BadInput("give at least two runs: the baseline (first RUN, or --baseline) and a run to compare with it")
    pairs = _pairs(match)
    views = []
    for path in [base_path, *laters]:
        try:
            views.append(run_view(path, read_ledger(path, salvage=salvage)))
        except BadInput as exc:
            raise of_run(path, exc) from None
    result = compare_runs(views[0], views[1:], threshold=threshold, pairs=pairs, correct_machine=correct_machine,
                          strict=strict)
    if fmt == "json":
        from ..report.jsonio import finite  # noqa: PLC0415

        click.echo(json.dumps(finite(result), indent=1, ensure_ascii=False))
    elif fmt == "md":
        click.echo(render_markdown(result), nl=False)
    elif fmt == "html":
        from ..report.compare_html import render_html  # noqa: PLC0415 (jinja2)

        click.echo(render_html(result), nl=False)
    else:
        from ..report.terminal import render_tables  # noqa: PLC0415

        head, parts, closing = render_text(result)
        for line in head:
            console.print(line, style="bold", highlight=False, markup=False)
        for words, tables in parts:
            console.print()
            for line in words:
                console.print(line, highlight=False, markup=False)
            render_tables(console, tables)
        console.print()
        for line in closing:
            console.print(line, highlight=False, markup=False)
    if result["exit_code"]:
        raise click.exceptions.Exit(result["exit_code"])
