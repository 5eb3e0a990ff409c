"""The summary's ``engaged`` section: per arm, whether it used each lever and whether it engaged the levers its
knobs turn on (``analysis/experiment/engaged.py``; the levers are :mod:`leverbench.levers`)."""

from __future__ import annotations

from typing import Optional

from typing_extensions import NotRequired, TypedDict

from . import strict_row


@strict_row
class LeverUse(TypedDict):
    """A judged lever's use on an arm whose knobs turn it on (a lever whose module holds a ``judge``): whether
    it was used (None: nothing says; never read as "not used") and from what."""

    used: Optional[bool]
    source: Optional[str]


@strict_row
class EngagedRow(TypedDict):
    """One arm's engagement: its cached-token and drafter figures with their sources, whether it used the
    prefix cache and the drafter (``cache_used``, ``drafter_used``: measured on every arm), whether it engaged
    the ones its knobs turn on (``prefix_cache``, ``drafter``: None where its knobs do not, or nothing says),
    and every other lever its knobs turn on whose module judges it (``levers``: only when there is one)."""

    arm: str
    prompt_tokens: int
    cached_tokens: Optional[int]
    cached_share: Optional[float]
    cached_share_source: Optional[str]
    draft_tokens: Optional[int]
    accepted_tokens: Optional[int]
    acceptance: Optional[float]
    acceptance_source: Optional[str]
    accept_length: NotRequired[float]  # SGLang's mean accept length, where it is the only drafter figure
    prefix_cache: Optional[bool]
    drafter: Optional[bool]
    cache_used: Optional[bool]
    drafter_used: Optional[bool]
    levers: NotRequired[dict[str, LeverUse]]
