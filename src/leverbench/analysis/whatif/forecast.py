"""What if this traffic were served on each calibrated arm? A discrete-event simulation (issue 15).

The calls (:mod:`.whatif_plan`: as trace replay sends them) arrive at their times; each arm serves them with
its rate model (:mod:`.rate_model`), its slots and its batching slowdown, and its prefix cache of finite
capacity (:mod:`.prefix_cache`).  Per call i, on one arm:

    admitted   when a slot is free, in order of arrival (first come, first served); calls that arrive at
               the same instant (a trace's timestamps are coarse: Mooncake's come in bursts of 10–16 at one
               millisecond) reach a real server in an order nobody recorded (measured on llama.cpp: a
               different order each replay), so the forecast serves ORDERS random orders of them (seeded:
               deterministic) and reports each figure's mean over those orders, with its lowest and highest
               (``orders``); without simultaneous arrivals, one simulation in the trace's order
    hit_i      tokens of its prompt the arm's cache holds then, under its engine's rule (:mod:`.whatif_cache`:
               vLLM and SGLang share a prompt's blocks once its prefill computed them and count the KV of
               the requests in flight against the capacity; llama.cpp's slots each keep their last prompt
               and answer); 0 without a cache; where the trace recorded cached tokens that a cache already
               served and gives no prefix structure: those, as served
    work_i     prefill_s(I − hit, hit) then decode_s(I + 1, O − 1)  (the rate model: seconds when served
               alone, fitted as it is — prefill up to the first token, decode the O − 1 tokens after it
               from a context of I + 1; a drafter's acceptance is inside the decode rate measured on its arm)
    k requests in service progress at 1 / slowdown(k) seconds of work per second (continuous batching:
               the ``batch`` slowdown measured in load stages, relative to one request alone, so
               slowdown(1) = 1; k ≤ slots).  Without a measured slowdown, one request at a time; where the
               server's slots are known all the same (``parallel_slots``), the forecast serves them also
               in parallel without slowdown, and the row's ``assumptions`` gives both (the truth lies
               between: batching slows each request by a factor between 1 and k)
    TTFT_i     = end of its prefill − its arrival;   e2e_i = end of its decode − its arrival
    a session's next round arrives when this one ends plus its tool wait

    output_tps          = Σ O / (last end − first arrival)
    busy_s              = time during which at least one request is in service
    operating_point     = the arrival rate and the calls in flight as served (:mod:`..base.operating_point`)
    GPU-h per 1000 calls = busy_s / n × gpus × 1000 / 3600;   $ = × gpu_hour_usd

The loop is hand-written over a heap of arrivals and a heap of phase ends in "virtual work" (every request
in service progresses alike, so one counter V, the work each has done since the clock's start, advances by
dt / slowdown(k); a phase ends when V reaches its mark): O(log n) per event, so millions of calls take
seconds.  (SimPy, measured in ``benchmarks/whatif_speed.py``, serves one FIFO slot alone several times
slower, and its resources do not model requests that share a server at a rate set by how many there are.)

The lever ranking orders the arms by GPU-hours per 1,000 calls (then p50 end-to-end): each row names the
knobs that differ from the reference arm and the multiplier reference GPU-hours / its GPU-hours.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

from ...levers import registry
from ...schema.whatif_rows import ForecastArm
from ..base.knobs import differing, is_on
from ..base.operating_point import operating_point
from ..load.stages import FloatArray, distribution
from ..rates.rate_model import decode_seconds, prefill_seconds
from .cache import RULES, Serving
from .orders import ORDERS, mean_row, orders_to_serve
from .plan import Plan, PlannedCall
from .prefix_cache import PrefixCache, SlotCache, unbounded
from .slots import assumptions

if TYPE_CHECKING:
    from ...json_types import JSONValue
    from ...schema.rate_rows import BatchSlowdown, RateModelRow
    from ...schema.whatif_rows import (
        CacheFigures,
        CachePass,
        CacheSaving,
        Forecast,
        ForecastCache,
        Ranked,
        RankRow,
        ServedRateModel,
    )


@dataclass
class ArmSpec:
    """One arm as the simulation serves: its rate model, slots and slowdown, its cache, its price."""

    name: str
    model: ServedRateModel  # with the ``source`` it came from (:func:`.arms.arm_specs`)
    slots: int = 1
    slowdown: Callable[[int], float] = lambda k: 1.0
    cache: bool = False
    capacity_tokens: float = 0.0
    block_tokens: int = 1
    cache_source: str = ""
    cache_rule: str = "shared"  # how its engine keeps the cache: a rule of .whatif_cache.RULES
    parallel_slots: int | None = None  # slots known, slowdown not measured: also served in parallel (see above)
    knobs: dict[str, JSONValue] = field(default_factory=dict)
    gpus: float = 1.0
    gpu_hour_usd: float | None = None
    notes: list[str] = field(default_factory=list)


def slowdown_curve(batch: BatchSlowdown | None) -> Callable[[int], float]:
    """slowdown(k) from a rate model's ``batch`` {concurrency, slowdown} (relative to one request alone:
    :func:`.whatif_arms.batch_points` re-normalises an older summary's): linear between the measured points,
    (1, 1) added when absent; past the largest measured k, slowdown(k_max) · k / k_max (no further gain)."""
    if not batch or not batch.get("concurrency"):
        return lambda k: 1.0
    pts = sorted(zip((float(c) for c in batch["concurrency"]), (float(s) for s in batch["slowdown"])))
    if pts[0][0] > 1:
        pts.insert(0, (1.0, 1.0))
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]

    def f(k: int) -> float:
        if k <= xs[-1]:
            return float(np.interp(k, xs, ys))
        return ys[-1] * k / xs[-1]
    return f


@dataclass
class Served:
    """What one arm's simulation returns: per call (in plan order) and in total."""

    arm: str
    calls: list[PlannedCall]
    arrival: FloatArray
    ttft: FloatArray
    e2e: FloatArray
    hit: FloatArray
    busy_s: float
    first_arrival: float
    last_end: float
    cache: PrefixCache | SlotCache | None
    shadow: PrefixCache


