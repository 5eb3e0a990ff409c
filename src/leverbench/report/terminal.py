"""The terminal report: the same tables as ``report.md``, drawn with rich."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from ..analysis.warning_kinds import warning_groups
from .table import Table
from .tables import all_tables

_BRIEF = ("levers", "verdicts", "results", "volume", "multipliers", "equal_work", "discipline", "reasoning", "shares",
          "probes", "projection", "cost", "load", "load_sweep")


def render_terminal(summary: dict[str, Any], console: Console | None = None, *, full: bool = False) -> None:
    console = console or Console()
    render_tables(console, [t for t in all_tables(summary) if full or t.key in _BRIEF])
    groups = warning_groups(summary)
    if groups:
        console.print("[bold]Warnings[/bold]")
    for kind, heading, texts in groups:
        console.print(Text(f"  {heading}" + (f" [{kind}]" if kind else ""), style="bold"))
        for w in texts:
            console.print(f"    - {w}", highlight=False, markup=False)


def render_tables(console: Console, tables: list[Table | None]) -> None:
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
