"""The tune's search (``leverbench.tune.search``, issue 40), pure: no runner, each race answered by a model of one.

1. Hand-made spaces with a scripted racer (a dict of outcomes): the path is what the rules say — adopt on
   "better" and go on with the next knob, no pair raced twice, exclusions never raced, no past incumbent raced in
   a sweep, the final check (running the winner's missing races), the budget, a refused race never makes its
   candidate win (even with the best ratio of all).
2. A racer built from the simulator's own formula (``true_turn_seconds``, the ``expected`` drafter model):
   K ∈ 0..8 × slots ∈ {1, 2, 4}, p = 0.75, c = 0.15, a batch slowdown s = 0.05, so the best K is 3 alone and 2 at
   four in flight (tests/test_sim_drafter.py); each race draws per-case paired log-ratios around the true one and
   stops at the sequential verdict (see :class:`SimRacer`).  Over 20 seeds at 1 and 4 in flight the answer is
   within 3 % of the grid's true optimum; the issue's "at most half the grid's engine-seconds" does not hold on
   this space (an expected failure, with the measured figures: :func:`test_the_search_spends_at_most_half_the_grid`).
3. A planted interaction (a knob that pays only with another) is found or named in ``not_excluded``.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import numpy as np
import pytest

from leverbench.analysis.base.guard import MIN_REPEATS
from leverbench.analysis.sequential.confidence import cs_half_width, decide, matched, stream_g, verdict_codes
from leverbench.engines.simulator import SimConfig, true_turn_seconds
from leverbench.tune.search import grid_engine_s, search, untested_pairs, wins
from leverbench.tune.space import Config, KnobValue, Outcome, RaceResult, SearchResult, Space, words

# ---------------------------------------------------------------- 1. scripted races


def space_ab(exclude: tuple[Mapping[str, KnobValue], ...] = ()) -> Space:
    """a ∈ {0, 1, 2} × b ∈ {0, 1}, baseline a=0 b=0."""
    return Space(knobs={"a": (0, 1, 2), "b": (0, 1)}, baseline=(("a", 0), ("b", 0)), exclude=exclude)


def cfg(**values: KnobValue) -> Config:
    return tuple(values.items())


@dataclass
class Scripted:
    """Answers a race from *script* (``"a=0 b=0 > a=1 b=0"``: incumbent > candidate → outcome, or (outcome,
    ratio)); every other race "worse" at ratio 0.9.  Each race costs *cost* engine-seconds; *calls* records them."""

    script: Mapping[str, Outcome | tuple[Outcome, float]] = field(default_factory=dict)
    cost: float = 10.0
    calls: list[tuple[Config, Config, int]] = field(default_factory=list)

    def __call__(self, incumbent: Config, candidate: Config, point: int) -> RaceResult:
        self.calls.append((incumbent, candidate, point))
        said = self.script.get(f"{words(incumbent)} > {words(candidate)}", "worse")
        outcome, ratio = said if isinstance(said, tuple) else (said, 0.9)
        return RaceResult(incumbent, candidate, point, outcome, ratio, ratio * 0.95, ratio * 1.05, self.cost, 4)


def pairs(result: SearchResult) -> list[str]:
    return [f"{words(r.incumbent)} > {words(r.candidate)}" for r in result.path]


def test_adopts_on_better_and_goes_on_with_the_next_knob():
    racer = Scripted({"a=0 b=0 > a=1 b=0": "better", "a=1 b=0 > a=2 b=0": "same"})
    result = search(space_ab(), 1, racer, None)
    # sweep 1: a=1 adopted at once (a=2 not tried from the baseline), then b from a=1; sweep 2: a=0 is the
    # baseline's race, reused; a=2 raced, b reused; nothing adopted: converged
    assert pairs(result) == ["a=0 b=0 > a=1 b=0", "a=1 b=0 > a=1 b=1", "a=1 b=0 > a=2 b=0"]
    assert result.best == cfg(a=1, b=0) and result.stopped == "converged"
    assert len(racer.calls) == len(set(racer.calls)) == 3 and result.engine_s == 30.0
    # the final check: the winner's race with each neighbour (reused), the baseline's among them
    assert [words(r.candidate) for r in result.final] == ["a=1 b=0", "a=2 b=0", "a=1 b=1"]
    against = result.against_baseline(result.path[0].incumbent)
    assert against is result.path[0] and against.outcome == "better"


def test_same_worse_undecided_and_refused_keep_the_incumbent():
    script: dict[str, Outcome | tuple[Outcome, float]] = {
        "a=0 b=0 > a=1 b=0": "same", "a=0 b=0 > a=2 b=0": "undecided", "a=0 b=0 > a=0 b=1": "worse"}
    result = search(space_ab(), 1, Scripted(script), None)
    assert result.best == cfg(a=0, b=0) and result.stopped == "converged"
    assert len(result.path) == 3 and result.final == result.path  # the baseline won: no race against itself
    assert result.against_baseline(cfg(a=0, b=0)) is None
    assert result.not_excluded == ["a and b: no configuration changing both from a=0 b=0 was raced, so an "
                                   "interaction between them (one paying only with the other) is not excluded"]


def test_a_refused_race_never_wins_even_with_the_best_ratio():
    """a=1 is refused with the best ratio of all (3x, its interval far above 1); a=2 pays 1.2x: a=2 wins."""
    script: dict[str, Outcome | tuple[Outcome, float]] = {
        "a=0 b=0 > a=1 b=0": ("refused", 3.0), "a=0 b=0 > a=2 b=0": ("better", 1.2),
        "a=2 b=0 > a=1 b=0": ("refused", 2.5)}
    result = search(space_ab(), 1, Scripted(script), None)
    assert result.best == cfg(a=2, b=0)
    assert all(r.candidate != cfg(a=1, b=0) or r.outcome == "refused" for r in result.path)
    everything_refused = search(space_ab(), 1, Scripted({p: ("refused", 5.0) for p in pairs(result)}), None)
    assert everything_refused.best == cfg(a=0, b=0)


def test_exclusions_are_never_raced_nor_named():
    space = space_ab(exclude=({"a": 1, "b": 1}, {"a": 2, "b": 1}))
    racer = Scripted({"a=0 b=0 > a=1 b=0": "better"})
    result = search(space, 1, racer, None)
    raced = {c for r in result.path for c in (r.incumbent, r.candidate)}
    assert not any(not space.allowed(c) for c in raced) and cfg(a=1, b=1) not in raced
    # from a=1 b=0 the only allowed joint change of a and b is a=0 b=1, never raced (a=1 was adopted before b was
    # tried from the baseline): named; with it raced (b=1 tried first), nothing is left untested
    assert result.best == cfg(a=1, b=0) and [s[:12] for s in result.not_excluded] == ["a and b: no "]
    measured = {c for r in result.path for c in (r.incumbent, r.candidate)} | {cfg(a=0, b=1)}
    assert untested_pairs(space, result.best, measured) == []
    assert grid_engine_s(space, result.path) == 4 * 10.0 / 2  # 4 allowed configurations × 5 engine-s each


def test_a_pair_is_raced_once_and_a_past_incumbent_is_never_adopted_again():
    """a ∈ 0..3; a=1 beats a=0, a=2 beats a=1, a=3 beats a=2, and a=1 "beats" a=3 (a cycle only errors make):
    a=1 was the incumbent once, so it is not adopted again and the search ends at a=3.  The sweeps never race a
    past incumbent (a=0 against a=2 could not change the answer: not run); the final check runs the winner's races
    with the past incumbents it has none with (a=0, a=1) and reuses the one it has (a=2)."""
    space = Space(knobs={"a": (0, 1, 2, 3)}, baseline=(("a", 0),))
    script: dict[str, Outcome | tuple[Outcome, float]] = {
        "a=0 > a=1": "better", "a=1 > a=2": "better", "a=2 > a=3": "better", "a=3 > a=1": "better"}
    racer = Scripted(script)
    result = search(space, 1, racer, None)
    assert result.best == (("a", 3),) and result.stopped == "converged"
    # the baseline is the incumbent of its races, also when the final check asks about it as a neighbour
    assert pairs(result) == ["a=0 > a=1", "a=1 > a=2", "a=2 > a=3", "a=0 > a=3", "a=3 > a=1"]
    assert len({frozenset(c[:2]) for c in racer.calls}) == len(racer.calls)
    assert result.final == [result.path[3], result.path[4], result.path[2]]  # a=0, a=1, a=2 in the space's order
    assert result.against_baseline(space.baseline) is result.path[3]


def test_a_sweep_never_races_a_past_incumbent_and_the_final_check_runs_the_missing_races():
    """examples/tune-sim.toml's space, k=1, 2, 4 each better in turn: from k=2 the sweep does not race k=0 or k=1
    (past incumbents, never adopted again: the race of k=2 against the baseline could not change the answer), from
    k=4 not k=0, 1 or 2; the final check runs the winner's missing races with k=0 (the baseline race) and k=1 and
    reuses the others."""
    space = Space(knobs={"k": (0, 1, 2, 4, 8), "slots": (1, 2)}, baseline=(("k", 0), ("slots", 1)))
    racer = Scripted({"k=0 slots=1 > k=1 slots=1": "better", "k=1 slots=1 > k=2 slots=1": "better",
                      "k=2 slots=1 > k=4 slots=1": "better"})
    result = search(space, 1, racer, None)
    assert result.best == cfg(k=4, slots=1) and result.stopped == "converged"
    assert pairs(result) == [
        "k=0 slots=1 > k=1 slots=1", "k=1 slots=1 > k=1 slots=2",  # sweep 1
        "k=1 slots=1 > k=2 slots=1", "k=2 slots=1 > k=2 slots=2",  # sweep 2 (k=0 reused)
        "k=2 slots=1 > k=4 slots=1", "k=4 slots=1 > k=4 slots=2",  # sweep 3 (k=0, k=1 skipped)
        "k=4 slots=1 > k=8 slots=1",  # sweep 4 (k=0, 1, 2 skipped; slots reused): nothing adopted
        "k=0 slots=1 > k=4 slots=1", "k=4 slots=1 > k=1 slots=1"]  # the final check's missing races
    p = result.path
    assert result.final == [p[7], p[8], p[4], p[6], p[5]]  # k=0, 1, 2, 8, then slots=2: each neighbour once
    assert result.against_baseline(space.baseline) is p[7] and result.engine_s == 90.0


def test_only_a_better_race_with_the_incumbent_first_makes_its_candidate_win():
    x, y = cfg(a=0, b=0), cfg(a=1, b=0)
    race = RaceResult(x, y, 1, "better", 1.5, 1.3, 1.7, 1.0, 4)
    assert wins(race, x) and not wins(race, y)  # the other way round, its better is the other one's win
    assert not any(wins(RaceResult(x, y, 1, o, 3.0, 2.5, 3.5, 1.0, 4), x)
                   for o in ("same", "worse", "undecided", "refused"))


def test_the_budget_stops_starting_races():
    script: dict[str, Outcome | tuple[Outcome, float]] = {"a=0 b=0 > a=1 b=0": "better"}
    stopped = search(space_ab(), 1, Scripted(script), 15.0)
    assert stopped.stopped == "budget" and len(stopped.path) == 2 and stopped.engine_s == 20.0
    assert stopped.best == cfg(a=1, b=0) and stopped.final == []
    nothing = search(space_ab(), 1, Scripted(script), 0.0)
    assert (nothing.stopped, nothing.path, nothing.best, grid_engine_s(space_ab(), nothing.path)) == \
        ("budget", [], cfg(a=0, b=0), None)
    # a budget the whole search fits in changes nothing
    assert pairs(search(space_ab(), 1, Scripted(script), 30.0)) == pairs(search(space_ab(), 1, Scripted(script), None))


def test_bad_baselines_and_racers_are_refused():
    with pytest.raises(ValueError, match="one value per knob"):
        search(Space(knobs={"a": (0, 1), "b": (0, 1)}, baseline=(("b", 0), ("a", 0))), 1, Scripted(), None)
    with pytest.raises(ValueError, match="excluded"):
        search(space_ab(exclude=({"a": 0},)), 1, Scripted(), None)

    def wrong(incumbent: Config, candidate: Config, point: int) -> RaceResult:
        return RaceResult(candidate, incumbent, point, "worse", 0.9, 0.8, 1.0, 1.0, 4)

    with pytest.raises(ValueError, match="answered"):
        search(space_ab(), 1, wrong, None)


# ---------------------------------------------------------------- 2. the simulator's truth

P, C, SLOWDOWN = 0.75, 0.15, 0.05
PROMPT, ANSWER = 32, 256
CASES, SD, MIN_EFFECT, CONFIDENCE, MAX_REPEATS = 4, 0.10, 1.05, 0.95, 12
START_S = 5.0  # engine-seconds to start one engine
SEEDS = range(20)
DRAFTER = Space(knobs={"k": tuple(range(9)), "slots": (1, 2, 4)}, baseline=(("k", 0), ("slots", 1)))


def turn_s(config: Config, point: int) -> float:
    """The simulator's own mean turn time of *config* at *point* in flight."""
    v = dict(config)
    sim = SimConfig(prefill_tps=1_000_000.0, decode_tps=100.0, draft_model="expected", draft_acceptance=P,
                    draft_cost=C, decode_batch_slowdown=SLOWDOWN, draft_k=int(v["k"]), slots=int(v["slots"]))
    return true_turn_seconds(sim, PROMPT, ANSWER, point)


