"""An arm's cache reset, and the check that it takes (:mod:`.cache_state` says when each is used).

The reset (:func:`reset_endpoint`): an engine the tool started resets its own cache
(:meth:`leverbench.engines.Engine.reset_cache`); an endpoint of the user's own is reset through the endpoint of
the engine discovery names (:mod:`leverbench.engines.reset`: llama.cpp's slot erase, vLLM's
``POST /reset_prefix_cache``, SGLang's ``POST /flush_cache``).

**The check** (:func:`check_reset`): a prompt no turn sends (``CHECK_WORDS`` words) is sent twice, the arm reset,
and sent a third time, one token each; the cached tokens of the second and third sends (the answer's
``usage.prompt_tokens_details.cached_tokens`` or llama.cpp's ``timings.cache_n``, else the growth of vLLM's
``vllm:prefix_cache_hits_total``): "took" when the third found at most ``CHECK_LEFT`` of what the second found,
"did not take" when it found more (or the reset itself failed), "unverified" when the second found nothing
cached (the arm caches nothing of it), "not reported" when its answers and counters say nothing of what was
cached, "failed" when a send failed.  Its calls are in the ledger (kind ``warmup``, position ``check``, case
``(reset check)``), and their counts in the arm's ``cache_reset`` record.
"""

from __future__ import annotations

from typing import Awaitable, Callable

import aiohttp

from ..engines.reset import ENDPOINTS, reset_through
from ..ledger.records import CallRecord
from ..workload.chat import ChatMessage
from .discover import api_root, scrape_metrics
from .endpoint import ArmEndpoint

CHECK_WORDS = 160  # the check prompt's words (a few hundred tokens: whole blocks of any engine's cache)
CHECK_LEFT = 0.25  # the check: a reset took when the third send found at most this share of what the second found


def engine_of(ep: ArmEndpoint) -> str | None:
    """The engine an arm's endpoint runs, as discovery named it (llama.cpp, vllm, sglang; None: not known)."""
    knobs = ep.discovered.get("knobs")
    engine = knobs.get("engine") if isinstance(knobs, dict) else None
    return engine if isinstance(engine, str) and engine in ENDPOINTS else None


async def reset_endpoint(session: aiohttp.ClientSession, ep: ArmEndpoint) -> str | None:
    """Reset the arm's cache (module docstring); None when it answered success, else what went wrong, in words."""
    root = api_root(ep.base_url)
    headers = ep.headers_for(root)
    if ep.engine is not None:
        return await ep.engine.reset_cache(session, headers)
    knobs = ep.discovered.get("knobs")
    n = knobs.get("slots") if isinstance(knobs, dict) else None
    return await reset_through(engine_of(ep), session, root, headers, n if isinstance(n, int) else 1)


# ---------------------------------------------------------------- the check


def check_prompt(arm: str) -> list[ChatMessage]:
    """The check's prompt: no turn sends it (its words are numbered), one arm's differs from another's."""
    words = " ".join(f"item{i}" for i in range(CHECK_WORDS))
    return [{"role": "user", "content": f"[reset check {arm}] Repeat this list: {words}"}]


def cached_of(rec: CallRecord) -> int | None:
    """Cached prompt tokens a call's answer reported (usage's prompt_tokens_details, else llama.cpp's
    timings.cache_n)."""
    if rec.cached_tokens is not None:
        return int(rec.cached_tokens)
    n = (rec.timings or {}).get("cache_n")
    return int(n) if isinstance(n, (int, float)) else None


HITS = "vllm:prefix_cache_hits_total"


async def _hits(session: aiohttp.ClientSession, ep: ArmEndpoint) -> float | None:
    url = ep.arm.metrics_url or (api_root(ep.base_url) + "/metrics")
    samples = await scrape_metrics(session, url, ep.headers_for(url))
    v = (samples or {}).get(HITS)
    return float(v) if isinstance(v, (int, float)) else None


#: One send of the check's prompt (its index 0, 1, 2), recorded in the ledger: its record.
Send = Callable[[list[ChatMessage], int], Awaitable[CallRecord]]


async def _send_check(session: aiohttp.ClientSession, ep: ArmEndpoint, send: Send, messages: list[ChatMessage],
                      k: int) -> tuple[int | None, int | None]:
    """One send of the check prompt: (cached tokens, prompt tokens) as its answer (else vLLM's counter) says."""
    before = await _hits(session, ep) if engine_of(ep) == "vllm" else None
    rec = await send(messages, k)
    if rec.error is not None:
        raise CheckFailed(f"{rec.error.cls}: {rec.error.message}")
    cached = cached_of(rec)
    if cached is None and before is not None:
        after = await _hits(session, ep)
        cached = int(after - before) if after is not None else None
    return cached, rec.prompt_tokens


class CheckFailed(Exception):
    """A call of the check failed (its record says how)."""


async def check_reset(session: aiohttp.ClientSession, ep: ArmEndpoint, arm: str, send: Send,
                      reset: Callable[[], Awaitable[str | None]]) -> tuple[str, int | None, int | None, int | None]:
    """(verdict, cached before the reset, cached after it, the prompt's tokens) of the arm's reset (module
    docstring); *send* sends the check's prompt (recorded); *reset* resets the arm (None: done, else why it
    failed: verdict "did not take")."""
    messages = check_prompt(arm)
    try:
        await _send_check(session, ep, send, messages, 0)
        before, tokens = await _send_check(session, ep, send, messages, 1)
        failed = await reset()
        after, _ = await _send_check(session, ep, send, messages, 2)
    except (CheckFailed, aiohttp.ClientError, TimeoutError, ValueError):
        return "failed", None, None, None
    if failed is not None:
        return "did not take", before, after, tokens
    if before is None:
        return "not reported", before, after, tokens
    if not before:
        return "unverified", before, after, tokens
    took = after is not None and after <= CHECK_LEFT * before
    return ("took" if took else "did not take"), before, after, tokens
