"""Small pure statistics, each with its formula (after pyperf's ``_utils``)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def median(xs: Sequence[float] | np.ndarray) -> float:
    """Middle value of the sorted sample; mean of the two middle ones for even n."""
    n = len(xs)
    if not n:
        raise ValueError("median of an empty sample")
    s = np.sort(xs) if isinstance(xs, np.ndarray) else sorted(xs)
    mid = n // 2
    return float(s[mid]) if n % 2 else float((s[mid - 1] + s[mid]) / 2.0)


def spread(a: float, b: float) -> float:
    """Relative spread of two volumes: (max − min) / min.  inf when min is 0 and max is not."""
    lo, hi = min(a, b), max(a, b)
    if lo <= 0:
        return 0.0 if hi == lo else math.inf
    return (hi - lo) / lo


def overlap(r1: tuple[float, float], r2: tuple[float, float]) -> bool:
    """Whether the observed ranges [min, max] of two samples share any point."""
    return r1[0] <= r2[1] and r2[0] <= r1[1]


def percentile(xs: Sequence[float], p: float) -> float:
    """Linear-interpolation percentile (NumPy's default, 'linear'): rank = p/100 × (n − 1)."""
    if not xs:
        raise ValueError("percentile of an empty sample")
    s = sorted(xs)
    rank = p / 100.0 * (len(s) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def rel_diff(a: float, b: float) -> float:
    """|a − b| / b: how far a is from the reference b."""
    return abs(a - b) / abs(b) if b else math.inf