def looks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(θ̂, low, high) of the confidence sequence after each repeat 1..R of the pairs *x* (R repeats × cases),
    every look at once (confidence.matched over the looks)."""
    r, k = x.shape
    s = matched(np.broadcast_to(x, (r, r, k)), np.repeat(np.arange(1, r + 1)[:, None], k, axis=1))
    hw = cs_half_width(s.w, s.nu, s.m, CONFIDENCE, stream_g(1.0, s.k))
    return s.est, s.est - hw, s.est + hw


def outcome_of(verdict: str, ratio: float) -> Outcome:
    """The race's outcome for a sequential verdict (:data:`leverbench.tune.space.Outcome`)."""
    if verdict == "pays":
        return "better"
    if verdict == "does not pay":
        return "worse" if ratio < 1 else "same"
    return "same" if verdict == "equivalent" else "undecided"


@dataclass
class SimRacer:
    """A race as the runner's would be, on the simulator's truth: each repeat gives each of CASES cases a paired
    log-ratio log(T_incumbent / T_candidate) drawn around the true one with sd SD (lognormal turn-time noise); after
    each repeat the confidence sequence is looked at with confidence.decide's rule (vectorised over the looks:
    :func:`looks`, the verdict from confidence.verdict_codes once repeats ≥ MIN_REPEATS) and the race stops at the
    first verdict, or at MAX_REPEATS undecided.  It costs repeats × (T_incumbent + T_candidate) × CASES
    engine-seconds, plus START_S for each of its two engines.  *refuse*: the guard refuses every race with this
    configuration in it; *times*: the true mean turn time of a configuration at a point."""

    point: int
    seed: int
    refuse: Optional[Config] = None
    times: Callable[[Config, int], float] = turn_s
    pairs_drawn: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng([self.seed, self.point])

    def __call__(self, incumbent: Config, candidate: Config, point: int) -> RaceResult:
        t_inc, t_cand = self.times(incumbent, point), self.times(candidate, point)
        x = math.log(t_inc / t_cand) + self.rng.normal(0.0, SD, size=(MAX_REPEATS, CASES))
        self.pairs_drawn.append(x)
        est, low, high = looks(x)
        codes = verdict_codes(low, high, math.log(MIN_EFFECT))
        codes[: MIN_REPEATS - 1] = 0
        decided = np.flatnonzero(codes)
        j = int(decided[0]) if decided.size else MAX_REPEATS - 1
        verdict = ("undecided", "pays", "equivalent", "does not pay")[int(codes[j])]
        outcome = outcome_of(verdict, math.exp(est[j]))
        reason = None
        if self.refuse in (incumbent, candidate):
            outcome, reason = "refused", "engaged: the drafter never engaged"
        cost = (j + 1) * (t_inc + t_cand) * CASES + 2 * START_S
        return RaceResult(incumbent, candidate, point, outcome, math.exp(est[j]), math.exp(low[j]),
                          math.exp(high[j]), cost, j + 1, reason)


