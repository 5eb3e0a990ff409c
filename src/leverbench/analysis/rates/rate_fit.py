"""Each arm's rate model (:mod:`.rate_model`, the contract) fitted from the ledger (issue 15).

:func:`rate_models` (``summary.json`` ``rate_models[]``): pure functions over the counted calls and probes
(kept apart from the contract so that reading a model loads neither numpy nor scipy).


- **prefill points** (n, k, s), one per call: the server's own timings where every counted call and probe
  of the arm reports them (llama.cpp: n = ``prompt_n``, k = ``cache_n``, s = ``prompt_ms`` / 1000;
  ``source`` "server timings"), else the client's time to first token of the calls whose cached count is
  known (n = prompt − cached, k = cached; an arm without a prefix cache in its knobs: cached = 0;
  "client TTFT").  Fitted s = a + b·n + c·n·(k + n/2) by least squares with a, b, c ≥ 0 (NNLS); c only
  where n·(k + n/2) is not a combination of 1 and n over the points (else c = 0, ``quadratic`` false);
  with a single prompt length, s = b·n through zero.
- **decode points** (m, L, s), one per call with at least 2 generated tokens: m tokens generated from a
  context of L tokens in s seconds.  Server timings (every such call reports them): m = predicted_n − 1,
  L = prompt + 1, s = predicted_ms / 1000 — llama.cpp starts its generation clock when it samples the
  first token, at the end of the prompt's evaluation, so ``predicted_ms`` spans the tokens after it
  (its own ``predicted_per_second`` = n / ms overstates the rate by n / (n − 1)).  Else the stream:
  m = completion_tokens − 1, L = prompt + 1, s = latency − TTFT (first chunk → end of stream), also where
  the stream carried fewer chunks than tokens: the first chunk holds the one token the prefill sampled
  (vLLM's recorded ngram stream: "The", then groups of accepted tokens; llama.cpp streams every token), and
  a call may stream a tool call, whose deltas are not answer chunks.
  The mean per-token time of a point is d0 + d1·(L + (m − 1)/2); fitted by weighted least squares
  (weights m, d0, d1 ≥ 0); d1 only where the points' contexts span more than MIN_CONTEXT_SPAN tokens.
  **A drafter arm** (a ``drafter`` knob on) is fitted on its natural answers only: its turns' calls and
  the probes not forced past end-of-sequence (a drafter predicts the repetitive text a forced probe
  produces unnaturally well); its ``acceptance`` = Σ draft_n_accepted / Σ draft_n over those calls,
  else the server's counters over its block.
- **outliers**: after a fit, a point whose weighted residual lies more than OUTLIER_K robust standard
  deviations (1.4826 × the median absolute deviation of the residuals) from their median, and is more
  than OUTLIER_REL of its prediction (a stall of a shared machine), is left out and the fit repeated
  (at most 3 rounds); ``outliers`` counts them.
  R² = 1 − Σw·res² / Σw·(y − ȳ_w)² over the kept points (prefill: seconds, unweighted; decode: the
  per-token time, weights m).
- **batch** (from the load stages): of the arm's closed stages with a concurrency sweep, the one with
  the most concurrencies; slowdown(c) = p50 TPOT at c / t1(c), relative to one request served alone
  (``reference_concurrency`` 1), what the rate model's decode describes (the turns run one call at a
  time): t1(c) = d0 + d1·(P + n/2), the model's per-token time at the stage's mean prompt P and answer n
  (a TPOT spans the tokens after the first, from a context of P + 1 to P + n − 1; ``single_stream_tpot_s``),
  else, without a decode model, the sweep's own p50 TPOT at concurrency 1; neither: no ``batch``.  Never
  relative to the sweep's lowest concurrency: a sweep at 4, 8, 16 measures the slowdown at 4 too.
  ``slots``: the server's slots where discovery found them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import nnls

from ...schema.rate_rows import RateModelRow
from ..base.dataset import Dataset, zero_nan
from ..base.knobs import answers_naturally, caches_prompts
from .rate_model import decode_tps_at, single_stream_tpot

if TYPE_CHECKING:
    from ...ledger.rows import CallRow
    from ...schema.load_rows import LoadRow
    from ...schema.rate_rows import ArmMetrics, BatchSlowdown, DecodeFit, PrefillFit
    from .regression import Floats

OUTLIER_K = 5.0  # robust standard deviations beyond which a point's residual marks it an outlier ...
OUTLIER_REL = 0.25  # ... when it is also this share of its prediction
OUTLIER_ROUNDS = 3
MIN_CONTEXT_SPAN = 64  # tokens: the decode points' contexts must span more for d1 to be fitted
DETERMINED = 1e-3  # a regressor is determined when this share of its variance is not explained by the others


@dataclass(frozen=True)
class Fit:
    """A fit's coefficients (one per column, 0 for a column left out), R² and the points it kept."""

    coef: NDArray[np.float64]
    r2: float | None
    kept: NDArray[np.bool_]


