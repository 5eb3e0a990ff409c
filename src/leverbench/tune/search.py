"""The search at one operating point (issue 40), pure: no I/O, no runner: each race is asked of a
:class:`.space.Racer`, and the search is a deterministic function of the races' results (a resumed tune gives the
racer its finished races back in the same order and re-derives the same path).

**The algorithm.**  The incumbent starts at the space's baseline.  A *sweep* takes the knobs in the space's order;
for each knob it tries the knob's other values in the file's order, allowed ones only (an excluded configuration
is never raced), each one as a candidate (the incumbent with that knob changed) raced against the incumbent.  A
configuration that was once the incumbent, the baseline among them, is no candidate: it can never be adopted again
(below), so its race could not change the answer and a sweep does not spend engine-seconds on it.  As soon as a
race says ``better`` the candidate becomes the incumbent and the sweep goes on with the next knob from it;
``same``, ``worse``, ``undecided`` and ``refused`` keep the incumbent (a refused race never makes its candidate
win, whatever its ratio).  Sweeps repeat from the new incumbent until a whole sweep adopts nothing: then no single
change of the winner to a configuration never the incumbent paid.  The **final check** is the winner's race
against each allowed one-knob neighbour (the winner the incumbent) and the baseline's race (the incumbent)
against the winner when they differ.  The sweep that adopted nothing raced the unchanged winner against every
neighbour that was never the incumbent and none won (a "better" there would have been adopted): those races are
that sweep's, reused.  A neighbour that was once the incumbent was skipped by the sweeps: its race with the
winner is reused where the path has one (the race that adopted the winner from it, say) and run in the final
check where not, as is the baseline race when the path never raced the baseline against the winner.  None of
these can change the winner; a past incumbent found "better" than the winner there is a cycle only errors make
(below), left in ``final`` for the reader to see.

**Rules that keep it finite and honest.**  A pair of configurations is raced at most once per point (either way
round); a later question about the same pair reuses that race.  The baseline is the incumbent of every race
it is in, also when the final check asks about it as the winner's neighbour: so the winner's race with the
baseline reads "baseline against winner" whenever it ran, in a sweep or in the final check
(:meth:`.space.SearchResult.against_baseline`).  A race reused the other way round never adopts (:func:`wins`):
its ``better`` is the other configuration's win, and its ``worse`` (the other configuration not decided faster by
the least effect) does not say that this one is.  A configuration that was once the incumbent is never
adopted again (verdicts that would cycle, A beats B beats C beats A, can only come from errors; the search keeps
the incumbent it has), so there are at most as many adoptions as configurations and every search ends.
**Budget**: no race starts once the engine-seconds spent reach the budget (``stopped = "budget"``, ``best`` the
incumbent then; the race that crossed it is counted whole).

**What it guarantees.**  Each step is one controlled comparison at the racer's confidence: an adoption is a
"better" verdict of a race the guard did not refuse.  The answer is a local optimum of one-knob changes as the
races saw them (barring a cycle, which ``final`` shows); a joint change of two knobs from the winner is tested
only where the path happened to measure one, and every pair of knobs for which it did not is named in
``not_excluded`` (an interaction between them, a knob that pays only with another, is not excluded).  The errors
of many races add up; the final race against the baseline is the one verdict the answer is reported with.
"""

from __future__ import annotations

import itertools
from statistics import fmean
from typing import Literal, Optional, Sequence

from .space import Config, KnobValue, Racer, RaceResult, SearchResult, Space, words

#: more pairs of knobs than this are named in one summary sentence rather than one sentence each
SENTENCES_EACH = 3


class _BudgetSpent(Exception):
    """The engine-seconds reached the budget before a race had to start."""


class _Races:
    """The races at one point, keyed by their unordered pair; runs one only when the pair has none yet."""

    def __init__(self, point: int, race: Racer, budget_engine_s: Optional[float], baseline: Config):
        self.point, self.race, self.budget, self.baseline = point, race, budget_engine_s, baseline
        self.path: list[RaceResult] = []
        self.spent = 0.0
        self._by_pair: dict[frozenset[Config], RaceResult] = {}

    def between(self, incumbent: Config, candidate: Config) -> RaceResult:
        """The race of the pair, run now if it has none (*incumbent* first, except that the baseline is always
        the incumbent of its races); :class:`_BudgetSpent` when one would have to start with the budget spent."""
        if candidate == self.baseline:
            incumbent, candidate = candidate, incumbent
        key = frozenset((incumbent, candidate))
        found = self._by_pair.get(key)
        if found is not None:
            return found
        if self.budget is not None and self.spent >= self.budget:
            raise _BudgetSpent
        r = self.race(incumbent, candidate, self.point)
        if (r.incumbent, r.candidate, r.point) != (incumbent, candidate, self.point):
            raise ValueError(f"the racer was asked for {words(incumbent)} against {words(candidate)} at "
                             f"{self.point} and answered {words(r.incumbent)} against {words(r.candidate)} at "
                             f"{r.point}")
        self._by_pair[key] = r
        self.path.append(r)
        self.spent += r.engine_s
        return r

    def measured(self) -> set[Config]:
        """Every configuration some race measured."""
        return {c for r in self.path for c in (r.incumbent, r.candidate)}