def _served(call: PlannedCall, recorded: bool) -> int | None:
    """The cached tokens a cache served as the trace recorded them, for a call that gives no prefix structure
    to look up (≤ input − 1); None for the others.  They count in the shadow too: the upper bound is never
    below what a cache was seen to serve."""
    if recorded and call.served_cached is not None:
        return min(call.served_cached, max(call.input_tokens - 1, 0))
    return None


def simulate(plan: Plan, arm: ArmSpec, order_seed: int | None = None) -> Served:
    """Serve ``plan`` on ``arm`` (see the module docstring); deterministic.  ``order_seed``: the sessions
    whose first calls arrive at the same instant are served in an order drawn with this seed (None: the
    trace's order)."""
    calls = plan.calls
    pos = {id(c): i for i, c in enumerate(calls)}
    n = len(calls)
    arrival = np.full(n, np.nan)
    ttft = np.full(n, np.nan)
    e2e = np.full(n, np.nan)
    hit = np.zeros(n)
    serving = Serving(arm.cache_rule, arm.capacity_tokens, arm.block_tokens, arm.slots, arm.cache)
    # a call is "recorded" when the trace gives only the cached tokens a cache served, no prefix structure
    # (its own unique piece, after the chat template's when --template-tokens adds one)
    structured = {id(c) for s in plan.sessions for c in s
                  if c.round > 0 or any(k[0] not in ("u", "t") for k, _ in c.pieces)}
    next_round: dict[int, PlannedCall] = {}
    for s in plan.sessions:
        for a, b in zip(s, s[1:]):
            next_round[id(a)] = b
    seq = 0
    arrivals: list[tuple[float, int, PlannedCall]] = []
    chain = not plan.has_arrivals  # no arrival times: each session when the previous one has ended
    firsts = [s[0] for s in plan.sessions]
    if chain and firsts:
        arrivals.append((0.0, seq, firsts[0]))
    else:
        order = list(firsts)
        if order_seed is not None:
            random.Random(order_seed).shuffle(order)  # ties in start_s are then broken at random
        for c in order:
            seq += 1
            arrivals.append((c.start_s or 0.0, seq, c))
        heapq.heapify(arrivals)
    queue: deque[PlannedCall] = deque()
    active: list[tuple[float, int, PlannedCall, str]] = []  # (virtual mark, seq, call, phase)
    decode_work: dict[int, float] = {}
    t = v = busy = 0.0
    last_end = 0.0
    session_i = 0

    def admit() -> None:
        nonlocal seq
        while queue and len(active) < arm.slots:
            c = queue.popleft()
            h = serving.admit(c, _served(c, id(c) not in structured))
            hit[pos[id(c)]] = h
            p = prefill_seconds(arm.model, c.input_tokens - h, h)
            decode_work[id(c)] = decode_seconds(arm.model, c.input_tokens + 1, max(c.output_tokens - 1, 0))
            seq += 1
            heapq.heappush(active, (v + p, seq, c, "prefill"))

    def done(c: PlannedCall) -> None:
        nonlocal seq, session_i
        serving.done(c, t)
        nxt = next_round.get(id(c))
        seq += 1
        if nxt is not None:
            heapq.heappush(arrivals, (t + nxt.wait_s, seq, nxt))
        elif chain:
            session_i += 1
            if session_i < len(firsts):
                heapq.heappush(arrivals, (t, seq, firsts[session_i]))

    while arrivals or queue or active:
        ta = arrivals[0][0] if arrivals else math.inf
        k = len(active)
        f = arm.slowdown(k) if k else 1.0
        tc = t + (active[0][0] - v) * f if active else math.inf
        if ta <= tc:
            if k:
                v += (ta - t) / f
                busy += ta - t
            t = ta
            _, _, c = heapq.heappop(arrivals)
            arrival[pos[id(c)]] = t
            queue.append(c)
        else:
            busy += tc - t
            t = tc
            mark, _, c, phase = heapq.heappop(active)
            v = mark
            i = pos[id(c)]
            if phase == "prefill":
                ttft[i] = t - arrival[i]
                serving.prefilled(c)
                seq += 1
                heapq.heappush(active, (v + decode_work.pop(id(c)), seq, c, "decode"))
            else:
                e2e[i] = t - arrival[i]
                last_end = max(last_end, t)
                done(c)
        admit()
    first = float(np.nanmin(arrival)) if n else 0.0
    return Served(arm.name, calls, arrival, ttft, e2e, hit, busy, first, last_end, serving.cache, serving.shadow)


