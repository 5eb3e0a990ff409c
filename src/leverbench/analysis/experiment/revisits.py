"""Repeats that revisit the cache: prompts an arm's own earlier repeats left in its server's cache.

Each repeat of a turn sends the same prompts.  Where an arm's server keeps its prompt cache across repeats
(engines together: one process for the whole run; llama.cpp's prompt cache in RAM, vLLM's and SGLang's prefix
cache), the second and later repeats find what the first one cached: a *revisit* of a prompt, not a first
visit.  Measured on the demo: the cache arm's first call of a repeated turn had 584 of 585 prompt tokens cached
from its previous repeat, against 5 in the first repeat; the prefix cache paid 3.5x across repeats with engines
together and 2.0x with engines one at a time, where each round starts its engine afresh.  Both are true: the
first is what an agent that resends its prompts (system prompt, tools, the same documents) gets, the second what
a first visit gets.  This module says which one a run measured, and by how much they differ.

**Revisit share** of an arm (:func:`revisit_shares`): over the successful calls of its counted turns of the
engine cases (variants left out, as the multipliers leave them), each call (case, step) compared with the same
call's earliest successful send in time (its *first visit*; a call whose first visit reported no cached count is
left out, as is every call of an arm whose calls report none: vLLM without ``--enable-prompt-tokens-details``,
whose revisits this cannot see):

    extra = max(cached − cached_first, 0)        (cached: usage, else llama.cpp's timings.cache_n)
    share = Σ extra / Σ prompt tokens             (over the calls after the first visit)

A prefix shared by several cases (a common system prompt) is cached alike in every repeat but the first: the
case that met it first in the first round met it cold, so the share counts it as revisited there; the share is
an upper bound, and the first-visit figure says what revisits changed.

**First visits** of a comparison (:func:`first_visit_ratio`): per engine case, each arm's earliest turn in time,
where it succeeded and no call of that arm and case went out before it (else the case is left out: a failed or
superseded first attempt may have warmed the cache); the ratio of the reference's to the arm's summed turn time
over the cases both kept (one turn a case a side; no interval, no guard).  A controlled comparison one of whose
arms has a revisit share of at least :data:`REVISIT_SHARE` gets a ``revisits`` warning with the first-visit
figure, so that no one reads the multiplier across repeats as a first-visit figure or the other way round.
Pure functions over the dataset.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from ..base.dataset import Dataset
from ..base.knobs import Comparison
from ..base.warning_kinds import RunWarning, WarningKind

#: A share of the later repeats' prompt tokens, cached by the arm's own earlier repeats, from which it is said.
REVISIT_SHARE = 0.10


def _engine_case(ds: Dataset, case: np.ndarray) -> np.ndarray:
    """Whether each case index is an engine case (not a variant)."""
    engine = np.array([ds.case_index(c) for c in ds.cases], dtype=np.int64)
    return np.isin(case, engine)


def revisit_shares(ds: Dataset) -> dict[str, float]:
    """Per arm with calls after a first visit and cached tokens known: its revisit share (module docstring)."""
    c = ds.call
    cached = c.cached()
    ok = c.ok & (c.turn >= 0) & ~np.isnan(c.step) & ~np.isnan(c.t_send) & _engine_case(ds, c.case)
    rows = np.flatnonzero(ok)
    if not len(rows):
        return {}
    key = np.stack([c.arm[rows], c.case[rows], c.step[rows].astype(np.int64)], axis=1)
    codes, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    order = np.lexsort((c.t_send[rows], inverse))  # by key, then by time
    first_row = np.full(len(codes), -1)
    starts = np.flatnonzero(np.r_[True, inverse[order][1:] != inverse[order][:-1]])
    first_row[inverse[order][starts]] = order[starts]
    first_cached = cached[rows[first_row]]
    later = np.ones(len(rows), bool)
    later[first_row] = False
    known = later & ~np.isnan(cached[rows]) & ~np.isnan(first_cached[inverse])
    extra = np.maximum(cached[rows] - first_cached[inverse], 0.0)
    out = {}
    arm = c.arm[rows]
    for a in np.unique(arm[known]):
        mine = known & (arm == a)
        prompt = float(np.nansum(c.prompt_tokens[rows][mine]))
        if prompt > 0 and 0 <= a < len(ds.arm_names):
            out[str(ds.arm_names[a])] = float(np.nansum(extra[mine])) / prompt
    return out


def first_visit_ratio(ds: Dataset, arm: str, vs: str) -> float | None:
    """Σ turn_s of *vs* / Σ turn_s of *arm* over the engine cases whose first visit both kept (module
    docstring; None: none)."""
    t, c = ds.turn, ds.call
    first: dict[tuple[str, str], float] = {}
    for name in (arm, vs):
        a = ds.arm_index(name)
        for case in ds.cases:
            k = ds.case_index(case)
            sel = np.flatnonzero((t.arm == a) & (t.case == k))
            if not len(sel):
                continue
            earliest = sel[np.argmin(t.t_start[sel])]
            sent = c.t_send[(c.arm == a) & (c.case == k)]
            if t.ok[earliest] and not (sent < t.t_start[earliest]).any():
                first[name, case] = float(t.turn_s[earliest])
    both = [case for case in ds.cases if (arm, case) in first and (vs, case) in first]
    num, den = sum(first[vs, c] for c in both), sum(first[arm, c] for c in both)
    return num / den if both and den > 0 else None


def _advice(ds: Dataset, arms: list[str]) -> str:
    """How to measure first visits for *arms*: engines one at a time where the tool starts them together, else
    a server restarted between rounds."""
    engines = ds.header.get("engines")
    together = not isinstance(engines, dict) or engines.get("mode") != "one at a time"
    config = {a.get("name"): a for a in (ds.config.get("arms") or []) if isinstance(a, dict)}
    started = all(isinstance(config.get(a), dict) and config[a].get("engine") for a in arms)
    if together and started:
        return 'engines = "one at a time" measures every round on a freshly started engine'
    return "a server restarted between rounds (or its cache cleared) measures first visits"


def revisit_warnings(ds: Dataset, comps: Iterable[Comparison]) -> list[RunWarning]:
    """A ``revisits`` warning per controlled comparison one of whose arms revisits (module docstring); its text
    starts with the first-visit figure, the clause the first screen shows."""
    shares = revisit_shares(ds)
    out = []
    for comp in comps:
        if not comp.controlled:
            continue
        hit = [(a, shares[a]) for a in (comp.arm, comp.vs) if shares.get(a, 0.0) >= REVISIT_SHARE]
        ratio = first_visit_ratio(ds, comp.arm, comp.vs) if hit else None  # its passes over the turns only here
        if ratio is None:
            continue
        who = " and ".join(f"{a!r} {s:.0%}" for a, s in hit)
        out.append(RunWarning(
            WarningKind.REVISITS,
            f"{comp.arm} vs {comp.vs} on first visits (each case's first turn, one a side, no interval): "
            f"{ratio:.2f}x; the repeats after the first found prompts cached by the arm's own earlier repeats "
            f"({who} of their prompt tokens): the multiplier across repeats counts revisits of the same prompts. "
            "If your traffic resends its prompts (an agent's system prompt, tools, the same documents), that is "
            f"yours; if each prompt comes once, the first-visit figure is, and {_advice(ds, [a for a, _ in hit])}",
            comp.arm))
    return out
