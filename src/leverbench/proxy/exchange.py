"""One exchange as the proxy captured it (:class:`RawExchange`: bytes and arrival times, nothing parsed), and
the recording's row made of it (:func:`exchange_row`), after the response has gone to the client.

The response is read as the client read it: a stream's SSE ``data:`` lines, each chunk fed to the runner's own
accumulator (:class:`~leverbench.runner.sse.StreamState`: the answer's text, reasoning, tool calls, usage,
llama.cpp's ``timings``, the finish reason), or the one JSON body of a call that did not stream.  ``--redact``
patterns mask their matches in what the request and the response say (:func:`masked_request`,
:func:`masked_response`: the messages' content, tool calls' arguments, the answer's text and reasoning; never
roles, ids, tool names or the model) before the row exists.
"""

from __future__ import annotations

import importlib
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..json_types import JSONObject, JSONValue
from ..ledger.rows import TimingsRow
from ..recording import ExchangeRow, ResponseRow, ToolCallJSON
from ..redact import HIDDEN, redact_text
from ..runner.sse import StreamState, Usage


@dataclass
class RawExchange:
    """What the proxy kept of one chat exchange while passing it through: the request's bytes, the response's
    body reads with their times (``time.perf_counter`` − ``t0``, when the proxy got the request), and how it
    ended."""

    t_start: float  # epoch seconds
    method: str
    path: str
    session: str | None
    request: bytes
    request_encoding: str = ""  # the request body's Content-Encoding (the writer reads it decoded, off the path)
    status: int | None = None
    content_type: str = ""
    content_encoding: str = ""
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    end_s: float = 0.0
    error: str | None = None


def masked(obj: JSONValue, patterns: list[re.Pattern[str]]) -> tuple[Any, int]:
    """*obj* with every match of *patterns* in its strings replaced by ``***``, and how many were."""
    if not patterns:
        return obj, 0
    if isinstance(obj, str):
        n = 0
        for p in patterns:
            obj, k = p.subn(HIDDEN, obj)
            n += k
        return obj, n
    if isinstance(obj, list):
        out, n = [], 0
        for v in obj:
            v, k = masked(v, patterns)
            out.append(v)
            n += k
        return out, n
    if isinstance(obj, dict):
        d, n = {}, 0
        for key, v in obj.items():
            d[key], k = masked(v, patterns)
            n += k
        return d, n
    return obj, 0


class _Masker:
    """Masks the content-bearing fields of a request or a response (:func:`masked_request`), counting matches."""

    def __init__(self, patterns: list[re.Pattern[str]]):
        self.patterns, self.n = patterns, 0

    def text(self, v: Any) -> Any:
        """A text field (a string; any JSON where a client put one: each string in it)."""
        out, k = masked(v, self.patterns)
        self.n += k
        return out

    def content(self, v: Any) -> Any:
        """A message's content: a string, or parts whose ``text`` (``refusal``) is the content."""
        if not isinstance(v, list):
            return self.text(v) if isinstance(v, str) else v
        return [{k: self.text(x) if k in PART_TEXT else x for k, x in p.items()} if isinstance(p, dict) else p
                for p in v]

    def fields(self, obj: dict[str, Any], keys: tuple[str, ...], how: Any) -> dict[str, Any]:
        return {k: how(v) if k in keys else v for k, v in obj.items()}

    def tool_call(self, tc: Any) -> Any:
        """A tool call: its arguments (``function.arguments``, or the proxy's own ``arguments``)."""
        if not isinstance(tc, dict):
            return tc
        out = self.fields(tc, ("arguments",), self.text)
        if isinstance(tc.get("function"), dict):
            out["function"] = self.fields(tc["function"], ("arguments",), self.text)
        return out

    def message(self, m: Any) -> Any:
        if not isinstance(m, dict):
            return m
        out = self.fields(m, MESSAGE_TEXT, self.content)
        if isinstance(m.get("tool_calls"), list):
            out["tool_calls"] = [self.tool_call(tc) for tc in m["tool_calls"]]
        if isinstance(m.get("function_call"), dict):
            out["function_call"] = self.tool_call(m["function_call"])
        return out


PART_TEXT = ("text", "refusal")  # the content of a message's part
MESSAGE_TEXT = ("content", "reasoning_content", "reasoning", "refusal")  # a message's content-bearing fields


