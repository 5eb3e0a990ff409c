"""Equal work across runs: a cell whose output volume changed between the runs, put on the baseline's work.

Where the two runs' median generated tokens per turn of a (arm, case) differ beyond the experiment's cell tolerance
(``volume_tolerance_cell``), the later run did different work (a new model answering at another length, a changed
sampling default), and its ratio mixes the speed with the work.  As a run does for its own arms
(:mod:`..experiment.equal_work`), each later turn is then timed at the baseline's work, by the later run's own decode
speed in that cell:

    corrected_s = turn_s + (O_b − O_t) · s_d        s_d = Σ (latency − ttft) / Σ (out − 1)

O_b the baseline cell's median generated tokens per turn, O_t the turn's own, s_d the seconds per decoded token of
the later cell's successful calls (each call's first token comes with its prefill: only the decode steps are
priced).  So the measurement carries the time and the correction only the difference in work.  It is not a rate
model: the later prompts a longer answer feeds (the next step's prefill) and a changed number of steps are not
corrected, and are said.

It is **used** (the cell compared at equal work, its note saying by how much) when the correction is small —
Σ |correction| ≤ :data:`~..experiment.equal_work.MAX_CORRECTION` (a quarter) of the later cell's measured time, the
limit a run sets on its own arms — and no corrected turn is left without time; otherwise the cell stays refused for
its volume, the reason saying why it was not corrected.  Where one run has no token counts, or generated none
against some, nothing is corrected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..experiment.equal_work import MAX_CORRECTION
from .runs import RunView


@dataclass(frozen=True)
class WorkCorrection:
    """Per later turn (the cell's rows, in order) the seconds added to put it on the baseline's work, the decode
    seconds per token used, and the share Σ |correction| / Σ turn_s."""

    seconds: list[float]
    per_token_s: float
    share: float

    def words(self, ob: float, ol: float) -> str:
        more = ol / ob - 1
        return (f"put on the baseline's work: {abs(more):.0%} {'more' if more > 0 else 'fewer'} tokens a turn "
                f"({ob:g} → {ol:g}), corrected by the later run's own decode speed in the cell "
                f"({self.per_token_s * 1000:.2f} ms a token), {self.share:.1%} of its time; the next steps' longer "
                "or shorter prompts are not corrected")


def decode_seconds_per_token(run: RunView, rows: Sequence[int]) -> float | None:
    """Σ (latency − ttft) / Σ (out − 1) over the successful calls of the turns *rows* of *run*; None without one."""
    C = run.ds.call
    out = np.where(np.isnan(C.completion_tokens), C.predicted_n, C.completion_tokens)  # usage, else timings
    sel = np.isin(C.turn, np.asarray(rows, np.int64)) & C.ok & np.isfinite(C.latency_s) & np.isfinite(C.ttft_s) \
        & np.isfinite(out) & (out > 1)
    steps = float(np.sum(out[sel] - 1))
    secs = float(np.sum(C.latency_s[sel] - C.ttft_s[sel]))
    return secs / steps if steps > 0 and secs > 0 else None


def work_correction(later: RunView, rows: Sequence[int], ob: float) -> tuple[WorkCorrection | None, str | None]:
    """(the correction of the later turns *rows*, None) where it may be used, else (None, why not); *ob*: the baseline
    cell's median generated tokens per turn."""
    idx = np.asarray(rows, np.int64)
    outputs = [float(v) for v in later.ds.turn.output_tokens[idx]]
    turn_s = [float(v) for v in later.ds.turn.turn_s[idx]]
    if not ob > 0 or not all(o > 0 for o in outputs):
        return None, ("no correction: a turn of the later run has no token count or generated none"
                      if ob > 0 else "no correction: the baseline generated no tokens")
    s_d = decode_seconds_per_token(later, rows)
    if s_d is None:
        return None, "no correction: the later run's decode speed in the cell is not measured"
    seconds = [(ob - o) * s_d for o in outputs]
    total = sum(turn_s)
    share = sum(map(abs, seconds)) / total if total > 0 else float("inf")
    if share > MAX_CORRECTION:
        return None, (f"not corrected: the correction would be {share:.0%} of the later cell's time, beyond "
                      f"{MAX_CORRECTION:.0%}")
    if any(t + s <= 0 for t, s in zip(turn_s, seconds)):
        return None, "not corrected: a turn would be left without time"
    return WorkCorrection(seconds, s_d, share), None
