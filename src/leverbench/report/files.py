"""Write a run directory's computed files from its ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..analysis.summary import summarize
from ..ledger.reader import read_ledger
from .jsonio import finite
from .markdown import render_markdown


def write_reports(run_dir: Path, summary: dict[str, Any], ledger: Any = None) -> list[Path]:
    """Write summary.json, report.md and report.html (with the replay when *ledger* is given)."""
    from .html import render_html  # noqa: PLC0415 (jinja2 only when writing)

    run_dir = Path(run_dir)
    paths = [run_dir / "summary.json", run_dir / "report.md", run_dir / "report.html"]
    paths[0].write_text(json.dumps(finite(summary), indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    paths[1].write_text(render_markdown(summary), encoding="utf-8")
    paths[2].write_text(render_html(finite(summary), ledger), encoding="utf-8")
    return paths


def summarize_dir(run_dir: Path, *, salvage: bool = False, **kw: Any) -> dict[str, Any]:
    return summarize(read_ledger(run_dir, salvage=salvage), **kw)
