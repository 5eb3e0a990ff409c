# size: one idea, what each engine says (its responses, then its /metrics), each fact checked against
# the engine's recorded answers; the Prometheus exporters (Registry onwards) are the seam to split at,
# left whole while the vLLM 0.32 dialect work rewrites them.
"""How the simulator speaks each engine's dialect: usage, errors, info endpoints and ``/metrics``.

The simulator's timing model and ground truth are the same in every dialect
(:mod:`leverbench.engines.simulator`); only what it *says* changes, as each
engine says it with its default flags.  Facts come from the engines' sources
and from runs of the real servers (``tests/data/engines/``).

``llama.cpp`` (llama-server as build 11434 answered; the prebuilt b11549 that the embedded engine runs
    exports the same metric families)
    ``timings`` in the stream's last chunks (``cache_n``, ``prompt_n``,
    ``draft_n``, ``draft_n_accepted``, ...); usage with
    ``prompt_tokens_details.cached_tokens``; ``/props`` (``build_info``,
    ``total_slots``, ``model_path``), ``/slots`` (``speculative``: a drafter is
    loaded), ``/tokenize {"content"}``, ``/health``; honours ``cache_prompt``,
    ignores unknown fields; ``POST /slots/{id}?action=erase`` as with
    ``--slot-save-path`` (else 501).  ``/metrics`` as with ``--metrics``: unlabelled
    ``llamacpp:*`` counters (``prompt_tokens_total`` counts only the tokens
    computed, ``prompt_tokens_cached_total`` the reused ones,
    ``spec_decode_num_{draft,accepted}_tokens_total``, ...).
``vllm`` (0.32.0 as it answered: ``tests/data/engines/vllm-0.32.0/``)
    No ``timings``; usage carries ``prompt_tokens_details`` only with
    ``--enable-prompt-tokens-details`` (``SimConfig.prompt_tokens_details``):
    ``{"cached_tokens", "created_cache_tokens"}`` (the whole blocks this
    request wrote into the cache), plus ``"multimodal_tokens": null`` in a
    non-streamed answer, whose usage also says ``"prompt_tokens_details":
    null`` (flag off) and ``"completion_tokens_details": null``; a streamed
    usage leaves out what is null.  Ignores ``cache_prompt`` and other unknown
    fields; honours ``ignore_eos`` and ``min_tokens``.  Errors as
    ``{"error": {"message", "type", "param", "code"}}`` with vLLM's type names
    (``BadRequestError``, ``NotFoundError``, ...).  ``/version``,
    ``/v1/models`` (``root``, ``max_model_len``, ``permission``), ``/tokenize
    {"model", "prompt"}`` → ``{"count", "max_model_len", "tokens",
    "token_strs"}``, no ``/props``.  ``/metrics``: ``vllm:*`` with labels
    ``model_name`` and ``engine="0"``, each counter and histogram with its
    ``_created`` timestamp (Python's prometheus_client); ``vllm:prefix_cache_{queries,hits}_total``
    count prompt tokens (zero while the prefix cache is off), as do
    ``vllm:prompt_tokens_by_source_total{source}`` and
    ``vllm:prompt_tokens_cached_total``; ``vllm:spec_decode_*`` exist only
    with a drafter (from the start); ``vllm:cache_config_info`` carries the
    cache configuration as labels (``enable_prefix_caching="True"``,
    ``block_size``, ``num_gpu_blocks``, ...).  Phases as vLLM times them:
    prefill = admission → first token (the prefill makes it), decode = first
    → last token (a request's other n − 1 tokens), inference = their sum.
    ``POST /reset_prefix_cache`` → ``{"success": ...}`` as with
    ``VLLM_SERVER_DEV_MODE=1`` (else 404).
``sglang``
    Usage with ``prompt_tokens_details`` null unless ``--enable-cache-report``
    (``SimConfig.prompt_tokens_details``), plus ``reasoning_tokens``;
    ``/get_model_info``, ``/get_server_info`` (server arguments and
    ``version``); errors as ``{"object": "error", ...}``.  ``/metrics`` as with
    ``--enable-metrics``: tokenizer-side ``sglang:*`` counters labelled
    ``model_name`` (they appear after the first request), scheduler-side
    ``sglang:queue_time_seconds``, ``num_running_reqs``, ``num_queue_reqs``,
    ``cache_hit_rate``, ``spec_accept_length`` labelled per scheduler
    (``tp_rank``, ``pp_rank``, ``dp_rank``, ...).  ``GET|POST /flush_cache``
    (200 and SGLang's text; 400 while requests run or wait).  The dialect poses as a
    server with :data:`SGLANG_DP_SIZE` data-parallel ranks (request *i* goes
    to rank *i* mod 2), so every scheduler metric comes in more than one label
    set, as a real data-parallel deployment's does: a consumer must sum across
    label sets.  The simulator still has one pool of slots and one cache.
``openai`` (a strict hosted API)
    Rejects any request field outside the chat-completions schema
    (``ignore_eos``, ``min_tokens``, ``cache_prompt``, ...) with HTTP 400 and
    OpenAI's error body; usage with ``prompt_tokens_details.cached_tokens``;
    no ``/metrics``, ``/tokenize``, ``/props``, ``/version``, ``/health``, no
    cache reset.

The cache-reset endpoints, and what ``SimConfig.cache_reset`` does to them, are
in :mod:`.server` ("cache resets").

Every dialect serves chat at ``BASE_PATH/chat/completions`` and the model list
at ``BASE_PATH/models`` (``SimConfig.base_path``, default ``/v1``); engine
endpoints live at the server root.  The model list carries a top-level
``"sim"`` object (the whole :class:`SimConfig`): the one field that marks the
simulator, so discovery never presents it as a real engine.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from http import HTTPStatus
from typing import Any

from ...json_types import JSONObject
from ..sim_config import DIALECTS as DIALECTS  # (the names, with the settings they are checked in)

CONTEXT_LENGTH = 32768  # the context the simulator claims (it enforces none)
SGLANG_DP_SIZE = 2  # data-parallel ranks the sglang dialect reports and labels its scheduler metrics with
HISTOGRAM_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

# The request fields of OpenAI's chat-completions schema; the strict dialect rejects any other.
OPENAI_CHAT_FIELDS = frozenset(
    "messages model audio frequency_penalty function_call functions logit_bias logprobs max_completion_tokens"
    " max_tokens metadata modalities n parallel_tool_calls prediction presence_penalty prompt_cache_key"
    " prompt_cache_retention reasoning_effort response_format safety_identifier seed service_tier stop store"
    " stream stream_options temperature tool_choice tools top_logprobs top_p user verbosity web_search_options".split()
)


def unknown_fields(body: dict) -> list[str]:
    """The body's fields that OpenAI's chat-completions schema does not have, sorted."""
    return sorted(k for k in body if k not in OPENAI_CHAT_FIELDS)


def unknown_fields_message(fields: list[str]) -> str:
    """OpenAI's wording for unrecognised request fields."""
    if len(fields) == 1:
        return f"Unrecognized request argument supplied: {fields[0]}"
    return "Unrecognized request arguments supplied: " + ", ".join(fields)


