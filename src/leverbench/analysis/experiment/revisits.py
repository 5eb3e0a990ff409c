"""Repeats that revisit the cache: prompts an arm's own earlier repeats left in its server's cache (and a drafter's
state they left), and whether a run's repeats were exchangeable samples of one experiment.

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
call's earliest successful send in time (its *first visit*; a call whose first visit, or itself, reported no
cached count is left out, as is every call of an arm whose calls report none: vLLM without
``--enable-prompt-tokens-details``, whose revisits this cannot see).  What a call had to compute is its uncached
prompt, ``prompt − cached`` (cached: usage, else llama.cpp's timings.cache_n); pooled per turn, over the calls
the turn shares with its first visit (steps), so that a later call whose answer before it was longer (its
cached prefix longer, its prompt too) is no revisit:

    saved = max(min(Σ uncached_first − Σ uncached, Σ cached − Σ cached_first), 0)   (per later turn)
    share = Σ saved / Σ uncached_first                                            (over those turns)

the share of what the first visits computed that the later repeats found cached instead (bounded by how much
more they found cached: a later prompt that is shorter, its answer or tool result before it shorter, computes
less without any revisit).  A prefix shared by
several cases (a common system prompt) is cached alike in every repeat but the first: the case that met it first
in the first round met it cold, so the share counts it as revisited there; the share is an upper bound, and the
first-visit figure says what revisits changed.

**First visits** of a comparison (:func:`first_visit_ratio`): per engine case, each arm's earliest turn in time,
where it succeeded and no call of that arm and case went out before it (else the case is left out: a failed or
superseded first attempt may have warmed the cache); the ratio of the reference's to the arm's summed turn time
over the cases both kept (one turn a case a side; no interval, no guard).  A controlled comparison one of whose
arms has a revisit share of at least :data:`REVISIT_SHARE` gets a ``revisits`` warning with the first-visit
figure, so that no one reads the multiplier across repeats as a first-visit figure or the other way round.

**Exchangeable repeats** (:func:`repeats`; ledger v5, :mod:`leverbench.runner.cache_state`): a run declares the
state every turn meets (``cache_between_turns``: cold, shared, keep) and brings each arm to it before every turn.
Then the revisit share is a check, not a caveat: a comparison one of whose arms still revisits (a reset the
server acknowledged but did not perform; or ``cache_reset = "none"``) is refused (reason code ``revisits``,
with the counts), and so is one whose drafter carried a state from repeat to repeat:

    carry = accepted_later / output_later − accepted_first / output_first     (drafted tokens accepted per
    output token, pooled over the later repeats' calls and over their first visits' calls; a call with
    llama.cpp's timings but no draft_n drafted nothing)

at least :data:`DRAFT_CARRY` (llama.cpp's ngram-mod, which learns each answer, is the case: measured 0, then 23,
then 41 accepted drafts on one prompt), over at least :data:`DRAFT_MIN_TOKENS` output tokens on each side.  A
turn whose arm could not be brought to the state (its reset, or its shared prefix's warm call, failed: a
``cache_reset`` record with an ``error``) refuses the comparisons of its arm too.  A run before v5 declared no
state, and its revisits are refused alike (its figure across repeats is not a new turn's, which is what the
report says it is).  With ``keep`` the revisits are the experiment's own: warned, labelled, not refused.  Pure
functions over the dataset.
"""

from __future__ import annotations

import math
from typing import Iterable, Literal, Mapping

import numpy as np

from ...ledger.rows import CacheResetRow
from ...schema.reason_codes import REVISITS
from ...schema.repeat_rows import Method, RepeatArmRow, RepeatPairRow, RepeatsSection
from ...schema.warning_kinds import RunWarning, WarningKind
from ..base.dataset import Dataset
from ..base.guard import Reason
from ..base.knobs import Comparison

#: A share of the later repeats' prompt tokens, cached by the arm's own earlier repeats, from which it is said.
REVISIT_SHARE = 0.10
#: Drafted tokens accepted per output token, more on later repeats than on first visits, from which a drafter's
#: state is said to have carried from repeat to repeat.
DRAFT_CARRY = 0.10
#: Output tokens each side of the carry (first visits, later repeats) must hold for it to be judged.
DRAFT_MIN_TOKENS = 32

#: :func:`_first_visits`: (rows, first, later)
Visits = tuple[np.ndarray, np.ndarray, np.ndarray]