def masked_request(request: JSONObject, patterns: list[re.Pattern[str]]) -> tuple[JSONObject, int]:
    """*request* with ``--redact``'s matches masked in what it says, never in its structure: the messages'
    content (strings, the text of parts, reasoning), their tool calls' arguments (a tool message's content is
    the tool's result), a predicted output (``prediction``), ``user`` and ``metadata``'s values.  Roles, types,
    tool-call ids, tool names and schemas, the model and the sampling parameters stay as sent (a replay needs
    them: a masked tool-call id would answer one call with another's result)."""
    if not patterns:
        return request, 0
    m = _Masker(patterns)
    out = dict(request)
    if isinstance(request.get("messages"), list):
        out["messages"] = [m.message(x) for x in request["messages"]]
    if isinstance(request.get("prediction"), dict):
        out["prediction"] = m.fields(request["prediction"], ("content",), m.content)
    if "user" in request:
        out["user"] = m.text(request["user"])
    if isinstance(request.get("metadata"), dict):
        out["metadata"] = {k: m.text(v) for k, v in request["metadata"].items()}
    return out, m.n


def masked_response(response: ResponseRow, patterns: list[re.Pattern[str]]) -> tuple[ResponseRow, int]:
    """*response* with ``--redact``'s matches masked in its text, reasoning and tool calls' arguments."""
    if not patterns:
        return response, 0
    m = _Masker(patterns)
    out: ResponseRow = {**response, "content": m.text(response["content"]),
                        "reasoning": m.text(response["reasoning"]),
                        "tool_calls": [m.tool_call(tc) for tc in response["tool_calls"]]}
    return out, m.n


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON (a number must be finite)")


