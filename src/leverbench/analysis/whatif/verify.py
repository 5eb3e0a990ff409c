"""Forecast, then verify: a what-if's figures against the same calls served for real (issue 15, part 5).

``whatif --verify`` replays the trace slice on the run's arms (a ``[[load]] mode = "trace"`` stage) and
compares.  Measured, per arm, from the stage's ``load`` records (its latest execution; warm-up and
retried attempts left out, as :mod:`.load` does; failed calls counted, never dropped, and left out of the
latencies):

    ttft, e2e      from the call's scheduled send time (:func:`.load.ttft`, :func:`.load.e2e`): p50, p99
    output_tps     Σ completion tokens / (last end − first scheduled send)
    busy_s         the length of the union of the calls' [ready, ready + latency] intervals: the time the
                   server had at least one of them
    GPU-h per 1000 calls = busy_s / n × gpus × 1000 / 3600
    cached_share   Σ cached tokens / Σ prompt tokens (what the engine's cache served)
    template_tokens  mean of prompt tokens − target input tokens: what the engine's chat template added to
                   each replayed prompt (whatif --template-tokens)

    error          = forecast / measured − 1, per figure (+10 %: the forecast 10 % too high)
    service        the engine's own seconds for the calls (llama.cpp timings: Σ prompt_ms + predicted_ms) beside
                   the rate model's for the same calls as served (Σ prefill_s(prompt_n, cache_n) + decode_s(prompt
                   + 1, predicted_n − 1)): its error says how far the engine's speed during the verification was
                   from the calibration's, apart from queueing (``service_model_s`` / ``service_s`` − 1)
    in_order_range whether the measured figure lies between the lowest and highest the forecast found over
                   the random orders of its simultaneous arrivals (where it served several: ``orders``)
    assumption_check  for an arm whose slots are known and whose slowdown was not measured (its row's
                   ``assumptions``: one at a time, in parallel without slowdown), which end each measured
                   figure lies nearer, and whether the measurement shows the forecast's one-at-a-time
                   assumption wrong (:func:`.whatif_slots.check`)

The track record (:func:`track_record`): every verification stored with the run, summarised per arm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from ..load.stages import columns, distribution, e2e, load_records, ready, ttft
from ..rates.rate_model import decode_seconds, prefill_seconds
from .forecast import ranking
from .slots import check

if TYPE_CHECKING:
    from ...json_types import JSONValue
    from ...ledger.rows import CallRow, TimingsRow
    from ...schema.rate_rows import RateModelFits
    from ...schema.whatif_rows import (
        ErrorTrack,
        Forecast,
        ForecastArm,
        MeasuredArm,
        Ranked,
        TrackRecord,
        VerificationEntry,
    )
    from .orders import Compared

COMPARED: tuple[Compared, ...] = ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "output_tps",
                                  "gpu_hours_per_1000_calls")


def busy_seconds(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of the intervals [start_i, end_i]."""
    order = np.argsort(starts)
    total, cur_a, cur_b = 0.0, None, None
    for a, b in zip(starts[order], ends[order]):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return float(total)


def _final(rs: Sequence[CallRow]) -> list[CallRow]:
    """The calls that count: warm-up and retried attempts left out (failed calls kept)."""
    return [r for r in rs if not r.get("retried") and not r.get("warmup")]


def measured_row(rs: Sequence[CallRow], gpus: float = 1.0) -> MeasuredArm:
    """One arm's measured figures from its stage records (see the module docstring)."""
    final = _final(rs)
    ok = [r for r in final if r.get("error") is None]
    c = columns(ok)
    t, e = distribution(ttft(c)), distribution(e2e(c))
    start = ready(c)
    end = start + np.nan_to_num(c["latency_s"])
    sched = np.where(np.isnan(c["scheduled_t"]), c["t_send"], c["scheduled_t"])
    span = float(end.max() - sched.min()) if ok else 0.0
    busy = busy_seconds(start, end) if ok else 0.0
    n = len(final)
    prompt = float(np.nansum(c["prompt_tokens"])) if ok else 0.0
    cached = sum(float(r.get("cached_tokens") or 0) for r in ok)
    extra = [sent - target for r in ok
             if (sent := r.get("prompt_tokens")) is not None and (target := r.get("target_input_tokens")) is not None
             and r.get("step") == 0]
    gh = busy / n * gpus * 1000.0 / 3600.0 if n else None
    return {"calls": n, "failed": n - len(ok),
            "ttft_p50_s": t["p50"] if t else None, "ttft_p99_s": t["p99"] if t else None,
            "e2e_p50_s": e["p50"] if e else None, "e2e_p99_s": e["p99"] if e else None,
            "output_tps": float(np.nansum(c["completion_tokens"])) / span if span > 0 else None,
            "busy_s": busy, "gpu_hours_per_1000_calls": gh,
            "prompt_tokens": prompt, "cached_share": cached / prompt if prompt else None,
            "template_tokens": sum(extra) / len(extra) if extra else None}


class _Timings(NamedTuple):
    """What :func:`service_seconds` reads of a call's llama.cpp ``timings``."""

    prompt_n: float
    cache_n: float
    prompt_ms: float
    predicted_n: float
    predicted_ms: float


