"""``azure``: the Azure LLM inference traces (Splitwise), CSV, read columnar.

``TIMESTAMP`` (datetime), ``ContextTokens``, ``GeneratedTokens``.  No
cached-token information.  The week-long traces hold millions of rows: read by
:mod:`.columnar` in one pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from . import columnar as col
from .base import Format, Sniff
from .files import csv_header, read_head
from .records import TrafficLoad

REQUIRED = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def load(path: Path, **_: Any) -> TrafficLoad:
    header = csv_header(path, read_head(path), required=REQUIRED)
    fields = [col.Field("input", "ContextTokens", "count", "ContextTokens"),
              col.Field("output", "GeneratedTokens", "count", "GeneratedTokens"),
              col.Field("arrival", "TIMESTAMP", "stamp")]
    plan = col.Plan(fields, columns={c: pl.col(c) for c in ("input", "output", "arrival")},
                    soft={"unreadable TIMESTAMP (arrival unknown)": pl.col("arrival").is_null()},
                    notes=["no prefix or cached-token information in this trace"])
    return col.read(path, "azure", plan, col.csv_sources(path, fields, header))


def detect(s: Sniff) -> bool:
    return s.header is not None and set(REQUIRED) <= s.header


FORMAT = Format("azure", detect, load)