def loads(data: bytes) -> Any:
    """Strict JSON (no NaN: a replay could not send it), by orjson; what it refuses but JSON allows (an escaped
    lone surrogate, as ``json.dumps`` writes half an emoji) by Python's parser.  ValueError: the latter's."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data, parse_constant=_no_constant)


def dumps_line(row: Any) -> bytes:
    """*row* as one JSON line: orjson's; a row holding a lone surrogate (which UTF-8 cannot hold) with it
    escaped, as it came."""
    try:
        return orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return (json.dumps(row, ensure_ascii=True, separators=(",", ":")) + "\n").encode()


class Undecoded(ValueError):
    """A body in a content-encoding this Python cannot read (brotli, zstd without their library)."""


def _zstd() -> Callable[[bytes], bytes] | None:
    for name in ("compression.zstd", "backports.zstd"):  # Python 3.14's, and its backport
        try:
            decompress: Callable[[bytes], bytes] = importlib.import_module(name).decompress
            return decompress
        except ImportError:
            continue
    try:
        import zstandard  # noqa: PLC0415
    except ImportError:
        return None
    return lambda data: zstandard.ZstdDecompressor().decompressobj().decompress(data)  # (frames without a size)


def _brotli() -> Callable[[bytes], bytes] | None:
    for name in ("brotli", "brotlicffi"):
        try:
            decompress: Callable[[bytes], bytes] = importlib.import_module(name).decompress
            return decompress
        except ImportError:
            continue
    return None


def decoded(data: bytes, encoding: str) -> bytes:
    """*data* as sent in *encoding* (a ``Content-Encoding``: ``gzip``, ``deflate``, ``br``, ``zstd``, or a list of
    them, applied in order), read; :class:`Undecoded` for one this Python has no library for."""
    for enc in reversed([e.strip().lower() for e in encoding.split(",") if e.strip()]):
        if enc == "identity":
            continue
        if enc in ("gzip", "x-gzip", "deflate"):
            data = zlib.decompress(data, 47)  # 32 + 15: gzip or zlib, by their headers
            continue
        how, lib = {"br": (_brotli, "brotli"), "zstd": (_zstd, "zstandard")}.get(enc, (None, ""))
        fn = how() if how is not None else None
        if fn is None:
            why = f"install {lib} (pip install {lib}) to read it" if lib else "an encoding leverbench does not read"
            raise Undecoded(f"content-encoding {enc!r} not read: {why}")
        data = fn(data)
    return data


def _body(raw: RawExchange) -> bytes:
    return decoded(b"".join(c for _, c in raw.chunks), raw.content_encoding)


def _sse(raw: RawExchange, state: StreamState) -> None:
    """Feed each ``data:`` line of the stream, at the time the body read that ended it arrived; ValueError for a
    stream that ended without ``[DONE]`` or a finish reason (cut: not an answer to replay)."""
    head = b""
    enc = raw.content_encoding.lower().strip()
    chunks = raw.chunks if enc in ("", "identity") else [(raw.end_s, _body(raw))]
    for t, data in chunks:
        lines = (head + data).split(b"\n")
        head = lines.pop()
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                state.done = True
                return
            obj = loads(payload)
            if isinstance(obj, dict) and "error" in obj and not obj.get("choices"):
                raise ValueError(f"error event in the stream: {str(obj['error'])[:200]}")
            if not isinstance(obj, dict):
                raise ValueError("an SSE data line is not a JSON object")
            state.feed(obj, t)
    if state.finish_reason is None:
        raise ValueError("the stream ended without a finish reason or [DONE]")


def _object(row: Usage | TimingsRow) -> JSONObject:
    """A part of the answer as checked (:mod:`..runner.sse`: a TypedDict, its values JSON) as a JSON object."""
    return dict(row)  # type: ignore[arg-type]  # mypy takes no TypedDict for a dict[str, JSONValue]


def parsed_response(raw: RawExchange, whole: bool = False) -> tuple[ResponseRow, float | None]:
    """The response as a row, and its first token's time; ValueError when it does not parse (*whole*: or when it
    is not a stream that reached its ``[DONE]``)."""
    state = StreamState(0.0, keep_text=True)
    if raw.content_type.lower().startswith("text/event-stream"):
        _sse(raw, state)
        if whole and not state.done:
            raise ValueError("the stream did not reach [DONE]")
    elif whole:
        raise ValueError("not a stream")
    else:
        obj = loads(_body(raw))
        if not isinstance(obj, dict):
            raise ValueError("the response is not a JSON object")
        state.feed(obj, raw.end_s)
    calls: list[ToolCallJSON] = [{"id": tc.get("id"), "name": tc.get("name") or "", "arguments": tc.get("arguments")
                                  or ""} for _, tc in sorted(state.tool_calls.items())]
    row: ResponseRow = {"content": "".join(state.content), "reasoning": "".join(state.reasoning),
                        "tool_calls": calls, "finish_reason": state.finish_reason,
                        "usage": _object(state.usage) if state.usage else None,
                        "timings": _object(state.timings) if state.timings else None}
    return row, state.first_token_s


CLIENT_GONE = "the client went away"  # how the proxy (:mod:`.server`) tells a client that hung up mid-response


def exchange_row(raw: RawExchange, n: int, turn: str, step: int, request: JSONObject | None,
                 patterns: list[re.Pattern[str]], redactions: int) -> ExchangeRow:
    """The recording's row of *raw* (its *request* parsed and masked already, with its *redactions*)."""
    response: ResponseRow | None = None
    ttft: float | None = None
    error, note = raw.error, None
    if error is not None and error.startswith(CLIENT_GONE) and raw.status is not None and raw.status < 400:
        try:  # a client that hangs up once it has read [DONE] (the openai SDK) went away after a whole answer
            response, ttft = parsed_response(raw, whole=True)
        except Exception:  # noqa: BLE001 (cut before [DONE]: failed, as recorded)
            response = None
        else:
            error, note = None, "the client closed the connection after the stream's [DONE]: the answer was whole"
            response, k = masked_response(response, patterns)
            redactions += k
    elif error is None and raw.status is not None and raw.status < 400:
        try:
            response, ttft = parsed_response(raw)
        except Undecoded as exc:  # the request is recorded, the response not (nothing failed)
            note = f"the response is not recorded: {exc}"
        except Exception as exc:  # noqa: BLE001 (orjson's ValueErrors, a codec's own: the exchange is kept, failed)
            error = f"response not parsed: {type(exc).__name__}: {exc}"[:500]
        else:
            response, k = masked_response(response, patterns)
            redactions += k
    elif error is None:
        error = f"HTTP {raw.status}: {_body_text(raw)}"
    session, k = masked(raw.session, patterns) if raw.session is not None else (None, 0)  # stored masked
    return {"kind": "exchange", "n": n, "turn": turn, "step": step, "session": session, "t_start": raw.t_start,
            "method": raw.method, "path": raw.path, "status": raw.status,
            "stream": raw.content_type.lower().startswith("text/event-stream"), "request": request,
            "response": response, "timing": {"ttft_s": None if ttft is None else round(ttft, 6),
                                             "latency_s": round(raw.end_s, 6), "chunks": len(raw.chunks)},
            "redactions": redactions + k, "error": None if error is None else redact_text(masked(error, patterns)[0]),
            "note": note}


def _body_text(raw: RawExchange) -> str:
    try:
        return " ".join(_body(raw).decode("utf-8", "replace").split())[:300]
    except (ValueError, zlib.error, OSError):
        return "(a body that does not decode)"
