"""The simulator as an engine the runner starts: ``leverbench sim`` in a process of its own, started, checked
healthy and stopped as the runner starts, checks and stops llama.cpp's server or vLLM.

An experiment's arms say ``engine = { kind = "embedded" }``; :func:`patch_engines` makes the runner build a
:class:`SimEngine` for each instead, with that arm's simulator options (so a test runs the engine lifecycle,
one engine at a time included, in seconds and without the real engine).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from limits import SERVER_READY_S

from leverbench.engines.process import EngineFacts, EngineProcess

SIM_TITLE = "leverbench-sim-engine"  # in each simulator's command line: how a test finds them in the process table


class SimEngine(EngineProcess):
    label = "simulator"
    model_id = "sim"

    def __init__(self, name: str, log_path: Path, sim_args: list[str], devices: list[int] | None = None):
        super().__init__(name, [], log_path, startup_timeout_s=SERVER_READY_S, devices=devices)
        self.sim_args = list(sim_args)

    def command(self) -> list[str]:
        return [sys.executable, "-c", f"import sys; sys.argv[0] = {SIM_TITLE!r}; "
                "from leverbench.cli import main; main()", "sim", "--host", "127.0.0.1", "--port",
                str(self.port), *self.sim_args]

    def environment(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def discover(self) -> EngineFacts:
        return {"engine": "leverbench sim", "model_id": self.model_id}


def patch_engines(monkeypatch, sim_args: dict[str, list[str]]) -> None:
    """Make the runner start a :class:`SimEngine` with ``sim_args[arm]`` for every arm with an engine."""
    import leverbench.runner.run as run_module  # noqa: PLC0415

    def make(arm: str, spec, log_path: Path, **_kw) -> SimEngine:
        return SimEngine(arm, log_path, sim_args[arm], devices=spec.devices)

    monkeypatch.setattr(run_module, "make_engine", make)


def engine_pids(title: str = SIM_TITLE) -> list[int]:
    """The pids of this process's engines alive now (from /proc: children of this process whose command line
    holds *title*, not zombies): the simulators this module starts, or another engine's (*title*)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{p}/stat", "rb") as fh:
                stat = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if title.encode() in cmd and stat[0] not in (b"Z", b"X") and int(stat[1]) == os.getpid():
            out.append(int(p))
    return out
