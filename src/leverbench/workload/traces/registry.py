"""The formats, in one place: each one's name, how it is recognised and how it is read.

A format module defines ``FORMAT = Format(...)`` (:mod:`.base`); ``REGISTRY``
holds them in the order detection tries them.  ``names.FORMATS`` is the list
of names everything else shows (``--format``'s choice, the experiment file's
``trace_format``, errors).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Mapping

from ...errors import BadInput
from . import aiperf, azure, generic, leverbench, mooncake, tracelab_replay, tracelab_round, vllm_bench
from .base import Format, Sniff
from .files import first_json, first_line, read_head, regular_file
from .names import FORMATS
from .records import TrafficLoad

#: Every format, in the order detection tries them (``generic``, which takes any per-call columns, last).
REGISTRY: dict[str, Format] = {m.FORMAT.name: m.FORMAT for m in (
    leverbench, vllm_bench, mooncake, tracelab_round, aiperf, azure, tracelab_replay, generic)}
assert set(FORMATS) == set(REGISTRY), "every format module is named in names.FORMATS, and every name has its module"


def detect_format(path: str | Path) -> str:
    """Name the format of ``path`` from its name, header or first record.

    A directory is a leverbench run (ledger.jsonl) or an AIPerf artifact
    directory (profile_export.jsonl).  CSV headers and JSON keys decide the
    rest; anything with per-call columns that is none of the known traces is
    ``generic``.  Raises BadInput when nothing fits.
    """
    path = Path(path)
    if path.is_dir():
        for f in REGISTRY.values():
            if f.directory and (path / f.directory).is_file():
                return f.name
        names = " or ".join(f.directory for f in REGISTRY.values() if f.directory)
        raise BadInput(f"{path}: a directory without {names}; give the traffic file itself")
    head = read_head(path)
    first = first_line(head)
    if not first:
        raise BadInput(f"{path}: empty file")
    if first.lstrip().startswith(("{", "[")):
        obj = first_json(path, head)
        if not isinstance(obj, dict):
            raise BadInput(f"{path}: line 1 is a JSON {type(obj).__name__}, not an object; "
                           "name the format with --trace-format")
        sniff = Sniff(obj=obj)
    else:
        sniff = Sniff(header=frozenset(h.strip() for h in next(csv.reader([first]))))
    for f in REGISTRY.values():
        if f.detect(sniff):
            return f.name
    raise BadInput(f"{path}: line 1: not a known trace header ({first[:80]!r}); name the format with --trace-format "
                   f"({', '.join(FORMATS)})")


def load_traffic(path: str | Path, fmt: str | None = None, *, columns: str | Mapping[str, str] | None = None,
                 salvage: bool = False) -> TrafficLoad:
    """Import ``path`` (format ``fmt``, or detected) into a :class:`TrafficLoad`.

    ``columns`` (generic format only) names the columns: ``"input=COL,output=COL"``
    or a mapping.  *salvage* (a leverbench ledger only): read past its bad lines
    (see :func:`~leverbench.ledger.reader.read_ledger`).  Raises BadInput for an
    unknown format, an unreadable file or one without a usable row.
    """
    path = Path(path)
    regular_file(path)
    if fmt is not None and fmt not in REGISTRY:
        raise BadInput(f"unknown traffic format {fmt!r}; known: {', '.join(FORMATS)}")
    if path.is_dir():
        fmt = fmt or detect_format(path)
        if REGISTRY[fmt].directory is None:
            raise BadInput(f"{path}: is a directory; format {fmt!r} reads a file")
        if fmt != "leverbench":  # the ledger reader takes the run directory itself
            path = path / REGISTRY[fmt].directory
    fmt = fmt or detect_format(path)
    if columns and fmt != "generic":
        raise BadInput(f"--columns applies to --format generic only (this file reads as {fmt!r})")
    return REGISTRY[fmt].load(path, columns=columns, salvage=salvage)
