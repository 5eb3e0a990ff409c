"""Whether a call's tool schemas reached the model: what the engine says of its chat template, and what the
template renders.

An engine whose chat template cannot render tools drops them without a word: llama.cpp with SmolLM2's template
(``/props`` ``chat_template_caps.supports_tools: false``) renders the same prompt with and without the schemas
(measured: 22 tokens both ways for a system prompt, a question and one tool) and answers 200; the request's
``tools`` then describe a workload the model never saw.  So, once per arm and tool set, before the first call
that sends it (harness work: its seconds are the call's ``harness_s``, left out of every measurement; the
tokenizer endpoints do not touch the KV cache), :func:`check_tools` asks, in this order:

1. the engine's own word: llama.cpp's ``GET /props`` ``chat_template_caps.supports_tools`` — false: dropped;
2. the template's rendering, counted with and without the schemas on the call's own messages: llama.cpp's
   ``POST /apply-template`` then ``/tokenize``; vLLM's and SGLang's ``POST /tokenize {model, messages, tools}``.
   The same count both ways: dropped; more with them: reached;
3. neither answers (a hosted API, a proxy): not known (``reached`` None), said as such.

The answer goes on every call that sent tools (``tools_reached``: "yes", "no", "not known"), its words on the
arm's first (``tools_check``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Required, TypedDict

import aiohttp

from ..ledger.records import ToolsReached
from .discover import api_root
from .tokens import TIMEOUT, Endpoint

if TYPE_CHECKING:
    from ..json_types import JSONObject
    from ..workload.chat import ChatMessage


class TemplateBody(TypedDict, total=False):
    """What a template is asked to render: the call's messages, its tool schemas (left out: counted without
    them), and for vLLM's and SGLang's ``/tokenize`` the model."""

    model: str
    messages: Required[list[ChatMessage]]
    tools: list[JSONObject]


@dataclass(frozen=True)
class ToolsCheck:
    """What :func:`check_tools` found: ``reached`` True / False / None (not known), ``how`` in words, and the
    prompt's tokens as the template renders it with and without the schemas (None: not counted)."""

    reached: bool | None
    how: str
    with_tools: int | None = None
    without_tools: int | None = None

    @property
    def said(self) -> ToolsReached:
        """``reached`` as the ledger writes it (``CallRecord.tools_reached``)."""
        return "not known" if self.reached is None else "yes" if self.reached else "no"


def tools_key(tools: list[JSONObject]) -> str:
    """The tool set's identity (its canonical JSON's hash): one check per arm and tool set."""
    return hashlib.sha256(json.dumps(tools, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()[:16]


async def _json(session: aiohttp.ClientSession, method: str, url: str, ep: Endpoint,
                payload: TemplateBody | JSONObject | None = None) -> Any:
    """The JSON answer, or None (a status other than 200, no JSON, no answer)."""
    try:
        async with session.request(method, url, json=payload, headers=ep.headers, timeout=TIMEOUT) as resp:
            return await resp.json(content_type=None) if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def _template_tokens(session: aiohttp.ClientSession, ep: Endpoint, messages: list[ChatMessage],
                           tools: list[JSONObject] | None) -> int | None:
    """The prompt's tokens as the engine's chat template renders it (with *tools*, or without when None)."""
    root = api_root(ep.base_url)
    body: TemplateBody = {"messages": messages}
    if tools:
        body["tools"] = tools
    rendered = await _json(session, "POST", root + "/apply-template", ep, body)  # llama.cpp
    if isinstance(rendered, dict) and isinstance(rendered.get("prompt"), str):
        counted = await _json(session, "POST", root + "/tokenize", ep, {"content": rendered["prompt"]})
        tokens = counted.get("tokens") if isinstance(counted, dict) else None
        return len(tokens) if isinstance(tokens, list) else None
    counted = await _json(session, "POST", root + "/tokenize", ep, {"model": ep.model, **body})  # vLLM, SGLang
    if isinstance(counted, dict):
        if isinstance(counted.get("count"), int):
            return counted["count"]
        if isinstance(counted.get("tokens"), list):
            return len(counted["tokens"])
    return None


async def check_tools(session: aiohttp.ClientSession, ep: Endpoint, messages: list[ChatMessage],
                      tools: list[JSONObject]) -> ToolsCheck:
    """Whether *tools* sent with *messages* reach the model on *ep* (see the module's docstring)."""
    props = await _json(session, "GET", api_root(ep.base_url) + "/props", ep)
    caps = props.get("chat_template_caps") if isinstance(props, dict) else None
    declared = caps.get("supports_tools") if isinstance(caps, dict) else None
    with_tools = await _template_tokens(session, ep, messages, tools)
    without = await _template_tokens(session, ep, messages, None) if with_tools is not None else None
    counts = (f"; the chat template renders {with_tools} prompt tokens with the schemas, {without} without"
              if with_tools is not None and without is not None else "")
    if declared is False:
        return ToolsCheck(False, "dropped: the engine's chat template does not support tools (/props "
                          "chat_template_caps.supports_tools: false)" + counts, with_tools, without)
    if with_tools is not None and without is not None:
        if with_tools > without:
            return ToolsCheck(True, "reached: " + counts.removeprefix("; "), with_tools, without)
        return ToolsCheck(False, "dropped: " + counts.removeprefix("; "), with_tools, without)
    if declared is True:
        return ToolsCheck(True, "reached: the engine's chat template supports tools (/props "
                          "chat_template_caps.supports_tools: true)")
    return ToolsCheck(None, "not known: the endpoint says nothing of its chat template and renders no prompt "
                      "(/props, /apply-template, /tokenize)")


class ToolsChecks:
    """An arm's checks, one per tool set (:func:`tools_key`), each run once however many calls wait for it."""

    def __init__(self) -> None:
        self._done: dict[str, asyncio.Future[ToolsCheck]] = {}

    async def get(self, session: aiohttp.ClientSession, ep: Endpoint, messages: list[ChatMessage],
                  tools: list[JSONObject]) -> tuple[ToolsCheck, bool]:
        """The check of *tools* on this arm, and whether this call ran it (the first to ask)."""
        key = tools_key(tools)
        while key in self._done:  # another call asks (or asked): its answer, unless it was cut off before it had one
            shared = self._done[key]
            try:
                return await asyncio.shield(shared), False
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not shared.cancelled() or (task is not None and task.cancelling()):
                    raise  # this call was cancelled, not only the one that asked
        fut: asyncio.Future[ToolsCheck] = asyncio.get_running_loop().create_future()
        self._done[key] = fut
        try:
            fut.set_result(await check_tools(session, ep, messages, tools))
        except BaseException:
            del self._done[key]  # cut off (cancelled): the calls waiting for it, and the next, ask again
            fut.cancel()
            raise
        return fut.result(), True
