# size: one contract, the rules a ledger file is read by (line by line, as columns, and its workers' shards
# under the same rules), stated once in the docstring and kept beside the code that applies them.
"""Read a ledger back: validated header, records, and what had to be skipped.

The contract (:func:`read_ledger`):

- The first non-blank line is the ``run`` header: schema ``leverbench.ledger/N``, N no newer than this
  leverbench's (a newer ledger is refused, saying to upgrade), valid by its model
  (:class:`.schema.RunHeader`: ``config`` with the experiment, its baseline one of the ``arms``).
- Every record is validated by its kind's model (:mod:`.schema`: ``CallRecord``'s and ``TurnRecord``'s
  field types, their bounds, cached ≤ prompt tokens, a latency where a call succeeded; a load call's stage and
  its parameters; each other kind's own; its ``arm`` one of the header's).  A record its
  schema refuses is a bad line that no crash makes: :class:`LedgerError` "FILE: line N: field F: what is
  wrong (got V)", or with *salvage* skipped with a warning like any bad line (``Ledger.skipped`` counts
  them).  An older schema's records are validated once upgraded.
- Every later non-blank line (blank: ASCII white space only) must be UTF-8 JSON: an object of a known
  kind (``records.KINDS``).  The writer only appends whole lines, so one bad line is expected: the
  write a crash cut short.  Such a line is ignored with a note (``Ledger.warnings``) when it is the
  last non-blank line, or when the line right after it opens a resumed run (a ``resume`` record, or
  the run header a resume that found nothing done writes): the writer ended the cut line with a
  newline and went on.  A bad line anywhere else means the file was damaged: :class:`LedgerError`
  (exit code 2) naming the file and the line, and nothing is read, unless the caller asks to
  *salvage*: then every bad line after the header is skipped with one warning each (``leverbench
  report --salvage``).  Bytes that are not UTF-8 are named first, wherever they are, but for a line
  cut inside a character (a bad line like any other).
- :class:`Ledger`: ``header``, ``warnings``, ``records`` (every record after the header, complete, in
  file order), ``of_kind(*kinds)`` and ``columns(kind)``: the ``call`` or ``turn`` records as
  :class:`Columns`, the fields analysis reads.
- Shards (issue 17): a load stage run on several workers has each write its own file,
  ``ledger.d/worker-K.jsonl`` beside ``ledger.jsonl``.  Reading a run (its directory or its
  ``ledger.jsonl``) reads them too (:func:`read_shard`, the same rules per file, but that a shard opens
  with a ``shard`` header naming the run's ``run_id`` and that a ``clock`` record, which each worker
  writes first for every stage, is what follows a line cut when a writer went on); their records come
  after the ledger's own in ``records``, sorted by ``t_send`` (``t`` for the clock records; a stable
  sort: a stage run again comes after its earlier execution), each load record with its ``worker``.
  ``shards`` lists their headers; a shard of another run is refused, and a shard missing that a
  ``stage_end`` implies (its ``workers`` N: worker-0 .. worker-(N-1)) is an error (with *salvage*: a warning).
- Clocks: a worker writes its absolute times (``WORKER_CLOCK_FIELDS``: epoch seconds) on its own clock;
  as read they are on the coordinator's, like the ledger's own (its ``metrics`` scrapes, ``stage_end``):
  each record of a stage execution (its ``load_run``) gets t − offset_s, by the shard's ``clock`` record
  of that execution (offset_s = the worker's clock − the coordinator's), and carries ``clock_offset_s``
  and ``clock_uncertainty_s`` (the alignment holds within ± it).  Durations (connect_s, ttft_s,
  latency_s, chunk_t, ...) are left as measured: each is one host's monotonic clock.  Records of an
  execution whose clock record is missing keep the worker's clock, with a warning.

How: a ledger under ``COLUMNAR_MIN_BYTES`` (hundreds of records, the common case) is parsed line by
line (orjson), every record a dict, each validated.  A larger one is nearly all call and turn records: polars reads
from every line only the fields of the columns, with one schema for all kinds (a field a record lacks
is null; a label that is not text, a number or flag of another type, is refused).  Where each line
lies is found first (numpy over the memory-mapped file): the few records of other kinds are parsed
from there as the file is read, and ``records`` on first use (the file is only ever appended to).  A file
with a line the writer did not end (a crash cut it), or that polars refuses whole (a ``timings``
number stored as "NaN"), is read ``CHUNK_BYTES`` at a time: a chunk polars refuses goes through the line-by-line
check, which judges its bad lines, and polars reads the lines kept; what it still refuses is read as
dicts.  (Two things no writer makes read differently: an escaped lone surrogate, which polars takes and
orjson refuses, is read as a column and, as a record, by the json module, while a small ledger refuses it;
a repeated key is its first value in a column and its last in the record.)  Read as columns, the records
are checked by their columns: the bounds of the fields' types (:func:`.schema.column_bounds`), a required
field null, an arm the header does not know; a row that breaks one, or holds an ``error`` or ``timings``
read as text (whose form the columns do not show), is validated as a record, which names the field, and
so is every record of the other kinds (parsed as the file is read).  The fields no column holds (a call's
``chunk_t``, ...) are validated when ``records`` parses every record.  What polars made of a large ledger it
read whole is kept beside it (:mod:`.sidecar`, ``ledger.jsonl.columns``) for the next read of the same
ledger, unchanged, to take instead of parsing every line; every check above runs all the same.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import stat
import time
from contextlib import suppress
from pathlib import Path
from typing import Any, Generic, Iterable, Iterator, Literal, Mapping, TypeGuard, TypeVar, cast, get_args, overload

import numpy as np
import orjson

from ..errors import LedgerError
from . import sidecar, upgrade
from .records import (
    CALL_FLAGS,
    CALL_HASHES,
    CALL_NUMBERS,
    CALL_TIMINGS,
    KINDS,
    LABELS,
    TURN_FLAGS,
    TURN_NUMBERS,
    CallRecord,
    ToolsReached,
    TurnRecord,
)
from .rows import (
    CacheResetRow,
    CallRow,
    ClockRow,
    EngineStartRow,
    EngineStopRow,
    EngineWarmedRow,
    GpuSamplesRow,
    HeaderRow,
    LedgerRow,
    MetricsRow,
    ResumeRow,
    RunHeaderRow,
    ShardHeaderRow,
    StageEndRow,
    TurnRow,
)
from .schema import check_header, check_record, column_bounds, header_arms

H = TypeVar("H", RunHeaderRow, ShardHeaderRow)  # a ledger's header: a run's, or a worker's shard's
CallKind = Literal["call", "probe", "sentinel", "load", "companion", "warmup"]  # the kinds of a call record (rows.CallRow)

COLUMNAR_MIN_BYTES = 16 << 20  # from this file size on, polars reads the call and turn records as columns
CHUNK_BYTES = 64 << 20  # what polars reads at a time of a file it does not read whole
NEWLINE_BLOCK, SHORT_LINES = 1 << 20, 4096  # newlines are looked for a block at a time; this many in one: short lines
COLUMN_KINDS = {"call": (CALL_NUMBERS, CALL_FLAGS, CALL_TIMINGS), "turn": (TURN_NUMBERS, TURN_FLAGS, ())}
HASH_KINDS = {"call": CALL_HASHES, "turn": ()}
TIMINGS_AS_TEXT = "timings read as text"  # a column of polars' reading (_frame), not of a record
NOT_JSON = "is not valid JSON"
UNKNOWN_KIND = "is not a ledger record of a known kind"
RESTART_KINDS = ("resume", "run")  # what a resumed run writes first after ending a cut line
SHARD_RESTART_KINDS = ("shard", "clock")  # what a worker writes first to its shard (after ending a cut line)
SHARDS_DIR = "ledger.d"  # beside ledger.jsonl: the workers' shards, worker-K.jsonl
# the epoch times a worker's load records hold (its clock)
WORKER_CLOCK_FIELDS: tuple[Literal["t_send", "scheduled_t"], ...] = ("t_send", "scheduled_t")
SCHEMA_HINT = ("not a record leverbench writes (the ledger was edited or damaged); nothing was read. To read the "
               "other records without it, pass --salvage")
SALVAGE_HINT = ("the ledger is damaged (a crash cuts only the last line written); nothing was read. "
                "To read past bad lines, each one reported, pass --salvage (leverbench report, replay, project, analyze)")


def _hash_codes(values: list[Any]) -> np.ndarray:
    """One int64 code per distinct text (in order of first appearance), −1 for None or ""."""
    index: dict[Any, int] = {}
    return np.array([-1 if v is None or v == "" else index.setdefault(v, len(index)) for v in values], dtype=np.int64)


def _codes(values: list[Any]) -> tuple[np.ndarray, list[Any]]:
    """(codes, names): ``names[codes[i]] == values[i]``, names in order of first appearance."""
    index: dict[Any, int] = {}
    return np.array([index.setdefault(v, len(index)) for v in values], dtype=np.int64), list(index)


class Columns:
    """Records of one kind (``call`` or ``turn``) as columns, one row per record in ledger order.

    - ``labels[k]`` for k in ``records.LABELS``: (codes, names), ``names[codes[i]]`` = record i's value
      (None: absent or null);
    - ``numbers[k]``: float64, NaN where the record lacks the field or has null; for calls also
      ``numbers["timings." + k]`` for k in ``records.CALL_TIMINGS`` (a number the writer stored as a
      string, "NaN", "+Inf", "-Inf", as ``float()`` reads it);
    - ``flags[k]``: the field's value is true (absent: false);
    - ``hashes[k]`` for k in ``records.CALL_HASHES`` (calls): int64, one code per distinct text within this
      read (equal codes, equal texts; how the codes are chosen differs between the two ways of reading),
      −1 where the record lacks the field or has null or "";
    - ``failed``: ``error`` is not null; ``has_timings``: (calls) ``timings`` is an object.
    """

    def __init__(self, kind: str, labels: dict[str, tuple[np.ndarray, list[Any]]], numbers: dict[str, np.ndarray],
                 flags: dict[str, np.ndarray], failed: np.ndarray, has_timings: np.ndarray,
                 hashes: dict[str, np.ndarray] | None = None) -> None:
        self.kind, self.n = kind, len(failed)
        self.labels, self.numbers, self.flags = labels, numbers, flags
        self.hashes = hashes or {}
        self.failed, self.has_timings = failed, has_timings

    @classmethod
    def of(cls, kind: str, records: Iterable[Mapping[str, object]]) -> Columns:
        """From record dicts (of *kind*)."""
        recs = list(records)
        numbers, flags, timings = COLUMN_KINDS[kind]
        got = [r.get("timings") if timings else None for r in recs]
        nested = [t if isinstance(t, dict) else None for t in got]
        nums = {k: np.array([r.get(k) for r in recs], dtype=float) for k in numbers}
        nums.update({f"timings.{k}": np.array([None if t is None else t.get(k) for t in nested], dtype=float)
                     for k in timings})
        return cls(kind, {k: _codes([r.get(k) for r in recs]) for k in LABELS}, nums,
                   {k: np.array([bool(r.get(k)) for r in recs], dtype=bool) for k in flags},
                   np.array([r.get("error") is not None for r in recs], dtype=bool),
                   np.array([t is not None for t in nested], dtype=bool),
                   {k: _hash_codes([r.get(k) for r in recs]) for k in HASH_KINDS[kind]})

    @classmethod
    def _of_frame(cls, kind: str, frame: Any, rows: Any) -> Columns:
        """From the *rows* (a mask) of polars' frame that hold records of *kind* (see :func:`_frame`)."""
        import polars as pl  # noqa: PLC0415 (a small ledger never loads polars)

        def col(k: str, field: str | None = None) -> Any:  # one column at a time: the frame is large
            return (frame[k] if field is None else frame[k].struct.field(field)).filter(rows)

        numbers, flags, timings = COLUMN_KINDS[kind]
        labels = {}
        for k in LABELS:
            s = col(k)
            names = s.drop_nulls().unique(maintain_order=True)
            # each row's index into *names*, from the categories' codes (a lookup table: no text compared)
            lookup = np.full(int(s.to_physical().max() or 0) + 1, len(names), np.int64)
            lookup[names.to_physical().to_numpy()] = np.arange(len(names))
            codes = lookup[s.to_physical().fill_null(0).to_numpy()]
            if s.null_count():
                codes[s.is_null().to_numpy()] = len(names)
            labels[k] = (codes, names.cast(pl.String).to_list() + [None] * bool(s.null_count()))
        nums = {k: col(k).to_numpy(writable=True) for k in numbers}
        nums.update({f"timings.{k}": col("timings", k).to_numpy(writable=True) for k in timings})
        has_timings = col("timings").is_not_null() if timings else pl.repeat(False, int(rows.sum()), eager=True)
        hashes = {}
        for k in HASH_KINDS[kind]:
            h = col(k).cast(pl.String)  # (read as Categorical: polars refuses a number there, as a String takes it)
            codes = h.hash(seed=0).reinterpret(signed=True) & np.int64((1 << 62) - 1)  # non-negative
            hashes[k] = codes.to_numpy(writable=True)
            hashes[k][(h.is_null() | (h == "")).fill_null(True).to_numpy()] = -1
        return cls(kind, labels, nums, {k: col(k).fill_null(False).to_numpy(writable=True) for k in flags},
                   col("error").is_not_null().to_numpy(writable=True), has_timings.to_numpy(writable=True), hashes)


