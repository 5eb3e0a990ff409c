"""The prefix cache: a prompt's prefix that an earlier call already computed is read from the KV cache instead of
prefilled again.  It acts on prefill alone (Amdahl on the prefill seconds): decode runs as before.

Discovery: vLLM's ``vllm:cache_config_info{enable_prefix_caching}``, SGLang's ``not disable_radix_cache``;
llama.cpp's is per request (``cache_prompt``, on by default: the arm's request field is its knob).

Engagement: the share of prompt tokens served from the cache (at least :data:`MIN_SHARE`), from the calls (usage
``cached_tokens``, llama.cpp ``timings.cache_n``), else the server's counters over the arm's block (vLLM
``prefix_cache_hits`` / ``prefix_cache_queries``, SGLang ``cached_tokens`` / ``prompt_tokens``, llama.cpp
``prompt_tokens_cached_total``; SGLang's ``cache_hit_rate`` gauge is shown, not used) — vLLM sends no cached count
in usage unless started with ``--enable-prompt-tokens-details``, and a missing field is never read as "nothing
cached".

On traffic (``analyze``): saved = C / prefill_tps per call (C: the cached tokens the log records, or an assumed
share of the input); where a log's cached tokens were served, the cache was already on and its realized saving
is shown instead.
"""

from __future__ import annotations

from typing import Mapping, Optional

from ..json_types import JSONValue
from .lever import (
    ArmEvidence,
    GroupSums,
    Lever,
    Measured,
    MetricTable,
    TrafficFacts,
    TrafficSaving,
    cache_config,
    part,
    switch_value,
)

#: vLLM's counters of prompt tokens served from the cache and looked up in it.
VLLM_HITS, VLLM_QUERIES = "vllm:prefix_cache_hits", "vllm:prefix_cache_queries"
#: The least share of an arm's prompt tokens served from the cache for the arm to have used it.
MIN_SHARE = 0.01


def _discover(raw: Mapping[str, JSONValue], engine: Optional[str]) -> Optional[bool]:
    cache, info = cache_config(raw), part(raw, "server_info")
    if engine == "vllm" and "enable_prefix_caching" in cache:
        return cache["enable_prefix_caching"] == "True"
    if engine == "sglang" and "disable_radix_cache" in info:
        return not info["disable_radix_cache"]
    return None


def _measure(arm: ArmEvidence) -> Measured:
    c, m = arm.calls, arm.metrics
    figures: dict[str, JSONValue] = {"cached_tokens": None, "cached_share": None, "cached_share_source": None}
    if c.cache_seen:
        figures.update(cached_tokens=c.cached_tokens,
                       cached_share=c.cached_tokens / c.prompt_tokens if c.prompt_tokens else None,
                       cached_share_source="calls (usage / timings)")
    elif m.get("prefix_cache_hit_share") is not None:
        figures.update(cached_tokens=int(m["prefix_cache_hit_tokens"]) if "prefix_cache_hit_tokens" in m else None,
                       cached_share=m["prefix_cache_hit_share"],
                       cached_share_source="server metrics (prefix-cache hits / queries)")
    share = figures["cached_share"]
    used = None if not isinstance(share, (int, float)) else share >= MIN_SHARE
    said = f"arm {arm.arm!r} says {LEVER.name} on"
    short = f"cached only {share:.1%} of its prompt tokens" if isinstance(share, (int, float)) else ""
    return Measured(figures, used,
                    not_engaged=f"lever not engaged: {said} but {short}; it is not credited with the {LEVER.words}",
                    unknown=f"engagement unknown: {said}, but neither its calls nor server metrics of its own report "
                            f"cached tokens ({LEVER.unknown_hint})")


def _saved(g: GroupSums, prefill_tps: Optional[float]) -> Optional[float]:
    """C / prefill_tps: the prefill seconds of the group's cached tokens (unknown where no call records any)."""
    return g["cached"] / prefill_tps if g["cached_calls"] and g["cached"] is not None and prefill_tps else None


def _parameter(t: TrafficFacts) -> Optional[str]:
    said = (f"cached share {t.cached_tokens / t.input_tokens:.1%} of input tokens ({t.cached_calls} calls)"
            if t.cached_calls and t.input_tokens else None)
    if t.assumed_cached_share is not None:
        said = (said + "; " if said else "") + f"assumed {t.assumed_cached_share:.0%} cached where not recorded"
    return said


LEVER = Lever(
    name="prefix_cache",
    summary="reuse the KV cache of a prompt prefix an earlier call computed",
    phases=("prefill",),
    projection="prefill",
    words="prefix cache",
    advice="llama.cpp: cache_prompt (on by default); vLLM: --enable-prefix-caching; SGLang: on unless "
           "--disable-radix-cache",
    aliases=("cache_prompt", "prompt_cache", "radix_cache", "enable_prefix_caching"),
    flags=("--enable-prefix-caching", "--no-enable-prefix-caching"),
    request_fields=("cache_prompt",),
    facts=("cache_config.enable_prefix_caching", "server_info.disable_radix_cache"),
    metrics=MetricTable(
        shares=(("prefix_cache_hit_share", VLLM_HITS, VLLM_QUERIES),
                ("sglang_prefix_cache_hit_share", "sglang:cached_tokens", "sglang:prompt_tokens")),
        deltas=(("cached_prompt_tokens", "llamacpp:prompt_tokens_cached_total"),
                ("prefix_cache_hit_tokens", VLLM_HITS),
                ("prefix_cache_query_tokens", VLLM_QUERIES)),
        gauges=(("sglang_cache_hit_rate", "sglang:cache_hit_rate"),),
        served_prompt=(VLLM_HITS,),
        shown=(("cached_prompt_tokens", "cached prompt tokens", 0),
               ("prefix_cache_hit_share", "prefix-cache hits", None),
               ("sglang_cache_hit_rate", "cache hit rate (SGLang)", None))),
    measure=_measure,
    used_field="cache_used",
    unknown_hint="vLLM: --enable-prompt-tokens-details or /metrics; SGLang: --enable-cache-report or --enable-metrics",
    caches_prompts=True,
    stated="switch",
    traffic=TrafficSaving(rate="prefill_tps", saved=_saved, parameter=_parameter,
                          unknown="this traffic records no prefix sharing or cached tokens; give --cached-share"),
    discover=_discover,
    server_info_keys=("disable_radix_cache", "enable_cache_report", "enable_metrics", "page_size"),
    serve={"llama.cpp": lambda v, _: ["--cache-prompt" if switch_value(v, "prefix_cache") else "--no-cache-prompt"],
           "vllm": lambda v, _: ["--enable-prefix-caching" if switch_value(v, "prefix_cache")
                                 else "--no-enable-prefix-caching"]},
    rank=10,
)