# ---------------------------------------------------------------- rows


def arm_row(s: Served, arm: ArmSpec) -> ForecastArm:
    """The JSON row of one arm's simulation (see the module docstring for each figure)."""
    n = len(s.calls)
    out_tokens = float(sum(c.output_tokens for c in s.calls))
    span = s.last_end - s.first_arrival
    gh = s.busy_s / n * arm.gpus * 1000.0 / 3600.0 if n else None
    ttft, e2e = distribution(s.ttft), distribution(s.e2e)
    # the row's fields by keyword: one of them bears the prefix cache's name in the schema (whatif's published row)
    row = ForecastArm(
        arm=arm.name, calls=n,
        ttft_p50_s=ttft["p50"] if ttft else None, ttft_p99_s=ttft["p99"] if ttft else None,
        e2e_p50_s=e2e["p50"] if e2e else None, e2e_p99_s=e2e["p99"] if e2e else None,
        ttft=ttft, e2e=e2e,
        output_tps=out_tokens / span if span > 0 else None,
        busy_s=s.busy_s, makespan_s=span,
        gpu_hours_per_1000_calls=gh,
        usd_per_1000_calls=gh * arm.gpu_hour_usd if gh is not None and arm.gpu_hour_usd is not None else None,
        gpus=arm.gpus, gpu_hour_usd=arm.gpu_hour_usd,
        slots=arm.slots, prefix_cache=arm.cache, knobs=arm.knobs,
        rate_model={"prefill": arm.model.get("prefill"), "decode": arm.model.get("decode"),
                    "batch": arm.model.get("batch"), "source": arm.model.get("source")},
        notes=list(arm.notes),
        extrapolation=extrapolation(s.calls, s.hit, arm.model),
        operating_point=operating_point(s.arrival, s.e2e, "each call's end-to-end time as simulated on this arm"),
    )
    if row["extrapolation"]:
        row["notes"].append(row["extrapolation"])
    if s.cache is not None:
        row["cache"] = cache_figures(s.cache, s.shadow, arm)
    return row


