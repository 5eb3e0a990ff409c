"""The bounds of the numbers the analysis takes (``analyze``, ``whatif``, ``project`` and the summary.json
they read a run's figures from), in one place.

Each bound is far past what a real analysis uses and short of what would overflow a conversion, print
infinity or run for hours.  The commands' options are typed by them (:mod:`leverbench.cli.numbers`) and the
summary.json reader checks a run's figures against them (:mod:`leverbench.pipeline.summary_file`); the bounds
of a traffic file's own numbers (tokens of a call, a call's seconds, a time stamp) are the trace readers'
(:mod:`leverbench.workload.traces.bounds`), re-exported here.  An experiment's bounds are its schema's;
where the same quantity appears there (GPUs, price, speed, scale, requests) the bound is the same.
"""

from __future__ import annotations

from ...bounds import (
                      MAX_CALL_S,
                      MAX_GPU_HOUR_USD,
                      MAX_GPUS,
                      MAX_REQUESTS,
                      MAX_STAMP_S,
                      MAX_TOKENS,
                      SCALE_RANGE,
                      SPEED_RANGE,
                      TPS_RANGE,
)
from ...bounds import MAX_CONCURRENCY as MAX_SLOTS  # requests a server serves at once

__all__ = ["MAX_CACHE_TOKENS", "MAX_CALL_S", "MAX_GPUS", "MAX_GPU_HOUR_USD", "MAX_ORDERS", "MAX_REQUESTS",
           "MAX_SLOTS", "MAX_STAMP_S", "MAX_TOKENS", "SCALE_RANGE", "SPEEDUP_RANGE", "SPEED_RANGE",
           "TPS_RANGE"]

SPEEDUP_RANGE = (0.01, 100.0)  # a drafter's decode speedup (speculative decoding gives 2-4x; below 1: slower)
MAX_CACHE_TOKENS = 1e12  # a prefix cache's capacity in tokens: 10^5 GPUs' worth of KV
MAX_ORDERS = 1000  # random orders of simultaneous arrivals a forecast serves: the mean has long settled
