"""Read a ledger back: validated header, records, and what had to be skipped.

Every line is parsed and checked when the ledger is read (UTF-8, valid JSON,
an object of a known kind).  The writer only ever appends whole lines, so one
bad line is expected: the write a crash cut short.  Such a line is ignored
with a note (``Ledger.warnings``) when it is the last non-blank line, or when
the line right after it opens a resumed run (a ``resume`` record, or the run
header a resume that found nothing done writes): the writer ended the cut line
with a newline and went on.  A bad line anywhere else means the file was
damaged: :class:`LedgerError` (exit code 2) naming the file and the line, and
nothing is read, unless the caller asks to *salvage*: then every bad line after
the header is skipped with one warning each (``leverbench report --salvage``).

How the records are kept depends on the size:

- below ``LAZY_MIN_BYTES``: every record as a dict (``Ledger.records``);
- from ``LAZY_MIN_BYTES`` on: a large ledger is nearly all ``call`` and ``turn``
  records, and as dicts a 1,000,000-call ledger takes ~3.5 GB, whose allocation
  costs more than its parsing.  Those two kinds are kept as columns
  (:class:`Columns`: the fields the analysis reads), the other kinds as dicts;
  ``Ledger.records`` (every record, complete, in file order) is parsed again
  from the file when first used (the file is only ever appended to);
- from ``PARALLEL_MIN_BYTES`` on, with a second core: a helper process (the
  same Python) parses the second part of the file at the same time and sends
  its columns back.

The cyclic garbage collector is paused while parsing: parsed JSON holds no
cycles, and collections triggered by millions of new containers cost more
than the parse.  For the same reason records materialized by the hundred
thousand are then frozen out of its view (``gc.freeze``).
"""

from __future__ import annotations

import gc
import io
import json
import os
import pickle
import subprocess
import sys
from itertools import compress, repeat
from operator import eq, is_not, itemgetter
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from ..errors import LedgerError
from . import upgrade
from .records import KINDS

try:  # orjson parses a large ledger several times faster; the stdlib is the fallback
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover
    _loads = json.loads

BLOCK_BYTES = 1 << 18           # read this much at a time (small: what is parsed from it stays in the CPU cache)
LAZY_MIN_BYTES = 64 << 20       # from this file size on, call and turn records are kept as columns
PARALLEL_MIN_BYTES = 128 << 20  # from this file size on, a helper process parses part of the file
FREEZE_MIN_RECORDS = 100_000    # records materialized at once beyond which they leave the cyclic GC's view

_KINDS = frozenset(KINDS)
_KIND = itemgetter("kind")
_get = dict.get
_EMPTY: dict[str, Any] = {}

# The fields of call and turn records kept as columns (:class:`Columns`): labels (any hashable
# value), numbers (float64, NaN where the record lacks the field or has null), flags (the value's
# truth), whether ``error`` is null, and for calls the numbers inside llama.cpp's ``timings`` object.
LABELS = ("arm", "case", "turn_id")
CALL_NUMBERS = ("step", "latency_s", "ttft_s", "t_first_answer_s", "prompt_tokens", "completion_tokens",
                "cached_tokens", "reasoning_tokens", "content_chars", "reasoning_chars", "reasoning_chunks",
                "answer_chunks")
CALL_FLAGS = ("retried", "empty_answer")
CALL_TIMINGS = ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "cache_n", "draft_n", "draft_n_accepted")
TURN_NUMBERS = ("repeat", "turn_s", "output_tokens", "prompt_tokens", "reasoning_tokens", "tool_s", "retried_s")
TURN_FLAGS = ("step_limit",)
COLUMN_KINDS = {"call": (CALL_NUMBERS, CALL_FLAGS, "timings", CALL_TIMINGS),
                "turn": (TURN_NUMBERS, TURN_FLAGS, None, ())}


