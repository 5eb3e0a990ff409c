"""Per lever, a verdict with a stated confidence: the rounds of an adaptive run, and ``summary.json`` ``verdicts[]``.

**Which comparisons are decided** (:func:`decided_comparisons`): each controlled comparison that measures a
lever (:func:`.knobs.comparisons`, ``lever`` set), and, for an arm that none of them includes, that arm
against the baseline (so every arm is in some decided comparison while no controlled pair exists for it).

**The looks** (:func:`replay`).  An adaptive run (``[experiment] adaptive``) first runs ``repeats`` rounds
(repeat numbers 0 … repeats − 1) of every cell; look j (j = repeats, repeats + 1, …) sees the counted turns
of repeat < j.  At look j each comparison still open is decided by :func:`.sequential.decide` on its pairs
(case by case, the repeats both arms ran; a failed turn leaves its pair out) with ``repeats = j``: a
verdict stops it ("pays", "equivalent", "does not pay"), and so does j = ``max_repeats`` ("undecided").
Then the GPU-hours budget: with

    spent     = Σ over every counted turn of repeat < j (all arms, all cases)  turn_s × gpus(arm) / 3600
    next      = Σ over the cells of the comparisons still open  median turn_s (repeat < j) × gpus(arm) / 3600

a round that would take spent + next past ``max_gpu_hours`` is not run: every comparison still open stops,
"undecided".  Otherwise round j runs: one more repeat (number j) of the cells (arm, case) of the open
comparisons, and only those.  A comparison once stopped stays stopped with the pairs of its stopping look,
even when its cells get more repeats for another comparison.  Everything is a function of the ledger:
the runner asks :func:`plan_round` for round j, and a resumed run, replaying the looks, continues where it
stopped; the summary replays them to report each comparison's verdict at its stopping look.

The guard does not enter the stopping rule: :func:`.sequential.decide` stops a refused comparison exactly
when it would stop an accepted one (a refused "pays" stops as "undecided"), so only the label differs, and
the label is given by the summary with the guard's final reasons (drift and engagement are known only at
the end): a comparison whose total multiplier, or any of whose cells, the guard refuses never "pays"
(``refused``, ``reason``) — unless each refusal is for the output volume alone and has a citable equal-work
figure (:mod:`.equal_work`): then the verdict is taken on the arm's turns corrected to equal work
(``measure`` "equal work").

**Without adaptive** each comparison gets the classical t-interval of its pairs over the fixed repeats
(:func:`.sequential.fixed_interval`, looked at once) and its verdict from that interval at the default
``min_effect`` and ``confidence`` of :class:`~leverbench.config.AdaptiveSpec`; ``method`` says which.

**Costs** (per row): ``gpu_hours`` = Σ turn_s × gpus / 3600 over the two arms' turns of the comparison's
pairs (the repeats both ran, up to its stopping look); ``fixed_design_gpu_hours`` = n × Σ over cases of
(median turn_s × gpus of each arm) / 3600, with n = :func:`.sequential.fixed_design_repeats` (the repeats a
fixed design at the same confidence needs for the same verdict at ``power``, 0.90, when the true effect and
noise are the observed ones; None when none suffices).  ``ratio`` is the geometric mean of the per-case
ratios (:mod:`.sequential`), not the total multiplier (Σ reference / Σ arm) of ``multipliers[]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, Sequence

import numpy as np

from ...config.adaptive import AdaptiveSpec
from ...config.settings import RunSettings
from ...json_types import JSONValue
from ...ledger.reader import Ledger
from ...ledger.rows import RunConfigRow, RunHeaderRow
from ...schema.experiment_rows import AdaptiveBlock, Measure, MultiplierRow, RoundRow, StoppedBy, VerdictRow
from ..base.dataset import Dataset, dataset, first_seen, groups
from ..base.guard import cited
from ..base.knobs import Comparison, comparisons
from ..base.stats import median
from ..sequential.confidence import (
    OPEN,
    UNDECIDED,
    Decision,
    Judged,
    decide,
    fixed_design_repeats,
    fixed_interval,
    labelled,
    log_ratio_arrays,
    verdict_of,
)
from .equal_work import EqualWork

FIXED_POWER = 0.90
DECIDED: Final = "decided"
MAX_REPEATS: Final = "max_repeats"
MAX_GPU_HOURS: Final = "max_gpu_hours"
NOT_FINISHED: Final = "not finished"

@dataclass(frozen=True)
class Settings:
    """The adaptive settings of a run (its ``adaptive``; :class:`~leverbench.config.AdaptiveSpec`'s defaults when
    it has none: a fixed run's verdicts are taken at them) and its repeats before the first look."""

    adaptive: bool
    initial: int
    min_effect: float
    confidence: float
    max_repeats: int
    max_gpu_hours: float | None

    @classmethod
    def of(cls, settings: RunSettings) -> Settings:
        ad = settings.adaptive or AdaptiveSpec()
        return cls(adaptive=settings.adaptive is not None, initial=settings.repeats, min_effect=ad.min_effect,
                   confidence=ad.confidence, max_repeats=ad.max_repeats, max_gpu_hours=ad.max_gpu_hours)

    @classmethod
    def of_config(cls, config: RunConfigRow) -> Settings:
        """The settings of a ledger header's ``config``."""
        return cls.of(RunSettings.of_header(config))


def decided_comparisons(comps: list[Comparison], baseline: str) -> list[Comparison]:
    """The comparisons of *comps* that measure a lever, then each other arm none of them includes against
    *baseline* (module docstring)."""
    levers = [c for c in comps if c.lever]
    covered = {a for c in levers for a in (c.arm, c.vs)}
    return levers + [c for c in comps if not c.lever and c.vs == baseline and c.arm not in covered]


@dataclass(frozen=True)
class _Cell:
    """One cell's counted turns as arrays, in ledger order: repeat (each once), turn_s, ok."""

    repeat: np.ndarray
    secs: np.ndarray
    ok: np.ndarray

    def take(self, rows: np.ndarray) -> _Cell:
        return _Cell(self.repeat[rows], self.secs[rows], self.ok[rows])

    def before(self, before: int | None) -> _Cell:
        """Its turns of repeat < *before* (None: all)."""
        return self if before is None else self.take(self.repeat < before)

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        """(repeats, seconds: NaN where the turn failed), as :func:`.sequential.log_ratio_arrays` takes them."""
        return self.repeat, np.where(self.ok, self.secs, np.nan)

    def median(self) -> float:
        """Median turn_s of the successful turns (of all when none succeeded); 0 without a turn."""
        ok = self.secs[self.ok] if self.ok.any() else self.secs
        return median(ok) if len(ok) else 0.0


_NO_TURNS = _Cell(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, bool))


