"""The rounds of an adaptive run after its initial repeats (``[experiment] adaptive``).

Which cells get one more repeat is decided by the analysis
(:func:`leverbench.analysis.experiment.verdicts.plan_round`) from the ledger written so far:
the runner computes no statistics.  Each round is one more repeat of the cells of
the comparisons still open, in counterbalanced order
(:func:`.schedule.adaptive_round`); the plan holds each decision point
(:class:`.plan.Look`).  A resumed run replays the looks from its ledger and runs
only the units it lacks, so it continues where it stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Collection, Optional

from ..analysis.experiment.verdicts import plan_round
from ..config import Experiment, LoadedExperiment, with_adaptive
from ..config.settings import RunSettings
from ..errors import BadInput
from ..ledger.reader import read_ledger
from .schedule import Unit, adaptive_round


class AdaptiveRounds:
    """An adaptive run's looks (:class:`.plan.Look`): each, once the records before it are on disk, decides the
    next round from the run's ledger at *ledger_path* (:meth:`next_round`); *done*: the units a resumed run has
    done, not run again."""

    def __init__(self, spec: Experiment, ledger_path: Path, done: Collection[tuple]):
        self.spec = spec
        self.path = ledger_path
        self.done = done

    def next_round(self, repeat: int) -> tuple[list[Unit], Optional[int]]:
        """The units of round *repeat*, or of the next round after it that has any not yet done, and the repeat
        of the look after them; ([], None) when every comparison is stopped."""
        while True:
            plan = plan_round(read_ledger(self.path, keep_columns=False), repeat)  # (the run appends next)
            if not plan.cells:
                return [], None
            repeat += 1
            units = [u for u in adaptive_round(self.spec, plan.cells, plan.repeat) if u.key() not in self.done]
            if units:
                return units, repeat


def resumed_adaptive(exp: LoadedExperiment, settings: RunSettings, out: Path) -> LoadedExperiment:
    """The experiment a resumed run continues, given the run's *settings* (its ledger header's): an adaptive run
    keeps its own adaptive settings when neither the file nor ``--adaptive`` gives them, and its repeats may not
    change (its rounds are numbered after them)."""
    if settings.adaptive is None:
        return exp
    exp = with_adaptive(exp, settings.adaptive)
    old, new = settings.repeats, exp.spec.experiment.repeats
    if old != new:
        raise BadInput(f"{out}: an adaptive run's repeats cannot change on resume (it ran {old}, now {new}); its "
                       "rounds add repeats up to adaptive max_repeats")
    return exp
