"""Rates fitted from the traffic's own latencies, per model and pooled, from sums over the calls.

Per model (and pooled), over the calls with a latency: the article's
latency = a + b·O by least squares, decode_tps = 1/b, R² reported; when the
uncached input U = I − C_served varies independently of O
(:func:`~leverbench.analysis.rates.regression.separable`: range > 16 tokens,
|r| < 0.95), latency = a + b·O + c·U instead, with intercept_s = a + c·U(⌊n/2⌋)
(the middle point of the sorted U, as ``regression.regress`` reports it).
Refused, as ``regress`` refuses, below 3 points, when the outputs barely vary
(max − min < max(8, 10 % of the mean)) or when the slope is not positive (or so small that the rate
would pass :data:`~.bounds.TPS_RANGE`: the times do not grow with the tokens); with
TTFTs on ≥ 3 calls a refused fit falls back to decode_tps = Σ(O − 1)⁺ /
Σ(latency − TTFT).  Prefill from TTFT = a' + b'·U when ≥ 3 calls have a TTFT,
else from the intercepts latency − O/decode_tps = a' + b'·U; prefill_tps =
1/b', prefill_a_s = max(a', 0).

Every least-squares fit is computed from the points' means and centred second
moments (two passes over the calls, each a polars aggregation), so a log of
any length is fitted in bounded memory; the numbers equal those of a fit on
the points themselves up to rounding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import polars as pl

from ..base.bounds import TPS_RANGE
from ..rates.regression import MIN_POINTS
from .rates import Rates
from .sums import as_frame, collect, value_counts

if TYPE_CHECKING:
    from ...schema.traffic_rows import DecodeRegression, FitRow
    from ...workload.traces.records import TrafficCall, TrafficLoad

#: One group's counts, sums, ranges, means and centred moments by name (:func:`_groups`: n, sO, mO, OO, …).
Moments = dict[str, float]

_ALL = "\x00all"  # the pooled group's key
_RAW = {"O": pl.col("output").cast(pl.Float64), "L": pl.col("latency"), "T": pl.col("ttft")}


def _line(n: float, mx: float, my: float, sxx: float, sxy: float, syy: float) -> tuple[float, float, float]:
    """(a, b, R²) of y = a + b·x by least squares, from the means and centred moments."""
    b = sxy / sxx
    a = my - b * mx
    ss_res = max(syy - b * sxy, 0.0)
    return a, b, (1.0 - ss_res / syy if syy > 0 else 1.0)


def _plane(g: dict[str, float]) -> tuple[float, float, float, float]:
    """(a, b, c, R²) of L = a + b·O + c·U by least squares, from the means and centred moments."""
    m = np.array([[g["OO"], g["OU"]], [g["OU"], g["UU"]]])
    b, c = np.linalg.solve(m, np.array([g["OL"], g["UL"]]))
    a = g["mL"] - b * g["mO"] - c * g["mU"]
    ss_res = max(g["LL"] - b * g["OL"] - c * g["UL"], 0.0)
    return float(a), float(b), float(c), (1.0 - ss_res / g["LL"] if g["LL"] > 0 else 1.0)


def _groups(lf: pl.LazyFrame, cached_served: bool) -> tuple[dict[str, Moments], dict[str, int]]:
    """Per model (and _ALL): counts, sums, ranges, means and centred moments of O, L, U (timed calls) and U, T
    (calls with a TTFT), and the middle U; and the calls per model."""
    served = pl.col("cached").cast(pl.Float64).fill_null(0.0) if cached_served else pl.lit(0.0)
    timed = lf.filter(pl.col("latency").is_not_null()).select(
        pl.col("model"), **_RAW, U=pl.col("input").cast(pl.Float64) - served)
    both = pl.concat([timed, timed.with_columns(model=pl.lit(_ALL))])
    t = pl.col("T").is_not_null()
    first = both.group_by("model").agg(
        n=pl.len(), sO=pl.col("O").sum(), minO=pl.col("O").min(), maxO=pl.col("O").max(),
        mO=pl.col("O").mean(), mL=pl.col("L").mean(), mU=pl.col("U").mean(), minU=pl.col("U").min(),
        maxU=pl.col("U").max(), nt=t.sum(), gen=(pl.col("O") - 1).clip(lower_bound=0).filter(t).sum(),
        dur=(pl.col("L") - pl.col("T")).filter(t).sum(), mX=pl.col("U").filter(t).mean(),
        mT=pl.col("T").filter(t).mean(), minX=pl.col("U").filter(t).min(), maxX=pl.col("U").filter(t).max())
    calls = lf.group_by("model").agg(n=pl.len())
    means, counts, us = collect(first, calls, value_counts(both, "U", by="model"))
    cen = both.join(means.lazy().select("model", "mO", "mL", "mU", "mX", "mT"), on="model")
    d = {k: pl.col(k) - pl.col("m" + k) for k in "OLU"}
    dx, dt = (pl.col("U") - pl.col("mX")).filter(t), (pl.col("T") - pl.col("mT")).filter(t)
    second = collect(cen.group_by("model").agg(
        **{a + b: (d[a] * d[b]).sum() for a, b in ("OO", "OL", "OU", "UU", "UL", "LL")},
        XX=(dx * dx).sum(), XT=(dx * dt).sum(), TT=(dt * dt).sum()))[0]
    out = {r["model"]: dict(r) for r in means.iter_rows(named=True)}
    for r in second.iter_rows(named=True):
        out[r["model"]].update(r)
    for m, part in us.group_by("model"):
        u, n = part.get_column("value").to_numpy(), part.get_column("n").to_numpy()
        g = out[m[0]]
        g["midU"] = float(u[np.searchsorted(np.cumsum(n), g["n"] // 2, side="right")])
    return out, {m: n for m, n in counts.iter_rows() if m is not None}


def _varies(n: int, lo: float, hi: float, mean: float) -> bool:
    """Whether x spreads enough to fit a slope: max − min ≥ max(8, 10 % of the mean)."""
    return n > 0 and hi - lo >= max(8.0, 0.10 * mean)


def _decode(g: Moments) -> DecodeRegression:
    """regression.regress's result for one group, from its sums."""
    n = g["n"]
    out: DecodeRegression = {"decode_tps": None, "intercept_s": None, "r2": None, "refused": None,
                           "method": "latency ~ output"}
    if n < MIN_POINTS:
        out["refused"] = f"{n} point(s), fewer than {MIN_POINTS}"
        return out
    lo, hi = g["minO"], g["maxO"]
    if hi - lo < max(8.0, 0.10 * g["sO"] / n):
        out["refused"] = f"output lengths barely vary ({lo:g}–{hi:g} tokens)"
        return out
    r = g["OU"] / np.sqrt(g["OO"] * g["UU"]) if g["OO"] > 0 and g["UU"] > 0 else np.nan
    if n >= MIN_POINTS + 1 and g["maxU"] - g["minU"] > 16 and np.isfinite(r) and abs(r) < 0.95:
        a, b, c, r2 = _plane(g)
        out["method"] = "latency ~ output + uncached input"
        a = a + c * g["midU"]
    else:
        a, b, r2 = _line(n, g["mO"], g["mL"], g["OO"], g["OL"], g["LL"])
    if b <= 0:
        out["refused"], out["r2"] = f"slope {b:.3g} s/token is not positive", r2
        return out
    if 1.0 / b > TPS_RANGE[1]:
        out["refused"] = (f"slope {b:.3g} s/token: over {TPS_RANGE[1]:.0e} tokens/s, the latencies do not grow "
                          "with the output")
        out["r2"] = r2
        return out
    out["decode_tps"], out["intercept_s"], out["r2"] = 1.0 / b, a, r2
    return out


