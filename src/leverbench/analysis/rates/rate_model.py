"""An arm's rate model: what prefill and decode cost at a given context (issue 15).

The contract the scenario projection and ``leverbench whatif`` read (``summary.json`` ``rate_models[]``,
one per arm)::

    prefill_s(n, k) = a + b·n + c·n·(k + n/2)      n uncached prompt tokens after k cached ones
                                                    (attention: the i-th new token attends to k + i
                                                    earlier ones; Σ over the n new tokens ≈ n·(k + n/2))
    decode_s(L, O)  = Σ_{i<O} (d0 + d1·(L + i))     O tokens generated from a context of L tokens
                    = O·d0 + d1·(O·L + O·(O − 1)/2)
    under load:       per-token time × slowdown(k) with k requests in service, ``batch`` (measured in load
                      stages): slowdown(c) = TPOT(c) / tpot_1, relative to one request served alone, the
                      per-token time the d0, d1 above describe (the turns they are fitted on run one call at a
                      time), so slowdown(1) = 1:
    tpot_1(P, n)    = d0 + d1·(P + n/2)             per output token after the first, alone, for a prompt of P
                                                    tokens and an answer of n (L from P + 1 to P + n − 1)

Fields (seconds, tokens): ``prefill`` {a_s, b_s_per_token, c_s_per_token2, source, points, r2,
range_uncached [lo, hi], range_cached [lo, hi]}; ``decode`` {d0_s_per_token, d1_s_per_token_per_ctx,
source, points, r2, range_context [lo, hi], acceptance}; ``batch`` {concurrency [...], slowdown [...]}
or None; ``slots`` (requests served at once, when known) or None.  Fitted models also carry ``prefill``
``quadratic`` (c fitted) and ``outliers``, ``decode`` ``context_fitted`` (d1 fitted) and ``outliers``,
``batch`` ``tpot_s`` (the measured p50 TPOT per concurrency), ``single_stream_tpot_s`` (tpot_1 at each
level's mean prompt and answer), ``reference_concurrency`` 1 and ``reference`` (what tpot_1 came from), and
``drafter``.  A summary written before the slowdown was taken against one request alone has
``reference_concurrency`` = the sweep's lowest level (its slowdown relative to that level's TPOT) and no
``single_stream_tpot_s``: ``whatif`` re-normalises it (:func:`.whatif_arms.batch_points`).  A phase that
could not be fitted is None, with its reason in ``prefill_refused`` / ``decode_refused``.  A model derived from the flat
``rates[]`` table (:func:`from_rates_row`) has c = d1 = 0 and no batch: one prefill rate, one decode
rate, as the article's method assumes.

How a model is fitted from the ledger: :mod:`.rate_fit`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...schema.rate_rows import DecodeFit, PrefillFit, RateModelFits, RateModelRow, RateRow
    from ...schema.summary import Summary


def _positive(x: Any) -> Any:
    """max(x, 0) by arithmetic alone, so that it holds for a number and, element by element, for an array."""
    return (x + abs(x)) / 2.0


def _prefill(model: RateModelFits) -> PrefillFit:
    """The model's prefill fit, which the formulas are asked about only where the model has one."""
    p = model["prefill"]
    assert p is not None, "a rate model without a prefill fit"  # every caller checks that it has one
    return p


def _decode(model: RateModelFits) -> DecodeFit:
    """The model's decode fit, which the formulas are asked about only where the model has one."""
    d = model["decode"]
    assert d is not None, "a rate model without a decode fit"  # every caller checks that it has one
    return d


def prefill_seconds(model: RateModelFits, uncached: Any, cached: Any = 0.0) -> Any:
    """prefill_s(n, k) = a + b·n + c·n·(k + n/2) (see the module docstring); n < 0 counts as 0.  Numbers or
    numpy arrays alike (element by element)."""
    p = _prefill(model)
    n = _positive(uncached * 1.0)
    return p["a_s"] + p["b_s_per_token"] * n + p.get("c_s_per_token2", 0.0) * n * (cached * 1.0 + n / 2.0)


def decode_seconds(model: RateModelFits, context: Any, output: Any) -> Any:
    """decode_s(L, O) = O·d0 + d1·(O·L + O·(O − 1)/2) (see the module docstring); O < 0 counts as 0.  Numbers
    or numpy arrays alike (element by element)."""
    d = _decode(model)
    o = _positive(output * 1.0)
    return o * d["d0_s_per_token"] + d.get("d1_s_per_token_per_ctx", 0.0) * (o * context + o * (o - 1.0) / 2.0)


def from_rates_row(row: RateRow) -> RateModelRow | None:
    """A flat model from a ``summary.json`` ``rates[]`` row (one prefill rate and intercept, one decode rate),
    or None when the row lacks either rate."""
    prefill_tps, decode_tps = row.get("prefill_tps"), row.get("decode_tps")
    if not prefill_tps or not decode_tps:
        return None
    return {"arm": row["arm"],
            "prefill": {"a_s": row.get("prefill_a_s") or 0.0, "b_s_per_token": 1.0 / prefill_tps,
                        "c_s_per_token2": 0.0, "source": row.get("prefill_source"), "points": None, "r2": None,
                        "range_uncached": row.get("prefill_input_range"), "range_cached": None},
            "decode": {"d0_s_per_token": 1.0 / decode_tps, "d1_s_per_token_per_ctx": 0.0,
                       "source": row.get("decode_source"), "points": None, "r2": None, "range_context": None,
                       "acceptance": None},
            "batch": None, "slots": None}


def single_stream_tpot(model: RateModelFits, prompt: float, answer: float) -> float:
    """tpot_1(P, n) = d0 + d1·(P + n/2): the time per output token after the first of one request served alone
    (see the module docstring)."""
    d = _decode(model)
    return d["d0_s_per_token"] + d.get("d1_s_per_token_per_ctx", 0.0) * (float(prompt) + float(answer) / 2.0)


def decode_tps_at(d: DecodeFit, context: float) -> float | None:
    """A decode fit's rate at a context of L tokens: 1 / (d0 + d1·L); None when that time is not positive."""
    t = d["d0_s_per_token"] + d.get("d1_s_per_token_per_ctx", 0.0) * float(context)
    return 1.0 / t if t > 0 else None


def tokens_per_second_at(model: RateModelFits, context: float) -> float | None:
    """The model's decode rate at a context of L tokens: 1 / (d0 + d1·L) (:func:`decode_tps_at`); None when that
    time is not positive."""
    return decode_tps_at(_decode(model), context)


def models_by_arm(summary: Summary) -> dict[str, RateModelRow]:
    """Per arm, the rate model a summary carries: its ``rate_models[]`` entry, else the flat model of its
    ``rates[]`` row (:func:`from_rates_row`: a summary written before the context-aware model)."""
    out = {m["arm"]: m for m in summary.get("rate_models") or []}
    for row in summary.get("rates") or []:
        if row["arm"] not in out:
            flat = from_rates_row(row)
            if flat is not None:
                out[row["arm"]] = flat
    return out
