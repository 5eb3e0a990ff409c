"""Each arm's kept-alive connection pool and the senders every call of a run goes through.

An arm's turns, probes, sentinels and warm-up calls share one pool (:func:`~.connections.client_session`),
opened at its first call and closed when its engine is about to stop (engines one at a time: the next block's
engine listens elsewhere) or when the work ends; a load stage opens its own pool per arm
(:mod:`.load_run`).  Every call goes out through an :class:`~.send.ArmSender` made here with the run's
:class:`SendSettings`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import AsyncIterator, Mapping

import aiohttp

from .client import Timeouts, client_session
from .endpoint import ArmEndpoint
from .recorder import Recorder
from .send import ArmSender


@dataclass(frozen=True)
class SendSettings:
    """How the run sends each call: its timeouts, how often a failed call is tried again, whether the prompts'
    and answers' text is kept in the ledger."""

    timeouts: Timeouts
    retries: int
    keep_text: bool


class ArmPools:
    """The arms' connection pools, and a :class:`~.send.ArmSender` of an arm's calls on demand (module
    docstring); the senders hand their records to *recorder*."""

    def __init__(self, recorder: Recorder, endpoints: Mapping[str, ArmEndpoint], settings: SendSettings):
        self.recorder, self.endpoints, self.settings = recorder, endpoints, settings
        self._pools: dict[str, aiohttp.ClientSession] = {}

    def pool(self, arm: str) -> aiohttp.ClientSession:
        """The arm's kept-alive connection pool (opened now if it has none)."""
        if arm not in self._pools:
            self._pools[arm] = client_session()
        return self._pools[arm]

    def sender(self, arm: str, session: aiohttp.ClientSession | None = None) -> ArmSender:
        """The sender of *arm*'s calls through *session* (default: the arm's pool)."""
        s = self.settings
        return ArmSender(self.recorder, session if session is not None else self.pool(arm), self.endpoints[arm],
                         timeouts=s.timeouts, retries=s.retries, keep_text=s.keep_text)

    async def close(self, arm: str) -> None:
        """Close *arm*'s pool (its engine is about to stop); its next call opens another."""
        pool = self._pools.pop(arm, None)
        if pool is not None:
            await pool.close()

    @contextlib.asynccontextmanager
    async def closing(self) -> AsyncIterator[None]:
        """Close every pool when the work ends, however it ends."""
        try:
            yield
        finally:
            for pool in self._pools.values():
                await pool.close()
            self._pools.clear()