class Ledger(Generic[H]):
    """A ledger as read: ``header`` (a ``run`` header, :class:`.rows.RunHeaderRow`; a shard's:
    :class:`.rows.ShardHeaderRow`), ``records`` (every record after the header, complete, in file
    order: :data:`.rows.LedgerRow`) and ``warnings`` (what had to be skipped).  Read as columns, it parses records again from
    the file only when asked for: the other kinds' for :meth:`of_kind`, all for ``records``."""

    def __init__(self, path: Path, header: H, records: list[LedgerRow] | None = None,
                 warnings: list[str] | None = None, *, _source: _Source | None = None,
                 _columns: dict[str, Columns] | None = None) -> None:
        self.path = path
        self.header: H = header
        self.warnings = warnings if warnings is not None else []
        self._records = records if records is not None or _source is not None else []
        self._source, self._columns = _source, _columns or {}
        self._others: list[LedgerRow] | None = None
        self.shards: list[ShardHeaderRow] = []  # the headers of the shards read with it (add_shards)
        self.skipped = 0  # records of a known kind their schema refuses, left out (salvage)
        self._shard_records: list[LedgerRow] = []

    @property
    def records(self) -> list[LedgerRow]:
        if self._records is None:
            assert self._source is not None
            self._records = self._source.parse_all() + self._shard_records
            self.warnings.extend(self._source.warnings)
            self.skipped += len(self._source.warnings)
        return self._records

    @overload
    def of_kind(self, *kinds: CallKind) -> Iterator[CallRow]: ...
    @overload
    def of_kind(self, *kinds: Literal["turn"]) -> Iterator[TurnRow]: ...
    @overload
    def of_kind(self, *kinds: Literal["metrics"]) -> Iterator[MetricsRow]: ...
    @overload
    def of_kind(self, *kinds: Literal["stage_end"]) -> Iterator[StageEndRow]: ...
    @overload
    def of_kind(self, *kinds: Literal["clock"]) -> Iterator[ClockRow]: ...
    @overload
    def of_kind(self, *kinds: Literal["resume"]) -> Iterator[ResumeRow]: ...
    @overload
    def of_kind(self, *kinds: Literal["cache_reset"]) -> Iterator[CacheResetRow]: ...
    @overload
    def of_kind(self, *kinds: Literal["engine_start"]) -> Iterator[EngineStartRow]: ...
    @overload
    def of_kind(self, *kinds: Literal["engine_stop"]) -> Iterator[EngineStopRow]: ...
    @overload
    def of_kind(self, *kinds: Literal["engine_warmed"]) -> Iterator[EngineWarmedRow]: ...
    @overload
    def of_kind(self, *kinds: Literal["gpu"]) -> Iterator[GpuSamplesRow]: ...
    @overload
    def of_kind(self, *kinds: str) -> Iterator[LedgerRow]: ...

    def of_kind(self, *kinds: str) -> Iterator[LedgerRow]:
        """The records of *kinds*, in order (typed by their kind: :mod:`.rows`)."""
        if self._records is None and self._source is not None and not set(kinds) & set(self._columns):
            if self._others is None:
                self._others = self._source.parse(self._source.others)
            others = self._others + self._shard_records
            return (r for r in others if r.get("kind") in kinds)
        return (r for r in self.records if r.get("kind") in kinds)

    def columns(self, kind: str) -> Columns:
        """The records of *kind* (``call`` or ``turn``) as columns."""
        if kind in self._columns and not any(r.get("kind") == kind for r in self._shard_records):
            return self._columns[kind]
        return Columns.of(kind, self.of_kind(kind))

    def add_shards(self, shards: list[Ledger[ShardHeaderRow]]) -> None:
        """Merge *shards* (:func:`read_shard`) in: their records after this ledger's own, sorted by time (see
        the module docstring), their warnings after its own.  LedgerError for a shard of another run."""
        merged: list[LedgerRow] = []
        for shard in shards:
            if shard.header.get("run_id") != self.header.get("run_id"):
                raise LedgerError(f"{shard.path}: a shard of run {shard.header.get('run_id')!r}, not of this run "
                                  f"({self.header.get('run_id')!r}); move it out of {SHARDS_DIR}/")
            self.shards.append(shard.header)
            self.warnings.extend(shard.warnings)
            self.skipped += shard.skipped
            merged.extend(shard.records)
        merged.sort(key=_when)
        self._shard_records.extend(merged)
        if self._records is not None:
            self._records.extend(merged)

    def __repr__(self) -> str:
        return f"Ledger(path={self.path!r}, warnings={len(self.warnings)})"


