"""The files an experiment file names: documents, system prompts, tool schemas and scripts (texts and JSON,
relative to the experiment file), and an engine's binary.  Each problem is a :class:`ConfigError` naming the
file, the key and what is wrong."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError


def read_text(file: str, key: str, base: Path, rel: str) -> tuple[str, str]:
    p = (base / rel).resolve()
    try:
        return str(p), p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(file, key, f"file not found: {rel} (looked at {p}; paths are relative to the "
                                     "experiment file)") from None
    except UnicodeDecodeError:
        raise ConfigError(file, key, f"{rel} is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(file, key, f"cannot read {rel}: {exc.strerror or exc}") from None


def resolve_binary(file: str, key: str, base: Path, name: str) -> str:
    """An engine binary's absolute path: a bare name is looked up on PATH, then beside this Python (the
    ``.venv/bin/llama-server`` that ``scripts/install.sh --compile-llama`` links, with the venv not activated);
    anything else is a path (``~`` expanded, relative to the experiment file).  It must be an executable file.
    The path is kept as named (a symlink stays one: a wrapper may dispatch on its own name)."""
    if "/" not in name and "\\" not in name:
        beside = Path(sys.executable).parent / name
        found = shutil.which(name) or (str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None)
        if found is None:
            raise ConfigError(file, key, f"{name!r} is not on PATH nor in {beside.parent}; give the llama-server "
                                         "binary's path")
        return str(Path(found).absolute())
    p = Path(os.path.normpath(base / Path(name).expanduser()))
    if not p.is_file():
        raise ConfigError(file, key, f"no such file: {name} (looked at {p}; paths are relative to the experiment "
                                     "file)")
    if not os.access(p, os.X_OK):
        raise ConfigError(file, key, f"{p} is not executable")
    return str(p)


def read_json(file: str, key: str, base: Path, rel: str) -> Any:
    _, text = read_text(file, key, base, rel)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(file, key, f"{rel} is not valid JSON: {exc}") from None
