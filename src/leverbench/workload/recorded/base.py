"""What a request-log importer declares (:class:`RequestFormat`) and the pieces every importer shares: strict
JSON lines, a request checked for what a replay needs, a response read into a :class:`RecordedCall`, and the
rows collected while a file is read (:class:`Collected`)."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ...errors import BadInput
from ...json_types import JSONObject
from ...recording import RecordedCall, RecordedToolCall, RecordedTurn
from .grouping import TurnGrouper


@dataclass(frozen=True)
class RequestFormat:
    """A request log's format: ``detect`` says whether the file's first JSON object is this format's;
    ``load(path)`` reads it into turns; ``directory`` names the file this format reads inside a directory
    given instead of a file (None: a directory is no file of this format)."""

    name: str
    detect: Callable[[JSONObject], bool]
    load: Callable[[Path], "Imported"]
    directory: str | None = None


@dataclass
class Imported:
    """A request log as read: its turns (in the order their first request came), and per reason the lines
    left out, with the first line each reason was met."""

    path: Path
    fmt: str
    turns: list[RecordedTurn]
    skipped: dict[str, int] = field(default_factory=dict)
    first_skipped_line: dict[str, int] = field(default_factory=dict)


class Collected:
    """Calls and skip reasons while an importer walks a file; turns from the file's own turn names, else by
    :class:`~.grouping.TurnGrouper` (the conversation each request continues)."""

    def __init__(self, path: Path, fmt: str):
        self.path, self.fmt = path, fmt
        self.calls: dict[str, list[RecordedCall]] = {}
        self.sessions: dict[str, str | None] = {}
        self.skipped: Counter[str] = Counter()
        self.first_line: dict[str, int] = {}
        self.grouper = TurnGrouper()

    def skip(self, reason: str, line: int) -> None:
        self.skipped[reason] += 1
        self.first_line.setdefault(reason, line)

    def add(self, call: RecordedCall, turn: str | None = None, session: str | None = None) -> None:
        """A usable call, in the turn *turn* names (None: the grouper's)."""
        if turn is None:
            turn, _ = self.grouper.assign(list(call.messages), session)
        self.calls.setdefault(turn, []).append(call)
        self.sessions.setdefault(turn, session)

    def imported(self) -> Imported:
        if not self.calls:
            why = "; ".join(f"{reason}: {n} line(s), first line {self.first_line[reason]}"
                            for reason, n in self.skipped.most_common()) or "the file holds no request"
            raise BadInput(f"{self.path}: no request that can be replayed as format {self.fmt!r} ({why})")
        turns = [RecordedTurn(id=t, calls=tuple(calls), session=self.sessions.get(t))
                 for t, calls in self.calls.items()]
        return Imported(self.path, self.fmt, turns, dict(self.skipped), dict(self.first_line))


class Skip(Exception):
    """A line that cannot be replayed: its reason (counted, with the first line it was met)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON (a number must be finite)")


def json_lines(path: Path, text: str, got: Collected) -> Iterator[tuple[int, JSONObject]]:
    """(line number, object) for each line that is a JSON object; other lines counted as skipped.  Strict: NaN and
    Infinity (which Python's parser would take) are no JSON, so nothing replayed can carry them."""
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            got.skip("not JSON", i)
            continue
        if not isinstance(obj, dict):
            got.skip("not a JSON object", i)
            continue
        yield i, obj


def checked_request(body: Any) -> JSONObject:
    """A chat-completions request body a replay can send: an object whose ``messages`` are a non-empty list of
    objects, each with a ``role``, and whose ``tools`` (if any) are a list of objects; else :class:`Skip`."""
    if not isinstance(body, dict):
        raise Skip("request is not a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                                         for m in msgs):
        raise Skip("no messages (a non-empty list of objects with a role)")
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise Skip("tools is not a list of objects")
    return body


def _count(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or v != int(v):
        return None
    return int(v)


def _text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, list):  # content parts
        return "".join(str(p.get("text") or "") for p in v if isinstance(p, dict) and p.get("type", "text") == "text")
    return ""


def tool_calls_of(calls: Any) -> tuple[RecordedToolCall, ...]:
    """Tool calls as a response carries them: OpenAI's ``{id, function: {name, arguments}}``, or the proxy's
    ``{id, name, arguments}``."""
    out = []
    for tc in calls if isinstance(calls, list) else []:
        if not isinstance(tc, dict):
            continue
        fn = tc.get("function") if isinstance(tc.get("function"), dict) else tc
        args = fn.get("arguments")
        out.append(RecordedToolCall(id=tc.get("id") if isinstance(tc.get("id"), str) else None,
                                    name=str(fn.get("name") or ""),
                                    arguments=args if isinstance(args, str) else json.dumps(args or {})))
    return tuple(out)


#: Where a recorded call's token counts came from (:func:`token_counts`).
COUNTED_BY_USAGE, COUNTED_BY_TIMINGS = "usage", "llama.cpp timings"


def token_counts(response: Any) -> tuple[int | None, int | None, int | None, str | None]:
    """(prompt, cached, completion tokens, where they came from) of a recorded *response*, from whatever the
    engine gave: its ``usage`` (``prompt_tokens``, ``prompt_tokens_details.cached_tokens``, ``completion_tokens``:
    every engine when the client asked for it, vLLM's and SGLang's counters included), else llama.cpp's own
    ``timings``, which it streams whether or not the client asked for usage: ``prompt_n`` (the prompt tokens it
    computed) + ``cache_n`` (those its cache served) is the prompt, ``cache_n`` the cached part, ``predicted_n``
    the answer.  (None, None, None, None) where neither is there (a stream without usage from another engine, a
    request log without responses)."""
    resp = response if isinstance(response, dict) else {}
    usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else {}
    prompt = _count(usage.get("prompt_tokens"))
    if prompt is not None:
        details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
        cached = _count(details.get("cached_tokens"))
        timings = resp.get("timings") if isinstance(resp.get("timings"), dict) else {}
        if cached is None and _count(timings.get("cache_n")) is not None:
            cached = min(_count(timings.get("cache_n")) or 0, prompt)  # llama.cpp: usage without details
        return prompt, cached, _count(usage.get("completion_tokens")), COUNTED_BY_USAGE
    timings = resp.get("timings") if isinstance(resp.get("timings"), dict) else {}
    computed, cached = _count(timings.get("prompt_n")), _count(timings.get("cache_n"))
    if computed is None or cached is None:
        return None, None, _count(usage.get("completion_tokens")), None
    return computed + cached, cached, _count(timings.get("predicted_n")), COUNTED_BY_TIMINGS


def call_of(request: JSONObject, source: str, response: Any = None, **measured: Any) -> RecordedCall:
    """A recorded call of *request* and, where there is one, its *response*: an OpenAI ``chat.completion`` body
    (``choices[0].message``) or the proxy's response row (``content``, ``reasoning``, ``tool_calls``); its
    token counts are :func:`token_counts`' (usage, else llama.cpp's timings).  *measured*: the recording's
    times (``ttft_s``, ``latency_s``) and ``redactions``."""
    resp = response if isinstance(response, dict) else {}
    choice = (resp.get("choices") or [{}])[0] if isinstance(resp.get("choices"), list) else {}
    message = (choice.get("message") or {}) if isinstance(choice, dict) else {}
    src = message if message else resp
    prompt, cached, completion, _ = token_counts(resp)
    finish = (choice.get("finish_reason") if isinstance(choice, dict) and choice else resp.get("finish_reason"))
    model = resp.get("model") if isinstance(resp.get("model"), str) else request.get("model")
    return RecordedCall(
        request=request, source=source, content=_text(src.get("content")),
        reasoning=_text(src.get("reasoning_content") or src.get("reasoning")),
        tool_calls=tool_calls_of(src.get("tool_calls")), finish_reason=finish if isinstance(finish, str) else None,
        prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached,
        model=model if isinstance(model, str) else None,
        **measured)


def skipped_note(imp: Imported) -> str | None:
    """The lines an import left out, in words, the file named (None: none): the run keeps it and warns."""
    if not imp.skipped:
        return None
    return (f"{imp.path}: {sum(imp.skipped.values())} line(s) left out: "
            + "; ".join(f"{n} {reason} (first: line {imp.first_skipped_line[reason]})"
                        for reason, n in sorted(imp.skipped.items(), key=lambda kv: -kv[1])))