def field_values(recs: list[dict[str, Any]], keys: tuple[str, ...], template: dict[str, Any]) -> dict[str, Any]:
    """Per key, the sequence of its values in *recs* (dicts; None where a record lacks the key), or
    None when no record has the key.  Keys that *template* has are read in one pass over the records."""
    out: dict[str, Any] = {}
    common = [k for k in keys if k in template]
    try:
        if len(common) > 1:
            out.update(zip(common, zip(*map(itemgetter(*common), recs))))
        elif common:
            out[common[0]] = list(map(itemgetter(common[0]), recs))
    except KeyError:  # a record lacks one of them: read key by key
        out.clear()
    for k in keys:
        if k not in out:
            out[k] = list(map(_get, recs, repeat(k))) if any(map(dict.__contains__, recs, repeat(k))) else None
    return out


def as_floats(values: Any, m: int) -> np.ndarray:
    """*values* (numbers or None; None for a missing column) as m floats, NaN for None."""
    return np.full(m, np.nan) if values is None else np.array(values, dtype=float)


class Columns:
    """Records of one kind (``call`` or ``turn``, :data:`COLUMN_KINDS`) as columns, one row per record
    in ledger order.

    - ``labels[k]`` for k in :data:`LABELS`: (codes, names), ``names[codes[i]]`` = record i's value;
    - ``numbers[k]``: float64, NaN where the record lacks the field or has null; for calls also
      ``numbers["timings." + k]`` for k in :data:`CALL_TIMINGS`;
    - ``flags[k]``: the field's value is true (absent: false);
    - ``failed``: ``error`` is not null; ``has_timings``: (calls) ``timings`` is an object.
    """

    def __init__(self, kind: str, index: dict[str, dict[Any, int]] | None = None) -> None:
        self.kind = kind
        self.n = 0
        self.labels: dict[str, tuple[np.ndarray, list[Any]]] = {}
        self.numbers: dict[str, np.ndarray] = {}
        self.flags: dict[str, np.ndarray] = {}
        self.failed = np.zeros(0, bool)
        self.has_timings = np.zeros(0, bool)
        self._numbers, self._flags, self._nested, self._nested_numbers = COLUMN_KINDS[kind]
        self._fields = (*LABELS, "error", *self._numbers, *self._flags, *((self._nested,) if self._nested else ()))
        self._index = index if index is not None else {k: {} for k in LABELS}  # may be shared between kinds
        self._parts: dict[str, list[np.ndarray]] = {}

    @classmethod
    def of(cls, kind: str, records: Iterable[dict[str, Any]]) -> Columns:
        cols = cls(kind)
        cols.add(list(records))
        return cols.done()

    def add(self, recs: list[dict[str, Any]]) -> None:
        """Append records (dicts)."""
        m = len(recs)
        if not m:
            return
        f = field_values(recs, self._fields, recs[0])
        put = self._put
        for k in LABELS:
            vals = f[k] if f[k] is not None else [None] * m
            index = self._index[k]
            for v in set(vals).difference(index):
                index[v] = len(index)
            put(k, np.fromiter(map(index.__getitem__, vals), np.int64, m))
        for k in self._numbers:
            put(k, as_floats(f[k], m))
        for k in self._flags:
            put(k, np.zeros(m, bool) if f[k] is None else np.fromiter(map(bool, f[k]), bool, m))
        errors = f["error"] if f["error"] is not None else [None] * m
        put("failed", np.fromiter(map(is_not, errors, repeat(None)), bool, m))
        if self._nested:
            nested = f[self._nested] if f[self._nested] is not None else [None] * m
            put("has_" + self._nested, np.fromiter(map(isinstance, nested, repeat(dict)), bool, m))
            nested = [t if t.__class__ is dict else _EMPTY for t in nested]
            g = field_values(nested, self._nested_numbers, next(filter(None, nested), _EMPTY))
            for k in self._nested_numbers:
                put(f"{self._nested}.{k}", as_floats(g[k], m))
        self.n += m

    def extend(self, other: Columns) -> None:
        """Append the rows of *other* (of the same kind, finished with :meth:`done`)."""
        for k in LABELS:
            codes, names = other.labels[k]
            index = self._index[k]
            remap = np.array([index.setdefault(v, len(index)) for v in names], dtype=np.int64)
            self._put(k, remap[codes] if len(names) else codes)
        for k, v in (*other.numbers.items(), *other.flags.items()):
            self._put(k, v)
        self._put("failed", other.failed)
        if self._nested:
            self._put("has_" + self._nested, other.has_timings)
        self.n += other.n

    def _put(self, key: str, part: np.ndarray) -> None:
        self._parts.setdefault(key, []).append(part)

    def done(self) -> Columns:
        """Join what was added into the columns."""
        cat = {k: np.concatenate(v) for k, v in self._parts.items()}
        for k in LABELS:
            self.labels[k] = (cat.pop(k, np.zeros(0, np.int64)), list(self._index[k]))
        self.failed = cat.pop("failed", np.zeros(0, bool))
        if self._nested:
            self.has_timings = cat.pop("has_" + self._nested, np.zeros(0, bool))
        for k in self._numbers:
            self.numbers[k] = cat.pop(k, np.zeros(0))
        for k in self._flags:
            self.flags[k] = cat.pop(k, np.zeros(0, bool))
        for k in self._nested_numbers:
            self.numbers[f"{self._nested}.{k}"] = cat.pop(f"{self._nested}.{k}", np.zeros(0))
        self._parts = {}
        return self