def nnls_fit(X: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64] | None = None
             ) -> NDArray[np.float64]:
    """argmin_β Σ w_i (y_i − X_i·β)² subject to β ≥ 0 (scipy's NNLS on rows scaled by √w)."""
    sw = np.sqrt(np.ones(len(y)) if w is None else np.asarray(w, float))
    coef: NDArray[np.float64]  # (scipy has no types)
    coef, _ = nnls(X * sw[:, None], y * sw)
    return coef


def r_squared(y: NDArray[np.float64], pred: NDArray[np.float64], w: NDArray[np.float64] | None = None
              ) -> float | None:
    """1 − Σw·(y − ŷ)² / Σw·(y − ȳ_w)² (ȳ_w the weighted mean); None when y does not vary."""
    w = np.ones(len(y)) if w is None else w
    ss_tot = float((w * (y - np.average(y, weights=w)) ** 2).sum())
    return 1.0 - float((w * (y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else None


def robust_fit(X: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64] | None = None) -> Fit:
    """:func:`nnls_fit`, then the outliers (see the module docstring) left out and the fit repeated."""
    w = np.ones(len(y)) if w is None else np.asarray(w, float)
    kept = np.ones(len(y), bool)
    coef = nnls_fit(X, y, w)
    for _ in range(OUTLIER_ROUNDS):
        pred = X @ coef
        res = np.sqrt(w) * (y - pred)
        mid = float(np.median(res[kept]))
        scale = 1.4826 * float(np.median(np.abs(res[kept] - mid)))
        out = (np.abs(res - mid) > OUTLIER_K * scale) & (np.abs(y - pred) > OUTLIER_REL * np.abs(pred))
        if np.array_equal(~out, kept) or (~out).sum() < X.shape[1] + 1:
            break
        kept = ~out
        coef = nnls_fit(X[kept], y[kept], w[kept])
    return Fit(coef, r_squared(y[kept], X[kept] @ coef, w[kept]), kept)


def determined(col: NDArray[np.float64], others: NDArray[np.float64], w: NDArray[np.float64] | None = None
               ) -> bool:
    """Whether *col* varies beyond what a combination of the columns *others* explains (more than
    DETERMINED of its weighted variance left), so that its coefficient can be fitted."""
    sw = np.sqrt(np.ones(len(col)) if w is None else w)
    coef, *_ = np.linalg.lstsq(others * sw[:, None], col * sw, rcond=None)
    res = (col - others @ coef) * sw
    c = col * sw
    total = float(((c - c.mean()) ** 2).sum())
    return total > 0 and float((res ** 2).sum()) > DETERMINED * total


def _span(x: NDArray[np.float64]) -> list[float]:
    lo, hi = float(x.min()), float(x.max())
    return [int(v) if v.is_integer() else v for v in (lo, hi)]


def fit_prefill(n: Floats, k: Floats, s: Floats, source: str | None = None) -> PrefillFit | None:
    """The ``prefill`` block: s = a + b·n + c·n·(k + n/2) over the points with n ≥ 1 (see the module
    docstring); None without such a point."""
    n_all, k_all, s_all = (np.asarray(v, float) for v in (n, k, s))
    ok: NDArray[np.bool_] = (n_all >= 1) & np.isfinite(s_all) & np.isfinite(k_all)
    n, k, s = n_all[ok], k_all[ok], s_all[ok]
    if not len(n):
        return None
    q = n * (k + n / 2.0)
    one = np.ones(len(n))
    if len(np.unique(n)) < 2:  # one prompt length: proportional through zero
        cols, names = [n], ["b"]
    else:
        cols, names = [one, n], ["a", "b"]
        if determined(q, np.column_stack(cols)):
            cols.append(q)
            names.append("c")
    fit = robust_fit(np.column_stack(cols), s)
    coef = dict(zip(names, fit.coef.tolist()))
    kept = fit.kept
    return {"a_s": coef.get("a", 0.0), "b_s_per_token": coef["b"], "c_s_per_token2": coef.get("c", 0.0),
            "quadratic": "c" in coef, "source": source, "points": int(kept.sum()), "outliers": int((~kept).sum()),
            "r2": fit.r2 if "a" in coef else None, "range_uncached": _span(n[kept]), "range_cached": _span(k[kept])}


def fit_decode(m: Floats, context: Floats, s: Floats, source: str | None = None) -> DecodeFit | None:
    """The ``decode`` block: the per-token time s/m = d0 + d1·(L + (m − 1)/2) over the points with m ≥ 1,
    weights m (see the module docstring); None without such a point."""
    m_all, L_all, s_all = (np.asarray(v, float) for v in (m, context, s))
    ok: NDArray[np.bool_] = (m_all >= 1) & np.isfinite(L_all) & np.isfinite(s_all) & (s_all > 0)
    m, L, s = m_all[ok], L_all[ok], s_all[ok]
    if not len(m):
        return None
    y, x = s / m, L + (m - 1.0) / 2.0
    sloped = float(x.max() - x.min()) > MIN_CONTEXT_SPAN
    X = np.column_stack([np.ones(len(x)), x] if sloped else [np.ones(len(x))])
    fit = robust_fit(X, y, m)
    kept = fit.kept
    out: DecodeFit = {"d0_s_per_token": float(fit.coef[0]),
                      "d1_s_per_token_per_ctx": float(fit.coef[1]) if sloped else 0.0,
                      "context_fitted": sloped, "source": source, "points": int(kept.sum()),
                      "outliers": int((~kept).sum()), "r2": fit.r2 if sloped else None,
                      "range_context": [_span(L[kept])[0], _span(L[kept] + m[kept] - 1.0)[1]], "acceptance": None}
    out["tps_over_context"] = [decode_tps_at(out, end) for end in out["range_context"] or ()]
    return out


# ---------------------------------------------------------------------------------------------- the ledger's points

def is_natural(probe: CallRow) -> bool:
    """Whether a probe record's length was left to the model (a drafter arm's probe, not forced past
    end-of-sequence): its ``length_method`` starts with "natural"."""
    return str(probe.get("length_method") or "").startswith("natural")


def has_drafter(ds: Dataset, arm: str) -> bool:
    """Whether *arm* serves with a lever whose speed depends on the text (a drafter): fitted on natural answers."""
    return answers_naturally(ds.knobs(arm))


def _uses(ds: Dataset, arm: str) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """(turn calls, probes) of *arm* that count as points: successful calls of successful turns, successful
    probes that were not retried."""
    c, p = ds.call, ds.probe
    a = ds.arm_index(arm) if arm in ds.arm_names else -1
    return ds.turn.ok[c.turn] & c.ok & (c.arm == a), p.ok & ~p.retried & (p.arm == a)


def prefill_points(ds: Dataset, arm: str
                   ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], str | None]:
    """(n uncached, k cached, s seconds, source) of *arm*'s prefill (see the module docstring)."""
    calls, probes = _uses(ds, arm)
    tabs = [(ds.call, calls), (ds.probe, probes)]
    if sum(int(r.sum()) for _, r in tabs) and all((t.has_timings[r] & ~np.isnan(t.prompt_ms[r])).all()
                                                  for t, r in tabs):
        cat = [np.concatenate([getattr(t, f)[r] for t, r in tabs]) for f in ("prompt_n", "cache_n", "prompt_ms")]
        return cat[0], zero_nan(cat[1]), cat[2] / 1000.0, "server timings"
    nocache = not caches_prompts(ds.knobs(arm))
    n: list[NDArray[np.float64]] = []
    k: list[NDArray[np.float64]] = []
    s: list[NDArray[np.float64]] = []
    for t, r in tabs:
        cached = t.cached()[r]
        cached = np.where(np.isnan(cached) & nocache, 0.0, cached)
        known = ~np.isnan(cached) & ~np.isnan(t.ttft_s[r]) & ~np.isnan(t.prompt_tokens[r])
        n.append((t.prompt_tokens[r] - cached)[known])
        k.append(cached[known])
        s.append(t.ttft_s[r][known])
    n_all = np.concatenate(n)
    return n_all, np.concatenate(k), np.concatenate(s), "client TTFT" if len(n_all) else None


def decode_points(ds: Dataset, arm: str, *, stream: bool = False, left_out: NDArray[np.bool_] | None = None
                  ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
                             str | None]:
    """(m tokens, L context, s seconds, which of them carry draft counts as (draft_n, accepted) rows, source)
    of *arm*'s decode (see the module docstring); a drafter arm's forced probes are left out.  *stream*: the
    client's stream clock even where the server's timings are there (the probes' check, :mod:`.probes`);
    *left_out*: a mask over ``ds.probes`` of probes left out too (the probe a check compares with)."""
    calls, probes = _uses(ds, arm)
    if has_drafter(ds, arm):
        probes = probes & np.array([is_natural(r) for r in ds.probes], dtype=bool)
    if left_out is not None:
        probes = probes & ~left_out
    tabs = [(ds.call, calls), (ds.probe, probes)]
    timed = not stream and all((t.has_timings[r] & ~np.isnan(t.predicted_ms[r]) & ~np.isnan(t.predicted_n[r])).all()
                               for t, r in tabs)

    def col(f: str) -> NDArray[np.float64]:
        out: NDArray[np.float64] = np.concatenate([getattr(t, f)[r] for t, r in tabs])
        return out

    prompt = col("prompt_tokens")
    if timed:
        prompt = np.where(np.isnan(prompt), col("prompt_n") + zero_nan(col("cache_n")), prompt)
        m, s, source = col("predicted_n") - 1.0, col("predicted_ms") / 1000.0, "server timings"
    else:
        m, s, source = col("completion_tokens") - 1.0, col("latency_s") - col("ttft_s"), "client stream"
    drafts = np.column_stack([zero_nan(col("draft_n")), zero_nan(col("draft_n_accepted"))])
    return m, prompt + 1.0, s, drafts, source if len(m) else None


def batch_slowdown(load_rows: Sequence[LoadRow], arm: str, decode: DecodeFit | None = None
                   ) -> BatchSlowdown | None:
    """Per-token slowdown by concurrency from *arm*'s closed load stages, relative to one request served
    alone: the rate model's *decode* (see the module docstring), else the sweep's own concurrency 1."""
    # sweep → concurrency (an int, typed as BatchSlowdown's Concurrency) → (its stage, its p50 TPOT)
    sweeps: dict[str, dict[float, tuple[LoadRow, float]]] = {}
    for r in load_rows:
        tpot_r = r.get("tpot")
        p50 = tpot_r.get("p50") if tpot_r else None
        concurrency = r.get("concurrency")
        if r["arm"] != arm or r.get("mode") != "closed" or not concurrency or not p50:
            continue
        sweeps.setdefault(r.get("sweep") or r["stage"], {})[int(concurrency)] = (r, p50)
    best = max(sweeps.items(), key=lambda kv: len(kv[1]), default=None)
    if best is None or len(best[1]) < 2:
        return None
    conc = sorted(best[1])
    tpot = [float(best[1][c][1]) for c in conc]
    if decode is not None and decode.get("d0_s_per_token") is not None:
        def mean(r: LoadRow, key: Literal["input_tokens", "output_tokens"]) -> float:  # per successful call
            return (r.get(key) or 0) / r["ok"] if r.get("ok") else 0.0

        single = [single_stream_tpot({"prefill": None, "decode": decode, "batch": None},
                                     mean(best[1][c][0], "input_tokens"), mean(best[1][c][0], "output_tokens"))
                  for c in conc]
        reference = "the rate model's decode, one request alone"
    elif conc[0] == 1:
        single, reference = [tpot[0]] * len(conc), "the sweep's concurrency 1"
    else:
        return None
    if not all(t > 0 for t in single):
        return None
    return {"concurrency": conc, "slowdown": [t / t1 for t, t1 in zip(tpot, single)], "tpot_s": tpot,
            "single_stream_tpot_s": single, "reference_concurrency": 1, "reference": reference, "stage": best[0]}


def rate_models(ds: Dataset, load_rows: Sequence[LoadRow] | None = None,
                own_metrics: Mapping[str, ArmMetrics] | None = None) -> list[RateModelRow]:
    """``rate_models[]``: one model per arm (the module docstring).  A phase that cannot be fitted is None,
    with its reason in ``prefill_refused`` / ``decode_refused``."""
    out: list[RateModelRow] = []
    for arm in ds.arms:
        n, k, s, psrc = prefill_points(ds, arm)
        prefill = fit_prefill(n, k, s, psrc) if psrc else None
        m, L, secs, drafts, dsrc = decode_points(ds, arm)
        decode = fit_decode(m, L, secs, dsrc) if dsrc else None
        drafter = has_drafter(ds, arm)
        if decode is not None and drafter:
            tot = drafts.sum(axis=0)
            acc = (own_metrics or {}).get(arm, {}).get("drafter_acceptance")
            decode["acceptance"] = float(tot[1] / tot[0]) if tot[0] > 0 else acc
        slots = ds.knobs(arm).get("slots")
        row = RateModelRow(arm=arm, prefill=prefill, decode=decode, batch=batch_slowdown(load_rows or [], arm, decode),
                           slots=int(slots) if isinstance(slots, (int, float)) and slots else None, drafter=drafter)
        if not prefill:
            row["prefill_refused"] = ("no call with a known uncached prompt and its prefill time (server timings, or "
                                      "TTFT with cached counts)")
        if not decode:
            row["decode_refused"] = ("no successful call with at least 2 generated tokens"
                                     + (" answered naturally" if drafter else ""))
        out.append(row)
    return out
