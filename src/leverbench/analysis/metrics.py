"""The server's own account from its Prometheus metrics, scraped before and after each arm's block.

For a counter c, Δc = c(after) − c(before), summed over label sets.  Per arm:

- queue, prefill, decode seconds per request = Δ<histogram>_sum / Δ<histogram>_count
  (vLLM ``vllm:request_{queue,prefill,decode}_time_seconds``; SGLang ``sglang:queue_time_seconds``);
- prefill and decode rates = Δtokens / Δseconds (llama.cpp ``llamacpp:prompt_tokens_total`` /
  ``llamacpp:prompt_seconds_total``, ``llamacpp:tokens_predicted_total`` /
  ``llamacpp:tokens_predicted_seconds_total``);
- prefix-cache hit share = Δhits / Δqueries (vLLM ``vllm:prefix_cache_hits`` / ``queries``),
  cached prompt tokens = Δ``llamacpp:prompt_tokens_cached_total``; SGLang's ``sglang:cache_hit_rate``
  gauge as read after the block;
- drafter acceptance = Δaccepted / Δdraft tokens (``vllm:spec_decode_num_{accepted,draft}_tokens``,
  ``llamacpp:spec_decode_num_{accepted,draft}_tokens_total``); SGLang's ``sglang:spec_accept_length`` gauge.

A sample that is not a finite number (the ledger keeps NaN/±Inf as "NaN", "+Inf", "-Inf") is skipped:
a label set with such a value before or after is left out of Δc, and a figure none of whose samples
are numbers is absent.
"""

from __future__ import annotations

import math
from typing import Any

_RATIO_PER_REQUEST = {
    "queue_s_per_request": ("vllm:request_queue_time_seconds", "sglang:queue_time_seconds"),
    "prefill_s_per_request": ("vllm:request_prefill_time_seconds",),
    "decode_s_per_request": ("vllm:request_decode_time_seconds",),
}
_RATES = {  # name: (tokens counter, seconds counter)
    "prefill_tps": ("llamacpp:prompt_tokens_total", "llamacpp:prompt_seconds_total"),
    "decode_tps": ("llamacpp:tokens_predicted_total", "llamacpp:tokens_predicted_seconds_total"),
}
_SHARES = {  # name: (numerator counter, denominator counter)
    "prefix_cache_hit_share": ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"),
    "drafter_acceptance": ("vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_draft_tokens"),
    "llamacpp_drafter_acceptance": ("llamacpp:spec_decode_num_accepted_tokens_total",
                                    "llamacpp:spec_decode_num_draft_tokens_total"),
}
_DELTAS = {"cached_prompt_tokens": "llamacpp:prompt_tokens_cached_total"}
_GAUGES = {"sglang_cache_hit_rate": "sglang:cache_hit_rate", "sglang_spec_accept_length": "sglang:spec_accept_length"}


def numeric(v: Any) -> bool:
    """Whether a scraped sample is a finite number (not "NaN", "+Inf", "-Inf", nor anything else)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _delta(before: dict[str, Any], after: dict[str, Any], name: str) -> float | None:
    """Δ of a counter over its label sets with numeric samples; accepts the name with or without ``_total``."""
    names = {name, name + "_total", name.removesuffix("_total")}
    keys = [k for k in after if k.split("{", 1)[0] in names and numeric(after[k]) and numeric(before.get(k, 0.0))]
    if not keys:
        return None
    return sum(after[k] - before.get(k, 0.0) for k in keys)


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def arm_metrics(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, hists in _RATIO_PER_REQUEST.items():
        for h in hists:
            v = _ratio(_delta(before, after, h + "_sum"), _delta(before, after, h + "_count"))
            if v is not None:
                out[key] = v
                break
    for key, (tok, sec) in _RATES.items():
        if (v := _ratio(_delta(before, after, tok), _delta(before, after, sec))) is not None:
            out[key] = v
    for key, (num, den) in _SHARES.items():
        if (v := _ratio(_delta(before, after, num), _delta(before, after, den))) is not None:
            out[key.removeprefix("llamacpp_")] = v
    for key, name in _DELTAS.items():
        if (v := _delta(before, after, name)) is not None:
            out[key] = v
    for key, name in _GAUGES.items():
        vals = [v for k, v in after.items() if k.split("{", 1)[0] == name and numeric(v)]
        if vals:
            out[key] = sum(vals) / len(vals)
    return out


def server_metrics(metrics_records: list[dict[str, Any]], arms: list[str]) -> list[dict[str, Any]]:
    """Per arm, the server's figures over its block (first 'before' scrape → last 'after' scrape)."""
    out = []
    for arm in arms:
        before = next((m for m in metrics_records if m["arm"] == arm and m["when"] == "before"), None)
        after = next((m for m in reversed(metrics_records) if m["arm"] == arm and m["when"] == "after"), None)
        if before and after:
            figures = arm_metrics(before["samples"], after["samples"])
            if figures:
                out.append({"arm": arm, **figures})
    return out
