"""``leverbench run``: run an experiment, then write and print its reports."""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .. import __version__
from ..errors import BadInput
from ..report.terminal import render_terminal
from .common import Command, console, err_console


@click.command(name="run", cls=Command)
@click.argument("experiment", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Run directory (default: runs/NAME-YYYYmmdd-HHMMSS).")
@click.option("--repeats", type=int, help="Override [experiment] repeats.")
@click.option("--resume", is_flag=True, help="Continue the run in --out: completed turns, probes, sentinels and load "
              "stages are not re-run; those that failed (e.g. while the endpoint was down) or were cut short are "
              "re-run, their records kept in the ledger, superseded. Safe to pass always: with nothing to resume "
              "there (no ledger.jsonl, or a run stopped before its first record) it starts the run, and says so.")
@click.option("--adaptive", is_flag=True,
              help="Adaptive repeats: after --repeats rounds, add one repeat at a time only to the comparisons whose "
              "verdict (pays, does not pay, equivalent) is still open, until decided or max_repeats; the file's "
              "[experiment] adaptive settings, else min_effect 1.10, confidence 0.95, max_repeats 12.")
@click.option("--full", is_flag=True,
              help="Print every table and warning after the first screen (report.md and report.html always have "
              "all).")
@click.option("--ray-address", envvar="RAY_ADDRESS", metavar="ADDRESS",
              help="The Ray cluster that load stages with workers > 1 run on (e.g. HOST:6379 of `ray start --head`; "
              "default: $RAY_ADDRESS, else a local cluster started for the run). Needs pip install 'leverbench[ray]'.")
@click.option("--dry-run", is_flag=True,
              help="Print the run's plan and stop: the engines' starts, the warm-ups, each turn, probe and drift "
              "sentinel in the order they would be sent, the metrics scrapes, the engine blocks, the load stages and "
              "an adaptive run's looks (with --resume: what is left). Nothing is started, sent or written.")
def run_command(experiment: Path | None, out_dir: Path | None, repeats: int | None, resume: bool, adaptive: bool,
                full: bool, ray_address: str | None, dry_run: bool) -> None:
    """Run EXPERIMENT (default: the bundled examples/agent-turns.toml on the embedded
    llama.cpp engine), write RUN_DIR/ledger.jsonl (every call, as it ends), then
    summary.json, report.md and report.html, and print the answer: one line per lever
    (its verdict or multiplier, citable or why not), where the time goes, the warnings
    by kind, and where the report is (--full: every table too).

    Ctrl-C (or SIGTERM, SIGHUP) stops at once: the calls in flight are recorded (error class
    cancelled, with what had arrived), the engines are stopped, and the command to resume
    is printed (exit code 130)."""
    from ..config import DEFAULT_EXPERIMENT, load, with_adaptive, with_repeats  # noqa: PLC0415 (pydantic: ~0.13 s)
    from ..runner.resume import nothing_to_resume  # noqa: PLC0415
    from ..runner.run import Interrupted, Runner  # noqa: PLC0415 (aiohttp: ~0.3 s)

    if experiment is None:
        experiment = bundled_example(DEFAULT_EXPERIMENT)
    from ..workload.recorded.expand import with_recorded  # noqa: PLC0415

    exp = with_recorded(with_adaptive(with_repeats(load(experiment), repeats), adaptive))
    if resume and out_dir is None:
        raise BadInput("--resume needs --out RUN_DIR (the run to continue)")
    out = out_dir or default_run_dir(exp.spec.experiment.name)
    ad = exp.spec.experiment.adaptive
    variants = sum(c.variant_of is not None for c in exp.spec.cases)  # the loader made each a case of its own
    cases = f"{len(exp.spec.cases) - variants} cases" + (f" (+{variants} variant{'s' * (variants > 1)})"
                                                          if variants else "")
    err_console.print(f"leverbench {__version__}: {exp.spec.experiment.name}: {len(exp.spec.arms)} arms × "
                      f"{cases} × {exp.spec.experiment.repeats} repeats"
                      + (f" (adaptive: up to {ad.max_repeats})" if ad else "") + f" → {out}", highlight=False)
    for note in dict.fromkeys(c.recorded_skipped for c in exp.spec.cases if c.recorded_skipped):
        err_console.print(f"leverbench: recorded turns: {note}", highlight=False)  # (a warning in the report too)
    if dry_run:
        from ..runner.plan import describe  # noqa: PLC0415

        click.echo("\n".join(describe(Runner(exp, out, resume=resume).plan())))
        return
    if resume and (why := nothing_to_resume(out)) is not None:  # a supervisor may always pass --resume
        click.echo(f"leverbench: nothing to resume in {out} ({why}): starting the run", err=True)
    with _progress() as progress:
        runner = Runner(exp, out, resume=resume, progress=progress, ray_address=ray_address)
        try:
            runner.run()
        except Interrupted:
            shards = " (and its load workers' in ledger.d/)" if (out / "ledger.d").exists() else ""
            err_console.print(f"\ninterrupted; every call is in {out}/ledger.jsonl{shards} (those cut off in flight as "
                              f"'cancelled') and the engines were stopped. Resume with:\n"
                              f"  leverbench run {experiment} --out {out} --resume", highlight=False)
            sys.exit(130)
    from ..pipeline.run_files import report_dir  # noqa: PLC0415 (numpy, scipy and the analysis: after the run)

    summary, _ = report_dir(out)
    err_console.print(f"wrote {out}/ledger.jsonl, summary.json, report.md, report.html\n", highlight=False)
    render_terminal(summary, console, full=full, run_dir=str(out))
    runner.check_some_call_succeeded()  # every call failed: exit 1, the ledger and the reports written


def default_run_dir(name: str) -> Path:
    """runs/NAME-YYYYmmdd-HHMMSS, in local time."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{stamp}"


def bundled_example(relative: Path) -> Path:
    """The bundled experiment (*relative* to the repository root), from the working directory or this
    checkout's root."""
    for cand in (relative, Path(__file__).resolve().parents[3] / relative):
        if cand.exists():
            return cand
    raise BadInput(f"no experiment given and the bundled {relative} was not found; "
                   "run from the repository root or pass an experiment file")


@contextlib.contextmanager
def _progress() -> Iterator[Any]:
    """A progress bar on a terminal; in logs and CI a plain line at the start, per tenth of the work and at the
    end."""
    if err_console.is_terminal:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err_console, transient=False) as prog:
            task = prog.add_task("starting engines", total=None)

            def bar(unit: Any, done: int, total: int) -> None:
                prog.update(task, description=_what(unit), completed=done, total=total)

            yield bar
        return
    t0 = time.monotonic()
    said = [-1]

    def line(unit: Any, done: int, total: int) -> None:
        # in logs and CI: the first unit, then one line per tenth of the work, and the last: ≤ 12 lines
        tenth = done * 10 // max(total, 1)
        if done in (0, total) or tenth != said[0]:
            said[0] = tenth
            click.echo(f"[{done}/{total} {time.monotonic() - t0:6.1f}s] {_what(unit)}", err=True)

    yield line


def _what(unit: Any) -> str:
    """One unit of work in words: 'done', an engine starting, or KIND ARM / CASE #REPEAT."""
    if unit.kind == "engine":
        return f"starting {unit.arm}'s engine (round {unit.repeat + 1})"
    return "done" if unit.kind == "done" else f"{unit.kind} {unit.arm} / {unit.case} #{unit.repeat + 1}"
