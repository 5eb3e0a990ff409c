"""``leverbench sim``: run the simulator, a test instrument with set speeds.

One option per :class:`~leverbench.engines.sim_config.SimConfig` field, made
from the dataclass so the two cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import click

from ..engines.sim_config import CACHE_RESET_MODES, DRAFT_MODELS, SimConfig
from ..engines.simulator.dialects import DIALECTS
from ..errors import BadInput
from ..runner.signals import STOP_SIGNALS, interrupt_on, release_signals
from .common import Command

_HELP = {
    "prefill_tps": "Uncached prompt tokens computed per second.",
    "decode_tps": "Decode steps per second per request (one token per step without a drafter).",
    "prefill_quadratic": "Context-dependent prefill, s per token²: n uncached tokens after k cached ones take "
                         "n / prefill-tps + this × n·(k + n/2) (attention over earlier tokens).",
    "decode_slowdown_per_ctx": "Context-dependent decode, s per context token: a step at a context of L tokens "
                               "takes 1 / decode-tps + this × L.",
    "decode_batch_slowdown": "Batch-dependent decode: each decode step takes (1 + this × (k − 1)) times as long, k "
                             "the requests decoding at once (itself included); set per arm, e.g. a drafter's "
                             "verification that is cheap alone and dear in a batch. With draft-model expected, k "
                             "counts each decoding request's 1 + draft-k tokens instead of 1.",
    "overhead_s": "Fixed seconds per request after it gets a slot, before prefill.",
    "slots": "Requests served at once; the rest wait first come, first served (--parallel: llama.cpp's name).",
    "prefix_cache": "Reuse prompt prefixes seen before (whole blocks only).",
    "cache_block": "Prefix-cache granularity in tokens.",
    "cache_reset": "The dialect's cache-reset endpoint (llama.cpp POST /slots/ID?action=erase, vLLM POST "
                   "/reset_prefix_cache, SGLang /flush_cache): on (clears the prefix cache), off (absent, as on a "
                   "server started without it: llama.cpp 501, vLLM and SGLang 404), fake (answers as on, clears "
                   "nothing). Never clears the drafter's memory.",
    "output_tokens": "Tokens generated when the request does not force a length.",
    "output_jitter": "Length varies by up to this fraction, deterministically per prompt.",
    "draft_k": "Speculative decoding: draft tokens per step (0: no drafter).",
    "draft_acceptance": "Fraction of the draft tokens accepted each step (draft-model expected: the probability "
                        "that each draft is accepted, given the ones before it were).",
    "draft_memory": "The drafter's memory across requests (llama.cpp ngram-mod): a prompt whose longest prefix "
                    "the drafter served before covers at least half of it gets draft-acceptance + this (at most "
                    "1). Survives the cache-reset endpoints; POST /sim/reset clears it.",
    "draft_cost": "What drafting costs: each of the draft-k tokens drafted a step costs this fraction of a plain "
                  "decode step, so a step takes 1 + this × draft-k times as long (0: drafting is free).",
    "draft_model": "How a drafter emits tokens. round: every step emits 1 + round(draft-k × draft-acceptance) "
                   "tokens, and decode-batch-slowdown counts requests. expected: each draft is accepted with "
                   "probability draft-acceptance in turn, so a step emits E = (1 − p^(k+1)) / (1 − p) tokens "
                   "(accumulated per request: n tokens take ceil(n / E) steps), and decode-batch-slowdown counts "
                   "each decoding request's 1 + draft-k tokens: a step takes 1 + s × (requests × (1 + k) − 1) "
                   "times as long.",
    "reasoning_tokens": "The first N generated tokens are sent as reasoning_content.",
    "tool_call_rounds": "With tools, answer with a tool call until the conversation holds this many tool messages.",
    "template_tools": "The chat template renders tool schemas. Off: as llama.cpp with a template that lacks them, "
                      "the schemas are dropped from the prompt (not counted, never called) without an error, and "
                      "/props says chat_template_caps.supports_tools false.",
    "model": "Model name reported by the server.",
    "metrics": "Serve /metrics: on, off, or default (the engine's own default: vLLM and llama.cpp on, SGLang off).",
    "dialect": "Speak as this engine does with its default flags: usage fields, timings, errors, "
               "endpoints, /metrics names (openai: a strict API that rejects unknown request fields).",
    "engine_version": "Version the engine reports (llama.cpp build_info, vLLM /version, SGLang /get_server_info).",
    "prompt_tokens_details": "vllm/sglang: report usage.prompt_tokens_details.cached_tokens, as with vLLM's "
                             "--enable-prompt-tokens-details or SGLang's --enable-cache-report.",
    "base_path": "API path: chat at BASE_PATH/chat/completions, models at BASE_PATH/models (e.g. /v1beta/openai).",
    "model_path": "Model file or directory the engine reports (llama.cpp model_path, vLLM/SGLang root).",
    "seed": "Seed for fault draws and length jitter.",
    "fault_http_500": "Probability per request of an HTTP 500.",
    "fault_http_429": "Probability per request of an HTTP 429.",
    "fault_cut_stream": "Probability per request of dropping the connection halfway through the answer.",
    "fault_stall_s": "Seconds a stall lasts (before the first token).",
    "fault_stall": "Probability per request of a stall.",
    "fault_malformed": "Probability per request of one SSE data line that is not JSON.",
    "fault_no_usage": "Probability per request of leaving out usage even when asked.",
    "drift_per_s": "Speed drift: a request admitted t seconds after drift-t0 is served 1 + this × t times slower "
                   "(negative: faster).",
    "drift_t0": "Epoch seconds the drift counts from (0: the server's start); simulators given the same drift alike.",
    "speed_jitter": "Per-request noise: every service time is multiplied by a lognormal factor of mean 1 and this CV.",
    "cold_requests": "The first N requests (an engine warming up) are slower: cold-factor times at first, then "
                     "less, linearly.",
    "cold_factor": "How much slower the first of the cold-requests requests is served.",
}


#: Other names of an option: llama.cpp's, where the simulator's setting is the server's (so that a command template's
#: placeholder fills the flag a lever owns: ``--parallel {slots}`` is the batching lever's, as on llama.cpp).
ALIASES = {"slots": ("--parallel",)}


def _config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add one click option per SimConfig field, typed and defaulted from the dataclass."""
    for f in reversed(dataclasses.fields(SimConfig)):
        flag = f.name.replace("_", "-")
        if isinstance(f.default, bool):
            decls = [f"--{flag}/--no-{flag}"]
        else:
            decls = [f"--{flag}", *ALIASES.get(f.name, ())]
        choices = {"dialect": DIALECTS, "cache_reset": CACHE_RESET_MODES, "draft_model": DRAFT_MODELS}.get(f.name)
        kind = click.Choice(choices) if choices else type(f.default)
        command = click.option(
            *decls, f.name, default=f.default, type=kind, show_default=True, help=_HELP[f.name]
        )(command)
    return command


