"""The summary's ``recorded`` section: how recorded turns were replayed, and whether each arm received the work
the recording holds (built by :mod:`leverbench.analysis.experiment.fidelity`; present only in a run that
replayed recorded turns: ``[[cases]] from``)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from annotated_types import Ge, Predicate
from typing_extensions import TypeAlias, TypedDict

from . import strict_row

Count: TypeAlias = Annotated[int, Ge(0)]
Deviation: TypeAlias = Annotated[float, Ge(-1.0), Predicate(math.isfinite)]  # prompt tokens / recorded − 1


@strict_row
class RecordedCaseRow(TypedDict):
    """A case that replays a recorded turn: the case of recorded turns it came from, the turn and the mode."""

    case: str
    recorded_from: str
    turn: str | None
    mode: Literal["recorded", "live"]


@strict_row
class DifferingCall(TypedDict):
    """A replayed call whose prompt length differs from the recording's beyond the tolerance (or that could not
    be compared), and why."""

    case: str
    repeat: Count
    step: Count
    recorded_tokens: Count | None
    prompt_tokens: Count | None
    deviation: Deviation | None
    reason: str


@strict_row
class RecordedArmRow(TypedDict):
    """One arm's replay: its calls of recorded turns, those with a prompt length on both sides (``compared``),
    those within the tolerance, the largest deviation either way, the calls not compared because the recording
    has no usage for them (``no_recorded_usage``) or because they failed, the calls whose request left the
    recording (a live path's departures; not compared), the differing calls (the first :data:`MAX_LISTED`) and,
    where every differing call differs alike, why (``reason``)."""

    arm: str
    calls: Count
    compared: Count
    within: Count
    max_deviation: Deviation | None
    no_recorded_usage: Count
    failed_calls: Count
    departed_calls: Count
    differing_calls: Count
    differing: list[DifferingCall]
    reason: str | None


@strict_row
class DepartureRow(TypedDict):
    """Where a live replay's path departed from the recording: the call and what it did instead."""

    arm: str
    case: str
    repeat: Count
    step: Count
    text: str


@strict_row
class RecordedSection(TypedDict):
    """``recorded``: the replayed cases and their modes, each arm's prompt lengths against the recording's
    (within ``tolerance``), whether the arms received identical requests (``requests_compared`` calls of the same
    case, repeat and step on two arms or more, ``requests_identical`` of them with the same messages on every
    arm), where live replays departed (the first :data:`MAX_LISTED` per arm) and, per request log, the lines its
    import left out (``left_out``: none, an empty list)."""

    tolerance: Annotated[float, Ge(0.0), Predicate(math.isfinite)]  # (not bare: see experiment_rows.RatioBound)
    cases: list[RecordedCaseRow]
    arms: list[RecordedArmRow]
    requests_compared: Count
    requests_identical: Count
    departures: list[DepartureRow]
    left_out: list[str]


MAX_LISTED = 10  # differing calls and departures listed per arm
