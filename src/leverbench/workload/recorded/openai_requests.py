"""``openai-jsonl``: chat-completions requests, one JSON object per line, as OpenAI's Batch API takes them.

Each line is a request, in either shape:

- the batch input format: ``{"custom_id": ..., "method": "POST", "url": "/v1/chat/completions", "body": {...}}``
  (lines for another ``url`` are left out, counted);
- a bare request body: ``{"model": ..., "messages": [...], "tools": [...], ...}``.

A response is kept where present: in the line's ``response`` (a ``chat.completion`` object, or the batch
output's ``{"status_code": ..., "body": {...}}``), or in a batch output line (``{"custom_id": ...,
"response": {...}}``) anywhere in the file, matched to its request by ``custom_id`` (so the input and output
files concatenated are one log).  A response gives the recording's token counts (``usage``), the answer and
its tool calls; a failed one (``status_code`` ≥ 400, an ``error``) is dropped and the request kept.  Requests
are grouped into turns by the conversation each continues (:mod:`.grouping`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...json_types import JSONObject
from ..traces.files import read_text
from .base import Collected, Imported, RequestFormat, Skip, call_of, checked_request, json_lines

NAME = "openai-jsonl"


def _response(obj: Any) -> JSONObject | None:
    """The chat.completion body of a line's ``response`` (None: none, or a failed one)."""
    if not isinstance(obj, dict):
        return None
    if "status_code" in obj or ("body" in obj and "choices" not in obj):
        status = obj.get("status_code")
        if isinstance(status, int) and status >= 400:
            return None
        obj = obj.get("body")
    return obj if isinstance(obj, dict) and isinstance(obj.get("choices"), list) and not obj.get("error") else None


def _request_of(obj: JSONObject) -> JSONObject | None:
    """The line's request body (None: the line is a batch output, a response alone); :class:`Skip` when the line
    is a request that cannot be replayed."""
    if "body" in obj or "url" in obj:
        url = obj.get("url")
        if isinstance(url, str) and not url.rstrip("/").endswith("chat/completions"):
            raise Skip(f"url {url[:60]!r} is not chat completions")
        return checked_request(obj.get("body"))
    if "messages" in obj:
        return checked_request(obj)
    if "response" in obj or "error" in obj:
        return None
    raise Skip("neither a request (messages, or a batch line's body) nor a batch response")


def load(path: Path) -> Imported:
    got = Collected(path, NAME)
    requests: list[tuple[int, JSONObject, JSONObject | None, str | None]] = []  # line, request, response, custom_id
    answers: dict[str, JSONObject] = {}  # custom_id -> response of a batch output line
    for line, obj in json_lines(path, read_text(path), got):
        cid = obj.get("custom_id") if isinstance(obj.get("custom_id"), str) else None
        try:
            request = _request_of(obj)
        except Skip as s:
            got.skip(s.reason, line)
            continue
        response = _response(obj.get("response"))
        if request is None:
            if cid is not None and response is not None:
                answers[cid] = response
            elif cid is None:
                got.skip("a response without custom_id to match it to its request", line)
            continue
        requests.append((line, request, response, cid))
    for line, request, response, cid in requests:
        if response is None and cid is not None:
            response = answers.get(cid)
        got.add(call_of(request, f"{path}:{line}", response))
    return got.imported()


def detect(obj: JSONObject) -> bool:
    body = obj.get("body")
    return (isinstance(obj.get("messages"), list) or (isinstance(body, dict) and "messages" in body)
            or ("custom_id" in obj and ("body" in obj or "response" in obj)))


FORMAT = RequestFormat(NAME, detect, load)
