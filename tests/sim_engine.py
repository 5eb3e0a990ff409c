"""The simulator as each arm's engine in a test: :class:`leverbench.engines.sim_engine.SimEngine` (kind ``sim``,
``leverbench sim`` in a process of its own), started, checked healthy and stopped as the runner starts, checks
and stops llama.cpp's server or vLLM.

An experiment's arms say ``engine = { kind = "embedded" }``; :func:`patch_engines` makes the runner build a
:class:`SimEngine` for each instead, with that arm's simulator options (so a test runs the engine lifecycle,
one engine at a time included, in seconds and without the real engine).  An experiment may name the simulator
itself (``kind = "sim"``): tests/test_engine_interface.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from limits import SERVER_READY_S

from leverbench.engines.sim_engine import SIM_TITLE, SimEngine

__all__ = ["SIM_TITLE", "SimEngine", "engine_pids", "patch_engines"]


def patch_engines(monkeypatch, sim_args: dict[str, list[str]]) -> None:
    """Make the runner start a :class:`SimEngine` with ``sim_args[arm]`` for every arm with an engine."""
    import leverbench.runner.run as run_module  # noqa: PLC0415

    def make(arm: str, spec, log_path: Path, **_kw) -> SimEngine:
        return SimEngine(arm, log_path, sim_args[arm], devices=spec.devices, startup_timeout_s=SERVER_READY_S)

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
