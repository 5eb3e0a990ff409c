"""The request-log formats, in one place (as :mod:`..traces.registry` holds the traffic formats): each one's
name, how it is recognised and how it is read.

A format module defines ``FORMAT = RequestFormat(...)`` (:mod:`.base`); :data:`REGISTRY` holds them in the
order detection tries them; :data:`FORMATS` their names (``[[cases]] format``'s choice, errors).
"""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import BadInput
from ..traces.files import first_line, read_head, regular_file
from . import openai_requests, otel_genai, proxy_files
from .base import Imported, RequestFormat

#: Every format, in the order detection tries them.
REGISTRY: dict[str, RequestFormat] = {m.FORMAT.name: m.FORMAT for m in (proxy_files, otel_genai, openai_requests)}
FORMATS: tuple[str, ...] = tuple(REGISTRY)


def detect_format(path: Path) -> str:
    """The format of *path* (a file, or a directory holding a format's file), from its first JSON object;
    BadInput when none fits."""
    if path.is_dir():
        for f in REGISTRY.values():
            if f.directory and (path / f.directory).is_file():
                return f.name
        names = " or ".join(f.directory for f in REGISTRY.values() if f.directory)
        raise BadInput(f"{path}: a directory without {names}; give a recording directory or a request log")
    try:
        obj = json.loads(first_line(read_head(path)))
    except (ValueError, RecursionError):
        raise BadInput(f"{path}: line 1 is not a JSON object; a request log holds one JSON object per line") from None
    if not isinstance(obj, dict):
        raise BadInput(f"{path}: line 1 is a JSON {type(obj).__name__}, not an object; name the format "
                       f"({', '.join(FORMATS)})")
    for f in REGISTRY.values():
        if f.detect(obj):
            return f.name
    raise BadInput(f"{path}: line 1 is no request log leverbench knows ({', '.join(FORMATS)}): a chat request has "
                   "messages; name the format if it is one of these")


def load_requests(path: str | Path, fmt: str | None = None) -> Imported:
    """The turns of the request log (or recording directory) *path*, format *fmt* or detected; BadInput for a
    missing or unreadable file, an unknown format, or one without a request that can be replayed."""
    path = Path(path)
    regular_file(path)
    if not path.exists():
        raise BadInput(f"{path}: no such file or directory")
    if fmt is not None and fmt not in REGISTRY:
        raise BadInput(f"unknown request-log format {fmt!r}; known: {', '.join(FORMATS)}")
    fmt = fmt or detect_format(path)
    if path.is_dir():
        inner = REGISTRY[fmt].directory
        if inner is None:
            raise BadInput(f"{path}: is a directory; format {fmt!r} reads a file")
        path = path / inner
    return REGISTRY[fmt].load(path)