class Ledger:
    """A ledger as read: ``header``, ``records`` (every record after the header, complete, in file
    order) and ``warnings`` (what had to be skipped)."""

    def __init__(self, path: Path, header: dict[str, Any], records: list[dict[str, Any]] | None = None,
                 warnings: list[str] | None = None, *, _lazy: _Lazy | None = None) -> None:
        self.path = path
        self.header = header
        self.warnings = warnings if warnings is not None else []
        self._records = records if records is not None or _lazy is not None else []
        self._lazy = _lazy

    @property
    def records(self) -> list[dict[str, Any]]:
        if self._records is None:
            assert self._lazy is not None
            self._records, self._lazy = self._lazy.materialize(self.path), None
        return self._records

    @records.setter
    def records(self, value: list[dict[str, Any]]) -> None:
        self._records, self._lazy = value, None

    def of_kind(self, *kinds: str) -> Iterator[dict[str, Any]]:
        if self._records is None and self._lazy is not None and not set(kinds) & set(COLUMN_KINDS):
            return (r for r in self._lazy.others if r.get("kind") in kinds)
        return (r for r in self.records if r.get("kind") in kinds)

    def columns(self, kind: str) -> Columns:
        """The records of *kind* (``call`` or ``turn``) as columns: kept by the reader for a large
        ledger (then without parsing the records again), else built now."""
        if self._records is None and self._lazy is not None and kind in self._lazy.columns:
            return self._lazy.columns[kind]
        return Columns.of(kind, self.of_kind(kind))

    def __repr__(self) -> str:
        return f"Ledger(path={self.path!r}, warnings={len(self.warnings)})"


class _Lazy:
    """What a large ledger's reader kept: the call and turn records as columns, the other records,
    and what it takes to parse the records again (the bytes read, the lines that were skipped)."""

    def __init__(self, others: list[dict[str, Any]], columns: dict[str, Columns], size: int,
                 ident: tuple[int, int], skip: set[int], count: int) -> None:
        self.others, self.columns, self.size, self.ident, self.skip, self.count = others, columns, size, ident, skip, count

    def materialize(self, path: Path) -> list[dict[str, Any]]:
        changed = LedgerError(f"{path}: the ledger changed since it was read (it is only ever appended to); read it again")
        try:
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                if (st.st_dev, st.st_ino) != self.ident or st.st_size < self.size:
                    raise changed
                records: list[dict[str, Any]] = []
                with _gc_paused():
                    i = 0
                    for lines, *_ in _blocks(fh, self.size):
                        for line in lines:
                            if i not in self.skip and line.strip():
                                records.append(_loads(line))
                            i += 1
                    if len(records) >= FREEZE_MIN_RECORDS:
                        gc.freeze()
        except OSError as exc:
            raise LedgerError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except ValueError:
            raise changed from None
        if len(records) != self.count:
            raise changed
        return records


class _gc_paused:
    """Parsing creates millions of containers and no garbage cycles: the cyclic GC only slows it."""

    def __enter__(self) -> None:
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: Any) -> None:
        if self.was:
            gc.enable()


