"""The levers, collected: every module of :mod:`leverbench.levers` that declares a ``LEVER`` (or ``LEVERS``).

The package finds its modules itself (:func:`pkgutil.iter_modules`): adding a lever is adding its module, and
nothing here or in ``__init__`` names it.  Lookups — by knob name or alias (:func:`lever`), by engine flag
(:func:`by_flag`), by discovered fact (:func:`by_fact`), the phase a knob's lever acts on (:func:`phase_of`),
whether an ``engaged`` row says an arm used or engaged a lever (:func:`used_in`, :func:`engaged_in`), the levers
measured from calls (:func:`measured`) or estimated on traffic (:func:`traffic_levers`), the lever that caches
prompts (:func:`prompt_cache`) and the one whose speed depends on the text (:func:`natural`) — are what discovery,
analysis, the runner and the reports ask instead of naming a lever themselves.  The levers found are checked to
hold together (:func:`check`) before any is handed out.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Optional, Sequence

from .lever import KnobValue, Lever, Projection

_NOT_LEVER_MODULES = ("lever", "registry")


@lru_cache(maxsize=1)
def levers() -> tuple[Lever, ...]:
    """Every lever of the package, by rank then name."""
    package = __name__.rpartition(".")[0]
    found: list[Lever] = []
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if info.name in _NOT_LEVER_MODULES or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        one = getattr(module, "LEVER", None)
        found += [one] if isinstance(one, Lever) else []
        found += [x for x in getattr(module, "LEVERS", ()) if isinstance(x, Lever)]
    check(found)
    return tuple(sorted(found, key=lambda x: (x.rank, x.name)))


def check(found: Sequence[Lever]) -> None:
    """ValueError naming the lever when *found* (the package's levers) does not hold together: a knob name two
    levers claim, a measured lever without its ``used_field``, a traffic saving on a phase ``analyze`` does not
    model, a figure shown that its table does not declare, a server figure two levers declare."""
    names = [n for x in found for n in (*x.names(), *x.parameters)]
    if len(names) != len(set(names)):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"two levers claim the knob name(s) {', '.join(twice)}")
    for x in found:
        if x.measure is not None and not x.used_field:
            raise ValueError(f"lever {x.name!r} is measured (measure) but names no used_field for its answer")
        if x.traffic is not None and x.phases[:1] not in (("prefill",), ("decode",)):
            raise ValueError(f"lever {x.name!r} has a traffic saving but acts first on {x.phases[:1]}: analyze "
                             "models prefill and decode only")
        unknown = [f for f, *_ in x.metrics.shown if f not in x.metrics.figures()]
        if unknown:
            raise ValueError(f"lever {x.name!r} shows figure(s) {', '.join(unknown)} that its MetricTable does not "
                             f"declare (its figures: {', '.join(x.metrics.figures()) or 'none'})")
    owner: dict[str, str] = {}
    for x in found:
        for f in x.metrics.figures():
            if owner.setdefault(f, x.name) != x.name:
                raise ValueError(f"levers {owner[f]!r} and {x.name!r} both declare the server figure {f!r}: a "
                                 "figure is one lever's (name it after the lever)")


@lru_cache(maxsize=1)
def _by_name() -> dict[str, Lever]:
    return {n: x for x in levers() for n in x.names()}


#: The engines a tune's lever knobs may be served on, by the experiment file's engine kind.
SERVED_BY_KIND = {"embedded": "llama.cpp", "vllm": "vllm"}


def served_name(knob: str) -> Optional[str]:
    """The name a tune's knob is served under: its lever's name (for a name or alias), or the parameter it is (the
    drafter's ``draft_tokens``), case and surrounding blanks aside; None: neither."""
    x = lever(knob)
    if x is not None:
        return x.name
    name = knob.strip().lower()
    return name if any(name in y.parameters for y in levers()) else None


def serve_args(engine: str, config: Mapping[str, KnobValue]) -> list[str]:
    """The arguments that serve *config* (knob → value, in order) on *engine* ("llama.cpp" or "vllm"): each knob a
    lever's name or alias (:attr:`.lever.Lever.serve`) or a parameter of a lever the configuration also names (the
    drafter's ``draft_tokens``), each read under its :func:`served_name`.  ValueError in words where a knob names no
    lever, two knobs name one lever (or one parameter), its lever cannot be served on *engine*, a parameter's lever
    is not in the configuration, or a value cannot be taken."""
    named: dict[str, str] = {}  # served name → the knob as the configuration spells it
    for knob in config:
        name = served_name(knob)
        if name is None:
            servable = sorted(n for y in levers() if engine in y.serve for n in (y.name, *y.parameters))
            raise ValueError(f"{knob!r} names no lever {engine} can be started with (knobs: "
                             f"{', '.join(servable)}, or their aliases)")
        if name in named:
            raise ValueError(f"{named[name]!r} and {knob!r} both name {name}: keep one")
        named[name] = knob
    canonical = {name: config[knob] for name, knob in named.items()}
    owners = {p: x for x in levers() for p in x.parameters}
    out: list[str] = []
    for name, knob in named.items():
        value = config[knob]
        x = lever(knob)
        if x is None:
            owner = owners[name]
            if owner.name not in named:
                raise ValueError(f"{knob!r} qualifies the {owner.name} knob, which the configuration does not have: "
                                 f"add {owner.name} = [...] (\"none\" for none)")
            continue
        serve = x.serve.get(engine)
        if serve is None:
            raise ValueError(f"{knob!r} ({x.words}) cannot be set on {engine} by the tool"
                             + (f" (it can on {', '.join(sorted(x.serve))})" if x.serve else ""))
        try:
            out += serve(value, canonical)
        except ValueError as exc:
            raise ValueError(f"{knob} = {value!r}: {exc}") from None
    return out


def moots(knob: str, others: Mapping[str, KnobValue]) -> bool:
    """Whether *knob* names a lever one of whose parameters is among *others* (the drafter, for ``draft_tokens``),
    each read under its :func:`served_name`."""
    x = lever(knob)
    return x is not None and any(served_name(p) in x.parameters for p in others)


def lever(knob: str) -> Optional[Lever]:
    """The lever a knob names (its name or an alias, case and surrounding blanks aside), or None."""
    return _by_name().get(knob.strip().lower())


def phase_of(knob: str) -> Projection:
    """How the projection treats a knob's lever: "prefill", "decode", or "both" (any knob no lever names)."""
    x = lever(knob)
    return x.projection if x is not None else "both"


@lru_cache(maxsize=1)
def flag_knobs() -> dict[str, str]:
    """Engine flag → the knob it sets, of every lever's exact flags."""
    return {f: x.name for x in levers() for f in x.flags}


@lru_cache(maxsize=1)
def flag_prefixes() -> dict[str, str]:
    """Flag prefix → the knob every flag starting with it sets."""
    return {p: x.name for x in levers() for p in x.flag_prefixes}


def by_flag(flag: str) -> Optional[Lever]:
    """The lever an engine flag sets: a prefix's lever first (a drafter's ``--draft-*``), then an exact flag's."""
    name = next((k for p, k in flag_prefixes().items() if flag.startswith(p)), None) or flag_knobs().get(flag)
    return lever(name) if name else None


@lru_cache(maxsize=1)
def fact_knobs() -> dict[str, str]:
    """Discovered fact (a flattened path; one ending in "." covers the paths below it) → the knob it names."""
    return {f: x.name for x in levers() for f in x.facts}


def by_fact(path: str) -> Optional[Lever]:
    """The lever a discovered fact names: the fact's own path, else a covering prefix ending in "."."""
    table = fact_knobs()
    name = table.get(path) or next((k for p, k in table.items() if p.endswith(".") and path.startswith(p)), None)
    return lever(name) if name else None


def used_in(row: Mapping[str, object], knob: str) -> Optional[bool]:
    """Whether an ``engaged`` row says its arm used *knob*'s lever (measured on every arm for a lever with a
    ``used_field``; for a judged lever, only on an arm that turns it on): True, False, or None (nothing says)."""
    x = _by_name().get(knob)
    if x is None or x.name != knob:  # the row judges the knob by its own name (an alias is another knob there)
        return None
    if x.used_field is not None:
        value = row.get(x.used_field)
    else:
        value = _judged(row, x.name).get("used")
    return value if isinstance(value, bool) else None


def engaged_in(row: Mapping[str, object], knob: str) -> Optional[bool]:
    """Whether an ``engaged`` row credits its arm with *knob*'s lever (set only where its knobs turn it on):
    True, False, or None (unknown, or not turned on)."""
    x = _by_name().get(knob)
    if x is None or x.name != knob:
        return None
    value = row.get(x.name) if x.used_field is not None else _judged(row, x.name).get("used")
    return value if isinstance(value, bool) else None


def _judged(row: Mapping[str, object], name: str) -> Mapping[str, object]:
    judged = row.get("levers")
    entry = judged.get(name) if isinstance(judged, Mapping) else None
    return entry if isinstance(entry, Mapping) else {}


@lru_cache(maxsize=1)
def request_fields() -> dict[str, str]:
    """Request body field → the knob it switches per call."""
    return {f: x.name for x in levers() for f in x.request_fields}


def server_info_keys() -> tuple[str, ...]:
    """The SGLang ``/get_server_info`` keys the levers ask discovery to keep."""
    return tuple(dict.fromkeys(k for x in levers() for k in x.server_info_keys))


def props_keys() -> tuple[str, ...]:
    """The llama.cpp ``/props`` keys the levers' discovered paths name (``props.X`` in ``facts``, ``file_facts``
    or ``reported_by``): discovery keeps them in the ``discovered`` record, where those paths are looked for."""
    paths = (p for x in levers() for p in (*x.facts, *x.file_facts, *x.reported_by))
    return tuple(dict.fromkeys(key for p in paths if p.startswith("props.") and (key := p.split(".")[1])))


def with_phase(phase: str) -> tuple[Lever, ...]:
    """The levers that act on *phase* (one of :data:`.lever.Phase`; "both" levers act on every phase)."""
    return tuple(x for x in levers() if phase in x.phases or "both" in x.phases)


def measured() -> tuple[Lever, ...]:
    """The levers measured on every arm from its calls and server figures (:attr:`.lever.Lever.measure`)."""
    return tuple(x for x in levers() if x.measure is not None)


def traffic_levers() -> tuple[Lever, ...]:
    """The levers ``analyze`` estimates on recorded traffic (:attr:`.lever.Lever.traffic`), in the registry's order."""
    return tuple(x for x in levers() if x.traffic is not None)


def prompt_cache() -> Optional[Lever]:
    """The lever that serves a prompt's prefix from a cache (:attr:`.lever.Lever.caches_prompts`), or None."""
    return next((x for x in levers() if x.caches_prompts), None)


def natural() -> Optional[Lever]:
    """The lever whose speed depends on the text it decodes (:attr:`.lever.Lever.natural_answers`: the drafter), or
    None."""
    return next((x for x in levers() if x.natural_answers), None)


def file_facts() -> tuple[str, ...]:
    """The discovered facts that name a file (:attr:`.lever.Lever.file_facts`)."""
    return tuple(dict.fromkeys(f for x in levers() for f in x.file_facts))
