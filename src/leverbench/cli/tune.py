"""``leverbench tune``: the configuration to run, searched on the experiment's own turns (issue 40)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .common import Command, console, err_console

if TYPE_CHECKING:
    from ..tune.space import RaceResult


@click.command(name="tune", cls=Command)
@click.argument("tune_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="(Required, but with --dry-run.) The tune's directory: tune.jsonl (its ledger of races), "
              "races/NNN/ (each race's run: ledger, summary, reports), tune.json (the answer) and tune.html (the "
              "answer, a plot of the search per operating point and every race, linked to its report).")
@click.option("--resume", is_flag=True, help="Continue the tune in --out: finished races are read back from their "
              "ledgers (not run again), the race a kill cut short is resumed where its run stopped, and the search "
              "goes on from there. Safe to pass always: with no tune in --out it starts one.")
@click.option("--dry-run", is_flag=True, help="Print the search and stop: the knobs and their values, the baseline, "
              "the exclusions, the operating points, the objective, and every allowed configuration with the engine "
              "it would start (its command, or the engine line for knobs named by lever). Nothing is started or "
              "written.")
def tune_command(tune_file: Path, out_dir: Path | None, resume: bool, dry_run: bool) -> None:
    """Search TUNE_FILE's space for the configuration to run: an experiment file whose one
    arm is a command template (engine = { kind = "command", command = "... {port} ...
    {KNOB} ..." }), or the embedded llama.cpp or vLLM engine with knobs that name levers
    (drafter, draft_tokens, slots, prefix_cache, ...: the tool writes their flags), and
    whose [tune] table names the knobs and their values, the baseline, the exclusions,
    the least effect and the budget (docs/tune.md).

    From the baseline, one knob is changed at a time and the candidate raced against the
    incumbent: a two-arm run of the experiment, paired and interleaved, with adaptive
    repeats until its sequential verdict is decided (better, no better, worse) or its most
    repeats; every guard applies, and a refused race never makes a candidate win. A
    candidate decided better becomes the incumbent; sweeps go on until no single change
    pays; then the winner is raced against each one-knob neighbour and the baseline.

    Prints the configuration to run with its launch command (for the embedded and vLLM
    engines, the experiment file's engine line that starts it), its verdict against the
    baseline, each race, and the engine-seconds spent beside the full grid's estimate.
    Ctrl-C (or SIGTERM, SIGHUP) stops the tune: a race under way stops as `leverbench run`
    does, its engines stopped; --resume continues."""
    from ..config.tune import load_tune  # noqa: PLC0415 (pydantic)
    from ..report.tune import race_line, render_tune  # noqa: PLC0415
    from ..runner.run import Interrupted  # noqa: PLC0415 (aiohttp)
    from ..tune.run import race_row, run_tune  # noqa: PLC0415

    tune = load_tune(tune_file)
    if dry_run:
        from ..tune.run import plan  # noqa: PLC0415

        console.print("\n".join(plan(tune)), highlight=False, soft_wrap=True, markup=False)
        return
    if out_dir is None:
        raise click.UsageError("--out DIR is needed: the tune's directory (or --dry-run, which writes nothing)")
    if not resume and (out_dir / "tune.jsonl").exists():
        raise click.UsageError(f"{out_dir} already holds a tune: pass --resume to continue it, or another --out")

    def said(n: int, result: RaceResult | None, what: str) -> None:
        line = what if result is None else race_line(race_row(result))
        err_console.print(f"race {n}: {line}", highlight=False, soft_wrap=True)

    from ..runner.signals import interrupt_on, release_signals  # noqa: PLC0415

    held = interrupt_on()  # SIGTERM and SIGHUP between races stop the tune as Ctrl-C does
    try:
        summary = run_tune(tune, out_dir, progress=said)
    except (Interrupted, KeyboardInterrupt):
        err_console.print(f"\ninterrupted; every race's calls are in {out_dir}/races/*/ledger.jsonl and the engines "
                          f"were stopped. Resume with:\n  leverbench tune {tune_file} --out {out_dir} --resume",
                          highlight=False)
        sys.exit(130)
    finally:
        release_signals(held)
    console.print(render_tune(summary), highlight=False, soft_wrap=True)
    from ..report.tune_html import render_tune_html  # noqa: PLC0415 (jinja2)

    (out_dir / "tune.html").write_text(render_tune_html(summary, out_dir), encoding="utf-8")
    err_console.print(f"wrote {out_dir}/tune.json and {out_dir}/tune.html", highlight=False)