def _blocks(fh: Any, size: int | None = None, tail: bool = True) -> Iterator[tuple[list[bytes], bool, int, bool]]:
    """(lines, last, nbytes, ascii): the file's lines (split at b"\\n", without it) in blocks of whole
    lines, then (with *tail*), with ``last`` true, the text after the last newline (b"" when the file
    ends with one); ``nbytes``: the bytes they took in the file; ``ascii``: they are all ASCII.
    Reads at most *size* bytes from the current position."""
    rest, rest_ascii = b"", True
    left = size
    while True:
        buf = fh.read(BLOCK_BYTES if left is None else min(BLOCK_BYTES, left))
        if not buf:
            break
        if left is not None:
            left -= len(buf)
        lines = buf.split(b"\n")
        ascii = rest_ascii and buf.isascii()
        lines[0] = rest + lines[0] if rest else lines[0]
        nbytes = len(rest) + len(buf)
        rest = lines.pop()
        nbytes -= len(rest)
        rest_ascii = ascii or rest.isascii()
        if lines:
            yield lines, False, nbytes, ascii
    if tail:
        yield [rest], True, len(rest), rest_ascii


def _check_header(path: Path, header: Any) -> dict[str, Any]:
    if not isinstance(header, dict) or header.get("kind") != "run" or not isinstance(header.get("schema"), str):
        raise LedgerError(f"{path}: line 1 is not a leverbench run header; is this a leverbench ledger?")
    upgrade.schema_version(path, header["schema"])  # foreign, newer or unreachable: refused
    for key in ("arms", "config"):
        if not isinstance(header.get(key), dict):
            raise LedgerError(f"{path}: run header lacks {key!r}")
    return header


class _BadLine(Exception):
    """A line that makes the file no ledger: *message* names it as ``{line}`` (1-based) unless
    *index* is None."""

    def __init__(self, index: int | None, message: str) -> None:
        super().__init__(index, message)
        self.index, self.message = index, message


class _NotUtf8(Exception):
    def __init__(self, at: int, index: int) -> None:
        super().__init__(at, index)
        self.at, self.index = at, index


NOT_JSON = "is not valid JSON"
UNKNOWN_KIND = "is not a ledger record of a known kind"
RESTART_KINDS = ("resume", "run")  # what a resumed run writes first after ending a cut line
SALVAGE_HINT = ("the ledger is damaged (a crash cuts only the last line written); nothing was read. "
                "To read past bad lines, each one reported, pass --salvage (leverbench report, replay, project, analyze)")


_CONTINUED: dict[str, Any] = {"kind": "run"}  # the header of a scan that starts after it