@click.command(name="sim", cls=Command)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8090, show_default=True, type=int, help="Port to listen on (0: any free port).")
@_config_options
def sim_command(host: str, port: int, **settings: Any) -> None:
    """Run the simulator: an OpenAI-compatible server with set speeds.

    It is a test instrument whose prefill rate, decode rate, slots, prefix
    cache, drafter and faults are fixed, so the true answer to every
    measurement is known. It is not a real engine and says nothing about
    one. --dialect sets how it speaks (llama.cpp, vllm, sglang or a strict
    openai API) without changing its speeds; its model list carries a "sim"
    object that marks it as the simulator. Prints the base URL (without the
    base path), then blocks until Ctrl-C, SIGTERM or SIGHUP (exit code 0).
    Ground truth per request: GET /sim/truth.
    """
    try:
        cfg = SimConfig(**settings)
    except ValueError as err:
        raise BadInput(str(err)) from None
    from ..engines import simulator  # noqa: PLC0415 (aiohttp: ~0.17 s)

    if not 0 <= port <= 65535:
        raise BadInput(f"--port must be in 0..65535 (got {port}); 0 picks any free port")
    previous = interrupt_on(STOP_SIGNALS)  # each ends the server's loop, which closes its port (the default: killed)
    try:
        simulator.serve(cfg, host, port, on_ready=click.echo)
    except OSError as exc:
        raise BadInput(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc}); "
                       "pick another --port (0: any free one) or --host") from None
    except KeyboardInterrupt:  # (one that came before the loop ran)
        pass
    finally:
        release_signals(previous)
