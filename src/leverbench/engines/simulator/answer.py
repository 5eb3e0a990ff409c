"""A chat request as the simulator reads it, and the answer it plans for it (decoding only paces it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...json_types import JSONObject
from . import dialects
from .config import SimConfig
from .tokens import chat_prompt_tokens, message_text, stable_int, synthetic_text, tokenize

TOOL_CALL_TOKENS = 8  # generated tokens of a tool-call answer


@dataclass
class ChatRequest:
    """The fields of a chat-completions request that the simulator honours."""

    prompt: list[str]
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    cache_prompt: bool = True
    tools: list = field(default_factory=list)
    tool_messages: int = 0
    last_user_text: str = ""


def parse_chat_request(body: Any, dialect: str = "llama.cpp", template_tools: bool = True) -> ChatRequest:
    """Validate a request body; raises ``ValueError`` with a message fit for a 400.

    The ``openai`` dialect rejects fields outside OpenAI's schema; only ``llama.cpp``
    honours ``cache_prompt`` (vLLM and SGLang ignore fields they do not know).  Without
    *template_tools* the tools are dropped (not in the prompt, never called), as an engine
    does whose chat template cannot render them.
    """
    if not isinstance(body, dict):
        raise ValueError("request body must be a JSON object")
    if dialect == "openai" and (unknown := dialects.unknown_fields(body)):
        raise ValueError(dialects.unknown_fields_message(unknown))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ValueError("messages must be a non-empty list of objects")
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise ValueError("tools must be a list")
    if not template_tools:
        tools = []
    users = [m for m in messages if m.get("role") == "user"]
    stream_options = body.get("stream_options") or {}
    return ChatRequest(
        prompt=chat_prompt_tokens(messages, tools),
        stream=bool(body.get("stream", False)),
        include_usage=bool(stream_options.get("include_usage", False)) if isinstance(stream_options, dict) else False,
        max_tokens=_optional_count(body, "max_completion_tokens", "max_tokens"),
        min_tokens=_optional_count(body, "min_tokens") or 0,
        ignore_eos=bool(body.get("ignore_eos", False)),
        cache_prompt=dialect != "llama.cpp" or body.get("cache_prompt", True) is not False,
        tools=tools,
        tool_messages=sum(1 for m in messages if m.get("role") == "tool"),
        last_user_text=message_text(users[-1].get("content")) if users else "",
    )


def _optional_count(body: dict, *names: str) -> int | None:
    """The first of ``names`` present and not null, as a positive int (min_tokens may be 0)."""
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        least = 0 if name == "min_tokens" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}")
        return value
    return None


@dataclass
class Answer:
    """What a request generates: one piece per token, as (kind, text).

    Kinds: ``reasoning``, ``content``, ``tool_head`` (opens the tool call) and
    ``tool_args`` (a fragment of its arguments).
    """

    pieces: list[tuple[str, str]]
    finish_reason: str
    tool_call: dict | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.pieces)

    @property
    def reasoning_tokens(self) -> int:
        return sum(1 for kind, _ in self.pieces if kind == "reasoning")


def answer_length(req: ChatRequest, cfg: SimConfig) -> tuple[int, str]:
    """Generated tokens and finish reason for a plain (non-tool) answer."""
    if req.ignore_eos and req.max_tokens is not None:
        return req.max_tokens, "length"
    n = max(jittered_length(cfg, " ".join(req.prompt)), req.min_tokens)
    if req.max_tokens is not None and n > req.max_tokens:
        return req.max_tokens, "length"
    return n, "stop"


def jittered_length(cfg: SimConfig, prompt_text: str) -> int:
    """``output_tokens * (1 + u * output_jitter)``, u in [-1, 1] from the prompt and seed; at least 1."""
    u = stable_int(cfg.seed, prompt_text) / 2**64 * 2 - 1
    return max(1, round(cfg.output_tokens * (1 + u * cfg.output_jitter)))


def plan_answer(req: ChatRequest, cfg: SimConfig) -> Answer:
    """Decide the whole answer up front; decoding then only paces it."""
    if req.tools and req.tool_messages < cfg.tool_call_rounds:
        return _tool_call_answer(req)
    n, finish_reason = answer_length(req, cfg)
    reasoning = min(cfg.reasoning_tokens, n)
    words = tokenize(req.last_user_text) or tokenize(synthetic_text(16, stable_int(*req.prompt)))
    pieces = [("reasoning" if i < reasoning else "content", words[i % len(words)] + " ") for i in range(n)]
    return Answer(pieces, finish_reason)


def _tool_call_answer(req: ChatRequest) -> Answer:
    """A call to the first tool, ``TOOL_CALL_TOKENS`` tokens long: the head, then argument fragments."""
    round_no = req.tool_messages + 1
    tool = req.tools[0] if isinstance(req.tools[0], dict) else {}
    function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    arguments = json.dumps({"round": round_no})
    call = {"id": f"call_{round_no}", "name": str(function.get("name", "tool")), "arguments": arguments}
    pieces = [("tool_head", "")] + [("tool_args", part) for part in _split_even(arguments, TOOL_CALL_TOKENS - 1)]
    return Answer(pieces, "tool_calls", call)


def _split_even(text: str, parts: int) -> list[str]:
    bounds = [round(i * len(text) / parts) for i in range(parts + 1)]
    return [text[bounds[i] : bounds[i + 1]] for i in range(parts)]


def chunk_delta(pieces: list[tuple[str, str]], answer: Answer, first: bool) -> JSONObject:
    """The ``delta`` of the SSE chunk carrying ``pieces`` (one decode step): the server's JSON."""
    delta: JSONObject = {"role": "assistant"} if first else {}
    reasoning = "".join(text for kind, text in pieces if kind == "reasoning")
    content = "".join(text for kind, text in pieces if kind == "content")
    if reasoning:
        delta["reasoning_content"] = reasoning
    if content:
        delta["content"] = content
    if answer.tool_call is not None:
        fragment: JSONObject = {"index": 0}
        function: JSONObject = {}
        if any(kind == "tool_head" for kind, _ in pieces):
            fragment.update(id=answer.tool_call["id"], type="function")
            function["name"] = answer.tool_call["name"]
        function["arguments"] = "".join(text for kind, text in pieces if kind == "tool_args")
        fragment["function"] = function
        delta["tool_calls"] = [fragment]
    return delta


def full_message(answer: Answer) -> JSONObject:
    """The ``message`` of a non-streaming response."""
    message: JSONObject = {"role": "assistant", "content": "".join(t for k, t in answer.pieces if k == "content")}
    reasoning = "".join(text for kind, text in answer.pieces if kind == "reasoning")
    if reasoning:
        message["reasoning_content"] = reasoning
    if answer.tool_call is not None:
        call = answer.tool_call
        message["content"] = None
        message["tool_calls"] = [
            {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}
        ]
    return message
