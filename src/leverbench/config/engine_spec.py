"""An arm's ``engine`` table (:class:`EngineSpec`): the engine the tool starts and stops for the arm, each kind's
settings and their checks (the experiment file's schema: :mod:`.experiment`)."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from ..engines.command_template import CommandValue, check_command, check_values, parse_reset
from ..engines.llama_flags import FlagError
from ..engines.llama_flags import check as check_llama_flags
from .limits import MAX_GPUS_PER_ENGINE, CallSeconds, CtxSize, GpuIndex, Threads
from .names import Arg, FilePath, Label, control_char

#: The settings of kind ``command`` alone, and those it has none of (its command holds the engine's arguments).
COMMAND_KEYS = ("command", "values", "health", "reset", "env", "model")
NOT_COMMAND_KEYS = ("args", "threads", "ctx_size", "binary")


class EngineSpec(BaseModel):
    """An engine the tool starts and stops for the arm.  ``kind`` (:mod:`leverbench.engines.registry`'s kinds, which
    a test holds to this list): ``embedded`` = llama.cpp's llama-server (the name predates a second engine and is
    kept), ``vllm`` = vLLM's OpenAI server, ``sim`` = the simulator, ``command`` = any engine, started by a command
    template (:mod:`leverbench.engines.command`).  ``args`` go to the server after the tool's own flags (the
    simulator's: ``leverbench sim``'s options); ``ctx_size`` is llama.cpp's ``--ctx-size`` and vLLM's
    ``--max-model-len``; ``threads`` is llama.cpp's (vLLM's CPU build binds its own: ``VLLM_CPU_OMP_THREADS_BIND``)."""

    # (the experiment file's models' settings: experiment._Strict's)
    model_config = ConfigDict(extra="forbid", frozen=False, strict=True)

    kind: Literal["embedded", "vllm", "sim", "command"] = "embedded"
    args: list[Arg] = Field(default_factory=list)
    threads: Threads | None = None
    ctx_size: CtxSize = 8192
    startup_timeout_s: CallSeconds = 300.0
    # llama.cpp only: a llama-server binary to run instead of the prebuilt engine (a name on PATH, or a path
    # relative to the experiment file; the loaded experiment holds it resolved)
    binary: FilePath | None = Field(None, min_length=1)
    # the GPUs the engine may use (NVML's indices, as nvidia-smi numbers them): its CUDA_VISIBLE_DEVICES, with
    # CUDA_DEVICE_ORDER=PCI_BUS_ID; left out: every GPU the tool sees
    devices: list[GpuIndex] | None = Field(None, min_length=1, max_length=MAX_GPUS_PER_ENGINE)
    # kind = "command" alone (engines.command): the template ({port}: the tool's free port; {{ }}: literal braces),
    # its placeholders' values, the path that answers 200 once it is up, the request that empties its prefix cache
    # ("POST /reset_prefix_cache"; none: it cannot be reset), what is added to its environment, the model asked for
    command: str | None = None
    values: dict[Label, CommandValue] = Field(default_factory=dict, validate_default=True)
    health: str = "/health"
    reset: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    model: Label | None = Field(None, min_length=1)

    @field_validator("command")
    @classmethod
    def _a_template(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and info.data.get("kind") == "command":  # (another kind's: refused as not its setting)
            check_command(v)
        return v

    @field_validator("values")
    @classmethod
    def _one_for_each_placeholder(cls, v: dict[str, CommandValue], info: ValidationInfo) -> dict[str, CommandValue]:
        command = info.data.get("command")  # (absent: it was refused first)
        if isinstance(command, str) and info.data.get("kind") == "command":
            check_values(command, v)
        return v

    @field_validator("health")
    @classmethod
    def _a_path(cls, v: str) -> str:
        if not v.startswith("/") or any(c.isspace() for c in v) or control_char(v):
            raise ValueError(f"{v!r} is no path: give the path that answers 200 once the engine is up (\"/health\")")
        return v

    @field_validator("reset")
    @classmethod
    def _a_request(cls, v: str | None) -> str | None:
        if v is not None:
            parse_reset(v)
        return v

    @field_validator("env")
    @classmethod
    def _an_environment(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not name or "=" in name or control_char(name) or "\x00" in value:
                raise ValueError(f"{name!r}: an environment variable's name is not empty and holds no '=' nor a "
                                 "control character, and its value no NUL")
        return v

    @model_validator(mode="after")
    def _threads_for_llamacpp(self) -> "EngineSpec":
        given = self.model_fields_set
        if self.kind == "command":  # its command holds its arguments, its values its settings
            if self.command is None:
                raise ValueError("command: kind = \"command\" needs the command that starts the engine, with {port} "
                                 "where it takes its port (command = \"llama-server -m model.gguf --port {port}\")")
            theirs = [k for k in NOT_COMMAND_KEYS if k in given]
            if theirs:
                raise ValueError(f"{', '.join(theirs)}: not a setting of kind = \"command\" (its command holds the "
                                 "engine's arguments: put them there, or in values)")
            return self
        ours = [k for k in COMMAND_KEYS if k in given]
        if ours:
            raise ValueError(f"{', '.join(ours)}: a setting of kind = \"command\" only (this engine is kind = "
                             f"\"{self.kind}\")")
        if self.kind == "sim":  # its args are leverbench sim's options; llama.cpp's settings are not its
            from ..engines.sim_config import check_spec  # noqa: PLC0415
            check_spec(self.args, sorted({"threads", "binary", "ctx_size"} & given))
            return self
        if self.kind == "vllm" and self.threads is not None:
            raise ValueError("threads is llama.cpp's setting; vLLM's CPU build binds its own threads "
                             "(set VLLM_CPU_OMP_THREADS_BIND in the environment instead)")
        if self.kind == "vllm" and self.binary is not None:
            raise ValueError("binary names a llama-server for kind = \"embedded\"; vLLM is started from the "
                             "installed package (scripts/install.sh --vllm)")
        owned = ("--port", "--host", "-m", "--model") if self.kind == "embedded" else ("--port", "--host")
        for flag in owned:
            if flag in self.args:
                raise ValueError(f"args may not set {flag}: the tool starts the engine with its own (a free loopback "
                                 "port" + (", the bundled model)" if self.kind == "embedded" else ")"))
        if self.kind == "embedded" and self.binary is None:
            try:  # the prebuilt engine maps flags onto its parameters: one it does not know is an error now
                check_llama_flags(self.args)
            except FlagError as exc:
                raise ValueError(str(exc)) from None
        return self

    @model_serializer(mode="wrap")
    def _its_kinds_settings(self, handler: SerializerFunctionWrapHandler) -> object:
        """The table as JSON (the ledger header's copy) with the settings of its kind only: an engine of another
        kind than ``command`` as before that kind existed; one of kind ``command`` without llama.cpp's."""
        out = handler(self)
        if isinstance(out, dict):
            drop = NOT_COMMAND_KEYS if self.kind == "command" else COMMAND_KEYS
            out = {k: v for k, v in out.items() if k not in drop}
        return out
