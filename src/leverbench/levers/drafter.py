"""The drafter (speculative decoding): a cheap draft (a small model, n-grams, EAGLE heads) proposes tokens that
the model verifies several at a time.  It acts on decode alone (Amdahl on the decode seconds): the prompt is
prefilled as before.

Engagement: the acceptance Σ accepted / Σ drafted tokens (at least ``engaged_acceptance_min``:
``analysis/experiment/engaged.py``), from the calls (llama.cpp ``timings.draft_n`` / ``draft_n_accepted``),
else the server's counters (vLLM ``spec_decode_num_{accepted,draft}_tokens``, llama.cpp
``spec_decode_num_*_total``); with only SGLang's mean accept length (``spec_accept_length``), above 1.
"""

from __future__ import annotations

from .lever import Lever, MetricTable

#: The llama.cpp flags that start a drafter (discovery: a started engine with one of them has one).
LLAMACPP_DRAFT_ARGS = frozenset({"--spec-type", "-md", "--model-draft", "-hfd", "--hf-repo-draft"})

LEVER = Lever(
    name="drafter",
    summary="speculative decoding: a draft proposes tokens the model verifies in one step",
    phases=("decode",),
    projection="decode",
    words="drafter",
    advice="llama.cpp: --spec-type ngram-mod or -md DRAFT.gguf; vLLM: --speculative-config; SGLang: "
           "--speculative-algorithm",
    aliases=("speculative_decoding", "spec_decode", "speculative", "draft_model"),
    flag_prefixes=("--spec", "--draft", "-md", "--speculative", "--model-draft", "-hfd", "--hf-repo-draft",
                   "-ngl-draft", "--gpu-layers-draft", "-cd", "--ctx-size-draft", "-devd", "--device-draft"),
    facts=("server_info.speculative_algorithm", "server_info.speculative_num_draft_tokens"),
    timings=("draft_n", "draft_n_accepted"),
    metrics=MetricTable(
        shares=(("drafter_acceptance", "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_draft_tokens"),
                ("llamacpp_drafter_acceptance", "llamacpp:spec_decode_num_accepted_tokens_total",
                 "llamacpp:spec_decode_num_draft_tokens_total")),
        deltas=(("draft_tokens", "vllm:spec_decode_num_draft_tokens"),
                ("accepted_tokens", "vllm:spec_decode_num_accepted_tokens")),
        gauges=(("sglang_spec_accept_length", "sglang:spec_accept_length"),)),
    used_field="drafter_used",
    unknown_hint="drafter statistics",
    server_info_keys=("speculative_algorithm", "speculative_num_draft_tokens"),
    rank=20,
)
