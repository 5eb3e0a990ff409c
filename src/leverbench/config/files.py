"""The files an experiment file names: documents, system prompts, tool schemas and scripts (texts and JSON,
relative to the experiment file), and an engine's binary.  Each problem is a :class:`ConfigError` naming the
file, the key and what is wrong.  A file is read only if it is a regular file of at most
:data:`~.limits.MAX_FILE_BYTES` (a device such as ``/dev/zero`` or a FIFO would never end), JSON only if it
nests at most :data:`~.limits.MAX_JSON_DEPTH` deep."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .limits import MAX_FILE_BYTES, MAX_JSON_DEPTH
from .names import json_depth


def regular_file(file: str, key: str, p: Path, rel: str) -> bytes:
    """The bytes of *p*: :class:`ConfigError` (naming *rel*) if it is not a regular file or is larger than
    :data:`~.limits.MAX_FILE_BYTES`; ``FileNotFoundError`` and other ``OSError`` for the caller to word."""
    st = p.stat()  # does not open it: a FIFO would block
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
        raise ConfigError(file, key, f"{rel} is not a regular file ({what}); give a file")
    too_big = ConfigError(file, key, f"{rel} is larger than {MAX_FILE_BYTES // 2**20} MiB ({st.st_size:,} bytes), "
                                     "the limit for a file the experiment reads whole")
    if st.st_size > MAX_FILE_BYTES:
        raise too_big
    with p.open("rb") as f:
        # its size and a byte more (a read allocates what it is asked for), then on while it grows, to the limit
        data = f.read(st.st_size + 1)
        while len(data) <= MAX_FILE_BYTES and (more := f.read(2**20)):
            data += more
    if len(data) > MAX_FILE_BYTES:
        raise too_big
    return data


def read_text(file: str, key: str, base: Path, rel: str) -> tuple[str, str]:
    p = (base / rel).resolve()
    try:
        return str(p), regular_file(file, key, p, rel).decode("utf-8")
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
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(file, key, f"{rel} is not valid JSON: {exc}") from None
    except RecursionError:  # the parser's own limit, far deeper than ours
        value = None
    else:
        if json_depth(value) <= MAX_JSON_DEPTH:
            return value
    raise ConfigError(file, key, f"{rel} is nested deeper than {MAX_JSON_DEPTH} levels (the limit for a tool schema "
                                 "or script)")
