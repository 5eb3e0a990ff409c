"""The rounds of an adaptive run after its initial repeats (``[experiment] adaptive``).

Which cells get one more repeat is decided by the analysis
(:func:`leverbench.analysis.experiment.verdicts.plan_round`) from the ledger written so far:
the runner computes no statistics.  Each round is one more repeat of the cells of
the comparisons still open, in counterbalanced order
(:func:`.schedule.adaptive_round`).  A resumed run replays the looks from its
ledger and runs only the units it lacks, so it continues where it stopped.
"""

from __future__ import annotations

from pathlib import Path

from ..analysis.experiment.verdicts import plan_round
from ..config import Experiment, LoadedExperiment, with_adaptive
from ..errors import BadInput
from ..ledger.reader import read_ledger
from ..ledger.rows import RunConfigRow
from .schedule import Unit, adaptive_round


class AdaptiveRounds:
    """The next round's units, one round at a time: :meth:`next_units` after the records of the
    previous round are on disk."""

    def __init__(self, spec: Experiment, ledger_path: Path, done: set[tuple]):
        self.spec = spec
        self.path = ledger_path
        self.done = done  # on resume: the units with a successful record (not run again)
        self.repeat = spec.experiment.repeats  # the first round's repeat number

    def next_units(self) -> list[Unit]:
        """The units of the next round that has any not yet done; [] when every comparison is stopped."""
        while True:
            plan = plan_round(read_ledger(self.path), self.repeat)
            if not plan.cells:
                return []
            self.repeat += 1
            units = [u for u in adaptive_round(self.spec, plan.cells, plan.repeat) if u.key() not in self.done]
            if units:
                return units


def resumed_adaptive(exp: LoadedExperiment, config: RunConfigRow, out: Path) -> LoadedExperiment:
    """The experiment a resumed run continues, given the ledger header's *config*: an adaptive run keeps its
    own adaptive settings when neither the file nor ``--adaptive`` gives them, and its repeats may not change
    (its rounds are numbered after them)."""
    was = (config.get("experiment") or {}).get("adaptive")
    if was is None:
        return exp
    exp = with_adaptive(exp, was)
    old, new = config["experiment"].get("repeats"), exp.spec.experiment.repeats
    if old != new:
        raise BadInput(f"{out}: an adaptive run's repeats cannot change on resume (it ran {old}, now {new}); its "
                       "rounds add repeats up to adaptive max_repeats")
    return exp
