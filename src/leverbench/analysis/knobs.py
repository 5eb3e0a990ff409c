"""Knobs and comparisons: which arms measure which lever.

An arm's **knobs** are what defines its serving condition:

- its declared conditions (``[[arms]] conditions``), except pricing
  (``gpu_hour_usd``: it changes what a second costs, not how many there are);
- plus what the tool discovered from the endpoint (``discovered.knobs``: engine
  and version, model and file, served flags, GPU, parallelism; see
  ``runner/discover.py`` and ``engines/embedded.py``) under every name the arm
  did not declare.  Where both name a knob the declared value is the knob's
  value, and a discovered on/off that contradicts it is a warning.

Two arms differ in the knobs whose values differ (a knob one of them lacks
differs).  A pair that differs in exactly one knob is a **controlled
comparison**: it measures that knob's lever (the article's drafter =
treatment vs control).  Its direction: the arm with the knob off is the
reference ("without", ``vs``); when both set it (two engine versions, two
draft lengths), the reference is the one earlier in role order (baseline,
control, treatment), then in the experiment's order.  Multiplier = reference
time / other arm's time.

The comparisons a summary reports are every arm against the baseline (kept
whatever their knobs: an uncontrolled one names its knobs) and every other
controlled pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NOT_KNOBS = ("gpu_hour_usd",)
_OFF = (None, False, "none", "off", "no", "", 0, "false")
_ROLE_ORDER = {"baseline": 0, "control": 1, "treatment": 2}


def is_on(value: Any) -> bool:
    """Whether a knob's value means "on": anything but None/False/0/""/none/off/no/false."""
    if isinstance(value, str):
        return value.strip().lower() not in _OFF
    return value not in _OFF


def arm_knobs(arm: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(knobs, warnings) of one arm of the ledger header (``{conditions, discovered, ...}``)."""
    declared = {k: v for k, v in (arm.get("conditions") or {}).items() if k not in NOT_KNOBS}
    found = (arm.get("discovered") or {}).get("knobs") or {}
    warnings = []
    for k, v in found.items():
        if k in declared and isinstance(v, (bool, str)) and is_on(declared[k]) != is_on(v):
            warnings.append(f"declared {k} = {declared[k]!r}, but the endpoint says {'on' if is_on(v) else 'off'}"
                            + ("" if isinstance(v, bool) else f" ({v!r})"))
    return {**found, **declared}, warnings


def differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The knobs whose values differ between two arms (a knob one of them lacks differs), sorted."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


@dataclass(frozen=True)
class Comparison:
    """``arm`` against ``vs`` (the reference): multiplier = time(vs) / time(arm)."""

    arm: str
    vs: str
    knobs: tuple[str, ...]

    @property
    def controlled(self) -> bool:
        return len(self.knobs) == 1

    @property
    def lever(self) -> str | None:
        """The knob a controlled comparison measures."""
        return self.knobs[0] if self.controlled else None


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
    """Every arm against the baseline, then every other controlled pair (in the arms' order)."""
    out = [Comparison(a, baseline, tuple(differing(knobs[baseline], knobs[a]))) for a in arms if a != baseline]
    for i, x in enumerate(arms):
        for y in arms[i + 1:]:
            if baseline in (x, y):
                continue
            diff = differing(knobs[x], knobs[y])
            if len(diff) == 1:
                ref, other = reference_first(x, y, diff[0], knobs, roles, arms)
                out.append(Comparison(other, ref, tuple(diff)))
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
    settings = ", ".join(f"{k} = {knobs[off].get(k)!r}" for k in others)
    return (f"no controlled pair measures {knob}: {on} and {off} also differ in {', '.join(others)}; an arm like "
            f"{on} with {settings} would differ from {off} in {knob} only")
