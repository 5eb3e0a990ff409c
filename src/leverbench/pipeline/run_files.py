"""A run directory's files: its summary computed from the ledger, the reports written from it, the replay page.

The library functions behind ``leverbench run``, ``report``, ``project`` and
``replay``; the commands only parse options and print.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis.summary import summarize
from ..config.settings import RunSettings
from ..errors import RuntimeFailure, SummaryMismatch
from ..ledger.reader import Ledger, read_ledger
from ..report.html import render_html, render_replay
from ..report.jsonio import finite
from ..report.markdown import render_markdown

if TYPE_CHECKING:
    from ..ledger.rows import RunHeaderRow
    from ..schema.summary import Summary


def write_reports(run_dir: Path, summary: Summary, ledger: Ledger[RunHeaderRow] | None = None) -> list[Path]:
    """Write summary.json, report.md and report.html (with the replay when *ledger* is given), then check the
    summary against its schema (:mod:`leverbench.schema`): one that departs is a bug, :class:`SummaryMismatch`
    (exit 70) naming where, raised after the files are written (nothing is lost; the ledger is untouched)."""
    from ..schema.check import summary_problems  # noqa: PLC0415 (pydantic)

    run_dir = Path(run_dir)
    paths = [run_dir / "summary.json", run_dir / "report.md", run_dir / "report.html"]
    data = finite(summary)
    paths[0].write_text(json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    paths[1].write_text(render_markdown(summary), encoding="utf-8")
    paths[2].write_text(render_html(data, ledger), encoding="utf-8")
    problems = summary_problems(data)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise SummaryMismatch(f"{paths[0]}: the summary departs from its own schema, leverbench.summary/1: "
                              f"{'; '.join(map(str, problems[:3]))}{more}. This is a bug in leverbench: the files "
                              "are written and the ledger is intact; please report it with "
                              f"`leverbench schema summary --check {paths[0]}`")
    return paths


def summarize_dir(run_dir: Path, *, salvage: bool = False, scenario: tuple[int, int] | None = None,
                  gpu_hour_usd: float | None = None) -> Summary:
    """The summary of RUN_DIR's ledger (*scenario*, *gpu_hour_usd*: :func:`summarize`'s)."""
    return summarize(read_ledger(run_dir, salvage=salvage), scenario=scenario, gpu_hour_usd=gpu_hour_usd)


def report_dir(run_dir: Path, *, salvage: bool = False, write: bool = True) -> tuple[Summary, Ledger[RunHeaderRow]]:
    """Summarize RUN_DIR's ledger and, when *write* and RUN_DIR is a directory (not a bare ledger
    file), (re)write its summary.json, report.md and report.html; return the summary and the ledger."""
    ledger = read_ledger(run_dir, salvage=salvage)
    summary = summarize(ledger)
    if write and Path(run_dir).is_dir():
        write_reports(run_dir, summary, ledger)
    return summary, ledger


def replay_path(run_dir: Path, case: str) -> Path:
    """RUN_DIR/replay-CASE.html, the case name made safe for a file name."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", case).strip("-.") or "case"
    return Path(run_dir) / f"replay-{slug}.html"


def write_replay(run_dir: Path, case: str, arms: list[str] | None = None, repeat: int = 0, out: Path | None = None,
                 *, salvage: bool = False) -> tuple[Path, bool]:
    """Write the replay page of one turn (*arms*: default every arm of the run, in the experiment's
    order) to *out* (default :func:`replay_path`); return its path and whether the run stored the
    answers' text (without it the page replays the timing only)."""
    ledger = read_ledger(run_dir, salvage=salvage)
    config = ledger.header.get("config") or {}
    if arms is None:
        arms = [a["name"] for a in config.get("arms", [])]
    page = render_replay(ledger, case, arms, repeat)
    path = out or replay_path(run_dir, case)
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise RuntimeFailure(f"cannot write {path}: {exc.strerror or exc}") from None
    stored = RunSettings.of_header(config, ledger.path).store_text or any("chunk_text" in c
                                                                            for c in ledger.of_kind("call"))
    return path, stored
