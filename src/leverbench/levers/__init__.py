"""The levers: one module per lever family, each declaring its :class:`~.lever.Lever` (issue 24 part 1).

A lever's module says everything the tool knows of it: its knob's names across engines, the engine flags and
discovered facts that set or name it, what each engine says of it (discovery), the phase it acts on and so how the
projection treats it, how its engagement is measured, how ``analyze`` estimates it on recorded traffic, and its
words in the recommendation and the reports.  :mod:`.registry` collects them (it finds the modules itself: a new
lever is one new module) and answers the lookups discovery, analysis, the runner and the reports make; none of them
names a lever (``tests/test_architecture.py``).

This package sits below analysis and the runner: it imports nothing of leverbench but :mod:`leverbench.json_types`.
See ``docs/adding-a-lever.md``.
"""

from .lever import (
    ArmEvidence,
    CallSums,
    Lever,
    Measured,
    MetricTable,
    TrafficFacts,
    TrafficSaving,
    Use,
    flag_value,
)
from .registry import by_fact, by_flag, engaged_in, lever, levers, phase_of, used_in

__all__ = ["ArmEvidence", "CallSums", "Lever", "Measured", "MetricTable", "TrafficFacts", "TrafficSaving", "Use",
           "by_fact", "by_flag", "engaged_in", "flag_value", "lever", "levers", "phase_of", "used_in"]