def _engine_case(ds: Dataset, case: np.ndarray) -> np.ndarray:
    """Whether each case index is an engine case (not a variant)."""
    engine = np.array([ds.case_index(c) for c in ds.cases], dtype=np.int64)
    return np.isin(case, engine)


def revisit_shares(ds: Dataset) -> dict[str, float]:
    """Per arm with calls after a first visit and cached tokens known: its revisit share (module docstring)."""
    return {a: extra / prompt for a, (extra, prompt) in revisit_counts(ds).items()}


def _first_visits(ds: Dataset) -> Visits:
    """(rows, first, later) of the successful calls of counted turns of engine cases: their row numbers, for each
    the row (an index into *rows*) of its (arm, case, step)'s earliest send, and whether it is a later one."""
    c = ds.call
    ok = c.ok & (c.turn >= 0) & ~np.isnan(c.step) & ~np.isnan(c.t_send) & _engine_case(ds, c.case)
    rows = np.flatnonzero(ok)
    if not len(rows):
        return rows, rows, np.zeros(0, bool)
    key = _one_key(c.arm[rows], c.case[rows], c.step[rows].astype(np.int64))
    order = np.lexsort((c.t_send[rows], key))  # by key, then by time (a stable sort: ties in ledger order)
    sorted_key = key[order]
    starts = np.r_[True, sorted_key[1:] != sorted_key[:-1]]
    first = np.empty(len(rows), np.int64)
    first[order] = order[np.flatnonzero(starts)][np.cumsum(starts) - 1]  # each row's key's earliest row
    later = np.ones(len(rows), bool)
    later[first] = False
    return rows, first, later


def _one_key(*parts: np.ndarray) -> np.ndarray:
    """One int64 per row that orders and groups the rows as the tuples of *parts* (int64 columns) do: the
    tuple's rank in a mixed-radix number where it fits in 62 bits, else its rank among the distinct tuples."""
    spans = [int(p.max()) - int(p.min()) + 1 for p in parts]
    if math.prod(spans) >= 1 << 62:
        return np.unique(np.stack(parts, axis=1), axis=0, return_inverse=True)[1].ravel()
    key = np.zeros(len(parts[0]), np.int64)
    for p, span in zip(parts, spans):
        key = key * span + (p - p.min())
    return key


def revisit_counts(ds: Dataset, visits: Visits | None = None) -> dict[str, tuple[float, float]]:
    """Per arm with turns after a first visit and cached tokens known: (Σ saved, Σ uncached_first) over its later
    repeats' turns (module docstring).  *visits*: :func:`_first_visits` of *ds*, when the caller has them."""
    c = ds.call
    cached = c.cached()
    rows, first, later = visits or _first_visits(ds)
    if not len(rows):
        return {}
    uncached = c.prompt_tokens[rows] - cached[rows]
    uncached_first = uncached[first]
    known = later & ~np.isnan(uncached) & ~np.isnan(uncached_first)
    if not known.any():
        return {}
    turn = c.turn[rows][known]
    n = int(turn.max()) + 1

    def per_turn(v: np.ndarray) -> np.ndarray:
        return np.bincount(turn, weights=v[known], minlength=n)
    first_sum = per_turn(uncached_first)
    turns = np.unique(turn)
    grown = per_turn(cached[rows]) - per_turn(cached[rows][first])  # what more the later turn found cached
    saved = np.maximum(np.minimum(first_sum[turns] - per_turn(uncached)[turns], grown[turns]), 0.0)
    arm_of_turn = ds.turn.arm[turns]
    out = {}
    for a in np.unique(arm_of_turn):
        mine = arm_of_turn == a
        denom = float(first_sum[turns][mine].sum())
        if denom > 0 and 0 <= a < len(ds.arm_names):
            out[str(ds.arm_names[a])] = (float(saved[mine].sum()), denom)
    return out


def counts_missing(ds: Dataset) -> set[str]:
    """The arms whose successful turn calls report no cached count at all."""
    c = ds.call
    ok = c.ok & (c.turn >= 0)
    have = set(np.unique(c.arm[ok & ~np.isnan(c.cached())]).tolist())
    return {str(ds.arm_names[a]) for a in np.unique(c.arm[ok]).tolist() if a not in have and 0 <= a < len(ds.arm_names)}


