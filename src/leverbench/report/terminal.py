"""The terminal report: the first screen (the answer in a few lines), and with ``full`` the same tables as
``report.md``, drawn with rich, and every warning."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from ..schema.warning_kinds import warning_groups
from .first_screen import first_screen
from .table import Table
from .tables import all_tables

if TYPE_CHECKING:
    from ..schema.summary import Summary


def render_terminal(summary: Summary, console: Console | None = None, *, full: bool = False,
                    run_dir: str | None = None) -> None:
    """The first screen; with *full*, then every table and every warning.  *run_dir*: the run's directory, for
    the lines that say where its HTML report is and how to see every table."""
    console = console or Console()
    hint = None if full else (f"every table: leverbench report {run_dir} --full" if run_dir else "every table: --full")
    html = Path(run_dir) / "report.html" if run_dir else None
    screen = first_screen(summary, report_path=str(html) if html and html.exists() else None, full_hint=hint)
    for i, line in enumerate(screen.lines(width=max(console.width - 1, 60))):
        console.print(Text(line, style="bold" if i == 0 else ""), highlight=False)
    if not full:
        return
    console.print()
    render_tables(console, all_tables(summary))
    groups = warning_groups(summary)
    if groups:
        console.print("[bold]Warnings[/bold]")
    for kind, heading, texts in groups:
        console.print(Text(f"  {heading}" + (f" [{kind}]" if kind else ""), style="bold"))
        for w in texts:
            console.print(f"    - {w}", highlight=False, markup=False)


def render_tables(console: Console, tables: Sequence[Table | None]) -> None:
    for t in tables:
        if t is None or not t.rows:
            continue
        rt = RichTable(title=Text(t.title, style="bold"), title_justify="left", show_lines=False)
        for h in t.headers:
            rt.add_column(Text(h), overflow="fold")
        for row in t.rows:
            rt.add_row(*(Text(c) for c in row))
        console.print(rt)
        for n in t.notes:
            console.print(f"  {n}", style="dim", highlight=False, markup=False)