def error_body(dialect: str, status: int, message: str, kind: str) -> dict:
    """An error response body in the dialect's shape."""
    if dialect == "llama.cpp":
        return {"error": {"code": status, "message": message, "type": kind}}
    if dialect == "vllm":
        return {"error": {"message": message, "type": vllm_error_type(status), "param": None, "code": status}}
    if dialect == "sglang":
        return {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def vllm_error_type(status: int) -> str:
    """vLLM's error ``type`` for an HTTP status (its ``create_error_response``)."""
    names = {400: "BadRequestError", 404: "NotFoundError", 422: "UnprocessableEntityError",
             500: "InternalServerError", 501: "NotImplementedError", 503: "ServiceUnavailableError"}
    return names.get(status) or HTTPStatus(status).phrase


def usage(dialect: str, prompt_tokens_details: bool, t: Any, cache_block: int = 0) -> JSONObject:
    """The ``usage`` object for trace ``t`` (a simulator ``_Trace``) in the dialect's shape.
    ``cache_block``: the prefix cache's block (0: no prefix cache), for vLLM's ``created_cache_tokens``
    = the prompt's whole blocks − the cached ones."""
    out: JSONObject = {
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.completion_tokens,
        "total_tokens": t.prompt_tokens + t.completion_tokens,
    }
    cached = {"cached_tokens": t.cached_tokens}
    if dialect == "llama.cpp":
        out["prompt_tokens_details"] = cached
        out["completion_tokens_details"] = {"reasoning_tokens": t.reasoning_tokens}
    elif dialect == "vllm":
        details = None
        if prompt_tokens_details:
            created = max(0, t.prompt_tokens // cache_block * cache_block - t.cached_tokens) if cache_block else 0
            details = {**cached, "created_cache_tokens": created}
            if not t.stream:
                details["multimodal_tokens"] = None
        if details is not None or not t.stream:
            out["prompt_tokens_details"] = details
        if not t.stream:
            out["completion_tokens_details"] = None
    elif dialect == "sglang":
        out["prompt_tokens_details"] = cached if prompt_tokens_details else None
        out["reasoning_tokens"] = t.reasoning_tokens
    else:
        out["prompt_tokens_details"] = {**cached, "audio_tokens": 0}
        out["completion_tokens_details"] = {"reasoning_tokens": t.reasoning_tokens, "audio_tokens": 0,
                                            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
    return out


def models_body(cfg: Any, created: int) -> JSONObject:
    """``GET BASE_PATH/models`` in the dialect's shape, with the simulator's ``"sim"`` marker."""
    entry: JSONObject = {"id": cfg.model, "object": "model", "created": created}
    if cfg.dialect == "llama.cpp":
        entry.update(owned_by="llamacpp", meta={"n_ctx": CONTEXT_LENGTH})
    elif cfg.dialect in ("vllm", "sglang"):
        entry.update(owned_by=cfg.dialect, root=cfg.model_path, parent=None, max_model_len=CONTEXT_LENGTH)
        if cfg.dialect == "vllm":
            entry["permission"] = [{"id": "modelperm-sim", "object": "model_permission", "created": created,
                                    "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                                    "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                                    "organization": "*", "group": None, "is_blocking": False}]
    else:
        entry["owned_by"] = "system"
    return {"object": "list", "data": [entry], "sim": asdict(cfg)}


def sglang_server_info(cfg: Any, running: int, waiting: int) -> dict:
    """``GET /get_server_info``: SGLang's server arguments (the ones a run's conditions depend on)."""
    return {
        "model_path": cfg.model_path, "tokenizer_path": cfg.model_path, "served_model_name": cfg.model,
        "tp_size": 1, "dp_size": SGLANG_DP_SIZE, "pp_size": 1, "context_length": None,
        "max_running_requests": cfg.slots, "disable_radix_cache": not cfg.prefix_cache, "page_size": cfg.cache_block,
        "speculative_algorithm": "NGRAM" if cfg.draft_k else None,
        "speculative_num_draft_tokens": cfg.draft_k or None,
        "enable_metrics": serves_metrics(cfg), "enable_cache_report": cfg.prompt_tokens_details,
        "max_total_num_tokens": CONTEXT_LENGTH,
        "internal_states": [{"num_running_reqs": running, "num_queue_reqs": waiting}],
        "version": cfg.engine_version,
    }


# ------------------------------------------------------------------------ Prometheus


def _label_text(labels: tuple[tuple[str, str], ...]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return ",".join(f'{k}="{esc(v)}"' for k, v in labels)


def _num(value: float) -> str:
    return (repr(float(value)) if math.isfinite(value)
            else "+Inf" if value > 0 else "NaN" if value != value else "-Inf")


class _Histogram:
    def __init__(self) -> None:
        self.bucket_counts = [0] * len(HISTOGRAM_BUCKETS)  # cumulative
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for i, bound in enumerate(HISTOGRAM_BUCKETS):
            if value <= bound:
                self.bucket_counts[i] += 1


class Registry:
    """Prometheus families written by hand in the text exposition format (version 0.0.4).

    A family is declared once (kind, sample name, help); its label sets appear
    when first written.  ``strip_total``: the ``# TYPE`` line names a counter
    without ``_total``, as older Python prometheus_client releases write it
    (SGLang here); llama.cpp and vLLM 0.32 name it in full.  Both parse the
    same.  ``created``: after each counter and histogram, its ``_created``
    timestamps as a gauge family of their own, as prometheus_client writes
    them in the text format (vLLM).
    """

    def __init__(self, strip_total: bool = True, created: bool = False):
        self.strip_total = strip_total
        self.created = created  # write each counter's and histogram's _created timestamp (prometheus_client does)
        self._kinds: dict[str, tuple[str, str]] = {}
        self._values: dict[str, dict[tuple[tuple[str, str], ...], Any]] = {}
        self._created: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def declare(self, kind: str, name: str, help_text: str) -> None:
        self._kinds[name] = (kind, help_text)
        self._values.setdefault(name, {})

    def _slot(self, name: str, labels: dict[str, str], make: Any) -> Any:
        key = tuple((k, str(v)) for k, v in labels.items())
        values = self._values[name]
        if key not in values:
            values[key] = make()
            self._created[(name, key)] = time.time()
        return key, values

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        key, values = self._slot(name, labels, float)
        values[key] += amount

    def set(self, name: str, value: float, **labels: str) -> None:
        key, values = self._slot(name, labels, float)
        values[key] = float(value)

    def maximum(self, name: str, value: float, **labels: str) -> None:
        key, values = self._slot(name, labels, float)
        values[key] = max(values[key], float(value))

    def observe(self, name: str, value: float, **labels: str) -> None:
        key, values = self._slot(name, labels, _Histogram)
        values[key].observe(value)

    def get(self, name: str, **labels: str) -> Any:
        return self._values[name].get(tuple((k, str(v)) for k, v in labels.items()))

    def render(self) -> str:
        lines: list[str] = []
        for name, (kind, help_text) in self._kinds.items():
            values = self._values[name]
            if not values:
                continue
            family = name.removesuffix("_total") if kind == "counter" and self.strip_total else name
            lines += [f"# HELP {family} {help_text}", f"# TYPE {family} {kind}"]
            for key, value in values.items():
                if kind == "histogram":
                    lines += self._histogram_lines(name, key, value)
                else:
                    lines.append(f"{name}{{{_label_text(key)}}} {_num(value)}" if key else f"{name} {_num(value)}")
            if self.created and kind in ("counter", "histogram"):
                created = (name.removesuffix("_total") if kind == "counter" else name) + "_created"
                lines += [f"# HELP {created} {help_text}", f"# TYPE {created} gauge"]
                lines += [f"{created}{{{_label_text(key)}}} {self._created[(name, key)]!r}" if key
                          else f"{created} {self._created[(name, key)]!r}" for key in values]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _histogram_lines(name: str, key: tuple, h: _Histogram) -> list[str]:
        prefix = _label_text(key) + "," if key else ""
        out = [f'{name}_bucket{{{prefix}le="{bound}"}} {count}'
               for bound, count in zip(HISTOGRAM_BUCKETS, h.bucket_counts)]
        out.append(f'{name}_bucket{{{prefix}le="+Inf"}} {h.count}')
        labels = f"{{{_label_text(key)}}}" if key else ""
        return out + [f"{name}_count{labels} {h.count}", f"{name}_sum{labels} {h.total!r}"]


class EngineMetrics:
    """What one engine exports at ``/metrics``, fed by the simulator's request events.

    Events: ``admitted(trace, rank)`` when a request gets a slot; ``prefilled(trace, rank)``
    after its prefill (``trace.cached_tokens`` of ``trace.prompt_tokens`` reused);
    ``first_token(trace, rank)``; ``step(trace, rank, size)`` per decode step of ``size``
    tokens; ``finished(trace, rank)`` at its end (also when cut).  ``render(phases)``
    takes ``{rank: (running, waiting)}``.
    """

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.reg = Registry()

    def admitted(self, t: Any, rank: int) -> None: ...

    def prefilled(self, t: Any, rank: int) -> None: ...

    def first_token(self, t: Any, rank: int) -> None: ...

    def step(self, t: Any, rank: int, size: int) -> None: ...

    def finished(self, t: Any, rank: int) -> None: ...

    def render(self, phases: dict[int, tuple[int, int]]) -> str:
        return self.reg.render()


class LlamaCppMetrics(EngineMetrics):
    """llama-server's ``llamacpp:*`` families (build 11434): no labels; prompt counters at the end of
    prefill, prediction counters at the end of the request (as llama.cpp updates them)."""

    COUNTERS = {
        "prompt_tokens_total": "Number of prompt tokens processed, excluding cached tokens",
        "prompt_tokens_cached_total": "Number of prompt tokens reused from the cache",
        "prompt_seconds_total": "Total time spent processing prompts",
        "tokens_predicted_total": "Number of generation tokens processed",
        "tokens_predicted_seconds_total": "Total time spent generating tokens",
        "n_decode_total": ("Total number of llama_decode() calls, excluding speculative decoding and "
                           "multimodal decoding"),
        "n_tokens_max": "Largest observed sequence length (prompt + generation)",
        "spec_decode_num_draft_tokens_total": "Speculative: Total draft tokens generated",
        "spec_decode_num_accepted_tokens_total": "Speculative: Total draft tokens accepted by the target model",
        "spec_decode_num_drafts_total": "Speculative: Total speculative decoding verification steps",
    }
    GAUGES = {
        "prompt_tokens_seconds": "Average prompt throughput in tokens/s",
        "predicted_tokens_seconds": "Average generation throughput in tokens/s",
        "requests_processing": "Number of requests processing",
        "requests_deferred": "Number of requests deferred",
        "n_busy_slots_per_decode": "Average number of busy slots per llama_decode() call",
    }
    PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        self.reg = Registry(strip_total=False)
        for name, text in self.COUNTERS.items():
            self.reg.declare("counter", "llamacpp:" + name, text)
            self.reg.inc("llamacpp:" + name, 0.0)
        for name, text in self.GAUGES.items():
            self.reg.declare("gauge", "llamacpp:" + name, text)
        self.reg.declare("counter", self.PER_POS, "Speculative: accepted draft tokens per draft position")

    def prefilled(self, t: Any, rank: int) -> None:
        self.reg.inc("llamacpp:prompt_tokens_total", t.prompt_tokens - t.cached_tokens)
        self.reg.inc("llamacpp:prompt_tokens_cached_total", t.cached_tokens)
        self.reg.inc("llamacpp:prompt_seconds_total", t.prefill_s)

    def step(self, t: Any, rank: int, size: int) -> None:
        self.reg.inc("llamacpp:n_decode_total")
        if self.cfg.draft_k:
            self.reg.inc("llamacpp:spec_decode_num_drafts_total")
            self.reg.inc("llamacpp:spec_decode_num_draft_tokens_total", self.cfg.draft_k)
            self.reg.inc("llamacpp:spec_decode_num_accepted_tokens_total", size - 1)
            for pos in range(size - 1):
                self.reg.inc(self.PER_POS, position=str(pos))

    def finished(self, t: Any, rank: int) -> None:
        if t.admitted is None:
            return
        self.reg.inc("llamacpp:tokens_predicted_total", t.completion_tokens)
        self.reg.inc("llamacpp:tokens_predicted_seconds_total", t.decode_s)
        self.reg.maximum("llamacpp:n_tokens_max", t.prompt_tokens + t.completion_tokens)

    def render(self, phases: dict[int, tuple[int, int]]) -> str:
        r = self.reg
        running = sum(p[0] for p in phases.values())
        waiting = sum(p[1] for p in phases.values())
        prompt_s, predicted_s = r.get("llamacpp:prompt_seconds_total"), r.get("llamacpp:tokens_predicted_seconds_total")
        r.set("llamacpp:prompt_tokens_seconds", r.get("llamacpp:prompt_tokens_total") / prompt_s if prompt_s else 0.0)
        r.set("llamacpp:predicted_tokens_seconds",
              r.get("llamacpp:tokens_predicted_total") / predicted_s if predicted_s else 0.0)
        r.set("llamacpp:requests_processing", running)
        r.set("llamacpp:requests_deferred", waiting)
        decodes = r.get("llamacpp:n_decode_total")
        r.set("llamacpp:n_busy_slots_per_decode", 1.0 if decodes else 0.0)
        return r.render()


class VllmMetrics(EngineMetrics):
    """vLLM 0.32's ``vllm:*`` families (``tests/data/engines/vllm-0.32.0/metrics.txt``), labelled
    ``model_name`` and ``engine="0"``, each counter and histogram with its ``_created`` gauge; the
    spec-decode families only with a drafter; the prefix-cache counters stay at zero while the cache
    is off.  Phases as vLLM times them: prefill = admission → first token, decode = first → last token."""

    HISTOGRAMS = {
        "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
        "vllm:request_generation_tokens": "Number of generation tokens processed.",
        "vllm:iteration_tokens_total": "Histogram of number of tokens per engine_step.",
        "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
        "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
        "vllm:request_time_per_output_token_seconds": "Histogram of time_per_output_token_seconds per request.",
        "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
        "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
        "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
        "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
        "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    }
    COUNTERS = {
        "vllm:prefix_cache_queries_total": "Prefix cache queries, in terms of number of queried tokens.",
        "vllm:prefix_cache_hits_total": "Prefix cache hits, in terms of number of cached tokens.",
        "vllm:num_preemptions_total": "Cumulative number of preemption from the engine.",
        "vllm:prompt_tokens_total": "Number of prefill tokens processed.",
        "vllm:prompt_tokens_cached_total": "Number of cached prompt tokens (local + external).",
        "vllm:generation_tokens_total": "Number of generation tokens processed.",
    }
    BY_SOURCE = ("vllm:prompt_tokens_by_source_total", "Number of prompt tokens by source.",
                 ("local_compute", "local_cache_hit", "external_kv_transfer"))
    SPEC = {
        "vllm:spec_decode_num_drafts_total": "Number of spec decoding drafts.",
        "vllm:spec_decode_num_draft_tokens_total": "Number of draft tokens.",
        "vllm:spec_decode_num_accepted_tokens_total": "Number of accepted tokens.",
    }
    PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    FINISHED = ("stop", "length", "abort", "error", "repetition")

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        self.reg = Registry(strip_total=False, created=True)
        self.labels = {"engine": "0", "model_name": cfg.model}
        self._first: dict[str, float] = {}  # request id → its first token (time.time())
        self._last: dict[str, float] = {}  # request id → its last decode step
        for name, text in (("vllm:num_requests_running", "Number of requests in model execution batches."),
                           ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
                           ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")):
            self.reg.declare("gauge", name, text)
        counters = {**self.COUNTERS, **(self.SPEC if cfg.draft_k else {})}
        for name, text in counters.items():
            self.reg.declare("counter", name, text)
            self.reg.inc(name, 0.0, **self.labels)
        name, text, sources = self.BY_SOURCE
        self.reg.declare("counter", name, text)
        for source in sources:
            self.reg.inc(name, 0.0, **self.labels, source=source)
        self.reg.declare("counter", "vllm:request_success_total", "Count of successfully processed requests.")
        for reason in self.FINISHED:
            self.reg.inc("vllm:request_success_total", 0.0, **self.labels, finished_reason=reason)
        if cfg.draft_k:
            self.reg.declare("counter", self.PER_POS, "Accepted tokens per draft position.")
            for pos in range(cfg.draft_k):
                self.reg.inc(self.PER_POS, 0.0, **self.labels, position=str(pos))
        for name, text in self.HISTOGRAMS.items():
            self.reg.declare("histogram", name, text)
        self.reg.declare("gauge", "vllm:cache_config_info", "Information of the LLMEngine CacheConfig")
        self.reg.set("vllm:cache_config_info", 1.0, **self.cache_config())

    def cache_config(self) -> dict[str, str]:
        """``vllm:cache_config_info``'s labels: the served cache configuration, stringified as vLLM does
        (vLLM 0.32's full label set; the values a CPU server with a 1 GiB KV cache reports, with the
        simulator's block size, prefix-cache flag and context)."""
        block = self.cfg.cache_block
        return {"_block_size_resolved": "True", "block_size": str(block), "cache_dtype": "auto",
                "cache_hit_alignment_tokens": "None", "effective_attention_block_size": str(block),
                "enable_mamba_shared_prefix_checkpoint": "False",
                "enable_prefix_caching": str(bool(self.cfg.prefix_cache)), "engine": "0",
                "gpu_memory_utilization": "0.92", "hash_block_size": "None", "is_attention_free": "False",
                "kv_cache_dtype_skip_layers": "[]", "kv_cache_layout": "None", "kv_cache_max_concurrency": "1.0",
                "kv_cache_memory_bytes": "1073741824", "kv_cache_size_tokens": str(CONTEXT_LENGTH),
                "kv_offloading_backend": "native", "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False",
                "mamba_block_size": "None", "mamba_cache_dtype": "auto", "mamba_cache_mode": "none",
                "mamba_page_size_padded": "None", "mamba_ssm_cache_dtype": "float32", "num_cpu_blocks": "None",
                "num_gpu_blocks": str(CONTEXT_LENGTH // block), "num_gpu_blocks_override": "None",
                "prefix_cache_retention_interval": "0", "prefix_caching_hash_algo": "sha256",
                "prefix_match_unit": "None", "replayssm_buffer_len": "16", "skip_page_size_padded": "None",
                "sliding_window": "None", "swa_bounded_replay": "True", "use_kda_recoverssm": "False",
                "use_replayssm": "False", "user_specified_block_size": "False"}

    def admitted(self, t: Any, rank: int) -> None:
        self.reg.observe("vllm:request_queue_time_seconds", t.queue_s, **self.labels)

    def prefilled(self, t: Any, rank: int) -> None:
        computed = t.prompt_tokens - t.cached_tokens
        self.reg.inc("vllm:prompt_tokens_total", t.prompt_tokens, **self.labels)
        self.reg.inc("vllm:prompt_tokens_cached_total", t.cached_tokens, **self.labels)
        self.reg.inc("vllm:prompt_tokens_by_source_total", computed, **self.labels, source="local_compute")
        self.reg.inc("vllm:prompt_tokens_by_source_total", t.cached_tokens, **self.labels, source="local_cache_hit")
        if self.cfg.prefix_cache:
            self.reg.inc("vllm:prefix_cache_queries_total", t.prompt_tokens, **self.labels)
            self.reg.inc("vllm:prefix_cache_hits_total", t.cached_tokens, **self.labels)
        self.reg.observe("vllm:request_prompt_tokens", t.prompt_tokens, **self.labels)

    def first_token(self, t: Any, rank: int) -> None:
        self._first[t.id] = t.first_token
        self.reg.observe("vllm:time_to_first_token_seconds", t.first_token - t.arrival, **self.labels)
        if t.admitted is not None:
            self.reg.observe("vllm:request_prefill_time_seconds", t.first_token - t.admitted, **self.labels)

    def step(self, t: Any, rank: int, size: int) -> None:
        now = time.time()
        if t.id in self._last:
            self.reg.observe("vllm:inter_token_latency_seconds", now - self._last[t.id], **self.labels)
        self._last[t.id] = now
        self.reg.inc("vllm:generation_tokens_total", size, **self.labels)
        self.reg.observe("vllm:iteration_tokens_total", size, **self.labels)
        if self.cfg.draft_k:
            self.reg.inc("vllm:spec_decode_num_drafts_total", 1, **self.labels)
            self.reg.inc("vllm:spec_decode_num_draft_tokens_total", self.cfg.draft_k, **self.labels)
            self.reg.inc("vllm:spec_decode_num_accepted_tokens_total", size - 1, **self.labels)
            for pos in range(size - 1):
                self.reg.inc(self.PER_POS, 1, **self.labels, position=str(pos))

    def finished(self, t: Any, rank: int) -> None:
        first, last = self._first.pop(t.id, None), self._last.pop(t.id, None)
        if t.admitted is None:
            return
        if first is not None and last is not None:
            decode = max(0.0, last - first)
            self.reg.observe("vllm:request_decode_time_seconds", decode, **self.labels)
            self.reg.observe("vllm:request_inference_time_seconds", max(last, first) - t.admitted, **self.labels)
            if t.completion_tokens > 1:
                self.reg.observe("vllm:request_time_per_output_token_seconds", decode / (t.completion_tokens - 1),
                                 **self.labels)
        self.reg.observe("vllm:request_generation_tokens", t.completion_tokens, **self.labels)
        if t.end is not None:
            self.reg.observe("vllm:e2e_request_latency_seconds", t.end - t.arrival, **self.labels)
        reason = {"stop": "stop", "tool_calls": "stop", "length": "length"}.get(t.finish_reason, "abort")
        self.reg.inc("vllm:request_success_total", 1, **self.labels, finished_reason=reason)

    def render(self, phases: dict[int, tuple[int, int]]) -> str:
        self.reg.set("vllm:num_requests_running", sum(p[0] for p in phases.values()), **self.labels)
        self.reg.set("vllm:num_requests_waiting", sum(p[1] for p in phases.values()), **self.labels)
        self.reg.set("vllm:kv_cache_usage_perc", 0.0, **self.labels)
        return self.reg.render()


class SglangMetrics(EngineMetrics):
    """SGLang's ``sglang:*`` families: tokenizer-side counters labelled ``model_name`` (written when a
    request finishes, so absent before the first), scheduler-side families labelled per scheduler
    rank (``dp_rank`` 0 and 1).  ``cache_hit_rate`` = cached / prompt tokens of the rank's last prefill
    batch (one request here: SGLang sets it per batch in ``log_prefill_stats``, not since start);
    ``spec_accept_length`` = tokens per verify step (accepted drafts + 1), 0 without a drafter."""

    TOKENIZER = {
        "sglang:prompt_tokens_total": "Number of prefill tokens processed.",
        "sglang:generation_tokens_total": "Number of generation tokens processed.",
        "sglang:cached_tokens_total": "Number of cached prompt tokens.",
        "sglang:num_requests_total": "Number of requests processed.",
    }
    GAUGES = {
        "sglang:num_running_reqs": "The number of running requests.",
        "sglang:num_queue_reqs": "The number of requests in the waiting queue.",
        "sglang:cache_hit_rate": "The prefix cache hit rate.",
        "sglang:spec_accept_length": "The average acceptance length of speculative decoding.",
        "sglang:spec_accept_rate": "The average acceptance rate of speculative decoding.",
        "sglang:token_usage": "The token usage.",
        "sglang:max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
    }

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        self.model = {"model_name": cfg.model}
        for name, text in self.TOKENIZER.items():
            self.reg.declare("counter", name, text)
        for name, text in (("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
                           ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds"),
                           ("sglang:queue_time_seconds", "Histogram of queueing time in seconds.")):
            self.reg.declare("histogram", name, text)
        for name, text in self.GAUGES.items():
            self.reg.declare("gauge", name, text)
        zero = {"prompt": 0, "cached": 0, "steps": 0, "draft": 0, "accepted": 0}
        self.per_rank = {rank: dict(zero) for rank in range(SGLANG_DP_SIZE)}

    @staticmethod
    def scheduler(model: str, rank: int) -> dict[str, str]:
        return {"model_name": model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
                "moe_ep_rank": "0", "dp_rank": str(rank)}

    def admitted(self, t: Any, rank: int) -> None:
        self.reg.observe("sglang:queue_time_seconds", t.queue_s, **self.scheduler(self.cfg.model, rank))

    def prefilled(self, t: Any, rank: int) -> None:
        self.per_rank[rank]["prompt"] = t.prompt_tokens  # the last prefill batch's, as SGLang's gauge
        self.per_rank[rank]["cached"] = t.cached_tokens

    def step(self, t: Any, rank: int, size: int) -> None:
        if self.cfg.draft_k:
            stats = self.per_rank[rank]
            stats["steps"] += 1
            stats["draft"] += self.cfg.draft_k
            stats["accepted"] += size - 1

    def finished(self, t: Any, rank: int) -> None:
        if t.admitted is None:
            return
        self.reg.inc("sglang:prompt_tokens_total", t.prompt_tokens, **self.model)
        self.reg.inc("sglang:generation_tokens_total", t.completion_tokens, **self.model)
        if t.cached_tokens > 0:
            self.reg.inc("sglang:cached_tokens_total", t.cached_tokens, **self.model)
        self.reg.inc("sglang:num_requests_total", 1, **self.model)
        if t.first_token is not None:
            self.reg.observe("sglang:time_to_first_token_seconds", t.first_token - t.arrival, **self.model)
        if t.end is not None:
            self.reg.observe("sglang:e2e_request_latency_seconds", t.end - t.arrival, **self.model)

    def render(self, phases: dict[int, tuple[int, int]]) -> str:
        for rank, stats in self.per_rank.items():
            labels = self.scheduler(self.cfg.model, rank)
            running, waiting = phases.get(rank, (0, 0))
            self.reg.set("sglang:num_running_reqs", running, **labels)
            self.reg.set("sglang:num_queue_reqs", waiting, **labels)
            self.reg.set("sglang:cache_hit_rate", stats["cached"] / stats["prompt"] if stats["prompt"] else 0.0,
                         **labels)
            steps = stats["steps"]
            self.reg.set("sglang:spec_accept_length", (stats["accepted"] + steps) / steps if steps else 0.0, **labels)
            self.reg.set("sglang:spec_accept_rate", stats["accepted"] / stats["draft"] if stats["draft"] else 0.0,
                         **labels)
            self.reg.set("sglang:token_usage", 0.0, **labels)
            self.reg.set("sglang:max_total_num_tokens", CONTEXT_LENGTH, **labels)
        return self.reg.render()


METRICS_BY_DEFAULT = {"llama.cpp": True, "vllm": True, "sglang": False, "openai": False}


def serves_metrics(cfg: Any) -> bool:
    """Whether ``/metrics`` is offered: ``cfg.metrics`` "on"/"off", else the engine's default — vLLM on,
    SGLang off (it needs ``--enable-metrics``), llama.cpp on (the embedded engine passes ``--metrics``;
    a bare llama-server needs it too), a strict API never."""
    if cfg.dialect == "openai":
        return False
    return METRICS_BY_DEFAULT[cfg.dialect] if cfg.metrics == "default" else cfg.metrics == "on"


def metrics_for(cfg: Any) -> EngineMetrics | None:
    """The dialect's ``/metrics`` exporter, or None where the engine offers none (see :func:`serves_metrics`)."""
    if not serves_metrics(cfg):
        return None
    return {"llama.cpp": LlamaCppMetrics, "vllm": VllmMetrics, "sglang": SglangMetrics}[cfg.dialect](cfg)


def dp_rank(request_number: int) -> int:
    """The scheduler rank a request goes to: round robin over the ranks (only SGLang has several)."""
    return request_number % SGLANG_DP_SIZE
