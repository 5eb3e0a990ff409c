"""How each engine's server empties its cache through its own endpoint (by the dialect it speaks):

- llama.cpp: ``POST /slots/{id}?action=erase`` for every slot ``GET /slots`` lists (where it lists none, every
  slot of the ``total_slots`` its ``GET /props`` reports);
- vLLM: ``POST /reset_prefix_cache`` (its development mode only: ``VLLM_SERVER_DEV_MODE=1``);
- SGLang: ``POST /flush_cache`` (400 while requests run: tried again for ``FLUSH_WAIT_S``).

An engine the tool starts resets through the one its server speaks (:meth:`.interface.Engine.reset_cache`); an
endpoint of the user's own through the one discovery names (:func:`leverbench.runner.cache_reset.reset_endpoint`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Mapping

import aiohttp

FLUSH_WAIT_S = 10.0  # SGLang refuses a flush while requests run (vLLM while they hold blocks): tried again this long
RESET_TIMEOUT_S = 30.0  # one reset request

ENDPOINTS = {"llama.cpp": "POST /slots/{id}?action=erase", "vllm": "POST /reset_prefix_cache",
             "sglang": "POST /flush_cache"}


async def _post(session: aiohttp.ClientSession, url: str, headers: Mapping[str, str]) -> tuple[int, str]:
    async with session.post(url, headers=dict(headers), timeout=aiohttp.ClientTimeout(total=RESET_TIMEOUT_S)) as r:
        return r.status, (await r.text())[:300]


async def _get_json(session: aiohttp.ClientSession, url: str, headers: Mapping[str, str]) -> object:
    """The JSON a GET of *url* answered with 200, else None."""
    try:
        async with session.get(url, headers=dict(headers), timeout=aiohttp.ClientTimeout(total=RESET_TIMEOUT_S)) as r:
            return await r.json(content_type=None) if r.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def _slot_ids(session: aiohttp.ClientSession, root: str, headers: Mapping[str, str], slots: int) -> list[int]:
    """llama.cpp's slots: those ``GET /slots`` lists; where it does not list them (``--no-slots``), ids 0 to the
    ``total_slots`` its ``GET /props`` reports − 1, else to *slots* − 1 (what the caller knows: the slots discovery
    found, or those an engine was started with)."""
    listed = await _get_json(session, root + "/slots", headers)
    ids = [s["id"] for s in listed if isinstance(s, dict) and isinstance(s.get("id"), int)] \
        if isinstance(listed, list) else []
    if ids:
        return ids
    props = await _get_json(session, root + "/props", headers)
    total = props.get("total_slots") if isinstance(props, dict) else None
    reported = total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else None
    return list(range(reported or max(slots, 1)))


async def _erase_slots(session: aiohttp.ClientSession, root: str, headers: Mapping[str, str], slots: int) -> str | None:
    for slot in await _slot_ids(session, root, headers, slots):
        status, text = await _post(session, f"{root}/slots/{slot}?action=erase", headers)
        if status != 200:
            return f"POST /slots/{slot}?action=erase answered {status}: {text.strip()[:200]}"
    return None


async def _reset_prefix_cache(session: aiohttp.ClientSession, root: str, headers: Mapping[str, str]) -> str | None:
    deadline = time.monotonic() + FLUSH_WAIT_S
    while True:  # 200 {"success": false}: requests held blocks (older vLLM: 200, empty)
        status, text = await _post(session, root + "/reset_prefix_cache", headers)
        refused = status == 200 and '"success":false' in text.replace(" ", "")
        if status == 200 and not refused:
            return None
        if not refused or time.monotonic() > deadline:
            dev = " (vLLM serves it only with VLLM_SERVER_DEV_MODE=1 set)" if status == 404 else ""
            return f"POST /reset_prefix_cache answered {status}: {text.strip()[:200]}{dev}"
        await asyncio.sleep(0.2)


async def _flush_cache(session: aiohttp.ClientSession, root: str, headers: Mapping[str, str]) -> str | None:
    deadline = time.monotonic() + FLUSH_WAIT_S
    while True:
        status, text = await _post(session, root + "/flush_cache", headers)
        if status == 200:
            return None
        if status != 400 or time.monotonic() > deadline:
            return f"POST /flush_cache answered {status}: {text.strip()[:200]}"
        await asyncio.sleep(0.2)  # requests were running: SGLang flushes only an idle server


async def reset_through(dialect: str | None, session: aiohttp.ClientSession, root: str, headers: Mapping[str, str],
                        slots: int = 1) -> str | None:
    """Empty the cache of the server at *root* (its engine's own endpoints' base) through the endpoint of
    *dialect* (llama.cpp, vllm, sglang; module docstring), with *headers*; *slots*: llama.cpp's slots where
    ``GET /slots`` does not list them.  None when it answered success, else what went wrong, in words."""
    try:
        if dialect == "llama.cpp":
            return await _erase_slots(session, root, headers, slots)
        if dialect == "vllm":
            return await _reset_prefix_cache(session, root, headers)
        if dialect == "sglang":
            return await _flush_cache(session, root, headers)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"{ENDPOINTS.get(dialect or '', 'the reset')} failed: {type(exc).__name__}: {exc}"[:300]
    return "no reset endpoint is known for this endpoint's engine (not llama.cpp, vLLM or SGLang)"