def _fit_one(g: Moments, calls: int, label: str) -> tuple[Rates | None, FitRow]:
    reg = _decode(g)
    row: FitRow = {"model": label, "calls": calls, "points": int(g["n"]), "decode_tps": reg["decode_tps"],
                   "intercept_s": reg["intercept_s"], "r2": reg["r2"], "refused": reg["refused"],
                   "method": reg["method"]}
    decode, dsrc = reg["decode_tps"], f"{reg['method']} (least squares)"
    if decode is None and g["nt"] >= 3 and g["gen"] > 0 and g["dur"] > 0:  # fixed-length answers
        decode, dsrc = g["gen"] / g["dur"], "Σ(output − 1) / Σ(latency − TTFT)"
        row["refused"] = None
    if decode is None:
        return None, row
    if g["nt"] >= 3:
        n, lo, hi, mx = int(g["nt"]), g["minX"], g["maxX"], g["mX"]
        fit = (g["mX"], g["mT"], g["XX"], g["XT"], g["TT"])
        psrc = "TTFT = a + b·uncached input (least squares)"
    else:  # y = L − O/decode: its mean and moments follow from those of L and O
        n, lo, hi, mx, k = int(g["n"]), g["minU"], g["maxU"], g["mU"], 1.0 / decode
        fit = (g["mU"], g["mL"] - k * g["mO"], g["UU"], g["UL"] - k * g["OU"],
               g["LL"] - 2 * k * g["OL"] + k * k * g["OO"])
        psrc = "intercepts (latency − output/decode_tps) = a + b·uncached input"
    row["prefill_points"] = n
    if n < 3 or not _varies(n, lo, hi, mx):
        row["prefill_refused"] = f"{n} point(s) or input lengths that barely vary"
        return None, row
    a, b, r2 = _line(n, *fit)
    row["prefill_a"], row["prefill_b"], row["prefill_r2"] = a, b, r2
    if b <= 0:
        row["prefill_refused"] = f"prefill slope {b:.3g} s/token is not positive"
        return None, row
    if 1.0 / b > TPS_RANGE[1]:
        row["prefill_refused"] = (f"prefill slope {b:.3g} s/token: over {TPS_RANGE[1]:.0e} tokens/s, the times do "
                                  "not grow with the input")
        return None, row
    row["prefill_tps"], row["prefill_a_s"] = 1.0 / b, max(a, 0.0)
    return Rates(prefill_tps=1.0 / b, decode_tps=decode, prefill_a_s=max(a, 0.0),
                 source="fitted from the traffic's latencies", prefill_source=psrc, decode_source=dsrc,
                 prefill_input_range=(float(lo), float(hi)),
                 fit={"model": label, "points": int(g["n"]), "r2": reg["r2"], "prefill_r2": r2,
                      "intercept_s": reg["intercept_s"]},
                 conditions=("rates fitted from this traffic include whatever queueing and batching it saw",)), row