class _Source:
    """Where a ledger read as columns parses its records again: record j is the file's bytes
    ``starts[j]:ends[j]`` (the file as read: *st*); ``others``: the records of the kinds not kept as columns."""

    def __init__(self, path: Path, st: os.stat_result, starts: np.ndarray, ends: np.ndarray, others: list[int],
                 lines: np.ndarray, scan: _Scan) -> None:
        self.path, self.size, self.ident = path, st.st_size, (st.st_dev, st.st_ino)
        self.starts, self.ends, self.others = starts, ends, others
        self.lines, self.scan = lines, scan  # each record's line index; the read's rules (salvage, arms)
        self.checked_others: list[LedgerRow] = []

    def check(self, others: list[int], suspect: np.ndarray) -> np.ndarray:
        """Check the records of *others* and the *suspect* ones (a mask) by their schema (:func:`check_record`):
        each refused is a bad line of the scan's (:meth:`_Scan.invalidate`); the mask of those kept.  The
        records of *others* as parsed: ``checked_others``."""
        ok = np.ones(len(self.lines), dtype=bool)
        rows = sorted(set(others) | set(np.flatnonzero(suspect).tolist()))
        parsed = dict(zip(rows, self.parse(rows)))
        for j, rec in parsed.items():
            defect = check_record(rec, self.scan.arms)
            if defect is not None:
                self.scan.invalidate(int(self.lines[j]), defect)
                ok[j] = False
        self.checked_others = [parsed[j] for j in others]
        return ok

    def parse_all(self) -> list[LedgerRow]:
        """Every record, each checked by its schema (the columns vouch for the fields analysis reads, not for
        the rest): a record refused is a LedgerError, or with salvage left out, with a warning (``warnings``)."""
        recs = self.parse()
        out, self.warnings = [], []
        for j, rec in enumerate(recs):
            defect = check_record(rec, self.scan.arms)
            if defect is None:
                out.append(rec)
                continue
            where = f"{self.path}: line {int(self.lines[j]) + 1}: {defect}"
            if not self.scan.salvage:
                raise LedgerError(f"{where}; {SCHEMA_HINT}")
            self.warnings.append(f"{where}; skipped (--salvage)")
        return out

    def parse(self, rows: list[int] | None = None) -> list[LedgerRow]:
        """The records (of *rows*, when given) as dicts."""
        pick: Any = slice(None) if rows is None else rows
        try:
            with open(self.path, "rb") as fh:
                st = os.fstat(fh.fileno())
                if (st.st_dev, st.st_ino) == self.ident and st.st_size >= self.size:
                    with mmap.mmap(fh.fileno(), self.size, access=mmap.ACCESS_READ) as mm:
                        return [_loads(mm[a:b]) for a, b in zip(self.starts[pick].tolist(), self.ends[pick].tolist())]
        except OSError as exc:
            raise LedgerError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        except ValueError:
            pass
        raise LedgerError(f"{self.path}: the ledger changed since it was read (it is only ever appended to); "
                          "read it again")