def draft_rates(ds: Dataset, visits: Visits | None = None) -> dict[str, tuple[float, float]]:
    """Per arm whose calls accepted drafts: (accepted per output token on first visits, on later repeats)
    (module docstring).  *visits*: :func:`_first_visits` of *ds*, when the caller has them."""
    c = ds.call
    rows, first, later = visits or _first_visits(ds)
    if not len(rows):
        return {}
    acc = np.where(np.isnan(c.draft_n_accepted) & c.has_timings, 0.0, c.draft_n_accepted)[rows]
    out_tok = c.completion_tokens[rows]
    usable = ~np.isnan(acc) & ~np.isnan(out_tok)
    is_first = np.zeros(len(rows), bool)
    is_first[np.unique(first)] = True
    arm = c.arm[rows]
    out = {}
    for a in np.unique(arm[usable]):
        mine = usable & (arm == a)
        if not (acc[mine] > 0).any() or not (0 <= a < len(ds.arm_names)):
            continue
        f, lt = mine & is_first, mine & later
        if out_tok[f].sum() >= DRAFT_MIN_TOKENS and out_tok[lt].sum() >= DRAFT_MIN_TOKENS:
            out[str(ds.arm_names[a])] = (float(acc[f].sum() / out_tok[f].sum()),
                                         float(acc[lt].sum() / out_tok[lt].sum()))
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


def _advice(ds: Dataset, methods: set[str | None]) -> str:
    """How to measure new turns: a run before ledger v5 declared no state (run it again); ``cache_reset = "none"``
    (let "auto" bring every turn to the state); recorded turns on an arm without a reset (they are never salted);
    a reset that did not take (salt, or restart)."""
    if ds.settings.cache_between_turns is None:
        return ('this leverbench brings every turn to a cold state by default (cache_between_turns = "cold"): run '
                'the experiment again (or declare "keep" to measure revisits on purpose)')
    if methods == {"none"}:
        return 'cache_reset = "auto" brings every turn to the declared state (a reset, else a salt)'
    if "recorded" in methods:
        return ("recorded turns are never salted (their prompts are the recording's): an endpoint with a reset "
                '(or an engine the tool starts) brings them to the state; cache_between_turns = "keep" measures '
                "them as they were sent")
    return ('where an endpoint\'s reset does not take, cache_reset = "salt" makes every turn\'s prompts new (or '
            '"restart", for engines the tool starts)')


def _plans(records: Iterable[CacheResetRow]) -> tuple[dict[str, CacheResetRow], dict[str, list[str]]]:
    """Each arm's last plan (``cache_reset`` record without ``error``: a resumed run plans again), and each
    arm's turns that could not be brought to the state (those with one: their errors)."""
    plans: dict[str, CacheResetRow] = {}
    failed: dict[str, list[str]] = {}
    for r in records:
        if not isinstance(r, Mapping):
            continue
        if r.get("error"):
            failed.setdefault(str(r.get("arm")), []).append(str(r["error"]))
        else:
            plans[str(r.get("arm"))] = r
    return plans, failed


def _recorded_unreset(plan: CacheResetRow | None) -> bool:
    """Whether an arm's plan leaves its recorded turns as they are (``recorded_method`` "none")."""
    return plan is not None and plan.get("recorded_method") == "none"


