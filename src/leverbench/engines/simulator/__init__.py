"""The simulator: an OpenAI-compatible chat server whose speeds are set exactly.

It is a test instrument with known ground truth, never a stand-in for a real
engine.  Every quantity leverbench tries to measure (queue time, prefill time,
decode rate, prefix-cache hits, drafter acceptance) is fixed by a
:class:`SimConfig`, and every request leaves a ground-truth record that tests
can compare a measurement against.

Tokenizer
    One token per whitespace-separated word (``text.split()``).  A chat
    request's prompt is, in order: the words of ``json.dumps(tools)`` when the
    request has tools (first, where chat templates put them, so that a growing
    conversation keeps its prefix), then for each message its role as one token
    (``"system"``, ``"user"``, ``"assistant"``, ``"tool"``) followed by the
    words of its content.  Content may be a string, null, or a list of OpenAI
    content parts (only ``text`` parts count); ``tool_calls`` inside assistant
    messages do not count.  See :func:`chat_prompt_tokens`.

Timing model (real ``asyncio.sleep``)
    wait FIFO for one of ``slots`` (queue) -> ``overhead_s`` -> prefill of the
    uncached prompt tokens at ``prefill_tps`` -> decode steps.  Step ``i``
    (1-based) ends at ``start + i / decode_tps`` on the loop clock (no drift)
    and emits ``1 + round(draft_k * draft_acceptance)`` tokens (Python's
    ``round``; at most what remains; more where the drafter's memory helps,
    below) as one SSE chunk; without a drafter, one token.  So the first
    token arrives one step after prefill, and decoding ``n`` tokens takes
    ``ceil(n / tokens_per_step) / decode_tps`` seconds.  That is the default
    drafter model, ``draft_model = "round"``; ``"expected"`` and
    ``draft_cost`` change what a step emits and costs (below, "Drafter").
    Context-dependent mode (both 0 by default): prefill of n uncached tokens
    after k cached ones takes n / prefill_tps + ``prefill_quadratic`` ·
    n·(k + n/2), and a decode step at a context of L tokens (the prompt plus
    the tokens emitted before it) ``1 / decode_tps + decode_slowdown_per_ctx ·
    L`` — the rate model's prefill_s(n, k) and decode_s(L, O) with a = 0,
    b = 1 / prefill_tps, c = prefill_quadratic, d0 = 1 / decode_tps,
    d1 = decode_slowdown_per_ctx (:mod:`leverbench.analysis.rates.rate_model`).
    Batch-dependent decode (0 by default): each decode step takes (1 + ``decode_batch_slowdown`` · (k − 1))
    times as long, k the requests in their decode phase when the step starts (itself included; the
    request's mean k is its truth's ``decode_batch``), so an arm can be set faster alone and slower in a
    batch (a drafter whose verification a batch makes dear); with ``draft_model = "expected"`` the term
    counts tokens, k·(1 + draft_k) in place of k (below, "Drafter").
    Speed (all 1 by default): every service time of a request (overhead, prefill, each decode step) is
    multiplied by its ``speed_factor``, drawn when it is admitted: 1 + ``drift_per_s`` · (t − ``drift_t0``)
    (a machine that slows, or speeds up, over wall time t; simulators given the same ``drift_t0`` drift
    alike), times a lognormal factor of mean 1 and CV ``speed_jitter`` (per-request noise), times
    a factor falling linearly from ``cold_factor`` to 1 over the first ``cold_requests`` requests (an
    engine warming up).  The factor is in
    the request's ground truth.
    The llama.cpp dialect's ``timings`` count as llama.cpp does: ``prompt_ms``
    until the first token (the prefill and the step that samples it),
    ``predicted_ms`` from the first token to the last; their sum is the
    request's whole service time.

Prefix cache
    One cache shared by all slots, holding hashes of prompt prefixes that end
    at multiples of ``cache_block``.  A request reuses the longest whole-block
    prefix seen before, always leaving at least one token to compute; it reuses
    nothing when ``prefix_cache`` is off or the request says
    ``"cache_prompt": false``.  After prefill, every request's block prefixes
    enter the cache (also with ``cache_prompt: false``: the KV was computed).
    Each dialect's own reset endpoint empties it (``SimConfig.cache_reset``
    "on"; "off": absent, as on a server started without it; "fake": the same
    answer, the cache kept): llama.cpp ``POST /slots/{id}?action=erase``
    (any slot empties the whole shared cache), vLLM ``POST
    /reset_prefix_cache``, SGLang ``GET|POST /flush_cache``; a strict API has
    none.  Statuses and bodies as each engine's source has them: see
    :mod:`.server`, "cache resets".

Drafter
    ``draft_k`` K drafts a step at acceptance p (``draft_acceptance``), each
    step costing ``1 + draft_cost · K`` plain steps (every duration above
    times it; 1 by default).  ``draft_model = "round"`` (the default): a step
    emits 1 + round(K·p) tokens, the batch term counts requests.
    ``"expected"``: each draft is accepted with probability p in turn, so a
    step emits E = (1 − p^(K+1)) / (1 − p) tokens in expectation, realised
    deterministically by accumulating E per request (after i steps,
    ``min(n, floor(i·E))`` tokens; n tokens take ceil(n / E) steps), and the
    batch term counts each decoding request's 1 + K tokens: a step takes
    (1 + ``decode_batch_slowdown`` · (k·(1 + K) − 1)) times as long.  The
    exact decode time, and a closed loop's mean turn time, are
    :func:`.drafter.true_decode_seconds` and :func:`.drafter.true_turn_seconds`
    (the formulas: :mod:`.drafter`); the truth's ``decode_steps`` counts the
    steps, and its ``decode_paced_s`` is the decode time the model set
    (``decode_s`` less the loop's lateness).  The spec-decode counters count, each step, one draft, K draft
    tokens and the step's tokens − 1 accepted (positions 0 .. tokens − 2).

Drafter memory
    With ``draft_memory`` > 0, the drafter remembers, across requests, the
    prompts it has served (their block prefixes, entered when a request's
    decode starts, after it looked them up): a request whose remembered
    whole-block prefix covers at least half of its prompt decodes at
    acceptance ``min(1, draft_acceptance + draft_memory)`` instead of
    ``draft_acceptance`` (its truth's ``draft_acceptance``), as llama.cpp's
    ``--spec-type ngram-mod`` accepts more of a prompt it saw before.  The
    cache-reset endpoints leave this memory alone, as a slot erase leaves
    ngram-mod's; ``/sim/reset`` (a new process) clears it.

Faults
    Per request, in arrival order, one ``random.Random(seed)`` draw per fault
    kind decides which faults fire (a request later rejected with 400 still
    used its draws).  HTTP 500 wins over 429; both answer at once, before
    queueing.  Without streaming, ``cut_stream`` drops the connection without
    a response and ``malformed`` sends half a JSON body.  ``/sim/reset``
    reseeds the generator (and forgets the truth, the prefix cache and the
    drafter's memory).

Ground truth
    ``GET /sim/truth`` (or :meth:`SimulatorThread.truth`) lists one record per
    finished or faulted request, in completion order; see :class:`.exchange.Trace`.
    ``fault`` names the faults that took effect, comma-joined, plus
    ``client_disconnect`` when the client went away mid-stream.

Dialects
    ``SimConfig.dialect`` (``llama.cpp``, ``vllm``, ``sglang``, ``openai``)
    sets how the simulator *speaks*: usage fields, ``timings``, errors, which
    request fields it honours, ignores or rejects, its info endpoints and
    ``/metrics`` names (see :mod:`leverbench.engines.simulator.dialects`).  The
    timing model and the ground truth are the same in every dialect.

Modules
    :mod:`.config` (:class:`SimConfig`), :mod:`.tokens` (the tokenizer),
    :mod:`.state` (prefix cache, FIFO slots, the shared state),
    :mod:`.answer` (parsing a request, planning its answer),
    :mod:`.drafter` (tokens and cost per decode step, the exact decode time),
    :mod:`.exchange` (one request from admission to its last byte, and its
    ground truth), :mod:`.server` (the routes, the app, running it).  This
    package's names below are the simulator's API.
"""