def _loads(line: bytes) -> Any:
    """A line polars read as a record: orjson's parse, else (an escaped lone surrogate, which polars takes and
    orjson refuses) the json module's; ValueError when neither reads it (the file changed)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _lines(mm: mmap.mmap, ends: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, nonblank, closed) of the lines of *mm*: line i is ``mm[starts[i]:ends[i]]``
    (its newline at ``ends[i]``), ``nonblank[i]``: it holds more than ASCII white space, ``closed[i]``:
    its last byte is "}" (as every line the writer ends).  *ends*: where they end, when known (kept beside the
    ledger: :mod:`.sidecar`)."""
    buf = np.frombuffer(mm, np.uint8)
    if ends is None:
        ends = _newlines(mm, buf)
        if len(buf) and buf[-1] != 10:
            ends = np.append(ends, len(buf))
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)[:len(ends)]
    nonblank = buf[np.minimum(starts, len(buf) - 1)] == ord("{")
    for i in np.flatnonzero(~nonblank).tolist():
        nonblank[i] = bool(mm[starts[i]:ends[i]].strip())
    return starts, ends, nonblank, buf[np.maximum(ends - 1, 0)] == ord("}")


def _newlines(mm: mmap.mmap, buf: np.ndarray) -> np.ndarray:
    """The offsets of *mm*'s newlines (*buf*: its bytes), in order."""
    parts, find = [np.zeros(0, np.int64)], mm.find
    for a in range(0, len(buf), NEWLINE_BLOCK):
        b, at = min(a + NEWLINE_BLOCK, len(buf)), a
        found: list[int] = []
        # memchr from one newline to the next: lines of a record each (~1 kB) are found in a third of the time
        # numpy takes to compare every byte and gather the matches; a block of short lines goes to numpy
        while len(found) < SHORT_LINES and (end := find(b"\n", at, b)) >= 0:
            found.append(end)
            at = end + 1
        parts.append(np.array(found, dtype=np.int64))
        if len(found) == SHORT_LINES:
            parts.append(np.flatnonzero(buf[at:b] == 10) + at)
    return np.concatenate(parts)


def _check_header(path: Path, header: Any, kind: str = "run", line: int = 1) -> HeaderRow:
    """A ledger's ``run`` header (a shard's ``shard`` header, *kind*) on line *line*, checked by its schema
    (:func:`.schema.check_header`: types, bounds, the baseline one of the arms)."""
    if not isinstance(header, dict) or header.get("kind") != kind or not isinstance(header.get("schema"), str):
        raise LedgerError(f"{path}: line {line} is not a leverbench {kind} header; is this a leverbench ledger?")
    upgrade.schema_version(path, header["schema"])  # foreign, newer or unreachable: refused
    defect = check_header(header, kind)
    if defect is not None:
        raise LedgerError(f"{path}: line {line}: {defect}; the {kind} header is not one leverbench writes "
                          "(edited or damaged): nothing can be read without it")
    return cast(HeaderRow, header)  # (its schema's model has just checked it)


