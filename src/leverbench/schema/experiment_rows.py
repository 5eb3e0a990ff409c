"""The experiment's sections of the summary: the run, its arms, the levers' headline, the verdicts, the cells,
totals and multipliers, prompt discipline, reasoning, the tolerances and the warnings; built by
:mod:`leverbench.analysis.experiment` (cells, levers, verdicts, reasoning) and :mod:`leverbench.analysis.summary`
(run, arms, tolerances, warnings).  Engagement, drift, equal work and cost: :mod:`.check_rows`.

Every key a row can have is named; ``NotRequired`` where a builder adds it only sometimes, ``None`` where it
writes null.  Times, token counts and multipliers are finite and not negative; a verdict, its method, its
measure and a warning's kind are the words their builders write.  An arm's conditions, knobs and discovered
facts are the user's or the endpoint's JSON (any JSON object).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Literal

from annotated_types import Ge, Gt, Le, Predicate
from typing_extensions import NotRequired, TypeAlias, TypedDict

from ..bounds import MAX_TOLERANCE
from . import STRICT, row_config, strict_row
from .check_rows import CheckSections, Count, EqualWorkFigure, Finite, NonNegative, Order
from .recorded_rows import RecordedSection
from .repeat_rows import RepeatsSection
from .tools_rows import ToolsRow

Positive: TypeAlias = Annotated[float, Gt(0.0), Predicate(math.isfinite)]  # a ratio of two times


def _a_number(x: float) -> bool:
    return not math.isnan(x)


#: A ratio's interval end: 0 to inf, never NaN.  (Not a bare ``Annotated[float, Ge(0.0)]``: typing caches Annotated
#: by equality, so another library's ``Annotated[float, Ge(0)]`` met first — the openai SDK's — would stand for
#: it, and the JSON Schema would say ``"minimum": 0`` or ``0.0`` by import order.)
RatioBound: TypeAlias = Annotated[float, Ge(0.0), Predicate(_a_number)]
Tolerance: TypeAlias = Annotated[float, Ge(0.0), Le(MAX_TOLERANCE)]  # as the experiment file bounds it
Probability: TypeAlias = Annotated[float, Gt(0.0), Le(1.0)]
Verdict: TypeAlias = Literal["pays", "equivalent", "does not pay", "undecided", "open"]
Measure: TypeAlias = Literal["measured", "equal work"]
#: what a comparison's verdict stopped by (:mod:`leverbench.analysis.experiment.verdicts`)
StoppedBy: TypeAlias = Literal["decided", "max_repeats", "max_gpu_hours", "not finished"]

if TYPE_CHECKING:
    from ..json_types import JSONObject as AnyJSONObject
else:  # pydantic checks (and the JSON Schema says) any JSON object: a JSON-shaped value's own schema would be long
    AnyJSONObject = dict[str, object]


@row_config({**STRICT, "extra": "allow"})
class HostFigures(TypedDict):
    """The run's host as the ledger's header has it (``runner.discover.host_info``: its keys typed; any other
    key an earlier or later leverbench recorded, as the ledger's schema lets it, passes)."""

    hostname: NotRequired[str]
    os: NotRequired[str]
    cpu: NotRequired[str]
    cores: NotRequired[int | None]
    python: NotRequired[str]


@strict_row
class RunRow(TypedDict):
    """``run``: the run's identity, its design and how many calls it made (failed: not retried)."""

    run_id: str | None
    name: str
    started_at: str | None
    tool_version: str | None
    host: HostFigures | None
    order: Order | None
    repeats: Count | None
    concurrency: Annotated[int, Ge(1)]  # requests in flight on an arm while each turn ran ([experiment] in_flight)
    calls: Count
    failed_calls: Count
    companion_calls: NotRequired[Count]  # the calls sent beside the turns (in_flight > 1), not in calls (since v6)
    companion_failed: NotRequired[Count]
    resumed: Count


@strict_row
class ArmRow(TypedDict):
    """``arms[]``: an arm's name and role, its declared conditions, its knobs (:mod:`...analysis.base.knobs`),
    what its endpoint answered (keys redacted) and its model."""

    name: str
    role: str | None
    conditions: AnyJSONObject
    knobs: AnyJSONObject
    discovered: AnyJSONObject
    model: str | None


@strict_row
class MeasuredFigure(TypedDict):
    """A lever row's measured multiplier, kept beside the figure the row cites."""

    value: Positive | None
    citable: bool
    reason: str | None


@strict_row
class LeverHeadlineRow(TypedDict):
    """``levers[]``: a lever and the controlled comparison that measures it
    (:func:`...analysis.experiment.levers.levers`); ``arm``/``vs`` None and ``reason`` the suggestion where no
    controlled comparison measures it."""

    lever: str
    arm: str | None
    vs: str | None
    multiplier: Positive | None
    citable: bool
    reason: str | None
    engaged: bool | None
    gpu_hours_returned_per_1000_turns: Finite | None
    measure: NotRequired[Measure]
    note: NotRequired[str | None]
    measured: NotRequired[MeasuredFigure]


@strict_row
class VerdictRow(TypedDict):
    """``verdicts[]``: one decided comparison (:func:`...analysis.experiment.verdicts.verdicts`)."""

    arm: str
    vs: str
    lever: str | None
    knobs: list[str]
    verdict: Verdict
    ratio: Positive | None
    low: RatioBound | None  # a ratio's bound: exp of a finite log, or 0 / inf at the extremes
    high: RatioBound | None
    confidence: Probability
    min_effect: Annotated[float, Ge(1.0), Predicate(math.isfinite)]
    method: Literal["confidence sequence", "fixed t-interval"]
    repeats: dict[str, Count]
    pairs: dict[str, Count]
    looks: Count
    stopped_by: StoppedBy | None
    gpu_hours: NonNegative
    fixed_design_repeats: Count | None
    fixed_design_gpu_hours: NonNegative | None
    fixed_design_power: Probability
    refused: str | None
    reason: str | None
    measure: Measure


@strict_row
class RoundRow(TypedDict):
    """A round of an adaptive run past its initial repeats: its repeat number, the comparisons it served and
    how many cells it ran."""

    repeat: Count
    comparisons: list[str]
    cells: Count


@strict_row
class AdaptiveBlock(TypedDict):
    """``adaptive`` (null for fixed repeats): the settings, the rounds past the initial repeats, what stopped
    the run and the GPU-hours it spent."""

    min_effect: Annotated[float, Ge(1.0), Predicate(math.isfinite)]
    confidence: Probability
    max_repeats: Count
    max_gpu_hours: NonNegative | None
    initial_repeats: Count
    rounds: list[RoundRow]
    stopped_by: StoppedBy | None
    gpu_hours: NonNegative


@strict_row
class CellRow(TypedDict):
    """``cells[]`` and ``variant_cells[]``: one (arm, case) (:func:`...analysis.experiment.cells.cells`); the
    medians over its successful turns, ``median_without_retries_s`` where attempts were retried."""

    arm: str
    case: str
    n: Count
    attempted: Count
    failed_turns: Count
    failed_calls: Count
    companion_failed: NotRequired[Count]  # its turns' companions' failed calls (in_flight > 1): refused (since v6)
    retried_calls: Count
    calls: Count
    median_s: NonNegative | None
    min_s: NonNegative | None
    max_s: NonNegative | None
    output_tokens_median: NonNegative | None
    input_tokens_median: NonNegative | None
    reasoning_tokens_median: NonNegative | None
    tool_s_median: NonNegative | None
    empty_answers: Count
    step_limited: Count
    times_s: list[NonNegative]
    median_without_retries_s: NotRequired[Finite | None]
    overlaps_baseline: bool | None


@strict_row
class TotalRow(TypedDict):
    """``totals[]``: an arm's total (Σ of its cell medians) where every case has a successful cell."""

    arm: str
    total_s: NonNegative | None
    output_tokens: NonNegative | None
    cases: Count
    complete: bool


@strict_row
class MultiplierRow(TypedDict):
    """``multipliers[]``: one comparison on one case or its total (:func:`...analysis.experiment.cells.multipliers`,
    the guard's judgement :class:`...analysis.base.guard.Judgement`) and, where its volume is refused, its
    figure at equal work."""

    arm: str
    vs: str
    scope: str
    value: Positive | None
    citable: bool
    reason: str | None
    reason_codes: list[str]
    volume_spread: NonNegative | None
    controlled: bool
    knobs: list[str]
    lever: str | None
    unknown_knobs: list[str]
    equal_work: EqualWorkFigure | None


@strict_row
class PromptDisciplineRow(TypedDict):
    """``prompt_discipline[]``: a case variant against its case on one arm (never a multiplier)."""

    arm: str
    case: str
    variant: str
    case_s: NonNegative
    variant_s: NonNegative
    saved_s: Finite
    saved_share: Finite
    output_tokens: NonNegative | None
    variant_output_tokens: NonNegative | None
    volume_spread: NonNegative | None
    kind: str


@strict_row
class ReasoningRow(TypedDict):
    """``reasoning[]``: one cell's generated tokens split into reasoning and answer
    (:func:`...analysis.experiment.reasoning.reasoning_split`)."""

    arm: str
    case: str | None
    calls: Count
    generated_tokens: Count
    reasoning_tokens: Count
    answer_tokens: int  # generated − reasoning: an estimate may exceed what usage counted
    reasoning_share: NonNegative | None
    source: Literal["usage", "estimated from chunks"]
    reasoning_chars: Count
    answer_chars: Count
    ttft_median_s: NonNegative | None
    first_answer_median_s: NonNegative | None
    empty_answers: Count


@strict_row
class Tolerances(TypedDict):
    """``tolerances``: the guard's volume tolerances, the probes' agreement and drift's, as the run used them."""

    volume_cell: Tolerance | None
    volume_total: Tolerance | None
    probe_agreement: Tolerance | None
    drift: Tolerance | None


@strict_row
class WarningItem(TypedDict):
    """``warning_items[]``: one warning, its kind (:class:`.warning_kinds.WarningKind`), the arm
    and case it concerns (None: the run, or no one cell) and its text."""

    kind: str
    arm: str | None
    case: str | None
    text: str


@strict_row
class ExperimentSections(CheckSections):
    """The summary's sections about the experiment's comparisons; engagement, drift, equal work and cost:
    :class:`.check_rows.CheckSections`."""

    schema: str
    run: RunRow
    baseline: str
    arms: list[ArmRow]
    levers: list[LeverHeadlineRow]
    verdicts: list[VerdictRow]
    adaptive: AdaptiveBlock | None
    cases: list[str]
    cells: list[CellRow]
    totals: list[TotalRow]
    multipliers: list[MultiplierRow]
    variant_cells: list[CellRow]
    prompt_discipline: list[PromptDisciplineRow]
    reasoning: list[ReasoningRow]
    repeats: NotRequired[RepeatsSection]  # a summary written before issue 38 lacks it
    tools: NotRequired[list[ToolsRow]]  # a summary written before issue 42 lacks it
    tolerances: Tolerances
    warnings: list[str]
    warning_items: list[WarningItem]
    recorded: NotRequired[RecordedSection]  # only a run that replayed recorded turns
