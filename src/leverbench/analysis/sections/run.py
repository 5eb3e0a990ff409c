"""The run as a whole: what it was (its identity, arms, cases, tolerances), its failed and retried calls, the
engines it started and the GPUs it read, the replay's fidelity to a recording, and the levers' headline."""

from __future__ import annotations

from typing import Any

from ...ledger.records import completed
from ...ledger.rows import CallRow
from ...redact import redact_tree
from ...schema.experiment_rows import ArmRow, RunRow, Tolerances
from ...schema.hardware_rows import EnginesSection, GpuSection
from ...schema.recorded_rows import RecordedSection
from ...schema.warning_kinds import RunWarning, WarningKind
from ..experiment.fidelity import fidelity
from ..experiment.levers import levers
from ..experiment.reasoning import reasoning_split
from ..hardware.engines import engines_section
from ..hardware.facts import gpu_section
from .base import Inputs, Product
from .cells import COST, MULTIPLIERS
from .comparisons import KNOBS
from .engagement import ENGAGED


def _failed(i: Inputs) -> tuple[int, int]:
    """Calls (turns' calls, probes, sentinels) that failed and were not retried; attempts that were retried
    (a probe the endpoint rejected for its length-forcing fields, sent again by prompt, is neither)."""
    t = i.ds.call
    failed = int((~t.ok & ~t.retried).sum())
    retried = int(t.retried.sum())
    for c in i.ds.probes + i.ds.sentinels:
        failed += c.get("error") is not None and not c.get("retried")
        retried += bool(c.get("retried")) and not c.get("rejected_fields")
    if retried:
        i.warn(RunWarning(WarningKind.RETRIED, f"{retried} failed attempt(s) were retried (retries = "
                          f"{i.ds.settings.if_declared('retries')}); each attempt is in the ledger, and the cells "
                          "that hold them are not citable"))
    return failed, retried


#: (calls that failed and were not retried, attempts that were retried)
FAILED = Product("failed", (), _failed)


def _engines(i: Inputs) -> EnginesSection:
    led = i.ledger
    rows, w = engines_section(i.ds.header, led.of_kind("engine_start"), led.of_kind("engine_stop"),
                              led.of_kind("engine_warmed"))
    i.warn(*w)
    return rows


ENGINES = Product("engines", (), _engines, key="engines")


def _gpu(i: Inputs) -> GpuSection:
    rows, w = gpu_section(i.ds, i.ledger.of_kind("gpu"), i.ledger.of_kind("load"))
    i.warn(*w)
    return rows


GPU = Product("gpu", (), _gpu, key="gpu")


def _recorded(i: Inputs) -> RecordedSection | None:
    section, w = fidelity(i.ledger, i.ds)
    i.warn(*w)
    return section


RECORDED = Product("recorded", (), _recorded, key="recorded", optional=True)


def _failed_companion(c: CallRow) -> bool:
    """A companion call that failed and was not retried (one that completed did not fail: it held its place in the
    load, :func:`leverbench.ledger.records.completed`)."""
    err = c.get("error")
    return err is not None and not c.get("retried") and not completed(str(err.get("class")))


def _run(i: Inputs) -> RunRow:
    ds, st, h = i.ds, i.ds.settings, i.ledger.header
    companions = list(i.ledger.of_kind("companion"))
    return {"run_id": h.get("run_id"), "name": st.name, "started_at": h.get("started_at"),
            "tool_version": h.get("tool_version"), "host": h.get("host"), "order": st.if_declared("order"),
            "repeats": st.if_declared("repeats"), "concurrency": st.in_flight,
            "calls": len(ds.call) + len(ds.probes) + len(ds.sentinels),
            "failed_calls": i[FAILED][0], "companion_calls": len(companions),
            "companion_failed": sum(map(_failed_companion, companions)),
            "resumed": sum(1 for _ in i.ledger.of_kind("resume"))}


RUN = Product("run", (FAILED,), _run, key="run")
BASELINE = Product("baseline", (), lambda i: i.ds.baseline, key="baseline")


def _arms(i: Inputs) -> list[ArmRow]:
    arms_h: Any = i.ds.header["arms"]
    knobs = i[KNOBS][0]
    return [{"name": a, "role": arms_h.get(a, {}).get("role"), "conditions": arms_h.get(a, {}).get("conditions", {}),
             "knobs": knobs[a], "discovered": redact_tree(arms_h.get(a, {}).get("discovered", {})),
             "model": arms_h.get(a, {}).get("model")}
            for a in i.ds.arms]


ARMS = Product("arms", (KNOBS,), _arms, key="arms")
LEVERS = Product("levers", (KNOBS, MULTIPLIERS, ENGAGED, COST), lambda i: levers(
    i.ds.arms, i[KNOBS][0], i[MULTIPLIERS], i[ENGAGED], i[COST]), key="levers")
CASES = Product("cases", (), lambda i: i.ds.cases, key="cases")
REASONING = Product("reasoning", (), lambda i: reasoning_split(i.ds), key="reasoning")


def _tolerances(i: Inputs) -> Tolerances:
    st = i.ds.settings
    return {"volume_cell": st.volume_tolerance_cell, "volume_total": st.volume_tolerance_total,
            "probe_agreement": st.probes.tolerance, "drift": st.drift_tolerance}


TOLERANCES = Product("tolerances", (), _tolerances, key="tolerances")
