"""Latency regressed on generated tokens, per cell (the article's decomposition).

For a cell's successful calls: latency_s = a + b × completion_tokens by least
squares.  decode_tps = 1 / b; intercept_s = a (prefill + harness overhead);
R² = 1 − SS_res / SS_tot.  Refused, with the reason, when there are fewer than
3 points, when the output lengths barely vary (max − min < max(8 tokens,
10 % of the mean): the slope would be noise), or when the slope is not
positive.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import numpy as np

from .dataset import Dataset

MIN_POINTS = 3


def fit_line(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """(intercept a, slope b, R²) of y = a + b·x by ordinary least squares."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    xm, ym = xa.mean(), ya.mean()
    sxx = float(((xa - xm) ** 2).sum())
    b = float(((xa - xm) * (ya - ym)).sum() / sxx)
    a = float(ym - b * xm)
    ss_res = float(((ya - (a + b * xa)) ** 2).sum())
    ss_tot = float(((ya - ym) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return a, b, r2


def regress(tokens: Sequence[float], latency: Sequence[float]) -> dict[str, Any]:
    n = len(tokens)
    out: dict[str, Any] = {"points": n, "decode_tps": None, "intercept_s": None, "r2": None,
                           "output_min": min(tokens) if n else None, "output_max": max(tokens) if n else None,
                           "refused": None}
    if n < MIN_POINTS:
        out["refused"] = f"{n} point(s), fewer than {MIN_POINTS}"
        return out
    lo, hi = min(tokens), max(tokens)
    mean = sum(tokens) / n
    if hi - lo < max(8.0, 0.10 * mean):
        out["refused"] = f"output lengths barely vary ({lo:g}–{hi:g} tokens)"
        return out
    a, b, r2 = fit_line(tokens, latency)
    if b <= 0:
        out["refused"] = f"slope {b:.3g} s/token is not positive"
        out["r2"] = r2
        return out
    out.update(decode_tps=1.0 / b, intercept_s=a, r2=r2)
    return out


def decomposition(ds: Dataset) -> list[dict[str, Any]]:
    pts: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for c in ds.calls:
        if c.get("error") is None and c.get("completion_tokens") is not None:
            pts[(c["arm"], c["case"])].append((c["completion_tokens"], c["latency_s"]))
    out = []
    for arm in ds.arms:
        for case in ds.cases:
            p = pts.get((arm, case), [])
            out.append({"arm": arm, "case": case, **regress([x for x, _ in p], [y for _, y in p]),
                        "x": [x for x, _ in p], "y": [round(y, 4) for _, y in p]})
    return out
