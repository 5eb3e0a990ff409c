"""``leverbench-recording``: what ``leverbench record`` wrote (``DIR/exchanges.jsonl``, or the directory).

The file's layout is :mod:`leverbench.recording`'s: a ``recording`` header (its schema checked), then one
``exchange`` per line.  Each exchange that succeeded (no error, HTTP status below 400) and whose request can
be replayed is a call of the turn the proxy put it in (``turn``); failed exchanges are left out, counted.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import BadInput
from ...json_types import JSONObject
from ...recording import EXCHANGES_FILE, RECORDING_SCHEMA
from ..traces.files import read_text
from .base import Collected, Imported, RequestFormat, Skip, call_of, checked_request, json_lines

NAME = "leverbench-recording"


def _seconds(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


def load(path: Path) -> Imported:
    got = Collected(path, NAME)
    header_seen = False
    for line, obj in json_lines(path, read_text(path), got):
        kind = obj.get("kind")
        if kind == "recording":
            if obj.get("schema") != RECORDING_SCHEMA:
                raise BadInput(f"{path}: line {line}: a recording of schema {obj.get('schema')!r}; this leverbench "
                               f"reads {RECORDING_SCHEMA!r} (record it again, or upgrade leverbench)")
            header_seen = True
            continue
        if kind != "exchange":
            got.skip(f"kind {kind!r} is not an exchange", line)
            continue
        try:
            if obj.get("error"):
                raise Skip("failed exchange")
            status = obj.get("status")
            if isinstance(status, int) and status >= 400:
                raise Skip("failed exchange")
            request = checked_request(obj.get("request"))
        except Skip as s:
            got.skip(s.reason, line)
            continue
        timing = obj.get("timing") if isinstance(obj.get("timing"), dict) else {}
        redactions = obj.get("redactions")
        call = call_of(request, f"{path}:{line}", obj.get("response"), ttft_s=_seconds(timing.get("ttft_s")),
                       latency_s=_seconds(timing.get("latency_s")),
                       redactions=redactions if isinstance(redactions, int) and redactions > 0 else 0)
        turn, session = obj.get("turn"), obj.get("session")
        got.add(call, turn if isinstance(turn, str) and turn else None, session if isinstance(session, str) else None)
    if not header_seen:
        raise BadInput(f"{path}: no recording header (a line of kind \"recording\"); is this a file leverbench record "
                       "wrote?")
    return got.imported()


def detect(obj: JSONObject) -> bool:
    return obj.get("kind") == "recording"


FORMAT = RequestFormat(NAME, detect, load, directory=EXCHANGES_FILE)