def extrapolation(calls: Sequence[PlannedCall], hit: Sequence[float] | FloatArray, model: RateModelRow) -> str | None:
    """A note when calls lie beyond what the arm's rate model was fitted on: the forecast extrapolates its
    terms there (the quadratic c most of all); None when none does.  Per call, as served (``hit``: its cached
    tokens): its uncached tokens I − hit against the prefill's uncached range (``range_uncached``), its cached
    ones against ``range_cached`` where the prefill has an attention term (c > 0: else they cost nothing), and
    its context I + O against the decode's ``range_context``."""
    out = []
    p, d = model.get("prefill"), model.get("decode")  # a summary read back may lack a range (older files)
    spans = (p.get("range_uncached") if p else None, p.get("range_cached") if p and p.get("c_s_per_token2") else None,
             d.get("range_context") if d else None)
    p_hi, k_hi, d_hi = (span[1] if span else None for span in spans)
    uncached = [c.input_tokens - h for c, h in zip(calls, hit)]
    if p_hi is not None:
        n = sum(1 for u in uncached if u > p_hi)
        if n:
            out.append(f"{n} of {len(calls)} prompts prefill more than the {p_hi:,.0f} uncached tokens its prefill "
                       f"was fitted on (up to {max(uncached):,.0f})")
    if k_hi is not None:
        n = sum(1 for h in hit if h > k_hi)
        if n:
            out.append(f"{n} of {len(calls)} calls read more than the {k_hi:,.0f} cached tokens its prefill was "
                       f"fitted with (up to {max(hit):,.0f})")
    if d_hi is not None:
        n = sum(1 for c in calls if c.input_tokens + c.output_tokens > d_hi)
        if n:
            out.append(f"{n} of {len(calls)} calls reach a context beyond the {d_hi:,.0f} tokens its decode was "
                       "fitted on")
    return "extrapolated: " + "; ".join(out) if out else None


def cache_figures(cache: PrefixCache | SlotCache, shadow: PrefixCache, arm: ArmSpec) -> CacheFigures:
    """The finite cache's figures beside the unbounded one's, under the same order of calls, with the rule its
    engine keeps it by (:data:`.whatif_cache.RULES`)."""
    return {"capacity_tokens": cache.capacity if math.isfinite(cache.capacity) else None,
            "block_tokens": cache.block, "source": arm.cache_source, "rule": arm.cache_rule,
            "rule_text": RULES[arm.cache_rule], "hit_tokens": cache.hit_tokens,
            "input_tokens": cache.looked_up_tokens, "hit_share": cache.hit_share,
            "unbounded_hit_share": shadow.hit_share, "evicted_tokens": cache.evicted_tokens}


