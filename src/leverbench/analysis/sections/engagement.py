"""What the engines' own counters say: the server metrics each arm owns (before and after its block, and around
the probes), and whether each arm's levers engaged."""

from __future__ import annotations

from typing import Iterator, cast

from ...json_types import JSONObject
from ...schema.lever_rows import EngagedRow
from ...schema.rate_rows import ServerMetricsRow
from ...schema.warning_kinds import RunWarning, WarningKind
from ..base.metrics import MetricsRecord, own_metrics, server_metrics
from ..experiment.engaged import engaged
from .base import Inputs, Product
from .comparisons import KNOBS


def _records(i: Inputs) -> list[MetricsRecord]:
    # (the ledger's metrics records: ledger/rows.py MetricsRow, the fields metrics.py reads typed there again)
    return cast("list[MetricsRecord]", i.ds.metrics)


def _header(i: Inputs) -> JSONObject:
    return cast("JSONObject", i.ds.header)  # (the ledger's header: JSON, as server_metrics reads it)


def _server_metrics(i: Inputs) -> list[ServerMetricsRow]:
    rows = server_metrics([m for m in _records(i) if m["when"] in ("before", "after")], i.ds.arms, _header(i))
    for r in rows:
        if r["attribution"] == "mixed":
            i.warn(RunWarning(WarningKind.MIXED_METRICS, f"server metrics of {r['arm']!r} are mixed with "
                              f"{', '.join(r['mixed_with'])} (one endpoint, overlapping blocks): no per-arm figure is "
                              "taken from them", r["arm"]))
    return rows


SERVER_METRICS = Product("server_metrics", (), _server_metrics, key="server_metrics")
#: per arm, the server metrics of its own block (none where mixed with another arm's)
OWN_METRICS = Product("own_metrics", (SERVER_METRICS,), lambda i: own_metrics(i[SERVER_METRICS]))
#: likewise, around the probes
PROBE_METRICS = Product("probe_metrics", (), lambda i: own_metrics(server_metrics(
    _records(i), i.ds.arms, _header(i), "probes-before", "probes-after")))


def _engaged(i: Inputs) -> list[EngagedRow]:
    load_calls = cast("Iterator[JSONObject]", i.ledger.of_kind("load"))  # (the load stages' call records: JSON)
    rows, w = engaged(i.ds, i[OWN_METRICS], i[KNOBS][0], load_calls)
    i.warn(*w)
    return rows


ENGAGED = Product("engaged", (OWN_METRICS, KNOBS), _engaged, key="engaged")
