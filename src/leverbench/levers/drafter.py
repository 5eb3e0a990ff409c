"""The drafter (speculative decoding): a cheap draft (a small model, n-grams, EAGLE heads) proposes tokens that
the model verifies several at a time.  It acts on decode alone (Amdahl on the decode seconds): the prompt is
prefilled as before.  Its speed depends on the text it drafts (a forced answer's repetitive text drafts unnaturally
well), so an arm with it is probed with natural answers and its decode fitted on them.

Discovery: llama.cpp's ``/slots`` ``speculative`` or the ``--spec-type`` / draft-model arguments of an engine the
tool started (none of them: false); vLLM: whether ``vllm:spec_decode_*`` families exist (vLLM registers them only
with a drafter; they are there from the start), named by the ``method`` of the ``--speculative-config`` the tool
started its own vLLM with; SGLang's ``speculative_algorithm``; the method's name as the value where it is named
(else true), so that one drafter is one knob.

Engagement: the acceptance Σ accepted / Σ drafted tokens (at least ``engaged_acceptance_min``, default 0.2), from the
calls (llama.cpp ``timings.draft_n`` / ``draft_n_accepted``), else the server's counters (vLLM
``spec_decode_num_{accepted,draft}_tokens``, llama.cpp ``spec_decode_num_*_total``); with only SGLang's mean accept
length (``spec_accept_length``), above 1.

On traffic (``analyze``): saved = decode_s × (1 − 1/speedup) per call, the speedup measured by a run's drafter arm
against its twin (``--rates``) or given (``--drafter-speedup``); negative when the drafter is slower.
"""

from __future__ import annotations

import json
from typing import Mapping, Optional

from ..json_types import JSONValue
from .lever import (
    ArmEvidence,
    GroupSums,
    KnobValue,
    Lever,
    Measured,
    MetricTable,
    TrafficFacts,
    TrafficSaving,
    count_value,
    engine_args,
    name_value,
    part,
)

#: The llama.cpp flags that start a drafter (discovery: a started engine with one of them has one).
LLAMACPP_DRAFT_ARGS = frozenset({"--spec-type", "-md", "--model-draft", "-hfd", "--hf-repo-draft"})


def speculative_method(args: list[str]) -> str | bool | None:
    """The drafter named by ``--speculative-config`` (or ``--speculative_config``) in vLLM arguments:
    its ``method`` (``ngram``, ``eagle``, ...), True when the JSON names none, None without the flag or with
    ``None``/``null`` (vLLM's "no drafter": a command template's way to turn it off)."""
    for i, a in enumerate(args):
        value = None
        if a.split("=", 1)[0] in ("--speculative-config", "--speculative_config"):
            value = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else None)
        if value is None:
            continue
        if value.strip() in ("None", "null", ""):
            return None
        try:
            cfg = json.loads(value)
        except ValueError:
            return True
        return str(cfg.get("method") or cfg.get("model") or True) if isinstance(cfg, dict) else True
    return None


def _llamacpp(raw: Mapping[str, JSONValue]) -> KnobValue:
    args = engine_args(raw)
    slots = raw.get("slots")
    if any(a in LLAMACPP_DRAFT_ARGS for a in args or []):
        given = args or []
        i = given.index("--spec-type") if "--spec-type" in given else -1
        return given[i + 1] if 0 <= i < len(given) - 1 else True
    if isinstance(slots, list) and slots and all(isinstance(s, dict) and "speculative" in s for s in slots):
        return any(bool(s["speculative"]) for s in slots if isinstance(s, dict))
    return False if args is not None else None  # the engine the tool started: its arguments name no drafter