class _Scan:
    """The line-by-line check: every line parsed (orjson), the records (or, with *keep_lines*, their
    lines) kept in ``kept``.  The first line that makes the file no ledger stops it (``error``: line
    index or None, message), but for a look for bytes that are not UTF-8 (``utf8_error``: byte offset,
    line index); bad lines (``bad``: index → why) are judged once all was seen (:meth:`judge`).
    ``line``, ``offset``: the index and file offset of the next line to check."""

    def __init__(self, path: Path, salvage: bool, keep_lines: bool = False, *, shard: bool = False,
                 arms: frozenset[str] | None = None) -> None:
        self.path, self.salvage, self.keep_lines = path, salvage, keep_lines
        self.arms = arms  # the arms a record may name (a run's from its header; a shard's: its run's, or None)
        self.invalid: set[int] = set()  # the bad lines that are JSON records of a known kind, but not valid ones
        self.header_kind, self.restart_kinds = ("shard", SHARD_RESTART_KINDS) if shard else ("run", RESTART_KINDS)
        self.header: HeaderRow | None = None
        self.kept: list[Any] = []  # records (LedgerRow), or with keep_lines their lines (bytes)
        self.header_line = -1  # its index
        self.bad: dict[int, str] = {}
        self.restarts: set[int] = set()  # line indices of records of RESTART_KINDS
        self.last_nonblank = -1
        self.error: tuple[int | None, str] | None = None
        self.utf8_error: tuple[int, int] | None = None
        self.line = self.offset = 0

    def run(self, lines: Iterable[bytes]) -> None:
        """Check the next *lines* (each with its newline, but a last line without one)."""
        for line in lines:
            if self.utf8_error is not None:
                return
            i, start = self.line, self.offset
            self.line, self.offset = i + 1, start + len(line)
            line = line.removesuffix(b"\n")
            if self.error is not None:
                if not self._utf8(line, i, start):
                    return
                continue
            if not line.strip():
                continue
            self.last_nonblank = i
            try:
                obj = orjson.loads(line)
            except ValueError:
                if not self._utf8(line, i, start):
                    return
                if self.header is None:
                    self.error = (i, "{path}: line {line} is not JSON; not a leverbench ledger")
                else:
                    self.bad[i] = NOT_JSON
                continue
            if self.header is None:
                try:
                    self.header, self.header_line = _check_header(self.path, obj, self.header_kind, i + 1), i
                    if self.header_kind == "run":
                        self.arms = header_arms(obj)
                except LedgerError as exc:
                    self.error = (None, str(exc))
                continue
            kind = obj.get("kind") if isinstance(obj, dict) else None
            if kind not in KINDS:
                if self.salvage:
                    self.bad[i] = UNKNOWN_KIND
                else:
                    self.error = (i, "{path}: line {line} " + UNKNOWN_KIND + "; " + SALVAGE_HINT)
                continue
            if kind in self.restart_kinds:  # (what follows a cut line, valid or not: the chunked read judges the same)
                self.restarts.add(i)
            defect = check_record(obj, self.arms)
            if defect is not None:
                self.invalidate(i, defect)
                continue
            self.kept.append(line if self.keep_lines else obj)

    def invalidate(self, i: int, defect: str) -> None:
        """Line index *i* holds a record its schema refuses (*defect*: "field F: what is wrong"): a bad line."""
        self.bad[i] = defect
        self.invalid.add(i)

    def _utf8(self, line: bytes, i: int, start: int) -> bool:
        """False (and ``utf8_error`` set) when *line* is not UTF-8, but where it ends in the first bytes of
        a character (a write cut there) or with *salvage*: such a line is judged as a bad line."""
        if line.isascii():
            return True
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            cut = exc.end == len(line) and exc.reason == "unexpected end of data"
            if not (cut or self.salvage):
                self.utf8_error = (start + exc.start, i)
                return False
        return True

    def judge(self) -> dict[int, str | None]:
        """Per bad line: "last" (the last non-blank line: a write cut by a crash), "resumed" (a cut
        line that a resumed run ended with a newline and wrote after: the next line opens the
        resumed run) or None (damage)."""
        return {i: "last" if why == NOT_JSON and i >= self.last_nonblank else
                "resumed" if why == NOT_JSON and i + 1 in self.restarts else None
                for i, why in sorted(self.bad.items())}

    def raise_errors(self) -> None:
        if self.utf8_error is not None:
            at, index = self.utf8_error
            what = "not a leverbench ledger" if index == 0 else SALVAGE_HINT  # (the header may be unparsed yet)
            raise LedgerError(f"{self.path}: line {index + 1} is not UTF-8 text (byte {at}); {what}")
        first = None if self.salvage else min((i for i, cut in self.judge().items() if cut is None), default=None)
        if first is not None and not (self.error and self.error[0] is not None and self.error[0] < first):
            if first in self.invalid:
                raise LedgerError(f"{self.path}: line {first + 1}: {self.bad[first]}; {SCHEMA_HINT}")
            raise LedgerError(f"{self.path}: line {first + 1} {self.bad[first]} and is not the last line written "
                              f"before a crash; {SALVAGE_HINT}")
        if self.error is not None:
            at_line, message = self.error
            raise LedgerError(message if at_line is None else message.format(path=self.path, line=at_line + 1))
        if self.header is None:
            raise LedgerError(f"{self.path}: empty ledger (no run header)")

    def warnings(self) -> list[str]:
        """One per bad line that did not stop the reading: a cut write, or a line salvaged past."""
        why = {"last": "is incomplete (a run cut off while writing); ignored",
               "resumed": "is incomplete (cut off, then resumed); ignored", None: "{}; skipped (--salvage)"}
        return [f"{self.path}: line {i + 1}" + (": " if i in self.invalid else " ") + why[cut].format(self.bad[i])
                for i, cut in self.judge().items()]

    def skipped(self) -> int:
        """How many records (lines of a known kind the schema refuses) were skipped with *salvage*."""
        return len(self.invalid) if self.salvage else 0

    def run_header(self) -> RunHeaderRow:
        """The ``run`` header read (there is one once :meth:`raise_errors` let a ledger's lines pass)."""
        header = self.header
        assert header is not None and header["kind"] == "run"
        return header

    def shard_header(self) -> ShardHeaderRow:
        """The ``shard`` header read (there is one once :meth:`raise_errors` let a shard's lines pass)."""
        header = self.header
        assert header is not None and header["kind"] == "shard"
        return header

    def ledger(self, header: H) -> Ledger[H]:
        """The records kept, as a ledger opened by *header* (:meth:`run_header` or :meth:`shard_header`)."""
        led = Ledger(self.path, header, self.kept, self.warnings())
        led.skipped = self.skipped()
        return led


