"""Did the lever engage?  An arm is credited with a lever only if it did.

Judged on every call the arm made in its block: its turns' calls, its probes,
its drift sentinels and its load calls (of each load stage its latest
execution, as :mod:`.load` counts them), the successful ones; warm-up calls
and retried attempts are not counted.  A run whose only work is load stages
(``whatif --verify``'s replay beside one tiny turn) is judged mostly on those.
The sentinels count because the server's counters over the arm's block count
them too (so the two sources agree); each has a prompt behind a fresh tag, which
no cache holds, so they add prompt tokens and next to no cached ones.

- prefix cache: an arm whose knobs say ``prefix_cache`` on engaged it when
  at least 1 % of its prompt tokens were served from the cache, by the first
  source that reports it: its calls (usage ``cached_tokens`` or llama.cpp
  ``timings.cache_n``), else the server's own counters over the arm's block
  (vLLM Δ``prefix_cache_hits`` / Δ``prefix_cache_queries``; SGLang's
  ``cache_hit_rate``) — vLLM sends no cached count in usage unless started
  with ``--enable-prompt-tokens-details``, and a missing field is never read
  as "nothing cached".
- drafter: an arm whose knobs name a ``drafter`` (anything but
  none/false/off) engaged it when the drafter's acceptance
  Σ draft_n_accepted / Σ draft_n (from timings, else the server's counters:
  vLLM ``spec_decode_num_{accepted,draft}_tokens``, llama.cpp
  ``spec_decode_num_*_total``) is at least ``engaged_acceptance_min``
  (default 0.2); with only SGLang's mean accept length, when it exceeds 1.
Only counters attributed to the arm alone are used (:mod:`.metrics`).  When
no source reports it, engagement is unknown (None, with a warning naming the
flag that would report it), never "not engaged".  Every arm's use of each
lever is also judged (``cache_used``, ``drafter_used``), so that a reference
arm that used the lever it is meant to lack is caught (:mod:`.guard`).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

import numpy as np

from ...json_types import JSONValue
from ...levers import ArmEvidence, registry
from ...levers.drafter import LEVER as DRAFTER
from ...levers.prefix_cache import LEVER as PREFIX_CACHE
from ...schema.lever_rows import EngagedRow, LeverUse
from ...schema.rate_rows import ServerMetricsRow
from ..base.dataset import Dataset, sums, zero_nan
from ..base.knobs import is_on
from ..base.warning_kinds import RunWarning, WarningKind
from ..load.stages import cached_tokens, measured_calls

CACHE_MIN_SHARE = 0.01
#: The llama.cpp ``timings`` fields of the prefix cache (cached tokens) and the drafter (drafted, accepted).
(_CACHE_N,) = PREFIX_CACHE.timings
_DRAFT_N, _DRAFT_ACCEPTED = DRAFTER.timings
(_USAGE_CACHED,) = PREFIX_CACHE.usage_fields
#: A call record as the ledger holds it (a load call, a sentinel): JSON.
Record = Mapping[str, JSONValue]


def _num(v: object) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan


def _timings(r: Record) -> Mapping[str, JSONValue]:
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


def _record_columns(ds: Dataset, recs: list[Record]) -> dict[str, np.ndarray]:
    """The columns :func:`_per_arm` adds up, of call records given as dicts (the sentinels)."""
    def timing(r: Record, k: str) -> float:
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
    """Per arm: cached and drafter figures with their sources; whether it used each lever (``cache_used``,
    ``drafter_used``: true, false, or None when nothing reports it), and for an arm whose knobs turn a lever
    on, whether it engaged (``prefix_cache``, ``drafter``; None: unknown, never read as "not engaged"; any
    other judged lever under ``levers``).
    *own_metrics*: the server-metrics rows attributed to one arm alone, by arm; *knobs*: by arm;
    *load_calls*: the run's ``load`` records (the ledger's, any order of stages; filtered here)."""
    thr = ds.config["experiment"].get("engaged_acceptance_min", 0.2)
    own_metrics = own_metrics or {}
    out: list[EngagedRow] = []
    warnings: list[RunWarning] = []
    totals = _per_arm(ds, load_calls)
    judged = [x for x in registry.levers() if x.judge is not None]
    for arm in ds.arms:
        arm_knobs = (knobs or {}).get(arm) or ds.knobs(arm)
        m: ServerMetricsRow = own_metrics.get(arm) or {}
        a = ds.arm_index(arm)
        row = _measured(int(totals["prompt"][a]), int(totals["cached"][a]), bool(totals["cache_seen"][a]),
                        int(totals["draft"][a]), int(totals["accepted"][a]), m, arm, thr)
        warnings += _credit(row, arm, arm_knobs, thr)
        uses: dict[str, LeverUse] = {}
        for x in judged:
            if not is_on(arm_knobs.get(x.name)):
                continue
            found = (ds.header.get("arms") or {}).get(arm, {}).get("discovered")
            use = x.judge(ArmEvidence(arm, arm_knobs, found if isinstance(found, dict) else {}, m))  # type: ignore[misc]
            uses[x.name] = {"used": use.used, "source": use.source}
            if use.warning and use.used is not True:
                kind = WarningKind.ENGAGEMENT_UNKNOWN if use.used is None else WarningKind.NOT_ENGAGED
                warnings.append(RunWarning(kind, use.warning, arm))
        if uses:
            row["levers"] = uses
        out.append(row)
    return out, warnings


def _measured(prompt: int, cached: int, cache_seen: bool, dn: int, da: int, m: ServerMetricsRow, arm: str,
              thr: float) -> EngagedRow:
    """An arm's row before crediting: its cached-token and drafter figures, and whether it used each."""
    cache: dict[str, Optional[object]] = {"cached_tokens": None, "cached_share": None, "cached_share_source": None}
    if cache_seen:
        cache.update(cached_tokens=cached, cached_share=cached / prompt if prompt else None,
                     cached_share_source="calls (usage / timings)")
    elif m.get("prefix_cache_hit_share") is not None:
        cache.update(cached_tokens=int(m["prefix_cache_hit_tokens"]) if "prefix_cache_hit_tokens" in m else None,
                     cached_share=m["prefix_cache_hit_share"],
                     cached_share_source="server metrics (prefix-cache hits / queries)")
    draft: dict[str, Optional[object]] = {"draft_tokens": None, "accepted_tokens": None, "acceptance": None,
                                          "acceptance_source": None}
    length: Optional[float] = None
    if dn:
        draft.update(draft_tokens=dn, accepted_tokens=da, acceptance=da / dn, acceptance_source="calls (timings)")
    elif m.get("drafter_acceptance") is not None:
        draft.update(draft_tokens=int(m["draft_tokens"]) if "draft_tokens" in m else None,
                     accepted_tokens=int(m["accepted_tokens"]) if "accepted_tokens" in m else None,
                     acceptance=m["drafter_acceptance"], acceptance_source="server metrics (spec decode counters)")
    elif m.get("sglang_spec_accept_length") is not None:
        length = m["sglang_spec_accept_length"]
        draft.update(acceptance_source="server metrics (SGLang spec_accept_length)")
    share, acceptance = cache["cached_share"], draft["acceptance"]
    # the keys in the order the summary has always written them (accept_length only where it is the figure)
    row = {"arm": arm, "prompt_tokens": prompt, **cache, **draft, "prefix_cache": None, "drafter": None}
    if length is not None:
        row["accept_length"] = length
    row["cache_used"] = None if share is None else share >= CACHE_MIN_SHARE  # type: ignore[operator]
    if acceptance is not None:
        row["drafter_used"] = acceptance >= thr  # type: ignore[operator]
    else:
        row["drafter_used"] = None if length is None else length > 1.0
    return row  # type: ignore[return-value]  # every key of EngagedRow, built in the summary's order


