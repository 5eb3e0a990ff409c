"""Ledgers of an older schema, upgraded as they are read (as asv and pyperf upgrade their result files).

A ledger's header names its schema, ``leverbench.ledger/N``; this leverbench
writes version :data:`CURRENT`.  A newer ledger is refused (upgrade
leverbench); an older one is read through the chain of upgrades:
``UPGRADES[n]`` (registered as ``upgrade_to_n``) turns one record of version
n − 1 into its version-n form, and every record, header included, goes through
each step from the ledger's version up to :data:`CURRENT`.  The upgrade happens
in memory, line by line (a line that does not parse is kept as it is, for the
reader to judge), so line numbers and the reader's rules for cut and damaged
lines hold unchanged.  The file itself is never rewritten.

To change the ledger's shape, raise ``LEDGER_SCHEMA`` in :mod:`.records` to N and register::

    @upgrade_to(N)
    def upgrade_to_N(record: dict) -> dict:
        ...  # a version N-1 record -> version N

with a test that reads a version N − 1 ledger.  A version that only adds (record kinds, optional keys)
registers :func:`additive`: its older ledgers are read as they are, line for line, without a pass over them.

The chain: version 2 (``engine_start``, ``engine_stop`` and ``gpu`` records, the header's ``engines`` and
``host.gpu``) adds to version 1 only; version 3 (``engine_warmed`` records: an engine's start is written
before its warm-up, which follows in a record of its own) adds to version 2 only; version 4 (a call's
``send_s``: its times count from when its request went out, not from when its connection was ready; a
version-3 call, without it, counts as sent when ready) adds to version 3 only; version 5 (``cache_reset``
records and a turn's ``cache``: the state each turn met, declared and made) adds to version 4 only (a version-4
run declared no state: analysis reads it as one whose repeats may revisit); version 6 (``companion`` call records
and a turn's ``in_flight``, ``companion_calls``, ``companion_failed``: turns timed beside other requests, the
experiment's ``in_flight``) adds to version 5 only (a version-5 run timed each turn alone).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import BinaryIO, Callable

from ..errors import LedgerError
from ..json_types import JSONObject
from .records import LEDGER_SCHEMA_NAME, LEDGER_SCHEMA_VERSION

Upgrade = Callable[[JSONObject], JSONObject]  # a record of an older schema: its JSON, whatever that schema held

CURRENT = int(LEDGER_SCHEMA_VERSION)
UPGRADES: dict[int, Upgrade] = {}  # n -> upgrade_to_n: a version n-1 record -> version n


def upgrade_to(n: int) -> Callable[[Upgrade], Upgrade]:
    """Register ``upgrade_to_n`` (one record of version n − 1 → version n)."""
    def register(fn: Upgrade) -> Upgrade:
        if n in UPGRADES:
            raise ValueError(f"an upgrade to ledger schema {n} is already registered ({UPGRADES[n].__name__})")
        UPGRADES[n] = fn
        return fn
    return register


def additive(record: JSONObject) -> JSONObject:
    """The upgrade of a version that only adds to the one before: a record of that one is one of this one."""
    return record


def oldest_readable() -> int:
    """The oldest version the chain reaches :data:`CURRENT` from: v such that UPGRADES holds v+1 … CURRENT."""
    v = CURRENT
    while v in UPGRADES:
        v -= 1
    return v


def schema_version(path: Path, schema: str) -> int:
    """The version of a header's ``schema``; :class:`LedgerError` for a foreign schema, an unreadable
    version, a newer one, or an older one no chain of upgrades reaches."""
    name, _, version = schema.rpartition("/")
    if name != LEDGER_SCHEMA_NAME:
        raise LedgerError(f"{path}: foreign ledger schema {schema!r} (expected {LEDGER_SCHEMA_NAME}/{CURRENT})")
    try:
        v = int(version)
    except ValueError:
        raise LedgerError(f"{path}: unreadable schema version {version!r}") from None
    if v > CURRENT:
        raise LedgerError(f"{path}: ledger schema version {v} is newer than this leverbench understands ({CURRENT}); "
                          "upgrade leverbench (pip install -U leverbench) to read it")
    if v < oldest_readable():
        raise LedgerError(f"{path}: ledger schema version {v} is older than any this leverbench can upgrade "
                          f"(it reads {oldest_readable()} to {CURRENT})")
    return v


def older_version(path: Path, fh: BinaryIO) -> int | None:
    """The version of the ledger *fh* holds when it is older than :data:`CURRENT` (its lines then go
    through :func:`upgrade_lines`), else None; *fh* is left at its start.  A first line that is no
    run header naming a schema gives None: the reader reports it."""
    first = fh.readline()
    fh.seek(0)
    try:
        header = json.loads(first)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the json module reads
        return None
    if not isinstance(header, dict) or header.get("kind") != "run" or not isinstance(header.get("schema"), str):
        return None
    v = schema_version(path, header["schema"])
    if all(UPGRADES[n] is additive for n in range(v + 1, CURRENT + 1)):
        return None  # its records read as they are (the header keeps its own schema's name)
    return v


def upgrade_record(record: JSONObject, version: int) -> JSONObject:
    """*record* (of a version-*version* ledger) in its :data:`CURRENT` form; a header names its new schema."""
    for n in range(version + 1, CURRENT + 1):
        record = UPGRADES[n](record)
        if record.get("kind") == "run":
            record["schema"] = f"{LEDGER_SCHEMA_NAME}/{n}"
    return record


def upgrade_lines(data: bytes, version: int) -> bytes:
    """The lines of a version-*version* ledger, each JSON object upgraded (:func:`upgrade_record`), every
    other line (blank, cut, damaged) kept as it is, so that line numbers do not move."""
    out = []
    for line in data.split(b"\n"):
        try:
            obj = json.loads(line) if line.strip() else None
        except (ValueError, RecursionError):
            obj = None
        out.append(json.dumps(upgrade_record(obj, version)).encode() if isinstance(obj, dict) else line)
    return b"\n".join(out)


upgrade_to(2)(additive)
upgrade_to(3)(additive)
upgrade_to(4)(additive)
upgrade_to(5)(additive)
upgrade_to(6)(additive)