@dataclass(frozen=True)
class TurnLog:
    """The counted turns by cell: (arm, case) → :class:`_Cell`, the cells in the order of their first turn."""

    cells: dict[tuple[str, str], _Cell]

    def cell(self, arm: str, case: str, before: int | None = None) -> _Cell:
        """The cell's turns (of repeat < *before*); none when it has none."""
        return self.cells.get((arm, case), _NO_TURNS).before(before)


def turn_log(ds: Dataset) -> TurnLog:
    """The counted turns of *ds* by cell and repeat: (turn_s, ok); turn_s 0 where the record has none; a repeat
    met again in a cell is one turn, its last, where the cell met it first."""
    t = ds.turn
    scheduled = ~np.isnan(t.repeat)  # no repeat number: not a unit of the schedule
    by = groups(np.where(scheduled, ds.cell_code(t.arm, t.case), -1), ds.n_cells)
    secs = np.where(np.isnan(t.turn_s), 0.0, t.turn_s)
    cells = {}
    for code in first_seen(by):  # (the cells in ledger order, each cell's turns too)
        g = by[code]
        repeat = np.trunc(t.repeat[g]).astype(np.int64)
        if len(np.unique(repeat)) < len(g):
            g = g[list(dict(zip(repeat.tolist(), range(len(g)))).values())]  # each repeat's last, at its first place
            repeat = np.trunc(t.repeat[g]).astype(np.int64)
        cells[ds.arm_names[code // len(ds.case_names)], ds.case_names[code % len(ds.case_names)]] = \
            _Cell(repeat, secs[g], t.ok[g].astype(bool))
    return TurnLog(cells)


def repeats_run(log: TurnLog, cases: list[str]) -> int:
    """One past the highest repeat number of a turn of *cases* (0: none)."""
    return max((int(cell.repeat.max()) for (_, c), cell in log.cells.items() if len(cell.repeat) and c in cases),
               default=-1) + 1


def gpus_of(ds: Dataset) -> dict[str, float]:
    """Per arm, its ``gpus`` condition (default 1)."""
    return {a: _number(ds.conditions(a).get("gpus", 1)) for a in ds.arm_names}


def _number(v: JSONValue) -> float:
    """A condition's number as a float (the ledger's schema checks ``gpus`` is one); float() of anything else
    fails, as it did."""
    if isinstance(v, (int, float, str)):
        return float(v)
    raise TypeError(f"float() argument must be a string or a real number, not {type(v).__name__!r}")


def pairs(log: TurnLog, comp: Comparison, cases: list[str], before: int) -> dict[str, list[float]]:
    """The comparison's log-ratios log(T_vs / T_arm) by case, from the repeats < *before*."""
    return {c: log_ratio_arrays(*log.cell(comp.vs, c, before).times(), *log.cell(comp.arm, c, before).times())
            for c in cases}


def spent_gpu_hours(log: TurnLog, gpus: dict[str, float], before: int | None = None) -> float:
    """Σ turn_s × gpus(arm) / 3600 over every counted turn (of repeat < *before*)."""
    return _sum(np.concatenate([np.zeros(0)] + [cell.before(before).secs * gpus.get(arm, 1.0)
                                                for (arm, _), cell in log.cells.items()])) / 3600.0


def _cell_median(log: TurnLog, arm: str, case: str, before: int) -> float:
    """Median turn_s of the cell's successful turns of repeat < *before* (all its turns when none succeeded)."""
    return log.cell(arm, case, before).median()


def cells_of(comps: list[Comparison], cases: list[str]) -> list[tuple[str, str]]:
    """The cells (arm, case) of *comps*, each once."""
    return list(dict.fromkeys((a, c) for comp in comps for a in (comp.vs, comp.arm) for c in cases))


def round_gpu_hours(log: TurnLog, gpus: dict[str, float], cells: list[tuple[str, str]], before: int) -> float:
    """What one more repeat of *cells* is expected to take: Σ median turn_s × gpus / 3600."""
    return sum(_cell_median(log, a, c, before) * gpus.get(a, 1.0) for a, c in cells) / 3600.0


@dataclass
class Stop:
    """Where a comparison stopped: its look, the decision there, and why (decided, max_repeats, max_gpu_hours,
    or not finished: the ledger ends with it open)."""

    look: int
    decision: Decision
    why: StoppedBy


@dataclass
class Replay:
    """The looks of an adaptive run: per comparison where it stopped; the rounds past the initial repeats (their
    repeat number and the comparisons they served); ``next_cells``: those of the round after the last look
    (empty: the run is done); ``last_look``: the look the replay ended at."""

    comparisons: list[Comparison]
    last_look: int
    stops: dict[Comparison, Stop] = field(default_factory=dict)
    rounds: list[RoundRow] = field(default_factory=list)
    next_cells: list[tuple[str, str]] = field(default_factory=list)
    stopped_by: StoppedBy | None = None


def _look(log: TurnLog, comp: Comparison, cases: list[str], j: int, st: Settings, budget_spent: bool = False,
          refused: str | None = None) -> Decision:
    return decide(pairs(log, comp, cases, j), repeats=j, max_repeats=st.max_repeats, min_effect=st.min_effect,
                  confidence=st.confidence, budget_spent=budget_spent, refused=refused, power=FIXED_POWER)


def all_comparisons(ds: Dataset) -> list[Comparison]:
    """The summary's comparisons (:func:`.knobs.comparisons`) of *ds*'s arms."""
    return comparisons(ds.arms, ds.baseline, {a: ds.knobs(a) for a in ds.arms}, {a: ds.role(a) for a in ds.arms})


def replay(ds: Dataset, st: Settings, upto: int | None = None, comps: list[Comparison] | None = None) -> Replay:
    """The looks j = initial … *upto* (default: one past the last repeat the ledger holds) of the module
    docstring, for the comparisons :func:`decided_comparisons` takes from *comps* (default: all of *ds*'s);
    at the last look of a finished run every comparison is stopped."""
    comps = decided_comparisons(all_comparisons(ds) if comps is None else comps, ds.baseline)
    log, gpus, cases = turn_log(ds), gpus_of(ds), ds.cases
    upto = max(st.initial, repeats_run(log, cases)) if upto is None else upto
    out = Replay(comps, upto)
    for j in range(st.initial, upto + 1):
        out.last_look = j
        still = [c for c in comps if c not in out.stops]
        decisions = {c: _look(log, c, cases, j, st) for c in still}
        going = [c for c in still if decisions[c]["verdict"] == OPEN]
        cells = cells_of(going, cases)
        if going and st.max_gpu_hours is not None and (
                spent_gpu_hours(log, gpus, j) + round_gpu_hours(log, gpus, cells, j) > st.max_gpu_hours):
            decisions.update({c: _look(log, c, cases, j, st, budget_spent=True) for c in going})
            out.stopped_by, going, cells = MAX_GPU_HOURS, [], []
        for c in still:
            if decisions[c]["stop"]:
                undecided = decisions[c]["verdict"] == UNDECIDED
                why: StoppedBy = (MAX_GPU_HOURS if out.stopped_by == MAX_GPU_HOURS and undecided
                                  else MAX_REPEATS if undecided else DECIDED)
                out.stops[c] = Stop(j, decisions[c], why)
        out.next_cells = cells
        if not going:
            out.stopped_by = out.stopped_by or (MAX_REPEATS if any(s.why == MAX_REPEATS for s in out.stops.values())
                                                else DECIDED)
            break
        if j < upto:
            out.rounds.append({"repeat": j, "comparisons": [f"{c.arm} vs {c.vs}" for c in going], "cells": len(cells)})
    return out


def _corrected_log(log: TurnLog, arm: str, ew: EqualWork) -> TurnLog:
    """*log* with *arm*'s turns that have an equal-work correction (:mod:`.equal_work`) corrected by it."""
    by_case: dict[str, dict[int, float]] = {}
    for (case, rep), d in ew.deltas().items():
        by_case.setdefault(case, {})[rep] = d
    out = dict(log.cells)
    for case, deltas in by_case.items():
        if (cell := out.get((arm, case))) is not None:
            hit = np.array([r in deltas for r in cell.repeat.tolist()], dtype=bool)
            secs = cell.secs.copy()
            secs[hit] += np.array([deltas[r] for r in cell.repeat[hit].tolist()], dtype=float)
            out[(arm, case)] = _Cell(cell.repeat, secs, cell.ok)
    return TurnLog(out)


@dataclass(frozen=True)
class RoundPlan:
    """Round *repeat* of an adaptive run: the cells (arm, case) to repeat once more; none when the run is done."""

    repeat: int
    cells: list[tuple[str, str]]
    stopped_by: StoppedBy | None


def plan_round(ledger: Ledger[RunHeaderRow], repeat: int) -> RoundPlan:
    """What round *repeat* (≥ the run's initial repeats) runs, from the ledger's turns of repeat < *repeat*
    (:func:`replay` up to look *repeat*)."""
    ds = dataset(ledger)
    rp = replay(ds, Settings.of(ds.settings), upto=repeat)
    return RoundPlan(repeat, rp.next_cells, rp.stopped_by)


def _costs(log: TurnLog, gpus: dict[str, float], comp: Comparison, cases: list[str], look: int,
           fixed_n: int | None) -> tuple[float, float | None, dict[str, int]]:
    """(gpu_hours, fixed_design_gpu_hours, repeats per case) of one comparison at its look (module docstring)."""
    spent, per_repeat, repeats = 0.0, 0.0, {}
    for case in cases:
        mine, ref = log.cell(comp.arm, case, look), log.cell(comp.vs, case, look)
        both, at_mine, at_ref = np.intersect1d(mine.repeat, ref.repeat, assume_unique=True, return_indices=True)
        repeats[case] = len(both)
        for a, cell, at in ((comp.arm, mine, at_mine), (comp.vs, ref, at_ref)):
            spent += _sum(cell.secs[at]) * gpus.get(a, 1.0)  # (the repeats both ran, in order)
            per_repeat += cell.median() * gpus.get(a, 1.0)
    return spent / 3600.0, (fixed_n * per_repeat / 3600.0 if fixed_n is not None else None), repeats


def _sum(x: np.ndarray) -> float:
    """Σ x added left to right from 0, as Python's sum adds (numpy's sum adds in pairs: another last bit)."""
    return float(np.cumsum(np.concatenate(([0.0], x)))[-1])


def _fixed_decision(log: TurnLog, comp: Comparison, cases: list[str], st: Settings, look: int,
                    refused: str | None) -> Judged:
    """A fixed design's row: the t-interval of all its pairs, looked at once, and the verdict it gives."""
    iv = fixed_interval(pairs(log, comp, cases, look), st.confidence)
    found, reason = labelled(verdict_of(iv.ratio_low, iv.ratio_high, st.min_effect) if iv.df >= 1 else None,
                             refused, iv)  # no spread: no interval, no verdict, and the reason says why
    fixed = None
    if iv.sd is not None and iv.ratio is not None:
        fixed = fixed_design_repeats(iv.estimate, iv.sd, len(iv.pairs) - len(iv.missing_cases), st.min_effect,
                                     st.confidence, FIXED_POWER, found if found != UNDECIDED else None,
                                     weights=iv.weights)
    return {"verdict": found or UNDECIDED, "ratio": iv.ratio, "low": iv.ratio_low, "high": iv.ratio_high,
            "pairs": iv.pairs, "sd": iv.sd, "reason": reason, "fixed_design_repeats": fixed}


def _refusal(rows: list[MultiplierRow]) -> str | None:
    """Why a comparison may not be cited, from its multiplier rows: its total's reasons, then each refused
    cell's (a cell the guard refuses refuses the verdict too: the verdict weighs every case alike), and why
    its equal-work figure may not be cited either where it has one."""
    parts = []
    for m in sorted(rows, key=lambda m: m["scope"] != "total"):
        if not m["citable"] and m["reason"] is not None:  # (a refused row says why: the guard's judgement)
            parts.append(m["reason"] if m["scope"] == "total" else f"{m['scope'].removeprefix('case:')}: "
                         f"{m['reason']}")
    total = next((m for m in rows if m["scope"] == "total"), None)
    ew = total.get("equal_work") if total is not None else None
    if parts and ew and not ew.get("citable"):
        parts.append(f"at equal work not citable either: {ew['reason']}")
    return "; ".join(dict.fromkeys(parts)) or None


def _at_equal_work(rows: list[MultiplierRow], ew: EqualWork | None) -> bool:
    """Whether the comparison's refused rows are all refused for their volume alone, each with a citable
    equal-work figure, and every corrected turn keeps a time (then the verdict is taken on the arm's turns
    corrected to equal work)."""
    refused = [m for m in rows if not m["citable"]]
    return (ew is not None and bool(refused) and bool((ew.corrected > 0).all())
            and all(cited(m)[2] == "equal work" for m in refused))  # (refused for volume alone, citable at equal work)


def verdicts(ds: Dataset, comps: list[Comparison], mults: Sequence[MultiplierRow],
             equal: list[EqualWork] | None = None) -> tuple[list[VerdictRow], AdaptiveBlock | None]:
    """``summary.json`` ``verdicts[]`` and ``adaptive`` (None for a run with fixed repeats): one row per decided
    comparison — {arm, vs, lever, verdict, ratio, low, high, confidence, method, repeats (per case), pairs (per
    case), looks, stopped_by, gpu_hours, fixed_design_repeats, fixed_design_gpu_hours, fixed_design_power,
    min_effect, refused, reason, measure}.  *comps*: the summary's comparisons; *mults*: its multipliers — a
    comparison whose total row or any of whose cell rows the guard refuses is passed to the decision as
    ``refused`` (it never "pays"), unless every refusal is for the output volume alone with a citable
    equal-work figure (*equal*, :mod:`.equal_work`): then its pairs are taken with the arm's turns corrected
    to the reference's work (``measure`` "equal work")."""
    st = Settings.of(ds.settings)
    by: dict[tuple[str, str], list[MultiplierRow]] = {}
    for m in mults:
        by.setdefault((m["arm"], m["vs"]), []).append(m)
    ew = {(e.arm, e.vs): e for e in equal or []}
    base_log, gpus, cases = turn_log(ds), gpus_of(ds), ds.cases
    rp = replay(ds, st, comps=comps) if st.adaptive else None
    rows: list[VerdictRow] = []
    for comp in rp.comparisons if rp else decided_comparisons(comps, ds.baseline):
        mine = by.get((comp.arm, comp.vs), [])
        measure: Measure
        d: Judged
        stopped_by: StoppedBy | None
        method: Literal["confidence sequence", "fixed t-interval"]
        log, measure, why = base_log, "measured", _refusal(mine)
        if _at_equal_work(mine, ew.get((comp.arm, comp.vs))):
            log, measure, why = _corrected_log(base_log, comp.arm, ew[(comp.arm, comp.vs)]), "equal work", None
        if rp is not None:
            stop = rp.stops.get(comp)
            look = stop.look if stop else rp.last_look
            # at equal work the pairs differ from those the run stopped on: the look is final all the same
            final = stop is None or stop.why != DECIDED or measure == "equal work"
            d = _look(log, comp, cases, look, st, budget_spent=final, refused=why)
            stopped_by, method = (stop.why if stop else NOT_FINISHED), "confidence sequence"
        else:
            look = repeats_run(log, cases)
            d, stopped_by, method = _fixed_decision(log, comp, cases, st, look, why), None, "fixed t-interval"
        gpu_h, fixed_gpu_h, repeats = _costs(base_log, gpus, comp, cases, look, d["fixed_design_repeats"])
        rows.append({"arm": comp.arm, "vs": comp.vs, "lever": comp.lever, "knobs": list(comp.knobs),
                     "verdict": d["verdict"], "ratio": d["ratio"], "low": d["low"], "high": d["high"],
                     "confidence": st.confidence, "min_effect": st.min_effect, "method": method,
                     "repeats": repeats, "pairs": d["pairs"], "looks": look, "stopped_by": stopped_by,
                     "gpu_hours": gpu_h, "fixed_design_repeats": d["fixed_design_repeats"],
                     "fixed_design_gpu_hours": fixed_gpu_h, "fixed_design_power": FIXED_POWER,
                     "refused": why, "reason": d["reason"], "measure": measure})
    if rp is None:
        return rows, None
    block: AdaptiveBlock = {"min_effect": st.min_effect, "confidence": st.confidence, "max_repeats": st.max_repeats,
             "max_gpu_hours": st.max_gpu_hours, "initial_repeats": st.initial, "rounds": rp.rounds,
             "stopped_by": rp.stopped_by if not rp.next_cells else NOT_FINISHED,
             "gpu_hours": spent_gpu_hours(log, gpus)}
    return rows, block
