"""Engines the tool starts for an arm (llama.cpp's llama-server, vLLM) and the simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .process import EngineProcess

__all__ = ["EngineProcess", "make_engine"]


def make_engine(arm: str, spec: Any, log_path: Path, *, resettable: bool = False) -> EngineProcess:
    """The engine of an arm's ``engine`` table (:class:`~leverbench.config.EngineSpec`): ``embedded``
    (llama.cpp, the historical name) or ``vllm``; its log at *log_path*; *resettable*: started with its
    cache-reset endpoint working (the run brings each turn to a declared state: runner.cache_state)."""
    # a start timeout the arm does not set is derived from the model's size (EngineProcess)
    timeout = spec.startup_timeout_s if "startup_timeout_s" in spec.model_fields_set else None
    if spec.kind == "vllm":
        from .vllm import VllmEngine  # noqa: PLC0415

        return VllmEngine(arm, spec.args, log_path, ctx_size=spec.ctx_size, startup_timeout_s=timeout,
                          devices=spec.devices, resettable=resettable)
    from .embedded import EmbeddedEngine  # noqa: PLC0415

    return EmbeddedEngine(arm, spec.args, log_path, threads=spec.threads, ctx_size=spec.ctx_size,
                          startup_timeout_s=timeout, binary=spec.binary, devices=spec.devices,
                          resettable=resettable)
