"""The traffic's operating point for ``analyze`` (issue 25 part 5): its arrival rate and calls in flight
(:mod:`..base.operating_point` has the definitions), from the calls that record an arrival time.

A call's duration is its recorded latency where the log has one, else its service time at the rates of its
model, alone (prefill_s + decode_s = a + (I − C_served) / prefill_tps + O / decode_tps: :mod:`.analyze`), so
without queueing: where the server queued, the calls in flight were more.  The two columns are collected (two
numbers per call with an arrival: the one part of the analysis that holds the calls rather than sums of them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ..base.operating_point import operating_point
from .sums import NO_MODEL, collect

if TYPE_CHECKING:
    from ...schema.load_lever_rows import OperatingPoint


def traffic_operating_point(lf: pl.LazyFrame, rates: pl.DataFrame, cached_served: bool) -> OperatingPoint | None:
    """The operating point of the calls of *lf* that have an arrival time (at least 2), at *rates*
    (:func:`.sums.rate_table`); None without."""
    inp, out = pl.col("input").cast(pl.Float64), pl.col("output").cast(pl.Float64)
    served = pl.col("cached").cast(pl.Float64).fill_null(0.0) if cached_served else pl.lit(0.0)
    alone = pl.col("a") + (inp - served) / pl.col("ptps") + out / pl.col("dtps")
    frame = collect(lf.filter(pl.col("arrival").is_not_null()).with_columns(pl.col("model").fill_null(NO_MODEL))
                    .join(rates.lazy(), on="model", how="left")
                    .select(arrival=pl.col("arrival"), duration=pl.coalesce(pl.col("latency"), alone),
                            recorded=pl.col("latency").is_not_null()))[0]
    if frame.height < 2:
        return None
    recorded = int(frame.get_column("recorded").sum())
    source = ("each call's recorded latency" if recorded == frame.height else
              "each call's service time at the rates, alone (no queueing: a lower bound where the server queued)"
              if recorded == 0 else
              f"recorded latency ({recorded:,} calls), else the service time at the rates, alone")
    return operating_point(frame.get_column("arrival").to_numpy(), frame.get_column("duration").to_numpy(), source)
