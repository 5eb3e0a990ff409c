"""``leverbench replay``: one HTML page where arms' answers stream side by side at their recorded times."""

from __future__ import annotations

from pathlib import Path

import click

from .common import SALVAGE_HELP, Command


@click.command(name="replay", cls=Command)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--case", "case", required=True, help="The case to replay (its name in the experiment).")
@click.option("--arms", "arms", default=None,
              help="Comma-separated arms, shown in this order (default: every arm of the run).")
@click.option("--repeat", "repeat", default=0, show_default=True, type=int, help="Which repeat (0 is the first).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="Output file (default: RUN_DIR/replay-CASE.html).")
@click.option("--salvage", is_flag=True, help=SALVAGE_HELP)
def replay_command(run_dir: Path, case: str, arms: str | None, repeat: int, out: Path | None, salvage: bool) -> None:
    """Write a self-contained HTML page replaying one turn of RUN_DIR side by side.

    The chosen arms' answers stream into adjacent panes at the chunk times
    recorded in the ledger, all starting together, with play/pause, speed
    (1x, 2x, 5x) and a clock. The answers' text is shown only when the run
    stored it ([experiment] store_text = true); otherwise the page replays
    the timing and says so. The page fetches nothing and opens offline.
    """
    from ..pipeline.run_files import write_replay  # noqa: PLC0415 (numpy, the analysis, jinja2: ~0.13 s)

    arm_list = None if arms is None else [a.strip() for a in arms.split(",") if a.strip()]
    path, stored = write_replay(run_dir, case, arm_list, repeat, out, salvage=salvage)
    if not stored:
        click.echo("note: this run did not store its text (store_text = false), so the replay shows timing only; "
                   "set store_text = true under [experiment] to replay the answers.", err=True)
    click.echo(str(path))