def wins(r: RaceResult, incumbent: Config) -> bool:
    """Whether race *r* makes its candidate replace *incumbent*: decided ``better`` with *incumbent* as its
    incumbent (a race the other way round, or refused, never does)."""
    return r.outcome == "better" and r.incumbent == incumbent


def candidates(space: Space, incumbent: Config, knob: str) -> list[Config]:
    """The allowed configurations that change *knob* of *incumbent*, its values in the file's order."""
    here = dict(incumbent)[knob]
    return [c for v in space.knobs[knob] if v != here if space.allowed(c := space.changed(incumbent, knob, v))]


def _check_baseline(space: Space) -> None:
    if [k for k, _ in space.baseline] != list(space.knobs):
        raise ValueError(f"the baseline ({words(space.baseline)}) must give one value per knob, in the space's "
                         f"order ({', '.join(space.knobs)})")
    if not space.allowed(space.baseline):
        raise ValueError(f"the baseline ({words(space.baseline)}) is excluded by the space's exclusions")


def search(space: Space, point: int, race: Racer, budget_engine_s: Optional[float]) -> SearchResult:
    """The configuration to run at *point* (requests in flight), found by racing one-knob changes from the
    baseline (module docstring); *budget_engine_s*: stop starting races once this many engine-seconds are spent
    (None: no budget)."""
    _check_baseline(space)
    races = _Races(point, race, budget_engine_s, space.baseline)
    incumbent = space.baseline
    been: set[Config] = {incumbent}  # every incumbent so far: never adopted again
    final: list[RaceResult] = []
    try:
        while True:
            adopted = False
            for knob in space.knobs:  # one sweep
                for candidate in candidates(space, incumbent, knob):
                    if candidate in been:
                        continue  # it could never be adopted: its race could not change the answer
                    if wins(races.between(incumbent, candidate), incumbent):
                        incumbent, adopted = candidate, True
                        been.add(candidate)
                        break
            if not adopted:
                break
        # the last sweep raced the incumbent against every neighbour never an incumbent (reused here); the races
        # with past incumbents are reused where the path has one, run now where not
        final = [races.between(incumbent, n) for n in space.neighbours(incumbent)]
        if incumbent != space.baseline and space.baseline not in space.neighbours(incumbent):
            final.append(races.between(space.baseline, incumbent))  # (a neighbour baseline's race is in already)
        return _result(space, point, races, incumbent, "converged", final)
    except _BudgetSpent:
        return _result(space, point, races, incumbent, "budget", final)


def _result(space: Space, point: int, races: _Races, best: Config, stopped: Literal["converged", "budget"],
            final: list[RaceResult]) -> SearchResult:
    return SearchResult(point=point, path=races.path, best=best, stopped=stopped, engine_s=races.spent, final=final,
                        not_excluded=not_excluded(space, best, races.measured()))


def untested_pairs(space: Space, best: Config, measured: set[Config]) -> list[tuple[str, str]]:
    """The pairs of knobs (in knob order) with an allowed configuration changing exactly those two from *best*,
    none of which is in *measured*."""
    here = dict(best)

    def others(knob: str) -> list[KnobValue]:
        return [v for v in space.knobs[knob] if v != here[knob]]

    out: list[tuple[str, str]] = []
    for a, b in itertools.combinations(space.knobs, 2):
        joint = [c for va in others(a) for vb in others(b)
                 if space.allowed(c := space.changed(space.changed(best, a, va), b, vb))]
        if joint and not any(c in measured for c in joint):
            out.append((a, b))
    return out


def not_excluded(space: Space, best: Config, measured: set[Config]) -> list[str]:
    """What the search did not test, in words: each pair of knobs whose joint change from *best* no race measured
    (one sentence each; more than :data:`SENTENCES_EACH` pairs in one sentence)."""
    pairs = untested_pairs(space, best, measured)
    if len(pairs) > SENTENCES_EACH:
        names = "; ".join(f"{a} with {b}" for a, b in pairs)
        return [f"no configuration changing two knobs of {words(best)} at once was raced for these pairs: "
                f"{names}; an interaction within any of them (a knob that pays only with the other) is not "
                "excluded"]
    return [f"{a} and {b}: no configuration changing both from {words(best)} was raced, so an interaction "
            f"between them (one paying only with the other) is not excluded" for a, b in pairs]


def grid_engine_s(space: Space, path: Sequence[RaceResult]) -> Optional[float]:
    """An estimate of what the full grid would cost at the races' confidence: the allowed configurations
    (:meth:`.space.Space.grid`) times the mean engine-seconds one configuration took in a race of *path* (each
    race's ``engine_s`` / 2: a race measures two).  The assumption: every configuration of the grid would need as
    many repeats as the races did on average, each repeat costing what the raced configurations' did, starts
    included — a grid measured once per configuration, ranked at the precision of one race.  It underestimates
    when the search kept away from slow configurations (they cost more per repeat), and overestimates when the
    races that ran long were close calls the grid would face as often.  None when *path* has no race.  Pass each
    race once (:attr:`.space.SearchResult.path` holds them all; ``final`` repeats some)."""
    if not path:
        return None
    return len(space.grid()) * fmean(r.engine_s / 2.0 for r in path)
