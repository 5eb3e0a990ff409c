"""``leverbench replay``: one HTML page where arms' answers stream side by side at their recorded times."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from .errors import LeverbenchError


def default_out(run_dir: Path, case: str) -> Path:
    """RUN_DIR/replay-CASE.html, the case name made safe for a file name."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", case).strip("-.") or "case"
    return Path(run_dir) / f"replay-{slug}.html"


@click.command(name="replay")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--case", "case", required=True, help="The case to replay (its name in the experiment).")
@click.option("--arms", "arms", default=None,
              help="Comma-separated arms, shown in this order (default: every arm of the run).")
@click.option("--repeat", "repeat", default=0, show_default=True, type=int, help="Which repeat (0 is the first).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="Output file (default: RUN_DIR/replay-CASE.html).")
@click.option("--salvage", is_flag=True,
              help="Read a damaged ledger past its bad lines (each one reported) instead of stopping at the first.")
def replay_command(run_dir: Path, case: str, arms: str | None, repeat: int, out: Path | None, salvage: bool) -> None:
    """Write a self-contained HTML page replaying one turn of RUN_DIR side by side.

    The chosen arms' answers stream into adjacent panes at the chunk times
    recorded in the ledger, all starting together, with play/pause, speed
    (1x, 2x, 5x) and a clock. The answers' text is shown only when the run
    stored it ([experiment] store_text = true); otherwise the page replays
    the timing and says so. The page fetches nothing and opens offline.
    """
    from .ledger.reader import read_ledger  # noqa: PLC0415
    from .report.html import render_replay  # noqa: PLC0415

    try:
        ledger = read_ledger(run_dir, salvage=salvage)
        if arms is None:
            arm_list = [a["name"] for a in (ledger.header.get("config") or {}).get("arms", [])]
        else:
            arm_list = [a.strip() for a in arms.split(",") if a.strip()]
        page = render_replay(ledger, case, arm_list, repeat)
        path = out or default_out(run_dir, case)
        path.write_text(page, encoding="utf-8")
    except LeverbenchError as exc:
        click.echo(f"leverbench: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        click.echo(f"leverbench: error: cannot write {out or default_out(run_dir, case)}: {exc.strerror or exc}", err=True)
        sys.exit(1)
    stored = bool(((ledger.header.get("config") or {}).get("experiment") or {}).get("store_text"))
    if not stored and not any("chunk_text" in c for c in ledger.of_kind("call")):
        click.echo("note: this run did not store its text (store_text = false), so the replay shows timing only; "
                   "set store_text = true under [experiment] to replay the answers.", err=True)
    click.echo(str(path))
