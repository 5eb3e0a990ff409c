"""Knobs and comparisons: which arms measure which lever.

An arm's **knobs** are what defines its serving condition, from three sources
(a later one wins where two name the same knob):

1. what the tool discovered from the endpoint (``discovered.knobs``: engine
   and version, model file, served flags, slots, context length, parallelism;
   see ``runner/discover.py``);
2. what the arm sends with every request: the model it asks for (``model``),
   and its extra body fields (``request``) — ``cache_prompt`` is the prefix
   cache's own switch on llama.cpp (``prefix_cache``), any other field is the
   knob ``request.FIELD``;
3. its declared conditions (``[[arms]] conditions``), except pricing
   (``gpu_hour_usd``: it changes what a second costs, not how many there are).

Values are compared canonically: every "off" spelling (null, false, 0, "",
"none", "off", "no", "false") is one value, off; a knob an arm does not have
at all counts as off — unless another arm's endpoint stated it
(:func:`all_arm_knobs`): what discovery found on one arm and not on the other
(a ``/version`` that did not answer) is **unknown** there (:data:`UNKNOWN`),
and a comparison that differs in an unknown knob is not controlled.  A
knob a source names on one side and another contradicts is a
**contradiction** — declared off and discovered on (or the reverse), or both
on but naming different things (declared drafter "eagle", discovered "ngram";
one name containing the other, "ngram-mod K=7" and "ngram-mod", agrees), or
two different numbers: the knob's true value is unknown, and no comparison in
which it differs may be cited (:mod:`.guard`).

**Discovered facts** that are not knobs (:func:`fact_knobs`): every fact in an
arm's ``discovered`` record (flattened: ``props.build_info``, ``version.version``,
``engine_args``, ``threads``, …) in which two arms differ is a knob too, named
``fact:PATH``, unless a knob derived from it (:data:`FACT_KNOB`) differs
between those same arms, or it is one of :data:`NOT_FACTS` (the simulator's own
settings, the discovery's own bookkeeping).  The llama.cpp flags in
``engine_args`` are compared flag by flag: a drafter's flags are the
``drafter`` knob's, a few others map to their knobs, any other flag that
differs is a knob ``flag:NAME``.

Two arms that differ in exactly one knob are a **controlled comparison**: that
pair measures that knob's lever (the article's drafter = treatment vs
control).  The lever's direction: the arm with the knob off is the reference
("without", ``vs``); when both set it (two engine versions, two draft
lengths), the reference is the one earlier in role order (baseline, control,
treatment), then in the experiment's order.  Multiplier = reference time /
other arm's time.  Two arms that differ in no knob are a replicate, not a
lever.

The comparisons a summary reports: every arm against the baseline (kept
whatever their knobs; an uncontrolled one names its knobs), and every
controlled pair in its lever's direction (so a baseline that has the lever
on is also compared the other way round).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

NOT_KNOBS = ("gpu_hour_usd",)
UNKNOWN = "(unknown)"  # a knob discovered on another arm and not found on this one
_OFF_WORDS = ("none", "off", "no", "", "false")
_ROLE_ORDER = {"baseline": 0, "control": 1, "treatment": 2}
# the knobs whose lever acts on one phase only (Amdahl: it shortens that phase and nothing else)
PREFILL_LEVERS = ("prefix_cache", "cache_prompt", "prompt_cache", "radix_cache", "enable_prefix_caching")
DECODE_LEVERS = ("drafter", "speculative_decoding", "spec_decode", "speculative", "draft_model")


def is_on(value: Any) -> bool:
    """Whether a knob's value means "on": anything but absent/None/False/0/""/none/off/no/false, and not
    :data:`UNKNOWN` (an unknown knob is not claimed to be on)."""
    if value == UNKNOWN:
        return False
    if isinstance(value, str):
        return value.strip().lower() not in _OFF_WORDS
    return not (value is None or value is False or (isinstance(value, (int, float)) and value == 0))


def canonical(value: Any) -> Any:
    """The value knobs are compared by: every "off" spelling is ``False``; :data:`UNKNOWN` stays itself."""
    return value if value == UNKNOWN or is_on(value) else False


def lever_phase(knob: str) -> str:
    """The phase a knob's lever acts on: "prefill" (a prefix cache), "decode" (a drafter), else "both"."""
    k = knob.strip().lower()
    if k in PREFILL_LEVERS:
        return "prefill"
    if k in DECODE_LEVERS:
        return "decode"
    return "both"


