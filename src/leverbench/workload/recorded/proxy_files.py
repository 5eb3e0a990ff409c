"""``leverbench-recording``: what ``leverbench record`` wrote (``DIR/exchanges.jsonl``, or the directory).

The file's layout is :mod:`leverbench.recording`'s: a ``recording`` header (its schema checked), then one
``exchange`` per line.  Each exchange that succeeded (no error, HTTP status below 400) and whose request can
be replayed is a call of the turn the proxy put it in (``turn``); failed exchanges are left out, counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ...errors import BadInput
from ...json_types import JSONObject
from ...recording import EXCHANGES_FILE, RECORDING_SCHEMA
from ..traces.files import read_text
from .base import Collected, Imported, RequestFormat, Skip, call_of, checked_request, json_lines

NAME = "leverbench-recording"


def _seconds(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


@dataclass
class RecordingHead:
    """What a recording's header line said, once :func:`exchanges` has read it (``seen``)."""

    seen: bool = False
    upstream: str | None = None


def exchanges(path: Path, got: Collected, head: RecordingHead) -> Iterator[tuple[int, JSONObject, JSONObject]]:
    """Each exchange of the recording *path* that succeeded (no error, HTTP status below 400) and whose request
    can be replayed, as (line, exchange, checked request); the rest counted in *got* by reason.  The header's
    schema is checked (BadInput naming the line) and what it says kept in *head*; a file without one is BadInput
    once read.  The one reader of ``exchanges.jsonl``: the replay's import (:func:`load`) and ``analyze``'s
    (:mod:`.traffic`) both read through it."""
    for line, obj in json_lines(path, read_text(path), got):
        kind = obj.get("kind")
        if kind == "recording":
            if obj.get("schema") != RECORDING_SCHEMA:
                raise BadInput(f"{path}: line {line}: a recording of schema {obj.get('schema')!r}; this leverbench "
                               f"reads {RECORDING_SCHEMA!r} (record it again, or upgrade leverbench)")
            upstream = obj.get("upstream")
            head.seen, head.upstream = True, upstream if isinstance(upstream, str) else None
            continue
        if kind != "exchange":
            got.skip(f"kind {kind!r} is not an exchange", line)
            continue
        try:
            status = obj.get("status")
            if obj.get("error") or (isinstance(status, int) and status >= 400):
                raise Skip("failed exchange")
            request = checked_request(obj.get("request"))
        except Skip as s:
            got.skip(s.reason, line)
            continue
        yield line, obj, request
    if not head.seen:
        raise BadInput(f"{path}: no recording header (a line of kind \"recording\"); is this a file leverbench record "
                       "wrote?")


def load(path: Path) -> Imported:
    got = Collected(path, NAME)
    for line, obj, request in exchanges(path, got, RecordingHead()):
        timing = obj.get("timing") if isinstance(obj.get("timing"), dict) else {}
        redactions = obj.get("redactions")
        call = call_of(request, f"{path}:{line}", obj.get("response"), ttft_s=_seconds(timing.get("ttft_s")),
                       latency_s=_seconds(timing.get("latency_s")),
                       redactions=redactions if isinstance(redactions, int) and redactions > 0 else 0)
        turn, session = obj.get("turn"), obj.get("session")
        got.add(call, turn if isinstance(turn, str) and turn else None, session if isinstance(session, str) else None)
    return got.imported()


def detect(obj: JSONObject) -> bool:
    return obj.get("kind") == "recording"


FORMAT = RequestFormat(NAME, detect, load, directory=EXCHANGES_FILE)
