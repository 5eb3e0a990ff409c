"""The serving setup: context length, KV-cache block size, tensor and data parallelism, the device.

Knobs a comparison must hold equal more than levers one tunes for speed; each acts on the whole call, so the
projection treats it over the whole time.  No engagement is judged.
"""

from __future__ import annotations

from .lever import Lever

LEVERS = (
    Lever(name="context_length", summary="the context the server allots a call", phases=("both",),
          projection="both", words="context length", advice="llama.cpp: -c N; vLLM: --max-model-len N",
          flags=("-c", "--ctx-size", "--max-model-len"), facts=("props.n_ctx", "ctx_size"), rank=70),
    Lever(name="block_size", summary="the KV cache's block (page) size", phases=("both",), projection="both",
          words="KV-cache block size", advice="vLLM: --block-size N; SGLang: --page-size N",
          facts=("cache_config.block_size",), rank=71),
    Lever(name="tensor_parallel", summary="the model split over GPUs layer by layer", phases=("both",),
          projection="both", words="tensor parallelism", advice="vLLM: --tensor-parallel-size N; SGLang: --tp N",
          flags=("--tensor-parallel-size", "-tp"), facts=("server_info.tp_size",),
          server_info_keys=("tp_size", "pp_size"), rank=72),
    Lever(name="data_parallel", summary="replicas of the model serving calls side by side", phases=("both",),
          projection="both", words="data parallelism", advice="SGLang: --dp N", facts=("server_info.dp_size",),
          server_info_keys=("dp_size",), rank=73),
    Lever(name="device", summary="the device the engine serves on", phases=("both",), projection="both",
          words="device", advice="serve on another device", facts=("server_info.device",),
          server_info_keys=("device",), rank=74),
)
