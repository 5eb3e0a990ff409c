"""The ``leverbench`` command: thin commands over library functions.

Exit codes: 0 ok, 1 runtime failure, 2 bad input.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import __version__
from .cli_analyze import analyze_command
from .cli_replay import replay_command
from .cli_sim import sim_command
from .config import DEFAULT_EXPERIMENT, load, with_repeats
from .errors import BadInput, LeverbenchError

err_console = Console(stderr=True)
console = Console() if Console().is_terminal else Console(width=150)  # pipes and CI logs get wide tables


def _fail(exc: LeverbenchError) -> None:
    click.echo(f"leverbench: error: {exc}", err=True)
    sys.exit(exc.exit_code)


class _Group(click.Group):
    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except LeverbenchError as exc:
            _fail(exc)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="leverbench")
def cli() -> None:
    """Measure where an LLM serving stack's wall clock goes (prefill, decode, the rest)
    and which lever pays back (prefix cache, speculative-decoding drafter), from an
    append-only ledger of real model calls.

    Exit codes: 0 ok, 1 runtime failure, 2 bad input.
    """


def _default_out(name: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{stamp}"


@cli.command()
@click.argument("experiment", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Run directory (default: runs/NAME-YYYYmmdd-HHMMSS).")
@click.option("--repeats", type=int, help="Override [experiment] repeats.")
@click.option("--resume", is_flag=True, help="Continue the run in --out: completed turns, probes, sentinels and load "
              "stages are not re-run; those that failed (e.g. while the endpoint was down) or were cut short are re-run, "
              "their records kept in the ledger, superseded.")
@click.option("--full", is_flag=True, help="Print every table, not only the main ones (report.md and report.html always have all).")
def run(experiment: Path | None, out_dir: Path | None, repeats: int | None, resume: bool, full: bool) -> None:
    """Run EXPERIMENT (default: the bundled examples/agent-turns.toml on the embedded
    llama.cpp engine), write RUN_DIR/ledger.jsonl (every call, as it ends), then
    summary.json, report.md and report.html, and print the result tables.

    Ctrl-C (or SIGTERM) stops at once: the calls in flight are recorded (error class
    cancelled, with what had arrived), the engines are stopped, and the command to resume
    is printed (exit code 130)."""
    from .report.files import write_reports  # noqa: PLC0415
    from .report.terminal import render_terminal  # noqa: PLC0415
    from .runner.run import Interrupted, Runner  # noqa: PLC0415
    from .analysis.summary import summarize  # noqa: PLC0415
    from .ledger.reader import read_ledger  # noqa: PLC0415

    if experiment is None:
        experiment = _bundled_example()
    exp = with_repeats(load(experiment), repeats)
    if resume and out_dir is None:
        raise BadInput("--resume needs --out RUN_DIR (the run to continue)")
    out = out_dir or _default_out(exp.spec.experiment.name)
    err_console.print(f"leverbench {__version__}: {exp.spec.experiment.name}: {len(exp.spec.arms)} arms × "
                      f"{len(exp.spec.cases)} cases × {exp.spec.experiment.repeats} repeats → {out}", highlight=False)
    runner = None
    with _progress() as progress:
        runner = Runner(exp, out, resume=resume, progress=progress)
        try:
            runner.run()
        except Interrupted:
            err_console.print(f"\ninterrupted; every call is in {out}/ledger.jsonl (those cut off in flight as "
                              f"'cancelled') and the engines were stopped. Resume with:\n"
                              f"  leverbench run {experiment} --out {out} --resume", highlight=False)
            sys.exit(130)
    ledger = read_ledger(out)
    summary = summarize(ledger)
    write_reports(out, summary, ledger)
    render_terminal(summary, console, full=full)
    err_console.print(f"\nwrote {out}/ledger.jsonl, summary.json, report.md, report.html", highlight=False)


@contextlib.contextmanager
def _progress():
    """A progress bar on a terminal; one plain line per unit of work in logs and CI."""
    if err_console.is_terminal:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err_console, transient=False) as prog:
            task = prog.add_task("starting engines", total=None)

            def bar(unit, done: int, total: int) -> None:
                desc = "done" if unit.kind == "done" else f"{unit.kind} {unit.arm} / {unit.case} #{unit.repeat + 1}"
                prog.update(task, description=desc, completed=done, total=total)

            yield bar
        return
    t0 = time.monotonic()

    def line(unit, done: int, total: int) -> None:
        what = "done" if unit.kind == "done" else f"{unit.kind} {unit.arm} / {unit.case} #{unit.repeat + 1}"
        click.echo(f"[{done}/{total} {time.monotonic() - t0:6.1f}s] {what}", err=True)

    yield line


def _bundled_example() -> Path:
    for cand in (DEFAULT_EXPERIMENT, Path(__file__).resolve().parents[2] / DEFAULT_EXPERIMENT):
        if cand.exists():
            return cand
    raise BadInput(f"no experiment given and the bundled {DEFAULT_EXPERIMENT} was not found; "
                   "run from the repository root or pass an experiment file")


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "md", "json", "html"]), default="table", show_default=True,
              help="table: terminal tables; md: report.md to stdout; json: summary.json to stdout; "
                   "html: write RUN_DIR/report.html (self-contained, with the side-by-side replay) and print its path.")
@click.option("--write/--no-write", default=True, show_default=True,
              help="Also (re)write summary.json, report.md and report.html in RUN_DIR.")
@click.option("--full", is_flag=True, help="With --format table: every table.")
@click.option("--salvage", is_flag=True,
              help="Read a damaged ledger past its bad lines (each one reported) instead of stopping at the first.")
def report(run_dir: Path, fmt: str, write: bool, full: bool, salvage: bool) -> None:
    """Recompute everything from RUN_DIR/ledger.jsonl alone (no server needed) and print it.

    A ledger whose last line was cut by a crash is read with a note; a bad line
    anywhere else stops with an error naming it, unless --salvage."""
    from .analysis.summary import summarize  # noqa: PLC0415
    from .ledger.reader import read_ledger  # noqa: PLC0415
    from .report.files import write_reports  # noqa: PLC0415
    from .report.jsonio import finite  # noqa: PLC0415
    from .report.markdown import render_markdown  # noqa: PLC0415
    from .report.terminal import render_terminal  # noqa: PLC0415

    ledger = read_ledger(run_dir, salvage=salvage)
    summary = summarize(ledger)
    if (write or fmt == "html") and Path(run_dir).is_dir():
        write_reports(run_dir, summary, ledger)
    if fmt == "html":
        click.echo(str(Path(run_dir) / "report.html"))
    elif fmt == "json":
        click.echo(json.dumps(finite(summary), indent=1, ensure_ascii=False))
    elif fmt == "md":
        click.echo(render_markdown(summary))
    else:
        render_terminal(summary, console, full=full)


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--input-tokens", type=click.IntRange(min=1), required=True, help="Prompt length of the scenario.")
@click.option("--output-tokens", type=click.IntRange(min=1), required=True, help="Generated tokens (reasoning included).")
@click.option("--gpu-hour-usd", type=float, help="Price per GPU-hour when the arms' conditions give none.")
@click.option("--json", "as_json", is_flag=True, help="Print the projection as JSON.")
@click.option("--salvage", is_flag=True,
              help="Read a damaged ledger past its bad lines (each one reported) instead of stopping at the first.")
def project(run_dir: Path, input_tokens: int, output_tokens: int, gpu_hour_usd: float | None, as_json: bool,
            salvage: bool) -> None:
    """Where the time would go for one turn of INPUT/OUTPUT tokens, per arm, and what each
    lever (arms that differ in one knob) would return, from RUN_DIR's measured rates."""
    from .report.files import summarize_dir  # noqa: PLC0415
    from .report.jsonio import finite  # noqa: PLC0415
    from .report.tables import cost_table, projection_table  # noqa: PLC0415
    from .report.terminal import render_tables  # noqa: PLC0415
    from .analysis.cost import scenario_costs  # noqa: PLC0415
    from .analysis.summary import cost_citability  # noqa: PLC0415

    summary = summarize_dir(run_dir, scenario=(input_tokens, output_tokens), salvage=salvage)
    p = summary["projection"]
    costs = scenario_costs(p["arms"], {a["name"]: a["conditions"] for a in summary["arms"]}, summary["baseline"],
                           gpu_hour_usd, cost_citability(summary["baseline"], summary["cells"], summary["multipliers"],
                                                         summary["drift"]))
    if as_json:
        click.echo(json.dumps(finite({"projection": p, "cost": costs}), indent=1))
        return
    render_tables(console, [projection_table(summary), cost_table({**summary, "cost": costs})])


@cli.command()
@click.option("--port", type=int, default=8080, show_default=True)
@click.option("--threads", type=int, help="CPU threads (default: all cores, at most 8).")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(port: int, threads: int | None, args: tuple[str, ...]) -> None:
    """Start the embedded engine (llama.cpp llama-server with SmolLM2-135M-Instruct Q4_1)
    on 127.0.0.1:PORT for manual use; extra ARGS after -- go to llama-server. Ctrl-C stops it."""
    import subprocess  # noqa: PLC0415

    from .engines.embedded import EmbeddedEngine  # noqa: PLC0415

    eng = EmbeddedEngine("serve", list(args), Path("/dev/null"), threads=threads)
    eng.port = port
    cmd = eng.command()
    err_console.print("$ " + " ".join(cmd), highlight=False)
    try:
        sys.exit(subprocess.call(cmd))
    except KeyboardInterrupt:
        sys.exit(0)


cli.add_command(sim_command)
cli.add_command(analyze_command)
cli.add_command(replay_command)


def main() -> None:
    cli(prog_name="leverbench")


if __name__ == "__main__":
    main()
