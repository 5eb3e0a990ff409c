"""Did the lever engage?  An arm is credited with a lever only if it did.

- prefix cache: an arm whose conditions say ``prefix_cache = true`` engaged it
  when its calls report cached prompt tokens (usage cached_tokens or llama.cpp
  ``timings.cache_n``) for at least 1 % of their prompt tokens.
- drafter: an arm whose conditions name a ``drafter`` (anything but
  none/false/off) engaged it when the drafter's acceptance
  Σ draft_n_accepted / Σ draft_n (from timings, or the vLLM/SGLang metrics'
  before→after delta) is at least ``engaged_acceptance_min`` (default 0.2).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .dataset import Dataset, sums, zero_nan
from .metrics import numeric

CACHE_MIN_SHARE = 0.01
_OFF = (None, False, "none", "off", "no", "", 0)


def declared(cond: dict[str, Any], knob: str) -> bool:
    v = cond.get(knob)
    return not (v in _OFF or (isinstance(v, str) and v.lower() in ("none", "off", "no", "false")))


def _metric_delta(ds: Dataset, arm: str, name: str) -> float | None:
    before = next((m for m in ds.metrics if m["arm"] == arm and m["when"] == "before"), None)
    after = next((m for m in reversed(ds.metrics) if m["arm"] == arm and m["when"] == "after"), None)
    if not before or not after:
        return None
    keys = [k for k in after["samples"] if k.split("{")[0] in (name, name + "_total")
            and numeric(after["samples"][k]) and numeric(before["samples"].get(k, 0.0))]
    if not keys:
        return None
    return sum(after["samples"][k] - before["samples"].get(k, 0.0) for k in keys)


def _per_arm(ds: Dataset) -> dict[str, np.ndarray]:
    """Per arm (``ds.arm_names`` order), over its successful calls and probes: Σ prompt tokens,
    Σ cached tokens (usage, else timings.cache_n), how many calls said either, Σ draft_n, Σ draft_n_accepted."""
    n = len(ds.arm_names)
    out = dict.fromkeys(("prompt", "cached", "cache_seen", "draft", "accepted"), np.zeros(n))
    for t in (ds.call, ds.probe):
        arm = np.where(t.ok, t.arm, -1)
        cached = t.cached()
        add = {"prompt": zero_nan(t.prompt_tokens), "cached": zero_nan(cached), "cache_seen": ~np.isnan(cached),
               "draft": zero_nan(t.draft_n), "accepted": zero_nan(t.draft_n_accepted)}
        out = {k: out[k] + sums(arm, v, n) for k, v in add.items()}
    return out


def engaged(ds: Dataset) -> tuple[list[dict[str, Any]], list[str]]:
    thr = ds.config["experiment"].get("engaged_acceptance_min", 0.2)
    out, warnings = [], []
    totals = _per_arm(ds)
    for arm in ds.arms:
        cond = ds.conditions(arm)
        a = ds.arm_index(arm)
        prompt, cached = int(totals["prompt"][a]), int(totals["cached"][a])
        seen_cache_field = bool(totals["cache_seen"][a])
        dn, da = int(totals["draft"][a]), int(totals["accepted"][a])
        if dn == 0:
            mdn = _metric_delta(ds, arm, "vllm:spec_decode_num_draft_tokens")
            mda = _metric_delta(ds, arm, "vllm:spec_decode_num_accepted_tokens")
            if mdn:
                dn, da = int(mdn), int(mda or 0)
        row: dict[str, Any] = {"arm": arm, "cached_tokens": cached if seen_cache_field else None,
                               "prompt_tokens": prompt, "cached_share": cached / prompt if prompt and seen_cache_field else None,
                               "draft_tokens": dn or None, "accepted_tokens": da if dn else None,
                               "acceptance": da / dn if dn else None, "prefix_cache": None, "drafter": None}
        if declared(cond, "prefix_cache"):
            ok = row["cached_share"] is not None and row["cached_share"] >= CACHE_MIN_SHARE
            row["prefix_cache"] = ok
            if not ok:
                what = "reports no cached-token counts" if row["cached_share"] is None else \
                    f"cached only {row['cached_share']:.1%} of its prompt tokens"
                warnings.append(f"lever not engaged: arm {arm!r} says prefix_cache on but {what}; "
                                "it is not credited with the prefix cache")
        if declared(cond, "drafter"):
            ok = row["acceptance"] is not None and row["acceptance"] >= thr
            row["drafter"] = ok
            if not ok:
                what = "reports no drafter statistics" if row["acceptance"] is None else \
                    f"accepted only {row['acceptance']:.0%} of draft tokens (threshold {thr:.0%})"
                warnings.append(f"lever not engaged: arm {arm!r} says drafter {cond.get('drafter')!r} but {what}; "
                                "it is not credited with the drafter")
        out.append(row)
    return out, warnings
