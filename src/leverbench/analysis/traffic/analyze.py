"""Where the time of recorded traffic goes, and which lever would return most.

Pure functions over the calls (:class:`~leverbench.workload.traces.TrafficCall`
records, or the columnar frame a trace importer returns) and measured rates;
every number is a sum over the calls per (model, input-length bucket) or a
percentile of token counts, computed in passes of bounded memory
(:mod:`.traffic_sums`), so a log of any length is analysed without loading it
whole.  Rates: :mod:`.traffic_rates`; fits: :mod:`.traffic_fit`.  The source article's lesson: the prefill:decode
ratio of *your* traffic decides the lever, so this applies measured rates to
every recorded call.

Per call i (input I, output O, cached tokens C, with the rates of its model):

    prefill_s = a + I / prefill_tps          (every lever off: the whole prompt; where a cache already
                                              served C_served: a + (I − C_served) / prefill_tps, the time
                                              actually spent)
    decode_s  = O / decode_tps
    queue_s   = max(0, ttft_s − (a + (I − C_served) / prefill_tps))
                only when the traffic has TTFTs and the rates were not fitted
                from those same TTFTs (then queueing sits inside a); else 0
                and reported "not measured".  C_served = C when the stack
                reported it as read from its cache, else 0.
    total_s   = prefill_s + decode_s + queue_s

Shares are phase sums over total sums, overall and per input-length bucket
(``BUCKETS``: <1k, 1k–4k, 4k–16k, 16k–64k, ≥64k, with k = 1,024 tokens).

Levers (Amdahl: each removes time from its own phase only): every lever of the registry that declares a
traffic saving (:attr:`leverbench.levers.Lever.traffic`, in its module: the prefix cache, the drafter, the answer
cap), in the registry's order.  Its module says the phase it acts on, the rate its saving needs and the saving of
a group of calls (its formula, e.g. C / prefill_tps for the prefix cache, decode_s × (1 − 1/speedup) for the
drafter, max(0, O − N) / decode_tps for an answer cap of N), and its parameter in words; the row is named by its
words.  The lever that caches prompts (:attr:`~leverbench.levers.Lever.caches_prompts`) is the one the log's
cached tokens speak of: when they were served (a cache was already on: a gateway log, a vLLM or AIPerf export, a
leverbench ledger), it is not a lever to try: its row says "already on" with its realized saving Σ C_served /
prefill_tps (and that as a share of the time it would take without it), and the other levers are ranked against
the time actually spent.  Where the log only shows potential sharing (Mooncake hash ids), ``finite_cache`` (a
cache of finite capacity run over the calls, :mod:`.prefix_cache`) puts its saving Σ hit / prefill_tps beside
the unbounded one.

    saved share         = Σ saved / Σ total
    GPU-h per 1000 calls = (Σ saved / n) × gpus × 1000 / 3600
    $ per 1000 calls     = GPU-h per 1000 calls × gpu_hour_usd

A lever's range is its saved share at the extreme values of its own rate
where several were measured (``Rates.alternatives``); else the spread of
its saved share across models, or across input-length buckets, each holding
≥ 5 % of the calls.

Fitting rates from traffic with latencies (``fit_rates``, :mod:`.traffic_fit`), per model and
pooled: latency = a + b·O by least squares (the article's regression;
``regression.regress``, which adds a term c·(I − C_served) when the uncached
input varies independently of O, so varying prompts do not bias b),
decode_tps = 1/b, R² reported.  Prefill from
TTFT = a' + b'·(I − C_served) when TTFTs are recorded, else from the
per-call intercepts latency − O/decode_tps = a' + b'·(I − C_served);
prefill_tps = 1/b', prefill_a_s = max(a', 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Mapping, Sequence, cast

import polars as pl

from ...errors import BadInput
from ...levers import Lever, TrafficFacts, registry
from ...schema.traffic_rows import TrafficResult
from ..base.bounds import MAX_GPU_HOUR_USD, MAX_GPUS
from ..base.operating_point import sides, under_load
from .fit import fit_rates
from .operating import traffic_operating_point
from .rates import RateBook, Rates, choose_rates, hand_rates, rates_for, rates_from_summary, with_drafter  # noqa: F401
from .sums import (
    BUCKETS,
    NO_MODEL,
    as_frame,
    collect,
    distribution_of_counts,
    percentiles,
    phase_sums,
    rate_table,
    total,
    value_counts,
)
from .words import PHASES, conditions, pct, phase_share, recommend, saved_s

if TYPE_CHECKING:
    from ...schema.load_lever_rows import LoadLeverRow
    from ...schema.traffic_rows import (
        BucketRow,
        FiniteCache,
        FiniteCacheRow,
        LeverRow,
        PhaseRow,
        PhaseSums,
        TrafficExtrapolation,
    )
    from ...workload.traces.records import TrafficCall, TrafficLoad
    from .words import TrafficPhase

__all__ = ["BUCKETS", "PHASES", "Rates", "analyze_traffic", "bucket_of", "choose_rates", "conditions",
           "fit_rates", "hand_rates", "has_latencies", "rates_for", "rates_from_summary", "recommend",
           "with_drafter"]

RANGE_MIN_CALL_SHARE = 0.05


# ---------------------------------------------------------------- per-call formulas


def prefill_seconds(input_tokens: float, r: Rates, cached_tokens: float = 0.0) -> float:
    """a + (I − C) / prefill_tps."""
    return r.prefill_a_s + (input_tokens - cached_tokens) / r.prefill_tps


def decode_seconds(output_tokens: float, r: Rates) -> float:
    """O / decode_tps."""
    return output_tokens / r.decode_tps


def gpu_hours_per_1000(seconds_per_call: float, gpus: float = 1.0) -> float:
    """seconds per call × gpus × 1000 / 3600."""
    return seconds_per_call * gpus * 1000.0 / 3600.0


def bucket_of(input_tokens: float) -> str:
    for name, lo, hi in BUCKETS:
        if lo <= input_tokens < hi:
            return name
    return BUCKETS[-1][0]


# ---------------------------------------------------------------- the analysis, from sums per (model, bucket)


def _phase_row(rows: Sequence[PhaseSums]) -> PhaseRow:
    sums = {p: total(rows, p) for p in PHASES}
    tot = sum(sums.values())

    def share(p: TrafficPhase) -> float | None:
        return sums[p] / tot if tot > 0 else None

    return {"calls": int(total(rows, "calls")), "prefill_s": sums["prefill"], "decode_s": sums["decode"],
            "queue_s": sums["queue"], "total_s": tot, "prefill_share": share("prefill"),
            "decode_share": share("decode"), "queue_share": share("queue"),
            "dominant": max(PHASES, key=lambda p: sums[p]) if tot > 0 else None}


def _saved(x: Lever, g: PhaseSums, r: Rates, value: float | None = None) -> float | None:
    """Seconds lever ``x`` removes from group ``g`` (rates ``r``; ``value``: its rate at another value)."""
    spec = x.traffic
    return spec.saved(g, value or getattr(r, spec.rate)) if spec else None


def _lever_total(x: Lever, rows: Sequence[PhaseSums], rates: Mapping[str, Rates],
                 value: Mapping[str, float | None] | None = None) -> float | None:
    """Σ over ``rows`` of the seconds lever ``x`` removes (None: unknown for every row)."""
    parts = [_saved(x, g, rates[g["model"]], (value or {}).get(g["model"])) for g in rows]
    known = [p for p in parts if p is not None]
    return float(sum(known)) if known else None


def _extremes(rates: Mapping[str, Rates], param: str) -> tuple[dict[str, float | None], dict[str, float | None]] | None:
    """Per model, the min and max measured value of ``param`` (main value and alternatives)."""
    if not any(r.alternatives.get(param) for r in rates.values()):
        return None
    vals = {m: [v for v in (getattr(r, param), *r.alternatives.get(param, ())) if v is not None]
            for m, r in rates.items()}
    return ({m: min(v) if v else None for m, v in vals.items()}, {m: max(v) if v else None for m, v in vals.items()})


def _lever_range(x: Lever, rows: Sequence[PhaseSums], rates: Mapping[str, Rates], n: int,
                 tot: float) -> tuple[list[float] | None, str | None]:
    """(lo, hi) saved share, and where the spread comes from."""
    param = x.traffic.rate if x.traffic else ""
    ext = _extremes(rates, param)
    if ext is not None:
        shares = [s / tot for s in (_lever_total(x, rows, rates, e) for e in ext) if s is not None]
        if shares:
            lo = min(v for v in ext[0].values() if v is not None)
            hi = max(v for v in ext[1].values() if v is not None)
            return [min(shares), max(shares)], f"the {param.replace('_', ' ')} values measured ({lo:.3g}–{hi:.3g})"
    groupings: tuple[tuple[Literal["model", "bucket"], str], ...] = (
        ("model", "models"), ("bucket", "input-length buckets"))
    for key, label in groupings:
        sizes: dict[str, float] = {}
        for g in rows:
            sizes[g[key]] = sizes.get(g[key], 0) + g["calls"]
        groups = [k for k, c in sizes.items() if c >= RANGE_MIN_CALL_SHARE * n]
        if len(groups) < 2:
            continue
        shares = []
        for k in groups:
            part = [g for g in rows if g[key] == k]
            t = _phase_row(part)["total_s"]
            if t > 0:
                shares.append((_lever_total(x, part, rates) or 0.0) / t)
        if len(shares) >= 2:
            return [min(shares), max(shares)], f"across {label} holding ≥{RANGE_MIN_CALL_SHARE:.0%} of the calls"
    return None, None


def _already_on(x: Lever, ceiling: float | None, parameter: str | None, rows: Sequence[PhaseSums],
                rates: Mapping[str, Rates], overall: PhaseRow, cached: Mapping[str, float], n: int, gpus: float,
                gpu_hour_usd: float | None) -> LeverRow:
    """The row of the lever that caches prompts when the log's cached tokens were served: not a lever to try,
    its realized saving instead (share of the time the calls would take without it)."""
    s = _lever_total(x, rows, rates) or 0.0
    without = overall["total_s"] + s
    gh = gpu_hours_per_1000(s / n, gpus)
    return {"lever": x.words, "phase": x.phases[0], "ceiling_share": ceiling, "already_on": True,
            "parameter": parameter, "estimated": False, "saved_s": None, "saved_share": None, "range": None,
            "range_source": None, "realized_saved_s": s, "realized_share": s / without if without > 0 else None,
            "realized_gpu_hours_per_1000_calls": gh,
            "realized_usd_per_1000_calls": gh * gpu_hour_usd if gpu_hour_usd is not None else None,
            "served_share": cached["cached"] / cached["all_input"] if cached["all_input"] else None,
            "reason": "already on: the log's cached tokens were served by a cache"}


def _lever_row(x: Lever, rows: Sequence[PhaseSums], rates: Mapping[str, Rates], overall: PhaseRow, n: int,
               facts: TrafficFacts, cached: Mapping[str, float], gpus: float, gpu_hour_usd: float | None,
               cache_on: bool = False, finite: FiniteCache | None = None) -> LeverRow:
    """One lever's row: its phase and ceiling, its parameter, and its saving (its module's formula) or why none.
    (Its keys in the order the JSON shows them: the lever, its phase and ceiling, whether already on, its
    parameter, then its saving.)"""
    spec, phase = x.traffic, x.phases[0]
    assert spec is not None  # a traffic lever (registry.traffic_levers)
    ceiling = phase_share(overall, phase)  # a traffic lever acts on prefill or decode
    parameter = spec.parameter(facts)
    if x.caches_prompts and cache_on:
        return _already_on(x, ceiling, parameter, rows, rates, overall, cached, n, gpus, gpu_hour_usd)
    s = _lever_total(x, rows, rates)
    if s is None:
        return {"lever": x.words, "phase": phase, "ceiling_share": ceiling, "already_on": False,
                "parameter": parameter, "estimated": False, "saved_s": None, "saved_share": None, "range": None,
                "range_source": None, "reason": spec.unknown}
    tot = overall["total_s"]
    per_call = s / n
    rng, rng_src = _lever_range(x, rows, rates, n, tot)
    gh = gpu_hours_per_1000(per_call, gpus)
    row: LeverRow = {"lever": x.words, "phase": phase, "ceiling_share": ceiling, "already_on": False,
                     "parameter": parameter, "estimated": True, "saved_s": s,
                     "saved_share": s / tot if tot > 0 else None, "saved_s_per_call": per_call,
                     "gpu_hours_per_1000_calls": gh,
                     "usd_per_1000_calls": gh * gpu_hour_usd if gpu_hour_usd is not None else None,
                     "range": rng, "range_source": rng_src, "reason": None}
    if x.caches_prompts and finite is not None:
        f = row["finite"] = _finite_row(finite, rates, tot)
        given = row["parameter"] or "no cached share recorded"
        row["parameter"] = (f"{given}, every earlier prompt kept (the upper bound); a cache of "
                            f"{f['capacity_tokens']:,.0f} tokens in blocks of {f['block_tokens']} would serve "
                            f"{pct(f['hit_share'])} of input tokens, saving {pct(f['saved_share'])} of the time")
    return row


def _bucket_row(name: str, call_share: float, phases: PhaseRow) -> BucketRow:
    """One input-length bucket's row: its name and share of the calls, then its phase row's keys."""
    return {"bucket": name, "call_share": call_share, "calls": phases["calls"], "prefill_s": phases["prefill_s"],
            "decode_s": phases["decode_s"], "queue_s": phases["queue_s"], "total_s": phases["total_s"],
            "prefill_share": phases["prefill_share"], "decode_share": phases["decode_share"],
            "queue_share": phases["queue_share"], "dominant": phases["dominant"]}


def _finite_row(finite: FiniteCache, rates: Mapping[str, Rates], tot: float) -> FiniteCacheRow:
    """A finite cache's estimate beside the unbounded one: saved = its hit tokens / prefill_tps (one prefill
    rate for every call; with several, unknown)."""
    tps = {r.prefill_tps for r in rates.values()}
    saved = finite["hit_tokens"] / tps.pop() if len(tps) == 1 else None
    return {**finite, "saved_s": saved, "saved_share": saved / tot if saved is not None and tot > 0 else None}


def analyze_traffic(calls: Sequence[TrafficCall] | TrafficLoad | pl.LazyFrame | pl.DataFrame, book: RateBook, *,
                    cached_served: bool = False, queue_from_ttft: bool = True, answer_cap: int | None = None,
                    assumed_cached_share: float | None = None, gpus: float = 1.0,
                    gpu_hour_usd: float | None = None, cached_meaning: str | None = None,
                    finite_cache: FiniteCache | None = None, load_levers: Sequence[LoadLeverRow] = ()
                    ) -> TrafficResult:
    """Where the time of ``calls`` goes under ``book``'s rates, and what each lever would return.

    ``calls``: TrafficCall records, a TrafficLoad, or a frame of the canonical
    columns (read in passes of bounded memory, see :mod:`.traffic_sums`).
    ``queue_from_ttft`` is False when the rates were fitted from these same
    TTFTs.  ``answer_cap`` defaults to the median output length (an
    assumption, said so).  ``assumed_cached_share`` fills cached tokens for
    calls that record none.  ``finite_cache``: a finite cache's hits over these
    calls ({hit_tokens, hit_share, capacity_tokens, block_tokens, source}), shown
    beside the unbounded saving.  ``load_levers``: the ``--rates`` run's levers under load (its summary's
    ``load_levers``): the operating point (arrival rate, calls in flight: :mod:`.operating`) says on which side of
    each one's crossover this traffic lies, and a queue that dominates names batching with its measured effect
    (``under_load``).  Returns a JSON-ready dict: distribution, rates,
    overall and per-bucket shares, levers (ranked), recommendation, and
    ``cache_already_on`` (the log's cached tokens were served: prefill counts the
    uncached tokens only and the cache is not a lever to try).
    """
    lf = as_frame(calls)
    per_model, vin, vout, vcached, known = collect(
        lf.group_by(pl.col("model").fill_null(NO_MODEL)).agg(n=pl.len(), ttft=pl.col("ttft").is_not_null().sum()),
        value_counts(lf, "input"), value_counts(lf, "output"), value_counts(lf, "cached"),
        lf.filter(pl.col("cached").is_not_null()).select(
            calls=pl.len(), cached=pl.col("cached").cast(pl.Float64).sum(),
            input=pl.col("input").cast(pl.Float64).sum()))
    n = int(per_model.get_column("n").sum())
    if n == 0:
        raise BadInput("no calls to analyse")
    if assumed_cached_share is not None and not 0 <= assumed_cached_share < 1:
        raise BadInput(f"--cached-share must be in [0, 1) (got {assumed_cached_share})")
    if not (0 < gpus <= MAX_GPUS and (gpu_hour_usd is None or 0 <= gpu_hour_usd <= MAX_GPU_HOUR_USD)):
        raise BadInput(f"GPUs {gpus:g} or price {gpu_hour_usd} per GPU-hour out of range (GPUs above 0 and at most "
                       f"{MAX_GPUS:,}, a price from 0 to {MAX_GPU_HOUR_USD:,.0f}): check --gpus and --gpu-hour-usd, "
                       "or the conditions of the run given to --rates")
    models = per_model.get_column("model").to_list()
    rates = {m: rates_for(book, m or None) for m in models}
    ttft_calls = int(per_model.get_column("ttft").sum())
    queue_measured = queue_from_ttft and ttft_calls > 0
    cap_default = answer_cap is None
    out_v, out_n = vout.get_column("value").to_numpy(), vout.get_column("n").to_numpy()
    cap = float(answer_cap) if answer_cap is not None else percentiles(out_v, out_n, [50])[0]
    k = known.row(0, named=True)
    cache_on = bool(cached_served and (k["cached"] or 0) > 0)
    sums = collect(phase_sums(lf, rate_table(models, book), cap=cap, assumed_share=assumed_cached_share,
                              cached_served=cached_served, queue=queue_measured, cache_on=cache_on))[0]
    # (polars gives each row as dict[str, Any]: these are phase_sums's columns, which PhaseSums names)
    rows = cast("list[PhaseSums]", list(sums.iter_rows(named=True)))
    overall = _phase_row(rows)
    tot = overall["total_s"]
    in_v, in_n = vin.get_column("value").to_numpy(), vin.get_column("n").to_numpy()
    all_input, all_output = float((in_v.astype(float) * in_n).sum()), float((out_v.astype(float) * out_n).sum())
    cached = {"calls": k["calls"], "cached": k["cached"] or 0.0, "all_input": all_input}
    buckets: list[BucketRow] = []
    for name, _, _ in BUCKETS:
        part = [g for g in rows if g["bucket"] == name]
        if part:
            buckets.append(_bucket_row(name, total(part, "calls") / n, _phase_row(part)))
    facts = {x.name: TrafficFacts(
        rate_values=tuple(v for r in book.values() if x.traffic and (v := getattr(r, x.traffic.rate))),
        answer_cap=cap, answer_cap_default=cap_default, cached_calls=int(cached["calls"]),
        cached_tokens=cached["cached"], input_tokens=cached["all_input"], assumed_cached_share=assumed_cached_share)
        for x in registry.traffic_levers()}
    levers = [_lever_row(x, rows, rates, overall, n, facts[x.name], cached, gpus, gpu_hour_usd, cache_on,
                         finite_cache) for x in registry.traffic_levers()]
    est = sorted((l for l in levers if l["estimated"]), key=lambda l: -saved_s(l))
    levers = est + [l for l in levers if not l["estimated"]]
    for b in buckets:
        part = [g for g in rows if g["bucket"] == b["bucket"]]
        b["levers"] = {x.words: ((_lever_total(x, part, rates) or 0.0) / b["total_s"]
                                 if _lever_total(x, rows, rates) is not None and b["total_s"] > 0
                                 and not (cache_on and x.caches_prompts) else None)
                       for x in registry.traffic_levers()}
    per_call = tot / n
    gh = gpu_hours_per_1000(per_call, gpus)
    # by keyword: one of the result's fields bears the answer cap's name in the schema (analyze's published output)
    result = TrafficResult(
        calls=n,
        distribution={"input_tokens": distribution_of_counts(in_v, in_n),
                      "output_tokens": distribution_of_counts(out_v, out_n),
                      "cached_tokens": distribution_of_counts(vcached.get_column("value").to_numpy(),
                                                              vcached.get_column("n").to_numpy()),
                      "cached_share_of_input": cached["cached"] / k["input"] if k["calls"] and k["input"] else None,
                      "input_output_ratio": all_input / all_output if all_output > 0 else None},
        rates={("*" if key is None else key): r.as_dict() for key, r in book.items()},
        queue={"measured": queue_measured, "calls_with_ttft": ttft_calls,
               "note": ("queue = max(0, TTFT − modelled prefill), per call" if queue_measured else
                        "not measured: rates fitted from these TTFTs hold queueing in their intercept"
                        if ttft_calls and not queue_from_ttft else
                        "not measured: the traffic records no TTFT")},
        overall=overall,
        buckets=buckets,
        levers=levers,
        ranking=[l["lever"] for l in est],
        cost={"gpus": gpus, "gpu_hour_usd": gpu_hour_usd, "seconds_per_call": per_call,
              "gpu_hours_per_1000_calls": gh,
              "usd_per_1000_calls": gh * gpu_hour_usd if gpu_hour_usd is not None else None},
        answer_cap=cap, answer_cap_default=cap_default,
        cached_meaning=cached_meaning,
        cache_already_on=cache_on,
        extrapolation=_extrapolation(rows, rates, n),
    )
    point = traffic_operating_point(lf, rate_table(models, book), cached_served)
    if point is not None:
        point["sides"] = sides(load_levers, point)
    result["operating_point"] = point
    result["under_load"] = under_load(load_levers)
    said = [c for x in registry.traffic_levers() if x.traffic and x.traffic.condition
            and (c := x.traffic.condition(facts[x.name]))]
    result["conditions"] = conditions(result, book, said)
    result["recommendation"] = recommend(result)
    return result


def _extrapolation(rows: Sequence[PhaseSums], rates: Mapping[str, Rates], n: int) -> TrafficExtrapolation | None:
    """Share of calls whose input lies above the largest input the prefill rate was measured on."""
    his = [r.prefill_input_range[1] for r in rates.values() if r.prefill_input_range]
    if not his:
        return None
    beyond = int(total(rows, "beyond"))
    return {"calls_beyond": beyond, "share_beyond": beyond / n, "largest_measured": float(max(his))}


def has_latencies(calls: Sequence[TrafficCall] | TrafficLoad | pl.LazyFrame | pl.DataFrame) -> bool:
    """Whether any call records its latency (so rates can be fitted from the traffic)."""
    return bool(collect(as_frame(calls).select(pl.col("latency").is_not_null().any()))[0].item())

