"""The simulator's settings, apart from its server so that reading them (``leverbench sim --help``
builds one option per field) does not load aiohttp."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

#: The dialects the simulator speaks (:mod:`.simulator.dialects`: how each one answers).
DIALECTS = ("llama.cpp", "vllm", "sglang", "openai")
CACHE_RESET_MODES = ("on", "off", "fake")  # SimConfig.cache_reset (see simulator/server.py, "Cache resets")
DRAFT_MODELS = ("round", "expected")  # SimConfig.draft_model (see simulator/drafter.py)


@dataclass
class SimConfig:
    """The simulator's set speeds and behaviours (see :mod:`leverbench.engines.simulator`)."""

    prefill_tps: float = 2000.0  # uncached prompt tokens per second
    decode_tps: float = 200.0  # decode steps per second per request
    prefill_quadratic: float = 0.0  # s per token²: n uncached tokens after k cached take + this × n·(k + n/2)
    decode_slowdown_per_ctx: float = 0.0  # s per context token: a decode step at context L takes + this × L
    decode_batch_slowdown: float = 0.0  # a decode step takes (1 + this × (k − 1)) × as long, k requests decoding
    # (draft_model "expected": k counts each decoding request's 1 + draft_k tokens)
    overhead_s: float = 0.0  # fixed per-request overhead after admission, before prefill
    slots: int = 1  # requests served at once; the rest queue FIFO
    prefix_cache: bool = True  # reuse previously seen prompt prefixes
    cache_block: int = 16  # prefix-cache granularity in tokens
    cache_reset: str = "on"  # the dialect's cache-reset endpoint: "on" (clears), "off" (absent), "fake" (acks, keeps)
    output_tokens: int = 64  # generated tokens when the request does not force a length
    output_jitter: float = 0.0  # fraction: length = output_tokens * (1 + u * jitter), u in [-1, 1]
    draft_k: int = 0  # speculative decoding: draft tokens per step (0 = no drafter)
    draft_acceptance: float = 0.0  # fraction of the draft tokens accepted each step (expected: each in turn)
    draft_memory: float = 0.0  # added to draft_acceptance for a prompt the drafter has mostly seen (ngram-mod)
    draft_cost: float = 0.0  # each drafted token costs this much of a plain decode step: a step costs 1 + this × k
    draft_model: str = "round"  # "round": 1 + round(k·p) tokens a step; "expected": (1 − p^(k+1)) / (1 − p) a step
    # in expectation, the batch term counting each request's 1 + k tokens (simulator/drafter.py)
    reasoning_tokens: int = 0  # the first N generated tokens are reasoning_content
    tool_call_rounds: int = 0  # with tools, call a tool until the conversation has this many tool messages
    template_tools: bool = True  # the chat template renders tool schemas; false: dropped from the prompt, unsaid
    model: str = "sim"
    dialect: str = "llama.cpp"  # how it speaks: llama.cpp, vllm, sglang or openai (see simulator/dialects.py)
    engine_version: str = "sim"  # llama.cpp build_info, vLLM /version, SGLang /get_server_info version
    prompt_tokens_details: bool = False  # vLLM --enable-prompt-tokens-details / SGLang --enable-cache-report
    base_path: str = "/v1"  # chat at BASE_PATH/chat/completions, models at BASE_PATH/models
    model_path: str = "sim"  # llama.cpp /props model_path, vLLM/SGLang model root
    metrics: str = "default"  # /metrics: "on", "off", or the engine's default (SGLang: off without --enable-metrics)
    seed: int = 0
    fault_http_500: float = 0.0  # probability: answer HTTP 500
    fault_http_429: float = 0.0  # probability: answer HTTP 429
    fault_cut_stream: float = 0.0  # probability: send half the tokens, then drop the connection
    fault_stall_s: float = 0.0  # length of a stall before the first token
    fault_stall: float = 0.0  # probability: stall
    fault_malformed: float = 0.0  # probability: one SSE data line that is not JSON, mid-stream
    fault_no_usage: float = 0.0  # probability: omit usage even when asked
    drift_per_s: float = 0.0  # speed drift: a request admitted at epoch t is served 1 + this × (t − drift_t0) slower
    drift_t0: float = 0.0  # epoch the drift counts from (0: the server's start); arms that share it drift alike
    speed_jitter: float = 0.0  # CV of a lognormal factor drawn per request on every service time (0: none)
    cold_requests: int = 0  # the first N requests (a cold engine) are slower: cold_factor × at first, then less
    cold_factor: float = 1.0

    def __post_init__(self) -> None:
        problems = [f"{name} must be > 0" for name in ("prefill_tps", "decode_tps") if not getattr(self, name) > 0]
        problems += [f"{name} must be >= 1" for name in ("slots", "cache_block") if getattr(self, name) < 1]
        problems += [f"{name} must be >= 0" for name in _NON_NEGATIVE_FIELDS if getattr(self, name) < 0]
        problems += [f"{name} must be in [0, 1]" for name in _FRACTION_FIELDS if not 0 <= getattr(self, name) <= 1]
        problems += [f"{name} must be a finite number" for name in ("drift_per_s", "draft_cost")
                     if not math.isfinite(getattr(self, name))]
        if not self.cold_factor > 0:
            problems.append("cold_factor must be > 0")
        if self.dialect not in DIALECTS:
            problems.append(f"dialect must be one of {', '.join(DIALECTS)}")
        if self.metrics not in ("default", "on", "off"):
            problems.append('metrics must be "default", "on" or "off"')
        if self.cache_reset not in CACHE_RESET_MODES:
            problems.append('cache_reset must be "on", "off" or "fake"')
        if self.draft_model not in DRAFT_MODELS:
            problems.append('draft_model must be "round" or "expected"')
        if self.base_path and (not self.base_path.startswith("/") or self.base_path.endswith("/")):
            problems.append('base_path must be empty or start with "/" and not end with "/" (e.g. "/v1")')
        if problems:
            raise ValueError("; ".join(problems))


