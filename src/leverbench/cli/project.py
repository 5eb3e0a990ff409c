"""``leverbench project``: where one turn's time would go, per arm, and what each lever returns."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import BadInput
from ..report.jsonio import finite
from ..report.tables import cost_table, projection_table
from ..report.terminal import render_tables
from . import numbers as n
from .common import SALVAGE_HELP, Command, console
from .report import of_run


@click.command(name="project", cls=Command)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--input-tokens", type=n.TOKENS, required=True, help="Prompt length of the scenario.")
@click.option("--output-tokens", type=n.TOKENS, required=True,
              help="Generated tokens (reasoning included).")
@click.option("--gpu-hour-usd", type=n.GPU_HOUR_USD, help="Price per GPU-hour when the arms' conditions give none.")
@click.option("--json", "as_json", is_flag=True, help="Print the projection as JSON.")
@click.option("--salvage", is_flag=True, help=SALVAGE_HELP)
def project_command(run_dir: Path, input_tokens: int, output_tokens: int, gpu_hour_usd: float | None, as_json: bool,
                    salvage: bool) -> None:
    """Where the time would go for one turn of INPUT/OUTPUT tokens, per arm, and what each
    lever (arms that differ in one knob) would return, from RUN_DIR's measured rates."""
    from ..analysis.summary import projection_costs  # noqa: PLC0415 (numpy and the analysis: ~0.13 s)
    from ..pipeline.run_files import summarize_dir  # noqa: PLC0415 (as above)

    try:
        summary = summarize_dir(run_dir, scenario=(input_tokens, output_tokens), salvage=salvage)
        costs = projection_costs(summary, gpu_hour_usd)
    except BadInput as exc:
        raise of_run(run_dir, exc) from None
    if as_json:
        click.echo(json.dumps(finite({"projection": summary["projection"], "cost": costs}), indent=1))
        return
    render_tables(console, [projection_table(summary), cost_table({**summary, "cost": costs})])