import importlib
from typing import Any

#: Each name of the simulator's API and the module that defines it: imported when first used
#: (PEP 562), so that reading :mod:`.dialects` or :mod:`.config` (the ``sim`` command's options,
#: ``--help``) does not load the server and aiohttp.
_API = {
    'Answer': 'answer',
    'CACHE_CAPACITY_BLOCKS': 'state',
    'ChatRequest': 'answer',
    'FAULT_NAMES': 'config',
    'FifoSlots': 'state',
    'PrefixCache': 'state',
    'STATE': 'server',
    'SimConfig': 'config',
    'SimState': 'state',
    'SimulatorThread': 'server',
    'TOKEN_ID_SPACE': 'tokens',
    'TOOL_CALL_TOKENS': 'answer',
    'TRUTH_LIMIT': 'state',
    'Trace': 'exchange',
    'answer_length': 'answer',
    'batch_factor': 'drafter',
    'build_app': 'server',
    'chat_prompt_tokens': 'tokens',
    'chunk_delta': 'answer',
    'count_tokens': 'tokens',
    'decode_step_sizes': 'drafter',
    'expected_tokens_per_step': 'drafter',
    'full_message': 'answer',
    'jittered_length': 'answer',
    'llama_clocks_ms': 'exchange',
    'message_text': 'tokens',
    'parse_chat_request': 'answer',
    'plan_answer': 'answer',
    'round_tokens_per_step': 'drafter',
    'serve': 'server',
    'step_cost': 'drafter',
    'step_sizes': 'drafter',
    'synthetic_text': 'tokens',
    'token_ids': 'tokens',
    'tokenize': 'tokens',
    'tokens_per_step': 'config',
    'true_decode_seconds': 'drafter',
    'true_turn_seconds': 'drafter',
}


def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(importlib.import_module(f".{_API[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CACHE_CAPACITY_BLOCKS", "FAULT_NAMES", "STATE", "TOKEN_ID_SPACE", "TOOL_CALL_TOKENS", "TRUTH_LIMIT", "Answer",
    "ChatRequest", "FifoSlots", "PrefixCache", "SimConfig", "SimState", "SimulatorThread", "Trace", "answer_length",
    "batch_factor", "build_app", "chat_prompt_tokens", "chunk_delta", "count_tokens", "decode_step_sizes",
    "expected_tokens_per_step", "full_message", "jittered_length", "llama_clocks_ms", "message_text",
    "parse_chat_request", "plan_answer", "round_tokens_per_step", "serve", "step_cost", "step_sizes",
    "synthetic_text", "token_ids", "tokenize", "tokens_per_step", "true_decode_seconds", "true_turn_seconds",
]
