"""The files an experiment file names: documents, system prompts, tool schemas and scripts (texts and JSON,
relative to the experiment file), and an engine's binary.  Each problem is a :class:`ConfigError` naming the
file, the key and what is wrong."""

from __future__ import annotations

import json
import os
import shutil
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
    """An engine binary's absolute path: a bare name is looked up on PATH, anything else is a path (``~``
    expanded, relative to the experiment file); it must be an executable file."""
    if "/" not in name and "\\" not in name:
        found = shutil.which(name)
        if found is None:
            raise ConfigError(file, key, f"{name!r} is not on PATH; give the llama-server binary's path")
        return str(Path(found).resolve())
    p = (base / Path(name).expanduser()).resolve()
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
