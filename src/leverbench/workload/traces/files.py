"""Reading traffic files: whole text (small formats), the head (detection), JSON lines and CSV rows."""

from __future__ import annotations

import csv
import io
import json
import stat
from pathlib import Path
from typing import Any, Iterable, Iterator

from ...errors import BadInput
from ...json_types import JSONObject
from .records import Rows

#: Bytes read to detect a format (the first record of a log is far shorter).
HEAD_BYTES = 1 << 16
#: A file whose first line is not a JSON document is read whole as one (an indented result) only below this size.
MAX_DOCUMENT_BYTES = 1 << 28
#: A file read whole into memory (the row-by-row formats; the large logs are read columnar, in bounded memory).
MAX_TEXT_BYTES = 1 << 30


def regular_file(path: Path) -> None:
    """BadInput unless ``path`` is a regular file (or absent, or a directory: the caller tells those): a pipe
    would block the read forever, a device (/dev/zero) never end."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _open_error(path, exc) from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or path == Path("/dev/null")):
        raise BadInput(f"{path}: not a regular file (a pipe, a device or a socket); give a traffic file")


def _open_error(path: Path, exc: OSError) -> BadInput:
    if isinstance(exc, FileNotFoundError):
        return BadInput(f"{path}: no such file")
    if isinstance(exc, IsADirectoryError):
        return BadInput(f"{path}: is a directory; give a traffic file (or a leverbench run directory)")
    return BadInput(f"{path}: cannot read: {exc.strerror or exc}")


def _decode(path: Path, raw: bytes, cut: bool = False) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if cut and exc.start >= len(raw) - 3:  # a character split by the end of the head
            return raw[:exc.start].decode("utf-8-sig")
        raise BadInput(f"{path}: not UTF-8 text (byte {exc.start}); traffic files are CSV, JSON or JSONL") from None


def read_text(path: Path) -> str:
    """The whole file as text; BadInput for a missing, unreadable, too large or non-UTF-8 file."""
    regular_file(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise _open_error(path, exc) from None
    if size > MAX_TEXT_BYTES:
        raise BadInput(f"{path}: {size:,} bytes; this format is read whole, at most {MAX_TEXT_BYTES:,} bytes (split "
                       "the file, or write it as a generic CSV or JSONL log, which is read in bounded memory)")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _open_error(path, exc) from None
    return _decode(path, raw)


def read_head(path: Path) -> str:
    """The first HEAD_BYTES of the file as text (a whole first line unless the line is longer)."""
    regular_file(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(HEAD_BYTES)
    except OSError as exc:
        raise _open_error(path, exc) from None
    return _decode(path, raw, cut=len(raw) == HEAD_BYTES)


def first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")


def too_deep(path: Path, line: int | None = None) -> BadInput:
    """The error for JSON nested deeper than the reader follows (a trace's records are a level or two deep)."""
    where = f"line {line}: " if line is not None else ""
    return BadInput(f"{path}: {where}JSON nested too deep to read (a traffic record is an object of numbers and "
                    "short lists); is this a traffic file?")


def loads(path: Path, text: str, line: int | None = None) -> Any:
    """``json.loads``, with JSON nested too deep for it (a RecursionError) as bad input naming the file."""
    try:
        return json.loads(text)
    except RecursionError:
        raise too_deep(path, line) from None


def first_json(path: Path, head: str) -> Any:
    """The first JSON value of the file: its first line, else the whole file as one document."""
    first = first_line(head)
    try:
        return loads(path, first, 1)
    except json.JSONDecodeError:
        pass
    try:
        small = path.stat().st_size <= MAX_DOCUMENT_BYTES
    except OSError as exc:
        raise _open_error(path, exc) from None
    if small:
        try:
            return loads(path, read_text(path))  # one indented JSON document
        except json.JSONDecodeError:
            pass
    raise BadInput(f"{path}: line 1 is not valid JSON; is this a JSONL trace? (or name --trace-format)")


def jsonl(text: str, rows: Rows) -> Iterator[tuple[int, JSONObject]]:
    """(line number, object: the trace's raw row) for each JSON-object line; bad lines are counted as skipped."""
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            rows.skip("bad JSON", i)
            continue
        if not isinstance(obj, dict):
            rows.skip("not a JSON object", i)
            continue
        yield i, obj


def listed(names: Iterable[str], most: int = 12) -> str:
    """Names for a message: the first ``most`` of them (each cut to 40 characters), and how many more."""
    names = list(names)
    shown = ", ".join(n if len(n) <= 40 else n[:37] + "..." for n in names[:most])
    return (shown + (f" and {len(names) - most:,} more" if len(names) > most else "")) or "(none)"


def csv_header(path: Path, text: str, required: Iterable[str] = ()) -> list[str]:
    """The header of a CSV text (cells stripped); BadInput when it is empty or a required column is missing."""
    try:
        header = [h.strip() for h in next(csv.reader(io.StringIO(text, newline="")))]
    except StopIteration:
        raise BadInput(f"{path}: empty file") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise BadInput(f"{path}: line 1: missing column(s) {', '.join(missing)} (header: {listed(header)}); "
                       "is this the right --trace-format?")
    return header
