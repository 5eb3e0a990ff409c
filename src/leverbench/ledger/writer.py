"""The one writer of a run's ledger: append a line, flush, fsync.

Following hyperfine and datasette: one owner of the file, every unit of work
saved the moment it ends, so a crash loses nothing already measured.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping, Sequence

from .records import json_safe
from .schema import check_header


class LedgerWriter:
    """*secrets*: strings never to be written (the runner's API keys): a server that echoes one in an error
    body, or anything else that carries it, has it written as ``***``."""

    def __init__(self, path: Path, secrets: tuple[str, ...] = ()):
        self.path = Path(path)
        self.secrets = tuple(s for s in secrets if s)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_partial_tail()
        self._fh = open(self.path, "a", encoding="utf-8")

    def _repair_partial_tail(self) -> None:
        """A line cut by a crash is ended with a newline so that appends start clean.

        The cut line itself stays (never rewritten); the reader skips it with a warning.
        """
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                last = fh.read(1)
            if last != b"\n":
                with open(self.path, "ab") as fh:
                    fh.write(b"\n")
                    fh.flush()
                    os.fsync(fh.fileno())

    def append(self, record: Mapping[str, object]) -> None:
        """Write *record* as one line and fsync; a NaN or infinity in it is written as a string (see
        :func:`~leverbench.ledger.records.json_safe`), never as invalid JSON and never as an error.  A header
        (kind ``run`` or ``shard``) is checked first by the model the reader reads it by
        (:class:`~leverbench.ledger.schema.RunHeader`): ValueError, and nothing written, for one it would refuse."""
        self.append_many([record])

    def append_many(self, records: Sequence[Mapping[str, object]]) -> None:
        """Write each of *records* as a line (as :meth:`append` does), then flush and fsync once: a group
        commit, each record on disk when it returns.  One that cannot be written (a header the reader would
        refuse) is left out, the others written, and its ValueError raised after."""
        lines, error = [], None
        for record in records:
            try:
                lines.append(self._line(record))
            except ValueError as exc:
                error = error or exc
        if lines:
            self._fh.write("".join(line + "\n" for line in lines))
            self._fh.flush()
            os.fsync(self._fh.fileno())
        if error is not None:
            raise error

    def _line(self, record: Mapping[str, object]) -> str:
        kind = record.get("kind")
        if kind == "run" or kind == "shard":
            defect = check_header(record, kind)
            if defect is not None:
                raise ValueError(f"{self.path}: a {kind} header the reader would refuse: {defect}")
        try:
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except ValueError:  # a non-finite float
            line = json.dumps(json_safe(record), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        for secret in self.secrets:
            line = line.replace(secret, "***")
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (JSON carries it, UTF-8 cannot): escaped, as it came
            line = json.dumps(json.loads(line), ensure_ascii=True, separators=(",", ":"))
        return line

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> "LedgerWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
