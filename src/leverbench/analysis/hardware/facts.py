"""The ``gpu`` section: the host's GPUs and each arm's (the header), what they did (:mod:`.telemetry`), notes.

An arm's GPU facts are its ``discovered.gpu`` (``runner.telemetry``): NVML's for an engine the tool started,
a DCGM exporter's for an endpoint, ``none (CPU)`` for an engine on the CPU; else unknown, with why.  Two arms
whose facts differ were measured on different hardware: the knobs say so (a discovered fact in which two
arms differ is a knob, :mod:`..base.knobs`), so their comparison is not controlled.  An arm whose facts are
unknown while another's are known may be on other hardware without anything saying so: warned.
"""

from __future__ import annotations

from typing import Iterable, Mapping, cast

import numpy as np

from ...ledger.rows import CallRow, GpuSamplesRow, RunHeaderRow
from ...schema.hardware_rows import GpuArmRow, GpuFactsRow, GpuSection
from ...schema.warning_kinds import RunWarning, WarningKind
from ..base.dataset import Dataset
from .telemetry import CallSpan, TurnSpan, call_spans, energy_rows, series, telemetry_rows

NOT_RECORDED = "not recorded (the run predates GPU facts)"


def arm_facts(header: RunHeaderRow, arm: str) -> GpuArmRow:
    """The GPUs *arm* ran on, from the header."""
    disc = ((header.get("arms") or {}).get(arm) or {}).get("discovered") or {}
    gpu = disc.get("gpu")
    if not isinstance(gpu, Mapping):
        return {"arm": arm, "known": False, "facts": {}, "why": NOT_RECORDED}
    # (``discovered`` is JSON; its ``gpu`` the runner's GpuFacts as written: ``runner.telemetry``)
    facts = cast("GpuFactsRow", dict(gpu))
    why = facts.get("unknown")
    return {"arm": arm, "known": why is None, "facts": facts, "why": why}


def dataset_spans(ds: Dataset, loads: Iterable[CallRow]) -> tuple[list[CallSpan], list[TurnSpan]]:
    """The calls' spans (the counted turns' calls from the dataset's columns, its probes and sentinels, *loads*'
    calls) and the counted, successful turns' (:mod:`.telemetry`)."""
    c, t = ds.call, ds.turn
    names = np.asarray(ds.arm_names, dtype=object)
    ok = c.ok & np.isfinite(c.ttft_s) & np.isfinite(c.latency_s)
    sent = c.t_send + np.nan_to_num(c.connect_s) + np.nan_to_num(c.send_s)
    spans: list[CallSpan] = [(str(a), "turns", float(s), float(f), float(e)) for a, s, f, e in
                             zip(names[c.arm[ok]], sent[ok], c.ttft_s[ok], c.latency_s[ok])]
    spans += call_spans([*ds.probes, *ds.sentinels, *loads])
    tok = t.ok & np.isfinite(t.t_start)
    turns: list[TurnSpan] = [(str(a), float(s), float(m), float(d)) for a, s, m, d in
                             zip(names[t.arm[tok]], t.t_start[tok], t.model_s[tok], t.turn_s[tok])]
    return spans, turns


def gpu_section(ds: Dataset, gpu_records: Iterable[GpuSamplesRow],
                loads: Iterable[CallRow]) -> tuple[GpuSection, list[RunWarning]]:
    """``summary.json`` ``gpu`` and its warnings (module docstring): the readings aligned with the calls only
    where there are readings (a ledger without them never builds the calls' spans)."""
    gpu_records, header, arms = list(gpu_records), ds.header, ds.arms
    host = (header.get("host") or {}).get("gpu")
    rows = [arm_facts(header, a) for a in arms]
    tel, energy = [], []
    if gpu_records:
        all_series = series(gpu_records)
        spans, turns = dataset_spans(ds, loads)
        tel, energy = telemetry_rows(all_series, spans, arms), energy_rows(all_series, turns, arms)
    notes = []
    if not gpu_records:
        notes.append("no GPU readings in the ledger" + ("" if any(r["known"] and r["facts"].get("count") for r in rows)
                                                        else ": no arm ran on a GPU the tool could read"))
    warnings = []
    known = [r["arm"] for r in rows if r["known"]]
    if known and len(known) < len(rows):
        for r in rows:
            if not r["known"] and r["why"] != NOT_RECORDED:
                warnings.append(RunWarning(WarningKind.GPU_UNKNOWN, f"arm {r['arm']!r}: its GPUs are unknown "
                                           f"({r['why']}) while {', '.join(known)}'s are known: a comparison between "
                                           "them may be across different hardware", r["arm"]))
    # (the ledger's facts are JSON values, the summary's the values a GPU fact may take: the same record)
    section: GpuSection = {"host": cast("GpuFactsRow", dict(host)) if isinstance(host, Mapping) else None,
                           "arms": rows, "telemetry": tel, "energy": energy, "notes": notes}
    return section, warnings
