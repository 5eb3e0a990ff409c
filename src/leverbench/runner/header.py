"""The run's header: the ledger's first line (kind ``run``), made from what the run knows once its endpoints
answered (:mod:`leverbench.ledger.records` documents its keys)."""

from __future__ import annotations

import datetime as dt
from typing import Mapping

from .. import __version__
from ..config import LoadedExperiment
from ..config.experiment import KNOB_NUMBERS
from ..config.limits import check_number
from ..json_types import JSONObject
from ..ledger.records import LEDGER_SCHEMA
from ..ledger.rows import EnginesRow, RunHeaderRow
from ..redact import redact_tree, redact_url
from .discover import api_root, host_info
from .endpoint import ArmEndpoint
from .telemetry import Telemetry


def run_header(run_id: str, exp: LoadedExperiment, endpoints: Mapping[str, ArmEndpoint],
               telemetry: Telemetry | None, engines: EnginesRow | None) -> RunHeaderRow:
    """The header of run *run_id* of *exp*: the host (and its GPUs), the experiment's snapshot, each arm's role,
    conditions and what its endpoint said of itself (credentials redacted), how the engines ran."""
    return {
        "kind": "run",
        "schema": LEDGER_SCHEMA,
        "tool_version": __version__,
        "run_id": run_id,
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {**host_info(), **({"gpu": dict(telemetry.host)} if telemetry else {})},
        "experiment_file": str(exp.path),
        "config": exp.snapshot(),
        "arms": {
            name: {"role": ep.arm.role, "conditions": ep.arm.conditions,
                   "discovered": usable_knobs(redact_tree(ep.discovered)),
                   "endpoint": "embedded" if ep.engine else redact_url(api_root(ep.base_url)), "model": ep.model}
            for name, ep in endpoints.items()
        },
        **({"engines": engines} if engines else {}),
    }


def usable_knobs(discovered: JSONObject) -> JSONObject:
    """*discovered* with each knob the what-if computes with (``config.experiment.KNOB_NUMBERS``) that an endpoint
    reported out of its range (a context of 0, more slots than any engine serves) moved to ``knobs_out_of_range``:
    recorded, not used, and never a reason for the run to stop (the ledger's reader refuses such a knob)."""
    knobs = discovered.get("knobs")
    if not isinstance(knobs, dict):
        return discovered
    kept, aside = dict(knobs), {}
    for key, lo, hi in KNOB_NUMBERS:
        v = kept.get(key)
        if v is not None and (check_number(v, lo, hi) or not (key == "kv_capacity_tokens" or float(v).is_integer())):
            aside[key] = kept.pop(key)
    return {**discovered, "knobs": kept, "knobs_out_of_range": aside} if aside else discovered
