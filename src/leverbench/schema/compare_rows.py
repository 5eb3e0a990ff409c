"""What ``leverbench compare`` prints as JSON (schema ``leverbench.compare/2``): runs compared with a baseline run.

The rows :mod:`leverbench.analysis.compare` builds and :mod:`leverbench.report.compare` formats; ``leverbench schema
compare`` prints the JSON Schema pydantic derives from them (:func:`compare_json_schema`).  Ratios are the later run's
turn time over the baseline's: above 1 the later run is slower.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from typing_extensions import TypedDict

from . import strict_row

if TYPE_CHECKING:
    from ..json_types import JSONValue as AnyJSON
else:  # pydantic checks (and the JSON Schema says) any JSON value: a JSON-shaped value's own schema would be long
    AnyJSON = object

COMPARE_SCHEMA = "leverbench.compare/2"

#: A matched cell's or arm's verdict against the threshold t (:mod:`leverbench.analysis.compare.stats`).
Verdict = Literal["faster", "slower", "same", "undecided", "refused"]
#: A lever's verdict across runs: its multiplier in the later run against the baseline's.
LeverVerdict = Literal["pays more", "pays less", "same", "undecided", "refused"]


@strict_row
class RunInfo(TypedDict):
    """One run as the comparison names it."""

    path: str
    experiment_name: str
    run_id: str | None
    started_at: str | None
    tool_version: str | None
    schema: str
    arms: list[str]
    cases: list[str]
    warnings: list[str]  # what reading its ledger noted (a cut last line, lines salvaged past)


@strict_row
class ChangedRow(TypedDict):
    """A condition that differs between the baseline run and the later one: of the run (``scope`` "run": the tool's
    version, the ledger's schema, the experiment's settings), of the host (``scope`` "host") or of an arm (``scope``
    "arm": a knob of it, declared or discovered; ``arm`` the baseline's name of it)."""

    scope: Literal["run", "host", "arm"]
    arm: str | None
    what: str
    baseline: AnyJSON
    later: AnyJSON


@strict_row
class ArmMatch(TypedDict):
    """A baseline arm and the later run's arm it is compared with (``later`` None: none matched), and how."""

    arm: str
    later: str | None
    how: Literal["--match", "knobs", "name"] | None
    changed: list[str]  # the knobs that differ between the two


@strict_row
class CaseMatch(TypedDict):
    """A baseline case and the later run's case it is compared with, matched by what was sent; ``later`` None and
    ``reason`` where it is not compared (its prompts differ, or it is in one run only)."""

    case: str
    later: str | None
    how: Literal["prompt hash", "case definition"] | None
    compared: bool
    reason: str | None


@strict_row
class SpeedChange(TypedDict):
    """A speed ratio later / baseline of the drift sentinels (1 + change), with its interval; None: not measured."""

    change: float | None
    low: float | None
    high: float | None
    sentinels_baseline: int
    sentinels_later: int


@strict_row
class MachineRow(TypedDict):
    """The machine's speed between the runs, from the drift sentinels of the arms that changed in no condition
    (``reference``): measured, whether it changed (``detected``), whether the later run's turns were also put on the
    baseline's speed (``corrected``: the rows' ``corrected_*`` figures), whether the exit code follows those
    (``gated``: ``--correct-machine``), and why, in words (``text``, then ``notes``: prefill not measured, an arm
    corrected by its own sentinels alone)."""

    reference: list[str]
    decode: SpeedChange | None
    prefill: SpeedChange | None  # None where the sentinel's prompt is too short to time prefill (said in notes)
    detected: bool
    corrected: bool
    gated: bool
    tolerance: float
    text: str
    notes: list[str]


class Figures(TypedDict):
    """What a cell and an arm both say: the ratio later / baseline, its interval and verdict as measured, the same
    with the later turns put on the baseline's machine speed (``corrected``: whether they were), and ``note``."""

    ratio: float | None
    low: float | None
    high: float | None
    verdict: Verdict
    corrected: bool
    corrected_ratio: float | None
    corrected_low: float | None
    corrected_high: float | None
    corrected_verdict: Verdict | None
    note: str | None


@strict_row
class CellRow(Figures):
    """One matched (arm, case): the ratio later / baseline of the geometric means of the turn times as measured (or,
    where ``equal_work``, with the later turns put on the baseline's work: ``later_equal_work_s``), its interval
    (Welch on log turn times), the verdict; ``refused`` with ``reason`` where the guard refuses it; the same
    figures with the later turns put on the baseline's machine speed (``corrected_*``, None where not corrected);
    ``note``: why there is no interval, or what could not be checked."""

    arm: str
    later_arm: str
    case: str
    later_case: str
    n_baseline: int
    n_later: int
    baseline_s: float | None
    later_s: float | None
    refused: bool
    reason: str | None
    failed_baseline: int
    failed_later: int
    output_baseline: float | None  # median output tokens per turn
    output_later: float | None
    equal_work: bool  # the later turns were put on the baseline's work (``note`` says by how much)
    later_equal_work_s: float | None  # their geometric mean so (what ``ratio`` is of), where ``equal_work``


@strict_row
class ArmRow(Figures):
    """One matched arm: the geometric mean over its compared cases of the cells' ratios, with its interval (from the
    spread between the cases where a case has none; ``note`` says so, or why there is none), measured and
    (``corrected_*``) with the later turns on the baseline's machine speed."""

    arm: str
    later_arm: str
    cases: int
    refused_cases: int


@strict_row
class LeverRow(TypedDict):
    """A lever measured in both runs by the same controlled comparison (its arm against its reference, each matched
    across the runs): its multiplier in each run (reference time / arm time: the geometric mean over the compared
    cases of the paired ratios of the run's own turns) with that run's interval, the ratio of the later multiplier to
    the baseline's with its interval (Welch over the two runs' paired log ratios, per case, then the geometric mean
    over the cases) and the verdict against the threshold ("pays more": above it with the whole interval above 1x;
    "pays less": below its inverse with the whole interval below 1x); ``refused`` with ``reason`` where the guard
    refuses every case of it (``refused_cases``: those it refused)."""

    lever: str
    arm: str
    vs: str
    later_arm: str | None  # None: the arm has no match in the later run
    later_vs: str | None
    compared: bool  # False: the later run does not measure it between the matched arms (``reason`` says why)
    cases: int
    refused_cases: int
    multiplier_baseline: float | None
    multiplier_baseline_low: float | None
    multiplier_baseline_high: float | None
    multiplier_later: float | None
    multiplier_later_low: float | None
    multiplier_later_high: float | None
    ratio: float | None
    low: float | None
    high: float | None
    verdict: LeverVerdict
    refused: bool
    reason: str | None
    note: str | None


@strict_row
class RunComparison(TypedDict):
    """One later run against the baseline: what changed (before any number), the matches, the machine's speed, the
    cells and the arms, and the lines that say what got slower, what is undecided beyond the threshold toward
    slower, and what is refused (each by the verdicts the exit code follows)."""

    later: RunInfo
    changed: list[ChangedRow]
    arms: list[ArmMatch]
    cases: list[CaseMatch]
    machine: MachineRow
    cells: list[CellRow]
    arm_ratios: list[ArmRow]
    levers: list[LeverRow]  # never gated: a lever paying less is no slowdown of its own
    slower: list[str]
    undecided: list[str]
    refused: list[str]


@strict_row
class CompareResult(TypedDict):
    """``leverbench compare --format json``."""

    schema: str
    baseline: RunInfo
    threshold: float
    confidence: float  # of each interval (Bonferroni over the rows a verdict is drawn for: together 95 %)
    correct_machine: bool  # the exit code follows the verdicts corrected for the machine's speed
    strict: bool  # the exit code is 1 also for a row undecided beyond the threshold or refused
    comparisons: list[RunComparison]
    slower: bool
    exit_code: int  # 0 or 1, as the command exits


def compare_json_schema() -> str:
    """The JSON Schema of ``leverbench compare --format json``, as ``leverbench schema compare`` prints it."""
    import json  # noqa: PLC0415

    from pydantic import TypeAdapter  # noqa: PLC0415  (pydantic only when asked)

    return json.dumps(TypeAdapter(CompareResult).json_schema(), indent=2, sort_keys=True) + "\n"