_EMPTY = {"n": 0, "sO": 0.0, "nt": 0}


def fit_rates(calls: Sequence[TrafficCall] | TrafficLoad | pl.LazyFrame | pl.DataFrame, *,
              cached_served: bool = False) -> tuple[dict[str | None, Rates], list[FitRow]]:
    """Rates fitted from the traffic's own latencies: per model, and pooled (key None).

    ``calls``: TrafficCall records or a frame of the canonical columns.  Returns the
    rate book (empty when nothing could be fitted) and one row per fit with its
    points, R² and, where refused, why.
    """
    lf = as_frame(calls)
    groups, per_model = _groups(lf, cached_served)
    n_all = int(collect(lf.select(n=pl.len()))[0].item())
    book: dict[str | None, Rates] = {}
    rows: list[FitRow] = []
    if len(per_model) > 1 or (per_model and next(iter(per_model.values())) < n_all):
        for m in sorted(per_model):
            r, row = _fit_one(groups.get(m, _EMPTY), per_model[m], m)
            rows.append(row)
            if r is not None:
                book[m] = r
    label = "all calls" if len(per_model) != 1 else next(iter(per_model))
    r, row = _fit_one(groups.get(_ALL, _EMPTY), n_all, label)
    rows.append(row)
    if r is not None:
        book[None] = r
    return book, rows
