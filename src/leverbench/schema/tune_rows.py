"""What ``leverbench tune`` writes (``OUT/tune.json``, :mod:`leverbench.tune.run`) and its first screen shows
(:mod:`leverbench.report.tune`).  Types for the code that builds and formats it; not validated on reading (nothing
reads it back: a tune is recomputed from its races' ledgers)."""

from __future__ import annotations

from typing import Literal, Optional

from typing_extensions import TypedDict

#: The format of ``tune.json``.
TUNE_SUMMARY_SCHEMA = "leverbench.tune-summary/2"  # /2: objective, gpus


class RaceRow(TypedDict):
    """One race of ``tune.json``: the two configurations, the point, the outcome, the ratio incumbent time /
    candidate time (> 1: the candidate is faster) with its interval, the engine-seconds and repeats it took, why
    it was refused or undecided, its run directory."""

    incumbent: dict[str, object]
    candidate: dict[str, object]
    point: int
    outcome: str
    ratio: Optional[float]
    low: Optional[float]
    high: Optional[float]
    engine_s: float
    repeats: int
    reason: Optional[str]
    run_dir: Optional[str]


class PointRow(TypedDict):
    """The answer at one operating point (requests in flight)."""

    point: int
    recommended: dict[str, object]  # the best, where its race against the baseline said better; else the baseline
    recommended_words: str
    command: str  # the recommended configuration's launch command ({port} left to fill)
    best: dict[str, object]  # where the search ended
    best_words: str
    is_baseline: bool  # the search ended at the baseline
    confirmed: bool  # the best is the baseline, or its race against the baseline said better
    against_baseline: Optional[RaceRow]
    stopped: Literal["converged", "budget"]
    engine_s: float
    grid_engine_s: Optional[float]
    grid_configurations: int
    races: int
    path: list[RaceRow]
    final: list[RaceRow]
    not_excluded: list[str]


class TuneSummary(TypedDict):
    """``tune.json``."""

    schema: str
    file: str
    knobs: dict[str, list[object]]
    baseline: dict[str, object]
    exclude: list[dict[str, object]]
    min_effect: float
    confidence: float
    budget_engine_s: Optional[float]
    engine_s: float
    points: list[PointRow]
    objective: Literal["turn_time", "gpu_hours"]  # what "better" meant: the ratios are of it (baseline's / its)
    gpus: Optional[dict[str, Optional[int]]]  # each configuration's GPUs (its words), where [tune] gpus gives them
