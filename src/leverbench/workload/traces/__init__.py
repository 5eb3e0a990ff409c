"""Trace importers: turn a traffic file into uniform per-call records.

Every importer returns a :class:`TrafficLoad`: the usable calls (as a polars
frame for the analysis and as :class:`TrafficCall` records for replay), and
per reason the number of rows it skipped (its reason naming the field: a token
count missing, negative or past :data:`.bounds.MAX_TOKENS`), with the line each
reason was first met.  A bad row never stops an import; only a file with no
usable row at all, an unknown format, an unreadable file (a pipe, a device, JSON
nested too deep, a file too large to read whole) raises
:class:`~leverbench.errors.BadInput` (exit code 2), naming the file, the line
where known, and what to do.

One module per format, each with its file layout in its docstring and its
``FORMAT`` (name, detection, reader) that :mod:`.registry` collects:
``mooncake``, ``azure``, ``tracelab-replay``, ``tracelab-round``,
``vllm-bench``, ``aiperf``, ``leverbench`` (a ledger) and ``generic`` (any
per-call CSV or JSONL).  The logs that grow large (generic, Azure, TraceLab
replay) are read columnar, in bounded memory (:mod:`.columnar`); the others
row by row.  The importers know nothing of the analysis; trace replay reuses
them.  The names below load on first use, so naming a format (:mod:`.names`)
does not load polars.
"""

from __future__ import annotations

import importlib
from typing import Any

from .names import FORMATS

_WHERE = {"GENERIC_DEFAULTS": "generic", "parse_columns": "generic", "BLOCK_TOKENS": "mooncake",
          "shared_prefix_tokens": "mooncake", "COLUMNS": "records", "TrafficCall": "records",
          "TrafficLoad": "records", "calls_frame": "records", "Format": "base", "REGISTRY": "registry",
          "detect_format": "registry", "load_traffic": "registry"}

__all__ = ["FORMATS", *_WHERE]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
