"""The simulator as an engine the tool starts (kind ``sim``): ``leverbench sim`` in a process of its own, started,
checked healthy, reset and stopped as llama.cpp's server or vLLM is.

``engine = { kind = "sim", args = ["--decode-tps", "300", ...] }``: the arm's ``args`` are ``leverbench sim``'s
options (:func:`.sim_config.from_args` checks them when the experiment is loaded); the tool adds ``--host`` and
``--port``.  Its cache resets through the endpoint of the dialect it speaks (``--dialect``; ``openai`` has none),
as the engine it imitates would.  It is a test instrument: its facts say ``leverbench sim``, and discovery marks
its knobs ``simulator: true``.  Its command line carries :data:`SIM_TITLE`, by which the tests find its
processes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .interface import EngineFacts
from .process import EngineProcess
from .registry import EngineKind, Launch
from .sim_config import SimConfig, from_args

SIM_TITLE = "leverbench-sim-engine"  # the process's argv[0]: how its processes are found in the process table


class SimEngine(EngineProcess):
    """One ``leverbench sim`` process for one arm, with the options *sim_args*."""

    label = "simulator"

    def __init__(self, name: str, log_path: Path, sim_args: list[str], devices: list[int] | None = None, *,
                 startup_timeout_s: float | None = None):
        super().__init__(name, [], log_path, startup_timeout_s=startup_timeout_s, devices=devices)
        self.sim_args = list(sim_args)
        try:
            cfg = from_args(self.sim_args)
        except ValueError:  # (checked where the experiment is loaded; a start with them fails with the server's words)
            cfg = SimConfig()
        self.model_id, self.reset_dialect, self.slots = cfg.model, cfg.dialect, cfg.slots

    def command(self) -> list[str]:
        return [sys.executable, "-c", f"import sys; sys.argv[0] = {SIM_TITLE!r}; "
                "from leverbench.cli import main; main()", "sim", "--host", "127.0.0.1", "--port",
                str(self.port), *self.sim_args]

    def environment(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # the leverbench this process runs

    def reset_slots(self) -> int:
        return self.slots

    def facts(self) -> EngineFacts:
        return {"engine": "leverbench sim", "model_id": self.model_id}


def _make(launch: Launch) -> SimEngine:
    spec = launch.spec
    return SimEngine(launch.arm, launch.log_path, list(spec.args), launch.devices,
                     startup_timeout_s=launch.startup_timeout_s)


ENGINE = EngineKind("sim", "the simulator, leverbench sim: a test instrument with set speeds", _make)
