"""Knobs and comparisons: which arms measure which lever.

An arm's **knobs** are what defines its serving condition, from three sources
(a later one wins where two name the same knob):

1. what the tool discovered from the endpoint (``discovered.knobs``: engine
   and version, model file, served flags, slots, context length, parallelism;
   see ``runner/discover.py``);
2. what the arm sends with every request: the model it asks for (``model``),
   and its extra body fields (``request``) — a lever's own switch (llama.cpp's
   ``cache_prompt`` is the prefix cache's: ``prefix_cache``; :mod:`leverbench.levers`
   names them) sets that lever's knob, any other field is the knob ``request.FIELD``;
3. its declared conditions (``[[arms]] conditions``), except pricing
   (``gpu_hour_usd``: it changes what a second costs, not how many there are).

Values are compared canonically: every "off" spelling (null, false, 0, "",
"none", "off", "no", "false") is one value, off; a knob an arm does not have
at all counts as off — unless another arm's endpoint stated it
(:func:`all_arm_knobs`): what discovery found on one arm and not on the other
(a ``/version`` that did not answer) is **unknown** there (:data:`UNKNOWN`) — unless that
endpoint did report it, as its default (a lever's ``reported_by`` facts are there),
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
``fact:PATH``, unless a knob derived from it (:data:`FACT_KNOB`: the levers' facts, :mod:`leverbench.levers`) differs
between those same arms, or it is one of :data:`NOT_FACTS` (the simulator's own
settings, the discovery's own bookkeeping).  The llama.cpp flags in
``engine_args`` are compared flag by flag: a flag a lever names (a drafter's
flags are the ``drafter`` knob's, ``--kv-cache-dtype`` its lever's, …) maps to
its knob, any other flag that differs is a knob ``flag:NAME``.  An engine started by a command template
(``engines/command.py``) has a knob ``value:NAME`` per placeholder, which stands for the flags it fills and the
flags its value is (``{cache}`` = ``--no-enable-prefix-caching``); where a lever owns one, its lever's knob covers
it.

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
from typing import Mapping, Optional

from ...json_types import JSONValue
from ...knob_values import UNKNOWN as UNKNOWN
from ...knob_values import is_on as is_on
from ...levers import registry

NOT_KNOBS = ("gpu_hour_usd",)
_ROLE_ORDER = {"baseline": 0, "control": 1, "treatment": 2}
#: An arm's knobs: knob → its value (what an engine reported, a request sent or a user declared: JSON).
Knobs = dict[str, JSONValue]


def canonical(value: JSONValue) -> JSONValue:
    """The value knobs are compared by: every "off" spelling is ``False``; :data:`UNKNOWN` stays itself."""
    return value if value == UNKNOWN or is_on(value) else False


def lever_phase(knob: str) -> str:
    """How the projection treats a knob's lever: "prefill" (a prefix cache), "decode" (a drafter), else "both"
    (the lever's own module says: :func:`leverbench.levers.phase_of`)."""
    return registry.phase_of(knob)


def caches_prompts(knobs: Mapping[str, JSONValue]) -> bool:
    """Whether an arm's knobs turn on a lever that serves seen prompt prefixes from a cache (the prefix cache:
    :attr:`leverbench.levers.Lever.caches_prompts`), by the lever's own name."""
    return any(is_on(knobs.get(x.name)) for x in registry.levers() if x.caches_prompts)


def answers_naturally(knobs: Mapping[str, JSONValue]) -> bool:
    """Whether an arm's knobs turn on a lever whose speed depends on the text it decodes (a drafter:
    :attr:`leverbench.levers.Lever.natural_answers`), by the lever's own name: its probes are not forced past
    end-of-sequence and its decode is fitted on natural answers."""
    return any(is_on(knobs.get(x.name)) for x in registry.levers() if x.natural_answers)


def _object(value: object) -> Mapping[str, JSONValue]:
    return value if isinstance(value, Mapping) else {}


def arm_knobs(arm: Mapping[str, JSONValue], request: Optional[Mapping[str, JSONValue]] = None
              ) -> tuple[Knobs, dict[str, str]]:
    """(knobs, contradictions) of one arm: ``arm`` is its ledger-header entry (``conditions``,
    ``discovered``, ``model``), ``request`` its extra body fields.  contradictions: knob → what disagrees."""
    found: Knobs = dict(_object(_object(arm.get("discovered")).get("knobs")))
    sent: Knobs = {}
    if arm.get("model") and "model" in found:
        sent["model"] = arm["model"]  # the model asked for (one endpoint may serve several)
    switches = registry.request_fields()
    for k, v in (request or {}).items():
        if k in switches:
            sent[switches[k]] = is_on(v)
        else:
            sent[f"request.{k}"] = v
    declared = {k: v for k, v in _object(arm.get("conditions")).items() if k not in NOT_KNOBS}
    contradictions: dict[str, str] = {}
    for k, v in declared.items():
        for source, other in (("the endpoint says", found), ("its requests say", sent)):
            if k in other and (why := contradiction(v, other[k])):
                contradictions[k] = f"declared {k} = {v!r}, but {source} {why}"
    return {**found, **sent, **declared}, contradictions


def _name(v: str) -> str:
    return "".join(ch for ch in v.lower() if ch.isalnum())


def contradiction(declared: JSONValue, stated: JSONValue) -> str | None:
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
    if isinstance(declared, (int, float)) and isinstance(stated, (int, float)):  # two numbers
        return f"{stated!r}" if float(declared) != float(stated) else None
    return None


# ---------------------------------------------------------------------------------------------- across arms

#: A discovered fact (its flattened path; a prefix ending in "." covers the paths below it) → the knob derived
#: from it: a fact that differs is covered where that knob differs between the same arms.  The levers'
#: modules name their facts (:func:`leverbench.levers.by_fact`); this is their table, for reading.
FACT_KNOB = registry.fact_knobs()
#: Facts that are never knobs: the simulator's own settings (a test instrument's truth), what discovery keeps
#: as bookkeeping (``knobs``, derived from the rest; where the GPU facts came from, or why they are unknown:
#: the report says it, and an unknown GPU is warned about, not a knob), a build's date and platform (its
#: version is the knob),
#: and switches that only change what the server reports, not how it serves (SGLang's cache report and
#: metrics: the tool asks for them to see engagement).
NOT_FACTS = ("knobs", "sim", "props.sim", "engine_build.build_date", "engine_build.platform",
             "server_info.enable_cache_report", "server_info.enable_metrics", "unreachable",
             "gpu.unknown", "gpu.source",
             "reset_setup")  # what made the declared cache state possible: the run's, alike on every arm it starts
#: Engine flags that only change what the server reports or where it listens, not how it serves.
NOT_FLAGS = ("--enable-prompt-tokens-details", "--enable-cache-report", "--enable-metrics", "--metrics",
             "--disable-log-requests", "--enable-log-requests", "--disable-log-stats", "--no-webui", "--host",
             "--port", "--api-key", "--log-file", "--log-disable", "--log-verbosity", "-v", "--verbose",
             "--served-model-name", "--uvicorn-log-level", "--alias", "-a")
#: Facts that name a file: compared by its name (the same model loaded from two directories is one model); the
#: levers' modules name them (their ``file_facts``).
_FILE_FACTS = registry.file_facts()
#: Engine flags that set no lever's knob but name a fact of their own (the CPU threads: a fact, never a lever).
_FACT_FLAGS = {"-t": "fact:threads", "--threads": "fact:threads"}
#: Engine flags (in ``engine_args``: llama.cpp's, vLLM's, SGLang's) → the knob they set: the levers' flags
#: (:func:`leverbench.levers.by_flag`; a drafter's flags, named by their prefixes, are all the ``drafter``
#: knob's) and :data:`_FACT_FLAGS`; this is their table of exact flags, for reading.
FLAG_KNOB = {**registry.flag_knobs(), **_FACT_FLAGS}


def _flag_knob(flag: str) -> str:
    """The knob an engine flag sets: its lever's (:func:`leverbench.levers.by_flag`), else ``flag:NAME``."""
    lever = registry.by_flag(flag)
    return lever.name if lever is not None else _FACT_FLAGS.get(flag, f"flag:{flag}")


def _base_name(v: JSONValue) -> JSONValue:
    """A path's last part (a file's name); anything else as it is."""
    if isinstance(v, str) and ("/" in v or "\\" in v):
        return v.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return v


def flatten(d: JSONValue, path: str = "") -> dict[str, JSONValue]:
    """*d*'s leaves by dotted path (``{"a": {"b": 1}}`` → ``{"a.b": 1}``)."""
    if isinstance(d, dict):
        out: dict[str, JSONValue] = {}
        for k, v in d.items():
            out.update(flatten(v, f"{path}{k}."))
        return out
    return {path[:-1]: d}


def engine_flags(args: JSONValue) -> dict[str, JSONValue]:
    """Command-line arguments as {flag: value} (True for a flag without one; ``--flag=value`` as ``--flag value``;
    a flag given twice: its last value, as the engines take it)."""
    out: dict[str, JSONValue] = {}
    argv = [str(a) for a in args] if isinstance(args, list) else []
    for i, a in enumerate(argv):
        if a.startswith("-") and "=" in a:
            flag, _, value = a.partition("=")
            out[flag] = value
        elif a.startswith("-") and not a.lstrip("-").replace(".", "").isdigit():
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[a] = nxt if nxt is not None and not (nxt.startswith("-") and not nxt.lstrip("-").replace(
                ".", "").isdigit()) else True
    return out


#: The facts of an engine started by a command template (``engines/command.py``): each placeholder's value, and the
#: flags whose value each fills.  A placeholder is the knob ``value:NAME``, which stands for the flags it fills
#: (they are not compared apart); where a lever owns one of them, that lever's knob covers it (:func:`_facts`).
COMMAND_FACTS = ("values", "value_flags")


def _placeholders(discovered: Mapping[str, JSONValue]) -> dict[str, tuple[str, str]]:
    """The knobs of a command template's placeholders: ``value:NAME`` → (the knob that covers it: the lever's of
    the first flag it fills, or that its value is (``{cache}`` = ``--no-enable-prefix-caching``), that a lever
    owns, else itself; its value as JSON)."""
    values, fills = _object(discovered.get("values")), _object(discovered.get("value_flags"))
    out: dict[str, tuple[str, str]] = {}
    for name, v in values.items():
        flags = fills.get(name)
        filled = [str(f) for f in flags] if isinstance(flags, list) else []
        own = _own_flags(v)
        levers = [k for k in map(_flag_knob, [*filled, *own]) if not k.startswith(("fact:", "flag:"))]
        out[f"value:{name}"] = (levers[0] if levers else f"value:{name}", json.dumps(v, sort_keys=True))
    return out


def _own_flags(value: JSONValue) -> list[str]:
    """The flags a placeholder's value is itself (``--no-enable-prefix-caching``, ``--seed 1``: ``--seed``)."""
    return [t.split("=", 1)[0] for t in value.split() if t.startswith("-")] if isinstance(value, str) else []


def _facts(discovered: Mapping[str, JSONValue]) -> dict[str, tuple[str, str]]:
    """An arm's discovered facts: flattened path → (the knob that covers it, or ``fact:PATH``; its value as JSON)."""
    out: dict[str, tuple[str, str]] = {}
    fills = _object((discovered or {}).get("value_flags"))
    filled = {str(f) for flags in fills.values() if isinstance(flags, list) for f in flags}
    filled |= {f for v in _object((discovered or {}).get("values")).values() for f in _own_flags(v)}
    for path, v in flatten({k: v for k, v in (discovered or {}).items()
                             if k != "engine_args" and k not in COMMAND_FACTS}).items():
        if any(path == n or path.startswith(n + ".") for n in NOT_FACTS):
            continue
        lever = registry.by_fact(path)
        knob = lever.name if lever is not None else None
        if path in _FILE_FACTS:
            v = [_base_name(x) for x in v] if isinstance(v, list) else _base_name(v)
        out[path] = (knob or f"fact:{path}", json.dumps(v, sort_keys=True, default=str))
    for flag, v in engine_flags((discovered or {}).get("engine_args")).items():
        if flag in NOT_FLAGS or flag in filled:  # (one a placeholder fills: its knob's, value:NAME)
            continue
        out[f"engine_args {flag}"] = (_flag_knob(flag), json.dumps(v))
    return {**out, **_placeholders(discovered or {})}


def fact_knobs(discovered: Mapping[str, Mapping[str, JSONValue]], knobs: Mapping[str, Mapping[str, JSONValue]]
               ) -> dict[str, Knobs]:
    """Per arm, the knobs its discovered facts add (the module docstring): for each fact in which two arms
    differ and whose covering knob does not differ between them, the knob ``fact:PATH`` (or ``flag:NAME``)
    with the fact's value on every arm that has it."""
    facts = {a: _facts(d) for a, d in discovered.items()}
    arms = list(facts)
    out: dict[str, Knobs] = {a: {} for a in arms}
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
                if not knob.startswith(("fact:", "flag:", "value:")) and \
                        canonical(knobs[x].get(knob)) != canonical(knobs[y].get(knob)):
                    continue  # the knob it makes differs too: covered
                name = knob if knob.startswith(("fact:", "flag:", "value:")) else \
                    path if path.startswith("value:") else f"fact:{path}"
                for a in arms:
                    if path in facts[a]:
                        out[a][name] = json.loads(facts[a][path][1])
    return out


def all_arm_knobs(header_arms: Mapping[str, Mapping[str, JSONValue]],
                  requests: Mapping[str, Optional[Mapping[str, JSONValue]]],
                  arms: list[str]) -> tuple[dict[str, Knobs], dict[str, dict[str, str]]]:
    """(knobs, contradictions) of every arm of *arms* (ledger-header entries *header_arms*, extra body fields
    *requests*): :func:`arm_knobs` of each, the knobs its discovered facts add (:func:`fact_knobs`), and
    :data:`UNKNOWN` for a knob that another arm's endpoint stated (discovered, not declared nor sent) and
    this arm has from no source."""
    knobs: dict[str, Knobs] = {}
    contradictions: dict[str, dict[str, str]] = {}
    found: dict[str, set[str]] = {}
    for a in arms:
        h = header_arms.get(a, {})
        knobs[a], contradictions[a] = arm_knobs(h, requests.get(a))
        found[a] = set(_object(_object(h.get("discovered")).get("knobs")))
    extra = fact_knobs({a: _object(header_arms.get(a, {}).get("discovered")) for a in arms}, knobs)
    for a in arms:
        knobs[a].update(extra[a])
    stated = {k for a in arms for k in found[a] | set(extra[a])}
    for a in arms:
        for k in sorted(stated - set(knobs[a])):
            if not _reported_off(k, _object(header_arms.get(a, {}).get("discovered"))):
                knobs[a][k] = UNKNOWN
    return knobs, contradictions


def _reported_off(knob: str, discovered: Mapping[str, JSONValue]) -> bool:
    """Whether an arm's endpoint reported *knob* without a value, so that it is off there, not unknown: its
    discovered record has one of the paths its lever's ``reported_by`` names (:mod:`leverbench.levers`)."""
    lever = registry.lever(knob)
    if lever is None or lever.name != knob or not lever.reported_by:
        return False
    paths = set(flatten({k: v for k, v in discovered.items() if k != "engine_args"}))
    if isinstance(discovered.get("engine_args"), list):
        paths.add("engine_args")
    return any(p in paths for p in lever.reported_by)


def unknown_knobs(a: Mapping[str, JSONValue], b: Mapping[str, JSONValue]) -> list[str]:
    """The knobs unknown on either of two arms (:data:`UNKNOWN`), sorted."""
    return sorted(k for k in set(a) | set(b) if UNKNOWN in (a.get(k), b.get(k)))


def differing(a: Mapping[str, JSONValue], b: Mapping[str, JSONValue]) -> list[str]:
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


def reference_first(x: str, y: str, knob: str, knobs: Mapping[str, Mapping[str, JSONValue]], roles: Mapping[str, str],
                    order: list[str]) -> tuple[str, str]:
    """(reference, other) of a controlled pair differing in *knob* (see the module docstring)."""
    on_x, on_y = is_on(knobs[x].get(knob)), is_on(knobs[y].get(knob))
    if on_x != on_y:
        return (y, x) if on_x else (x, y)
    rank = {a: (_ROLE_ORDER.get(roles.get(a, ""), 3), order.index(a)) for a in (x, y)}
    return (x, y) if rank[x] <= rank[y] else (y, x)


def comparisons(arms: list[str], baseline: str, knobs: Mapping[str, Mapping[str, JSONValue]],
                roles: Mapping[str, str]) -> list[Comparison]:
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
            pair_diff = differing(knobs[x], knobs[y])
            if len(pair_diff) != 1 or unknown_knobs(knobs[x], knobs[y]):
                continue
            ref, other = reference_first(x, y, pair_diff[0], knobs, roles, arms)
            if (other, ref) in {(c.arm, c.vs) for c in out}:
                continue
            out.append(Comparison(other, ref, tuple(pair_diff), pair_diff[0]))
    return out


def suggestion(knob: str, arms: list[str], knobs: Mapping[str, Mapping[str, JSONValue]]) -> str:
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
