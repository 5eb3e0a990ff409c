"""The simulator's settings: :class:`SimConfig` (speeds, cache, drafter, dialect, faults, defined in
:mod:`leverbench.engines.sim_config`), the fault names, and the tokens a decode step emits."""

from __future__ import annotations

from ..sim_config import SimConfig  # the one definition; there the CLI reads it without the server's imports
from .drafter import round_tokens_per_step

FAULT_NAMES = ("http_500", "http_429", "cut_stream", "stall", "malformed", "no_usage")


def tokens_per_step(cfg: SimConfig, acceptance: float | None = None) -> int:
    """Tokens one decode step emits in the ``round`` drafter model (:mod:`.drafter`): 1, plus the accepted drafts
    when a drafter is set, at ``acceptance`` (default ``cfg.draft_acceptance``; a request the drafter's memory
    helps gets more: :meth:`.state.SimState.drafter_acceptance`)."""
    return round_tokens_per_step(cfg.draft_k, cfg.draft_acceptance if acceptance is None else acceptance)