def ranking(rows: Sequence[Ranked], reference: str, knobs: Mapping[str, Mapping[str, JSONValue]]) -> list[RankRow]:
    """The arms by GPU-hours per 1,000 calls (then p50 end-to-end), each with the knobs that differ from
    ``reference`` and its multiplier: reference GPU-hours / its GPU-hours."""
    ref = next((r for r in rows if r["arm"] == reference), None)
    out: list[RankRow] = []
    for r in sorted(rows, key=lambda r: (r["gpu_hours_per_1000_calls"] if r["gpu_hours_per_1000_calls"] is not None
                                         else math.inf, r["e2e_p50_s"] or math.inf)):
        gh, rgh = r["gpu_hours_per_1000_calls"], ref["gpu_hours_per_1000_calls"] if ref else None
        out.append({"arm": r["arm"], "levers": differing(knobs.get(reference, {}), knobs.get(r["arm"], {})),
                    "gpu_hours_per_1000_calls": gh, "e2e_p50_s": r["e2e_p50_s"],
                    "multiplier": rgh / gh if gh and rgh else None})
    return out


def reference_arm(arms: Sequence[ArmSpec], baseline: str, cache_on: bool) -> tuple[str, str | None]:
    """(arm to compare against, why): the baseline; when the traffic's cache was already on, the arm with a
    prefix cache that differs from the baseline in the fewest other knobs (the traffic as it was served)."""
    if not cache_on:
        return baseline, None
    base = next((a for a in arms if a.name == baseline), None)
    cached = [a for a in arms if a.cache]
    if base is None or base.cache or not cached:
        return baseline, None
    best = min(cached, key=lambda a: len(differing(base.knobs, a.knobs)))
    return best.name, (f"the traffic's prefix cache was already on: the levers are ranked against arm {best.name!r} "
                       "(a prefix cache on, as the traffic was served), not the baseline")


def prefix_cache_on(knobs: Mapping[str, JSONValue]) -> bool | None:
    """Whether an arm's knobs say its prefix cache (the lever that serves seen prompts from a cache:
    :func:`leverbench.levers.registry.prompt_cache`) is on (None: they do not say), by the knob's name or any of
    its aliases."""
    cache = registry.prompt_cache()
    for k in cache.names() if cache is not None else ():
        if k in knobs:
            return is_on(knobs[k])
    return None


# ---------------------------------------------------------------- the forecast


def realized_cache_saving(plan: Plan, model: RateModelRow) -> CacheSaving | None:
    """Where the trace's cached tokens were served by a cache already on: their share of the input, and the
    prefill seconds they saved on ``model`` = Σ prefill_s(I, 0) − prefill_s(I − C, C); None otherwise."""
    served = [(c, k) for c in plan.calls if (k := c.served_cached)]
    if not served:
        return None
    calls = plan.calls
    saved = sum(prefill_seconds(model, c.input_tokens, 0) - prefill_seconds(model, c.input_tokens - k, k)
                for c, k in served)
    return {"calls": len(served), "cached_tokens": sum(k for _, k in served),
            "cached_share": sum(k for _, k in served) / max(sum(c.input_tokens for c in calls), 1),
            "saved_prefill_s": saved}


