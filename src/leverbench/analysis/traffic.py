"""Where the time of recorded traffic goes, and which lever would return most.

Pure functions over :class:`~leverbench.workload.traces.TrafficCall` records
and measured rates; no I/O.  The source article's lesson: the prefill:decode
ratio of *your* traffic decides the lever, so this applies measured rates to
every recorded call.

Per call i (input I, output O, cached tokens C, with the rates of its model):

    prefill_s = a + I / prefill_tps          (every lever off: the whole prompt)
    decode_s  = O / decode_tps
    queue_s   = max(0, ttft_s − (a + (I − C_served) / prefill_tps))
                only when the traffic has TTFTs and the rates were not fitted
                from those same TTFTs (then queueing sits inside a); else 0
                and reported "not measured".  C_served = C when the stack
                reported it as read from its cache, else 0.
    total_s   = prefill_s + decode_s + queue_s

Shares are phase sums over total sums, overall and per input-length bucket
(``BUCKETS``: <1k, 1k–4k, 4k–16k, 16k–64k, ≥64k, with k = 1,024 tokens).

Levers (Amdahl: each removes time from its own phase only):

    prefix cache  saved_i = C_i / prefill_tps    (C from the trace; or
                  share × I under an assumed --cached-share; unknown otherwise)
    drafter       saved_i = decode_s × (1 − 1/speedup)   (negative when the
                  drafter is slower than plain decoding)
    answer cap N  saved_i = max(0, O − N) / decode_tps

    saved share         = Σ saved / Σ total
    GPU-h per 1000 calls = (Σ saved / n) × gpus × 1000 / 3600
    $ per 1000 calls     = GPU-h per 1000 calls × gpu_hour_usd

A lever's range is its saved share at the extreme values of its own rate
(prefill_tps for the cache, speedup for the drafter, decode_tps for the
cap) where several were measured (``Rates.alternatives``); else the spread of
its saved share across models, or across input-length buckets, each holding
≥ 5 % of the calls.

Fitting rates from traffic with latencies (``fit_rates``), per model and
pooled: latency = a + b·O by least squares (the article's regression;
``regression.regress``, which adds a term c·(I − C_served) when the uncached
input varies independently of O, so varying prompts do not bias b),
decode_tps = 1/b, R² reported.  Prefill from
TTFT = a' + b'·(I − C_served) when TTFTs are recorded, else from the
per-call intercepts latency − O/decode_tps = a' + b'·(I − C_served);
prefill_tps = 1/b', prefill_a_s = max(a', 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..errors import BadInput
from .knobs import differing, is_on
from .regression import fit_line, regress

BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("<1k", 0, 1024), ("1k–4k", 1024, 4096), ("4k–16k", 4096, 16384),
    ("16k–64k", 16384, 65536), ("≥64k", 65536, math.inf),
)
RANGE_MIN_CALL_SHARE = 0.05
PHASES = ("prefill", "decode", "queue")
LEVER_PHASE = {"prefix cache": "prefill", "drafter": "decode", "answer cap": "decode"}


@dataclass(frozen=True)
class Rates:
    """Measured serving rates, with where they came from.

    prefill_s(I) = prefill_a_s + I / prefill_tps; decode_s(O) = O / decode_tps.
    ``drafter_speedup`` = decode rate with the drafter / without.
    ``alternatives`` holds other measured values of ``prefill_tps``,
    ``decode_tps`` or ``drafter_speedup`` (other arms, other comparisons): they
    set the lever ranges.  ``conditions`` are the measurement's conditions
    (hardware, engine, concurrency) to quote with any number.
    """

    prefill_tps: float
    decode_tps: float
    source: str
    prefill_a_s: float = 0.0
    prefill_source: str = ""
    decode_source: str = ""
    drafter_speedup: float | None = None
    drafter_source: str | None = None
    prefill_input_range: tuple[float, float] | None = None
    fit: dict[str, Any] | None = None
    alternatives: dict[str, tuple[float, ...]] = field(default_factory=dict)
    conditions: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"prefill_tps": self.prefill_tps, "prefill_a_s": self.prefill_a_s, "decode_tps": self.decode_tps,
                "source": self.source, "prefill_source": self.prefill_source, "decode_source": self.decode_source,
                "drafter_speedup": self.drafter_speedup, "drafter_source": self.drafter_source,
                "prefill_input_range": list(self.prefill_input_range) if self.prefill_input_range else None,
                "fit": self.fit, "alternatives": {k: list(v) for k, v in self.alternatives.items()},
                "conditions": list(self.conditions)}


# model name → Rates; the key None holds the rates for every other call
RateBook = Mapping[str | None, Rates]


# ---------------------------------------------------------------- per-call formulas


def prefill_seconds(input_tokens: float, r: Rates, cached_tokens: float = 0.0) -> float:
    """a + (I − C) / prefill_tps."""
    return r.prefill_a_s + (input_tokens - cached_tokens) / r.prefill_tps


def decode_seconds(output_tokens: float, r: Rates) -> float:
    """O / decode_tps."""
    return output_tokens / r.decode_tps


def cache_saving(cached_tokens: float, r: Rates) -> float:
    """Prefill time a prefix cache removes: C / prefill_tps."""
    return cached_tokens / r.prefill_tps


def drafter_saving(decode_s: float, speedup: float) -> float:
    """Decode time a drafter removes: decode_s × (1 − 1/speedup) (negative if speedup < 1)."""
    return decode_s * (1.0 - 1.0 / speedup)


def cap_saving(output_tokens: float, cap: float, r: Rates) -> float:
    """Decode time of the tokens above an answer cap: max(0, O − N) / decode_tps."""
    return max(0.0, output_tokens - cap) / r.decode_tps


def gpu_hours_per_1000(seconds_per_call: float, gpus: float = 1.0) -> float:
    """seconds per call × gpus × 1000 / 3600."""
    return seconds_per_call * gpus * 1000.0 / 3600.0


def bucket_of(input_tokens: float) -> str:
    for name, lo, hi in BUCKETS:
        if lo <= input_tokens < hi:
            return name
    return BUCKETS[-1][0]


def distribution(xs: Sequence[float] | np.ndarray) -> dict[str, float] | None:
    """p50, p90, p99 (linear interpolation, NumPy's default), mean and max."""
    a = np.asarray(xs, dtype=float)
    if a.size == 0:
        return None
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(a.mean()), "max": float(a.max())}