class _Scan:
    """One pass over (part of) the file: parse and check every line, keep the records (or columns).
    Errors are held (``error``: the first line that is no record; ``utf8_error``: the first byte
    that is not UTF-8), to be raised once the whole file was seen (:meth:`raise_errors`).  Lines
    that are not JSON (``bad``, with why) are judged once the whole file was seen: a cut write or
    damage (:meth:`judge`).  With *salvage*, a record of no known kind and a line that is not
    UTF-8 are bad lines too."""

    def __init__(self, path: Path, lazy: bool, *, continued: bool = False, offset: int = 0,
                 salvage: bool = False) -> None:
        self.path = path
        self.lazy = lazy
        self.salvage = salvage
        self.header: dict[str, Any] | None = _CONTINUED if continued else None
        self.records: list[dict[str, Any]] = []  # all records, or (lazy) those not kept as columns
        index: dict[str, dict[Any, int]] = {k: {} for k in LABELS}  # calls and turns share label codes
        self.columns = {kind: Columns(kind, index) for kind in COLUMN_KINDS} if lazy else {}
        self.in_columns = 0
        self.skip: set[int] = set()  # line indices not holding a record: the header, bad lines
        self.bad: dict[int, str] = {}  # line index -> what is wrong with it (NOT_JSON, UNKNOWN_KIND)
        self.restarts: set[int] = set()  # line indices of records of RESTART_KINDS (after the header)
        self.last_nonblank = -1
        self.line = 0  # index of the next line
        self.offset = offset  # file offset of the next line
        self.error: _BadLine | None = None
        self.utf8_error: int | None = None

    def run(self, fh: Any, size: int | None = None, tail: bool = True) -> None:
        """Scan *size* bytes from the file's position (see :func:`_blocks`); after a bad line, only
        check that the rest is UTF-8 (a file that is not is reported as such, wherever that shows)."""
        if self.utf8_error is not None:
            return
        blocks = _blocks(fh, size, tail)
        try:
            if self.error is None:
                try:
                    for block in blocks:
                        self.feed(*block)
                except _BadLine as exc:
                    self.error = exc
            for lines, _, nbytes, ascii in blocks:
                self.utf8(lines, nbytes, ascii)
                self.line += len(lines)
        except _NotUtf8 as exc:
            self.utf8_error = (exc.at, exc.index)

    def feed(self, lines: list[bytes], last: bool, nbytes: int, ascii: bool) -> None:
        """Take the next block of lines (see :func:`_blocks`)."""
        self.utf8(lines, nbytes, ascii)
        first = self.line
        self.line += len(lines)
        if self.header is not None and not last and self._fast(lines, first):
            self.last_nonblank = self.line - 1
            return
        self._slow(lines, first)

    def utf8(self, lines: list[bytes], nbytes: int, ascii: bool) -> None:
        """Raise :class:`_NotUtf8` at the first byte of *lines* (starting at line ``self.line``) that
        is not UTF-8, except where a line ends in the first bytes of a character (a write cut
        there) or, with *salvage*, anywhere: such a line fails to parse and is judged as a bad line."""
        if not ascii:
            try:
                b"\n".join(lines).decode("utf-8")
            except UnicodeDecodeError:
                at = self.offset
                for j, line in enumerate(lines):
                    try:
                        line.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        cut = exc.end == len(line) and exc.reason == "unexpected end of data"
                        if not (cut or self.salvage):
                            raise _NotUtf8(at + exc.start, self.line + j) from None
                    at += len(line) + 1
        self.offset += nbytes

    def _fast(self, lines: list[bytes], first: int) -> bool:
        """The common case: every line a record of a known kind.  False (nothing kept) otherwise."""
        try:
            objs = list(map(_loads, lines))
            kinds = list(map(_KIND, objs))
            if not _KINDS.issuperset(kinds):
                return False
        except (ValueError, TypeError, KeyError, RecursionError):
            return False
        if "resume" in kinds or "run" in kinds:
            self.restarts.update(first + j for j, k in enumerate(kinds) if k in RESTART_KINDS)
        self._keep(objs, kinds)
        return True

    def _keep(self, objs: list[dict[str, Any]], kinds: list[str]) -> None:
        if not self.lazy:
            self.records.extend(objs)
            return
        if kinds.count("call") == len(objs):
            by_kind = {"call": objs}
        else:
            by_kind = {kind: list(compress(objs, map(eq, kinds, repeat(kind)))) for kind in self.columns}
            self.records.extend(compress(objs, map(_not_in, kinds, repeat(self.columns))))
        for kind, recs in by_kind.items():
            cols = self.columns.get(kind)
            if cols is not None:
                try:
                    cols.add(recs)
                    self.in_columns += len(recs)
                    continue
                except (TypeError, ValueError, OverflowError):
                    # a field of an unexpected type: analysis will build the columns from the records
                    del self.columns[kind]
            self.records.extend(recs)

    def _slow(self, lines: list[bytes], first: int) -> None:
        objs: list[dict[str, Any]] = []
        for j, line in enumerate(lines):
            i = first + j
            if not line.strip():
                continue
            self.last_nonblank = i
            try:
                obj = _loads(line)
            except (ValueError, RecursionError):
                if self.header is None:
                    raise _BadLine(i, "{path}: line {line} is not JSON; not a leverbench ledger") from None
                self.bad[i] = NOT_JSON
                self.skip.add(i)
                continue
            if self.header is None:
                try:
                    self.header = _check_header(self.path, obj)
                except LedgerError as exc:
                    raise _BadLine(None, str(exc)) from None
                self.skip.add(i)
                continue
            if not isinstance(obj, dict) or obj.get("kind") not in KINDS:
                if not self.salvage:
                    raise _BadLine(i, "{path}: line {line} " + UNKNOWN_KIND + "; " + SALVAGE_HINT)
                self.bad[i] = UNKNOWN_KIND
                self.skip.add(i)
                continue
            if obj["kind"] in RESTART_KINDS:
                self.restarts.add(i)
            objs.append(obj)
        self._keep(objs, [o["kind"] for o in objs])

    def merge(self, after: _Scan) -> None:
        """Take in the scan of the part of the file that follows this one's."""
        base = self.line
        self.bad.update((i + base, why) for i, why in after.bad.items())
        self.skip |= {i + base for i in after.skip}
        self.restarts |= {i + base for i in after.restarts}
        if after.last_nonblank >= 0:
            self.last_nonblank = after.last_nonblank + base
        self.line += after.line
        self.offset = after.offset
        self.records += after.records
        self.in_columns += after.in_columns
        for kind in list(self.columns):
            if kind in after.columns:
                self.columns[kind].extend(after.columns[kind])
            else:
                del self.columns[kind]
        if self.utf8_error is None and after.utf8_error is not None:
            at, index = after.utf8_error
            self.utf8_error = (at, index + base)
        if self.error is None and after.error is not None:
            e = after.error
            self.error = _BadLine(None if e.index is None else e.index + base, e.message)

    def raise_errors(self) -> None:
        if self.utf8_error is not None:
            at, index = self.utf8_error
            what = "not a leverbench ledger" if index == 0 else SALVAGE_HINT  # (the header may be unparsed yet)
            raise LedgerError(f"{self.path}: line {index + 1} is not UTF-8 text (byte {at}); {what}")
        damaged = [] if self.salvage else [i for i, cut in self.judge().items() if cut is None]
        first = min(damaged, default=None)
        if self.error is not None and self.error.index is not None and (first is None or self.error.index < first):
            first = None
        if first is not None:
            raise LedgerError(f"{self.path}: line {first + 1} {self.bad[first]} and is not the last line written "
                              f"before a crash; {SALVAGE_HINT}")
        if self.error is not None:
            line = None if self.error.index is None else self.error.index + 1
            raise LedgerError(self.error.message.format(path=self.path, line=line) if line else self.error.message)
        if self.header is None:
            raise LedgerError(f"{self.path}: empty ledger (no run header)")

    def judge(self) -> dict[int, str | None]:
        """Per bad line: "last" (the last non-blank line: a write cut by a crash), "resumed" (a cut
        line that a resumed run ended with a newline and wrote after: the next line opens the
        resumed run) or None (damage)."""
        out: dict[int, str | None] = {}
        for i, why in sorted(self.bad.items()):
            if why == NOT_JSON and i >= self.last_nonblank:
                out[i] = "last"
            elif why == NOT_JSON and i + 1 in self.restarts:
                out[i] = "resumed"
            else:
                out[i] = None
        return out

    def warnings(self) -> list[str]:
        """One per bad line that did not stop the reading: a cut write, or a line salvaged past."""
        out = []
        for i, cut in self.judge().items():
            if cut == "last":
                out.append(f"{self.path}: line {i + 1} is incomplete (a run cut off while writing); ignored")
            elif cut == "resumed":
                out.append(f"{self.path}: line {i + 1} is incomplete (cut off, then resumed); ignored")
            else:
                out.append(f"{self.path}: line {i + 1} {self.bad[i]}; skipped (--salvage)")
        return out