def grid_cost(point: int, path: list[RaceResult]) -> float:
    """The full grid at the same confidence, the honest way: every allowed configuration measured for the median
    repeats a race of *path* needed, each repeat its own true turn time × CASES, plus one engine start each."""
    n = statistics.median(r.repeats for r in path)
    return sum(n * turn_s(c, point) * CASES + START_S for c in DRAFTER.grid())


def truth_at(point: int) -> dict[Config, float]:
    return {c: turn_s(c, point) for c in DRAFTER.grid()}


def test_the_racer_decides_as_confidence_decide_does():
    """The vectorised looks give decide's verdict at the look the race stopped, and "open" at the one before."""
    racer = SimRacer(4, seed=0)
    results = [racer(DRAFTER.baseline, DRAFTER.config({"k": k, "slots": 4}), 4) for k in (1, 2)]
    results.append(racer(DRAFTER.config({"k": 1, "slots": 4}), DRAFTER.config({"k": 2, "slots": 4}), 4))
    for r, x in zip(results, racer.pairs_drawn):
        def at(j: int, x: np.ndarray = x) -> str:
            d = {f"c{c}": list(x[:j, c]) for c in range(CASES)}
            return decide(d, repeats=j, max_repeats=MAX_REPEATS, min_effect=MIN_EFFECT,
                          confidence=CONFIDENCE)["verdict"]
        assert outcome_of(at(r.repeats), r.ratio or 1.0) == r.outcome
        assert r.repeats == 1 or at(r.repeats - 1) == "open"
    assert [r.outcome for r in results][:2] == ["better", "better"]


