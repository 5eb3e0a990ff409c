"""``leverbench whatif TRAFFIC --rates RUN_DIR``: serve a trace on each calibrated arm, simulated; and verify.

A thin command over :func:`leverbench.pipeline.whatif_files.whatif_file` (the simulation:
:mod:`leverbench.analysis.whatif.forecast`); ``--verify`` runs the same slice for real on the run's arms
(:func:`~leverbench.pipeline.whatif_files.verify_experiment`, through the runner) and prints forecast
against measured, storing the errors with the run.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import click

from ..errors import BadInput, RuntimeFailure
from ..workload.traces.names import FORMATS
from . import numbers as n
from .common import SALVAGE_HELP, Command, console, err_console
from .report import of_rates


def _arms(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [a.strip() for a in value.split(",") if a.strip()]
    if not names:
        raise BadInput(f"--arms: {value!r} names no arm; give comma-separated arm names (or leave --arms out: "
                       "every arm)")
    return names


@click.command(name="whatif", cls=Command)
@click.argument("traffic", type=click.Path(path_type=Path))
@click.option("--rates", "rates", type=click.Path(path_type=Path), required=True,
              help="The run whose calibrated arms serve the trace: a run directory (its ledger, else its "
                   "summary.json) or a summary.json file.")
@click.option("--arms", help="Comma-separated arms to serve on (default: every arm with measured rates).")
@click.option("--speed", type=n.SPEED, default=1.0, show_default=True,
              help="Arrival times (and tool waits) divided by this, as a trace stage's speed.")
@click.option("--requests", type=n.REQUESTS, help="Serve the first N calls of the trace.")
@click.option("--scale-input", type=n.SCALE, default=1.0, show_default=True, help="Input lengths times this.")
@click.option("--scale-output", type=n.SCALE, default=1.0, show_default=True, help="Output lengths times this.")
@click.option("--max-input-tokens", type=n.MAX_INPUT, help="Cap on a call's input tokens.")
@click.option("--max-tokens", type=n.TOKENS, help="Cap on a call's output tokens.")
@click.option("--cache-tokens", type=n.CACHE, help="Prefix-cache capacity in tokens, for every arm with a cache "
              "(default: the arm's KV capacity as discovered, else its context length × slots, else 262,144; "
              "on llama.cpp, whose slots keep their own, the capacity of its host-memory prompt cache).")
@click.option("--block-tokens", type=n.BLOCK,
              help="Prefix-cache block size in tokens (default: the arm's; llama.cpp 1; else 16).")
@click.option("--cached-share", type=n.SHARE, help="Assume this leading share of every prompt is common to all calls "
              "where the trace records no sharing (e.g. a system prompt).")
@click.option("--template-tokens", type=n.TOKENS_OR_NONE, default=0, show_default=True,
              help="Tokens the engine's chat template adds to every prompt (a system prompt, the roles), shared "
                   "by all calls: trace replay sends the trace's lengths as content, so --verify's engine sees "
                   "these too (the verification reports them measured).")
@click.option("--orders", type=n.ORDERS,
              help="Calls that arrive at the same instant reach a server in an unknown order: serve this many "
                   "random orders of them (seeded) and report each figure's mean (default 16; 1: the trace's "
                   "order; at most 1,000,000 calls are simulated per arm, so a large trace gets fewer).")
@click.option("--gpus", type=n.GPUS, help="GPUs per server (default: the arm's conditions, else 1).")
@click.option("--gpu-hour-usd", type=n.GPU_HOUR_USD, help="Price of a GPU-hour (default: the arm's conditions).")
@click.option("--trace-format", "fmt", type=click.Choice(FORMATS), help="Format of TRAFFIC (default: detected).")
@click.option("--columns", help="Generic CSV/JSONL columns, as analyze takes them.")
@click.option("--verify", is_flag=True, help="Then serve the same calls for real on the run's arms (its experiment's "
              "engines or endpoints) and print forecast against measured; the errors are stored in "
              "RUN_DIR/whatif-verify.jsonl.")
@click.option("--verify-out", type=click.Path(path_type=Path),
              help="Run directory of the verification (default: RUN_DIR/whatif-verify-YYYYmmdd-HHMMSS).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--salvage", is_flag=True, help=SALVAGE_HELP)
def whatif_command(traffic: Path, rates: Path, arms: str | None, speed: float, requests: int | None,
                   scale_input: float, scale_output: float, max_input_tokens: int | None, max_tokens: int | None,
                   cache_tokens: float | None, block_tokens: int | None, cached_share: float | None,
                   template_tokens: int, orders: int | None, gpus: float | None, gpu_hour_usd: float | None,
                   fmt: str | None, columns: str | None, verify: bool, verify_out: Path | None, as_json: bool,
                   salvage: bool) -> None:
    """Simulate serving TRAFFIC (any format analyze reads) on each arm of a run: arrivals at the
    trace's times (÷ --speed), queueing, the arm's slots and batching as measured (slots known
    without a measured slowdown: both one at a time and in parallel), a prefix cache of finite
    capacity kept as the arm's engine keeps it beside the unbounded upper bound, and its rate model.
    Prints p50/p99 TTFT and end-to-end, throughput, GPU-hours and $ per 1,000 calls per arm, and
    the lever ranking.  --verify serves the same calls for real and prints the forecast's error."""
    if verify_out is not None and verify_out.exists() and not verify_out.is_dir():
        raise BadInput(f"--verify-out: {verify_out} is a file; give a run directory to create")
    from ..pipeline.whatif_files import store_verification, verify_experiment, verify_result, whatif_file  # noqa: PLC0415
    from ..report import whatif as render  # noqa: PLC0415 (polars, numpy: on use)
    from ..report.terminal import render_tables  # noqa: PLC0415

    try:
        result = whatif_file(traffic, rates, arms=_arms(arms), fmt=fmt, columns=columns, speed=speed,
                             scale_input=scale_input, scale_output=scale_output, requests=requests,
                             max_input_tokens=max_input_tokens, max_tokens=max_tokens, cache_tokens=cache_tokens,
                             block_tokens=block_tokens, cached_share=cached_share, gpus=gpus,
                             gpu_hour_usd=gpu_hour_usd, template_tokens=template_tokens, orders=orders,
                             salvage=salvage)
    except BadInput as exc:
        raise of_rates(rates, exc) from None
    if verify:
        exp = verify_experiment(rates, result, salvage=salvage)
        out = verify_out or (Path(rates) if Path(rates).is_dir() else Path(rates).parent) / \
            f"whatif-verify-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
        _run(exp, out)
        result = verify_result(result, out)
        try:
            path = store_verification(rates, result)
        except OSError as exc:
            raise RuntimeFailure(f"{exc.filename or rates}: cannot store the verification: "
                                 f"{exc.strerror or exc}") from None
        err_console.print(f"verification stored in {path}", highlight=False)
    if as_json:
        click.echo(render.render_json(result))
        return
    console.print(render.headline(result), highlight=False)
    render_tables(console, render.whatif_tables(result))
    for line in render.whatif_lines(result):
        console.print(line, highlight=False, markup=False)


