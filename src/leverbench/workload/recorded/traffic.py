"""A recording (what ``leverbench record`` wrote) read as traffic, for ``leverbench analyze``: per call its turn and
step, its token counts from whatever the engine gave, its times, its tool calls and the shape of its request.

The turns are the recording's own (each exchange's ``turn`` and ``step``: the proxy's grouping, the one a replay
of the recording uses).  Token counts come from :func:`.base.token_counts`, as a replay's fidelity check takes
them: the response's ``usage``, else llama.cpp's ``timings`` (``prompt_n`` + ``cache_n``; ``cache_n`` the cached
part; ``predicted_n`` the answer).  The engine's own ``timings`` also say where its time went (``prompt_ms``,
``predicted_ms``).  A failed exchange, or one whose request cannot be replayed, is left out, counted, as the
replay's import leaves it out.  Messages are compared by the grouping's chain hashes (:func:`.grouping.
prefix_hashes`): the prefix every turn shares is a run of whole messages, measured in characters.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import BadInput
from ...recording import EXCHANGES_FILE
from ..traces.files import first_line, read_head, regular_file
from .base import Collected, token_counts
from .grouping import message_key, prefix_hashes
from .proxy_files import RecordingHead, exchanges


@dataclass(frozen=True)
class RecordingCall:
    """One recorded exchange that succeeded, as the analysis reads it.  ``counted_by``: where its token counts
    came from (``usage``, ``llama.cpp timings``; None: nowhere).  ``prefix``: the chain hash of each prefix of its
    messages; ``chars``: the characters of each prefix (each message's canonical JSON, summed)."""

    line: int
    turn: str
    step: int
    t_start: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    counted_by: str | None
    ttft_s: float | None
    latency_s: float | None
    prompt_ms: float | None = None
    predicted_ms: float | None = None
    tool_calls: int = 0
    model: str | None = None
    prefix: tuple[str, ...] = ()
    chars: tuple[int, ...] = ()
    tools_key: str | None = None
    tools_chars: int = 0
    tools: int = 0


@dataclass
class Recording:
    """A recording as read: its calls in the file's order, and the lines left out (per reason, the first line)."""

    path: Path
    calls: list[RecordingCall]
    skipped: dict[str, int] = field(default_factory=dict)
    first_skipped_line: dict[str, int] = field(default_factory=dict)
    upstream: str | None = None


def recording_file(path: str | Path) -> Path | None:
    """The ``exchanges.jsonl`` that *path* names (the file, or a directory holding one) when its first line is a
    recording's header; None otherwise (any other traffic file)."""
    path = Path(path)
    if path.is_dir():
        path = path / EXCHANGES_FILE
        if not path.is_file():
            return None
    elif not path.is_file():
        return None
    try:
        head = json.loads(first_line(read_head(path)) or "null")
    except (ValueError, RecursionError, BadInput):
        return None
    return path if isinstance(head, dict) and head.get("kind") == "recording" else None


def _seconds(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12 else None


def _shape(request: dict[str, Any]) -> dict[str, Any]:
    msgs = request["messages"]
    sizes, total = [], 0
    for m in msgs:
        total += len(message_key(m))
        sizes.append(total)
    tools = request.get("tools") if isinstance(request.get("tools"), list) and request.get("tools") else None
    tools_json = message_key(tools) if tools else b""
    return {"prefix": tuple(prefix_hashes(msgs)), "chars": tuple(sizes), "tools": len(tools or ()),
            "tools_key": hashlib.sha256(tools_json).hexdigest() if tools else None, "tools_chars": len(tools_json)}


def read_recording(path: str | Path) -> Recording:
    """The calls of the recording *path* (the directory, or its ``exchanges.jsonl``); BadInput for a file that is
    not one, of another schema, or without a call."""
    given = Path(path)
    regular_file(given)
    file = recording_file(given)
    if file is None:
        raise BadInput(f"{given}: not a recording (its first line is no \"recording\" header)")
    got = Collected(file, "leverbench-recording")  # (its skip counts; the turns are the recording's own)
    calls: list[RecordingCall] = []
    head = RecordingHead()
    for line, obj, request in exchanges(file, got, head):
        turn, step = obj.get("turn"), obj.get("step")
        if not isinstance(turn, str) or not turn or not isinstance(step, int) or isinstance(step, bool):
            got.skip("no turn and step", line)
            continue
        response = obj.get("response") if isinstance(obj.get("response"), dict) else {}
        prompt, cached, completion, counted_by = token_counts(response)
        timings = response.get("timings") if isinstance(response.get("timings"), dict) else {}
        timing = obj.get("timing") if isinstance(obj.get("timing"), dict) else {}
        tool_calls = response.get("tool_calls")
        model = request.get("model")
        calls.append(RecordingCall(
            line=line, turn=turn, step=step, t_start=_seconds(obj.get("t_start")), prompt_tokens=prompt,
            cached_tokens=cached,
            completion_tokens=completion, counted_by=counted_by, ttft_s=_seconds(timing.get("ttft_s")),
            latency_s=_seconds(timing.get("latency_s")), prompt_ms=_seconds(timings.get("prompt_ms")),
            predicted_ms=_seconds(timings.get("predicted_ms")),
            tool_calls=len(tool_calls) if isinstance(tool_calls, list) else 0,
            model=model if isinstance(model, str) else None, **_shape(request)))
    if not calls:
        why = "; ".join(f"{reason}: {n} line(s), first line {got.first_line[reason]}"
                        for reason, n in Counter(got.skipped).most_common()) or "it holds no exchange"
        raise BadInput(f"{file}: no call to analyse ({why})")
    return Recording(file, calls, dict(got.skipped), dict(got.first_line), head.upstream)
