"""The probes' prompt at a context depth (``[probes] depths``, as llama-bench's ``-d``).

A probe sends its case's first messages: the system prompt, then one user message made of the case's
documents followed by its prompt.  At a depth of D tokens the documents are cut (their end) or, to go
beyond them, repeated and then cut, so that the whole prompt (chat template included) is about D tokens
on the arm's own tokenizer; the case's prompt stays at the end.  The length is found by measuring
(:func:`~leverbench.runner.tokens.count_chat_tokens`: llama.cpp ``/apply-template`` and ``/tokenize``;
harness time, before the probe is sent): the tokens per character of the documents from two
measurements, then up to :data:`ROUNDS` corrections until within max(:data:`CLOSE_TOKENS`, 1 %) of D.
Without a tokenizer on the endpoint, :data:`CHARS_PER_TOKEN` estimates it.  The probe's record carries
the depth asked (``probe_depth``) and the prompt tokens the server counted; analysis reads the latter.
A depth below the system prompt and the case's prompt alone gets those alone.
"""

from __future__ import annotations

from typing import Protocol

import aiohttp

from ..analysis.base.knobs import answers_naturally
from ..config import Case, LoadedExperiment
from ..json_types import JSONObject
from ..workload.cases import first_messages, first_user_text, system_text
from ..workload.chat import ChatMessage
from .tokens import Endpoint, count_chat_tokens

ROUNDS = 4
CLOSE_TOKENS = 2
CHARS_PER_TOKEN = 4.0


class ProbeEndpoint(Endpoint, Protocol):
    """What :func:`probe_messages` reads of the runner's ``ArmEndpoint``."""

    depth_prompts: dict[tuple[str, int], list[ChatMessage]]  # (case, depth) → messages, measured once


def serves_with_drafter(conditions: JSONObject, discovered: JSONObject) -> bool:
    """Whether an arm serves with a lever whose speed depends on the text it decodes (a drafter:
    :func:`~leverbench.analysis.base.knobs.answers_naturally`): its declared condition, else the discovered knob
    (a probe on such an arm is not forced past end-of-sequence)."""
    found = discovered.get("knobs")
    return answers_naturally({**(found if isinstance(found, dict) else {}), **conditions})


async def probe_messages(session: aiohttp.ClientSession, ep: ProbeEndpoint, exp: LoadedExperiment, case: Case,
                         depth: int | None) -> list[ChatMessage]:
    """A probe's messages: the case's first messages, or at *depth* tokens (:func:`depth_messages`, kept in
    ``ep.depth_prompts``)."""
    if depth is None:
        return first_messages(exp, case)
    if (case.name, depth) not in ep.depth_prompts:
        ep.depth_prompts[(case.name, depth)] = await depth_messages(session, ep, exp, case, depth)
    return ep.depth_prompts[(case.name, depth)]


def documents_text(exp: LoadedExperiment, case: Case) -> str:
    """The part of the case's first user message before its prompt (its documents and their separators)."""
    full = first_user_text(exp, case)
    return full[: len(full) - len(case.prompt)].rstrip()


def messages_with(exp: LoadedExperiment, case: Case, chars: int) -> list[ChatMessage]:
    """The case's first messages with its documents cut, or repeated and cut, to *chars* characters."""
    docs = documents_text(exp, case) or case.prompt
    text = (docs + "\n\n") * (chars // (len(docs) + 2) + 1)
    body = text[:max(0, chars)].rstrip()
    user = f"{body}\n\n{case.prompt}" if body else case.prompt
    sys = system_text(exp, case)
    return ([{"role": "system", "content": sys}] if sys else []) + [{"role": "user", "content": user}]


async def depth_messages(session: aiohttp.ClientSession, ep: Endpoint, exp: LoadedExperiment, case: Case,
                         depth: int) -> list[ChatMessage]:
    """The probe's messages at *depth* prompt tokens (see the module docstring)."""
    async def tokens(chars: int) -> float | None:
        got = await count_chat_tokens(session, ep, messages_with(exp, case, chars), "")
        return float(got.prompt_tokens) if got is not None else None

    span = max(1, len(documents_text(exp, case) or case.prompt))
    bare, whole = await tokens(0), await tokens(span)
    if bare is None or whole is None or whole <= bare:  # no tokenizer: estimate
        return messages_with(exp, case, int((depth - len(case.prompt) / CHARS_PER_TOKEN) * CHARS_PER_TOKEN))
    per_char = (whole - bare) / span
    chars = round((depth - bare) / per_char)
    for _ in range(ROUNDS):
        if chars <= 0:
            return messages_with(exp, case, 0)
        got = await tokens(chars)
        if got is None or abs(got - depth) <= max(CLOSE_TOKENS, 0.01 * depth):
            break
        chars = round(chars + (depth - got) / per_char)
    return messages_with(exp, case, chars)