def forecast(plan: Plan, arms: Sequence[ArmSpec], baseline: str, *,
             trace_cached_share: float | None = None, orders: int = ORDERS) -> Forecast:
    """Serve ``plan`` on every arm and rank them; the JSON-ready what-if (see the module docstring).
    ``orders``: how many random orders of simultaneous arrivals to serve (where there are any).  An arm with
    ``parallel_slots`` is served a second time, on them in parallel without slowdown: its row's
    ``assumptions`` (:func:`.whatif_slots.assumptions`).

    ``trace_cached_share``: the traffic analysis's share of input tokens an unbounded cache could reuse
    (Mooncake hash ids), shown beside the simulated caches.
    """
    if not plan.calls:
        raise ValueError("no calls to serve")
    if not any(a.name == baseline for a in arms):  # --arms left the baseline out: rank against the first served
        baseline = arms[0].name
    k, tied, order_note = orders_to_serve(plan, orders)
    rows: list[ForecastArm] = []
    unbounded_share: list[float] = []
    for a in arms:
        runs = [simulate(plan, a, order_seed=j if k > 1 else None) for j in range(k)]
        unbounded_share.append(float(np.mean([r.shadow.hit_share for r in runs])))
        rows.append(mean_row([arm_row(r, a) for r in runs], tied))
        if a.parallel_slots and a.parallel_slots > 1:  # slots known, slowdown not measured: the other end too
            par = replace(a, slots=a.parallel_slots, slowdown=lambda n: 1.0, parallel_slots=None)
            par_row = mean_row([arm_row(simulate(plan, par, order_seed=j if k > 1 else None), par)
                                for j in range(k)], tied)
            rows[-1]["assumptions"], note = assumptions(rows[-1], par_row, a.parallel_slots)
            rows[-1]["notes"].append(note)
    ref_model = next((a.model for a in arms if a.name == baseline), arms[0].model)
    realized = realized_cache_saving(plan, ref_model)
    ref, why = reference_arm(arms, baseline, realized is not None)
    rank = ranking(rows, ref, {a.name: a.knobs for a in arms})
    with_cache = next((r for r in rows if r.get("cache")), None)
    cache: ForecastCache
    if with_cache is not None:
        f = with_cache["cache"]  # its figures (cache_figures' keys, in their order), then the arm's name
        cache = {"capacity_tokens": f["capacity_tokens"], "block_tokens": f["block_tokens"], "source": f["source"],
                 "rule": f["rule"], "rule_text": f["rule_text"], "hit_tokens": f["hit_tokens"],
                 "input_tokens": f["input_tokens"], "hit_share": f["hit_share"],
                 "unbounded_hit_share": f["unbounded_hit_share"], "evicted_tokens": f["evicted_tokens"],
                 "arm": with_cache["arm"], "upper_bound_hit_share": f["unbounded_hit_share"],
                 "trace_cached_share": trace_cached_share}
    else:
        cache = {"arm": None, "capacity_tokens": None, "hit_share": None, "unbounded_hit_share": unbounded_share[0],
                 "note": "no arm has a prefix cache on", "upper_bound_hit_share": unbounded_share[0],
                 "trace_cached_share": trace_cached_share}
    notes = [why] if why else []
    if realized is not None:
        notes.append(f"the traffic's prefix cache was already on: it served {realized['cached_share']:.1%} of the "
                     f"input tokens, saving {realized['saved_prefill_s']:.3g} s of prefill on arm {baseline!r}'s "
                     "rates; arms with a cache serve those tokens as recorded, arms without prefill them")
    if not plan.has_arrivals:
        notes.append("the trace records no arrival times: calls are served back to back (no queueing)")
    if order_note:
        notes.append(order_note)
    return {"arms": rows, "ranking": rank, "reference": ref, "cache": cache, "cache_already_on": realized,
            "calls": len(plan.calls), "sessions": len(plan.sessions), "left_out": plan.left_out,
            "plan": plan.options, "notes": notes}


def cache_pass(plan: Plan, capacity_tokens: float, block_tokens: int) -> CachePass:
    """A finite cache run over the planned calls in the plan's order (sessions one after another, each call
    inserted when it is looked up), without serving them: {hit_tokens, input_tokens, hit_share,
    unbounded_hit_share, capacity_tokens, block_tokens, evicted_tokens}."""
    cache, shadow = PrefixCache(capacity_tokens, block_tokens), unbounded(block_tokens)
    for s in plan.sessions:
        for i, c in enumerate(s):
            pieces = (*c.pieces, c.out_piece) if c.out_piece is not None and i + 1 < len(s) else c.pieces
            for ch in (cache, shadow):
                ch.lookup(ch.units(c.pieces), c.input_tokens)
                ch.insert(ch.units(pieces))
    return {"hit_tokens": cache.hit_tokens, "input_tokens": cache.looked_up_tokens, "hit_share": cache.hit_share,
            "unbounded_hit_share": shadow.hit_share,
            "capacity_tokens": capacity_tokens if math.isfinite(capacity_tokens) else None,
            "block_tokens": block_tokens, "evicted_tokens": cache.evicted_tokens}
