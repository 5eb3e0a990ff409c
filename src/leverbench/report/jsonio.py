"""JSON output helpers shared by the writers."""

from __future__ import annotations

import math
from typing import Any


def finite(o: Any) -> Any:
    """JSON has no inf/NaN: non-finite floats become null."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite(v) for v in o]
    return o


def number(x: Any) -> float | None:
    """A JSON value as a finite float, or None when it is not a finite number (null, text, a bool, inf, NaN)."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None
