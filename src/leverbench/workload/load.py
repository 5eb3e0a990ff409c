"""The arrivals of the load stages: when each request of an open-loop stage is sent.

The stages themselves (the ``[[load]]`` schema, sweeps, cross-checks) are part of the experiment file's
schema: :mod:`leverbench.config.stages`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

# runner/load.py takes the stages' names from here too; they are defined in config.stages.
from ..config.stages import PlannedStage, check_stages, check_trace_paths, expand

__all__ = ["PlannedStage", "arrival_offsets", "check_stages", "check_trace_paths", "expand", "gaps"]


def gaps(rate: float, arrival: str, burstiness: float = 1.0, seed: int = 0) -> Iterator[float]:
    """Endless inter-arrival gaps in seconds, mean 1/rate.

    constant: 1/rate.  poisson: Exponential(rate) (``random.expovariate``).
    gamma: Gamma(shape k = burstiness, scale θ = 1/(rate·k)), so mean kθ = 1/rate
    and coefficient of variation 1/√k (``random.gammavariate``).
    """
    rng = random.Random(seed)
    if arrival == "constant":
        while True:
            yield 1.0 / rate
    elif arrival == "poisson":
        while True:
            yield rng.expovariate(rate)
    elif arrival == "gamma":
        theta = 1.0 / (rate * burstiness)
        while True:
            yield rng.gammavariate(burstiness, theta)
    else:
        raise ValueError(f"unknown arrival process {arrival!r}")


def arrival_offsets(rate: float, arrival: str, burstiness: float = 1.0, seed: int = 0, *,
                    first_at_zero: bool = True) -> Iterator[float]:
    """Endless send offsets (seconds after the stage starts): the first at 0, then cumulative gaps."""
    t = 0.0
    g = gaps(rate, arrival, burstiness, seed)
    if first_at_zero:
        yield 0.0
    for d in g:
        t += d
        yield t
