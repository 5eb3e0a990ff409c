"""The KV cache's dtype: the attention cache's keys and values stored in fewer bits (vLLM and SGLang
``--kv-cache-dtype fp8``; llama.cpp ``--cache-type-k q8_0`` / ``--cache-type-v q8_0``).

It acts on decode.  Each decoded token reads the whole KV cache of its context from memory, and at the batch
sizes one serves with that read, not arithmetic, bounds the step: a cache in half the bits is read in about
half the time.  Prefill writes the cache once while it computes over the prompt, and is bound by compute, not
by that read.  So the projection puts it on the decode seconds (Amdahl); that it also fits more contexts into
memory shows under load, like batching.

Engagement: the engine's own account of the dtype it keeps the cache in — vLLM's ``cache_config_info``
label ``cache_dtype``, SGLang's ``kv_cache_dtype`` in ``/get_server_info`` — agreeing with the knob (one name
holding the other: ``fp8`` and ``fp8_e4m3`` agree).  Where the engine does not say (llama.cpp), or says
something else, engagement is unknown, never "not engaged".  Discovery names the knob only when it is not the
engine's default (``auto``; llama.cpp ``f16``); an engine that reported its default has it off.
"""

from __future__ import annotations

from typing import Mapping, Optional

from ..json_types import JSONValue
from .lever import ArmEvidence, KnobValue, Lever, Use, cache_config, engine_args, flag_value, name_value

#: The engines' spelling of "the model's own dtype", the default: no knob.
_DEFAULTS = ("auto", "f16")


def _stated(discovered: Mapping[str, JSONValue]) -> tuple[Optional[str], str]:
    """(the cache dtype the engine reports, which report) from a discovered record (or discovery's raw answers:
    there vLLM's labels are under ``metrics``)."""
    stated = discovered.get("cache_config")
    cache = stated if isinstance(stated, dict) else cache_config(discovered)
    if isinstance(cache.get("cache_dtype"), str):
        return str(cache["cache_dtype"]), "vLLM cache_config_info"
    info = discovered.get("server_info")
    if isinstance(info, dict) and isinstance(info.get("kv_cache_dtype"), str):
        return str(info["kv_cache_dtype"]), "SGLang /get_server_info"
    return None, ""


def _discover(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    """The dtype the tool started its engine with (its arguments), else the one the engine reports."""
    args = engine_args(raw) or []
    if engine == "llama.cpp":
        k, v = flag_value(args, "--cache-type-k", "-ctk"), flag_value(args, "--cache-type-v", "-ctv")
        given = [x for x in (k, v) if x and x not in _DEFAULTS]
        return "/".join(dict.fromkeys(given)) or None
    value = flag_value(args, "--kv-cache-dtype") or _stated(raw)[0]
    return value if value and value not in _DEFAULTS else None


def _name(v: object) -> str:
    return "".join(ch for ch in str(v).lower() if ch.isalnum())


def _judge(arm: ArmEvidence) -> Use:
    declared = arm.knobs.get(LEVER.name)
    stated, where = _stated(arm.discovered)
    a, b = _name(declared), _name(stated or "")
    if stated is not None and a and b and (a in b or b in a):
        return Use(True, f"discovered cache dtype ({where}: {stated})")
    why = (f"its engine reports the cache dtype {stated!r} ({where})" if stated is not None else
           "its engine does not report its cache dtype (vLLM: /metrics cache_config_info; SGLang: /get_server_info)")
    return Use(None, None, f"engagement unknown: arm {arm.arm!r} says {LEVER.name} {declared!r}, but {why}")


LEVER = Lever(
    name="kv_cache_dtype",
    summary="the KV cache in fewer bits",
    phases=("decode",),
    projection="decode",
    words="KV-cache dtype",
    advice="vLLM / SGLang: --kv-cache-dtype fp8; llama.cpp: --cache-type-k q8_0 --cache-type-v q8_0",
    aliases=("cache_dtype", "kv_dtype", "cache_type_k", "cache_type_v"),
    flags=("--kv-cache-dtype", "--cache-type-k", "-ctk", "--cache-type-v", "-ctv"),
    facts=("cache_config.cache_dtype", "server_info.kv_cache_dtype"),
    judge=_judge,
    unknown_hint="vLLM: /metrics cache_config_info; SGLang: /get_server_info",
    discover=_discover,
    server_info_keys=("kv_cache_dtype",),
    serve={"llama.cpp": lambda v, _: ["--cache-type-k", name_value(v, "kv_cache_dtype"), "--cache-type-v",
                                      name_value(v, "kv_cache_dtype")],
           "vllm": lambda v, _: ["--kv-cache-dtype", name_value(v, "kv_cache_dtype")]},
    # an engine that reports its cache dtype, or that the tool started with known arguments, and has none but
    # its default: the knob is off there, not unknown
    reported_by=("cache_config.cache_dtype", "server_info.kv_cache_dtype", "engine_args"),
    rank=45,
)