# ---------------------------------------------------------------- rates


def rates_for(book: RateBook, model: str | None) -> Rates:
    r = book.get(model) if model is not None else None
    if r is None:
        r = book.get(None)
    if r is None:
        raise BadInput(f"no rates for model {model!r} and no rates for all calls")
    return r


def hand_rates(prefill_tps: float | None, decode_tps: float | None, prefill_a_s: float = 0.0) -> dict[str, Any]:
    """The fields given by hand (--prefill-tps, --decode-tps), to override others in ``choose_rates``."""
    out: dict[str, Any] = {}
    for name, v in (("prefill_tps", prefill_tps), ("decode_tps", decode_tps)):
        if v is not None:
            if not v > 0:
                raise BadInput(f"--{name.replace('_', '-')} must be positive (got {v})")
            out[name] = float(v)
    if prefill_tps is not None:
        out["prefill_a_s"] = float(prefill_a_s)
    return out


def choose_rates(hand: Mapping[str, Any], run: Rates | None, fitted: RateBook | None) -> dict[str | None, Rates]:
    """Rates per model from where they are best known: by hand > run directory > fitted from the traffic.

    Field by field: a hand-given prefill or decode rate replaces that field in
    every model's rates; a run's rates replace fitted ones.  Raises BadInput
    when neither prefill nor decode can be had.
    """
    if run is not None:
        book: dict[str | None, Rates] = {None: run}
    elif fitted:
        book = dict(fitted)
    else:
        if "prefill_tps" not in hand or "decode_tps" not in hand:
            missing = [f"--{k.replace('_', '-')}" for k in ("prefill_tps", "decode_tps") if k not in hand]
            raise BadInput("no rates: this traffic has no latencies to fit them from; give --rates RUN_DIR "
                           f"(a leverbench run) or {' and '.join(missing)}")
        return {None: Rates(prefill_tps=hand["prefill_tps"], decode_tps=hand["decode_tps"],
                            prefill_a_s=hand.get("prefill_a_s", 0.0), source="given by hand",
                            prefill_source="given by hand", decode_source="given by hand")}
    out = {}
    for k, r in book.items():
        kw: dict[str, Any] = {}
        if "prefill_tps" in hand:
            kw.update(prefill_tps=hand["prefill_tps"], prefill_a_s=hand.get("prefill_a_s", 0.0),
                      prefill_source="given by hand", prefill_input_range=None)
        if "decode_tps" in hand:
            kw.update(decode_tps=hand["decode_tps"], decode_source="given by hand")
        if kw:
            alts = {n: v for n, v in r.alternatives.items() if n not in kw}
            kw["source"] = r.source + " (" + ", ".join(f"{n} by hand" for n in ("prefill_tps", "decode_tps") if n in kw) + ")"
            r = replace(r, alternatives=alts, **kw)
        out[k] = r
    return out


