"""The client's timestamps and connections under load (issue 25, part 0): a load stage's sends are not held
up by a full collection of the process's heap; the pool allows the concurrency asked for."""

from __future__ import annotations

import asyncio
import gc

import pytest

from leverbench.runner.client import client_session
from leverbench.runner.load import heap_frozen


def test_a_load_stage_sends_with_the_heap_frozen():
    before = gc.get_freeze_count()
    junk = [[i] for i in range(1000)]  # objects that exist before the stage: frozen with the rest
    with heap_frozen():
        assert gc.get_freeze_count() >= before + len(junk)
    assert gc.get_freeze_count() == before  # unfrozen when the stage ends


@pytest.mark.parametrize("keep_alive", [True, False])
def test_the_pool_allows_the_concurrency_asked_for(keep_alive):
    """aiohttp's connector holds 100 connections by default (and queues the 101st call until one frees):
    a stage at concurrency 128 would send 28 of its calls late, their wait hidden before t_send."""
    async def limits() -> tuple[int, int]:
        async with client_session(keep_alive=keep_alive) as session:
            return session.connector.limit, session.connector.limit_per_host

    assert asyncio.run(limits()) == (0, 0)  # 0: no limit
