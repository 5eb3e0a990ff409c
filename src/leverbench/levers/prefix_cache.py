"""The prefix cache: a prompt's prefix that an earlier call already computed is read from the KV cache instead of
prefilled again.  It acts on prefill alone (Amdahl on the prefill seconds): decode runs as before.

Engagement: the share of prompt tokens served from the cache (at least 1 %: ``analysis/experiment/engaged.py``),
from the calls (usage ``cached_tokens``, llama.cpp ``timings.cache_n``), else the server's counters over the
arm's block (vLLM ``prefix_cache_hits`` / ``prefix_cache_queries``, SGLang ``cached_tokens`` / ``prompt_tokens``,
llama.cpp ``prompt_tokens_cached_total``; SGLang's ``cache_hit_rate`` gauge is shown, not used).
"""

from __future__ import annotations

from .lever import Lever, MetricTable

#: vLLM's counters of prompt tokens served from the cache and looked up in it.
VLLM_HITS, VLLM_QUERIES = "vllm:prefix_cache_hits", "vllm:prefix_cache_queries"

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
    usage_fields=("cached_tokens",),
    timings=("cache_n",),
    metrics=MetricTable(
        shares=(("prefix_cache_hit_share", VLLM_HITS, VLLM_QUERIES),
                ("sglang_prefix_cache_hit_share", "sglang:cached_tokens", "sglang:prompt_tokens")),
        deltas=(("cached_prompt_tokens", "llamacpp:prompt_tokens_cached_total"),
                ("prefix_cache_hit_tokens", VLLM_HITS),
                ("prefix_cache_query_tokens", VLLM_QUERIES)),
        gauges=(("sglang_cache_hit_rate", "sglang:cache_hit_rate"),)),
    used_field="cache_used",
    unknown_hint="vLLM: --enable-prompt-tokens-details or /metrics; SGLang: --enable-cache-report or --enable-metrics",
    server_info_keys=("disable_radix_cache", "enable_cache_report", "enable_metrics", "page_size"),
    rank=10,
)