def with_drafter(book: RateBook, speedup: float | None, source: str = "--drafter-speedup, given by hand") -> dict[str | None, Rates]:
    """Every model's rates with the drafter speedup set (``--drafter-speedup``)."""
    if speedup is None:
        return dict(book)
    if not speedup > 0:
        raise BadInput(f"--drafter-speedup must be positive (got {speedup})")
    return {k: replace(r, drafter_speedup=speedup, drafter_source=source,
                       alternatives={n: v for n, v in r.alternatives.items() if n != "drafter_speedup"})
            for k, r in book.items()}


def _rate_row(summary: Mapping[str, Any], arm: str) -> dict[str, Any]:
    return next((r for r in summary.get("rates") or [] if r.get("arm") == arm), {})


def rates_from_summary(summary: Mapping[str, Any], label: str = "run") -> Rates:
    """The no-lever rates of a leverbench run (its baseline arm), with the drafter's measured speedup.

    drafter_speedup = decode_tps of the arm that declares a drafter / decode_tps
    of the arm that differs from it only in the drafter (else the baseline);
    its speedup against every other arm without a drafter goes to the
    alternatives, as do all arms' prefill rates and the non-drafter arms'
    decode rates.
    """
    base_name = summary.get("baseline")
    base = _rate_row(summary, base_name)
    if not base.get("prefill_tps") or not base.get("decode_tps"):
        raise BadInput(f"{label}: the baseline arm {base_name!r} has no measured prefill and decode rate "
                       "(summary rates); use another run or give --prefill-tps and --decode-tps")
    arms = {a["name"]: a for a in summary.get("arms") or []}
    cond = {n: dict(a.get("conditions") or {}) for n, a in arms.items()}
    rows = {r["arm"]: r for r in summary.get("rates") or [] if r.get("arm") in arms}
    drafters = [n for n in arms if is_on(cond[n].get("drafter")) and rows.get(n, {}).get("decode_tps")]
    plain = [n for n in arms if not is_on(cond[n].get("drafter")) and rows.get(n, {}).get("decode_tps")]
    speedup = src = None
    speedups: list[float] = []
    if drafters:
        d = drafters[0]
        twin = next((n for n in plain if differing(cond[n], cond[d]) == ["drafter"]), base_name)
        if rows.get(twin, {}).get("decode_tps"):
            speedup = rows[d]["decode_tps"] / rows[twin]["decode_tps"]
            src = f"{label}: arm {d!r} ({cond[d].get('drafter')}) vs {twin!r}, decode rates from {rows[d].get('decode_source')}"
        speedups = [rows[d]["decode_tps"] / rows[n]["decode_tps"] for n in plain]
    alts = {
        "prefill_tps": tuple(r["prefill_tps"] for r in rows.values() if r.get("prefill_tps")),
        "decode_tps": tuple(rows[n]["decode_tps"] for n in plain),
        "drafter_speedup": tuple(speedups),
    }
    bc = cond.get(base_name, {})
    run = summary.get("run") or {}
    conditions = [f"{k} {bc[k]}" for k in ("hardware", "engine") if bc.get(k)]
    model = (arms.get(base_name) or {}).get("model")
    if model:
        conditions.append(f"model {model}")
    host = run.get("host") or {}
    if host.get("cpu"):
        conditions.append(f"host {host['cpu']}" + (f", {host['cores']} cores" if host.get("cores") else ""))
    conditions.append(f"concurrency {run.get('concurrency', 1)}")
    drifted = [d["arm"] for d in summary.get("drift") or [] if d.get("drifted")]
    if drifted:
        conditions.append(f"the run flagged decode-rate drift on arm(s) {', '.join(drifted)}: its rates moved while measured")
    rng = base.get("prefill_input_range")
    return Rates(prefill_tps=float(base["prefill_tps"]), decode_tps=float(base["decode_tps"]),
                 prefill_a_s=float(base.get("prefill_a_s") or 0.0),
                 source=f"{label}, baseline arm {base_name!r}",
                 prefill_source=str(base.get("prefill_source") or ""), decode_source=str(base.get("decode_source") or ""),
                 drafter_speedup=speedup, drafter_source=src,
                 prefill_input_range=(float(rng[0]), float(rng[1])) if rng else None,
                 alternatives={k: v for k, v in alts.items() if len(v) > 1},
                 conditions=tuple(conditions))


