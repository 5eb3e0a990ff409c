"""Did the lever engage?  An arm is credited with a lever only if it did.

Judged on every call the arm made in its block: its turns' calls, its probes,
its drift sentinels and its load calls (of each load stage its latest
execution, as :mod:`.load` counts them), the successful ones; warm-up calls
and retried attempts are not counted.  A run whose only work is load stages
(``whatif --verify``'s replay beside one tiny turn) is judged mostly on those.
The sentinels count because the server's counters over the arm's block count
them too (so the two sources agree); each has a prompt behind a fresh tag, which
no cache holds, so they add prompt tokens and next to no cached ones.

How each lever is measured is its module's (:mod:`leverbench.levers`):

- a **measured** lever (:attr:`~leverbench.levers.Lever.measure`: the prefix cache's cached share, the
  drafter's acceptance) is measured on every arm from the sums of its calls (:class:`~leverbench.levers.CallSums`,
  summed here) and its server figures; its figures go into the arm's row under its own keys, whether
  the arm used it under its ``used_field``, and, on an arm whose knobs turn it on, whether it engaged under its
  name — so that a reference arm that used the lever it is meant to lack is caught too (:mod:`.guard`);
- a **judged** lever (:attr:`~leverbench.levers.Lever.judge`) is judged on an arm that turns it on, from its
  knobs, its discovered record and its server figures; the answer goes under ``levers``.
Only counters attributed to the arm alone are used (:mod:`.metrics`).  When
no source reports it, engagement is unknown (None, with a warning naming what
would report it), never "not engaged".
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

import numpy as np

from ...json_types import JSONValue
from ...ledger.rows import CallRow, TimingsRow
from ...levers import ArmEvidence, CallSums, Lever, Measured, registry
from ...schema.lever_rows import EngagedRow, LeverUse
from ...schema.rate_rows import ServerMetricsRow
from ...schema.warning_kinds import RunWarning, WarningKind
from ..base.dataset import Dataset, cached_tokens, sums, zero_nan
from ..base.knobs import is_on
from ..load.stages import measured_calls

#: The ledger's names of a call's cached prompt tokens (usage; llama.cpp's ``timings``) and drafted and accepted
#: tokens (``timings``).
_USAGE_CACHED, _CACHE_N, _DRAFT_N, _DRAFT_ACCEPTED = "cached_tokens", "cache_n", "draft_n", "draft_n_accepted"
#: A call record as the ledger holds it (a load call, a sentinel): JSON.
Record = Mapping[str, JSONValue]


def _num(v: object) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan


def _timings(r: CallRow) -> TimingsRow:
    t = r.get("timings")
    return t if isinstance(t, dict) else {}


def _load_columns(ds: Dataset, load_calls: Iterable[Record]) -> dict[str, np.ndarray]:
    """The successful counted load calls (:func:`.load.measured_calls`) as the columns :func:`_per_arm` sums:
    arm (index into ``ds.arm_names``, −1 for an arm not there), prompt tokens, cached tokens
    (:func:`.load.cached_tokens`), draft_n, draft_n_accepted (NaN where a call lacks one)."""
    ok = [r for r in measured_calls(load_calls) if r.get("error") is None]
    index = {a: i for i, a in enumerate(ds.arm_names)}

    def col(values: Iterable[object]) -> np.ndarray:
        return np.array(list(values), dtype=float)

    timings = [_timings(r) for r in ok]
    return {"arm": np.array([index.get(r.get("arm"), -1) for r in ok], dtype=np.int64),
            "prompt": col(r.get("prompt_tokens") for r in ok), "cached": col(cached_tokens(r) for r in ok),
            "draft": col(t.get(_DRAFT_N) for t in timings),
            "accepted": col(t.get(_DRAFT_ACCEPTED) for t in timings)}


def _record_columns(ds: Dataset, recs: list[CallRow]) -> dict[str, np.ndarray]:
    """The columns :func:`_per_arm` adds up, of call records given as dicts (the sentinels)."""
    def timing(r: CallRow, k: str) -> float:
        return _num(_timings(r).get(k))
    cached = [_num(r.get(_USAGE_CACHED)) if r.get(_USAGE_CACHED) is not None else timing(r, _CACHE_N)
              for r in recs]
    arm = [ds.arm_names.index(r["arm"]) if r.get("arm") in ds.arm_names else -1 for r in recs]
    return {"arm": np.array(arm, dtype=np.int64), "prompt": np.array([_num(r.get("prompt_tokens")) for r in recs]),
            "cached": np.array(cached, dtype=float), "draft": np.array([timing(r, _DRAFT_N) for r in recs]),
            "accepted": np.array([timing(r, _DRAFT_ACCEPTED) for r in recs])}


def _per_arm(ds: Dataset, load_calls: Iterable[Record] = ()) -> dict[str, np.ndarray]:
    """Per arm (``ds.arm_names`` order), over its successful calls, probes, sentinels and load calls (module
    docstring):
    Σ prompt tokens, Σ cached tokens (usage, else timings.cache_n), how many calls said either, Σ draft_n,
    Σ draft_n_accepted."""
    n = len(ds.arm_names)
    out = dict.fromkeys(("prompt", "cached", "cache_seen", "draft", "accepted"), np.zeros(n))
    parts = [{"arm": np.where(t.ok, t.arm, -1), "prompt": t.prompt_tokens, "cached": t.cached(), "draft": t.draft_n,
              "accepted": t.draft_n_accepted} for t in (ds.call, ds.probe)]
    parts.append(_load_columns(ds, load_calls))
    parts.append(_record_columns(ds, [r for r in ds.sentinels if r.get("error") is None]))
    for p in parts:
        add = {"prompt": zero_nan(p["prompt"]), "cached": zero_nan(p["cached"]), "cache_seen": ~np.isnan(p["cached"]),
               "draft": zero_nan(p["draft"]), "accepted": zero_nan(p["accepted"])}
        out = {k: out[k] + sums(p["arm"], v, n) for k, v in add.items()}
    return out


def engaged(ds: Dataset, own_metrics: Optional[Mapping[str, ServerMetricsRow]] = None,
            knobs: Optional[Mapping[str, Mapping[str, JSONValue]]] = None, load_calls: Iterable[Record] = (),
            ) -> tuple[list[EngagedRow], list[RunWarning]]:
    """Per arm: each measured lever's figures with their sources and whether the arm used it (its ``used_field``:
    true, false, or None when nothing reports it), and for an arm whose knobs turn a lever on, whether it
    engaged (a measured lever under its name; a judged one under ``levers``; None: unknown, never read as "not
    engaged").
    *own_metrics*: the server-metrics rows attributed to one arm alone, by arm; *knobs*: by arm;
    *load_calls*: the run's ``load`` records (the ledger's, any order of stages; filtered here)."""
    settings = {"engaged_acceptance_min": ds.settings.engaged_acceptance_min}
    own_metrics = own_metrics or {}
    out: list[EngagedRow] = []
    warnings: list[RunWarning] = []
    totals = _per_arm(ds, load_calls)
    judged = [(x, x.judge) for x in registry.levers() if x.judge is not None]
    for arm in ds.arms:
        arm_knobs = (knobs or {}).get(arm) or ds.knobs(arm)
        m = own_metrics.get(arm)
        a = ds.arm_index(arm)
        found = (ds.header.get("arms") or {}).get(arm, {}).get("discovered")
        calls = CallSums(int(totals["prompt"][a]), int(totals["cached"][a]), bool(totals["cache_seen"][a]),
                         int(totals["draft"][a]), int(totals["accepted"][a]))
        evidence = ArmEvidence(arm, arm_knobs, found if isinstance(found, dict) else {},
                               m or {},  # type: ignore[arg-type]  # the row's figures: numbers by name
                               calls=calls, settings=settings)
        results = [(x, x.measure(evidence)) for x in registry.measured() if x.measure is not None]
        row = _row(arm, calls.prompt_tokens, results)
        warnings += _credit(row, arm, arm_knobs, results)
        uses: dict[str, LeverUse] = {}
        for x, judge in judged:
            if not is_on(arm_knobs.get(x.name)):
                continue
            use = judge(evidence)
            uses[x.name] = {"used": use.used, "source": use.source}
            if use.warning and use.used is not True:
                kind = WarningKind.ENGAGEMENT_UNKNOWN if use.used is None else WarningKind.NOT_ENGAGED
                warnings.append(RunWarning(kind, use.warning, arm))
        if uses:
            row["levers"] = uses
        out.append(row)
    return out, warnings


def _row(arm: str, prompt: int, results: list[tuple[Lever, Measured]]) -> EngagedRow:
    """An arm's row before crediting: each measured lever's figures, then each one's name (None until credited),
    the figures written after them, and whether the arm used each (the order the summary has always written)."""
    row: dict[str, JSONValue] = {"arm": arm, "prompt_tokens": prompt}
    for _, r in results:
        row.update(r.figures)
    row.update({x.name: None for x, _ in results})
    for _, r in results:
        row.update(r.after)
    row.update({str(x.used_field): r.used for x, r in results})
    return row  # type: ignore[return-value]  # every key of EngagedRow: the built-in measured levers' figures


def _credit(row: EngagedRow, arm: str, knobs: Mapping[str, JSONValue],
            results: list[tuple[Lever, Measured]]) -> list[RunWarning]:
    """Credits the arm with each measured lever its knobs turn on (under the lever's name), and the warnings of a
    lever not engaged or of unknown engagement."""
    warnings = []
    for x, r in results:
        if not is_on(knobs.get(x.name)):
            continue
        row[x.name] = r.used  # type: ignore[literal-required]  # a measured lever's name is a key of the row
        if r.used is False:
            warnings.append(RunWarning(WarningKind.NOT_ENGAGED, r.not_engaged, arm))
        elif r.used is None:
            warnings.append(RunWarning(WarningKind.ENGAGEMENT_UNKNOWN, r.unknown, arm))
    return warnings
