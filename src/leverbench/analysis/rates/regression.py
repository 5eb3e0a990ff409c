"""Latency regressed on generated tokens, per cell (the article's decomposition).

For a cell's successful calls: latency_s = a + b × completion_tokens by least
squares.  decode_tps = 1 / b; intercept_s = a (prefill + harness overhead);
R² = 1 − SS_res / SS_tot.  Refused, with the reason, when there are fewer than
3 points, when the output lengths barely vary (max − min < max(8 tokens,
10 % of the mean): the slope would be noise), or when the slope is not
positive.  When the points had very different prefill work (some calls found
their prompt cached, others did not, or later steps of a turn carry a longer
conversation) the cell is flagged ``mixed_prefill`` and, where the server's
uncached prompt count is known for every point, that count enters the fit as a
second regressor so that it does not bias the slope (``method``).

The slope is a per-token time at a context: decode slows as the context grows (the rate model,
:mod:`.rate_model`: the i-th token after the first costs d0 + d1·(L + i) from a prompt of L tokens), so
a call's decode carries X = (O − 1)·L + O·(O − 1)/2 context-token-steps, and under that model the fitted
slope is d0 + d1·γ, γ the coefficient on O when X is regressed on the same design (1, O and, where used,
the uncached input).  γ is the cell's ``decode_context``: the context at which its rate was measured
(≈ mean prompt + mean output), so that the rate can be compared with another measured elsewhere.

The cell's points are returned for plotting as ``x`` (output tokens) and ``y``
(latency, s); beyond SCATTER_POINTS_KEPT of them an evenly strided subset
(``x_sampled: true``; ``points`` still counts them all).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, Union

import numpy as np
from numpy.typing import NDArray
from typing_extensions import TypeAlias

from ..base.dataset import CallTable, Dataset, groups

if TYPE_CHECKING:
    from ...schema.rate_rows import DecompositionRow, RegressionFit, Scatter

#: Numbers a fit takes: a list, or a numpy column.
Floats: TypeAlias = Union[Sequence[float], NDArray[np.float64]]

MIN_POINTS = 3
SCATTER_POINTS_KEPT = 2000  # a cell's points that summary.json keeps (the HTML report draws fewer)


def fit_line(x: Floats, y: Floats) -> tuple[float, float, float]:
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


def fit_plane(x1: Floats, x2: Floats, y: Floats) -> tuple[float, float, float, float]:
    """(a, b, c, R²) of y = a + b·x1 + c·x2 by ordinary least squares."""
    X = np.column_stack([np.ones(len(x1)), np.asarray(x1, float), np.asarray(x2, float)])
    ya = np.asarray(y, float)
    coef, *_ = np.linalg.lstsq(X, ya, rcond=None)
    pred = X @ coef
    ss_tot = float(((ya - ya.mean()) ** 2).sum())
    r2 = 1.0 - float(((ya - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0
    return float(coef[0]), float(coef[1]), float(coef[2]), r2


def regress(tokens: Floats, latency: Floats, uncached: Floats | None = None, prompt: Floats | None = None
            ) -> RegressionFit:
    """Fit one cell.  With ``uncached`` (prompt tokens the server computed, per point) that
    varies independently of the output length (:func:`separable`), the prefill work is a second regressor:
    latency = a + b·output + c·uncached, decode_tps = 1/b, intercept_s = a + c·median(uncached)
    (the cell's typical prefill + overhead), prefill_tps = 1/c.  With ``prompt`` (each point's prompt
    tokens, all known), ``decode_context`` (see the module docstring), else None."""
    tok = np.asarray(tokens, dtype=float)
    n = len(tok)
    lo, hi = (_count(tok.min()), _count(tok.max())) if n else (None, None)
    out: RegressionFit = {"points": n, "decode_tps": None, "intercept_s": None, "r2": None,
                           "output_min": lo, "output_max": hi, "refused": None, "method": "latency ~ output",
                           "decode_context": None}
    if n < MIN_POINTS:
        out["refused"] = f"{n} point(s), fewer than {MIN_POINTS}"
        return out
    assert lo is not None and hi is not None  # n ≥ MIN_POINTS > 0 points: both were read
    mean = float(tok.sum()) / n
    if hi - lo < max(8.0, 0.10 * mean):
        out["refused"] = f"output lengths barely vary ({lo:g}–{hi:g} tokens)"
        return out
    # the uncached input as a second regressor, where it is one (else None)
    plane = (uncached if uncached is not None and len(uncached) == n and n >= MIN_POINTS + 1
             and separable(tokens, uncached) else None)
    if plane is not None:
        a, b, c, r2 = fit_plane(tokens, plane, latency)
        out["method"] = "latency ~ output + uncached input"
        out["prefill_tps"] = 1.0 / c if c > 0 else None
        a = a + c * float(np.sort(np.asarray(plane, dtype=float))[n // 2])
    else:
        a, b, r2 = fit_line(tokens, latency)
    if prompt is not None and len(prompt) == n and not np.isnan(np.asarray(prompt, float)).any():
        L = np.asarray(prompt, float)
        steps = (tok - 1.0) * L + tok * (tok - 1.0) / 2.0
        out["decode_context"] = (fit_plane(tokens, plane, steps)[1] if plane is not None
                                 else fit_line(tokens, steps)[1])
    if b <= 0:
        out["refused"] = f"slope {b:.3g} s/token is not positive"
        out["r2"] = r2
        return out
    out.update({"decode_tps": 1.0 / b, "intercept_s": a, "r2": r2})
    return out


def _count(v: float) -> int | float:
    """A token count as read (an integer unless the ledger said otherwise)."""
    v = float(v)
    return int(v) if v.is_integer() else v


def _counts(x: NDArray[np.float64]) -> list[int | float]:
    """:func:`_count` of each of *x* (integers as int: one conversion when all are)."""
    whole = np.isfinite(x) & (x == np.trunc(x)) & (np.abs(x) < 2.0 ** 62)
    return x.astype(np.int64).tolist() if whole.all() else [_count(v) for v in x.tolist()]


def round4(y: Floats) -> list[float]:
    """Python's ``round(v, 4)`` of each of *y*.  Python rounds v's exact value to 4 decimals, half to even, and
    returns the float nearest the result; rint(v·10⁴)/10⁴ is that float (k/10⁴ is correctly rounded for a whole
    k below 2⁵³) unless the product's rounding error (≤ 2⁻⁵³ of it: < 10⁻⁶ below 2³⁰) can carry it across a half,
    so a value within 10⁻⁶ of a half after scaling, one not finite and one past 2³⁰ are rounded by Python."""
    y = np.asarray(y, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = y * 1e4
        out = np.rint(scaled) / 1e4
        doubtful = ~(np.abs(np.abs(scaled - np.trunc(scaled)) - 0.5) > 1e-6) | ~(np.abs(scaled) < 2.0 ** 30)
    rounded: list[float] = out.tolist()
    for i in np.flatnonzero(doubtful).tolist():
        rounded[i] = round(float(y[i]), 4)
    return rounded


def uncached_input(c: CallTable) -> NDArray[np.float64]:
    """Prompt tokens the server had to compute: prompt − cached (llama.cpp: timings.prompt_n); NaN: unknown."""
    client = np.trunc(c.prompt_tokens) - np.trunc(np.where(np.isnan(c.cached_tokens), 0.0, c.cached_tokens))
    out: NDArray[np.float64] = np.where(np.isnan(c.prompt_n), client, np.trunc(c.prompt_n))
    return out


def separable(tokens: Floats, uncached: Floats) -> bool:
    """Whether uncached input varies (by more than 16 tokens) and not in lock-step with the
    output length (|Pearson r| < 0.95), so that a two-regressor fit is determined."""
    u = np.asarray(uncached, float)
    if u.max() - u.min() <= 16:
        return False
    r = np.corrcoef(np.asarray(tokens, float), u)[0, 1]
    return bool(np.isfinite(r) and abs(r) < 0.95)


def mixed_prefill(uncached: Floats) -> bool:
    """Whether the points' prefill work differs enough to bias the slope: the uncached input
    ranges over more than max(64 tokens, half its median)."""
    if len(uncached) < 2:
        return False
    s = np.sort(np.asarray(uncached, float))
    return bool(s[-1] - s[0] > max(64, 0.5 * s[len(s) // 2]))


def scatter(x: NDArray[np.float64], y: NDArray[np.float64]) -> Scatter:
    """The points to plot: all of them, or SCATTER_POINTS_KEPT evenly strided (``x_sampled``)."""
    n = len(x)
    sampled = n > SCATTER_POINTS_KEPT
    if sampled:
        pick = np.arange(SCATTER_POINTS_KEPT) * n // SCATTER_POINTS_KEPT
        x, y = x[pick], y[pick]
    out: Scatter = {"x": _counts(x), "y": round4(y)}
    if sampled:
        out["x_sampled"] = True
    return out


def decomposition(ds: Dataset) -> list[DecompositionRow]:
    c = ds.call
    point = c.ok & ~np.isnan(c.completion_tokens)
    by = groups(np.where(point, ds.cell_code(c.arm, c.case), -1), ds.n_cells)
    unc_all = uncached_input(c)
    out: list[DecompositionRow] = []
    for arm in ds.arms:
        for case in ds.cases:
            p = by[ds.cell(arm, case)]
            x, y, u = c.completion_tokens[p], c.latency_s[p], unc_all[p]
            unc = u[~np.isnan(u)]
            known = len(unc) == len(p)
            out.append({"arm": arm, "case": case,
                        **regress(x, y, unc if known else None, c.prompt_tokens[p]),
                        "uncached_input_range": [_count(unc.min()), _count(unc.max())] if len(unc) else None,
                        "mixed_prefill": mixed_prefill(unc),
                        **scatter(x, y)})
    return out