_NON_NEGATIVE_FIELDS = (
    "overhead_s", "fault_stall_s", "output_tokens", "draft_k", "reasoning_tokens", "tool_call_rounds",
    "prefill_quadratic", "decode_slowdown_per_ctx", "decode_batch_slowdown", "drift_t0", "speed_jitter",
    "cold_requests", "draft_cost",
)  # fmt: skip
_FRACTION_FIELDS = (
    "output_jitter", "draft_acceptance", "draft_memory", "fault_http_500", "fault_http_429", "fault_cut_stream",
    "fault_stall", "fault_malformed", "fault_no_usage",
)  # fmt: skip


SERVER_FLAGS = ("--host", "--port")  # leverbench sim's own options apart from SimConfig's


def from_args(args: Sequence[str]) -> SimConfig:
    """The settings ``leverbench sim`` takes from its command-line options *args*: one per field, its name with
    dashes (``--decode-tps 300`` or ``--decode-tps=300``; a switch ``--prefix-cache`` / ``--no-prefix-cache``),
    as :mod:`leverbench.cli.sim` makes them; ValueError naming what is wrong.  ``--host`` and ``--port`` (where
    the server listens, not how it serves) are refused: the tool that starts it picks them."""
    fields = {f.name: f for f in dataclasses.fields(SimConfig)}
    switches = {name: f for f in fields.values() if isinstance(f.default, bool) for name in (f.name, "no_" + f.name)}
    settings: dict[str, object] = {}
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        i += 1
        name = flag.removeprefix("--").replace("-", "_")
        if flag in SERVER_FLAGS:
            raise ValueError(f"{flag} is the tool's: it starts the simulator on a free loopback port")
        # click knows each option by its dashed name only: --decode_tps is no option of leverbench sim's
        if flag.startswith("--") and "_" in flag and (name in fields or name in switches):
            raise ValueError(f"{flag!r} is not an option of leverbench sim: its options are spelled with dashes "
                             f"(write --{name.replace('_', '-')})")
        field = (switches.get(name) or fields.get(name)) if flag.startswith("--") else None
        if field is None:
            raise ValueError(f"{args[i - 1]!r} is not an option of leverbench sim (its options: leverbench sim --help)")
        if isinstance(field.default, bool):
            if eq:
                raise ValueError(f"{flag} is a switch: it takes no value")
            settings[field.name] = not name.startswith("no_")
            continue
        if not eq:
            if i >= len(args):
                raise ValueError(f"{flag} needs a value")
            value, i = args[i], i + 1
        kind: type = type(field.default)  # int, float or str (every field has a default)
        try:
            settings[field.name] = kind(value)
        except ValueError:
            raise ValueError(f"{flag} takes {'an integer' if kind is int else 'a number'} (got {value!r})") from None
    return SimConfig(**settings)  # type: ignore[arg-type]  # each value typed as its field's default


#: How to run the simulator as an endpoint of one's own (what an arm of kind ``sim`` cannot be).
_AS_ENDPOINT = ("run `leverbench sim {option}` yourself and give the arm base_url = \"http://HOST:PORT{path}\" "
                "and model instead of engine")


def check_spec(args: Sequence[str], others: Sequence[str]) -> None:
    """An arm's ``engine`` table of kind ``sim``: its *args* (:func:`from_args`), and no other setting of *others*
    (the names of llama.cpp's, and a context size: the simulator has none); ValueError saying what is wrong.

    The tool starts the simulator as it starts an engine: healthy when ``/health`` answers, its chat under
    ``/v1`` and its own endpoints at the root of the URL it hands the run.  So two of ``leverbench sim``'s options
    are refused here, with the way to the same simulator as an endpoint: ``--dialect openai`` (a hosted API: no
    ``/health``, no cache reset, no ``/metrics``) and a ``--base-path`` other than ``/v1``."""
    if others:
        raise ValueError(f"{', '.join(others)}: not a setting of kind = \"sim\" (the simulator's speeds, slots and "
                         "cache are its args: leverbench sim's options, e.g. [\"--decode-tps\", \"300\"])")
    try:
        cfg = from_args(args)
    except ValueError as exc:
        raise ValueError(f"args: {exc}") from None
    if cfg.dialect == "openai":
        raise ValueError("args: --dialect openai imitates a hosted API, which serves no /health, no cache reset and no "
                         "/metrics, so the tool cannot start and reset it as an engine: give --dialect llama.cpp, "
                         "vllm or sglang, or " + _AS_ENDPOINT.format(option="--dialect openai", path="/v1"))
    if cfg.base_path != SimConfig.base_path:
        given = cfg.base_path or '""'
        raise ValueError(f"args: --base-path {given}: the tool serves the engines it starts at {SimConfig.base_path} "
                         "(their own endpoints at the root); leave it out, or "
                         + _AS_ENDPOINT.format(option=f"--base-path {given}", path=cfg.base_path))