def arm_knobs(arm: dict[str, Any], request: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """(knobs, contradictions) of one arm: ``arm`` is its ledger-header entry (``conditions``,
    ``discovered``, ``model``), ``request`` its extra body fields.  contradictions: knob → what disagrees."""
    found = dict((arm.get("discovered") or {}).get("knobs") or {})
    sent: dict[str, Any] = {}
    if arm.get("model") and "model" in found:
        sent["model"] = arm["model"]  # the model asked for (one endpoint may serve several)
    for k, v in (request or {}).items():
        if k == "cache_prompt":
            sent["prefix_cache"] = is_on(v)
        else:
            sent[f"request.{k}"] = v
    declared = {k: v for k, v in (arm.get("conditions") or {}).items() if k not in NOT_KNOBS}
    contradictions: dict[str, str] = {}
    for k, v in declared.items():
        for source, other in (("the endpoint says", found), ("its requests say", sent)):
            if k in other and (why := contradiction(v, other[k])):
                contradictions[k] = f"declared {k} = {v!r}, but {source} {why}"
    return {**found, **sent, **declared}, contradictions


def _name(v: str) -> str:
    return "".join(ch for ch in v.lower() if ch.isalnum())


def contradiction(declared: Any, stated: Any) -> str | None:
    """How a *stated* value (discovered or sent) contradicts a *declared* one, or None: one on and the other
    off; both named and neither name holding the other (letters and digits compared, case aside); two
    different numbers (see the module docstring)."""
    if not isinstance(stated, (bool, str, int, float)):
        return None
    if is_on(declared) != is_on(stated):
        return ("on" if is_on(stated) else "off") + ("" if isinstance(stated, bool) else f" ({stated!r})")
    if not is_on(stated) or isinstance(stated, bool) or isinstance(declared, bool):
        return None
    if isinstance(declared, str) and isinstance(stated, str):
        a, b = _name(declared), _name(stated)
        return None if (a in b or b in a) else f"{stated!r}"
    numbers = all(isinstance(x, (int, float)) for x in (declared, stated))
    return f"{stated!r}" if numbers and float(declared) != float(stated) else None


# ---------------------------------------------------------------------------------------------- across arms

#: A discovered fact (its flattened path; a prefix ending in "." covers the paths below it) → the knob derived
#: from it: a fact that differs is covered where that knob differs between the same arms.
FACT_KNOB = {"props.build_info": "engine_version", "version.version": "engine_version",
             "engine_build.": "engine_version", "server_info.version": "engine_version",
             "props.model_path": "model_file", "model_file": "model_file",
             "models": "model", "server_info.served_model_name": "model", "server_info.model_path": "model_file",
             "props.total_slots": "slots", "server_info.max_running_requests": "slots",
             "props.n_ctx": "context_length", "ctx_size": "context_length",
             "cache_config.enable_prefix_caching": "prefix_cache", "server_info.disable_radix_cache": "prefix_cache",
             "cache_config.block_size": "block_size", "server_info.speculative_algorithm": "drafter",
             "server_info.speculative_num_draft_tokens": "drafter", "server_info.tp_size": "tensor_parallel",
             "server_info.dp_size": "data_parallel", "server_info.device": "device", "engine": "engine",
             "model_source": "model_file", "parallel": "slots", "model_id": "model"}
#: Facts that are never knobs: the simulator's own settings (a test instrument's truth), what discovery keeps
#: as bookkeeping (``knobs``, derived from the rest), a build's date and platform (its version is the knob),
#: and switches that only change what the server reports, not how it serves (SGLang's cache report and
#: metrics: the tool asks for them to see engagement).
NOT_FACTS = ("knobs", "sim", "props.sim", "engine_build.build_date", "engine_build.platform",
             "server_info.enable_cache_report", "server_info.enable_metrics", "unreachable")
#: Engine flags that only change what the server reports or where it listens, not how it serves.
NOT_FLAGS = ("--enable-prompt-tokens-details", "--enable-cache-report", "--enable-metrics", "--metrics",
             "--disable-log-requests", "--enable-log-requests", "--disable-log-stats", "--no-webui", "--host",
             "--port", "--api-key", "--log-file", "--log-disable", "--log-verbosity", "-v", "--verbose",
             "--served-model-name", "--uvicorn-log-level", "--alias", "-a")
#: Facts that name a file: compared by its name (the same model loaded from two directories is one model).
_FILE_FACTS = ("props.model_path", "models", "model_file", "model_source", "server_info.model_path")
#: Engine flags (in ``engine_args``: llama.cpp's, vLLM's) → the knob they set; a drafter's flags are all the
#: ``drafter`` knob's (:data:`DRAFTER_FLAG_PREFIXES`).
FLAG_KNOB = {"-np": "slots", "--parallel": "slots", "-c": "context_length", "--ctx-size": "context_length",
             "-t": "fact:threads", "--threads": "fact:threads", "-m": "model_file", "--model": "model_file",
             "--max-model-len": "context_length", "--enable-prefix-caching": "prefix_cache",
             "--no-enable-prefix-caching": "prefix_cache", "--tensor-parallel-size": "tensor_parallel",
             "-tp": "tensor_parallel"}
DRAFTER_FLAG_PREFIXES = ("--spec", "--draft", "-md", "--speculative", "--model-draft", "-hfd", "--hf-repo-draft",
                         "-ngl-draft", "--gpu-layers-draft", "-cd", "--ctx-size-draft", "-devd", "--device-draft")


def _base_name(v: Any) -> Any:
    """A path's last part (a file's name); anything else as it is."""
    if isinstance(v, str) and ("/" in v or "\\" in v):
        return v.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return v


def _flatten(d: Any, path: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{path}{k}."))
        return out
    return {path[:-1]: d}


def _flags(args: Any) -> dict[str, Any]:
    """llama.cpp command-line arguments as {flag: value} (True for a flag without one)."""
    out: dict[str, Any] = {}
    args = [str(a) for a in args] if isinstance(args, list) else []
    for i, a in enumerate(args):
        if a.startswith("-") and not a.lstrip("-").replace(".", "").isdigit():
            nxt = args[i + 1] if i + 1 < len(args) else None
            out[a] = nxt if nxt is not None and not (nxt.startswith("-") and not nxt.lstrip("-").replace(
                ".", "").isdigit()) else True
    return out


def _facts(discovered: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """An arm's discovered facts: flattened path → (the knob that covers it, or None; its value as JSON)."""
    out: dict[str, tuple[str, Any]] = {}
    for path, v in _flatten({k: v for k, v in (discovered or {}).items() if k != "engine_args"}).items():
        if any(path == n or path.startswith(n + ".") for n in NOT_FACTS):
            continue
        knob = FACT_KNOB.get(path) or next((k for p, k in FACT_KNOB.items() if p.endswith(".")
                                            and path.startswith(p)), None)
        if path in _FILE_FACTS:
            v = [_base_name(x) for x in v] if isinstance(v, list) else _base_name(v)
        out[path] = (knob or f"fact:{path}", json.dumps(v, sort_keys=True, default=str))
    for flag, v in _flags((discovered or {}).get("engine_args")).items():
        if flag in NOT_FLAGS:
            continue
        knob = "drafter" if flag.startswith(DRAFTER_FLAG_PREFIXES) else FLAG_KNOB.get(flag, f"flag:{flag}")
        out[f"engine_args {flag}"] = (knob, json.dumps(v))
    return out


def fact_knobs(discovered: dict[str, dict[str, Any]], knobs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arm, the knobs its discovered facts add (the module docstring): for each fact in which two arms
    differ and whose covering knob does not differ between them, the knob ``fact:PATH`` (or ``flag:NAME``)
    with the fact's value on every arm that has it."""
    facts = {a: _facts(d) for a, d in discovered.items()}
    arms = list(facts)
    out: dict[str, dict[str, Any]] = {a: {} for a in arms}
    for path in dict.fromkeys(p for a in arms for p in facts[a]):
        if path.startswith("engine_args "):  # an engine started with known arguments: a flag not given is known
            for a in arms:
                if path not in facts[a] and isinstance(discovered[a].get("engine_args"), list):
                    knob = next(facts[b][path][0] for b in arms if path in facts[b])
                    facts[a][path] = (knob, "false")
        for i, x in enumerate(arms):
            for y in arms[i + 1:]:
                fx, fy = facts[x].get(path), facts[y].get(path)
                if fx is None or fy is None or fx[1] == fy[1]:
                    continue  # a fact one arm lacks is not a difference found (its knob may be unknown there)
                knob = fx[0]
                if not knob.startswith(("fact:", "flag:")) and \
                        canonical(knobs[x].get(knob)) != canonical(knobs[y].get(knob)):
                    continue  # the knob it makes differs too: covered
                name = knob if knob.startswith(("fact:", "flag:")) else f"fact:{path}"
                for a in arms:
                    if path in facts[a]:
                        out[a][name] = json.loads(facts[a][path][1])
    return out


def all_arm_knobs(header_arms: dict[str, dict[str, Any]], requests: dict[str, dict[str, Any] | None],
                  arms: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, str]]]:
    """(knobs, contradictions) of every arm of *arms* (ledger-header entries *header_arms*, extra body fields
    *requests*): :func:`arm_knobs` of each, the knobs its discovered facts add (:func:`fact_knobs`), and
    :data:`UNKNOWN` for a knob that another arm's endpoint stated (discovered, not declared nor sent) and
    this arm has from no source."""
    knobs, contradictions, found = {}, {}, {}
    for a in arms:
        h = header_arms.get(a, {})
        knobs[a], contradictions[a] = arm_knobs(h, requests.get(a))
        found[a] = set((h.get("discovered") or {}).get("knobs") or {})
    extra = fact_knobs({a: header_arms.get(a, {}).get("discovered") or {} for a in arms}, knobs)
    for a in arms:
        knobs[a].update(extra[a])
    stated = {k for a in arms for k in found[a] | set(extra[a])}
    for a in arms:
        for k in sorted(stated - set(knobs[a])):
            knobs[a][k] = UNKNOWN
    return knobs, contradictions


def unknown_knobs(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The knobs unknown on either of two arms (:data:`UNKNOWN`), sorted."""
    return sorted(k for k in set(a) | set(b) if UNKNOWN in (a.get(k), b.get(k)))


def differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The knobs whose canonical values differ between two arms (absent counts as off), sorted."""
    return sorted(k for k in set(a) | set(b) if canonical(a.get(k)) != canonical(b.get(k)))


@dataclass(frozen=True)
class Comparison:
    """``arm`` against ``vs`` (the reference): multiplier = time(vs) / time(arm).  ``lever``: the knob
    it measures, when it is a controlled comparison in that lever's direction (else None)."""

    arm: str
    vs: str
    knobs: tuple[str, ...]
    lever: str | None = None
    unknown: tuple[str, ...] = ()  # knobs unknown on either arm (:data:`UNKNOWN`): then it is not controlled

    @property
    def controlled(self) -> bool:
        return len(self.knobs) == 1 and not self.unknown


def reference_first(x: str, y: str, knob: str, knobs: dict[str, dict[str, Any]], roles: dict[str, str],
                    order: list[str]) -> tuple[str, str]:
    """(reference, other) of a controlled pair differing in *knob* (see the module docstring)."""
    on_x, on_y = is_on(knobs[x].get(knob)), is_on(knobs[y].get(knob))
    if on_x != on_y:
        return (y, x) if on_x else (x, y)
    rank = {a: (_ROLE_ORDER.get(roles.get(a, ""), 3), order.index(a)) for a in (x, y)}
    return (x, y) if rank[x] <= rank[y] else (y, x)


def comparisons(arms: list[str], baseline: str, knobs: dict[str, dict[str, Any]],
                roles: dict[str, str]) -> list[Comparison]:
    """Every arm against the baseline, then every controlled pair in its lever's direction that the
    baseline comparisons do not already give (in the arms' order).  A pair with a knob unknown on either
    side (:func:`unknown_knobs`) is not controlled."""
    out = []
    for a in arms:
        if a == baseline:
            continue
        diff = tuple(differing(knobs[baseline], knobs[a]))
        unknown = tuple(unknown_knobs(knobs[baseline], knobs[a]))
        lever = None
        if len(diff) == 1 and not unknown and reference_first(baseline, a, diff[0], knobs, roles, arms)[0] == baseline:
            lever = diff[0]
        out.append(Comparison(a, baseline, diff, lever, unknown))
    for i, x in enumerate(arms):
        for y in arms[i + 1:]:
            diff = differing(knobs[x], knobs[y])
            if len(diff) != 1 or unknown_knobs(knobs[x], knobs[y]):
                continue
            ref, other = reference_first(x, y, diff[0], knobs, roles, arms)
            if (other, ref) in {(c.arm, c.vs) for c in out}:
                continue
            out.append(Comparison(other, ref, tuple(diff), diff[0]))
    return out


def suggestion(knob: str, arms: list[str], knobs: dict[str, dict[str, Any]]) -> str:
    """For a knob no controlled pair measures: which arm would make one.

    Takes the pair that differs in *knob* and in the fewest other knobs, and proposes the arm
    with the knob on but every other differing knob set as in the arm with it off."""
    best: tuple[int, str, str, list[str]] | None = None
    for i, x in enumerate(arms):
        for y in arms[i + 1:]:
            diff = differing(knobs[x], knobs[y])
            if knob in diff and (best is None or len(diff) < best[0]):
                on, off = (x, y) if is_on(knobs[x].get(knob)) else (y, x)
                best = (len(diff), on, off, [k for k in diff if k != knob])
    if best is None:
        return f"no two arms differ in {knob}"
    _, on, off, others = best
    settings = ", ".join(f"{k} = {knobs[off].get(k, False)!r}" for k in others)
    return (f"no controlled pair measures {knob}: {on} and {off} also differ in {', '.join(others)}; an arm like "
            f"{on} with {settings} would differ from {off} in {knob} only")
