"""A load level's calls, as the comparison of two arms under load resamples them (issue 25), and whether the
client kept to the level's schedule.

A **level** is one stage as an arm ran it: a closed loop at one concurrency, an open loop at one rate, a trace
replayed at one speed.  :func:`level_calls` gives each (arm, stage)'s measured calls (warm-up and retried
attempts left out, the latest execution only: :func:`.stages.load_records`) as the per-call values the load
metrics of :mod:`.stages` are taken over, with the same definitions:

- ``e2e`` and ``ttft``: every measured call, a failed one at its elapsed time (its TTFT too where it never had
  a first token: :func:`.stages.at_least_elapsed`);
- ``tpot``: the successful calls with ≥ 2 tokens only (a failed call has no token count);
- ``output``: the output tokens of each successful call, 0 for a failed one; ``good``: whether the call met
  every SLO the stage sets (a failed call never does; all False without SLOs); ``failed``.

So a percentile of ``e2e`` is the stage row's ``e2e`` percentile, and Σ output / Σ e2e is the output tokens per
second of call time (Little's law: with N calls in flight throughout, throughput = N · Σ output / Σ e2e).

**On schedule**: a level's latencies count from the scheduled send time, so a client that falls behind adds its
delay to them, but then the load it offered was lower than planned and the level does not measure what it
names.  The client kept to schedule when its lag p99 (:func:`.stages.client_lag`, over the measured calls: the
warm-up's schedule is no level's; a wait for a ``max_in_flight`` slot left out: that is the server's backlog at the
client's cap, counted in the latencies, not the client falling behind) is within

    lag_budget = max(LAG_BUDGET_S, LAG_BUDGET_SHARE × the level's e2e p50)

(10 ms, or a tenth of the typical call: a closed loop's lag is the client's own turnaround between calls, a
few ms; an open loop's grows without bound once the client cannot keep up).  A level off schedule on either
arm is marked and left out of the comparison (:mod:`..experiment.under_load`) and of the capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

import numpy as np

from .stages import at_least_elapsed, columns, e2e, load_records, meets_slo, stage_slos, tpot, ttft

if TYPE_CHECKING:
    from ...ledger.rows import CallRow
    from ...schema.load_lever_rows import LoadAxis
    from ...schema.load_rows import LoadRow, StageSlo

LAG_BUDGET_S = 0.010
LAG_BUDGET_SHARE = 0.10


@dataclass(frozen=True)
class LevelCalls:
    """One (arm, stage)'s measured calls as columns (see the module docstring)."""

    e2e: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    output: np.ndarray
    good: np.ndarray
    failed: np.ndarray

    @property
    def n(self) -> int:
        return int(self.e2e.size)


def calls_of(rs: list[CallRow]) -> LevelCalls:
    """The :class:`LevelCalls` of one (arm, stage)'s records (warm-up and retried attempts left out here)."""
    final = [r for r in rs if not r.get("retried") and not r.get("warmup")]
    c = columns(final)
    failed = np.array([r.get("error") is not None for r in final], dtype=bool)
    slos: StageSlo = stage_slos(final[0]) if final else {}
    good = (meets_slo(c, slos.get("slo_ttft_s"), slos.get("slo_tpot_s"), slos.get("slo_e2e_s")) & ~failed if slos
            else np.zeros(len(final), dtype=bool))
    return LevelCalls(e2e=e2e(c), ttft=at_least_elapsed(ttft(c), c, failed), tpot=np.where(failed, np.nan, tpot(c)),
                      output=np.where(failed, 0.0, np.nan_to_num(c["completion_tokens"])), good=good, failed=failed)


def level_calls(records: Iterable[Mapping[str, object]]) -> dict[tuple[str, str], LevelCalls]:
    """Per (arm, stage): its measured calls as :class:`LevelCalls` (the stages with at least one)."""
    out: dict[tuple[str, str], LevelCalls] = {}
    for key, rs in load_records(records).items():
        calls = calls_of(rs)
        if calls.n:
            out[key] = calls
    return out


def lag_budget(row: LoadRow) -> float:
    """max(LAG_BUDGET_S, LAG_BUDGET_SHARE × the row's e2e p50): how late the client may send (its lag p99)."""
    e2e_d = row.get("e2e")
    p50 = e2e_d.get("p50") if e2e_d else None
    return max(LAG_BUDGET_S, LAG_BUDGET_SHARE * p50) if p50 is not None else LAG_BUDGET_S


def on_schedule(row: LoadRow) -> tuple[bool, float | None, float]:
    """(whether the client kept to the level's schedule, its lag p99, the budget): lag p99 ≤ :func:`lag_budget`
    (a row without lag figures counts as on schedule: its calls had no schedule to keep)."""
    lag = row.get("client_lag")
    p99 = lag["p99"] if lag else None
    budget = lag_budget(row)
    return (p99 is None or p99 <= budget), p99, budget


def level_load(row: LoadRow) -> tuple[LoadAxis, float | None]:
    """(what the level's load is, its value): "concurrency" (a closed loop's calls in flight), "rate" (an open
    loop's requests per second) or "speed" (a trace replayed that many times faster)."""
    mode = row.get("mode")
    if mode == "open":
        return "rate", row.get("rate")
    if mode == "trace":
        return "speed", row.get("speed")
    c = row.get("concurrency")
    return "concurrency", float(c) if c is not None else None
