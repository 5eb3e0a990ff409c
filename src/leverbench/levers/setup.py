"""The serving setup: context length, KV-cache block size, tensor and data parallelism, the device.

Knobs a comparison must hold equal more than levers one tunes for speed; each acts on the whole call, so the
projection treats it over the whole time.  No engagement is judged.
"""

from __future__ import annotations

from typing import Mapping, Optional

from ..json_types import JSONValue
from .lever import Discover, KnobValue, Lever, as_int, cache_config, first_model, first_of, part


def _context(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    """llama.cpp's ``n_ctx`` (/props ``default_generation_settings``), the model list's ``max_model_len`` (vLLM,
    SGLang), else the context the embedded llama.cpp was given (``known.ctx_size``)."""
    llama = engine == "llama.cpp"
    gen = part(part(raw, "props"), "default_generation_settings") if llama else {}
    return first_of(as_int(gen.get("n_ctx")), as_int(first_model(raw).get("max_model_len")),
                    as_int(part(raw, "known").get("ctx_size")) if llama else None)


def _block(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    """vLLM's ``block_size`` (its ``cache_config_info`` labels)."""
    return as_int(cache_config(raw).get("block_size")) if engine == "vllm" else None


def _sglang(key: str, number: bool = True) -> Discover:
    """The knob as SGLang's ``/get_server_info`` states it under *key* (a whole number where *number*)."""
    def discover(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
        value = part(raw, "server_info").get(key) if engine == "sglang" else None
        return as_int(value) if number else value
    return discover


LEVERS = (
    Lever(name="context_length", summary="the context the server allots a call", phases=("both",),
          projection="both", words="context length", advice="llama.cpp: -c N; vLLM: --max-model-len N",
          flags=("-c", "--ctx-size", "--max-model-len"), facts=("props.n_ctx", "ctx_size"), discover=_context,
          rank=70),
    Lever(name="block_size", summary="the KV cache's block (page) size", phases=("both",), projection="both",
          words="KV-cache block size", advice="vLLM: --block-size N; SGLang: --page-size N",
          facts=("cache_config.block_size",), discover=_block, rank=71),
    Lever(name="tensor_parallel", summary="the model split over GPUs layer by layer", phases=("both",),
          projection="both", words="tensor parallelism", advice="vLLM: --tensor-parallel-size N; SGLang: --tp N",
          flags=("--tensor-parallel-size", "-tp"), facts=("server_info.tp_size",),
          server_info_keys=("tp_size", "pp_size"), discover=_sglang("tp_size"), rank=72),
    Lever(name="data_parallel", summary="replicas of the model serving calls side by side", phases=("both",),
          projection="both", words="data parallelism", advice="SGLang: --dp N", facts=("server_info.dp_size",),
          server_info_keys=("dp_size",), discover=_sglang("dp_size"), rank=73),
    Lever(name="device", summary="the device the engine serves on", phases=("both",), projection="both",
          words="device", advice="serve on another device", facts=("server_info.device",),
          server_info_keys=("device",), discover=_sglang("device", number=False), rank=74),
)
