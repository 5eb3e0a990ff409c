"""Where the time goes: per cell, and projected for a scenario.

Per cell (mean over its successful turns): prefill = Σ over the turn's calls of
the server's prompt_ms where reported, else the client's TTFT; decode = Σ of
the server's predicted_ms, else latency − TTFT; other = turn time − prefill −
decode (harness, network, gaps between calls; queueing once measured).
share = phase / turn time.

Scenario (input I tokens, output O tokens), per arm:
    uncached = I × (1 − h), h = the share of the prompt the arm found cached
      when the same prompt came again (its probes), 0 without a cache;
    prefill_s = a + uncached / prefill_tps, fitted by least squares on the
      arm's measured (uncached tokens, prefill seconds) points: the server's
      timings where reported, else probes and first-call TTFTs (with a single
      length, proportional through zero);
    decode_s = O / decode_tps (probe rate, else the median regression rate);
    total = prefill_s + decode_s.
A lever (a condition knob in which exactly two arms differ) returns the time
it removes: total(without) − total(with), Amdahl-style: only its own phase
moves.  The recommendation names the baseline's dominant phase and the lever
that returns most.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .dataset import Dataset
from .engaged import declared
from .guard import uncontrolled_knobs
from .regression import fit_line
from .stats import median


def cell_shares(ds: Dataset) -> list[dict[str, Any]]:
    ok_turns = {t["turn_id"]: t for t in ds.turns if t.get("error") is None}
    by: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for c in ds.calls:
        if c.get("turn_id") in ok_turns:
            by[(c["arm"], c["case"])][c["turn_id"]].append(c)
    out = []
    for arm in ds.arms:
        for case in ds.cases:
            turns = by.get((arm, case))
            if not turns:
                continue
            pre, dec, tot = [], [], []
            server = True
            for tid, calls in turns.items():
                p = d = 0.0
                for c in calls:
                    t = c.get("timings") or {}
                    if "prompt_ms" in t and "predicted_ms" in t:
                        p += t["prompt_ms"] / 1000.0
                        d += t["predicted_ms"] / 1000.0
                    else:
                        server = False
                        p += c["ttft_s"] or 0.0
                        d += c["latency_s"] - (c["ttft_s"] or 0.0)
                pre.append(p)
                dec.append(d)
                tot.append(ok_turns[tid]["turn_s"])
            n = len(tot)
            mp, md, mt = sum(pre) / n, sum(dec) / n, sum(tot) / n
            other = max(0.0, mt - mp - md)
            out.append({"arm": arm, "case": case, "turn_s": mt, "prefill_s": mp, "decode_s": md, "other_s": other,
                        "prefill_share": mp / mt if mt else None, "decode_share": md / mt if mt else None,
                        "other_share": other / mt if mt else None, "source": "server timings" if server else "client"})
    return out


MIN_PREFILL_POINT_TOKENS = 16


def _cached(c: dict[str, Any]) -> int:
    v = c.get("cached_tokens")
    if v is None:
        v = (c.get("timings") or {}).get("cache_n")
    return int(v or 0)


def arm_rates(ds: Dataset, probes: list[dict[str, Any]], decomposition: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arm: decode rate, the (uncached input tokens, prefill s) points, and the cached share.

    Prefill points come from the server's own timings (prompt_n, prompt_ms) where every
    call reports them, else from the client: probes' two-point prefill and each case's
    first-call TTFT, against the uncached part of the prompt.  The cached share is
    what the arm's probes (one prompt sent repeatedly) found cached, else its overall share.
    """
    out: dict[str, dict[str, Any]] = {}
    ok_turns = {t["turn_id"] for t in ds.turns if t.get("error") is None}
    for arm in ds.arms:
        calls = [c for c in ds.calls if c["arm"] == arm and c.get("turn_id") in ok_turns and c.get("error") is None]
        pcalls = [c for c in ds.probes if c["arm"] == arm and c.get("error") is None]
        pr = [p for p in probes if p["arm"] == arm and p.get("decode_tps")]
        regs = [d["decode_tps"] for d in decomposition if d["arm"] == arm and d.get("decode_tps")]
        timed = [c for c in calls + pcalls if isinstance(c.get("timings"), dict) and "prompt_ms" in c["timings"]]
        if pr:
            decode_tps, dsrc = median([p["decode_tps"] for p in pr]), "probes"
        elif regs:
            decode_tps, dsrc = median(regs), "regression (median over cases)"
        elif timed and sum(c["timings"].get("predicted_ms", 0) for c in timed) > 0:
            decode_tps = sum(c["timings"].get("predicted_n", 0) for c in timed) / sum(c["timings"]["predicted_ms"] for c in timed) * 1000
            dsrc = "server timings"
        else:
            decode_tps, dsrc = None, None
        if timed and len(timed) == len(calls) + len(pcalls):
            points = [(c["timings"]["prompt_n"], c["timings"]["prompt_ms"] / 1000.0, "server") for c in timed
                      if c["timings"].get("prompt_n", 0) >= MIN_PREFILL_POINT_TOKENS]
            psrc = "server timings"
        else:
            points = [(p["input_tokens"] - (p.get("cached_tokens") or 0), p["prefill_s"], "probe") for p in pr
                      if p.get("input_tokens") and p.get("prefill_s") is not None and p["prefill_s"] >= 0]
            for case in ds.cases:
                fc = [c for c in calls if c["case"] == case and c.get("step") == 0 and c.get("prompt_tokens")]
                if fc:
                    points.append((median([c["prompt_tokens"] - _cached(c) for c in fc]),
                                   median([c["ttft_s"] or 0.0 for c in fc]), "first-call TTFT"))
            psrc = "client (probes and first-call TTFT)"
        shares = [_cached(c) / c["prompt_tokens"] for c in pcalls if c.get("prompt_tokens")]
        if shares:
            hit, hsrc = median(shares), "its probes (one prompt sent again)"
        else:
            tot = sum(c.get("prompt_tokens") or 0 for c in calls)
            hit, hsrc = (sum(_cached(c) for c in calls) / tot if tot else 0.0), "its calls"
        out[arm] = {"decode_tps": decode_tps, "decode_source": dsrc, "prefill_points": points,
                    "prefill_source": psrc, "cached_share": hit, "cached_share_source": hsrc}
    return out


