"""The codes of the guard's reasons not to cite a comparison (``reason_codes`` of a multiplier row), one per rule
of :mod:`leverbench.analysis.base.guard`; here, apart from it, so that a report reads them without the statistics."""

NO_TURNS, REPEATS, FAILED, RETRIED, DRIFT = "no_turns", "repeats", "failed", "retried", "drift"
CONTRADICTION, NOT_ENGAGED, REFERENCE_USED, CELLS = "contradiction", "not_engaged", "reference_used", "cells"
VOLUME, VOLUME_UNKNOWN = "volume", "volume_unknown"
REVISITS = "revisits"  # the repeats were not exchangeable (analysis.experiment.revisits)
TOOLS = "tools"  # the tool schemas reached the model on one arm only (analysis.experiment.tools_reached)