def _timings(t: TimingsRow | None) -> _Timings | None:
    """A call's timings, ``cache_n`` 0 where it has none; None where it lacks one of the others, or one is no
    number (a non-finite sample, which the ledger stores as text)."""
    t = t or {}
    prompt_n, prompt_ms = t.get("prompt_n"), t.get("prompt_ms")
    predicted_n, predicted_ms = t.get("predicted_n"), t.get("predicted_ms")
    cache_n = t.get("cache_n") or 0
    if isinstance(prompt_n, (int, float)) and isinstance(cache_n, (int, float)) and \
            isinstance(prompt_ms, (int, float)) and isinstance(predicted_n, (int, float)) and \
            isinstance(predicted_ms, (int, float)):
        return _Timings(prompt_n, cache_n, prompt_ms, predicted_n, predicted_ms)
    return None


def service_seconds(rs: Sequence[CallRow], model: RateModelFits | None) -> tuple[float, float] | None:
    """(the rate model's seconds, the engine's own seconds) for the successful calls as the engine served them
    (see the module docstring: ``service``); None without a model or when a call lacks llama.cpp's timings."""
    ok = [r for r in _final(rs) if r.get("error") is None]
    tm = [_timings(r.get("timings")) for r in ok]
    served = [t for t in tm if t is not None]
    if not model or not model.get("prefill") or not model.get("decode") or not ok or len(served) < len(tm):
        return None
    forecast = sum(prefill_seconds(model, t.prompt_n, t.cache_n)
                   + decode_seconds(model, t.prompt_n + t.cache_n + 1, max(t.predicted_n - 1, 0))
                   for t in served)
    return forecast, sum(t.prompt_ms + t.predicted_ms for t in served) / 1000.0


def measured(records: Iterable[Mapping[str, object]], stage: str, gpus: Mapping[str, float] | None = None,
             models: Mapping[str, RateModelFits] | None = None) -> dict[str, MeasuredArm]:
    """Per arm, :func:`measured_row` of the stage's latest execution, with ``service_model_s`` and
    ``service_s`` (:func:`service_seconds` on the arm's rate model in *models*, where it applies)."""
    out: dict[str, MeasuredArm] = {}
    for (arm, st), rs in load_records(records).items():
        if st == stage and rs:
            out[arm] = measured_row(rs, (gpus or {}).get(arm, 1.0))
            svc = service_seconds(rs, (models or {}).get(arm))
            out[arm]["service_model_s"], out[arm]["service_s"] = svc if svc else (None, None)
    return out


def error(forecast: float | None, actual: float | None) -> float | None:
    """forecast / measured − 1 (None when either is missing or the measured value is 0)."""
    if forecast is None or actual is None or actual == 0:
        return None
    return forecast / actual - 1.0


def compare(result: Forecast, meas: Mapping[str, MeasuredArm],
            knobs: Mapping[str, Mapping[str, JSONValue]]) -> Forecast:
    """The forecast with, per arm, ``measured`` and ``error`` (per compared figure), and the measured ranking
    beside the forecast one (``ranking_measured``, ``ranking_matches``: the same order of arms)."""
    out: Forecast = {**result}
    rows: list[ForecastArm] = []
    for row in result["arms"]:
        m = meas.get(row["arm"])
        band, assumed = row.get("orders"), row.get("assumptions")
        errors: dict[str, float | None] | None = None
        in_range: dict[str, bool] | None = None
        if m:
            errors = {k: error(row.get(k), m.get(k)) for k in COMPARED}
            if m.get("service_s"):
                errors["service_s"] = error(m["service_model_s"], m["service_s"])
            if band:
                in_range = {k: band[k][0] <= x <= band[k][1] for k in COMPARED
                            if k in band and (x := m.get(k)) is not None}
        rows.append({**row, "measured": m, "error": errors, "in_order_range": in_range,
                     "assumption_check": check(assumed, m, COMPARED) if m and assumed else None})
    out["arms"] = rows
    mrows: list[Ranked] = [{"arm": a, "gpu_hours_per_1000_calls": m["gpu_hours_per_1000_calls"],
                            "e2e_p50_s": m["e2e_p50_s"]}
                           for a, m in meas.items() if any(r["arm"] == a for r in result["arms"])]
    rank_m = ranking(mrows, result["reference"], knobs) if mrows else []
    out["ranking_measured"] = rank_m
    out["ranking_matches"] = [r["arm"] for r in rank_m] == [r["arm"] for r in result["ranking"]]
    return out


def track_record(entries: Sequence[VerificationEntry]) -> TrackRecord | None:
    """Earlier verifications of this run's forecasts: how many, and per arm and figure the errors (in order)
    with their largest absolute value; how often the ranking matched."""
    if not entries:
        return None
    per_arm: dict[str, dict[str, list[float]]] = {}
    for e in entries:
        for a in e.get("arms") or []:
            for k, v in (a.get("error") or {}).items():
                if v is not None:
                    per_arm.setdefault(a["arm"], {}).setdefault(k, []).append(v)
    return {"verifications": len(entries),
            "ranking_matched": sum(1 for e in entries if e.get("ranking_matches")),
            "last": entries[-1].get("at"),
            "errors": {arm: {k: _track(v) for k, v in figs.items()} for arm, figs in per_arm.items()}}


def _track(values: list[float]) -> ErrorTrack:
    return {"values": values, "max_abs": max(abs(x) for x in values)}
