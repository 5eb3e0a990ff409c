"""The measured rates per arm (decode, prefill, the cached share) and the projection of one scenario's turn on
each arm, with the return of every lever a controlled comparison measures."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...schema.experiment_rows import CellRow
from ...schema.rate_rows import Projection, RateRow
from ..base.dataset import Dataset, first_seen, groups
from ..base.stats import median
from ..rates.phases import ArmRates, arm_rates, prefill_model, project
from .base import Inputs, Product
from .cells import CELLS, MULTIPLIERS
from .engagement import ENGAGED, OWN_METRICS, PROBE_METRICS
from .rates import DECOMPOSITION, PROBES, RATE_MODELS


def largest_case_scenario(ds: Dataset, cell_list: Sequence[CellRow]) -> tuple[int, int] | None:
    """Default scenario: the baseline's largest case — its first call's prompt tokens and the
    generated tokens of its whole turn (medians)."""
    c = ds.call
    if ds.baseline not in ds.arm_names:
        return None
    first = ((c.arm == ds.arm_index(ds.baseline)) & (c.step == 0) & c.ok
             & ~np.isnan(c.prompt_tokens) & (c.prompt_tokens != 0))
    by = groups(np.where(first, c.case, -1), len(ds.case_names))
    order = first_seen(by)
    if not order:
        return None
    medians = [median(c.prompt_tokens[by[k]]) for k in order]
    best = max(range(len(order)), key=lambda i: medians[i])
    case = ds.case_names[order[best]]
    cell = next((x for x in cell_list if x["arm"] == ds.baseline and x["case"] == case), None)
    if not cell or not cell["output_tokens_median"]:
        return None
    return int(medians[best]), int(cell["output_tokens_median"])


def rates_table(rates: dict[str, ArmRates]) -> list[RateRow]:
    """Per arm, the measured rates a projection uses: prefill_s = prefill_a_s + uncached / prefill_tps."""
    out: list[RateRow] = []
    for arm, r in rates.items():
        m = prefill_model(r["prefill_points"])
        out.append({"arm": arm, "decode_tps": r["decode_tps"], "decode_source": r["decode_source"],
                    "prefill_tps": 1.0 / m["b"] if m and m["b"] > 0 else None,
                    "prefill_a_s": m["a"] if m else None, "prefill_source": r["prefill_source"],
                    "prefill_input_range": [m["min_input"], m["max_input"]] if m else None,
                    "cached_share": r["cached_share"], "cached_share_source": r["cached_share_source"],
                    "refused": r.get("refused")})
    return out


ARM_RATES = Product("arm_rates", (PROBES, DECOMPOSITION, OWN_METRICS, PROBE_METRICS), lambda i: arm_rates(
    i.ds, i[PROBES], i[DECOMPOSITION], i[OWN_METRICS], i[PROBE_METRICS]))
RATES = Product("rates", (ARM_RATES,), lambda i: rates_table(i[ARM_RATES]), key="rates")


def _projection(i: Inputs) -> Projection | None:
    scen = i.scenario or largest_case_scenario(i.ds, i[CELLS])
    if not scen:
        return None
    own = i[OWN_METRICS]
    queue = {a: r["queue_s_per_request"] for a, r in own.items() if r.get("queue_s_per_request") is not None}
    return project(i.ds, i[ARM_RATES], i[ENGAGED], *scen, multipliers=i[MULTIPLIERS], queue_s=queue,
                   models={m["arm"]: m for m in i[RATE_MODELS]})


PROJECTION = Product("projection", (CELLS, OWN_METRICS, ARM_RATES, ENGAGED, MULTIPLIERS, RATE_MODELS), _projection,
                     key="projection")
