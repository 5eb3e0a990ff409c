"""``generic``: any CSV or JSON-lines log of per-call records, read columnar.

Columns named with ``columns`` (``input``, ``output``, ``cached``,
``latency``, ``ttft``, ``model``, ``arrival``, ``session``); JSONL keys may be
dotted paths (``usage.prompt_tokens``).  Without names, common ones are tried
(see ``GENERIC_DEFAULTS``).  Times are seconds, or milliseconds when the
column name ends in ``_ms`` or the spec says ``COL:ms``.  Read by
:mod:`.columnar` in one pass, so a production log of tens of millions of calls
takes seconds, and one larger than memory is never loaded whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import polars as pl

from ...errors import BadInput
from . import columnar as col
from .aiperf import TIME_UNITS
from .base import Format, Sniff
from .files import csv_header, first_line, listed, loads, read_head
from .records import TrafficLoad

GENERIC_DEFAULTS: dict[str, tuple[str, ...]] = {
    "input": ("input_tokens", "prompt_tokens", "input_len", "input_length", "prompt_len", "num_prompt_tokens",
              "isl", "usage.prompt_tokens", "usage.input_tokens"),
    "output": ("output_tokens", "completion_tokens", "output_len", "output_length", "generated_tokens",
               "num_output_tokens", "osl", "usage.completion_tokens", "usage.output_tokens"),
    "cached": ("cached_tokens", "cached_prompt_tokens", "cache_read_tokens", "cache_read_input_tokens",
               "prefix_tokens", "prefix_len", "usage.prompt_tokens_details.cached_tokens"),
    "latency": ("latency_s", "latency", "e2e_s", "e2e_latency_s", "duration_s", "request_latency_s",
                "latency_ms", "e2e_ms", "duration_ms", "request_latency_ms"),
    "ttft": ("ttft_s", "ttft", "time_to_first_token_s", "ttft_ms", "time_to_first_token_ms"),
    "model": ("model", "model_name", "endpoint", "arm"),
    "arrival": ("arrival_s", "timestamp", "arrival_time", "start_time", "t_send", "created"),
    "session": ("session", "session_id", "conversation_id"),
}
_KIND = {"input": "count", "output": "count", "cached": "opt_count", "latency": "seconds", "ttft": "seconds",
         "arrival": "stamp", "model": "str", "session": "str"}


def parse_columns(spec: str | Mapping[str, str] | None) -> dict[str, str]:
    """``input=COL,output=COL,...`` into {role: column}; raises BadInput on unknown roles."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        items = list(spec.items())
    else:
        items = []
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            role, eq, c = part.partition("=")
            if not eq or not c.strip():
                raise BadInput(f"--columns: {part!r} is not ROLE=COLUMN (roles: {', '.join(GENERIC_DEFAULTS)})")
            items.append((role.strip(), c.strip()))
    out = {}
    for role, c in items:
        if role not in GENERIC_DEFAULTS:
            raise BadInput(f"--columns: unknown role {role!r} (roles: {', '.join(GENERIC_DEFAULTS)})")
        out[role] = c
    return out


def time_column(c: str) -> tuple[str, float]:
    """(key, scale to seconds): ``COL:ms`` or a name ending in _ms means milliseconds."""
    key, colon, unit = c.rpartition(":")
    if colon and unit in TIME_UNITS:
        return key, TIME_UNITS[unit]
    return c, (1e-3 if c.endswith("_ms") else 1.0)


_KEY_DEPTH = 8  # dotted keys are looked for this deep (usage.prompt_tokens_details.cached_tokens is 3)


def _flat_keys(obj: Mapping[str, Any], prefix: str = "", depth: int = 0) -> set[str]:
    keys: set[str] = set()
    for k, v in obj.items():
        keys.add(prefix + k)
        if isinstance(v, Mapping) and depth < _KEY_DEPTH:
            keys |= _flat_keys(v, prefix + k + ".", depth + 1)
    return keys


def choose_columns(path: Path, keys: set[str], named: dict[str, str]) -> dict[str, str]:
    """Named columns first, then the first default name present in ``keys``."""
    chosen: dict[str, str] = {}
    for role, defaults in GENERIC_DEFAULTS.items():
        if role in named:
            chosen[role] = named[role]
            continue
        hit = next((d for d in defaults if d in keys), None)
        if hit is not None:
            chosen[role] = hit
    for role in ("input", "output"):
        if role not in chosen:
            raise BadInput(f"{path}: line 1: no {role}-token column among {listed(sorted(keys))}; "
                           f"name it with --columns {role}=COLUMN")
    return chosen


def load(path: Path, columns: str | Mapping[str, str] | None = None, **_: Any) -> TrafficLoad:
    head = read_head(path)
    first = first_line(head).lstrip()
    is_json = first.startswith("{")
    if is_json:
        try:
            obj = loads(path, first, 1)
            keys = _flat_keys(obj) if isinstance(obj, dict) else set()
        except json.JSONDecodeError:
            keys = set()
    else:
        header = csv_header(path, head)
        keys = set(header)
    chosen = choose_columns(path, keys, parse_columns(columns))
    fields = []
    for role, name in chosen.items():
        key, scale = time_column(name) if _KIND[role] in ("seconds", "stamp") else (name, 1.0)
        fields.append(col.Field(role, key, _KIND[role], f"{role} ({name})", scale))
    if not is_json:  # a CSV's header names every column there is
        absent = [f"{f.name}={chosen[f.name]}" for f in fields if f.key not in keys]
        if absent:
            raise BadInput(f"{path}: line 1: --columns {', '.join(absent)}: no such column in the header "
                           f"({listed(header)})")
    cached = pl.col("cached")
    exprs = {r: pl.col(r) for r in chosen}
    if "cached" in chosen:
        exprs["cached"] = pl.when(cached.is_not_null()).then(pl.min_horizontal(cached, pl.col("input")))
    used = ", ".join(f"{role}={c}" for role, c in chosen.items())
    plan = col.Plan(fields, columns=exprs, soft={}, notes=[f"columns: {used}"], cached_served=True)
    sources = col.jsonl_sources(path, fields) if is_json else col.csv_sources(path, fields, header, short_rows=True)
    return col.read(path, "generic", plan, sources)


def detect(s: Sniff) -> bool:
    return s.obj is not None or (s.header is not None and len(s.header) >= 2)


FORMAT = Format("generic", detect, load)