def _frame(source: Path | bytes) -> Any:
    """Polars' reading of *source* (the file, or lines of it): kind, labels, numbers, flags, error and
    timings of every record; None when polars refuses a line.  Numbers are read as Float64 (a record's
    schema has no number stored as text: a measured duration or count is finite); ``timings`` as Float64,
    else (for lines, not the whole file: a few lines have it) as text converted strictly: a server's
    number the writer stored as "NaN", "+Inf", "-Inf".  Read as text, a number and a text holding one
    are alike: column ``TIMINGS_AS_TEXT`` marks the rows (those with timings) their schema must judge."""
    import polars as pl  # noqa: PLC0415 (a small ledger never loads polars)

    for number in (pl.Float64,) if isinstance(source, Path) else (pl.Float64, pl.String):
        try:
            frame = pl.read_ndjson(source if isinstance(source, Path) else io.BytesIO(source),
                                   schema=_frame_schema(number))
            if number == pl.String:
                frame = frame.cast({"timings": pl.Struct(dict.fromkeys(CALL_TIMINGS, pl.Float64))}, strict=True)
            frame = frame.with_columns((pl.col("timings").is_not_null() if number == pl.String else pl.lit(False))
                                       .alias(TIMINGS_AS_TEXT))
            if frame["kind"].cast(pl.String).is_in(list(KINDS)).fill_null(False).all():
                return frame
        except (pl.exceptions.PolarsError, pl.exceptions.PanicException):
            continue
    return None


def _frame_schema(number: Any = None) -> dict[str, Any]:
    """What :func:`_frame` asks polars to read, ``timings``' numbers as *number* (default Float64); with
    *number* None, the frame it returns (with ``TIMINGS_AS_TEXT``)."""
    import polars as pl  # noqa: PLC0415 (a small ledger never loads polars)

    return {"kind": pl.Categorical, **dict.fromkeys(LABELS, pl.Categorical), **dict.fromkeys(CALL_HASHES, pl.Categorical),
            **dict.fromkeys(CALL_NUMBERS + TURN_NUMBERS, pl.Float64), **dict.fromkeys(CALL_FLAGS + TURN_FLAGS, pl.Boolean),
            "error": pl.String, "timings": pl.Struct(dict.fromkeys(CALL_TIMINGS, number or pl.Float64)),
            **({TIMINGS_AS_TEXT: pl.Boolean} if number is None else {})}


def _frame_by_chunks(mm: mmap.mmap, starts: np.ndarray, ends: np.ndarray, nonblank: np.ndarray, scan: _Scan) -> Any:
    """The records from *scan*'s next line on, read by polars CHUNK_BYTES of whole lines at a time; a
    chunk polars refuses is checked line by line (*scan*, raising what it finds) and polars reads the
    lines kept.  None when polars refuses those too."""
    import polars as pl  # noqa: PLC0415 (a small ledger never loads polars)

    frames, a = [_frame(b"")], scan.line
    while a < len(starts) and scan.utf8_error is None:
        b = max(a + 1, int(np.searchsorted(starts, starts[a] + CHUNK_BYTES)))  # lines a … b-1
        chunk = mm[starts[a]:ends[b - 1] + 1]
        if a - 1 in scan.bad:  # after a bad line: does a resumed run start here?
            with suppress(ValueError, AttributeError):
                if orjson.loads(mm[starts[a]:ends[a]]).get("kind") in RESTART_KINDS:
                    scan.restarts.add(a)
        if scan.error is None and (part := _frame(chunk)) is not None:
            frames.append(part)
            if nonblank[a:b].any():
                scan.last_nonblank = a + int(np.flatnonzero(nonblank[a:b])[-1])
            scan.line, scan.offset = b, int(ends[b - 1]) + 1
        else:
            scan.run(io.BytesIO(chunk))
            if scan.error is None and scan.utf8_error is None:
                part, scan.kept = _frame(b"\n".join(scan.kept)), []
                if part is None:
                    return None
                frames.append(part)
        a = b
    return pl.concat(frames)  # (the caller raises what *scan* found, with what the columns' check finds)


