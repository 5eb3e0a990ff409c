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

from typing import Literal, Sequence

import numpy as np

from ...schema.experiment_rows import CellRow, PromptDisciplineRow, ReasoningRow
from ..base.dataset import Dataset, first_seen, groups, zero_nan
from ..base.stats import median, spread


def reasoning_split(ds: Dataset) -> list[ReasoningRow]:
    c = ds.call
    cell = np.where(c.ok, ds.cell_code(c.arm, c.case), -1)
    by = groups(cell, ds.n_cells)
    out: list[ReasoningRow] = []
    for k in first_seen(by):
        g = by[k]
        rt_known = ~np.isnan(c.reasoning_tokens[g])
        reasoning_seen = (zero_nan(c.reasoning_tokens[g]) > 0) | (zero_nan(c.reasoning_chars[g]) != 0)
        if not reasoning_seen.any():
            continue
        arm, case = ds.arm_names[k // len(ds.case_names)], ds.case_names[k % len(ds.case_names)]
        gen = int(zero_nan(c.completion_tokens[g]).sum())
        source: Literal["usage", "estimated from chunks"]
        if rt_known.all():
            rt, source = int(c.reasoning_tokens[g].sum()), "usage"
        else:
            rc = int(zero_nan(c.reasoning_chunks[g]).sum())
            ac = int(zero_nan(c.answer_chunks[g]).sum())
            rt, source = (round(gen * rc / (rc + ac)) if rc + ac else 0), "estimated from chunks"
        ttft, ttfa = c.ttft_s[g], c.t_first_answer_s[g]
        ttft, ttfa = ttft[~np.isnan(ttft)], ttfa[~np.isnan(ttfa)]
        out.append({"arm": arm, "case": case, "calls": len(g), "generated_tokens": gen, "reasoning_tokens": rt,
                    "answer_tokens": gen - rt, "reasoning_share": rt / gen if gen else None, "source": source,
                    "reasoning_chars": int(zero_nan(c.reasoning_chars[g]).sum()),
                    "answer_chars": int(zero_nan(c.content_chars[g]).sum()),
                    "ttft_median_s": median(ttft) if len(ttft) else None,
                    "first_answer_median_s": median(ttfa) if len(ttfa) else None,
                    "empty_answers": int(c.empty_answer[g].sum())})
    order = {a: i for i, a in enumerate(ds.arms)}
    return sorted(out, key=lambda r: (order.get(r["arm"], 99), r["case"] is None, r["case"] or ""))


def prompt_discipline(ds: Dataset, variant_cells: Sequence[CellRow],
                      base_cells: Sequence[CellRow]) -> list[PromptDisciplineRow]:
    base = {(c["arm"], c["case"]): c for c in base_cells}
    out: list[PromptDisciplineRow] = []
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