def _credit(row: EngagedRow, arm: str, knobs: Mapping[str, JSONValue], thr: float) -> list[RunWarning]:
    """Credits the arm with the prefix cache and the drafter where its knobs turn them on (``prefix_cache``,
    ``drafter``), and the warnings of a lever not engaged or of unknown engagement."""
    warnings = []
    cache, drafter = PREFIX_CACHE.name, DRAFTER.name
    if is_on(knobs.get(cache)):
        row["prefix_cache"] = row["cache_used"]
        if row["cache_used"] is False:
            warnings.append(RunWarning(WarningKind.NOT_ENGAGED,
                                       f"lever not engaged: arm {arm!r} says {cache} on "
                                       f"but cached only {row['cached_share']:.1%} of its prompt tokens; it is not "
                                       f"credited with the {PREFIX_CACHE.words}", arm))
        elif row["cache_used"] is None:
            warnings.append(RunWarning(WarningKind.ENGAGEMENT_UNKNOWN,
                                       f"engagement unknown: arm {arm!r} says {cache} on, but neither its "
                                       "calls nor server metrics of its own report cached tokens "
                                       f"({PREFIX_CACHE.unknown_hint})", arm))
    if is_on(knobs.get(drafter)):
        row["drafter"] = row["drafter_used"]
        if row["drafter_used"] is False:
            what = (f"accepted only {row['acceptance']:.0%} of draft tokens (threshold {thr:.0%})"
                    if row["acceptance"] is not None else f"has a mean accept length of {row['accept_length']:.2f}")
            warnings.append(RunWarning(WarningKind.NOT_ENGAGED,
                                       f"lever not engaged: arm {arm!r} says {drafter} {knobs.get(drafter)!r} "
                                       f"but {what}; it is not credited with the {DRAFTER.words}", arm))
        elif row["drafter_used"] is None:
            warnings.append(RunWarning(WarningKind.ENGAGEMENT_UNKNOWN,
                                       f"engagement unknown: arm {arm!r} says {drafter} {knobs.get(drafter)!r}, "
                                       f"but neither its calls nor server metrics of its own report "
                                       f"{DRAFTER.unknown_hint}", arm))
    return warnings
