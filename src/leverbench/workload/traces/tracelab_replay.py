"""``tracelab-replay``: the CSV that TraceLab's session runner replays, read columnar.

``session_id`` (or ``id``), ``round_idx``, ``prefix_len``, ``input_len``,
``output_len``, ``tool_wait_after_ms`` and optionally ``arrival_time`` (ms,
the session's start).  ``input_len`` is the *new* tokens appended this round,
not the whole prompt: TraceLab's runner builds the prompt from ``prefix_len +
input_len`` tokens, and in ``multi_session_large.csv`` every round's
prefix_len equals the previous round's prefix_len + input_len + output_len.
So input_tokens = prefix_len + input_len and cached_tokens = prefix_len (the
context carried over).  Only a session's first round has a known arrival;
later rounds are sent when the previous answer and the tool wait are over
(closed loop), so their arrival_s is None.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from ...errors import BadInput
from . import columnar as col
from .base import Format, Sniff
from .files import csv_header, read_head
from .records import TrafficLoad


def load(path: Path, **_: Any) -> TrafficLoad:
    header = csv_header(path, read_head(path), required=("prefix_len", "input_len", "output_len"))
    sid = "session_id" if "session_id" in header else "id"
    if sid not in header:
        raise BadInput(f"{path}: line 1: no session_id (or id) column; is this a TraceLab replay CSV?")
    fields = [col.Field("prefix", "prefix_len", "count", "prefix_len"),
              col.Field("new", "input_len", "count", "input_len"),
              col.Field("output", "output_len", "count", "output_len"),
              col.Field("round", "round_idx", "opt_count"), col.Field("session", sid),
              col.Field("tool_wait", "tool_wait_after_ms", "seconds", scale=1e-3)]
    if "arrival_time" in header:
        fields += [col.Field("arrival_time", "arrival_time", "stamp", scale=1e-3),
                   col.Field("arrival_text", "arrival_time")]
    fields = [f for f in fields if f.key in header]
    first_round = pl.col("round").is_null() | (pl.col("round") == 0) if "round_idx" in header else pl.lit(True)
    # only a session's first round has a known send time (the session's arrival; none given: 0)
    start = (pl.when(pl.col("arrival_text").is_null()).then(0.0).otherwise(pl.col("arrival_time"))
             if "arrival_time" in header else pl.lit(0.0))
    columns = {"input": pl.col("prefix") + pl.col("new"), "output": pl.col("output"), "cached": pl.col("prefix"),
               "session": pl.col("session"), "round": pl.col("round") if "round_idx" in header else pl.lit(None),
               "tool_wait": pl.col("tool_wait") if "tool_wait_after_ms" in header else pl.lit(None),
               "arrival": pl.when(first_round).then(start)}
    plan = col.Plan(fields, columns=columns, soft={}, notes=[
        "input = prefix_len + input_len (input_len is the tokens appended this round); cached = prefix_len; "
        "rounds after a session's first have no fixed arrival (closed loop)"])
    return col.read(path, "tracelab-replay", plan, col.csv_sources(path, fields, header))


def detect(s: Sniff) -> bool:
    return (s.header is not None and {"prefix_len", "input_len", "output_len"} <= s.header
            and bool(s.header & {"session_id", "id"}))


FORMAT = Format("tracelab-replay", detect, load)
