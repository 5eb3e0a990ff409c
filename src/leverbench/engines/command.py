"""Any engine, given as a command template (kind ``command``): started, checked healthy, reset and stopped as the
tool's own engines are.

``engine = { kind = "command", command = "vllm serve {model} --port {port} --max-num-seqs {seqs}", values = {
model = "Qwen/Qwen2.5-0.5B-Instruct", seqs = 4 } }``: the template's placeholders (``{name}``) are filled with the
arm's ``values`` and ``{port}`` with a free loopback port the tool picks, and the text is then split as a POSIX
shell splits it (:func:`shlex.split`; no shell runs it): a value with spaces makes several arguments unless the
template quotes it.  ``{{`` and ``}}`` are literal braces, so JSON in a flag is written
``--speculative-config '{{"method": "ngram", "num_speculative_tokens": {k}}}'``.  Every placeholder needs a value
and every value a placeholder (checked where the experiment is loaded: :mod:`.command_template`, the template as
data).

The engine is healthy when ``health`` (default ``/health``) answers 200.  Its cache is emptied by the request
``reset`` names (``"POST /reset_prefix_cache"``); one of the requests the known engines' resets are made of
(:data:`.reset.ENDPOINTS`: ``"POST /slots/{id}?action=erase"`` erases every slot) is made as that engine's reset
is, its retries included.  Without ``reset`` it cannot be reset, and says so when asked.  ``env`` is added to the
tool's environment; ``model`` is the name its chat calls ask for.

Its facts (:meth:`CommandEngine.facts`): ``engine = "command"``, the arguments it ran (``engine_args``), the
template (``command``), each placeholder's value (``values``) and the flags whose value each fills
(``value_flags``): each placeholder is a knob (``analysis/base/knobs.py``).

``{vllm_model}`` (the bundled model's checkpoint for vLLM, :func:`.command_template.vllm_model_dir`), where the values
give none, is converted before the engine starts, as the embedded vLLM engine converts it (:meth:`CommandEngine.start`).
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from ..errors import EngineError
from .command_template import (
    ENGINE_DIR,
    PORT,
    VLLM_MODEL,
    CommandValue,
    argv,
    as_text,
    parse_reset,
    placeholders,
    value_flags,
    vllm_model_dir,
)
from .interface import EngineFacts
from .process import EngineProcess
from .registry import EngineKind, Launch

if TYPE_CHECKING:
    import aiohttp

DEFAULT_MODEL = "default"  # the model asked for where the arm names none and the template has no {model}


class CommandEngine(EngineProcess):
    """The engine *template* starts for one arm, with *values* (placeholder → value; ``{port}``: the tool's)."""

    label = "command engine"

    def __init__(self, name: str, log_path: Path, template: str, values: Mapping[str, CommandValue], *,
                 health: str = "/health", reset: str | None = None, env: Mapping[str, str] | None = None,
                 model: str | None = None, devices: list[int] | None = None, startup_timeout_s: float | None = None):
        super().__init__(name, [], log_path, startup_timeout_s=startup_timeout_s, devices=devices)
        self.template, self.values = template, dict(values)
        self.texts = {k: as_text(v) for k, v in self.values.items()}
        self.engine_dir = log_path.with_name(log_path.stem + ".files")  # ({engine_dir}, unless the values give one)
        self.health_path, self.reset = health, reset
        self.env = dict(env or {})
        named = self.texts.get("model")
        self.model_id = model or named or DEFAULT_MODEL

    def _filled(self) -> dict[str, str]:
        """The values' texts, and ``{engine_dir}`` where the template has it and the values do not."""
        own = {ENGINE_DIR: shlex.quote(str(self.engine_dir))} if ENGINE_DIR in placeholders(self.template) else {}
        return {**own, **self.texts}

    def arguments(self) -> list[str]:
        """The arguments it runs with (its port: the tool's, once it has one; ``{port}`` before)."""
        return argv(self.template, {**self._filled(), PORT: "{port}" if self.port is None else str(self.port)})

    def command(self) -> list[str]:
        args = self.arguments()
        if not args or (shutil.which(args[0]) is None and not Path(args[0]).is_file()):
            raise EngineError(f"arm {self.name!r}: {self.label}: {args[0] if args else 'nothing'!r} is no program "
                              "on PATH nor a file (the command's first word, once its values are in)")
        return args

    def environment(self) -> dict[str, str] | None:
        return {**os.environ, **self.env} if self.env else None

    def start(self) -> str:
        """Start it as :class:`EngineProcess` does; a ``{vllm_model}`` the values leave to the tool is converted
        first where it is not yet (``engines/vllm.py``: once, ~40 s, before the process and its start timeout); an
        ``{engine_dir}`` the values leave to the tool is made."""
        if ENGINE_DIR in placeholders(self.template) and ENGINE_DIR not in self.texts:
            self.engine_dir.mkdir(parents=True, exist_ok=True)
        if VLLM_MODEL in placeholders(self.template) and VLLM_MODEL not in self.texts:
            from .vllm import ensure_hf_model  # noqa: PLC0415 (only a template of vLLM's model needs it)

            dest = ensure_hf_model()
            if dest != vllm_model_dir():  # (the two name the checkpoint alike: tests/test_tune_vllm.py)
                raise EngineError(f"arm {self.name!r}: {{vllm_model}} names {vllm_model_dir()}, but vLLM's model "
                                  f"was converted into {dest}")
        return super().start()

    async def reset_cache(self, session: aiohttp.ClientSession, headers: Mapping[str, str]) -> str | None:
        """Empty its cache with the request ``reset`` names (module docstring); what went wrong, in words."""
        if self.reset is None:
            return (f"arm {self.name!r}: its engine (kind = \"command\") names no reset: give its engine table "
                    "reset = \"METHOD /path\", the request that empties its prefix cache (\"POST /reset_prefix_cache\" "
                    "for vLLM, \"POST /slots/{id}?action=erase\" for llama.cpp, \"POST /flush_cache\" for SGLang)")
        import aiohttp  # noqa: PLC0415 (only a run that resets needs it)

        from .reset import ENDPOINTS, RESET_TIMEOUT_S, reset_through  # noqa: PLC0415 (aiohttp's, too)

        dialect = next((d for d, request in ENDPOINTS.items() if request == self.reset.strip()), None)
        if dialect is not None:
            return await reset_through(dialect, session, self.base_url, headers, self.reset_slots())

        method, path = parse_reset(self.reset)
        try:
            async with session.request(method, self.base_url + path, headers=dict(headers),
                                       timeout=aiohttp.ClientTimeout(total=RESET_TIMEOUT_S)) as r:
                if 200 <= r.status < 300:
                    return None
                return f"{method} {path} answered {r.status}: {(await r.text())[:300].strip()[:200]}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            return f"{method} {path} failed: {type(exc).__name__}: {exc}"[:300]

    def facts(self) -> EngineFacts:
        """What it is (``command``), the arguments it ran, the template, each placeholder's value and the flags
        each fills (module docstring), the model its calls ask for."""
        return {"engine": "command", "engine_args": self.arguments(), "command": self.template,
                "values": dict(self.values), "value_flags": value_flags(self.template, self._filled()),
                "model_id": self.model_id}


def _make(launch: Launch) -> CommandEngine:
    spec = launch.spec
    if spec.command is None:  # (the experiment file's kind = "command" holds one: checked where it is loaded)
        raise EngineError(f"arm {launch.arm!r}: an engine of kind \"command\" needs its table's command")
    return CommandEngine(launch.arm, launch.log_path, spec.command, spec.values, health=spec.health,
                         reset=spec.reset, env=spec.env, model=spec.model,
                         devices=launch.devices,
                         startup_timeout_s=launch.startup_timeout_s)


ENGINE = EngineKind("command", "any engine, started by a command template with {port} and the arm's values", _make)

