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

Values are compared canonically: every "off" spelling (absent, null, false,
0, "", "none", "off", "no", "false") is one value, off.  A knob a source
names on one side and another contradicts (declared off, discovered on) is a
**contradiction**: the knob's true value is unknown, and no comparison in
which it differs may be cited (:mod:`.guard`).

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

from dataclasses import dataclass
from typing import Any

NOT_KNOBS = ("gpu_hour_usd",)
_OFF_WORDS = ("none", "off", "no", "", "false")
_ROLE_ORDER = {"baseline": 0, "control": 1, "treatment": 2}
# the knobs whose lever acts on one phase only (Amdahl: it shortens that phase and nothing else)
PREFILL_LEVERS = ("prefix_cache", "cache_prompt", "prompt_cache", "radix_cache", "enable_prefix_caching")
DECODE_LEVERS = ("drafter", "speculative_decoding", "spec_decode", "speculative", "draft_model")


def is_on(value: Any) -> bool:
    """Whether a knob's value means "on": anything but absent/None/False/0/""/none/off/no/false."""
    if isinstance(value, str):
        return value.strip().lower() not in _OFF_WORDS
    return not (value is None or value is False or (isinstance(value, (int, float)) and value == 0))


def canonical(value: Any) -> Any:
    """The value knobs are compared by: every "off" spelling is ``False``."""
    return value if is_on(value) else False


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
            if k in other and isinstance(other[k], (bool, str)) and is_on(v) != is_on(other[k]):
                contradictions[k] = (f"declared {k} = {v!r}, but {source} {'on' if is_on(other[k]) else 'off'}"
                                     + ("" if isinstance(other[k], bool) else f" ({other[k]!r})"))
    return {**found, **sent, **declared}, contradictions


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

    @property
    def controlled(self) -> bool:
        return len(self.knobs) == 1


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
    baseline comparisons do not already give (in the arms' order)."""
    out = []
    for a in arms:
        if a == baseline:
            continue
        diff = tuple(differing(knobs[baseline], knobs[a]))
        lever = None
        if len(diff) == 1 and reference_first(baseline, a, diff[0], knobs, roles, arms)[0] == baseline:
            lever = diff[0]
        out.append(Comparison(a, baseline, diff, lever))
    for i, x in enumerate(arms):
        for y in arms[i + 1:]:
            diff = differing(knobs[x], knobs[y])
            if len(diff) != 1:
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