def _varies(xs: Sequence[float]) -> bool:
    """Whether x spreads enough to fit a slope: max − min ≥ max(8, 10 % of the mean)."""
    lo, hi = min(xs), max(xs)
    return hi - lo >= max(8.0, 0.10 * (sum(xs) / len(xs)))


def _fit_one(calls: Sequence[Any], cached_served: bool, label: str) -> tuple[Rates | None, dict[str, Any]]:
    timed = [c for c in calls if c.latency_s is not None]
    row: dict[str, Any] = {"model": label, "calls": len(calls), "points": len(timed)}
    served = [(c.cached_tokens or 0) if cached_served else 0 for c in timed]
    # the article's latency = a + b·output; regress adds c·uncached input when it varies independently
    reg = regress([c.output_tokens for c in timed], [c.latency_s for c in timed],
                  uncached=[c.input_tokens - s for c, s in zip(timed, served)])
    method = reg.get("method") or "latency ~ output"
    row.update(decode_tps=reg["decode_tps"], intercept_s=reg["intercept_s"], r2=reg["r2"], refused=reg["refused"],
               method=method)
    decode, dsrc = reg["decode_tps"], f"{method} (least squares)"
    with_ttft = [c for c in timed if c.ttft_s is not None]
    if decode is None and len(with_ttft) >= 3:  # fixed-length answers: decode from latency − TTFT
        gen = sum(max(c.output_tokens - 1, 0) for c in with_ttft)
        dur = sum(c.latency_s - c.ttft_s for c in with_ttft)
        if gen > 0 and dur > 0:
            decode, dsrc = gen / dur, "Σ(output − 1) / Σ(latency − TTFT)"
            row["refused"] = None
    if decode is None:
        return None, row
    if len(with_ttft) >= 3:
        xs = [c.input_tokens - ((c.cached_tokens or 0) if cached_served else 0) for c in with_ttft]
        ys = [c.ttft_s for c in with_ttft]
        psrc = "TTFT = a + b·uncached input (least squares)"
    else:
        xs = [c.input_tokens - s for c, s in zip(timed, served)]
        ys = [c.latency_s - c.output_tokens / decode for c in timed]
        psrc = "intercepts (latency − output/decode_tps) = a + b·uncached input"
    row["prefill_points"] = len(xs)
    if len(xs) < 3 or not _varies(xs):
        row["prefill_refused"] = f"{len(xs)} point(s) or input lengths that barely vary"
        return None, row
    a, b, r2 = fit_line(xs, ys)
    row.update(prefill_a=a, prefill_b=b, prefill_r2=r2)
    if b <= 0:
        row["prefill_refused"] = f"prefill slope {b:.3g} s/token is not positive"
        return None, row
    row.update(prefill_tps=1.0 / b, prefill_a_s=max(a, 0.0))
    return Rates(prefill_tps=1.0 / b, decode_tps=decode, prefill_a_s=max(a, 0.0),
                 source="fitted from the traffic's latencies", prefill_source=psrc, decode_source=dsrc,
                 prefill_input_range=(float(min(xs)), float(max(xs))),
                 fit={"model": label, "points": len(timed), "r2": reg["r2"], "prefill_r2": r2,
                      "intercept_s": reg["intercept_s"]},
                 conditions=("rates fitted from this traffic include whatever queueing and batching it saw",)), row


def fit_rates(calls: Sequence[Any], *, cached_served: bool = False) -> tuple[dict[str | None, Rates], list[dict[str, Any]]]:
    """Rates fitted from the traffic's own latencies: per model, and pooled (key None).

    Returns the rate book (empty when nothing could be fitted) and one row per
    fit with its points, R² and, where refused, why.
    """
    book: dict[str | None, Rates] = {}
    rows: list[dict[str, Any]] = []
    by_model: dict[str, list[Any]] = {}
    for c in calls:
        if c.model is not None:
            by_model.setdefault(c.model, []).append(c)
    if len(by_model) > 1 or (by_model and len(by_model[next(iter(by_model))]) < len(calls)):
        for m, cs in sorted(by_model.items()):
            r, row = _fit_one(cs, cached_served, m)
            rows.append(row)
            if r is not None:
                book[m] = r
    r, row = _fit_one(calls, cached_served, "all calls" if len(by_model) != 1 else next(iter(by_model)))
    rows.append(row)
    if r is not None:
        book[None] = r
    return book, rows


