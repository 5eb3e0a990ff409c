"""The closed list of warnings a summary can carry (as hyperfine keeps its ``Warnings`` enum).

Every warning the analysis raises is a :class:`RunWarning`: its kind (one of
:class:`WarningKind`, each with a heading the reports group under), the arm
and case it concerns (None where it concerns the whole run, or a comparison:
then ``arm`` is the compared arm), and its text for readers.  ``summary.json``
keeps the texts in ``warnings`` (in the order raised) and the items in
``warning_items`` ``[{kind, arm, case, text}]``, same order.  Tests check
kinds; the wording is free to improve.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .summary import Summary


class WarningKind(StrEnum):
    """What a warning is about; its value is the name in ``summary.json``, ``heading`` the reports' group title."""

    heading: str

    def __new__(cls, value: str, heading: str) -> WarningKind:
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.heading = heading
        return obj

    # reading the ledger
    LEDGER_REPAIR = "ledger_repair", "Ledger lines skipped: a cut write, or --salvage"
    ORPHAN_CALLS = "orphan_calls", "Calls of interrupted turns, not counted"
    SUPERSEDED = "superseded", "Superseded attempts, not counted"
    # what the arms declare
    CONTRADICTION = "contradiction", "Declared knobs the engine contradicts"
    KNOB_UNKNOWN = "knob_unknown", "Knobs discovered on some arms and unknown on others"
    REPLICATE = "replicate", "Arms that differ in no knob"
    UNCONTROLLED = "uncontrolled", "Comparisons that differ in more than one knob"
    # whether the measurement held
    DRIFT = "drift", "Arms whose speed drifted during the run"
    DRIFT_DIFFERENTIAL = ("drift_differential",
                          "Comparisons refused for drift (arms drifted differently, or blocked order)")
    DRIFT_UNKNOWN = "drift_unknown", "Drift unknown: too few sentinels"
    DRIFT_UNDETERMINED = ("drift_undetermined",
                          "Comparisons whose sentinels cannot rule out that their arms drifted differently")
    WARMUP_UNSETTLED = "warmup_unsettled", "Engines whose speed had not settled after the warm-up"
    FAILED_CALLS = "failed_calls", "Failed calls and turns"
    RETRIED = "retried", "Retried attempts"
    EMPTY_ANSWER = "empty_answer", "Answers that used all of max_tokens and showed nothing"
    TOOLS_DROPPED = "tools_dropped", "Tool schemas the engine dropped: turns without their tools"
    STEP_LIMIT = "step_limit", "Turns cut by the step limit"
    # the engines and the hardware
    ENGINES_OVERLAP = "engines_overlap", "Engines one at a time that were up at once"
    ENGINE_NOT_RELEASED = "engine_not_released", "Engines that did not release their devices"
    ENGINE_START_SLOW = "engine_start_slow", "Engine starts near their timeout"
    GPU_UNKNOWN = "gpu_unknown", "Arms whose GPUs are unknown"
    # recorded turns replayed
    REPLAY_PROMPT_DIFFERS = "replay_prompt_differs", "Replayed calls whose prompt length is not the recording's"
    REPLAY_DEPARTED = "replay_departed", "Live replays that departed from the recording"
    REPLAY_LINES_SKIPPED = "replay_lines_skipped", "Request-log lines left out of the replayed turns"
    REPLAY_UNCHECKED = "replay_unchecked", "Replayed calls the recording has no usage for: prompts not checked"
    # whether the levers engaged
    NOT_ENGAGED = "not_engaged", "Levers that did not engage"
    REVISITS = "revisits", "Comparisons whose later repeats met prompts the earlier repeats cached"
    ENGAGEMENT_UNKNOWN = "engagement_unknown", "Levers whose engagement nothing reports"
    MIXED_METRICS = "mixed_metrics", "Server metrics shared between arms"
    CLIENT_SERVER_DISAGREE = "client_server_disagree", "Client and server timings disagree"
    # the probes
    PROBE_FAILED = "probe_failed", "Probe calls that failed"
    PROBE_DISOBEYED = "probe_disobeyed", "Probes the engine did not honour"
    PROBE_NEGATIVE_PREFILL = "probe_negative_prefill", "Probes that solved to a negative prefill"
    # the load stages
    LOAD_CLIENT_LAG = "load_client_lag", "Load stages the client sent late"
    LOAD_LOOP_STALL = "load_loop_stall", "Load stages whose client event loop stalled"
    LOAD_FAILED = "load_failed", "Load stages with failed calls"
    LOAD_NO_CALLS = "load_no_calls", "Load stages without measured calls"
    LOAD_TOKEN_ERROR = "load_token_error", "Load prompts off the trace's lengths"
    LOAD_WORKER_LOST = "load_worker_lost", "Load stages a worker died in"


@dataclass(frozen=True, slots=True)
class RunWarning:
    """One warning: its kind, the arm and case it concerns (None: the run, or no one cell), its text."""

    kind: WarningKind
    text: str
    arm: str | None = None
    case: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """The ``warning_items`` entry: {kind, arm, case, text}."""
        return {"kind": self.kind.value, "arm": self.arm, "case": self.case, "text": self.text}


def warning_groups(summary: Summary) -> list[tuple[str, str, list[str]]]:
    """The summary's warnings grouped by kind, for the reports: (kind, heading, texts) per kind, kinds in
    the order their first warning was raised, texts in order.  A summary without ``warning_items``
    (written before they existed) gives one group of kind "" headed "Warnings"."""
    items = summary.get("warning_items")
    if items is None:
        texts = list(summary.get("warnings") or [])
        return [("", "Warnings", texts)] if texts else []
    groups: dict[str, list[str]] = {}
    for w in items:
        groups.setdefault(w["kind"], []).append(w["text"])
    headings = {m.value: m.heading for m in WarningKind}
    return [(k, headings.get(k, k), texts) for k, texts in groups.items()]
