"""Drift: did an arm's decode rate move during the run?

A sentinel (a short fixed prompt with a forced output length) runs at the
start and end of each arm's block.  Its decode rate is (completion_tokens −
1) / (latency − TTFT), or the server's predicted_n / predicted_ms where given.
change = (end − start) / start; beyond the tolerance (default 10 %) the arm
is marked as drifting, and every comparison that involves it is not citable
("drifted", see :mod:`.guard`).
"""

from __future__ import annotations

from typing import Any

from .dataset import Dataset
from .warning_kinds import RunWarning, WarningKind


def sentinel_rate(rec: dict[str, Any]) -> float | None:
    if rec.get("error") is not None:
        return None
    t = rec.get("timings") or {}
    if t.get("predicted_ms") and t.get("predicted_n"):
        return t["predicted_n"] / t["predicted_ms"] * 1000.0
    n, ttft = rec.get("completion_tokens"), rec.get("ttft_s")
    if n and n > 1 and ttft is not None and rec["latency_s"] > ttft:
        return (n - 1) / (rec["latency_s"] - ttft)
    return None


def drift(ds: Dataset) -> tuple[list[dict[str, Any]], list[RunWarning]]:
    tol = ds.config["experiment"].get("drift_tolerance", 0.10)
    out: list[dict[str, Any]] = []
    warnings: list[RunWarning] = []
    for arm in ds.arms:
        recs = {s.get("position"): s for s in ds.sentinels if s["arm"] == arm}
        start, end = recs.get("start"), recs.get("end")
        if not start or not end:
            continue
        r0, r1 = sentinel_rate(start), sentinel_rate(end)
        change = (r1 - r0) / r0 if r0 and r1 is not None else None
        drifted = change is not None and abs(change) > tol
        out.append({"arm": arm, "start_tps": r0, "end_tps": r1, "change": change, "drifted": drifted,
                    "tolerance": tol})
        if drifted:
            warnings.append(RunWarning(WarningKind.DRIFT, f"drift: arm {arm!r} decoded at {r0:.1f} tok/s at the start "
                                       f"and {r1:.1f} tok/s at the end ({change:+.0%}, tolerance {tol:.0%}); its "
                                       "comparisons are not citable", arm))
        elif change is None:
            warnings.append(RunWarning(WarningKind.DRIFT_UNKNOWN,
                                       f"drift: arm {arm!r}: a sentinel failed, drift unknown", arm))
    return out, warnings


def drifted_arms(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Arm → what drifted, for the arms whose sentinels moved beyond tolerance (the guard's input)."""
    return {d["arm"]: f"decode {d['start_tps']:.1f} → {d['end_tps']:.1f} tok/s, {d['change']:+.0%} "
                      f"between its sentinels, tolerance {d['tolerance']:.0%}"
            for d in rows if d["drifted"]}