@pytest.mark.parametrize("point, best_k", [(1, 3), (4, 2)])
def test_the_search_finds_the_best_drafter_within_3_percent(point, best_k):
    """Measured: 20 of 20 seeds within 3 % at both points (at 1: k=2 slots=1 in 18, 1.3 % off, k=3 slots=1, the
    optimum, in 2; at 4: k=1 slots=4 in 18, 2.0 % off, k=2 slots=4, the optimum, in 2).  With s = 0.10 instead
    (best K 2 alone, 1 at four in flight) 20 of 20 at 4 but only 2 of 20 at 1: 18 stop at k=1 slots=1, 7.4 % off,
    because k=2 is 7.4 % faster than k=1 and a "better" needs the interval above min_effect 1.05, which 4 cases at
    sd 0.10 do not reach in 12 repeats."""
    truth = truth_at(point)
    optimum = min(truth, key=truth.__getitem__)
    assert dict(optimum)["k"] == best_k
    results = [search(DRAFTER, point, SimRacer(point, seed), None) for seed in SEEDS]
    off = [truth[r.best] / truth[optimum] - 1.0 for r in results]
    assert sum(o <= 0.03 for o in off) >= 19, off
    assert all(r.stopped == "converged" and r.against_baseline(DRAFTER.baseline) is not None for r in results)
    # the search is a deterministic function of its races: replayed from a cache of them, the same path
    cache = {(r.incumbent, r.candidate): r for r in results[0].path}
    replayed = search(DRAFTER, point, lambda i, c, p: cache[(i, c)], None)
    assert replayed.path == results[0].path and replayed.best == results[0].best