def _not_in(k: Any, container: Any) -> bool:
    return k not in container


class _Helper:
    """A second Python process that scans the second part of a large file while this one scans the
    first, and sends its :class:`_Scan` back (pickled, through its stdout)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    @staticmethod
    def can_start() -> bool:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return cores >= 2 and bool(sys.executable)

    @classmethod
    def start(cls, path: Path, start: int, end: int, ident: tuple[int, int], salvage: bool) -> _Helper | None:
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])  # where this leverbench is imported from
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-P", "-c", "from leverbench.ledger.reader import _helper_main; _helper_main()",
               str(path), str(start), str(end), str(ident[0]), str(ident[1]), str(int(salvage))]
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    env=env)
        except OSError:
            return None
        return cls(proc)

    def result(self) -> _Scan | None:
        """The helper's scan, or None if it failed."""
        try:
            assert self.proc.stdout is not None
            data = self.proc.stdout.read()
            ok = self.proc.wait() == 0 and data
            scan = pickle.loads(data) if ok else None
            return scan if isinstance(scan, _Scan) else None
        except Exception:
            return None

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _helper_main() -> None:
    """The helper process: scan the part given on the command line, write the pickled scan to stdout."""
    path, start, end, dev, ino, salvage = sys.argv[1:7]
    with _gc_paused():
        scan = _scan_part(Path(path), int(start), int(end), (int(dev), int(ino)), salvage == "1")
        sys.stdout.buffer.write(pickle.dumps(scan, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


def _scan_part(path: Path, start: int, end: int, ident: tuple[int, int], salvage: bool) -> _Scan:
    """Scan bytes [start, end) of a large ledger (start: just after a newline, past the header)."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) != ident:
            raise OSError("the ledger was replaced while it was read")
        fh.seek(start)
        scan = _Scan(path, lazy=True, continued=True, offset=start, salvage=salvage)
        scan.run(fh, end - start)
    for c in scan.columns.values():
        c.done()
    return scan


def _split_point(fh: Any, size: int) -> int | None:
    """A line start a little after the middle of the file (the helper also has to start, and to send
    what it found)."""
    mid = size * 11 // 20
    fh.seek(mid)
    window = fh.read(1 << 20)
    fh.seek(0)
    cut = window.find(b"\n")
    return mid + cut + 1 if 0 <= cut and mid + cut + 1 < size else None


def _read_upgraded(path: Path, fh: Any, version: int, salvage: bool) -> Ledger:
    """A ledger of an older schema: its lines upgraded in memory (:mod:`.upgrade`), then read whole."""
    scan = _Scan(path, False, salvage=salvage)
    scan.run(io.BytesIO(upgrade.upgrade_lines(fh.read(), version)))
    scan.raise_errors()
    assert scan.header is not None
    return Ledger(path=path, header=scan.header, records=scan.records, warnings=scan.warnings())


def read_ledger(path: str | Path, *, salvage: bool = False) -> Ledger:
    """Parse ``ledger.jsonl`` (or a run directory holding one).

    Lines must be UTF-8 JSON objects of a known kind, but for a write cut by a
    crash: the last non-blank line, or a line right before the record that
    opens a resumed run; it is ignored with a warning.  Any other bad line
    raises :class:`LedgerError` naming the file and the line, and telling of
    *salvage*: with it, every bad line after the header is skipped with a
    warning naming it.  A file of PARALLEL_MIN_BYTES or more is parsed in two
    parts at once, the second by a helper process.  A ledger of an older schema
    is upgraded as it is read (:mod:`.upgrade`); a newer one is refused.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "ledger.jsonl"
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise LedgerError(f"{path}: no ledger here (expected a run directory or its ledger.jsonl)") from None
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read: {exc.strerror or exc}") from None
    helper = None
    try:
        with fh, _gc_paused():
            old = upgrade.older_version(path, fh)
            if old is not None:
                return _read_upgraded(path, fh, old, salvage)
            st = os.fstat(fh.fileno())
            size, ident = st.st_size, (st.st_dev, st.st_ino)
            lazy = size >= LAZY_MIN_BYTES
            split = _split_point(fh, size) if lazy and size >= PARALLEL_MIN_BYTES and _Helper.can_start() else None
            if split is not None:
                helper = _Helper.start(path, split, size, ident, salvage)
            scan = _Scan(path, lazy, salvage=salvage)
            if helper is None:
                scan.run(fh)
            else:
                scan.run(fh, split, tail=False)
                second = helper.result()
                if second is None or (scan.header is None and scan.error is None):
                    # the child failed, or the first part was blank (the second is no continuation)
                    fh.seek(split)
                    scan.run(fh, size - split)
                else:
                    scan.merge(second)
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        if helper is not None:
            helper.cancel()
    scan.raise_errors()
    assert scan.header is not None
    warnings = scan.warnings()
    if not scan.lazy:
        return Ledger(path=path, header=scan.header, records=scan.records, warnings=warnings)
    lazy_part = _Lazy(scan.records, {k: c.done() for k, c in scan.columns.items()}, scan.offset, ident, scan.skip,
                      scan.in_columns + len(scan.records))
    return Ledger(path=path, header=scan.header, warnings=warnings, _lazy=lazy_part)
