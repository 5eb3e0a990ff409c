"""``summary.json`` (``leverbench.summary/1``): every section, typed.

:class:`Summary` is the whole file: the experiment's sections (:mod:`.experiment_rows`), the rate model's,
load's and the server's (:mod:`.rate_rows`), and the engines' and GPUs' (:mod:`.hardware_rows`).
"""

from __future__ import annotations

from . import strict_row
from .experiment_rows import ExperimentSections
from .hardware_rows import HardwareSections
from .rate_rows import RateSections


@strict_row
class Summary(ExperimentSections, RateSections, HardwareSections):
    """The summary of one run, as ``summarize`` returns it and ``summary.json`` holds it."""
