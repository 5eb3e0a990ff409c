"""Where the time goes: per cell, and projected for a scenario.

Per cell (mean over its successful turns): prefill = Σ over the turn's calls of
the server's prompt_ms where reported, else the client's TTFT; decode = Σ of
the server's predicted_ms, else latency − TTFT; other = turn time − prefill −
decode (harness, network, gaps between calls; queueing once measured).
share = phase / turn time.

Scenario (input I tokens, output O tokens), per arm:
    uncached n = I × (1 − h), cached k = I × h, h = the share of the prompt the arm found
      cached when the same prompt came again (its probes), 0 without a cache;
    prefill_s = the arm's rate model (:mod:`.rate_model`) where it has a prefill fit:
      a + b·n + c·n·(k + n/2); else the flat fit a + n / prefill_tps, by least squares on the
      arm's measured (uncached tokens, prefill seconds) points: the server's
      timings where reported, else probes and first-call TTFTs (with a single
      length, proportional through zero);
    decode_s = the rate model where it has a decode fit: O·d0 + d1·(O·I + O·(O − 1)/2) (decode slows
      as the context grows from I to I + O); else O / decode_tps (probe rate, else the median
      regression rate);
    ``extrapolation`` / ``decode_extrapolation`` say where the scenario lies outside the ranges the
      model was fitted on (uncached and cached tokens; contexts);
    queue_s = the server's queue seconds per request over the arm's turns
      (its Prometheus metrics, where it reports them and they are the arm's
      own), else 0;
    total = prefill_s + decode_s + queue_s.
A lever is measured by a controlled comparison (two arms that differ in that
one knob, :mod:`.knobs`): "without" is the reference arm, "with" the other.
Its return is Amdahl's: the time it removes from its own phase, the other
phase held at the reference arm's value —
    prefill lever (a knob naming a cache):     saved = prefill_s(without) − prefill_s(with)
    decode lever (a knob naming a draft/spec): saved = decode_s(without) − decode_s(with)
    any other knob (engine, model, hardware):  saved = total(without) − total(with)  (both phases)
    speedup = total(without) / (total(without) − saved).
A lever's return is citable only if its comparison's total multiplier is, or
its equal-work figure where the measured one is refused for volume alone
(:func:`.guard.cited`), and credited only if the lever engaged (:mod:`.engaged`).
The recommendation names the baseline's dominant phase and the credited
lever that returns most.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Mapping, Sequence, Union

import numpy as np
from numpy.typing import NDArray
from typing_extensions import TypeAlias, TypedDict

from ..base.bounds import TPS_RANGE
from ..base.dataset import CallTable, Dataset, groups, sums, turn_groups, zero_nan
from ..base.guard import cited
from ..base.knobs import caches_prompts, lever_phase
from ..base.stats import median
from .rate_model import decode_seconds, prefill_seconds
from .regression import Floats, fit_line

if TYPE_CHECKING:
    from ...schema.experiment_rows import MultiplierRow
    from ...schema.lever_rows import EngagedRow
    from ...schema.rate_rows import (
        ArmMetrics,
        DecompositionRow,
        FlatPrefillFit,
        LeverReturn,
        ProbeRow,
        ProjectedArm,
        Projection,
        RateModelRow,
        RefusedArm,
        TimeShareRow,
    )

#: (uncached tokens, seconds) points of a prefill: the tokens as whole numbers where the server counted them
PrefillPoints: TypeAlias = tuple[Union[NDArray[np.int64], NDArray[np.float64]], NDArray[np.float64]]


class ArmRates(TypedDict):
    """An arm's measured rates (:func:`arm_rates`): what the projection and the summary's ``rates[]`` take."""

    decode_tps: float | None
    decode_source: str | None
    prefill_points: PrefillPoints  # (uncached tokens, seconds)
    prefill_source: str | None
    cached_share: float | None
    cached_share_source: str
    refused: str | None


def cell_shares(ds: Dataset) -> list[TimeShareRow]:
    c, T = ds.call, ds.turn
    ok = T.ok[c.turn]  # the calls of successful turns
    server = c.has_timings & ~np.isnan(c.prompt_ms) & ~np.isnan(c.predicted_ms)
    ttft = zero_nan(c.ttft_s)
    pre = np.where(server, c.prompt_ms / 1000.0, ttft)
    dec = np.where(server, c.predicted_ms / 1000.0, c.latency_s - ttft)
    g, g_cell, g_turn = turn_groups(ds, ok)  # one group per (cell, turn)
    n_groups = len(g_cell)
    turn_pre, turn_dec = sums(g, pre, n_groups), sums(g, dec, n_groups)
    g_server = sums(g, server, n_groups) == sums(g, None, n_groups)
    by = groups(g_cell, ds.n_cells)
    out: list[TimeShareRow] = []
    for arm in ds.arms:
        for case in ds.cases:
            turns = by[ds.cell(arm, case)]
            if not len(turns):
                continue
            n = len(turns)
            mp = sum(turn_pre[turns].tolist()) / n
            md = sum(turn_dec[turns].tolist()) / n
            mt = sum(T.turn_s[g_turn[turns]].tolist()) / n
            other = max(0.0, mt - mp - md)
            out.append({"arm": arm, "case": case, "turn_s": mt, "prefill_s": mp, "decode_s": md, "other_s": other,
                        "prefill_share": mp / mt if mt else None, "decode_share": md / mt if mt else None,
                        "other_share": other / mt if mt else None,
                        "source": "server timings" if g_server[turns].all() else "client"})
    return out


MIN_PREFILL_POINT_TOKENS = 16


def _cached(c: CallTable) -> NDArray[np.float64]:
    """Cached prompt tokens per call (usage, else timings.cache_n; 0 when neither says)."""
    out: NDArray[np.float64] = np.trunc(zero_nan(c.cached()))
    return out


def arm_rates(ds: Dataset, probes: Sequence[ProbeRow], decomposition: Sequence[DecompositionRow],
              own_metrics: Mapping[str, ArmMetrics] | None = None,
              probe_metrics: Mapping[str, ArmMetrics] | None = None) -> dict[str, ArmRates]:
    """Per arm: decode rate, the (uncached input tokens, prefill s) points, and the cached share.

    Prefill points come from the server's own timings (prompt_n, prompt_ms) where every
    call reports them, else from the client: probes' two-point prefill and each case's
    first-call TTFT, against the uncached part of the prompt.  The cached share is
    what the arm's probes (one prompt sent repeatedly) found cached, else its overall share;
    where no call reports cached counts, the server's counters over its probes (*probe_metrics*),
    else over its block (*own_metrics*), else none for an arm without a cache, else unknown (None).

    When no call of the arm says how many prompt tokens were cached (vLLM without
    ``--enable-prompt-tokens-details``, SGLang without cache reports), a missing count is not
    read as "nothing cached": the cached share comes from the server's own counters over the
    arm's block, and the prefill rate from them too (one point: uncached prompt tokens and
    prefill seconds per request); an arm that may cache and offers neither is refused
    (``refused``), so that cached prompts never pass for a fast prefill.
    ``prefill_points`` is (tokens, seconds), two arrays.
    """
    own_metrics = own_metrics or {}
    out: dict[str, ArmRates] = {}
    c, p = ds.call, ds.probe
    c_use = ds.turn.ok[c.turn] & c.ok
    c_timed = c.has_timings & ~np.isnan(c.prompt_ms)
    p_timed = p.has_timings & ~np.isnan(p.prompt_ms)
    c_cached, p_cached = _cached(c), _cached(p)
    c_known, p_known = ~np.isnan(c.cached()), ~np.isnan(p.cached())
    for arm in ds.arms:
        a = ds.arm_index(arm)
        calls, pcalls = c_use & (c.arm == a), p.ok & (p.arm == a)
        m: ArmMetrics = own_metrics.get(arm, {})
        refused = None
        ct, pt = calls & c_timed, pcalls & p_timed
        pr = [x for x in probes if x["arm"] == arm and x.get("decode_tps") and not x.get("forced_on_drafter")]
        regs = [tps for d in decomposition if d["arm"] == arm and (tps := d.get("decode_tps"))]
        n_timed = int(ct.sum() + pt.sum())
        pms = float(zero_nan(c.predicted_ms[ct]).sum()) + float(zero_nan(p.predicted_ms[pt]).sum())
        if pr:
            decode_tps, dsrc = median([x["decode_tps"] for x in pr if x["decode_tps"]]), "probes"  # (each has one)
        elif regs:
            decode_tps, dsrc = median(regs), "regression (median over cases)"
        elif n_timed and pms > 0:
            pn = float(zero_nan(c.predicted_n[ct]).sum()) + float(zero_nan(p.predicted_n[pt]).sum())
            decode_tps, dsrc = pn / pms * 1000, "server timings"
        else:
            decode_tps, dsrc = None, None
        points: PrefillPoints
        psrc: str | None
        if n_timed and n_timed == calls.sum() + pcalls.sum():
            n = zero_nan(np.concatenate([c.prompt_n[ct], p.prompt_n[pt]]))
            s = np.concatenate([c.prompt_ms[ct], p.prompt_ms[pt]]) / 1000.0
            keep = n >= MIN_PREFILL_POINT_TOKENS
            points = (n[keep].astype(np.int64), s[keep])
            psrc = "server timings"
        elif not (c_known[calls].any() or p_known[pcalls].any()) and (
                caches_prompts(ds.knobs(arm)) or m.get("prefix_cache_hit_share")):
            if m.get("uncached_prompt_tokens_per_request") and m.get("prefill_s_per_request"):
                points = (np.array([m["uncached_prompt_tokens_per_request"]]), np.array([m["prefill_s_per_request"]]))
                psrc = "server metrics (uncached prompt tokens and prefill seconds per request)"
            else:
                points, psrc = (np.array([]), np.array([])), None
                refused = ("no call reports its cached prompt tokens and the server's metrics give no prefill time: "
                           "cached and computed prompt tokens cannot be told apart")
        else:
            xs: list[float] = []
            ys: list[float] = []
            for x in pr:  # the probes' two-point prefills
                inp, pre = x.get("input_tokens"), x.get("prefill_s")
                if inp and pre is not None and pre >= 0:
                    xs.append(inp - (x.get("cached_tokens") or 0))
                    ys.append(pre)
            first = calls & (c.step == 0) & ~np.isnan(c.prompt_tokens) & (c.prompt_tokens != 0)
            by = groups(np.where(first, c.case, -1), len(ds.case_names))
            for case in ds.cases:
                fc = by[ds.case_index(case)]
                if len(fc):
                    xs.append(median(c.prompt_tokens[fc] - c_cached[fc]))
                    ys.append(median(zero_nan(c.ttft_s[fc])))
            points = (np.array(xs, dtype=float), np.array(ys, dtype=float))
            psrc = "client (probes and first-call TTFT)"
        has_prompt = pcalls & ~np.isnan(p.prompt_tokens) & (p.prompt_tokens != 0)
        known = bool(c_known[calls].any() or p_known[pcalls].any())
        mp: ArmMetrics = (probe_metrics or {}).get(arm, {})
        if known and has_prompt.any():
            hit = median(p_cached[has_prompt] / p.prompt_tokens[has_prompt])
            hsrc = "its probes (one prompt sent again)"
        elif known:
            tot = float(zero_nan(c.prompt_tokens[calls]).sum())
            hit, hsrc = (float(c_cached[calls].sum()) / tot if tot else 0.0), "its calls"
        elif mp.get("prefix_cache_hit_share") is not None:
            hit, hsrc = mp["prefix_cache_hit_share"], "the server's counters over its probes (one prompt sent again)"
        elif m.get("prefix_cache_hit_share") is not None:
            hit, hsrc = m["prefix_cache_hit_share"], "the server's counters over its block"
        elif not caches_prompts(ds.knobs(arm)):
            hit, hsrc = 0.0, "none (no prefix cache in its knobs, none reported)"
        else:
            hit, hsrc = None, "not reported"
        out[arm] = {"decode_tps": decode_tps, "decode_source": dsrc, "prefill_points": points,
                    "prefill_source": psrc, "cached_share": hit, "cached_share_source": hsrc, "refused": refused}
    return out


def prefill_model(points: tuple[Floats | NDArray[np.int64], Floats]) -> FlatPrefillFit | None:
    """Fit prefill_s = a + b·n over (uncached tokens n, seconds) points; b = 1/prefill_tps.  A slope that
    would put the rate past ``TPS_RANGE`` (the times do not grow with the tokens: a flat prefill, b a rounding
    error of 0) is taken as b = 0: the prefill costs a and no rate is measured."""
    n, s = np.asarray(points[0]), np.asarray(points[1], dtype=float)
    keep = n > 0
    xs, ys = n[keep], s[keep]
    if not len(xs):
        return None
    lo, hi = xs.min().item(), xs.max().item()
    if lo != hi:  # at least two input lengths
        a, b, r2 = fit_line(xs, ys)
        if b > 0:
            b = b if b >= 1.0 / TPS_RANGE[1] else 0.0
            return {"a": max(a, 0.0), "b": b, "r2": r2, "min_input": lo, "max_input": hi, "n": len(xs)}
    # one input length (or a non-positive slope): proportional through zero
    b = sum(ys.tolist()) / sum(xs.tolist())
    return {"a": 0.0, "b": b, "r2": None, "min_input": lo, "max_input": hi, "n": len(xs)}


def _outside(what: str, x: float, rng: list[float] | None) -> str | None:
    """Where *x* lies against the fitted range [lo, hi] of *what*: None when inside."""
    if not rng:
        return None
    lo, hi = rng
    if x > hi:
        return f"{what} {x:,.0f} beyond the largest fitted ({hi:,.0f}" + (f", {x / hi:.1f}x)" if hi > 0 else ")")
    if x < lo:
        return f"{what} {x:,.0f} below the smallest fitted ({lo:,.0f})"
    return None


def model_prefill(model: RateModelRow, input_tokens: int, hit: float) -> tuple[float, str]:
    """(prefill seconds, where it stands against the fitted ranges) of the scenario's prompt on a rate model."""
    n, k = input_tokens * (1.0 - hit), input_tokens * hit
    p = model["prefill"]
    assert p is not None  # project() asks this only of a model with a prefill fit
    rng = p.get("range_uncached")
    out = [x for x in (_outside("uncached", n, rng), _outside("cached", k, p.get("range_cached"))) if x]
    if out:
        note = "rate model extrapolated: " + "; ".join(out)
    else:
        assert rng is not None  # project()'s models are fitted ones (rate_fit.fit_prefill): their ranges are set
        note = f"rate model, within fitted ranges (uncached {rng[0]:,}–{rng[1]:,})"
    return prefill_seconds(model, n, k), note


