"""A large ledger's columns kept beside it (leverbench.ledger.sidecar): a second read takes them instead of
parsing every line, and reads what the first read did; a ledger that changed, a file damaged, foreign or of
another format, a ledger written a moment ago are all read as if no file were there.

The oracle of every test is the same ledger read with no file beside it (and, for the summary, the golden
summary): the file may change how fast a ledger is read, never what is read."""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from test_summary_equivalence import same

from leverbench.analysis.summary import summarize
from leverbench.errors import LedgerError
from leverbench.ledger import reader, sidecar
from leverbench.ledger.reader import read_ledger

GOLDEN = Path(__file__).parent / "golden"
AN_HOUR_AGO = time.time() - 3600


@pytest.fixture
def large(monkeypatch):
    """Every ledger is large: read as columns, its columns kept beside it."""
    monkeypatch.setattr(reader, "COLUMNAR_MIN_BYTES", 0)
    monkeypatch.setattr(sidecar, "MIN_BYTES", 0)


@pytest.fixture
def parses(monkeypatch):
    """The paths polars parses whole (each read that did not take the kept columns parses its ledger once)."""
    seen: list[Path] = []
    frame = reader._frame

    def spy(source):
        if isinstance(source, Path):
            seen.append(source)
        return frame(source)

    monkeypatch.setattr(reader, "_frame", spy)
    return seen


def settled_copy(tmp_path: Path, name: str = "demo3") -> Path:
    path = tmp_path / "ledger.jsonl"
    shutil.copyfile(GOLDEN / f"{name}.ledger.jsonl", path)
    os.utime(path, (AN_HOUR_AGO, AN_HOUR_AGO))
    return path


def what_is_read(path: Path, salvage: bool = False) -> tuple:
    """Everything a read gives: header, warnings, records, both kinds' columns, the summary (as JSON text)."""
    led = read_ledger(path, salvage=salvage)
    cols = {k: led.columns(k) for k in ("call", "turn")}
    arrays = {k: [(name, v.dtype.str, v.tolist()) for name, v in sorted({**c.numbers, **c.flags, **c.hashes,
                                                                        "failed": c.failed,
                                                                        "has_timings": c.has_timings}.items())]
              for k, c in cols.items()}
    labels = {k: {name: (codes.tolist(), names) for name, (codes, names) in c.labels.items()} for k, c in cols.items()}
    summary = json.dumps(summarize(led))
    return led.header, list(led.warnings), led.skipped, json.dumps(arrays), labels, summary, led.records


def without_file(path: Path, monkeypatch) -> tuple:
    with monkeypatch.context() as m:
        m.setattr(sidecar, "MIN_BYTES", 1 << 60)
        return what_is_read(path)


@pytest.mark.parametrize("name", ["demo3", "handmade"])
def test_a_second_read_takes_the_kept_columns_and_reads_the_same(name, tmp_path, large, parses, monkeypatch):
    path = settled_copy(tmp_path, name)
    want = without_file(path, monkeypatch)
    assert not sidecar.path_of(path).exists() and parses == [path]
    first = what_is_read(path)
    assert sidecar.path_of(path).exists() and parses == [path, path]  # the first read parsed and kept
    second = what_is_read(path)
    assert parses == [path, path]  # the second parsed nothing: it took the kept columns
    assert first == want and second == want
    same(json.loads(second[5]), json.loads((GOLDEN / f"{name}.summary.json").read_text()))


def test_a_ledger_appended_to_is_parsed_again_and_kept_anew(tmp_path, large, parses, monkeypatch):
    path = settled_copy(tmp_path)
    what_is_read(path)
    kept = sidecar.path_of(path).read_bytes()
    lines = path.read_bytes().splitlines(keepends=True)
    metrics = next(ln for ln in reversed(lines) if b'"metrics"' in ln)
    with open(path, "ab") as fh:
        fh.write(metrics)  # (a record of another kind: the run goes on)
    os.utime(path, (AN_HOUR_AGO + 60, AN_HOUR_AGO + 60))
    got = what_is_read(path)
    assert parses == [path, path]  # parsed again
    assert got == without_file(path, monkeypatch)
    assert len([r for r in got[6] if r["kind"] == "metrics"]) == len([ln for ln in lines if b'"metrics"' in ln]) + 1
    assert sidecar.path_of(path).read_bytes() != kept  # kept anew, for the ledger as it is now


