"""Everything the reports show, computed from the ledger alone.

``summarize(ledger)`` returns the ``leverbench.summary/1`` summary that is written as ``summary.json``; every
report formats it and computes nothing new.  Its sections are declared in :mod:`.sections`, each naming what it
needs and building its typed row (:mod:`leverbench.schema`) and its warnings; this module runs them in order
(:func:`.sections.base.build_all`) and adds the schema's name and the warnings.  With
``LEVERBENCH_CHECK_SUMMARY=1`` (the test suite sets it, ``tests/conftest.py``) every summary built is checked
against the schema and one that departs is an error at once, so every summary the suite produces is validated,
not only those it writes (``write_reports`` checks every summary it writes, always).
"""

from __future__ import annotations

import os
from typing import cast

from ..errors import SummaryMismatch
from ..ledger.reader import Ledger
from ..ledger.records import SUMMARY_SCHEMA
from ..ledger.rows import RunHeaderRow
from ..schema.check_rows import CostRow
from ..schema.summary import Summary
from .base.dataset import dataset
from .experiment.cost import scenario_costs
from .sections import PRODUCTS, SECTION_ORDER
from .sections.base import Inputs, build_all
from .sections.cells import cost_citability

__all__ = ["CHECK_ENV", "cost_citability", "projection_costs", "summarize"]


def projection_costs(summary: Summary, gpu_hour_usd: float | None = None) -> list[CostRow]:
    """What one turn of the summary's projected scenario costs per arm (:func:`.cost.scenario_costs`;
    *gpu_hour_usd* where an arm's conditions give no price), each row cited as :func:`cost_citability`
    allows.  Reads only the summary, so it applies to one read back."""
    projection = summary["projection"]
    if projection is None:  # (a summary without a scenario: none of its cases had a first call with a prompt)
        return []
    cite = cost_citability(summary["baseline"], summary["cells"], summary["multipliers"], summary["drift"],
                           summary.get("drift_common"))
    return scenario_costs(projection["arms"], {a["name"]: a["conditions"] for a in summary["arms"]},
                          summary["baseline"], gpu_hour_usd, cite)


CHECK_ENV = "LEVERBENCH_CHECK_SUMMARY"


def summarize(ledger: Ledger[RunHeaderRow], *, scenario: tuple[int, int] | None = None,
              gpu_hour_usd: float | None = None) -> Summary:
    """The summary of *ledger* (checked against the schema when :data:`CHECK_ENV` is set); *scenario*: (prompt
    tokens, generated tokens) of the projected turn (default: the baseline's largest case); *gpu_hour_usd*: the
    price of a GPU-hour where an arm's conditions give none."""
    out = _summarize(ledger, scenario=scenario, gpu_hour_usd=gpu_hour_usd)
    if os.environ.get(CHECK_ENV, "") not in ("", "0"):
        from ..schema.check import summary_problems  # noqa: PLC0415 (pydantic)

        problems = summary_problems(out)
        if problems:
            raise SummaryMismatch(f"summary of {ledger.path} departs from leverbench.summary/1: "
                                  + "; ".join(map(str, problems[:5])))
    return out


def _summarize(ledger: Ledger[RunHeaderRow], *, scenario: tuple[int, int] | None,
               gpu_hour_usd: float | None) -> Summary:
    ds = dataset(ledger)
    inputs = Inputs(ledger, ds, scenario, gpu_hour_usd, warnings=list(ds.warnings))
    sections: dict[str, object] = {"schema": SUMMARY_SCHEMA, **build_all(PRODUCTS, inputs),
                                "warnings": [w.text for w in inputs.warnings],
                                "warning_items": [w.as_dict() for w in inputs.warnings]}
    rank = {k: n for n, k in enumerate(SECTION_ORDER)}
    return cast(Summary, dict(sorted(sections.items(), key=lambda kv: rank.get(kv[0], len(rank)))))