def prefill_model(points: list[tuple[float, float, str]]) -> dict[str, Any] | None:
    """Fit prefill_s = a + b·n over (uncached tokens n, seconds) points; b = 1/prefill_tps."""
    pts = [p for p in points if p[0] > 0]
    if not pts:
        return None
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    if len(set(xs)) >= 2:
        a, b, r2 = fit_line(xs, ys)
        if b > 0:
            return {"a": max(a, 0.0), "b": b, "r2": r2, "min_input": min(xs), "max_input": max(xs), "n": len(xs)}
    # one input length (or a non-positive slope): proportional through zero
    b = sum(ys) / sum(xs)
    return {"a": 0.0, "b": b, "r2": None, "min_input": min(xs), "max_input": max(xs), "n": len(xs)}


def project(ds: Dataset, rates: dict[str, dict[str, Any]], engaged_rows: list[dict[str, Any]],
            input_tokens: int, output_tokens: int) -> dict[str, Any]:
    arms = []
    for arm in ds.arms:
        r = rates.get(arm) or {}
        model = prefill_model(r.get("prefill_points") or [])
        dt = r.get("decode_tps")
        if model is None or not dt:
            arms.append({"arm": arm, "refused": "no measured prefill points or decode rate"})
            continue
        hit = r.get("cached_share") or 0.0
        uncached = input_tokens * (1.0 - hit)
        prefill = model["a"] + model["b"] * uncached
        decode = output_tokens / dt
        total = prefill + decode
        if uncached > model["max_input"]:
            extrap = (f"extrapolated {uncached / model['max_input']:.1f}x beyond the largest measured uncached "
                      f"input ({model['max_input']:.0f} tokens)")
        elif uncached < model["min_input"]:
            extrap = f"extrapolated below the smallest measured uncached input ({model['min_input']:.0f} tokens)"
        else:
            extrap = f"interpolated within measured uncached inputs ({model['min_input']:.0f}–{model['max_input']:.0f} tokens)"
        if hit:
            extrap += f"; {hit:.0%} of the prompt cached, as in {r.get('cached_share_source')}"
        arms.append({"arm": arm, "prefill_s": prefill, "decode_s": decode, "total_s": total,
                     "prefill_share": prefill / total, "decode_share": decode / total,
                     "decode_tps": dt, "decode_source": r.get("decode_source"),
                     "prefill_tps": 1.0 / model["b"] if model["b"] > 0 else None, "prefill_fit": model,
                     "prefill_source": r.get("prefill_source"), "cached_share": hit,
                     "extrapolation": extrap})
    by = {a["arm"]: a for a in arms if "total_s" in a}
    eng = {e["arm"]: e for e in engaged_rows}
    levers = []
    for i, x in enumerate(ds.arms):
        for y in ds.arms[i + 1:]:
            knobs = uncontrolled_knobs(ds.conditions(x), ds.conditions(y))
            if len(knobs) != 1 or x not in by or y not in by:
                continue
            knob = knobs[0]
            on_x, on_y = declared(ds.conditions(x), knob), declared(ds.conditions(y), knob)
            if on_x != on_y:
                without, with_ = (y, x) if on_x else (x, y)
            else:  # both set (two values of one knob): the slower one is "without"
                without, with_ = (x, y) if by[x]["total_s"] >= by[y]["total_s"] else (y, x)
            credited = eng.get(with_, {}).get(knob) is not False
            a, b = by[without], by[with_]
            saved = a["total_s"] - b["total_s"]
            phase = "prefill" if abs(a["prefill_s"] - b["prefill_s"]) >= abs(a["decode_s"] - b["decode_s"]) else "decode"
            levers.append({"lever": knob, "without": without, "with": with_, "saved_s": saved,
                           "saved_share": saved / a["total_s"], "speedup": a["total_s"] / b["total_s"],
                           "phase": phase, "phase_speedup": (a[f"{phase}_s"] / b[f"{phase}_s"]) if b[f"{phase}_s"] > 0 else None,
                           "credited": credited})
    base = by.get(ds.baseline)
    rec = None
    if base:
        dominant = "prefill" if base["prefill_s"] >= base["decode_s"] else "decode"
        credited = [l for l in levers if l["credited"]]
        best = max(credited, key=lambda l: l["saved_s"], default=None)
        share = base[f"{dominant}_share"]
        if best and best["saved_s"] > 0:
            rec = (f"For {input_tokens:,} input and {output_tokens:,} output tokens, {dominant} is "
                   f"{share:.0%} of the baseline's {base['total_s']:.1f} s; the lever that returns most is "
                   f"{best['lever']} ({best['without']} → {best['with']}: {best['saved_s']:.1f} s, "
                   f"{best['speedup']:.2f}x, acting on {best['phase']}).")
        else:
            rec = (f"For {input_tokens:,} input and {output_tokens:,} output tokens, {dominant} is "
                   f"{share:.0%} of the baseline's {base['total_s']:.1f} s; no measured lever returns time here.")
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "arms": arms, "levers": levers,
            "recommendation": rec}