def _discover(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    if engine == "llama.cpp":
        return _llamacpp(raw)
    if engine == "vllm":
        metrics = raw.get("metrics")
        found: KnobValue = any(n.startswith("vllm:spec_decode") for n in metrics) if isinstance(metrics, dict) \
            and metrics else None
        method = speculative_method(engine_args(raw) or []) if part(raw, "known").get("engine") == "vllm" else None
        return method if found is not False and method else found
    info = part(raw, "server_info")
    if engine == "sglang" and "speculative_algorithm" in info:
        return info["speculative_algorithm"] or False
    return None


def _measure(arm: ArmEvidence) -> Measured:
    c, m, thr = arm.calls, arm.metrics, arm.settings["engaged_acceptance_min"]
    figures: dict[str, JSONValue] = {"draft_tokens": None, "accepted_tokens": None, "acceptance": None,
                                     "acceptance_source": None}
    length: Optional[float] = None
    if c.draft_n:
        figures.update(draft_tokens=c.draft_n, accepted_tokens=c.draft_n_accepted,
                       acceptance=c.draft_n_accepted / c.draft_n, acceptance_source="calls (timings)")
    elif m.get("drafter_acceptance") is not None:
        figures.update(draft_tokens=int(m["draft_tokens"]) if "draft_tokens" in m else None,
                       accepted_tokens=int(m["accepted_tokens"]) if "accepted_tokens" in m else None,
                       acceptance=m["drafter_acceptance"], acceptance_source="server metrics (spec decode counters)")
    elif m.get("sglang_spec_accept_length") is not None:
        length = m["sglang_spec_accept_length"]
        figures.update(acceptance_source="server metrics (SGLang spec_accept_length)")
    acceptance = figures["acceptance"]
    if isinstance(acceptance, (int, float)):
        used: Optional[bool] = acceptance >= thr
        what = f"accepted only {acceptance:.0%} of draft tokens (threshold {thr:.0%})"
    else:
        used = None if length is None else length > 1.0
        what = f"has a mean accept length of {length:.2f}" if length is not None else ""
    said = f"arm {arm.arm!r} says {LEVER.name} {arm.knobs.get(LEVER.name)!r}"
    return Measured(figures, used, after={"accept_length": length} if length is not None else {},
                    not_engaged=f"lever not engaged: {said} but {what}; it is not credited with the {LEVER.words}",
                    unknown=f"engagement unknown: {said}, but neither its calls nor server metrics of its own report "
                            f"{LEVER.unknown_hint}")


def _saved(g: GroupSums, speedup: Optional[float]) -> Optional[float]:
    """decode_s × (1 − 1/speedup): the decode seconds a drafter removes (negative if it is slower)."""
    return g["decode"] * (1.0 - 1.0 / speedup) if speedup else None


def _parameter(t: TrafficFacts) -> Optional[str]:
    sp = t.rate_values
    return (f"speedup {min(sp):.2f}x" + (f"–{max(sp):.2f}x" if max(sp) != min(sp) else "")) if sp else None


#: The knob that gives the drafter's most draft tokens a step, a parameter of its value (:func:`_serve_llamacpp`).
DRAFT_TOKENS = "draft_tokens"


def _kind(value: KnobValue) -> str | None:
    """The draft kind a tune's drafter value names (None: no drafter: false or "none")."""
    if value is False or value == "none":
        return None
    return name_value(value, 'drafter (a draft kind such as "ngram-simple", or "none")')


def _serve_llamacpp(value: KnobValue, config: Mapping[str, KnobValue]) -> list[str]:
    """llama.cpp: ``--spec-type KIND`` and, where the configuration has ``draft_tokens``, ``--spec-draft-n-max N``."""
    kind = _kind(value)
    if kind is None:
        return []
    n = config.get(DRAFT_TOKENS)
    return ["--spec-type", kind] + (["--spec-draft-n-max", str(count_value(n, DRAFT_TOKENS))] if n is not None else [])


def _serve_vllm(value: KnobValue, config: Mapping[str, KnobValue]) -> list[str]:
    """vLLM: ``--speculative-config {"method": KIND, "num_speculative_tokens": N}`` (vLLM needs N)."""
    kind = _kind(value)
    if kind is None:
        return []
    if config.get(DRAFT_TOKENS) is None:
        raise ValueError(f"vLLM's drafter needs its draft tokens a step: add the knob {DRAFT_TOKENS} = [N, ...]")
    n = count_value(config[DRAFT_TOKENS], DRAFT_TOKENS)
    return ["--speculative-config", json.dumps({"method": kind, "num_speculative_tokens": n})]


LEVER = Lever(
    name="drafter",
    summary="speculative decoding: a draft proposes tokens the model verifies in one step",
    phases=("decode",),
    projection="decode",
    words="drafter",
    advice="llama.cpp: --spec-type ngram-mod or -md DRAFT.gguf; vLLM: --speculative-config; SGLang: "
           "--speculative-algorithm",
    aliases=("speculative_decoding", "spec_decode", "speculative", "draft_model"),
    flag_prefixes=("--spec", "--draft", "-md", "--speculative", "--model-draft", "-hfd", "--hf-repo-draft",
                   "-ngl-draft", "--gpu-layers-draft", "-cd", "--ctx-size-draft", "-devd", "--device-draft"),
    facts=("server_info.speculative_algorithm", "server_info.speculative_num_draft_tokens"),
    serve={"llama.cpp": _serve_llamacpp, "vllm": _serve_vllm},
    parameters=(DRAFT_TOKENS,),
    metrics=MetricTable(
        shares=(("drafter_acceptance", "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_draft_tokens"),
                ("llamacpp_drafter_acceptance", "llamacpp:spec_decode_num_accepted_tokens_total",
                 "llamacpp:spec_decode_num_draft_tokens_total")),
        deltas=(("draft_tokens", "vllm:spec_decode_num_draft_tokens"),
                ("accepted_tokens", "vllm:spec_decode_num_accepted_tokens")),
        gauges=(("sglang_spec_accept_length", "sglang:spec_accept_length"),),
        shown=(("drafter_acceptance", "drafter acceptance", None),
               ("sglang_spec_accept_length", "accept length (SGLang)", 2))),
    measure=_measure,
    used_field="drafter_used",
    unknown_hint="drafter statistics",
    natural_answers=True,
    stated="named",
    traffic=TrafficSaving(rate="drafter_speedup", saved=_saved, parameter=_parameter,
                          unknown="no measured drafter speedup; give --rates RUN_DIR with a drafter arm or "
                                  "--drafter-speedup"),
    discover=_discover,
    server_info_keys=("speculative_algorithm", "speculative_num_draft_tokens"),
    rank=20,
)
