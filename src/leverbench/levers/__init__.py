"""The levers: one module per lever family, each declaring its :class:`~.lever.Lever` (issue 24 part 1).

A lever's module says everything the tool knows of it: its knob's names across engines, the engine flags and
discovered facts that set or name it, the phase it acts on and so how the projection treats it, how its
engagement is measured per dialect, and its words in the recommendation.  :mod:`.registry` collects them (it
finds the modules itself: a new lever is one new module) and answers the lookups analysis and the runner make.

This package sits below analysis and the runner: it imports nothing of leverbench but :mod:`leverbench.json_types`.
See ``docs/adding-a-lever.md``.
"""

from .lever import ArmEvidence, Lever, MetricTable, Use, flag_value
from .registry import by_fact, by_flag, engaged_in, lever, levers, phase_of, used_in

__all__ = ["ArmEvidence", "Lever", "MetricTable", "Use", "by_fact", "by_flag", "engaged_in", "flag_value", "lever",
           "levers", "phase_of", "used_in"]
