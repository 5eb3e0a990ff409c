"""The comparisons and what may stop one being cited: the arms' knobs, the pairs of arms, the repeats' cache
states, whether the tool schemas reached the model, drift (per arm, between two arms, alike for every arm),
and every reason a comparison is refused."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...json_types import JSONValue
from ...levers import used_in
from ...schema.check_rows import DriftCommon, DriftRow
from ...schema.lever_rows import EngagedRow
from ...schema.repeat_rows import RepeatsSection
from ...schema.tools_rows import ToolsRow
from ...schema.warning_kinds import RunWarning, WarningKind
from ..base import guard
from ..base.guard import CONTRADICTION, NOT_ENGAGED, REFERENCE_USED, Reason
from ..base.knobs import UNKNOWN, Comparison, comparisons
from ..experiment.drift import PairDrift, adjusted_turn_s, common, drift, pair_drifts
from ..experiment.revisits import repeats
from ..experiment.tools_reached import tools_reached, tools_rows
from .base import Inputs, Product

Knobs = dict[str, dict[str, JSONValue]]
Contradictions = dict[str, dict[str, str]]
Reasons = dict[tuple[str, str], list[Reason]]


def _knobs(i: Inputs) -> tuple[Knobs, Contradictions]:
    knobs: Knobs = {}
    contradictions: Contradictions = {}
    for a in i.ds.arms:
        knobs[a], contradictions[a] = i.ds.knobs_and_contradictions(a)
        i.warn(*(RunWarning(WarningKind.CONTRADICTION,
                            f"arm {a!r}: {x}; the comparisons in which {k} differs are not citable", a)
                 for k, x in contradictions[a].items()))
    return knobs, contradictions


#: (per arm its knobs, per arm the knobs its facts contradict, with why)
KNOBS = Product("knobs", (), _knobs)


def _comparisons(i: Inputs) -> list[Comparison]:
    knobs = i[KNOBS][0]
    comps = comparisons(i.ds.arms, i.ds.baseline, knobs, {a: i.ds.role(a) for a in i.ds.arms})
    for c in comps:
        if not c.knobs:
            i.warn(RunWarning(WarningKind.REPLICATE, f"arms {c.arm!r} and {c.vs!r} differ in no knob (same engine, "
                              "flags, requests and declared conditions): a replicate, not a lever; declare what "
                              "differs in their conditions", c.arm))
    return comps


COMPARISONS = Product("comparisons", (KNOBS,), _comparisons)


def _repeats(i: Inputs) -> tuple[RepeatsSection, Reasons]:
    rows, reasons, w = repeats(i.ds, i[COMPARISONS], i.ledger.of_kind("cache_reset"))
    i.warn(*w)
    return rows, reasons


#: (the ``repeats`` section, the comparisons it refuses with why)
REPEAT_CHECK = Product("repeat_check", (COMPARISONS,), _repeats)
REPEATS = Product("repeats", (REPEAT_CHECK,), lambda i: i[REPEAT_CHECK][0], key="repeats")


def _tools(i: Inputs) -> tuple[list[ToolsRow], Reasons]:
    rows = tools_rows(i.ledger.columns("call"), i.ledger.of_kind("load"))
    reasons, w = tools_reached(rows, i[COMPARISONS])
    i.warn(*w)
    return rows, reasons


#: (the ``tools`` section, the comparisons it refuses with why)
TOOLS_CHECK = Product("tools_check", (COMPARISONS,), _tools)
TOOLS = Product("tools", (TOOLS_CHECK,), lambda i: i[TOOLS_CHECK][0], key="tools")


def _drift(i: Inputs) -> list[DriftRow]:
    rows, w = drift(i.ds)
    i.warn(*w)
    return rows


DRIFT = Product("drift", (), _drift, key="drift")


def _pair_drift(i: Inputs) -> list[PairDrift]:
    pairs = pair_drifts(i.ds, i[COMPARISONS])
    for d in pairs:
        if d.refuses:
            i.warn(RunWarning(WarningKind.DRIFT_DIFFERENTIAL, f"{d.arm} vs {d.vs}: {d.reason}; the comparison is "
                              "not citable", d.arm))
    # interleaved and not refused (blocked order refuses an undetermined drift); fewer than 3 sentinels: drift_unknown
    undetermined = [d for d in pairs if d.undetermined and not d.refuses and d.decode.low is not None]
    if undetermined:
        tol = i.ds.settings.drift_tolerance
        i.warn(RunWarning(WarningKind.DRIFT_UNDETERMINED, "drift undetermined: the sentinels of "
                          + "; ".join(f"{d.arm} vs {d.vs} (decode {d.decode.words()})" for d in undetermined)
                          + f" cannot rule out that the two arms drifted apart by more than {tol:.0%} over the run; "
                          "no drift was seen, so the comparisons are cited, but a drift that hit one arm only would "
                          "bias them: more repeats (each adds a sentinel) tell"))
    return pairs


PAIR_DRIFT = Product("pair_drift", (COMPARISONS,), _pair_drift)
DRIFT_PAIRS = Product("drift_pairs", (PAIR_DRIFT,), lambda i: [d.as_dict() for d in i[PAIR_DRIFT]], key="drift_pairs")


def _unknown_knobs(i: Inputs) -> None:
    knobs = i[KNOBS][0]
    for a in i.ds.arms:
        unknown = sorted(k for k, v in knobs[a].items() if v == UNKNOWN)
        if unknown:
            i.warn(RunWarning(WarningKind.KNOB_UNKNOWN, f"arm {a!r}: {', '.join(unknown)} unknown (another arm's "
                              "endpoint stated it, this one's did not): its comparisons that may differ in it are "
                              "not controlled; declare it in the arm's conditions", a))


#: warnings only: the knobs an arm's endpoint did not state although another arm's did
UNKNOWN_KNOBS = Product("unknown_knobs", (KNOBS,), _unknown_knobs)


def _common(i: Inputs) -> tuple[DriftCommon, np.ndarray | None]:
    trend = common(i.ds, i[PAIR_DRIFT])
    adjusted = adjusted_turn_s(i.ds, trend)
    return {**trend, "adjusted": adjusted is not None}, adjusted


#: (the ``drift_common`` section, each turn's time with the common trend taken out, or None)
COMMON = Product("common", (PAIR_DRIFT,), _common)
DRIFT_COMMON = Product("drift_common", (COMMON,), lambda i: i[COMMON][0], key="drift_common")


def comparison_reasons(comps: list[Comparison], contradictions: Contradictions, engaged_rows: Sequence[EngagedRow],
                       pair_drift: list[PairDrift] | None = None) -> Reasons:
    """Per comparison (arm, vs): why it may not be cited beyond the guard's own rules — drift that biases it
    (:func:`.drift.pair_drift`); a knob in which the two arms differ whose value one arm contradicts; and for
    the comparison that measures a lever, that lever not engaging on the arm that has it, or the reference
    arm using it too (measured, not unknown)."""
    used = {e["arm"]: e for e in engaged_rows}
    drifts = {(d.arm, d.vs): d for d in pair_drift or []}
    out: Reasons = {}
    for c in comps:
        reasons: list[Reason] = []
        d = drifts.get((c.arm, c.vs))
        if d is not None and d.refuses:
            reasons.append((guard.DRIFT, f"drift: {d.reason}"))
        reasons += [(CONTRADICTION, f"{a}: {contradictions[a][k]}") for k in c.knobs for a in (c.vs, c.arm)
                    if k in contradictions[a]]
        if c.lever:  # whether each arm used the lever: its module says where the row holds it
            if used_in(used.get(c.arm, {}), c.lever) is False:
                reasons.append((NOT_ENGAGED, f"the lever {c.lever} did not engage on {c.arm}"))
            if used_in(used.get(c.vs, {}), c.lever) is True:
                reasons.append((REFERENCE_USED, f"the reference {c.vs} used {c.lever} too (it is meant to lack it)"))
        if reasons:
            out[(c.arm, c.vs)] = reasons
    return out
