"""``otel-genai``: OpenTelemetry spans of model calls, under the GenAI semantic conventions, as OTLP JSON lines.

What an OpenTelemetry Collector's file exporter writes: one ``{"resourceSpans": [{"scopeSpans": [{"spans":
[...]}]}]}`` per line (a line holding one span object is read too).  A chat span (``gen_ai.operation.name`` =
``chat``, or one that carries input messages) is a call when its content was captured:

- the messages: ``gen_ai.input.messages`` (JSON: ``[{"role", "parts": [{"type": "text", "content"} |
  {"type": "tool_call", "id", "name", "arguments"} | {"type": "tool_call_response", "id", "response"}]}]``),
  ``gen_ai.system_instructions`` before them; or the older flattened ``gen_ai.prompt.N.role`` /
  ``gen_ai.prompt.N.content`` (OpenLLMetry);
- the tools: ``gen_ai.tool.definitions``; the sampling parameters: ``gen_ai.request.*`` (max_tokens,
  temperature, top_p, stop_sequences, seed, frequency_penalty, presence_penalty);
- the response: ``gen_ai.output.messages`` (or ``gen_ai.completion.0.content``), ``gen_ai.usage.input_tokens``
  and ``output_tokens``, ``gen_ai.response.finish_reasons``, ``gen_ai.response.model``.

Spans are taken in the order they started; a span's ``gen_ai.conversation.id`` names its turn (as a session
header does), else the turn is the conversation it continues.  A chat span without captured content (the
instrumentation's default) is left out, counted: it has no request to replay.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from ...json_types import JSONObject, JSONValue
from ..traces.files import read_text
from .base import Collected, Imported, RequestFormat, Skip, call_of, checked_request, json_lines

NAME = "otel-genai"
_PARAMS = {"max_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p", "stop_sequences": "stop",
           "seed": "seed", "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty"}


def _value(v: Any) -> Any:
    """An OTLP ``AnyValue`` (``{"stringValue": ...}``, ``intValue`` as a string, ``arrayValue``) as a value."""
    if not isinstance(v, dict):
        return v
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return None
    for k in ("doubleValue", "boolValue"):
        if k in v:
            return v[k]
    if "arrayValue" in v:
        return [_value(x) for x in (v["arrayValue"] or {}).get("values") or []]
    return None


def attributes(span: JSONObject) -> dict[str, Any]:
    """A span's attributes as a dict: OTLP's list of ``{key, value}``, or a dict already."""
    attrs = span.get("attributes")
    if isinstance(attrs, dict):
        return attrs
    return {a["key"]: _value(a.get("value")) for a in attrs or []
            if isinstance(a, dict) and isinstance(a.get("key"), str)}


def spans(obj: JSONObject) -> Iterator[JSONObject]:
    """The spans of one line: an OTLP export's, or the line itself when it is a span."""
    if "resourceSpans" not in obj:
        yield obj
        return
    for rs in obj.get("resourceSpans") or []:
        for ss in (rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []) if isinstance(rs, dict) else []:
            yield from (s for s in (ss.get("spans") or [] if isinstance(ss, dict) else []) if isinstance(s, dict))


def _json_attr(attrs: dict[str, Any], key: str) -> Any:
    v = attrs.get(key)
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            raise Skip(f"{key} is not JSON") from None
    return v


def _text(parts: list[Any]) -> str:
    return "".join(str(p.get("content") or "") for p in parts if isinstance(p, dict) and p.get("type") == "text")


def openai_messages(message: Any) -> list[JSONObject]:
    """One GenAI message (role, parts) as the OpenAI chat messages it stands for (a tool response each its own)."""
    if not isinstance(message, dict):
        raise Skip("a message is not an object")
    role = str(message.get("role") or "user")
    parts = [p for p in message.get("parts") or [] if isinstance(p, dict)]
    responses = [p for p in parts if p.get("type") == "tool_call_response"]
    if responses:
        return [{"role": "tool", "tool_call_id": str(p.get("id") or ""),
                 "content": p["response"] if isinstance(p.get("response"), str) else json.dumps(p.get("response"))}
                for p in responses]
    calls: list[JSONValue] = [
        {"id": str(p.get("id") or f"call_{i}"), "type": "function",
         "function": {"name": str(p.get("name") or ""),
                      "arguments": p["arguments"] if isinstance(p.get("arguments"), str)
                      else json.dumps(p.get("arguments") or {})}}
        for i, p in enumerate(parts) if p.get("type") == "tool_call"]
    out: JSONObject = {"role": role, "content": _text(parts) or (None if calls else "")}
    if calls:
        out["tool_calls"] = calls
    return [out]


