"""The cache state each turn meets, as the experiment file declares it (``[experiment] cache_between_turns`` and
``cache_reset``; what they do: :mod:`leverbench.runner.cache_state`).

- ``cache_between_turns``: ``"cold"`` (the default: nothing of earlier turns cached), ``"shared"`` (cold, then the
  prefix every turn of the case shares warmed), ``"keep"`` (whatever the earlier turns left: for traffic that
  really resends its turns).
- ``cache_reset``: how an arm is brought to that state before each turn: ``"auto"`` (the default: the engine's
  reset endpoint, else a salt, else a restart where it is needed), ``"endpoint"``, ``"salt"``, ``"restart"`` (every
  arm's engine, which the tool must start), ``"none"`` (the repeats revisit; each comparison is headed by its
  first-visit figure).
"""

from __future__ import annotations

from typing import Literal, Protocol, Sequence

from ..errors import ConfigError

CacheBetweenTurns = Literal["cold", "shared", "keep"]
CacheReset = Literal["auto", "endpoint", "salt", "restart", "none"]


class _Arm(Protocol):
    """What :func:`check_restart` reads of an arm (read-only: an arm's engine is any engine's spec)."""

    @property
    def name(self) -> str: ...

    @property
    def engine(self) -> object | None: ...


def cache_problem(state: str, reset: str) -> str | None:
    """What is wrong with the pair of settings (None: nothing)."""
    if state == "keep" and reset != "auto":
        return (f'cache_reset = "{reset}" brings each turn to a state, and cache_between_turns = "keep" asks for '
                'none: drop cache_reset, or ask for "cold" or "shared"')
    return None


def check_restart(file: str, reset: str, arms: Sequence[_Arm]) -> None:
    """``"restart"`` needs every arm's engine to be one the tool starts: ConfigError naming the first that is not."""
    if reset != "restart":
        return
    for i, arm in enumerate(arms):
        if arm.engine is None:
            raise ConfigError(file, "experiment.cache_reset",
                              f'"restart" restarts each arm\'s engine before every turn, and arm {arm.name!r} '
                              f"(arms[{i}]) has an endpoint of its own (base_url) that the tool does not start: "
                              'use "auto", "endpoint" or "salt"')
