"""What every importer returns: per-call records, the columnar frame, and the counts of skipped rows.

A :class:`TrafficLoad` holds the usable calls twice over, one built from the
other on demand: as a polars frame of the canonical columns (``COLUMNS``; what
the analysis reads, lazily, so a log larger than memory is never loaded whole)
and as :class:`TrafficCall` records (what trace replay and small tests read).
The row-by-row helpers here serve the importers of small files; the columnar
ones share the same skip reasons (see :mod:`.columnar`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Union

import polars as pl
from typing_extensions import TypeAlias

from ...errors import BadInput
from .bounds import MAX_CALL_S, MAX_STAMP_S, MAX_TOKENS, tokens_text
from .names import FORMATS

#: A polars column type: a class (``pl.Int64``) or an instance (``pl.Struct({...})``).
DType: TypeAlias = Union[type[pl.DataType], pl.DataType]

#: The canonical columns of a traffic frame, with their types; ``arrival`` is seconds after the earliest stamp.
COLUMNS: dict[str, DType] = {
    "input": pl.Int64, "output": pl.Int64, "cached": pl.Int64, "latency": pl.Float64, "ttft": pl.Float64,
    "model": pl.String, "arrival": pl.Float64, "session": pl.String, "round": pl.Int64, "tool_wait": pl.Float64,
}
_FIELD = {"input": "input_tokens", "output": "output_tokens", "cached": "cached_tokens", "latency": "latency_s",
          "ttft": "ttft_s", "model": "model", "arrival": "arrival_s", "session": "session", "round": "round",
          "tool_wait": "tool_wait_s"}


@dataclass(frozen=True, slots=True)
class TrafficCall:
    """One model call of recorded traffic, whatever file it came from.

    arrival_s is seconds after the earliest stamp of the file's usable rows; cached_tokens is
    the part of the prompt known to be reusable (or reused) from a prefix
    cache; None means "not recorded".
    """

    input_tokens: int
    output_tokens: int
    arrival_s: float | None = None
    cached_tokens: int | None = None
    latency_s: float | None = None
    ttft_s: float | None = None
    model: str | None = None
    session: str | None = None
    round: int | None = None
    prefix_blocks: tuple[int, ...] | None = None
    tool_wait_s: float | None = None


def calls_frame(calls: Iterable[TrafficCall]) -> pl.DataFrame:
    """The canonical columns of ``calls`` (a frame with every column of ``COLUMNS``)."""
    calls = list(calls)
    return pl.DataFrame({col: [getattr(c, _FIELD[col]) for c in calls] for col in COLUMNS}, schema=COLUMNS)


def frame_calls(frame: pl.DataFrame) -> list[TrafficCall]:
    """TrafficCall records from a frame of (some of) the canonical columns; an absent column reads None."""
    n = frame.height
    cols = {col: frame.get_column(col).to_list() if col in frame.columns else [None] * n for col in COLUMNS}
    return [TrafficCall(**{_FIELD[col]: cols[col][i] for col in COLUMNS}) for i in range(n)]


@dataclass
class TrafficLoad:
    """What an importer returns: the usable calls and why other rows were skipped.

    ``cached_served`` says what cached_tokens mean: True when the serving stack
    reported them as actually read from its cache (so they were not prefilled),
    False when they are only known to be shareable (the trace's prefix ids).
    ``used`` counts the usable calls; ``frame`` is them as a polars LazyFrame of
    the canonical columns (``COLUMNS``); ``calls`` as records, built on first
    use from whichever of the two the importer gave.
    """

    path: Path
    fmt: str
    records: list[TrafficCall] | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    first_skipped_line: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cached_served: bool = False
    lazy: pl.LazyFrame | None = None
    count: int | None = None
    spill: Any = None  # the temporary directory holding a frame spilled to disk, kept alive with the load

    @property
    def calls(self) -> list[TrafficCall]:
        if self.records is None:
            self.records = frame_calls(self.frame.collect())
        return self.records

    @property
    def frame(self) -> pl.LazyFrame:
        if self.lazy is None:
            self.lazy = calls_frame(self.records or []).lazy()
        return self.lazy

    @property
    def used(self) -> int:
        return self.count if self.count is not None else len(self.calls)

    @property
    def rows(self) -> int:
        return self.used + sum(self.skipped.values())


def no_usable_rows(path: Path, fmt: str, skipped: dict[str, int], first_line: dict[str, int]) -> BadInput:
    """The error for a file without a usable row, naming the reasons rows were skipped."""
    reasons = "; ".join(f"{r}: {n} (first at line {first_line[r]})" for r, n in skipped.items())
    return BadInput(f"{path}: no usable rows as format {fmt!r}" + (f" ({reasons})" if reasons else " (empty)")
                    + f"; check the file, or name its format with --trace-format ({', '.join(FORMATS)})"
                    + (" and its columns with --columns" if fmt == "generic" else ""))


class Skip(Exception):
    """A row that cannot be used; ``reason`` is what the user sees, counted."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------- small parsers (row by row)


def num(v: Any, what: str) -> float:
    """A finite number from a JSON value or CSV cell, else Skip naming ``what``."""
    if v is None or (isinstance(v, str) and not v.strip()):
        raise Skip(f"missing {what}")
    if isinstance(v, bool):
        raise Skip(f"non-numeric {what}")
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a whole number past a float's range, as inf
        raise Skip(f"non-numeric {what}") from None
    if not math.isfinite(x):
        raise Skip(f"non-numeric {what}")
    return x


def count(v: Any, what: str) -> int:
    """A token count: a whole number from 0 to MAX_TOKENS."""
    x = num(v, what)
    if x < 0:
        raise Skip(f"negative {what}")
    if x != int(x):
        raise Skip(f"fractional {what}")
    if x > MAX_TOKENS:
        raise Skip(f"{what} above {tokens_text()}")
    return int(x)


def opt_seconds(v: Any, scale: float = 1.0, limit: float = MAX_CALL_S) -> float | None:
    """An optional duration × scale, from 0 to ``limit`` seconds; unusable values become None."""
    try:
        x = num(v, "time") * scale
    except Skip:
        return None
    return x if 0 <= x <= limit else None


def opt_stamp(v: Any, scale: float = 1.0) -> float | None:
    """An optional time stamp × scale, in seconds from 0 to MAX_STAMP_S (epoch or relative); else None."""
    return opt_seconds(v, scale, MAX_STAMP_S)


def opt_count(v: Any) -> int | None:
    try:
        return count(v, "count")
    except Skip:
        return None


def opt_str(v: Any) -> str | None:
    return None if v is None or v == "" else str(v)


def _stamp_in_range(v: float) -> float | None:
    """A number as a time stamp: finite and within ±MAX_STAMP_S seconds, else None."""
    try:
        x = float(v)
    except OverflowError:  # a whole number past a float's range
        return None
    return x if math.isfinite(x) and abs(x) <= MAX_STAMP_S else None


def timestamp(v: Any) -> float | None:
    """Epoch seconds from a number (s) or an ISO 8601 datetime string, else None."""
    if v is None or v == "":
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return _stamp_in_range(v)
    s = str(v).strip()
    try:
        return _stamp_in_range(float(s))
    except (ValueError, OverflowError):
        pass
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    head, dot, frac = s.partition(".")
    if dot:  # fromisoformat takes at most 6 fractional digits before 3.12 (Azure has 7)
        digits = len(frac) - len(frac.lstrip("0123456789"))
        s = head + "." + frac[:min(digits, 6)] + frac[digits:]
    try:
        t = dt.datetime.fromisoformat(s)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()


class Rows:
    """Collects calls and skip reasons while a row-by-row importer walks a file."""

    def __init__(self) -> None:
        self.calls: list[TrafficCall] = []
        self.stamps: list[float | None] = []
        self.skipped: Counter[str] = Counter()
        self.first_line: dict[str, int] = {}
        self.soft: Counter[str] = Counter()  # usable rows with a field we had to drop

    def skip(self, reason: str, line: int) -> None:
        self.skipped[reason] += 1
        self.first_line.setdefault(reason, line)

    def add(self, call: TrafficCall, stamp: float | None) -> None:
        """A usable call, with its send time (any epoch; made relative to the earliest known one)."""
        self.calls.append(call)
        self.stamps.append(stamp)

    def load(self, path: Path, fmt: str, notes: Iterable[str] = (), cached_served: bool = False) -> TrafficLoad:
        all_notes = list(notes) + [f"{n} row(s): {what}" for what, n in sorted(self.soft.items())]
        if not self.calls:
            raise no_usable_rows(path, fmt, dict(self.skipped), self.first_line)
        known = [s for s in self.stamps if s is not None]
        calls = self.calls
        if known:
            t0 = min(known)  # a log need not be in time order: every arrival is then >= 0
            calls = [replace(c, arrival_s=None if s is None else s - t0) for c, s in zip(calls, self.stamps)]
        return TrafficLoad(path=path, fmt=fmt, records=calls, skipped=dict(self.skipped),
                           first_skipped_line=dict(self.first_line), notes=all_notes, cached_served=cached_served)
