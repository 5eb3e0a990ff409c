"""Repeats that revisit the cache: prompts an arm's own earlier repeats left in its server's cache.

Each repeat of a turn sends the same prompts.  Where an arm's server keeps its prompt cache across repeats
(engines together: one process for the whole run; llama.cpp's prompt cache in RAM, vLLM's and SGLang's prefix
cache), the second and later repeats find what the first one cached: a *revisit* of a prompt, not a first
visit.  Measured on the demo: the cache arm's first call of a repeated turn had 584 of 585 prompt tokens cached
from its previous repeat, against 5 in the first repeat; the prefix cache paid 3.5x across repeats with engines
together and 2.0x with engines one at a time, where each round starts its engine afresh.  Both are true: the
first is what an agent that resends its prompts (system prompt, tools, the same documents) gets, the second what
a first visit gets.  This module says which one a run measured, and by how much they differ.

**Revisit share** of an arm (:func:`revisit_shares`): over the successful calls of its counted turns, a call
(case, step) in a repeat after the earliest one that arm ran of it, with cached tokens known on both:

    extra = max(cached − cached_first, 0)        (cached: usage, else llama.cpp's timings.cache_n)
    share = Σ extra / Σ prompt tokens             (over those later calls)

where ``cached_first`` is the same call's cached tokens in that earliest repeat.  A cache shared across cases
within a repeat (a common system prompt) is in both terms alike and cancels: only what the earlier repeats
added counts.

**First visits** of a comparison: the ratio of the reference's to the arm's summed turn time over the cases both
ran in their earliest repeat (Σ turn_s of the reference / Σ turn_s of the arm, one turn of each case a side; no
interval: one repeat).  A comparison one of whose arms revisits at least :data:`REVISIT_SHARE` of its later
repeats' prompt tokens gets a ``revisits`` warning with both figures, so no one reads the multiplier across
repeats as a first-visit figure or the other way round.  Pure function over the dataset.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from ..base.dataset import Dataset
from ..base.knobs import Comparison
from ..base.warning_kinds import RunWarning, WarningKind

#: A share of the later repeats' prompt tokens, cached by the arm's own earlier repeats, from which it is said.
REVISIT_SHARE = 0.10


def revisit_shares(ds: Dataset) -> dict[str, float]:
    """Per arm with later repeats and cached tokens known: its revisit share (module docstring)."""
    c = ds.call
    cached = c.cached()
    ok = c.ok & (c.turn >= 0) & ~np.isnan(cached) & ~np.isnan(c.step)
    if not ok.any():
        return {}
    rows = np.flatnonzero(ok)
    repeat = ds.turn.repeat[c.turn[rows]]
    key = np.stack([c.arm[rows], c.case[rows], c.step[rows].astype(np.int64)], axis=1)
    codes, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    first = np.full(len(codes), np.inf)
    np.minimum.at(first, inverse, repeat)
    first_cached = np.full(len(codes), np.nan)
    at_first = repeat == first[inverse]
    first_cached[inverse[at_first]] = cached[rows[at_first]]  # one counted call per (arm, case, step, repeat)
    later = ~at_first
    extra = np.maximum(cached[rows] - first_cached[inverse], 0.0)
    out = {}
    for a in np.unique(c.arm[rows][later]):
        mine = later & (c.arm[rows] == a)
        prompt = float(np.nansum(c.prompt_tokens[rows][mine]))
        if prompt > 0 and 0 <= a < len(ds.arm_names):
            out[str(ds.arm_names[a])] = float(np.nansum(extra[mine])) / prompt
    return out


def first_visit_ratio(ds: Dataset, arm: str, vs: str) -> float | None:
    """Σ turn_s of *vs* / Σ turn_s of *arm* over the engine cases both ran in their earliest repeat (None: none)."""
    t = ds.turn
    first: dict[tuple[str, str], float] = {}
    for name in (arm, vs):
        a = ds.arm_index(name)
        for case in ds.cases:
            sel = (t.arm == a) & (t.case == ds.case_index(case)) & t.ok
            if sel.any():
                earliest = t.repeat[sel].min()
                first[name, case] = float(t.turn_s[sel & (t.repeat == earliest)].sum())
    both = [case for case in ds.cases if (arm, case) in first and (vs, case) in first]
    num, den = sum(first[vs, c] for c in both), sum(first[arm, c] for c in both)
    return num / den if both and den > 0 else None


def revisit_warnings(ds: Dataset, comps: Iterable[Comparison]) -> list[RunWarning]:
    """A ``revisits`` warning per controlled comparison one of whose arms revisits (module docstring); its text
    starts with the first-visit figure, the clause the first screen shows."""
    shares = revisit_shares(ds)
    out = []
    for comp in comps:
        if not comp.controlled:
            continue
        hit = [(a, shares[a]) for a in (comp.arm, comp.vs) if shares.get(a, 0.0) >= REVISIT_SHARE]
        ratio = first_visit_ratio(ds, comp.arm, comp.vs)
        if not hit or ratio is None:
            continue
        who = " and ".join(f"{a!r} {s:.0%}" for a, s in hit)
        out.append(RunWarning(
            WarningKind.REVISITS,
            f"{comp.arm} vs {comp.vs} on first visits (the first repeat alone, one turn of each case, no interval): "
            f"{ratio:.2f}x; the repeats after the first found prompts cached by the arm's own earlier repeats "
            f"({who} of their prompt tokens): the multiplier across repeats counts revisits of the same prompts. "
            "If your traffic resends its prompts (an agent's system prompt, tools, the same documents), that is "
            "yours; if each prompt comes once, the first-visit figure is, and engines = \"one at a time\" "
            "measures every round on a freshly started engine",
            comp.arm))
    return out