# ---------------------------------------------------------------- the analysis


@dataclass
class _Arrays:
    inp: np.ndarray
    out: np.ndarray
    cached: np.ndarray  # nan: unknown
    prefill: np.ndarray
    decode: np.ndarray
    queue: np.ndarray
    total: np.ndarray
    bucket: np.ndarray
    model: np.ndarray
    ptps: np.ndarray
    dtps: np.ndarray
    speedup: np.ndarray  # nan: unknown


def _arrays(calls: Sequence[Any], book: RateBook, cached_served: bool, queue_from_ttft: bool) -> tuple[_Arrays, int]:
    n = len(calls)
    inp = np.fromiter((c.input_tokens for c in calls), float, n)
    out = np.fromiter((c.output_tokens for c in calls), float, n)
    cached = np.fromiter((np.nan if c.cached_tokens is None else c.cached_tokens for c in calls), float, n)
    ttft = np.fromiter((np.nan if c.ttft_s is None else c.ttft_s for c in calls), float, n)
    rs = [rates_for(book, c.model) for c in calls]
    ptps = np.fromiter((r.prefill_tps for r in rs), float, n)
    a = np.fromiter((r.prefill_a_s for r in rs), float, n)
    dtps = np.fromiter((r.decode_tps for r in rs), float, n)
    speedup = np.fromiter((np.nan if r.drafter_speedup is None else r.drafter_speedup for r in rs), float, n)
    prefill = a + inp / ptps
    decode = out / dtps
    queue = np.zeros(n)
    timed = ~np.isnan(ttft)
    if queue_from_ttft and timed.any():
        served = np.where(np.isnan(cached), 0.0, cached) if cached_served else np.zeros(n)
        queue = np.where(timed, np.maximum(0.0, ttft - (a + (inp - served) / ptps)), 0.0)
    bucket = np.array([bucket_of(x) for x in inp], dtype=object)
    model = np.array([c.model if c.model is not None else "" for c in calls], dtype=object)
    return _Arrays(inp, out, cached, prefill, decode, queue, prefill + decode + queue, bucket, model,
                   ptps, dtps, speedup), int(timed.sum())


def _phase_row(A: _Arrays, mask: np.ndarray) -> dict[str, Any]:
    sums = {p: float(getattr(A, p)[mask].sum()) for p in PHASES}
    total = sum(sums.values())
    row: dict[str, Any] = {"calls": int(mask.sum()), **{f"{p}_s": sums[p] for p in PHASES}, "total_s": total}
    for p in PHASES:
        row[f"{p}_share"] = sums[p] / total if total > 0 else None
    row["dominant"] = max(PHASES, key=lambda p: sums[p]) if total > 0 else None
    return row


def _lever_arrays(A: _Arrays, cap: float, assumed_share: float | None,
                  ptps: np.ndarray | None = None, dtps: np.ndarray | None = None,
                  speedup: np.ndarray | None = None) -> dict[str, np.ndarray | None]:
    """Per-call seconds each lever removes (nan where unknown), optionally at other rates."""
    ptps = A.ptps if ptps is None else ptps
    dtps = A.dtps if dtps is None else dtps
    speedup = A.speedup if speedup is None else speedup
    cached = A.cached
    if assumed_share is not None:
        cached = np.where(np.isnan(cached), np.floor(assumed_share * A.inp), cached)
    decode = A.out / dtps
    return {
        "prefix cache": cached / ptps if not np.isnan(cached).all() else None,
        "drafter": decode * (1.0 - 1.0 / speedup) if not np.isnan(speedup).all() else None,
        "answer cap": np.maximum(0.0, A.out - cap) / dtps,
    }


_LEVER_PARAM = {"prefix cache": "prefill_tps", "drafter": "drafter_speedup", "answer cap": "decode_tps"}


