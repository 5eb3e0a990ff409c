"""Chunked prefill: a long prompt is prefilled in chunks that share engine steps with other calls' decode
(vLLM ``--enable-chunked-prefill``, SGLang ``--chunked-prefill-size``).  vLLM's V1 engine (every vLLM this tool
starts) prefills in chunks unless ``--no-enable-chunked-prefill``; SGLang chunks by a size it picks unless
``--chunked-prefill-size`` sets one: an engine the tool started without a flag has its default, "on" for
vLLM and "default" for SGLang, never an unknown value.

It acts on prefill: what it changes is how a prompt's prefill is cut and scheduled, so the projection treats
it on the prefill seconds (its effect on other calls' decode shows under load, not in a one-call projection).
No engagement is judged.
"""

from __future__ import annotations

from typing import Mapping, Optional

from ..json_types import JSONValue
from .lever import KnobValue, Lever, engine_args, flag_value, switch_value


def _discover(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    args = engine_args(raw)
    if args is None:
        return None
    if engine == "vllm":
        return "--no-enable-chunked-prefill" not in args
    if engine == "sglang":
        return flag_value(args, "--chunked-prefill-size") or "default"
    return None


LEVER = Lever(
    name="chunked_prefill",
    summary="prefill a long prompt in chunks scheduled beside other calls' decode",
    phases=("prefill",),
    projection="prefill",
    words="chunked prefill",
    advice="vLLM: --enable-chunked-prefill; SGLang: --chunked-prefill-size N",
    aliases=("enable_chunked_prefill", "chunked_prefill_size"),
    flags=("--enable-chunked-prefill", "--no-enable-chunked-prefill", "--chunked-prefill-size"),
    server_info_keys=("chunked_prefill_size",),
    facts=("server_info.chunked_prefill_size",),
    discover=_discover,
    serve={"vllm": lambda v, _: ["--enable-chunked-prefill" if switch_value(v, "chunked_prefill")
                                 else "--no-enable-chunked-prefill"]},
    rank=50,
)
