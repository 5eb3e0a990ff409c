"""``[experiment] adaptive``: the settings of adaptive repeats (issue 16), and how they must fit the rest of
the experiment.  The rounds: :mod:`leverbench.runner.rounds`; the statistics:
:mod:`leverbench.analysis.sequential.confidence` and :mod:`leverbench.analysis.experiment.verdicts`."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from ..errors import ConfigError
from .limits import MAX_GPU_HOURS, MAX_MIN_EFFECT, MAX_REPEATS, shown


class AdaptiveSpec(BaseModel):
    """``[experiment] adaptive``: add repeats only to the comparisons still undecided (issue 16; the
    statistics in :mod:`leverbench.analysis.sequential.confidence`, the rounds in
    :mod:`leverbench.analysis.experiment.verdicts`).
    ``min_effect``: the ratio a lever must beat to pay; ``confidence``: of the anytime-valid interval;
    ``max_repeats``: per cell, all rounds together; ``max_gpu_hours``: no round starts that would take the
    turns' GPU-hours (turn seconds × the arm's ``gpus`` condition, default 1, / 3600, every arm) past it."""

    model_config = ConfigDict(extra="forbid", strict=True)  # a string or a boolean is not a number

    min_effect: float = 1.10
    confidence: float = 0.95
    max_repeats: int = 12
    max_gpu_hours: float | None = None

    @field_validator("min_effect")
    @classmethod
    def _min_effect(cls, v: float) -> float:
        if not (math.isfinite(v) and 1.0 < v <= MAX_MIN_EFFECT):
            raise ValueError(f"must be a ratio above 1 and at most {MAX_MIN_EFFECT:g} (e.g. 1.10: the lever must make "
                             f"turns 10 % faster), got {shown(v)}")
        return v

    @field_validator("confidence")
    @classmethod
    def _confidence(cls, v: float) -> float:
        if not 0.0 < v < 1.0:
            raise ValueError(f"must be between 0 and 1 (e.g. 0.95), got {shown(v)}")
        return v

    @field_validator("max_repeats")
    @classmethod
    def _max_repeats(cls, v: int) -> int:
        if not 2 <= v <= MAX_REPEATS:
            raise ValueError(f"must be a whole number from 2 (no verdict comes before 2 repeats) to {MAX_REPEATS}, "
                             f"got {shown(v)}")
        return v

    @field_validator("max_gpu_hours")
    @classmethod
    def _max_gpu_hours(cls, v: float | None) -> float | None:
        if v is not None and not (math.isfinite(v) and 0 < v <= MAX_GPU_HOURS):
            raise ValueError(f"must be a number of GPU-hours above 0 and at most {MAX_GPU_HOURS:g} (or left out: no "
                             f"limit), got {shown(v)}")
        return v


def check_adaptive(file: str, e: Any, repeats_key: str = "experiment.repeats") -> None:
    """The settings of an adaptive ``[experiment]`` section *e* that depend on each other: ``order`` interleaved
    (a pair is two adjacent turns), ``repeats`` ≥ 2 (the rounds before the first look) and ≤ ``max_repeats``;
    :class:`ConfigError` naming *file* and the key (*repeats_key* for the repeats: a flag may have set them)."""
    if e.adaptive is None:
        return
    if e.order != "interleaved":
        raise ConfigError(file, "experiment.order", "adaptive repeats pair each turn with the other arm's turn of the "
                                                    "same case and repeat, run right after it: use order = "
                                                    "\"interleaved\" (or drop adaptive)")
    if e.repeats < 2:
        raise ConfigError(file, repeats_key, f"adaptive runs start with at least 2 repeats (no verdict comes "
                                             f"before 2), got {e.repeats}")
    if e.repeats > e.adaptive.max_repeats:
        raise ConfigError(file, repeats_key, f"{e.repeats} repeats exceed adaptive max_repeats = "
                                             f"{e.adaptive.max_repeats}; raise max_repeats or lower repeats")
