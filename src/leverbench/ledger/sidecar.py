"""A large ledger's columns kept beside it, so that reading it again skips polars' parse of its lines.

Polars' parse of every line is most of what a large ledger costs to read (a million calls, 1.4 GB: ~7 s of CPU
of the read's ~9 on a 2-core machine; read from this file instead, ~2 s, and writing it costs a first read ~1 s).
The columnar read (:mod:`.reader`) of a ledger of at least :data:`MIN_BYTES` that polars read whole keeps what
that parse gave in ``<ledger>.columns`` beside it (``ledger.jsonl.columns``; lz4, about 7 % of the ledger):
polars' frame of every line and where each line ends.  A later read takes them from there, and the rest happens as on a first read: the header is read from
the ledger and checked, every record the columns do not vouch for and every record of another kind is parsed
from the ledger and checked by its schema, and ``records`` parses the ledger's lines.

The file is used only for the ledger it was made from, as it was then:

- it names the ledger's device, inode, size and modification time (ns): a ledger appended to (it only ever
  is), replaced or rewritten is another;
- it is made only when the ledger's modification time lies :data:`SETTLED_S` or more before the read began: a
  ledger still being written, or written twice within one tick of the file system's clock, gets none (git's
  "racily clean" index entries are the same problem);
- a digest of the ledger's bytes it was made from (:func:`digest`: all of a small file; of a large one its
  first and last 64 KiB and 256 windows of 4 KiB evenly spaced) must be the ledger's now;
- every line end it holds must be a newline of the ledger (or its end), in order;
- its format: this module's :data:`FORMAT`, polars' version, and the frame's columns and types.

Else (a damaged or foreign file too) it is ignored, and replaced when the read that ignored it ends.  A
directory that cannot be written, or a full disk, leaves no file and no error.  What it cannot see: a ledger
edited in place to the same size, with its modification time set back, and no sampled byte changed.
Deleting the file is always safe.
"""

from __future__ import annotations

import hashlib
import io
import json
import mmap
import os
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1
MAGIC = b"leverbench ledger columns\n"
SUFFIX = ".columns"
MIN_BYTES = 256 << 20  # a smaller ledger parses in about a second: no file beside it
SETTLED_S = 2.0  # the ledger's modification time at least this long before the read began
WINDOW, WINDOWS, EDGE = 4096, 256, 64 << 10  # the digest's samples
TRAILER = 8  # the file's last bytes: the length of what it is for (JSON) before them


@dataclass(frozen=True)
class Kept:
    """What a read takes from the file: polars' frame of every line (the header's row first) and the offset of
    each line's end (its newline; the file's size for a last line without one)."""

    frame: Any
    ends: np.ndarray


def path_of(ledger: Path) -> Path:
    return ledger.with_name(ledger.name + SUFFIX)


def _tag(schema: Any) -> str:
    """The format, polars' version and the frame's columns and types: a file of another is not read."""
    import polars as pl  # noqa: PLC0415 (only a large ledger's read gets here)

    return f"{FORMAT}; polars {pl.__version__}; {[(k, str(v)) for k, v in schema.items()]}"


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def digest(mm: mmap.mmap) -> str:
    """BLAKE2b of the whole file when it is small, else of its first and last EDGE bytes and WINDOWS windows of
    WINDOW bytes evenly spaced between."""
    size, h = len(mm), hashlib.blake2b(digest_size=16)
    if size <= 2 * EDGE + WINDOWS * WINDOW:
        h.update(mm[:])
        return h.hexdigest()
    h.update(mm[:EDGE])
    for at in np.linspace(EDGE, size - EDGE - WINDOW, WINDOWS).astype(np.int64).tolist():
        h.update(mm[at:at + WINDOW])
    h.update(mm[size - EDGE:])
    return h.hexdigest()


def _ends_hold(mm: mmap.mmap, ends: np.ndarray) -> bool:
    """Whether *ends* are line ends of *mm* as :func:`.reader._lines` finds them: increasing, each a newline
    but for a last line without one, which ends at the end of the file."""
    buf, size = np.frombuffer(mm, np.uint8), len(mm)
    if not size:
        return not len(ends)
    last = size - 1 if buf[-1] == 10 else size
    return (len(ends) > 0 and int(ends[-1]) == last and bool((np.diff(ends) > 0).all()) and int(ends[0]) >= 0
            and bool((buf[ends[ends < size]] == 10).all()))


