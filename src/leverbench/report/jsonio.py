"""JSON output helpers shared by the writers."""

from __future__ import annotations

import math

from ..json_types import finite

__all__ = ["finite", "number"]


def number(x: object) -> float | None:
    """A JSON value as a finite float, or None when it is not a finite number (null, text, a bool, inf, NaN)."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None
