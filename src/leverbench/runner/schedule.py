"""The order in which the experiment's work is done.

``interleaved`` (default): for each repeat, every case on every arm in turn, so
that drift in the machine or the endpoint hits all arms alike.  ``blocked``:
each arm's repeats and cases together (fewer cache and engine switches, but
drift lands on one arm).  Drift sentinels open and close each arm's block (in
interleaved order the whole run is every arm's block); probes follow the turns: per repeat, each
depth (``[probes] depths``; none: the case's own prompt), each output length, each arm.

An adaptive experiment (``[experiment] adaptive``, interleaved) orders each repeat's arms
**counterbalanced** (:func:`counterbalanced`: A B for one case, B A for the next and for the same case in
the next repeat), so that a slow drift adds as much to each arm's side of a pair as to the other's, and
adds its rounds (:func:`adaptive_round`: one more repeat of the cells still open, in the same order)
after the initial repeats, before the probes and the closing sentinels.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Experiment


@dataclass(frozen=True)
class Unit:
    kind: str  # "turn" | "probe" | "sentinel"
    arm: str
    case: str
    repeat: int
    probe_tokens: int | None = None
    position: str | None = None  # sentinels: "start" | "end"
    depth: int | None = None  # probes: the prompt's length in tokens ([probes] depths); None: the case's own

    def key(self) -> tuple:
        return (self.kind, self.arm, self.case, self.repeat, self.probe_tokens, self.position, self.depth)

    @classmethod
    def of_record(cls, rec: dict) -> "Unit":
        """The unit a ledger record (turn, probe or sentinel) finished."""
        return cls(rec["kind"], rec["arm"], rec["case"], rec["repeat"], rec.get("probe_tokens"), rec.get("position"),
                   rec.get("probe_depth"))


SENTINEL_CASE = "(sentinel)"


def probe_case(spec: Experiment, sizes: dict[str, int]) -> str | None:
    """The case whose prompt the probes use: the configured one, else the longest."""
    if spec.probes is None:
        return None
    if spec.probes.case:
        return spec.probes.case
    return max(spec.cases, key=lambda c: sizes.get(c.name, 0)).name


def _sentinels(spec: Experiment, arm: str, position: str) -> list[Unit]:
    if spec.experiment.sentinel_tokens <= 0:
        return []
    return [Unit("sentinel", arm, SENTINEL_CASE, 0, spec.experiment.sentinel_tokens, position)]


def _probes(spec: Experiment, arms: list[str], case: str | None) -> list[Unit]:
    if spec.probes is None or case is None:
        return []
    return [Unit("probe", arm, case, r, n, depth=d)
            for r in range(spec.probes.repeats) for d in spec.probes.depths or [None]
            for n in spec.probes.output_tokens for arm in arms]


def counterbalanced(arms: list[str], case_index: int, repeat: int) -> list[str]:
    """The order of *arms* for one case and repeat: as given when case_index + repeat is even, reversed when
    odd (A B, B A, …: which arm goes first alternates from case to case and from repeat to repeat)."""
    return list(arms) if (case_index + repeat) % 2 == 0 else list(reversed(arms))


def _round(arms: list[str], cases: list[str], repeat: int, cells: set[tuple[str, str]] | None = None) -> list[Unit]:
    """One repeat of the turns of *cells* (default: every arm and case), counterbalanced."""
    return [Unit("turn", arm, case, repeat) for i, case in enumerate(cases)
            for arm in counterbalanced([a for a in arms if cells is None or (a, case) in cells], i, repeat)]


def adaptive_round(spec: Experiment, cells: list[tuple[str, str]], repeat: int) -> list[Unit]:
    """Round *repeat* of an adaptive run: one turn of each cell (arm, case) in *cells*, in the experiment's
    case order, each case's arms counterbalanced (:func:`counterbalanced`)."""
    return _round([a.name for a in spec.arms], [c.name for c in spec.cases], repeat, set(cells))


def build_schedule(spec: Experiment, case_sizes: dict[str, int]) -> list[Unit]:
    arms = [a.name for a in spec.arms]
    cases = [c.name for c in spec.cases]
    pcase = probe_case(spec, case_sizes)
    reps = range(spec.experiment.repeats)
    units: list[Unit] = []
    if spec.experiment.order == "interleaved":
        for arm in arms:
            units += _sentinels(spec, arm, "start")
        if spec.experiment.adaptive is not None:
            units += [u for r in reps for u in _round(arms, cases, r)]
        else:
            units += [Unit("turn", arm, case, r) for r in reps for case in cases for arm in arms]
        units += _probes(spec, arms, pcase)
        for arm in arms:
            units += _sentinels(spec, arm, "end")
    else:
        for arm in arms:
            units += _sentinels(spec, arm, "start")
            units += [Unit("turn", arm, case, r) for r in reps for case in cases]
            units += _probes(spec, [arm], pcase)
            units += _sentinels(spec, arm, "end")
    return units