def load(ledger: Path, st: os.stat_result, mm: mmap.mmap, schema: Any) -> Kept | None:
    """The file's frame and line ends for *ledger* (*st*: its stat as opened, *mm*: its bytes), when the file
    is there and holds for it as it is (module docstring; *schema*: the frame's columns and types); else None."""
    import polars as pl  # noqa: PLC0415 (only a large ledger's read gets here)

    if st.st_size < MIN_BYTES:
        return None
    try:
        with open(path_of(ledger), "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if fh.read(len(MAGIC)) != MAGIC:
                return None
            fh.seek(size - TRAILER)
            meta_bytes = int.from_bytes(fh.read(TRAILER), "little")
            fh.seek(size - TRAILER - meta_bytes)
            meta = json.loads(fh.read(meta_bytes))
            if (meta.get("tag") != _tag(schema) or meta.get("ledger") != _identity(st)
                    or len(MAGIC) + meta["frame_bytes"] + meta["ends_bytes"] + meta_bytes + TRAILER != size):
                return None
            fh.seek(len(MAGIC))
            frame = pl.read_ipc(io.BytesIO(fh.read(meta["frame_bytes"])))
            ends = np.frombuffer(fh.read(meta["ends_bytes"]), dtype="<i8").astype(np.int64)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, pl.exceptions.PolarsError,
            pl.exceptions.PanicException):
        return None
    if dict(frame.schema) != dict(schema) or meta.get("digest") != digest(mm) or not _ends_hold(mm, ends):
        return None
    return Kept(frame, ends)


def worth_saving(st: os.stat_result, began: float) -> bool:
    """Whether a read that began at *began* (epoch s) of a ledger as *st* keeps its columns: the ledger is at
    least MIN_BYTES and its modification time lies SETTLED_S or more before."""
    return st.st_size >= MIN_BYTES and st.st_mtime_ns <= (began - SETTLED_S) * 1e9


def save(ledger: Path, st: os.stat_result, sampled: str, kept: Kept, schema: Any) -> None:
    """Write the file for *ledger* (*st*: its stat as read; *sampled*: :func:`digest` of its bytes as read), as
    :func:`load` reads it: MAGIC, the frame (Arrow IPC, lz4), the line ends (int64, little-endian), what it is
    for (JSON), that JSON's length (TRAILER bytes, little-endian).  An error leaves no file (a half-written one
    is never seen: it is written aside and renamed), as does a frame not of *schema*."""
    if dict(kept.frame.schema) != dict(schema):
        return
    target = path_of(ledger)
    _remove_stale(target)
    aside = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}")
    try:
        with open(aside, "wb") as fh:
            fh.write(MAGIC)
            kept.frame.write_ipc(fh, compression="lz4")  # (zstd: a third smaller, half as fast to write)
            frame_bytes = fh.tell() - len(MAGIC)
            ends = kept.ends.astype("<i8").tobytes()
            fh.write(ends)
            meta = json.dumps({"tag": _tag(schema), "ledger": _identity(st), "digest": sampled,
                               "frame_bytes": frame_bytes, "ends_bytes": len(ends)}).encode()
            fh.write(meta + len(meta).to_bytes(TRAILER, "little"))
        os.replace(aside, target)
    except BaseException as exc:  # (a Ctrl-C while writing, too: the file aside goes, the interrupt goes on)
        with suppress(OSError):
            aside.unlink()
        if not isinstance(exc, OSError):
            raise


def _remove_stale(target: Path) -> None:
    """Remove the files written aside for *target* by a process that is gone (killed while writing one: SIGKILL,
    SIGTERM, out of memory); one a live process still writes is left to it."""
    for aside in target.parent.glob(f".{target.name}.*.*"):
        pid = aside.name.removeprefix(f".{target.name}.").split(".")[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            with suppress(OSError):
                aside.unlink()
        except OSError:
            pass  # (alive, another user's)
