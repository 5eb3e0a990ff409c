"""The report's unit: a :class:`Table` of plain strings, as every renderer (terminal, Markdown, HTML) takes it.

A leaf module: the modules that build tables (:mod:`.tables`, :mod:`.guard_tables`, :mod:`.load_tables`,
:mod:`.traffic`) and those that render them import it, and it imports none of them.  It also holds the two
number formats every table uses (:func:`s`, :func:`pct`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def s(x: float | None, nd: int = 1) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def pct(x: float | None, nd: int = 0) -> str:
    return "—" if x is None else f"{x * 100:.{nd}f}%"


@dataclass
class Table:
    """One table: ``key`` names it for the renderers (HTML sections), ``rows`` are already formatted."""

    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