@pytest.mark.xfail(strict=True, reason="issue 40's 'at most half the full grid' does not hold for this space: the "
                   "final check alone (the winner against its 10 one-knob neighbours and the baseline, each race "
                   "measuring two configurations for at least 4 repeats, the confidence sequence's first finite "
                   "look) costs 0.53-1.07x (at 1) and 0.57-0.68x (at 4) of the grid of 27 configurations at the "
                   "median race's repeats")
@pytest.mark.parametrize("point", [1, 4])
def test_the_search_spends_at_most_half_the_grid(point):
    """The full grid at the same confidence: every allowed configuration measured for the median repeats a race
    of the search needed (:func:`grid_cost`).  Measured (20 seeds): at 1 in flight the search spends 0.73-1.47x
    that (median 1.13x), at 4 in flight 1.01-1.71x (median 1.67x); the final check's races alone (the winner
    against each one-knob neighbour, which any search that checks them must run, and against the baseline) are
    0.53-1.07x at 1 and 0.57-0.68x at 4.  Held against a grid at the most repeats a race needed instead of the
    median, 0.49-0.62x at 1 and 0.48-0.59x at 4."""
    spend = [(r := search(DRAFTER, point, SimRacer(point, seed), None)).engine_s / grid_cost(point, r.path)
             for seed in SEEDS]
    assert max(spend) <= 0.5, spend


