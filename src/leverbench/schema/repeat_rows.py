"""The summary's ``repeats`` section: whether a run's repeats were exchangeable samples of one experiment
(:mod:`leverbench.analysis.experiment.revisits`)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le, Predicate
from typing_extensions import TypeAlias, TypedDict

from . import strict_row

Count: TypeAlias = Annotated[int, Ge(0)]
NonNegative: TypeAlias = Annotated[float, Ge(0.0), Predicate(math.isfinite)]
Share: TypeAlias = Annotated[float, Ge(0.0), Le(1.0)]
Positive: TypeAlias = Annotated[float, Gt(0.0), Predicate(math.isfinite)]
Method: TypeAlias = Literal["reset", "salt", "restart", "restart+salt", "none", "keep"]


@strict_row
class RepeatArmRow(TypedDict):
    """``repeats.arms[]``: how one arm was brought to the declared state before each turn (its ``cache_reset``
    record; all None in a run before ledger v5), what the check before its turns found, and what its turns' own
    counts say: the share of its later repeats' prompt tokens its own earlier repeats had cached
    (``revisit_share`` = ``extra_cached`` / ``later_prompt_tokens``), and its drafted tokens accepted per output
    token on first visits and on later repeats."""

    arm: str
    method: Method | None
    why: str | None
    endpoint: str | None
    check: Literal["took", "did not take", "unverified", "not reported", "failed"] | None
    cached_before: Count | None
    cached_after: Count | None
    failed_turns: Count  # turns whose arm could not be brought to the state (a reset or warm call that failed)
    revisit_share: NonNegative | None
    extra_cached: NonNegative | None
    later_prompt_tokens: NonNegative | None
    draft_first: NonNegative | None
    draft_later: NonNegative | None


@strict_row
class RepeatPairRow(TypedDict):
    """``repeats.pairs[]``: a comparison one of whose arms revisited, or was meant to be brought to a state and
    was not: its first-visit figure (each case's first turn on each arm, one a side, no interval) and, where its
    repeats were not exchangeable, why (the guard refuses it: reason code ``revisits``)."""

    arm: str
    vs: str
    first_visit: Positive | None
    refused: str | None


@strict_row
class RepeatsSection(TypedDict):
    """``repeats``: the declared state (``cache_between_turns``; None: a run before ledger v5, which declared
    none), each arm's row, the pairs that revisited."""

    state: Literal["cold", "shared", "keep"] | None
    arms: list[RepeatArmRow]
    pairs: list[RepeatPairRow]
