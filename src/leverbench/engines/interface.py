"""The one interface the runner drives an engine through (:class:`Engine`), and the records it answers with.

An engine is a server the tool starts for one arm and stops again: llama.cpp's (``embedded``), vLLM's, the
simulator (``sim``); :mod:`.registry` builds one from the arm's ``engine`` table.  The runner
(:mod:`leverbench.runner.engine_blocks`, :mod:`leverbench.runner.cache_reset`, ...) asks nothing else of it:

- :meth:`Engine.start` spawns it and blocks until it answers healthy (its base URL), :meth:`Engine.ready` says
  how that start went (for its ``engine_start`` record), :meth:`Engine.alive` and :meth:`Engine.death_note`
  whether it still runs;
- :meth:`Engine.reset_cache` brings its cache to empty through the endpoint its server has for it (an
  endpoint the tool did not start is reset by the engine discovery names: :mod:`leverbench.runner.cache_reset`);
- :meth:`Engine.facts` is what it says of itself for the ledger's header (discovery adds what its endpoint says);
- :meth:`Engine.stop` ends it, :meth:`Engine.released` says which of its processes are still there.

Whether its **GPUs** came back is not the engine's to say: the runner chose them
(:func:`leverbench.runner.engine_mode.engine_devices`), and :class:`leverbench.runner.telemetry.Telemetry`
holds NVML and each GPU's memory from before the start; it waits on :meth:`Engine.released` and on the GPUs
together (an engine's memory comes back only once its processes are gone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Protocol, Sequence, runtime_checkable

from typing_extensions import TypedDict

from ..json_types import JSONValue
from .command_template import CommandValue

if TYPE_CHECKING:
    import aiohttp


class EngineBuild(TypedDict, total=False):
    """Which build of an engine ran: llama.cpp's (a binary's ``--version``, a package's version and build number)
    or vLLM's distribution and version."""

    binary: str
    version: str
    commit: str | None
    build_number: int | None
    package: str
    package_version: str | None
    distribution: str


class EngineFacts(TypedDict, total=False):
    """What an engine the tool started says of itself (:meth:`Engine.facts`; the arm's ``discovered``
    gets these keys, discovery adds its knobs)."""

    engine: str
    engine_build: EngineBuild
    engine_args: list[str]
    threads: int
    ctx_size: int
    parallel: str | int  # llama-server's -np as given (1 when not)
    model_file: str | None
    model_id: str
    model_source: JSONValue  # the converted checkpoint's source.json ``gguf`` (vLLM)
    torch: dict[str, str]  # the torch build vLLM runs on: its version and CUDA (engines.vllm.torch_build)
    tensor_parallel: int  # vLLM's --tensor-parallel-size (1 when not given)
    reset_setup: list[str]  # what the tool added so that a cache reset works (llama.cpp flags, vLLM's environment)
    command: str  # kind "command": its template (engines.command) ...
    values: dict[str, CommandValue]  # ... each placeholder's value ...
    value_flags: dict[str, list[str]]  # ... and the flags whose value each fills


@dataclass(frozen=True)
class Readiness:
    """How an engine's latest start went, as far as it has got (:meth:`Engine.ready`): its start timeout and
    where that came from (derived from the model's size at the start, unless the arm set one), when its
    process was spawned (epoch s; None: not yet), that process's id, the seconds from spawned to healthy (None:
    not healthy), and what its log says loading the model took (None: it does not say)."""

    timeout_s: float
    timeout_from: str
    spawned_at: Optional[float] = None
    pid: Optional[int] = None
    ready_s: Optional[float] = None
    model_load_s: Optional[float] = None


@dataclass(frozen=True)
class Release:
    """What a stopped engine still holds of the machine's processes (:meth:`Engine.released`): the process group
    it ran in (None: it never ran) and the processes of it still there (zombies not counted)."""

    group: Optional[int]
    left: tuple[int, ...] = ()

    @property
    def gone(self) -> bool:
        return not self.left


@runtime_checkable
class Engine(Protocol):
    """A server the tool starts and stops for one arm (module docstring)."""

    @property
    def model_id(self) -> str:
        """The model name its chat endpoint serves (known before it starts: the arm's calls name it)."""
        ...

    def start(self) -> str:
        """Spawn it and wait until it answers healthy; its base URL (``http://127.0.0.1:PORT``).  One that dies
        while starting, or is not healthy within its start timeout, raises
        :class:`~leverbench.errors.EngineError` having stopped what it spawned (:meth:`stop` after it finds
        nothing more to end; :meth:`ready` still says how the start went, its pid among it)."""
        ...

    def ready(self) -> Readiness:
        """How its latest start went (:class:`Readiness`; before a start: its timeout only)."""
        ...

    def alive(self) -> bool:
        """Whether it runs now."""
        ...

    def death_note(self) -> Optional[str]:
        """Why it stopped running, with its log's tail; None while it runs."""
        ...

    async def reset_cache(self, session: "aiohttp.ClientSession", headers: Mapping[str, str]) -> Optional[str]:
        """Bring its cache to empty (every prompt it holds forgotten) through *session*, with the arm's
        *headers*; None when the server answered success, else what went wrong, in words."""
        ...

    def facts(self) -> EngineFacts:
        """What it says of itself for the ledger's header (its build, arguments, model; the arm's
        ``discovered`` gets these keys, discovery adds what its endpoint says)."""
        ...

    def stop(self) -> None:
        """End it and what it spawned (blocking until they are gone, or killed)."""
        ...

    def released(self) -> Release:
        """Which of its processes are still there (the runner asks again while it waits for them to go)."""
        ...


class EngineSettings(Protocol):
    """What an arm's ``engine`` table holds that an engine is built from
    (:class:`leverbench.config.EngineSpec` is one; this package sits below ``config``, so it names the fields
    rather than the class)."""

    @property
    def kind(self) -> str: ...
    @property
    def args(self) -> Sequence[str]: ...
    @property
    def threads(self) -> Optional[int]: ...
    @property
    def ctx_size(self) -> int: ...
    @property
    def startup_timeout_s(self) -> float: ...
    @property
    def binary(self) -> Optional[str]: ...
    @property
    def devices(self) -> Optional[Sequence[int]]: ...
    @property
    def model_fields_set(self) -> set[str]: ...
    # kind "command" (:mod:`.command`): the template, its placeholders' values, the health path, the reset request,
    # the environment added and the model its calls ask for
    @property
    def command(self) -> Optional[str]: ...
    @property
    def values(self) -> Mapping[str, CommandValue]: ...
    @property
    def health(self) -> str: ...
    @property
    def reset(self) -> Optional[str]: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def model(self) -> Optional[str]: ...
