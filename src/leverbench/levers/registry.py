"""The levers, collected: every module of :mod:`leverbench.levers` that declares a ``LEVER`` (or ``LEVERS``).

The package finds its modules itself (:func:`pkgutil.iter_modules`): adding a lever is adding its module, and
nothing here or in ``__init__`` names it.  Lookups — by knob name or alias (:func:`lever`), by engine flag
(:func:`by_flag`), by discovered fact (:func:`by_fact`), the phase a knob's lever acts on (:func:`phase_of`),
whether an ``engaged`` row says an arm used or engaged a lever (:func:`used_in`, :func:`engaged_in`) — are what
analysis and the runner ask instead of naming a lever themselves.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Optional

from .lever import Lever, Projection

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
    names = [n for x in found for n in x.names()]
    if len(names) != len(set(names)):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"two levers claim the knob name(s) {', '.join(twice)}")
    return tuple(sorted(found, key=lambda x: (x.rank, x.name)))


@lru_cache(maxsize=1)
def _by_name() -> dict[str, Lever]:
    return {n: x for x in levers() for n in x.names()}


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


def with_phase(phase: str) -> tuple[Lever, ...]:
    """The levers that act on *phase* (one of :data:`.lever.Phase`; "both" levers act on every phase)."""
    return tuple(x for x in levers() if phase in x.phases or "both" in x.phases)
