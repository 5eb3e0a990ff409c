"""Run the experiment's load stages (issue 5).  Placeholder until the load runner lands."""

from __future__ import annotations

from typing import Any


async def run_load(runner: Any, session: Any) -> None:
    """Execute ``runner.spec.load`` stages; every call is appended to the ledger by ``runner``."""
    if runner.spec.load:
        raise NotImplementedError("load stages are not implemented yet")