def _counts(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _text(v: object) -> str | None:
    return v if isinstance(v, str) else None


_CHECKS: tuple[Literal["took", "did not take", "unverified", "not reported", "failed"], ...] = (
    "took", "did not take", "unverified", "not reported", "failed")
_METHODS: tuple[Method, ...] = ("reset", "salt", "restart", "restart+salt", "none", "keep")


def repeats(ds: Dataset, comps: Iterable[Comparison], cache_resets: Iterable[CacheResetRow]
            ) -> tuple[RepeatsSection, dict[tuple[str, str], list[Reason]], list[RunWarning]]:
    """The ``repeats`` section, the comparisons refused because their repeats were not exchangeable (reason code
    ``revisits``), and the warnings (module docstring).  *cache_resets*: the ledger's ``cache_reset`` records
    (each arm's plan, and each turn whose arm could not be brought to the state: that turn failed, class
    ``cache_state``, and does not count; they are counted here, ``failed_turns``, a resumed run's superseded ones
    too)."""
    state = ds.settings.cache_between_turns
    kept = state == "keep"
    plans, failed = _plans(cache_resets)
    visits = _first_visits(ds)  # (once: both read them)
    counts, drafts = revisit_counts(ds, visits), draft_rates(ds, visits)
    recorded = any(isinstance(c, Mapping) and c.get("recorded_turn") for c in ds.config.get("cases") or [])
    arms: list[RepeatArmRow] = []
    for a in ds.arms:
        p: Mapping[str, object] = plans.get(a, {})  # (its record's values checked one by one: a plan has them all)
        (extra, prompt), (d1, d2) = counts.get(a, (None, None)), drafts.get(a, (None, None))
        method, check = p.get("method"), p.get("check")
        arms.append({"arm": a, "method": method if method in _METHODS else None, "why": _text(p.get("why")),
                     "endpoint": _text(p.get("endpoint")), "check": check if check in _CHECKS else None,
                     "cached_before": _counts(p.get("cached_before")), "cached_after": _counts(p.get("cached_after")),
                     "failed_turns": len(failed.get(a, [])),
                     "revisit_share": extra / prompt if extra is not None and prompt else None, "extra_cached": extra,
                     "later_prompt_tokens": prompt, "draft_first": d1, "draft_later": d2})
    row_of = {r["arm"]: r for r in arms}
    pairs: list[RepeatPairRow] = []
    reasons: dict[tuple[str, str], list[Reason]] = {}
    warnings: list[RunWarning] = []
    if not kept:
        blind = [r["arm"] for r in arms if r["method"] in ("reset", None) and r["revisit_share"] is None
                 and r["arm"] in counts_missing(ds)]
        if blind:
            warnings.append(RunWarning(WarningKind.REVISITS, "whether the repeats met the same cache could not be "
                                       f"checked on {', '.join(map(repr, blind))}: its calls report no cached tokens "
                                       "(vLLM: --enable-prompt-tokens-details, SGLang: --enable-cache-report)",
                                       blind[0]))
    for comp in comps:
        mine = [row_of[a] for a in (comp.arm, comp.vs) if a in row_of]
        hit = [r for r in mine if (r["revisit_share"] or 0) >= REVISIT_SHARE]
        carried = [r for r in mine if r["draft_first"] is not None and r["draft_later"] is not None
                   and r["draft_later"] - r["draft_first"] >= DRAFT_CARRY]
        untaken = [r for r in mine if r["method"] == "reset" and r["check"] == "did not take" and r not in hit]
        unseen = [r for r in mine if r["revisit_share"] is None and r not in hit and (
            r["method"] == "none" or (recorded and _recorded_unreset(plans.get(r["arm"]))))]
        if not (hit or carried or (not kept and (untaken or unseen))):
            continue
        ratio = first_visit_ratio(ds, comp.arm, comp.vs)
        said = [f"{r['arm']}'s later repeats found {r['extra_cached']:.0f} of the {r['later_prompt_tokens']:.0f} "
                f"prompt tokens their first visits computed ({r['revisit_share']:.0%}) cached by its own earlier "
                "repeats" for r in hit]
        said += [f"{r['arm']}'s drafter accepted {r['draft_later']:.2f} drafted tokens per output token on later "
                 f"repeats against {r['draft_first']:.2f} on first visits: its state carried from repeat to "
                 "repeat" for r in carried]
        said += [f"{r['arm']}'s reset did not take when it was checked before its turns" for r in untaken]
        said += [f"{r['arm']} was left to revisit and reports no cached tokens to tell by how much" for r in unseen]
        why = "; ".join(said)
        refused: str | None = None
        how: set[str | None] = set()
        if not kept:
            how = {row_of[r["arm"]]["method"] for r in hit + carried + untaken + unseen}
            if recorded and any(_recorded_unreset(plans.get(r["arm"])) for r in hit + unseen):
                how.add("recorded")
            refused = (f"the repeats revisit ({why}; cache_reset = \"none\")" if how == {"none"} else
                       f"the run declared no cache state (a ledger before v5: {why})" if state is None else
                       f"the repeats were not brought to the declared {state} state ({why})")
            reasons[(comp.arm, comp.vs)] = [(REVISITS, refused)]
        pairs.append({"arm": comp.arm, "vs": comp.vs, "first_visit": ratio, "refused": refused})
        first = (f"{comp.arm} vs {comp.vs} on first visits (each case's first turn, one a side, no interval): "
                 + (f"{ratio:.2f}x" if ratio is not None else "not measured"))
        if refused is not None:
            text = f"{first}; {refused}: the comparison is not citable; {_advice(ds, how)}"
        else:
            text = (f"{first}; the repeats after the first met what the earlier ones left, on purpose "
                    f"(cache_between_turns = \"keep\": {why}): the multiplier across repeats counts revisits of the "
                    "same prompts; the first-visit figure is a new turn's")
        warnings.append(RunWarning(WarningKind.REVISITS, text, comp.arm))
    return {"state": state if state in ("cold", "shared", "keep") else None, "arms": arms, "pairs": pairs}, \
        reasons, warnings
