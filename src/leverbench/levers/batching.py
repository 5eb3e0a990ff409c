"""Batching: how many calls the server runs at once (llama.cpp slots, ``-np`` / ``--parallel``; vLLM
``--max-num-seqs``; SGLang ``--max-running-requests``) and how many tokens one step may batch (vLLM
``--max-num-batched-tokens``, SGLang ``--max-prefill-tokens``, llama.cpp ``-b`` / ``--batch-size``).

They act on queueing: more calls at once means less waiting for a slot (and, per call, a share of the step).
The projection serves one call at a time and has no queue to shorten, so it treats them over the whole time
("both"); ``leverbench whatif`` and load stages are where they are measured.  No engagement is judged: the
server serves with the slots it was started with.
"""

from __future__ import annotations

from typing import Mapping, Optional

from ..json_types import JSONValue
from .lever import KnobValue, Lever, as_int, count_value, engine_args, first_of, flag_value, part

#: The flag that sets the slots on each engine the tool may start.
_SLOT_FLAGS = {"vllm": ("--max-num-seqs",), "sglang": ("--max-running-requests",), "llama.cpp": ("-np", "--parallel")}


def _slots(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    """The slots as the endpoint reports them (llama.cpp's /props ``total_slots``, SGLang's
    ``max_running_requests``; else what the embedded llama.cpp knows it was given, ``known.parallel``), else as
    given on the command line of an engine the tool started: "default" without the flag (the engine's own number,
    which differs by engine and device: an arm that sets it against one that does not differs in this knob
    alone)."""
    if engine == "llama.cpp":
        stated = first_of(as_int(part(raw, "props").get("total_slots")), as_int(part(raw, "known").get("parallel")))
    elif engine == "sglang":
        stated = as_int(part(raw, "server_info").get("max_running_requests"))
    else:
        stated = None
    return first_of(stated, _given(raw, engine))


def _given(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    args = engine_args(raw)
    if args is None or engine not in _SLOT_FLAGS:
        return None
    value = flag_value(args, *_SLOT_FLAGS[engine])
    try:
        return int(value) if value is not None else "default"
    except ValueError:
        return value

LEVERS = (
    Lever(
        name="slots",
        summary="how many calls the server serves at once",
        phases=("queueing",),
        projection="both",
        words="batching",
        advice="llama.cpp: -np N; vLLM: --max-num-seqs N; SGLang: --max-running-requests N",
        aliases=("parallel", "n_parallel", "max_num_seqs", "max_running_requests"),
        flags=("-np", "--parallel", "--max-num-seqs", "--max-running-requests"),
        facts=("props.total_slots", "server_info.max_running_requests", "parallel"),
        server_info_keys=("max_running_requests",),
        discover=_slots,
        serve={"llama.cpp": lambda v, _: ["--parallel", str(count_value(v, "slots"))],
               "vllm": lambda v, _: ["--max-num-seqs", str(count_value(v, "slots"))]},
        rank=30,
    ),
    Lever(
        name="batch_tokens",
        summary="how many tokens one engine step may batch",
        phases=("queueing",),
        projection="both",
        words="batch token budget",
        advice="vLLM: --max-num-batched-tokens N; SGLang: --max-prefill-tokens N; llama.cpp: -b N",
        aliases=("max_num_batched_tokens", "max_prefill_tokens", "batch_size"),
        flags=("--max-num-batched-tokens", "--max-prefill-tokens", "-b", "--batch-size"),
        serve={"llama.cpp": lambda v, _: ["--batch-size", str(count_value(v, "batch_tokens"))],
               "vllm": lambda v, _: ["--max-num-batched-tokens", str(count_value(v, "batch_tokens"))]},
        rank=31,
    ),
)