def test_a_refused_configuration_is_never_returned():
    """The guard refuses every race of the true optimum at four in flight (k=2 slots=4): no seed adopts it (it is
    never the incumbent of a race), so none returns it, also where its refused race measured it faster by more than
    the least effect (2 of the 20 seeds: from k=2 slots=2, 1.56x and 1.65x).  The answer alone would not show a
    refused race winning: the optimum adopted, its own races, all refused, would win as well and move the search
    on from it."""
    truth = truth_at(4)
    optimum = min(truth, key=truth.__getitem__)
    would_have_won = 0
    for seed in SEEDS:
        result = search(DRAFTER, 4, SimRacer(4, seed, refuse=optimum), None)
        refused = [r for r in result.path if r.outcome == "refused"]
        assert refused and all(r.candidate == optimum for r in refused)
        assert result.best != optimum and all(r.incumbent != optimum for r in result.path)
        would_have_won += any(r.low is not None and r.low > MIN_EFFECT for r in refused)
    assert would_have_won == 2


# ---------------------------------------------------------------- 3. a planted interaction


def planted(warm_alone: float) -> dict[Config, float]:
    """cache pays (0.6x the time) only with warm on; warm alone takes *warm_alone* of the time."""
    return {cfg(cache=c, warm=w, slots=s): (0.6 if c and w else warm_alone if w else 1.0)
            for c in (False, True) for w in (False, True) for s in (1, 2)}


PLANTED = Space(knobs={"cache": (False, True), "warm": (False, True), "slots": (1, 2)},
                baseline=cfg(cache=False, warm=False, slots=1))


@pytest.mark.parametrize("warm_alone", [1.0, 0.8])
def test_a_planted_interaction_is_found_or_named(warm_alone):
    """warm alone does not pay (1.0) or pays (0.8): the search either ends with cache and warm both on,
    or names the pair (cache, warm) as not excluded.  Measured: at 1.0 never found, always named; at 0.8 found
    (warm adopted, then cache pays from it) in every seed."""
    found = named = 0
    table = planted(warm_alone)
    for seed in range(10):
        result = search(PLANTED, 1, SimRacer(1, seed, times=lambda c, _p: table[c]), None)
        both_on = dict(result.best)["cache"] and dict(result.best)["warm"]
        names_it = any(s.startswith("cache and warm:") for s in result.not_excluded)
        assert both_on or names_it, (words(result.best), result.not_excluded)
        found += bool(both_on)
        named += names_it
    assert (found, named) == ((0, 10) if warm_alone == 1.0 else (10, 0))


def test_untested_pairs_counts_only_joint_changes_of_exactly_those_knobs():
    best = cfg(cache=True, warm=True, slots=1)
    assert untested_pairs(PLANTED, best, set()) == [("cache", "warm"), ("cache", "slots"), ("warm", "slots")]
    assert untested_pairs(PLANTED, best, {cfg(cache=False, warm=True, slots=2)}) == [("cache", "warm"),
                                                                                     ("warm", "slots")]
    # a change of all three knobs is no joint change of any two
    assert len(untested_pairs(PLANTED, best, {cfg(cache=False, warm=False, slots=2)})) == 3
    many = Space(knobs={n: (0, 1) for n in "abcde"}, baseline=tuple((n, 0) for n in "abcde"))
    [sentence] = search(many, 1, Scripted(), None).not_excluded
    assert all(f"{a} with {b};" in sentence for a, b in itertools.combinations("abcde", 2)) and \
        sentence.endswith("is not excluded")
