"""The simulator's settings: :class:`SimConfig` (speeds, cache, drafter, dialect, faults, defined in
:mod:`leverbench.engines.sim_config`), the fault names, and the tokens a decode step emits."""

from __future__ import annotations

from ..sim_config import SimConfig  # the one definition; there the CLI reads it without the server's imports

FAULT_NAMES = ("http_500", "http_429", "cut_stream", "stall", "malformed", "no_usage")


def tokens_per_step(cfg: SimConfig) -> int:
    """Tokens one decode step emits: 1, plus the accepted drafts when a drafter is set."""
    return 1 + round(cfg.draft_k * cfg.draft_acceptance) if cfg.draft_k else 1
