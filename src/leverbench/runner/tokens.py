"""Tokens counted with an endpoint's own tokenizer: harness work, kept out of every measurement.

- :func:`count_chat_tokens`: a call the server sent no usage for: its prompt (the chat template applied
  by llama.cpp's ``/apply-template``, else the messages' contents) and its output, each ``/tokenize``'d.
- :func:`count_text_tokens`: one text's length in tokens (a trace replay calibrates and checks its
  synthetic prompts with it): llama.cpp / simulator ``POST /tokenize {"content"}``, else vLLM / SGLang
  ``{"model", "prompt"}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol

import aiohttp

from .discover import api_root

if TYPE_CHECKING:
    from ..workload.chat import ChatMessage

TIMEOUT = aiohttp.ClientTimeout(total=30)


class Endpoint(Protocol):
    """Where to ask (the runner's ``ArmEndpoint``)."""

    base_url: str
    model: str
    headers: dict[str, str]


@dataclass(frozen=True)
class ChatTokens:
    """A call's counts by :func:`count_chat_tokens`; ``source`` says how (the record's ``token_source``)."""

    prompt_tokens: int
    completion_tokens: int
    source: str


async def _post(session: aiohttp.ClientSession, ep: Endpoint, path: str, payload: Mapping[str, object]) -> Any:
    """The JSON answer of ``POST root + path``; None when the status is not 200."""
    async with session.post(api_root(ep.base_url) + path, json=payload, headers=ep.headers, timeout=TIMEOUT) as resp:
        if resp.status != 200:
            return None
        return await resp.json(content_type=None)


async def count_chat_tokens(session: aiohttp.ClientSession, ep: Endpoint, messages: list[ChatMessage],
                            output: str, tools: list[Any] | None = None) -> ChatTokens | None:
    """The prompt's tokens (its chat template applied, with the call's *tools*, when the server offers
    ``/apply-template``) and the output's, by the server's ``/tokenize`` (llama.cpp's ``{"content"}``); None when
    it cannot count."""
    try:
        source = "tokenize (chat template applied)"
        payload: dict[str, object] = {"messages": messages, **({"tools": tools} if tools else {})}
        tmpl = await _post(session, ep, "/apply-template", payload)
        prompt = tmpl.get("prompt") if isinstance(tmpl, dict) else None
        if not isinstance(prompt, str):
            source = "tokenize (message contents, no chat template)"
            prompt = "\n".join(str(m.get("content") or "") for m in messages)
        tin = await _post(session, ep, "/tokenize", {"content": prompt})
        tout = await _post(session, ep, "/tokenize", {"content": output})
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    if not (isinstance(tin, dict) and isinstance(tout, dict) and isinstance(tin.get("tokens"), list)
            and isinstance(tout.get("tokens"), list)):
        return None
    return ChatTokens(len(tin["tokens"]), len(tout["tokens"]), source)


async def count_text_tokens(session: aiohttp.ClientSession, ep: Endpoint, text: str) -> int | None:
    """Tokens of ``text`` by the endpoint's tokenizer: llama.cpp / simulator ``POST /tokenize {"content"}``,
    else vLLM / SGLang ``{"model", "prompt"}``; None when the endpoint offers neither."""
    for body in ({"content": text}, {"model": ep.model, "prompt": text}):
        try:
            obj = await _post(session, ep, "/tokenize", body)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        if isinstance(obj, dict):
            if isinstance(obj.get("count"), int):
                return obj["count"]
            if isinstance(obj.get("tokens"), list):
                return len(obj["tokens"])
    return None
