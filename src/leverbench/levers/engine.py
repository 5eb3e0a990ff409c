"""Engine and model swaps: another engine (llama.cpp, vLLM, SGLang), another build of it, another model or
model file (a llama.cpp model file of another quant type is one).

They act on both phases, and on everything else: the projection treats them over the whole time.  No
engagement is judged (an engine serves as itself).
"""

from __future__ import annotations

from .lever import Lever

LEVERS = (
    Lever(name="engine", summary="another serving engine", phases=("both",), projection="both",
          words="engine", advice="serve the same model on another engine", facts=("engine",), rank=60),
    Lever(name="engine_version", summary="another build of the engine", phases=("both",), projection="both",
          words="engine version", advice="upgrade (or pin) the engine",
          facts=("props.build_info", "version.version", "engine_build.", "server_info.version"),
          server_info_keys=("version",), rank=61),
    Lever(name="model", summary="another served model", phases=("both",), projection="both", words="model",
          advice="serve a smaller or distilled model", facts=("models", "server_info.served_model_name", "model_id"),
          server_info_keys=("served_model_name",), rank=62),
    Lever(name="model_file", summary="another model file (weights, quant type)", phases=("both",),
          projection="both", words="model file", advice="load another file of the model (another quant type)",
          flags=("-m", "--model"),
          facts=("props.model_path", "model_file", "server_info.model_path", "model_source"),
          server_info_keys=("model_path",), rank=63),
)
