"""Runs compared across time, engines and machines (``leverbench compare``): pure functions over ledgers.

- :mod:`.runs` — one run as a comparison reads it: its cells' turns, what each case sent, its sentinels, its drift;
- :mod:`.match` — which arms and cases are the same across two runs, and every condition that differs;
- :mod:`.machine` — the machine's speed between the runs, from the drift sentinels, and the correction;
- :mod:`.work` — a cell whose output volume changed, put on the baseline's work;
- :mod:`.levers` — each lever's multiplier in both runs and their ratio;
- :mod:`.stats` — the ratio of geometric means, its Welch interval for unpaired repeats, the verdict;
- :mod:`.compare` — the comparison under the guard (``compare_runs``).
"""

from .compare import DEFAULT_THRESHOLD, compare_runs
from .runs import RunView, run_view

__all__ = ["DEFAULT_THRESHOLD", "RunView", "compare_runs", "run_view"]
