"""Reasoning accounting and prompt discipline.

- Generated tokens split into reasoning and answer where the engine says so:
  ``usage.completion_tokens_details.reasoning_tokens``; else, when reasoning
  arrived as ``reasoning_content`` deltas or ``<think>`` blocks, the share of
  streamed chunks that carried reasoning (one chunk ≈ one token without a
  drafter) — marked ``estimated``.
- Time to first token (any token, reasoning included) next to time to first
  answer token.
- Prompt discipline: a case variant (e.g. "answer in one sentence") changes
  how much the model generates, not how fast the engine is.  Its saving =
  case median − variant median on the same arm; it is never a multiplier,
  because the output volume differs by design.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .dataset import Dataset
from .stats import median, spread


def reasoning_split(ds: Dataset) -> list[dict[str, Any]]:
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in ds.calls:
        if c.get("error") is None:
            by[(c["arm"], c["case"])].append(c)
    out = []
    for (arm, case), calls in by.items():
        reasoning_seen = any((c.get("reasoning_tokens") or 0) > 0 or c.get("reasoning_chars") for c in calls)
        if not reasoning_seen:
            continue
        gen = sum(c.get("completion_tokens") or 0 for c in calls)
        if all(c.get("reasoning_tokens") is not None for c in calls):
            rt, source = sum(c["reasoning_tokens"] for c in calls), "usage"
        else:
            rc = sum(c.get("reasoning_chunks") or 0 for c in calls)
            ac = sum(c.get("answer_chunks") or 0 for c in calls)
            rt, source = (round(gen * rc / (rc + ac)) if rc + ac else 0), "estimated from chunks"
        ttft = [c["ttft_s"] for c in calls if c.get("ttft_s") is not None]
        ttfa = [c["t_first_answer_s"] for c in calls if c.get("t_first_answer_s") is not None]
        out.append({"arm": arm, "case": case, "calls": len(calls), "generated_tokens": gen, "reasoning_tokens": rt,
                    "answer_tokens": gen - rt, "reasoning_share": rt / gen if gen else None, "source": source,
                    "reasoning_chars": sum(c.get("reasoning_chars") or 0 for c in calls),
                    "answer_chars": sum(c.get("content_chars") or 0 for c in calls),
                    "ttft_median_s": median(ttft) if ttft else None,
                    "first_answer_median_s": median(ttfa) if ttfa else None,
                    "empty_answers": sum(1 for c in calls if c.get("empty_answer"))})
    order = {a: i for i, a in enumerate(ds.arms)}
    return sorted(out, key=lambda r: (order.get(r["arm"], 99), r["case"]))


def prompt_discipline(ds: Dataset, variant_cells: list[dict[str, Any]], base_cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    base = {(c["arm"], c["case"]): c for c in base_cells}
    out = []
    for v in variant_cells:
        b = base.get((v["arm"], ds.variants[v["case"]]))
        if not b or b["median_s"] is None or v["median_s"] is None:
            continue
        vb, vv = b["output_tokens_median"], v["output_tokens_median"]
        out.append({"arm": v["arm"], "case": b["case"], "variant": v["case"], "case_s": b["median_s"],
                    "variant_s": v["median_s"], "saved_s": b["median_s"] - v["median_s"],
                    "saved_share": (b["median_s"] - v["median_s"]) / b["median_s"],
                    "output_tokens": vb, "variant_output_tokens": vv,
                    "volume_spread": spread(vb, vv) if vb is not None and vv is not None else None,
                    "kind": "fewer generated tokens (prompt discipline), not a faster engine: never a multiplier"})
    return out