def _extremes(calls: Sequence[Any], book: RateBook, param: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Per call, the min and max measured value of ``param`` (main value and alternatives)."""
    rs = [rates_for(book, c.model) for c in calls]
    if not any(r.alternatives.get(param) for r in rs):
        return None
    vals = [[v for v in (getattr(r, param), *r.alternatives.get(param, ())) if v is not None] or [np.nan] for r in rs]
    return np.array([min(v) for v in vals]), np.array([max(v) for v in vals])


def _lever_range(name: str, calls: Sequence[Any], book: RateBook, A: _Arrays, saved: np.ndarray,
                 cap: float, assumed_share: float | None, total: float) -> tuple[list[float] | None, str | None]:
    """(lo, hi) saved share, and where the spread comes from."""
    param = _LEVER_PARAM[name]
    ext = _extremes(calls, book, param)
    if ext is not None:
        shares = []
        for arr in ext:
            kw = {"ptps": arr} if param == "prefill_tps" else {"dtps": arr} if param == "decode_tps" else {"speedup": arr}
            s = _lever_arrays(A, cap, assumed_share, **kw)[name]
            if s is not None:
                shares.append(float(np.nansum(s)) / total)
        if shares:
            return [min(shares), max(shares)], f"the {param.replace('_', ' ')} values measured ({_fmt_values(ext)})"
    n = len(A.inp)
    for key, label in ((A.model, "models"), (A.bucket, "input-length buckets")):
        groups = [g for g in dict.fromkeys(key.tolist()) if (key == g).sum() >= RANGE_MIN_CALL_SHARE * n]
        if len(groups) < 2:
            continue
        shares = []
        for g in groups:
            m = key == g
            t = float(A.total[m].sum())
            if t > 0:
                shares.append(float(np.nansum(saved[m])) / t)
        if len(shares) >= 2:
            return [min(shares), max(shares)], f"across {label} holding ≥{RANGE_MIN_CALL_SHARE:.0%} of the calls"
    return None, None


def _fmt_values(ext: tuple[np.ndarray, np.ndarray]) -> str:
    lo, hi = float(np.nanmin(ext[0])), float(np.nanmax(ext[1]))
    return f"{lo:.3g}–{hi:.3g}"


def analyze_traffic(calls: Sequence[Any], book: RateBook, *, cached_served: bool = False,
                    queue_from_ttft: bool = True, answer_cap: int | None = None,
                    assumed_cached_share: float | None = None, gpus: float = 1.0,
                    gpu_hour_usd: float | None = None, cached_meaning: str | None = None) -> dict[str, Any]:
    """Where the time of ``calls`` goes under ``book``'s rates, and what each lever would return.

    ``queue_from_ttft`` is False when the rates were fitted from these same
    TTFTs.  ``answer_cap`` defaults to the median output length (an
    assumption, said so).  ``assumed_cached_share`` fills cached tokens for
    calls that record none.  Returns a JSON-ready dict: distribution, rates,
    overall and per-bucket shares, levers (ranked), recommendation.
    """
    if not calls:
        raise BadInput("no calls to analyse")
    if assumed_cached_share is not None and not 0 <= assumed_cached_share < 1:
        raise BadInput(f"--cached-share must be in [0, 1) (got {assumed_cached_share})")
    A, ttft_calls = _arrays(calls, book, cached_served, queue_from_ttft)
    n = len(calls)
    queue_measured = queue_from_ttft and ttft_calls > 0
    cap_default = answer_cap is None
    cap = float(answer_cap) if answer_cap is not None else float(np.median(A.out))
    overall = _phase_row(A, np.ones(n, dtype=bool))
    total = overall["total_s"]
    buckets = []
    for name, _, _ in BUCKETS:
        m = A.bucket == name
        if m.any():
            buckets.append({"bucket": name, "call_share": float(m.sum()) / n, **_phase_row(A, m)})
    savings = _lever_arrays(A, cap, assumed_cached_share)
    levers = []
    for name, saved in savings.items():
        row: dict[str, Any] = {"lever": name, "phase": LEVER_PHASE[name],
                               "ceiling_share": overall[f"{LEVER_PHASE[name]}_share"]}
        if name == "answer cap":
            row["parameter"] = f"cap {cap:.0f} tokens" + (", the median output" if cap_default else "")
        elif name == "drafter":
            sp = [r.drafter_speedup for r in book.values() if r.drafter_speedup]
            row["parameter"] = (f"speedup {min(sp):.2f}x" + (f"–{max(sp):.2f}x" if max(sp) != min(sp) else "")) if sp else None
        else:
            known = int((~np.isnan(A.cached)).sum())
            row["parameter"] = (f"cached share {np.nansum(A.cached) / A.inp.sum():.1%} of input tokens ({known} calls)"
                                if known else None)
            if assumed_cached_share is not None:
                row["parameter"] = (row["parameter"] + "; " if row["parameter"] else "") + \
                    f"assumed {assumed_cached_share:.0%} cached where not recorded"
        if saved is None:
            row.update(estimated=False, saved_s=None, saved_share=None, range=None, range_source=None,
                       reason=("this traffic records no prefix sharing or cached tokens; give --cached-share"
                               if name == "prefix cache" else
                               "no measured drafter speedup; give --rates RUN_DIR with a drafter arm or --drafter-speedup"))
            levers.append(row)
            continue
        s = float(np.nansum(saved))
        per_call = s / n
        rng, rng_src = _lever_range(name, calls, book, A, saved, cap, assumed_cached_share, total)
        gh = gpu_hours_per_1000(per_call, gpus)
        row.update(estimated=True, saved_s=s, saved_share=s / total if total > 0 else None, saved_s_per_call=per_call,
                   gpu_hours_per_1000_calls=gh, usd_per_1000_calls=gh * gpu_hour_usd if gpu_hour_usd is not None else None,
                   range=rng, range_source=rng_src, reason=None)
        levers.append(row)
    est = sorted((l for l in levers if l["estimated"]), key=lambda l: -l["saved_s"])
    levers = est + [l for l in levers if not l["estimated"]]
    for b in buckets:
        m = A.bucket == b["bucket"]
        b["levers"] = {name: (float(np.nansum(s[m])) / b["total_s"] if s is not None and b["total_s"] > 0 else None)
                       for name, s in savings.items()}
    per_call = total / n
    gh = gpu_hours_per_1000(per_call, gpus)
    cached_known = A.cached[~np.isnan(A.cached)]
    result: dict[str, Any] = {
        "calls": n,
        "distribution": {"input_tokens": distribution(A.inp), "output_tokens": distribution(A.out),
                         "cached_tokens": distribution(cached_known) if cached_known.size else None,
                         "cached_share_of_input": float(cached_known.sum() / A.inp[~np.isnan(A.cached)].sum())
                         if cached_known.size and A.inp[~np.isnan(A.cached)].sum() > 0 else None,
                         "input_output_ratio": float(A.inp.sum() / A.out.sum()) if A.out.sum() > 0 else None},
        "rates": {("*" if k is None else k): r.as_dict() for k, r in book.items()},
        "queue": {"measured": queue_measured, "calls_with_ttft": ttft_calls,
                  "note": ("queue = max(0, TTFT − modelled prefill), per call" if queue_measured else
                           "not measured: rates fitted from these TTFTs hold queueing in their intercept"
                           if ttft_calls and not queue_from_ttft else
                           "not measured: the traffic records no TTFT")},
        "overall": overall,
        "buckets": buckets,
        "levers": levers,
        "ranking": [l["lever"] for l in est],
        "cost": {"gpus": gpus, "gpu_hour_usd": gpu_hour_usd, "seconds_per_call": per_call,
                 "gpu_hours_per_1000_calls": gh, "usd_per_1000_calls": gh * gpu_hour_usd if gpu_hour_usd is not None else None},
        "answer_cap": cap, "answer_cap_default": cap_default,
        "cached_meaning": cached_meaning,
        "extrapolation": _extrapolation(calls, book, A),
    }
    result["conditions"] = conditions(result, book)
    result["recommendation"] = recommend(result)
    return result


def _extrapolation(calls: Sequence[Any], book: RateBook, A: _Arrays) -> dict[str, Any] | None:
    """Share of calls whose input lies above the largest input the prefill rate was measured on."""
    hi = np.array([(rates_for(book, c.model).prefill_input_range or (0, np.inf))[1] for c in calls])
    if np.isinf(hi).all():
        return None
    beyond = A.inp > hi
    return {"calls_beyond": int(beyond.sum()), "share_beyond": float(beyond.mean()), "largest_measured": float(np.nanmax(hi[~np.isinf(hi)]))}


# ---------------------------------------------------------------- words


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}" if abs(x) >= 0.1 else f"{x:.1%}"


def conditions(result: Mapping[str, Any], book: RateBook) -> list[str]:
    """The conditions under which the numbers hold, in words."""
    per = []
    for key, r in book.items():
        who = "" if len(book) == 1 else "all other calls: " if key is None else f"{key}: "
        fit = f" (R² {r.fit['r2']:.2f})" if r.fit and r.fit.get("r2") is not None else ""
        per.append(f"{who}prefill {r.prefill_tps:,.0f} tok/s + {r.prefill_a_s:.3g} s, decode {r.decode_tps:,.1f} tok/s{fit}")
    sources = dict.fromkeys(f"{r.source} (prefill: {r.prefill_source or 'n/a'}; decode: {r.decode_source or 'n/a'})"
                            + (f"; {', '.join(r.conditions)}" if r.conditions else "") for r in book.values())
    out: list[str] = ["rates " + "; ".join(per) + " — " + "; ".join(sources)]
    q = result["queue"]
    if not q["measured"]:
        out.append("queueing " + q["note"] + "; the numbers are for calls served one at a time")
    ex = result.get("extrapolation")
    if ex and ex["calls_beyond"]:
        out.append(f"{_pct(ex['share_beyond'])} of the calls have more input than the largest prompt the prefill "
                   f"rate was measured on ({ex['largest_measured']:,.0f} tokens): extrapolated")
    if result.get("cached_meaning"):
        out.append(result["cached_meaning"])
    if result.get("answer_cap_default"):
        out.append(f"the answer cap ({result['answer_cap']:.0f} tokens) is the median output, an assumption "
                   "(set --answer-cap): it pays only if shorter answers still do the job")
    for r in book.values():
        if r.drafter_speedup is not None and r.drafter_source:
            out.append(f"drafter speedup {r.drafter_speedup:.2f}x ({r.drafter_source}); acceptance depends on the text")
            break
    return out


def recommend(result: Mapping[str, Any]) -> str:
    """One paragraph: the dominant phase, the lever to try first, its gain with range, and its conditions."""
    ov = result["overall"]
    dom = ov["dominant"]
    if dom is None:
        return "The modelled time is zero: these calls have no tokens to prefill or decode."
    shares = ", ".join(f"{p} {_pct(ov[f'{p}_share'])}" for p in PHASES if p != "queue" or result["queue"]["measured"])
    text = [f"{dom.capitalize()} dominates: {_pct(ov[f'{dom}_share'])} of the modelled time ({shares}; "
            f"input:output tokens {result['distribution']['input_output_ratio']:.1f}:1)."]
    levers = result["levers"]
    est = [l for l in levers if l["estimated"] and l["saved_s"] > 0]
    best = est[0] if est else None
    target = next((l for l in levers if l["phase"] == dom and l["lever"] != "answer cap"), None)
    if dom == "queue":
        text.append("No lever here targets queueing: add capacity or batching first.")
    elif target is not None and not target["estimated"] and (best is None or (target["ceiling_share"] or 0) > best["saved_share"]):
        text.append(f"Try a {target['lever']} first: it targets the dominant phase, but {target['reason'].split(';')[0]}, "
                    f"so its gain is somewhere between 0 and {_pct(target['ceiling_share'])} (all of {dom}).")
        if best is not None:
            text.append(f"Of the levers this traffic lets us estimate, the {_lever_words(best)} would remove "
                        f"{_gain(best, result)}.")
    elif best is not None:
        text.append(f"Try the {_lever_words(best)} first: it would remove {_gain(best, result)}.")
        if best["phase"] != dom:
            text.append(f"It works on {best['phase']}, not on the dominant phase, whose levers return less here.")
    else:
        text.append("None of the estimated levers would save time on this traffic.")
    neg = [l for l in levers if l["estimated"] and l["saved_s"] < 0]
    for l in neg:
        text.append(f"The {_lever_words(l)} would add time ({_pct(-l['saved_share'])}): do not turn it on as measured.")
    cond = result.get("conditions") or []
    if cond:
        text.append("This holds for " + "; ".join(cond) + ".")
    return " ".join(text)


def _lever_words(l: Mapping[str, Any]) -> str:
    return l["lever"] + (f" ({l['parameter']})" if l.get("parameter") else "")


def _gain(l: Mapping[str, Any], result: Mapping[str, Any]) -> str:
    s = f"{_pct(l['saved_share'])} of the time"
    if l.get("range"):
        lo, hi = l["range"]
        s += f" (range {_pct(lo)} to {_pct(hi)}, {l['range_source']})"
    s += f", {l['saved_s_per_call']:.3g} s per call, {l['gpu_hours_per_1000_calls']:.3g} GPU-hours per 1,000 calls"
    if l.get("usd_per_1000_calls") is not None:
        s += f" (${l['usd_per_1000_calls']:,.2f})"
    return s


def summarize_skips(skipped: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {r}" for r, n in sorted(skipped.items(), key=lambda kv: -kv[1])) or "none"


def calls_by_model(calls: Iterable[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in calls:
        out[c.model or "(unnamed)"] = out.get(c.model or "(unnamed)", 0) + 1
    return out
