"""The recording's one writer: a thread that parses each captured exchange, masks it, puts it in its turn and
appends it to ``exchanges.jsonl`` (flushed and fsync'd), so that none of that work sits on the proxy's path.

The proxy hands each exchange over the moment its response has gone to the client (:meth:`RecordingWriter.
submit` returns at once); exchanges are written in that order, and turns assigned in it (an agent sends a
turn's next request after it has read the answer before, so that answer's exchange is handed over first).

Each line is flushed as it is written; the fsync is a group commit: when no other exchange waits (an agent's
calls one after another: each on disk before the next), else at most every :data:`FSYNC_EVERY_S` (a burst of
concurrent calls: one fsync, ~3 ms of disk on a shared machine, no longer holds up every line).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import __version__
from ..errors import BadInput, RuntimeFailure
from ..json_types import JSONObject
from ..recording import EXCHANGES_FILE, RECORDING_SCHEMA, ExchangeRow, RecordingHeaderRow
from ..redact import redact_url
from ..workload.recorded.grouping import TurnGrouper
from .exchange import RawExchange, Undecoded, decoded, dumps_line, exchange_row, loads, masked_request

FSYNC_EVERY_S = 0.25  # in a burst, the recording is fsync'd at least this often


class RecordingWriter:
    """Writes ``DIR/exchanges.jsonl``: the header now, then each exchange handed over (see the module's
    docstring).  *patterns*: ``--redact``; their matches never reach the file.  *hint*: told, once, one line
    when the first streamed answer comes without usage (:func:`usage_hint`)."""

    def __init__(self, out: Path, upstream: str, patterns: list[re.Pattern[str]], session_header: str,
                 hint: Callable[[str], None] | None = None):
        self.path = Path(out) / EXCHANGES_FILE
        if self.path.exists() and self.path.stat().st_size > 0:
            raise BadInput(f"{self.path} already holds a recording; choose another --out")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.patterns = patterns
        self.grouper = TurnGrouper()
        self.exchanges = 0
        self.failed = 0
        self.turns: set[str] = set()
        self._fh = open(self.path, "ab")
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recording")
        self.lost = 0  # exchanges that could not be recorded
        self.first_error: str | None = None
        self._waiting = 0  # exchanges handed over and not yet written
        self._lock = threading.Lock()
        self._synced = time.monotonic()
        self._hint = hint
        header: RecordingHeaderRow = {
            "kind": "recording", "schema": RECORDING_SCHEMA, "tool_version": __version__,
            "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "upstream": redact_url(upstream), "session_header": session_header, "redact_patterns": len(patterns)}
        self._write(header)

    def submit(self, raw: RawExchange) -> None:
        """Hand *raw* over and return at once.  Never raises: the proxy passes everything through whatever
        becomes of the recording (a failed write is counted, the first kept, and raised by :meth:`close`)."""
        with self._lock:
            self._waiting += 1
        self._io.submit(self._guarded, raw)

    def close(self) -> None:
        """Write what was handed over, then close the file; :class:`RuntimeFailure` when an exchange could not be
        recorded (a full disk), naming how many and the first error."""
        self._io.shutdown(wait=True)
        if not self._fh.closed:
            try:
                os.fsync(self._fh.fileno())
            finally:
                self._fh.close()
        if self.lost:
            raise RuntimeFailure(f"{self.path}: {self.lost} exchange(s) could not be recorded (the proxy passed them "
                                 f"through): first: {self.first_error}")

    def _guarded(self, raw: RawExchange) -> None:
        try:
            self._record(raw)
        except Exception as exc:  # noqa: BLE001 (anything: counted and told at close, never the proxy's failure)
            self.lost += 1
            self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"
        finally:
            with self._lock:
                self._waiting -= 1

    def discard_if_empty(self) -> None:
        """Close, and remove the file when it holds no exchange (the proxy never listened: nothing recorded)."""
        self.close()
        if self.exchanges == 0:
            self.path.unlink(missing_ok=True)

    def _record(self, raw: RawExchange) -> None:
        request: JSONObject | None = None
        error: str | None = None  # the request's own (the exchange's, raw.error, is exchange_row's to judge)
        try:
            parsed = loads(decoded(raw.request, raw.request_encoding))
            request = parsed if isinstance(parsed, dict) else None
        except (Undecoded, zlib.error) as exc:
            error = f"the request body is not read: {exc}"
        except (ValueError, RecursionError) as exc:  # the parser's own words (where, what)
            error = f"the request is not JSON: {exc}"[:500]
        if request is None and error is None:
            error = "the request is not a JSON object"
        request, redactions = masked_request(request, self.patterns) if request is not None else (None, 0)
        messages = (request or {}).get("messages")
        self.exchanges += 1
        row = exchange_row(raw, self.exchanges, "", 0, request, self.patterns, redactions)
        if error is not None and row["error"] is None:
            row["error"] = error
        # grouped by the session's own value (two values masked alike are two turns), named by its masked one;
        # a retry of a failed request stays in its turn
        row["turn"], row["step"] = self.grouper.assign(messages if isinstance(messages, list) else [], raw.session,
                                                       failed=row["error"] is not None, shown=row["session"])
        self.failed += row["error"] is not None
        if self._hint is not None and (said := usage_hint(row)) is not None:
            self._hint, hint = None, self._hint
            hint(said)
        self.turns.add(row["turn"])
        with self._lock:
            idle = self._waiting == 1  # no other exchange waits behind this one
        self._write(row, sync=idle or time.monotonic() - self._synced >= FSYNC_EVERY_S)

    def _write(self, row: ExchangeRow | RecordingHeaderRow, sync: bool = True) -> None:
        self._fh.write(dumps_line(row))
        self._fh.flush()
        if sync:
            os.fsync(self._fh.fileno())
            self._synced = time.monotonic()


def usage_hint(row: ExchangeRow) -> str | None:
    """What to do about a streamed answer that came without ``usage`` (None: *row* is not one): llama.cpp streams
    its own ``timings`` anyway, whose counts the recording's reader takes instead; other engines send usage in a
    stream only when the client asks for it (``stream_options.include_usage``; vLLM also when started with
    ``--enable-force-include-usage``)."""
    response = row["response"]
    if not row["stream"] or row["error"] is not None or response is None or response.get("usage"):
        return None
    timings = response.get("timings") or {}
    head = (f"leverbench record: exchange {row['n']} streamed without usage (the client did not send "
            'stream_options={"include_usage": true})')
    if isinstance(timings.get("prompt_n"), int) and isinstance(timings.get("cache_n"), int):
        return head + "; llama.cpp's timings give its prompt tokens instead (prompt_n + cache_n)"
    return (head + ": its prompt length is not recorded and a replay cannot check it; have the client send it "
            "(vLLM: or start it with --enable-force-include-usage)")