def _read_columnar(path: Path, fh: Any, salvage: bool, keep_columns: bool = True) -> Ledger[RunHeaderRow]:
    """:func:`read_ledger` of a large file with polars (see the module's docstring): the whole file at
    once (or what a read of it kept beside it: :mod:`.sidecar`), else (a line the writer did not end, or polars
    refused one) chunk by chunk."""
    import polars as pl  # noqa: PLC0415 (a small ledger never loads polars)

    began, st, scan = time.time(), os.fstat(fh.fileno()), _Scan(path, salvage, keep_lines=True)
    with mmap.mmap(fh.fileno(), st.st_size, access=mmap.ACCESS_READ) as mm:
        kept = sidecar.load(path, st, mm, _frame_schema())
        starts, ends, nonblank, closed = _lines(mm, None if kept is None else kept.ends)
        head = int(np.argmax(nonblank)) if nonblank.any() else len(starts) - 1
        scan.run(mm[starts[i]:ends[i] + 1] for i in range(head + 1))
        if scan.header is None or scan.error is not None or scan.utf8_error is not None:
            scan.run(mm[starts[i]:ends[i] + 1] for i in range(head + 1, len(starts)))
            scan.raise_errors()
        whole = None if not closed[nonblank].all() else _frame(path) if kept is None else kept.frame
        if whole is not None and len(whole) and whole["kind"][0] == "run":
            frame = whole[1:]
            worth = keep_columns and kept is None and sidecar.worth_saving(st, began)
            digest = sidecar.digest(mm) if worth else None
        else:
            frame, digest = _frame_by_chunks(mm, starts, ends, nonblank, scan), None
    rows = np.flatnonzero(nonblank)
    rows = rows[~np.isin(rows, [scan.header_line, *scan.bad])]
    if frame is None or len(frame) != len(rows):  # a record polars cannot type: read dicts
        fh.seek(0)
        return _read_lines(path, fh, salvage)
    kinds = frame["kind"].cast(pl.String)
    others = np.flatnonzero(~kinds.is_in(list(COLUMN_KINDS)).to_numpy()).tolist()
    source = _Source(path, st, starts[rows], ends[rows], others, rows, scan)
    columns = {k: Columns._of_frame(k, frame, kinds == k) for k in COLUMN_KINDS}
    suspect = np.zeros(len(frame), dtype=bool)  # the records the columns' types and bounds do not vouch for
    text = frame[TIMINGS_AS_TEXT].to_numpy()
    for k, cols in columns.items():
        at = np.flatnonzero((kinds == k).to_numpy())
        suspect[at[_suspect(cols, scan.arms) | text[at]]] = True
    ok = source.check(others, suspect)
    scan.raise_errors()
    if not ok.all():  # with salvage: the refused records left out
        frame, kinds, rows = frame.filter(pl.Series(ok)), kinds.filter(pl.Series(ok)), rows[ok]
        keep = np.cumsum(ok) - 1
        source = _Source(path, st, starts[rows], ends[rows], [int(keep[j]) for j in others if ok[j]], rows, scan)
        columns = {k: Columns._of_frame(k, frame, kinds == k) for k in COLUMN_KINDS}
    led = Ledger(path, scan.run_header(), warnings=scan.warnings(), _columns=columns, _source=source)
    led._others = [r for j, r in zip(others, source.checked_others) if ok[j]]
    led.skipped = scan.skipped()
    if digest is not None:  # (a ledger read whole: what the next read of it may take instead of parsing its lines)
        sidecar.save(path, st, digest, sidecar.Kept(whole, ends), _frame_schema())
    return led


def _suspect(cols: Columns, arms: frozenset[str] | None) -> np.ndarray:
    """The rows of *cols* (call or turn records read as columns) whose columns break a bound of the record's
    schema (``records.CallRecord``'s or ``TurnRecord``'s field types, :func:`.schema.column_bounds`), lack a
    required field (``arm``, ``case``; a call's ``t_send``), say ``tools_reached`` outside its values, name an arm the header does not (each distinct arm looked
    up once), lack a latency though they succeeded, or hold an ``error`` (whose form the columns do not show):
    each is then checked as a record (:func:`.schema.check_record`), which names the field.  (A null number is NaN here: JSON has no NaN.)"""
    codes, names = cols.labels["arm"]
    bad_arm = [i for i, a in enumerate(names) if a is None or (arms is not None and a not in arms)]
    case_codes, case_names = cols.labels["case"]
    out: np.ndarray = np.isin(codes, bad_arm) | np.isin(case_codes, [i for i, c in enumerate(case_names) if c is None]) | cols.failed
    said_codes, said = cols.labels["tools_reached"]  # the one label of a closed list of values
    out |= np.isin(said_codes, [i for i, v in enumerate(said) if v is not None and v not in get_args(ToolsReached)])
    record = CallRecord if cols.kind == "call" else TurnRecord
    with np.errstate(invalid="ignore"):
        for name, (whole, ge, le, finite) in column_bounds(record).items():
            x = cols.numbers[name]
            if finite:
                out |= np.isinf(x)
            if ge is not None:
                out |= x < ge
            if le is not None:
                out |= x > le
            if whole:
                out |= (x != np.floor(x)) & ~np.isnan(x)
        if cols.kind == "call":
            out |= np.isnan(cols.numbers["t_send"]) | (cols.numbers["cached_tokens"] > cols.numbers["prompt_tokens"])
            out |= np.isnan(cols.numbers["latency_s"]) & ~cols.failed  # one that succeeded has its latency
    return out


def _scan_lines(path: Path, fh: Any, salvage: bool, *, shard: bool = False,
                arms: frozenset[str] | None = None) -> _Scan:
    """A ledger's (or a shard's) lines checked one by one: LedgerError for what makes them no ledger."""
    scan = _Scan(path, salvage, shard=shard, arms=arms)
    scan.run(fh)
    scan.raise_errors()
    return scan


def _read_lines(path: Path, fh: Any, salvage: bool) -> Ledger[RunHeaderRow]:
    scan = _scan_lines(path, fh, salvage)
    return scan.ledger(scan.run_header())


def _read_upgraded(path: Path, fh: Any, version: int, salvage: bool) -> Ledger[RunHeaderRow]:
    """A ledger of an older schema: its lines upgraded in memory (:mod:`.upgrade`), then read line by line."""
    return _read_lines(path, io.BytesIO(upgrade.upgrade_lines(fh.read(), version)), salvage)


def _regular(path: Path) -> None:
    """LedgerError unless *path* (followed through links) is a regular file or missing: a device would be read
    without end (``/dev/zero``) and a FIFO's open blocks until a writer comes, so neither is opened."""
    try:
        st = os.stat(path)
    except OSError:
        return  # missing or unreadable: the open says which
    if not stat.S_ISREG(st.st_mode):
        raise LedgerError(f"{path}: not a regular file (a device, FIFO or socket); give a run directory or its "
                          "ledger.jsonl")