def test_a_ledger_edited_to_the_same_size_with_its_time_set_back_is_parsed_again(tmp_path, large, parses,
                                                                                 monkeypatch):
    """The inode, size and time are the ones kept; the digest of its bytes is not."""
    path = settled_copy(tmp_path)
    what_is_read(path)
    st = path.stat()
    text = path.read_bytes()
    at = text.index(b'"latency_s":') + len(b'"latency_s":')
    digit = text[at:at + 1]
    assert digit.isdigit()
    with open(path, "r+b") as fh:  # in place: the same inode
        fh.seek(at)
        fh.write(b"9" if digit != b"9" else b"8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_ino == st.st_ino
    got = what_is_read(path)
    assert len(parses) == 2  # parsed again
    assert got == without_file(path, monkeypatch)


def test_a_ledger_written_a_moment_ago_keeps_nothing(tmp_path, large, parses):
    """A file still written, or written twice within a tick of the file system's clock, could change with its
    size and time as kept: its columns are kept once it has settled."""
    path = settled_copy(tmp_path)
    os.utime(path, None)  # now
    read_ledger(path)
    assert not sidecar.path_of(path).exists()
    os.utime(path, (AN_HOUR_AGO, AN_HOUR_AGO))
    read_ledger(path)
    assert sidecar.path_of(path).exists()


def _parts(kept: Path) -> tuple[dict, bytes, bytes]:
    """(what it is for, frame, line ends) of a kept file (sidecar.save's layout)."""
    data = kept.read_bytes()
    n = int.from_bytes(data[-sidecar.TRAILER:], "little")
    meta = json.loads(data[-sidecar.TRAILER - n:-sidecar.TRAILER])
    frame = data[len(sidecar.MAGIC):len(sidecar.MAGIC) + meta["frame_bytes"]]
    return meta, frame, data[len(sidecar.MAGIC) + meta["frame_bytes"]:-sidecar.TRAILER - n]


def _write(kept: Path, meta: dict, frame: bytes, ends: bytes, raw_meta: bytes | None = None) -> None:
    text = json.dumps(meta).encode() if raw_meta is None else raw_meta
    kept.write_bytes(sidecar.MAGIC + frame + ends + text + len(text).to_bytes(sidecar.TRAILER, "little"))


def _damage(kind: str, kept: Path, other: Path) -> None:
    meta, frame, ends = _parts(kept)
    if kind == "truncated":
        kept.write_bytes(kept.read_bytes()[: kept.stat().st_size // 2])
    elif kind == "garbage":
        kept.write_bytes(os.urandom(kept.stat().st_size))
    elif kind == "not json":
        _write(kept, meta, frame, ends, raw_meta=b"{not json")
    elif kind == "another format":
        meta["tag"] = meta["tag"].replace(f"{sidecar.FORMAT};", f"{sidecar.FORMAT + 1};", 1)
        _write(kept, meta, frame, ends)
    elif kind == "another ledger":  # the file of a copy (another inode), moved beside this one
        shutil.copy2(other, kept)
    elif kind == "line ends moved":
        moved = np.frombuffer(ends, "<i8").copy()
        moved[len(moved) // 2] -= 1
        _write(kept, meta, frame, moved.tobytes())
    elif kind == "a frame of other columns":
        import polars as pl

        buf = io.BytesIO()
        pl.read_ipc(frame).drop("latency_s").write_ipc(buf, compression="lz4")
        _write(kept, {**meta, "frame_bytes": len(buf.getvalue())}, buf.getvalue(), ends)


@pytest.mark.parametrize("kind", ["truncated", "garbage", "not json", "another format", "another ledger",
                                  "line ends moved", "a frame of other columns"])
def test_a_file_that_does_not_hold_is_ignored(kind, tmp_path, large, parses, monkeypatch):
    path = settled_copy(tmp_path)
    (tmp_path / "copy").mkdir()
    other = settled_copy(tmp_path / "copy")
    what_is_read(other)
    what_is_read(path)
    _damage(kind, sidecar.path_of(path), sidecar.path_of(other))
    before = len(parses)
    got = what_is_read(path)
    assert len(parses) == before + 1  # parsed again
    assert got == without_file(path, monkeypatch)


def test_a_file_that_cannot_be_written_is_no_error(tmp_path, large, monkeypatch):
    path = settled_copy(tmp_path)

    def refuse(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sidecar.os, "replace", refuse)
    got = what_is_read(path)
    assert got == without_file(path, monkeypatch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.jsonl"]  # nothing half-written left behind


def test_a_damaged_ledger_is_refused_the_same_with_its_columns_kept(tmp_path, large, parses, monkeypatch):
    """The kept columns are polars' parse, not a verdict: every check of a record runs on every read."""
    path = settled_copy(tmp_path)
    text = path.read_bytes()
    at = text.index(b'"prompt_tokens":') + len(b'"prompt_tokens":')
    end = text.index(b",", at)
    assert end - at >= 2
    path.write_bytes(text[:at] + b"-" + b"1" * (end - at - 1) + text[end:])  # a count below 0, the same size
    os.utime(path, (AN_HOUR_AGO, AN_HOUR_AGO))
    salvaged = what_is_read(path, salvage=True)
    assert sidecar.path_of(path).exists() and salvaged[2] == 1  # read past the record, and kept
    with pytest.raises(LedgerError, match="prompt_tokens"):
        read_ledger(path)
    assert parses == [path]  # refused on the kept columns
    assert what_is_read(path, salvage=True) == salvaged
    with monkeypatch.context() as m:
        m.setattr(sidecar, "MIN_BYTES", 1 << 60)
        assert what_is_read(path, salvage=True) == salvaged


def test_a_ledger_read_by_chunks_keeps_nothing(tmp_path, large):
    """A last line a crash cut: polars does not read the file whole, and nothing is kept."""
    path = settled_copy(tmp_path)
    with open(path, "ab") as fh:
        fh.write(b'{"kind":"call","arm":')
    os.utime(path, (AN_HOUR_AGO, AN_HOUR_AGO))
    led = read_ledger(path)
    assert any("incomplete" in w for w in led.warnings)
    assert not sidecar.path_of(path).exists()


def test_a_reader_that_writes_nothing_keeps_nothing(tmp_path, large):
    """Review: ``run --dry-run --resume`` read the ledger and wrote its columns beside it, and ``--resume`` wrote a
    file its own first append made stale; they read with keep_columns=False."""
    path = settled_copy(tmp_path)
    read_ledger(path, keep_columns=False)
    assert not sidecar.path_of(path).exists()
    read_ledger(path)
    assert sidecar.path_of(path).exists()  # (the premise: a plain read keeps them)


def test_an_interrupted_write_leaves_nothing_and_a_dead_writers_file_goes(tmp_path, large, monkeypatch):
    """Review: a Ctrl-C while the file was written left ``.ledger.jsonl.columns.PID.NS`` for good; now the write
    removes its file aside and the interrupt goes on, and a later write removes what a killed writer left."""
    import polars as pl  # noqa: PLC0415

    path = settled_copy(tmp_path)

    def interrupted(self, fh, **kw):
        fh.write(b"x" * 1000)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(pl.DataFrame, "write_ipc", interrupted)
        with pytest.raises(KeyboardInterrupt):
            read_ledger(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.jsonl"]
    dead = tmp_path / f".{sidecar.path_of(path).name}.999999999.1"  # (no process has that id)
    dead.write_bytes(b"half")
    read_ledger(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.jsonl", sidecar.path_of(path).name]
