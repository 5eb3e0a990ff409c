"""Weight quantisation: the model's weights stored in fewer bits (vLLM / SGLang ``--quantization fp8``, AWQ,
GPTQ; a llama.cpp model file's quant type, Q4_K_M, Q8_0 — that one is a different model file, the
``model_file`` knob of :mod:`.engine`).

It acts on both phases: decode reads every weight once per token (memory bandwidth), prefill multiplies by
them (compute); so the projection treats it over the whole time.  No engagement is judged: an engine that
started with a quantisation serves with it.
"""

from __future__ import annotations

from typing import Mapping, Optional

from ..json_types import JSONValue
from .lever import KnobValue, Lever, engine_args, flag_value


def _discover(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    args = engine_args(raw)
    if engine in ("vllm", "sglang") and args is not None:
        return flag_value(args, "--quantization", "-q")
    return None


LEVER = Lever(
    name="quantization",
    summary="the weights in fewer bits",
    phases=("both",),
    projection="both",
    words="weight quantisation",
    advice="vLLM / SGLang: --quantization fp8 (or a quantised checkpoint); llama.cpp: a model file of another "
           "quant type",
    aliases=("quantisation", "weights_quantization", "weight_quantization"),
    flags=("--quantization", "-q"),
    server_info_keys=("quantization",),
    facts=("server_info.quantization",),
    discover=_discover,
    reported_by=("engine_args",),  # an engine the tool started without --quantization serves unquantised weights
    rank=40,
)