def model_decode(model: RateModelRow, input_tokens: int, output_tokens: int) -> tuple[float, str]:
    """(decode seconds, where it stands against the fitted contexts) of the scenario on a rate model."""
    d = model["decode"]
    assert d is not None  # project() asks this only of a model with a decode fit
    rng = d.get("range_context")
    out = [x for x in (_outside("context", input_tokens, rng), _outside("context", input_tokens + output_tokens, rng))
           if x]
    note = ("rate model extrapolated: " + out[-1]) if out else (
        f"rate model, within fitted contexts ({rng[0]:,}–{rng[1]:,})" if rng else "rate model")
    return decode_seconds(model, input_tokens, output_tokens), note


#: The key of a projected arm's seconds that a lever of each phase (:func:`..base.knobs.lever_phase`) acts on
_PHASE_SECONDS: dict[str, Literal["total_s", "prefill_s", "decode_s"]] = {
    "both": "total_s", "prefill": "prefill_s", "decode": "decode_s"}


def project(ds: Dataset, rates: Mapping[str, ArmRates], engaged_rows: Sequence[EngagedRow],
            input_tokens: int, output_tokens: int, multipliers: Sequence[MultiplierRow] | None = None,
            queue_s: Mapping[str, float] | None = None, models: Mapping[str, RateModelRow] | None = None
            ) -> Projection:
    """The scenario per arm and the return of every lever that a controlled comparison measures
    (the ``total`` rows of *multipliers* with a ``lever``).  An arm whose prefill (or decode) cannot
    be projected keeps its other phase (``prefill_refused`` / ``decode_refused``; no total), so a
    lever that acts on the phase it has is still projected.  *models*: the arms' rate models
    (``rate_models[]`` by arm), used for each phase they fitted."""
    arms: list[ProjectedArm | RefusedArm] = []
    for arm in ds.arms:
        r = rates.get(arm)
        rm = (models or {}).get(arm)
        rm_prefill, rm_decode = (rm.get("prefill"), rm.get("decode")) if rm else (None, None)
        model = prefill_model(r["prefill_points"] if r else ([], []))
        dt, hit = (r["decode_tps"], r["cached_share"]) if r else (None, None)
        row: ProjectedArm = {"arm": arm, "prefill_s": None, "decode_s": None,
                               "queue_s": (queue_s or {}).get(arm, 0.0), "total_s": None, "prefill_share": None,
                               "decode_share": None}
        if rm and rm_prefill and hit is not None:
            prefill_s, extrap = model_prefill(rm, input_tokens, hit)
            if hit:
                extrap += f"; {hit:.0%} of the prompt cached, as in {r['cached_share_source'] if r else None}"
            uncached = input_tokens * (1.0 - hit)
            row.update({"prefill_s": prefill_s,
                        "prefill_tps": uncached / prefill_s if prefill_s > 0 and uncached else None,
                        "prefill_source": f"rate model ({rm_prefill['source']})", "cached_share": hit,
                        "extrapolation": extrap})
        elif model is not None and hit is not None:
            uncached = input_tokens * (1.0 - hit)
            row["prefill_s"] = model["a"] + model["b"] * uncached
            if uncached > model["max_input"]:
                extrap = (f"extrapolated {uncached / model['max_input']:.1f}x beyond the largest measured uncached "
                          f"input ({model['max_input']:.0f} tokens)")
            elif uncached < model["min_input"]:
                extrap = f"extrapolated below the smallest measured uncached input ({model['min_input']:.0f} tokens)"
            else:
                extrap = (f"interpolated within measured uncached inputs "
                          f"({model['min_input']:.0f}–{model['max_input']:.0f} tokens)")
            if hit:
                extrap += f"; {hit:.0%} of the prompt cached, as in {r['cached_share_source'] if r else None}"
            row.update({"prefill_tps": 1.0 / model["b"] if model["b"] > 0 else None, "prefill_fit": model,
                        "prefill_source": r["prefill_source"] if r else None, "cached_share": hit,
                        "extrapolation": extrap})
        else:
            row["prefill_refused"] = ((r["refused"] if r else None) or "no measured prefill points" if model is None
                                      else "the share of the prompt it finds cached is unknown")
        if rm and rm_decode and output_tokens > 0:
            decode_s, row["decode_extrapolation"] = model_decode(rm, input_tokens, output_tokens)
            row.update({"decode_s": decode_s, "decode_tps": output_tokens / decode_s if decode_s > 0 else None,
                        "decode_source": f"rate model ({rm_decode['source']})"})
        elif dt:
            row.update({"decode_s": output_tokens / dt, "decode_tps": dt,
                        "decode_source": r["decode_source"] if r else None})
        else:
            row["decode_refused"] = "no measured decode rate"
        pre_s, dec_s = row["prefill_s"], row["decode_s"]
        if pre_s is None and dec_s is None:
            arms.append({"arm": arm, "refused": f"{row['prefill_refused']}; {row['decode_refused']}"})
            continue
        if pre_s is not None and dec_s is not None:
            total = pre_s + dec_s + row["queue_s"]
            row.update({"total_s": total, "prefill_share": pre_s / total, "decode_share": dec_s / total})
        arms.append(row)
    by: dict[str, ProjectedArm] = {a["arm"]: a for a in arms if "refused" not in a}
    eng = {e["arm"]: e for e in engaged_rows}
    levers: list[LeverReturn] = []
    for m in multipliers or []:
        knob, with_, without = m.get("lever"), m["arm"], m["vs"]
        if m["scope"] != "total" or not knob or with_ not in by or without not in by:
            continue
        a, b = by[without], by[with_]
        phase = lever_phase(knob)
        key = _PHASE_SECONDS[phase]
        a_s, b_s = a[key], b[key]
        if a_s is None or b_s is None:
            continue
        saved = a_s - b_s
        whole = a["total_s"]
        rest = whole - saved if whole is not None else None
        citable, reason, measure = cited(m)
        engaged = eng.get(with_)
        levers.append({"lever": knob, "without": without, "with": with_, "phase": phase, "saved_s": saved,
                       "saved_share": saved / whole if whole else None,
                       "speedup": whole / rest if whole is not None and rest and rest > 0 else None,
                       "phase_speedup": a_s / b_s if b_s > 0 else None,
                       "credited": (engaged.get(knob) if engaged is not None else None) is not False,
                       "citable": citable, "reason": reason, "measure": measure})
    base = by.get(ds.baseline)
    best = max((l for l in levers if l["credited"]), key=lambda l: l["saved_s"], default=None)
    rec = None
    if base:
        base_pre, base_dec, base_total = base["prefill_s"], base["decode_s"], base["total_s"]
        if base_total is not None and base_pre is not None and base_dec is not None:  # (a total: both phases)
            dominant, share = (("prefill", base["prefill_share"]) if base_pre >= base_dec
                               else ("decode", base["decode_share"]))
            head = (f"For {input_tokens:,} input and {output_tokens:,} output tokens, {dominant} is "
                    f"{share:.0%} of the baseline's {base_total:.1f} s; ")
        else:
            head = (f"For {input_tokens:,} input and {output_tokens:,} output tokens, the baseline's dominant phase "
                    f"is unknown ({base.get('prefill_refused') or base.get('decode_refused')}); ")
        if best and best["saved_s"] > 0:
            speed = f", {best['speedup']:.2f}x" if best["speedup"] else ""
            rec = head + (f"the lever that returns most is {best['lever']} ({best['without']} → {best['with']}: "
                          f"{best['saved_s']:.1f} s{speed}, acting on {best['phase']})")
            rec += "." if best["citable"] else f" — NOT citable: {best['reason']}."
        else:
            rec = head + "no measured lever returns time here."
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "arms": arms, "levers": levers,
            "recommendation": rec}
