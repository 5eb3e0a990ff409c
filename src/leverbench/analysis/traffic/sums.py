"""The traffic analysis's passes over the calls: sums per (model, input-length bucket), value counts, moments.

Every number :mod:`.traffic` reports is a sum (or a count) over the calls,
grouped by model and bucket, or a percentile, and every percentile here is of
a token count, read exactly from its value counts.  So each pass is a polars
aggregation that its streaming engine runs in memory bounded by the number of
groups and distinct lengths, never by the number of calls: a frame spilled to
disk by the reader (:mod:`leverbench.workload.traces.columnar`) is scanned,
never loaded.  Pure functions of the frame (reading a spilled frame is the
only I/O, and it is the frame's own).

Per-call formulas (with the rates of the call's model; :mod:`.traffic` has them all):
prefill_s = a + I/prefill_tps (a + (I − C)/prefill_tps where a cache already served C), decode_s =
O/decode_tps, queue_s = max(0, TTFT − (a + (I − C_served)/prefill_tps)) where measured, else 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Literal, Sequence

import numpy as np
import polars as pl
from typing_extensions import TypeAlias

from ...workload.traces.records import COLUMNS, TrafficLoad, calls_frame
from .rates import RateBook, rates_for

if TYPE_CHECKING:
    from polars.expr.whenthen import ChainedThen, Then

    from ...schema.traffic_rows import CountDistribution, PhaseSums
    from ...workload.traces.records import TrafficCall

#: The keys of :class:`~leverbench.schema.traffic_rows.PhaseSums` that hold a number (a count or a sum over calls).
SumKey: TypeAlias = Literal["calls", "input", "output", "prefill", "decode", "queue", "cached", "cached_calls",
                            "excess", "ttft_calls", "beyond"]

BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("<1k", 0, 1024), ("1k–4k", 1024, 4096), ("4k–16k", 4096, 16384),
    ("16k–64k", 16384, 65536), ("≥64k", 65536, math.inf),
)
NO_MODEL = ""  # the group of calls whose model is not recorded


def as_frame(calls: Sequence[TrafficCall] | TrafficLoad | pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    """The calls as a LazyFrame of the canonical columns: a TrafficLoad's frame, a (Lazy)DataFrame, or records."""
    if isinstance(calls, TrafficLoad):
        lf = calls.frame
    elif isinstance(calls, pl.LazyFrame):
        lf = calls
    elif isinstance(calls, pl.DataFrame):
        lf = calls.lazy()
    else:
        lf = calls_frame(calls).lazy()
    have = set(lf.collect_schema().names())
    return lf.with_columns(*[pl.lit(None, dtype).alias(c) for c, dtype in COLUMNS.items() if c not in have])


def collect(*frames: pl.LazyFrame) -> list[pl.DataFrame]:
    """Collect several aggregations at once, with the streaming engine, each scanning the frame itself (a scan
    shared between them would be cached whole, in memory)."""
    return pl.collect_all(list(frames), engine="streaming", optimizations=pl.QueryOptFlags(comm_subplan_elim=False))


def bucket_expr(col: str = "input") -> pl.Expr:
    """The input-length bucket of each call (BUCKETS), by its name."""
    e: Then | ChainedThen = pl.when(pl.col(col) < BUCKETS[0][2]).then(pl.lit(BUCKETS[0][0]))
    for name, _lo, hi in BUCKETS[1:-1]:
        e = e.when(pl.col(col) < hi).then(pl.lit(name))
    return e.otherwise(pl.lit(BUCKETS[-1][0]))


def value_counts(lf: pl.LazyFrame, col: str, by: str | None = None) -> pl.LazyFrame:
    """(``by``,) value, n: how many calls have each value of ``col`` (nulls left out), sorted by value."""
    keys = [by] if by else []
    return (lf.filter(pl.col(col).is_not_null()).group_by(*keys, pl.col(col).alias("value"))
            .agg(n=pl.len()).sort(*keys, "value"))


