"""Read a ledger back: validated header, records, and what had to be skipped."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..errors import LedgerError
from .records import KINDS, LEDGER_SCHEMA_NAME, LEDGER_SCHEMA_VERSION

try:  # orjson parses a large ledger several times faster; the stdlib is the fallback
    import orjson

    def _loads(line: bytes) -> Any:
        return orjson.loads(line)
except ImportError:  # pragma: no cover
    def _loads(line: bytes) -> Any:
        return json.loads(line)


@dataclass
class Ledger:
    path: Path
    header: dict[str, Any]
    records: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)

    def of_kind(self, *kinds: str) -> Iterator[dict[str, Any]]:
        return (r for r in self.records if r.get("kind") in kinds)


def _check_header(path: Path, header: Any) -> dict[str, Any]:
    if not isinstance(header, dict) or header.get("kind") != "run" or not isinstance(header.get("schema"), str):
        raise LedgerError(f"{path}: line 1 is not a leverbench run header; is this a leverbench ledger?")
    name, _, version = header["schema"].rpartition("/")
    if name != LEDGER_SCHEMA_NAME:
        raise LedgerError(f"{path}: foreign ledger schema {header['schema']!r} (expected {LEDGER_SCHEMA_NAME}/{LEDGER_SCHEMA_VERSION})")
    try:
        v = int(version)
    except ValueError:
        raise LedgerError(f"{path}: unreadable schema version {version!r}") from None
    if v > int(LEDGER_SCHEMA_VERSION):
        raise LedgerError(
            f"{path}: ledger schema version {v} is newer than this leverbench understands "
            f"({LEDGER_SCHEMA_VERSION}); upgrade leverbench (pip install -U leverbench) to read it"
        )
    for key in ("arms", "config"):
        if not isinstance(header.get(key), dict):
            raise LedgerError(f"{path}: run header lacks {key!r}")
    return header


def read_ledger(path: str | Path) -> Ledger:
    """Parse ``ledger.jsonl`` (or a run directory holding one).

    Complete lines must be valid JSON objects of a known kind; a partial last
    line (a crash mid-write) is skipped with a warning.  Anything else raises
    :class:`LedgerError` naming the line.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "ledger.jsonl"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise LedgerError(f"{path}: no ledger here (expected a run directory or its ledger.jsonl)") from None
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LedgerError(f"{path}: not UTF-8 text (byte {exc.start}); not a leverbench ledger") from None
    lines = raw.split(b"\n")
    warnings: list[str] = []
    records: list[dict[str, Any]] = []
    header: dict[str, Any] | None = None
    last_index = len(lines) - 1
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = _loads(line)
        except (ValueError, RecursionError):
            complete = i < last_index  # it ends with a newline
            followed = any(l.strip() for l in lines[i + 1 :])
            if header is not None and (not complete or not followed):
                warnings.append(f"{path}: line {i + 1} is incomplete (a run cut off while writing); ignored")
                continue
            if header is not None and complete:
                # a cut line that a resumed run ended with a newline and wrote after
                warnings.append(f"{path}: line {i + 1} is incomplete (cut off, then resumed); ignored")
                continue
            raise LedgerError(f"{path}: line {i + 1} is not JSON; not a leverbench ledger") from None
        if header is None:
            header = _check_header(path, obj)
            continue
        if not isinstance(obj, dict) or obj.get("kind") not in KINDS:
            raise LedgerError(f"{path}: line {i + 1}: not a ledger record of a known kind")
        records.append(obj)
    if header is None:
        raise LedgerError(f"{path}: empty ledger (no run header)")
    return Ledger(path=path, header=header, records=records, warnings=warnings)