def _messages(attrs: dict[str, Any]) -> list[JSONObject]:
    msgs: list[JSONObject] = []
    system = _json_attr(attrs, "gen_ai.system_instructions")
    if isinstance(system, list) and _text(system):
        msgs.append({"role": "system", "content": _text(system)})
    given = _json_attr(attrs, "gen_ai.input.messages")
    if isinstance(given, list):
        for m in given:
            msgs += openai_messages(m)
        return msgs
    i = 0  # the flattened form: gen_ai.prompt.0.role, gen_ai.prompt.0.content, ...
    while f"gen_ai.prompt.{i}.role" in attrs or f"gen_ai.prompt.{i}.content" in attrs:
        msgs.append({"role": str(attrs.get(f"gen_ai.prompt.{i}.role") or "user"),
                     "content": str(attrs.get(f"gen_ai.prompt.{i}.content") or "")})
        i += 1
    return msgs


def _response(attrs: dict[str, Any]) -> JSONObject:
    """The span's response in the shape of a ``chat.completion`` (for :func:`.base.call_of`)."""
    out = _json_attr(attrs, "gen_ai.output.messages")
    message: JSONObject = {}
    if isinstance(out, list) and out:
        message = openai_messages(out[0])[0]
    elif "gen_ai.completion.0.content" in attrs:
        message = {"role": "assistant", "content": str(attrs["gen_ai.completion.0.content"] or "")}
    reasons = attrs.get("gen_ai.response.finish_reasons")
    usage = {"prompt_tokens": attrs.get("gen_ai.usage.input_tokens"),
             "completion_tokens": attrs.get("gen_ai.usage.output_tokens")}
    return {"choices": [{"message": message, "finish_reason": reasons[0] if isinstance(reasons, list) and reasons
                         else None}], "usage": usage, "model": attrs.get("gen_ai.response.model")}


def request_of(attrs: dict[str, Any]) -> JSONObject:
    """The chat request a span stands for: its model, messages, tools and sampling parameters."""
    request: JSONObject = {"model": attrs.get("gen_ai.request.model"), "messages": list(_messages(attrs))}
    tools = _json_attr(attrs, "gen_ai.tool.definitions")
    if isinstance(tools, list) and tools:
        request["tools"] = tools
    for key, field in _PARAMS.items():
        if attrs.get(f"gen_ai.request.{key}") is not None:
            request[field] = attrs[f"gen_ai.request.{key}"]
    return checked_request(request)


def load(path: Path) -> Imported:
    got = Collected(path, NAME)
    found: list[tuple[int, int, JSONObject, dict[str, Any]]] = []  # start ns, line, request, attributes
    for line, obj in json_lines(path, read_text(path), got):
        for span in spans(obj):
            attrs = attributes(span)
            op = attrs.get("gen_ai.operation.name")
            try:
                if op not in (None, "chat", "text_completion") or not any(k.startswith("gen_ai.") for k in attrs):
                    raise Skip("not a chat span")
                request = request_of(attrs)
            except Skip as s:
                got.skip(s.reason if s.reason != "no messages (a non-empty list of objects with a role)"
                         else "a chat span without captured messages", line)
                continue
            try:
                start = int(span.get("startTimeUnixNano") or 0)
            except (TypeError, ValueError):
                start = 0
            found.append((start, line, request, attrs))
    for _, line, request, attrs in sorted(found, key=lambda f: (f[0], f[1])):
        conv = attrs.get("gen_ai.conversation.id")
        got.add(call_of(request, f"{path}:{line}", _response(attrs)),
                session=str(conv) if conv is not None else None)
    return got.imported()


def detect(obj: JSONObject) -> bool:
    return "resourceSpans" in obj or ("attributes" in obj and "spanId" in obj)


FORMAT = RequestFormat(NAME, detect, load)