def percentiles(values: np.ndarray, counts: np.ndarray, qs: Sequence[float]) -> list[float]:
    """np.percentile(xs, qs) (linear interpolation) of the multiset with these sorted values and counts."""
    n = int(counts.sum())
    ends = np.cumsum(counts)
    out = []
    for q in np.asarray(qs, dtype=float) / 100.0:
        pos = q * (n - 1)
        lo = int(math.floor(pos))
        a = float(values[np.searchsorted(ends, lo, side="right")])
        b = float(values[np.searchsorted(ends, min(lo + 1, n - 1), side="right")])
        t = pos - lo
        out.append(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)  # NumPy's _lerp
    return out


def distribution_of_counts(values: np.ndarray, counts: np.ndarray) -> CountDistribution | None:
    """p50, p90, p99 (linear interpolation, NumPy's default), mean and max of a multiset of counts."""
    if counts.size == 0 or counts.sum() == 0:
        return None
    p50, p90, p99 = percentiles(values, counts, [50, 90, 99])
    n = float(counts.sum())
    return {"p50": p50, "p90": p90, "p99": p99, "mean": float((values.astype(float) * counts).sum() / n),
            "max": float(values.max())}


def rate_table(models: Iterable[str | None], book: RateBook) -> pl.DataFrame:
    """Per model (NO_MODEL for None): its rates' prefill a, tps, decode tps, input range end."""
    rows = []
    for m in models:
        r = rates_for(book, m or None)
        rows.append({"model": m if m is not None else NO_MODEL, "a": r.prefill_a_s, "ptps": r.prefill_tps,
                     "dtps": r.decode_tps, "hi": (r.prefill_input_range or (0, math.inf))[1]})
    return pl.DataFrame(rows, schema={"model": pl.String, "a": pl.Float64, "ptps": pl.Float64, "dtps": pl.Float64,
                                      "hi": pl.Float64})


def phase_sums(lf: pl.LazyFrame, rates: pl.DataFrame, *, cap: float, assumed_share: float | None,
               cached_served: bool, queue: bool, cache_on: bool = False) -> pl.LazyFrame:
    """Per (model, bucket): calls, Σ prefill/decode/queue s, Σ cached tokens (recorded, or the assumed share where a
    call records none) and the calls that have them, Σ max(0, O − cap), calls with TTFT and calls beyond the
    measured input: the sums a lever's traffic saving is a formula of (:class:`leverbench.levers.TrafficSaving`).
    ``cache_on`` (a cache already served the recorded cached tokens): prefill = a + (I − C)/prefill_tps, the
    time actually spent."""
    inp, out, cached = (pl.col(c).cast(pl.Float64) for c in ("input", "output", "cached"))
    a, ptps, dtps = pl.col("a"), pl.col("ptps"), pl.col("dtps")
    lever_cached = cached if assumed_share is None else cached.fill_null((assumed_share * inp).floor())
    served = cached.fill_null(0.0) if cached_served else pl.lit(0.0)
    q = (pl.when(pl.col("ttft").is_not_null())
         .then(pl.max_horizontal(0.0, pl.col("ttft") - (a + (inp - served) / ptps)))
         .otherwise(0.0)) if queue else pl.lit(0.0)
    joined = (lf.with_columns(pl.col("model").fill_null(NO_MODEL), bucket=bucket_expr())
              .join(rates.lazy(), on="model", how="left"))
    decode = out / dtps
    return joined.group_by("model", "bucket").agg(
        calls=pl.len(), input=inp.sum(), output=out.sum(),
        prefill=(a + (inp - (served if cache_on else 0.0)) / ptps).sum(), decode=decode.sum(),
        queue=q.sum(), cached=lever_cached.sum(), cached_calls=lever_cached.is_not_null().sum(),
        excess=pl.max_horizontal(0.0, out - cap).sum(), ttft_calls=pl.col("ttft").is_not_null().sum(),
        beyond=(inp > pl.col("hi")).sum())


def total(rows: Iterable[PhaseSums], key: SumKey) -> float:
    return float(sum(r[key] or 0.0 for r in rows))