def _run(exp: dict, out: Path) -> None:
    """Run the verification experiment in ``out`` (its experiment file written there first)."""
    from ..config import LoadedExperiment  # noqa: PLC0415 (pydantic: on use)
    from ..config.experiment import Experiment  # noqa: PLC0415
    from ..runner.run import Interrupted, Runner  # noqa: PLC0415 (aiohttp: on use)
    from .run import _progress  # noqa: PLC0415

    if (out / "ledger.jsonl").exists():
        raise BadInput(f"{out} already holds a ledger; choose another --verify-out")
    path = out / "experiment.json"
    try:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(exp, indent=1), encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"--verify-out: cannot write {path}: {exc.strerror or exc}") from None
    from pydantic import ValidationError  # noqa: PLC0415

    from ..config.problems import first_error  # noqa: PLC0415

    try:
        spec = Experiment.model_validate(exp)
    except ValidationError as err:  # the run's experiment no longer validates (a bound, a name too long)
        e = first_error(str(path), err, Experiment)
        raise BadInput(f"the verification experiment is not valid: {e} (from the run's experiment and the "
                       "whatif options)") from None
    loaded = LoadedExperiment(path=path, spec=spec, texts={}, tools={})
    err_console.print(f"verifying: {', '.join(a.name for a in spec.arms)} serve the trace for real → {out}",
                      highlight=False)
    with _progress() as progress:
        try:
            Runner(loaded, out, progress=progress).run()
        except Interrupted:
            err_console.print(f"\ninterrupted; what ran is in {out}/ledger.jsonl and the engines were stopped",
                              highlight=False)
            sys.exit(130)
