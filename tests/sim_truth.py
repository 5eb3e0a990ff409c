"""What the simulator logged it did (``/sim/truth``), for the tests that check an accuracy against it.

The simulator paces each request on its loop clock and records the times it actually took: on a loaded machine
its loop wakes late, and every recorded (and reported: llama.cpp's ``timings``) duration is longer than its set
rates make it.  A measurement the tool makes of the simulator is compared with these records, which the load
moved as it moved the measurement, not with the set rates; what the load added is read off the records too
(:func:`lateness`) where a tolerance must allow for it.
"""

from __future__ import annotations

import json
import statistics
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

import limits

from leverbench.engines.simulator import SimConfig, llama_clocks_ms


def fetch(url: str) -> list[dict[str, Any]]:
    """``GET /sim/truth`` of the simulator at *url* (one in another process): its records so far, in completion
    order."""
    with urllib.request.urlopen(url + "/sim/truth", timeout=limits.HTTP_S) as r:  # noqa: S310 (loopback)
        return json.loads(r.read())


def truth_key(t: Mapping[str, Any]) -> tuple[float, float]:
    """The llama.cpp timings (prompt_ms, predicted_ms) the simulator sent with the answer its record *t* is of:
    they identify the record exactly."""
    return llama_clocks_ms(t["prefill_s"], t["first_step_s"], t["decode_s"])


def records_of(calls: Iterable[Mapping[str, Any]], truth: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The simulator's record of each ledger call (in the calls' order), matched by the timings it sent."""
    by = {truth_key(t): t for t in truth if t["decode_s"] > 0}
    return [by[(c["timings"]["prompt_ms"], c["timings"]["predicted_ms"])] for c in calls]


def engine_s(t: Mapping[str, Any]) -> float:
    """The seconds the simulator worked on the request (llama.cpp's prompt_ms + predicted_ms): its prefill
    with the first decode step, and the rest of its decode."""
    return t["prefill_s"] + t["decode_s"]


def paced_s(cfg: SimConfig, t: Mapping[str, Any]) -> float:
    """The seconds :func:`engine_s` would be on an idle machine: the simulator's own pacing of the request's
    tokens (no drafter, no drift, no quadratic or context terms: the tests that use this set none)."""
    assert not (cfg.draft_k or cfg.drift_per_s or cfg.speed_jitter or cfg.cold_requests or cfg.prefill_quadratic
                or cfg.decode_slowdown_per_ctx), "paced_s knows only the plain pacing"
    return (t["prompt_tokens"] - t["cached_tokens"]) / cfg.prefill_tps + t["completion_tokens"] / cfg.decode_tps


def lateness(cfg: SimConfig, t: Mapping[str, Any]) -> float:
    """How much longer the simulator took over the request than its pacing: the load on the machine (its loop
    woke late), as it recorded it."""
    return engine_s(t) - paced_s(cfg, t)


def decode_tps(records: Iterable[Mapping[str, Any]]) -> float:
    """The decode speed the simulator delivered over *records*: tokens after the first per second from the
    first token to the last (llama.cpp's predicted_n / predicted_ms, pooled)."""
    rs = list(records)
    return sum(t["completion_tokens"] - 1 for t in rs) / sum(t["decode_s"] - t["first_step_s"] for t in rs)


def probe(records1: Iterable[Mapping[str, Any]], records2: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The probes' two-point measurement (:func:`leverbench.analysis.rates.probes.measure`) made on the simulator's
    records of the same calls instead of the client's clock: c the median tokens, f the median decode time (first
    token to last), t the median time the simulator had the request (from its arrival, the reading and parsing of
    its body included, to its last byte), at each of the two lengths; decode_tps = (c2 − c1) / (f2 − f1),
    prefill_s = t1 − (c1 − 1) / decode_tps."""
    r1, r2 = list(records1), list(records2)
    c1, c2 = (statistics.median(t["completion_tokens"] for t in rs) for rs in (r1, r2))
    f1, f2 = (statistics.median(t["decode_s"] - t["first_step_s"] for t in rs) for rs in (r1, r2))
    t1 = statistics.median(t["end"] - t["arrival"] for t in r1)
    tps = (c2 - c1) / (f2 - f1)
    return {"decode_tps": tps, "prefill_s": t1 - (c1 - 1) / tps}
