"""The ``leverbench`` command: one module per command, each a thin layer over library functions.

    run      run.py      an experiment → RUN_DIR/ledger.jsonl and its reports
    report   report.py   the reports, recomputed from a ledger alone
    compare  compare.py  runs compared with a baseline run, with the guard across runs (exit 1: slower)
    project  project.py  one turn's time and cost per arm, from a run's rates
    analyze  analyze.py  where recorded traffic's time goes, and which lever to try
    whatif   whatif.py   a trace served on each calibrated arm, simulated (and verified)
    replay   replay.py   one turn's answers streaming side by side (HTML)
    serve    serve.py    the embedded engine, started by hand
    sim      sim.py      the simulator, a test instrument with set speeds
    record   record.py   an agent's real calls, recorded through a pass-through proxy
    schema   schema.py   the JSON Schema of summary.json, or a summary checked against it

Exit codes: 0 ok, 1 runtime failure (a run whose every call failed among them),
2 bad input, 70 an internal error (a bug; no input should get it); errors go
through the one handler in :mod:`.common`, which also holds the consoles.  Commands import the
heavy parts (numpy, polars, pydantic, aiohttp) when they run, so ``--help``
stays fast.
"""

from __future__ import annotations

import click

from .. import __version__
from .analyze import analyze_command
from .compare import compare_command
from .project import project_command
from .record import record_command
from .replay import replay_command
from .report import report_command
from .run import run_command
from .schema import schema_command
from .serve import serve_command
from .sim import sim_command
from .tune import tune_command
from .whatif import whatif_command

COMMANDS = (run_command, report_command, project_command, serve_command, sim_command, analyze_command, replay_command,
            whatif_command, schema_command, record_command, tune_command, compare_command)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="leverbench")
def cli() -> None:
    """Measure where an LLM serving stack's wall clock goes (prefill, decode, the rest)
    and which lever pays back (prefix cache, speculative-decoding drafter), from an
    append-only ledger of real model calls.

    Exit codes: 0 ok, 1 runtime failure (a run whose every call failed among
    them), 2 bad input (one line naming the file, the key and what is wrong),
    70 an internal error (a bug: rerun with LEVERBENCH_DEBUG=1 and report it).
    """


for _command in COMMANDS:
    cli.add_command(_command)


def main() -> None:
    cli(prog_name="leverbench")
