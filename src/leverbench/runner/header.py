"""The run's header: the ledger's first line (kind ``run``), made from what the run knows once its endpoints
answered (:mod:`leverbench.ledger.records` documents its keys)."""

from __future__ import annotations

import datetime as dt
from typing import Mapping

from .. import __version__
from ..config import LoadedExperiment
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
            name: {"role": ep.arm.role, "conditions": ep.arm.conditions, "discovered": redact_tree(ep.discovered),
                   "endpoint": "embedded" if ep.engine else redact_url(api_root(ep.base_url)), "model": ep.model}
            for name, ep in endpoints.items()
        },
        **({"engines": engines} if engines else {}),
    }
