"""Fixed-length probes: prefill and decode from two forced output lengths.

The same prompt is sent with the output forced to n1 and n2 tokens.  With t1,
t2 the median latencies and c1, c2 the generated counts the engine reported
(normally n1 and n2):

    decode_tps = (c2 − c1) / (t2 − t1)
    prefill_s  = t1 − c1 / decode_tps

The check against the regression passes when |probe − regression| /
regression ≤ tolerance (default 5 %) for the same arm and case.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .dataset import Dataset
from .stats import median, rel_diff
from .warning_kinds import RunWarning, WarningKind


def two_point(c1: float, t1: float, c2: float, t2: float) -> tuple[float, float] | None:
    """(prefill_s, decode_tps) from two (tokens, latency) points, or None if not solvable."""
    if c2 <= c1 or t2 <= t1:
        return None
    tps = (c2 - c1) / (t2 - t1)
    return t1 - c1 / tps, tps


def probes(ds: Dataset, decomposition: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[RunWarning]]:
    cfg = ds.config.get("probes") or {}
    tol = cfg.get("tolerance", 0.05)
    warnings: list[RunWarning] = []
    by: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for p in ds.probes:
        by[(p["arm"], p["case"], p["probe_tokens"])].append(p)
    reg = {(d["arm"], d["case"]): d for d in decomposition}
    out = []
    keys = sorted({(a, c) for a, c, _ in by}, key=lambda k: (ds.arms.index(k[0]) if k[0] in ds.arms else 99, k[1]))
    for arm, case in keys:
        ns = sorted({n for a, c, n in by if (a, c) == (arm, case)})
        if len(ns) < 2:
            continue
        n1, n2 = ns[0], ns[-1]
        rows = {}
        for n in (n1, n2):
            recs = [r for r in by[(arm, case, n)] if not r.get("retried")]  # an attempt sent again is not a probe
            ok = [r for r in recs if r.get("error") is None and r.get("completion_tokens") is not None]
            failed = len(recs) - len(ok)
            if failed:
                warnings.append(RunWarning(WarningKind.PROBE_FAILED, f"probe {arm}/{case} at {n} tokens: {failed} of "
                                           f"{len(recs)} call(s) failed", arm, case))
            disobeyed = [r["completion_tokens"] for r in ok if r["completion_tokens"] != n]
            if disobeyed:
                warnings.append(RunWarning(WarningKind.PROBE_DISOBEYED,
                                           f"probe {arm}/{case}: asked for {n} output tokens, "
                                           f"the engine generated {sorted(set(disobeyed))} in {len(disobeyed)} of "
                                           f"{len(ok)} call(s) (it did not honour ignore_eos/min_tokens); the actual "
                                           "counts were used", arm, case))
            rows[n] = ok
        entry: dict[str, Any] = {"arm": arm, "case": case, "n1": n1, "n2": n2,
                                 "repeats": min(len(rows[n1]), len(rows[n2])), "prefill_s": None, "decode_tps": None,
                                 "input_tokens": None, "cached_tokens": None}
        if rows[n1] and rows[n2]:
            c1 = median([r["completion_tokens"] for r in rows[n1]])
            c2 = median([r["completion_tokens"] for r in rows[n2]])
            t1 = median([r["latency_s"] for r in rows[n1]])
            t2 = median([r["latency_s"] for r in rows[n2]])
            entry.update(t1_s=t1, t2_s=t2, c1=c1, c2=c2)
            entry["input_tokens"] = median([r["prompt_tokens"] for r in rows[n1] + rows[n2]
                                            if r.get("prompt_tokens") is not None] or [0]) or None
            cached = [r["cached_tokens"] if r.get("cached_tokens") is not None
                      else (r.get("timings") or {}).get("cache_n")
                      for r in rows[n1] + rows[n2]]
            cached = [c for c in cached if c is not None]
            entry["cached_tokens"] = median(cached) if cached else None
            sol = two_point(c1, t1, c2, t2)
            if sol is None:
                entry["refused"] = "the longer probe was not slower: cannot separate prefill from decode"
            else:
                entry["prefill_s"], entry["decode_tps"] = sol
                if entry["prefill_s"] < 0:
                    warnings.append(RunWarning(WarningKind.PROBE_NEGATIVE_PREFILL,
                                               f"probe {arm}/{case}: solved prefill is "
                                               f"negative ({entry['prefill_s']:.3f} s); decode is not linear in output "
                                               "length here (timing noise or context-length effects)", arm, case))
        r = reg.get((arm, case))
        if r and r.get("decode_tps") and entry["decode_tps"]:
            d = rel_diff(entry["decode_tps"], r["decode_tps"])
            entry["regression_decode_tps"] = r["decode_tps"]
            entry["agreement"] = d
            entry["agrees"] = d <= tol
            if r.get("mixed_prefill") and not entry["agrees"] and r.get("method") == "latency ~ output":
                entry["check_note"] = ("the regression mixes calls with and without a cached prefix "
                                       f"(uncached input {r['uncached_input_range'][0]}–"
                                       f"{r['uncached_input_range'][1]} tokens)")
        else:
            entry["regression_decode_tps"] = r.get("decode_tps") if r else None
            entry["agreement"] = None
            entry["agrees"] = None
        out.append(entry)
    base = {p["case"]: p for p in out if p["arm"] == ds.baseline}
    for p in out:
        b = base.get(p["case"])
        if b and b.get("prefill_s") and p.get("prefill_s") and p["prefill_s"] > 0 and b["prefill_s"] > 0:
            p["prefill_speedup_vs_baseline"] = b["prefill_s"] / p["prefill_s"]
        else:
            p["prefill_speedup_vs_baseline"] = None
    return out, warnings