def read_ledger(path: str | Path, *, salvage: bool = False, keep_columns: bool = True) -> Ledger[RunHeaderRow]:
    """Parse ``ledger.jsonl`` (or a run directory holding one), and the shards in ``ledger.d/`` beside it:
    see the module's docstring.  *keep_columns*: a large ledger's parse may be kept beside it (:mod:`.sidecar`);
    False for a reader that writes nothing (``run --dry-run``) or is about to append (``--resume``)."""
    path = Path(path)
    if path.is_dir():
        path = path / "ledger.jsonl"
    _regular(path)
    try:
        with open(path, "rb") as fh:
            old = upgrade.older_version(path, fh)
            if old is not None:  # an older schema: upgraded as it is read (a newer one is refused by the header check)
                led = _read_upgraded(path, fh, old, salvage)
            elif os.fstat(fh.fileno()).st_size >= max(COLUMNAR_MIN_BYTES, 1):
                led = _read_columnar(path, fh, salvage, keep_columns)
            else:
                led = _read_lines(path, fh, salvage)
    except FileNotFoundError:
        raise LedgerError(f"{path}: no ledger here (expected a run directory or its ledger.jsonl)") from None
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read: {exc.strerror or exc}") from None
    shards = sorted((path.parent / SHARDS_DIR).glob("worker-*.jsonl"), key=lambda p: (len(p.name), p.name))
    if shards:
        arms = header_arms(led.header)
        led.add_shards([s for s in (read_shard(p, salvage=salvage, arms=arms) for p in shards) if s is not None])
    _missing_shards(led, path.parent / SHARDS_DIR, salvage)
    return led


def _missing_shards(led: Ledger[RunHeaderRow], shards_dir: Path, salvage: bool) -> None:
    """A stage that ended on N workers (its ``stage_end``) left shards worker-0 .. worker-(N-1) (each is
    written before the stage starts): one missing is damage, not fewer calls.  LedgerError naming it;
    with *salvage* a warning, and the rest is read."""
    missing: dict[Path, StageEndRow] = {}
    for end in led.of_kind("stage_end"):
        for k in range(end.get("workers") or 1) if (end.get("workers") or 1) > 1 else ():
            p = shards_dir / f"worker-{k}.jsonl"
            if p not in missing and not p.exists():
                missing[p] = end
    for p, end in missing.items():
        why = (f"{p} is missing: stage {end.get('stage')!r} on arm {end.get('arm')!r} ran on {end['workers']} "
               f"workers, each writing its calls to its own shard in {SHARDS_DIR}/ (copy the whole run directory)")
        if not salvage:
            raise LedgerError(f"{why}; to read the run without its calls, pass --salvage")
        led.warnings.append(f"{why}; its calls are left out (--salvage)")


def read_shard(path: Path, *, salvage: bool = False, arms: frozenset[str] | None = None) -> Ledger[ShardHeaderRow] | None:
    """One worker's shard (``ledger.d/worker-K.jsonl``): its ``shard`` header, records and warnings, by the
    rules of a ledger file (see the module docstring), its absolute times on the coordinator's clock
    (:func:`_align_clocks`); None for an empty file (a worker that died before it wrote its header:
    nothing was measured)."""
    _regular(path)
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                return None
            scan = _scan_lines(path, fh, salvage, shard=True, arms=arms)
            shard = scan.ledger(scan.shard_header())
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read: {exc.strerror or exc}") from None
    _align_clocks(shard)
    return shard


def _align_clocks(shard: Ledger[ShardHeaderRow]) -> None:
    """Put *shard*'s absolute times on the coordinator's clock, in place: for each record of a stage execution
    whose ``clock`` record the shard holds (the same ``load_run``; offset_s = worker clock − coordinator's),
    t := t − offset_s for t in ``WORKER_CLOCK_FIELDS``, and ``clock_offset_s`` / ``clock_uncertainty_s`` set
    from it.  An execution without one keeps the worker's clock: one warning per execution, naming it."""
    clocks = {r.get("load_run"): r for r in shard.of_kind("clock")}
    unaligned: dict[tuple[Any, Any], int] = {}
    for r in shard.records:
        if not _on_worker_clock(r):
            continue
        c = clocks.get(r.get("load_run"))
        off = None if c is None else c.get("offset_s")
        if c is None or not _finite(off):
            key = (r.get("stage"), r.get("load_run"))
            unaligned[key] = unaligned.get(key, 0) + 1
            continue
        for k in WORKER_CLOCK_FIELDS:
            if _finite(t := r.get(k)):
                r[k] = t - off
        r["clock_offset_s"], r["clock_uncertainty_s"] = off, c.get("uncertainty_s")
    for (stage, run), n in unaligned.items():
        shard.warnings.append(
            f"{shard.path}: no clock record for stage {stage!r} (load_run {run!r}): the times of its {n} records "
            f"stay on worker {shard.header.get('worker')}'s clock, not aligned to the coordinator's (the stage's "
            "server figures and throughput window may be off by the clocks' difference)")


def _finite(v: object) -> TypeGuard[float]:
    """Whether *v* is a finite JSON number (not a flag)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))


def _on_worker_clock(r: LedgerRow) -> TypeGuard[CallRow]:
    """Whether *r* holds times on its worker's clock (:data:`WORKER_CLOCK_FIELDS`: a call's) to align."""
    return r.get("kind") not in ("shard", "clock") and any(k in r for k in WORKER_CLOCK_FIELDS)


def _when(r: LedgerRow) -> float:
    """Where *r* falls in time, to merge shards' records by: its ``t_send`` (a call's), else its ``t``; 0 without
    one (a record's ``t`` that is no number, a GPU record's list of sample times, counts as none)."""
    t = r.get("t_send", r.get("t"))
    return t if isinstance(t, (int, float)) else 0.0
