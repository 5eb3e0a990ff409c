"""The report's unit: a :class:`Table` of plain strings, as every renderer (terminal, Markdown, HTML) takes it.

A leaf module: the modules that build tables (:mod:`.tables`, :mod:`.load_tables`, :mod:`.traffic`) and
those that render them import it, and it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Table:
    """One table: ``key`` names it for the renderers (HTML sections), ``rows`` are already formatted."""

    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
