"""Engines the tool starts for an arm (llama.cpp's llama-server, vLLM, the simulator), and the simulator itself.

The runner drives each through one interface (:class:`~.interface.Engine`), built by the registry of engine kinds
(:mod:`.registry`: each kind's module declares its ``ENGINE``).
"""

from __future__ import annotations

from .interface import Engine, Readiness, Release
from .process import EngineProcess
from .registry import EngineKind, Launch, kind, kinds, make_engine

__all__ = ["Engine", "EngineKind", "EngineProcess", "Launch", "Readiness", "Release", "kind", "kinds",
           "make_engine"]
