"""The order in which the experiment's work is done.

``interleaved`` (default): for each repeat (a **round**), every case on every arm in turn, so that drift
in the machine or the endpoint hits all arms alike.  ``blocked``: each arm's repeats and cases together
(fewer cache and engine switches, but drift lands on one arm).

**Arm order** (:func:`arm_order`): within a round, each case's arms follow the rows of a Williams design
(a balanced Latin square: n rows for n arms when n is even, 2n — the square and its mirror — when n is
odd): case c of C, in round r, takes row (r + ⌊c·rows / C⌋) mod rows.  Each case walks the rows one a round
(so a case's own pairs see every order in turn), and the cases start spread evenly over the rows, so that a
run's cells use the rows as evenly as they can (3 arms, 2 cases, 3 repeats: each of the 6 rows once; starting
case c at row c instead used rows 1 and 2 twice and 4 and 5 never).  Over its rows every arm takes every
position equally often and every arm comes right after every other arm equally often, so a position effect
(the first turn after a switch of engine is slower, say) and a slow drift add as much to one side of every
pair as to the other, and every two arms run next to each other (A B C / C B A would never put A beside C).
With two arms it is A B, B A, …

**Drift sentinels** (a short fixed call of ``sentinel_tokens`` forced tokens on a prompt no cache holds):
in interleaved order, one for every arm at the start of every round (``position`` "start", ``repeat`` r:
arms in the round's first row order) and one for every arm at the end (``position`` "end"), so each arm
has a series over the run that the analysis (:mod:`leverbench.analysis.experiment.drift`) judges against its own
scatter; in blocked order one for every arm before every repeat of each arm's block (``repeat`` = the
block's index × repeats + the repeat) and at the end, so that each arm's series spans the whole run, its own
block and the others'.  Probes follow the
turns: per repeat, each depth (``[probes] depths``; none: the case's own prompt), each output length, each
arm (in blocked order, within the arm's block).

An adaptive experiment (``[experiment] adaptive``, interleaved) adds its rounds (:func:`adaptive_round`:
one more repeat of the cells still open, opened by a sentinel of each arm in it) after the initial
repeats, before the probes and the closing sentinels.

**Engines one at a time** (``[experiment] engines = "one at a time"``, :func:`build_blocks`): each round is
one **block** per arm — the arm's engine started and warmed, its round-start sentinel, its turn of every case
(the experiment's case order), its engine stopped — and the arms' blocks follow :func:`block_order`: the rows
of the Williams design, each row followed by its mirror (A B C, C B A, B C A, A C B, …), so that every two
rounds put every arm at the same mean place and a slow drift adds as much to both sides of every pair; over
all the rows every arm also follows every other equally often.  After the rounds (and an adaptive run's extra
rounds, regrouped the same way: :func:`blocks_of`), a **closing** block per arm: its probes, its closing
sentinel and its load stages.  The units and their keys are the interleaved order's, so the sentinels pair by
round as before (:mod:`leverbench.analysis.experiment.drift`) and a resumed run skips what is done.
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
    block: str | None = None  # blocked order: the arm whose block the unit belongs to (not part of its key)

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


def _sentinel(spec: Experiment, arm: str, position: str, repeat: int = 0, block: str | None = None) -> list[Unit]:
    if spec.experiment.sentinel_tokens <= 0:
        return []
    return [Unit("sentinel", arm, SENTINEL_CASE, repeat, spec.experiment.sentinel_tokens, position, block=block)]


def _probes(spec: Experiment, arms: list[str], case: str | None, block: str | None = None) -> list[Unit]:
    if spec.probes is None or case is None:
        return []
    return [Unit("probe", arm, case, r, n, depth=d, block=block)
            for r in range(spec.probes.repeats) for d in spec.probes.depths or [None]
            for n in spec.probes.output_tokens for arm in arms]


def williams_rows(n: int) -> list[list[int]]:
    """The rows of a Williams design for *n* treatments (Williams, "Experimental designs balanced for the
    estimation of residual effects of treatments", Aust. J. Sci. Res. A 2, 1949): the first row 0, 1, n−1,
    2, n−2, …, row i that row + i (mod n); for odd n the mirror of each row follows (2n rows).  Each
    treatment takes each position, and follows each other treatment, equally often over the rows."""
    if n <= 1:
        return [list(range(n))]
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 else rows


def arm_order(arms: list[str], case_index: int, repeat: int, cases: int | None = None) -> list[str]:
    """The order of *arms* for case *case_index* of *cases* in round *repeat*: row (repeat + ⌊case_index ·
    rows / cases⌋) mod rows of :func:`williams_rows` (see the module docstring; *cases* None: the case's
    start row is its index)."""
    rows = williams_rows(len(arms))
    start = case_index if cases is None else case_index * len(rows) // cases
    return [arms[k] for k in rows[(repeat + start) % len(rows)]]


counterbalanced = arm_order  # the name the adaptive rounds' docs and tests use


def _round(arms: list[str], cases: list[str], repeat: int, cells: set[tuple[str, str]] | None = None) -> list[Unit]:
    """One repeat of the turns of *cells* (default: every arm and case), in :func:`arm_order`."""
    return [Unit("turn", arm, case, repeat) for i, case in enumerate(cases)
            for arm in arm_order([a for a in arms if cells is None or (a, case) in cells], i, repeat, len(cases))]


def _round_sentinels(spec: Experiment, arms: list[str], repeat: int) -> list[Unit]:
    """A sentinel of each of *arms* opening round *repeat*, in the order of the round's first row."""
    return [u for arm in arm_order(arms, 0, repeat, len(spec.cases)) for u in _sentinel(spec, arm, "start", repeat)]


def adaptive_round(spec: Experiment, cells: list[tuple[str, str]], repeat: int) -> list[Unit]:
    """Round *repeat* of an adaptive run: a sentinel of each arm that has a cell in *cells*, then one turn of
    each cell (arm, case) in *cells*, in the experiment's case order, each case's arms in :func:`arm_order`.  A
    recorded turn's cell brings the recording's earlier turns on its arm with it: a recorded turn meets what its
    recording's earlier turns of the round left (runner.cache_state), so they run before it again."""
    arms = [a.name for a in spec.arms]
    names = [c.name for c in spec.cases]
    recording = {c.name: c.recorded_from for c in spec.cases}
    want = set(cells)
    for arm, case in cells:
        if recording.get(case) is not None and case in names:
            want |= {(arm, c) for c in names[:names.index(case)] if recording[c] == recording[case]}
    used = [a for a in arms if any(a == arm for arm, _ in want)]
    return _round_sentinels(spec, used, repeat) + _round(arms, names, repeat, want)


def block_rows(n: int) -> list[list[int]]:
    """:func:`williams_rows` reordered so that each row is followed by its mirror image (for even *n* the
    mirror is itself a row, n/2 further on): every even number of rounds then puts every arm at the same mean
    place."""
    rows = williams_rows(n)
    out: list[list[int]] = []
    for row in rows:
        if row not in out:
            out.append(row)
            if row[::-1] not in out:
                out.append(row[::-1])
    return out


def block_order(arms: list[str], repeat: int) -> list[str]:
    """The order of the arms' blocks in round *repeat* (engines one at a time): row *repeat* mod rows of
    :func:`block_rows`."""
    rows = block_rows(len(arms))
    return [arms[k] for k in rows[repeat % len(rows)]] if arms else []


@dataclass(frozen=True)
class Block:
    """One arm's share of a round with its engine to itself (engines one at a time): ``part`` "round" (its
    sentinel and turns of round ``repeat``) or "closing" (its probes and closing sentinel; its load stages
    run after them)."""

    arm: str
    repeat: int
    part: str
    units: tuple[Unit, ...]


def blocks_of(arms: list[str], units: list[Unit], repeat: int, part: str = "round") -> list[Block]:
    """*units* of one round grouped by arm, each arm's in their order, the arms in :func:`block_order` of the
    arms among *arms* that have any."""
    used = [a for a in arms if any(u.arm == a for u in units)]
    return [Block(a, repeat, part, tuple(u for u in units if u.arm == a)) for a in block_order(used, repeat)]


def build_blocks(spec: Experiment, case_sizes: dict[str, int]) -> list[Block]:
    """The blocks of the initial rounds and the closing blocks (module docstring); the closing blocks come in
    the order of round ``repeats``, and hold every arm, whether it has probes or not (its load stages)."""
    arms = [a.name for a in spec.arms]
    cases = [c.name for c in spec.cases]
    pcase = probe_case(spec, case_sizes)
    out: list[Block] = []
    for r in range(spec.experiment.repeats):
        out += [Block(arm, r, "round", tuple(_sentinel(spec, arm, "start", r) + [Unit("turn", arm, case, r)
                                                                                for case in cases]))
                for arm in block_order(arms, r)]
    closing = spec.experiment.repeats
    out += [Block(arm, closing, "closing", tuple(_probes(spec, [arm], pcase) + _sentinel(spec, arm, "end")))
            for arm in block_order(arms, closing)]
    return out


def build_schedule(spec: Experiment, case_sizes: dict[str, int]) -> list[Unit]:
    arms = [a.name for a in spec.arms]
    cases = [c.name for c in spec.cases]
    pcase = probe_case(spec, case_sizes)
    reps = range(spec.experiment.repeats)
    units: list[Unit] = []
    if spec.experiment.order == "interleaved":
        for r in reps:
            units += _round_sentinels(spec, arms, r) + _round(arms, cases, r)
        units += _probes(spec, arms, pcase)
        units += [u for arm in arms for u in _sentinel(spec, arm, "end")]
    else:
        for b, arm in enumerate(arms):
            for r in reps:
                k = b * len(reps) + r
                units += [u for other in arm_order(arms, 0, k) for u in _sentinel(spec, other, "start", k, block=arm)]
                units += [Unit("turn", arm, case, r, block=arm) for case in cases]
            units += _probes(spec, [arm], pcase, block=arm)
        units += [u for arm in arms for u in _sentinel(spec, arm, "end", block="(end)")]
    return units
