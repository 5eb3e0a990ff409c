"""The search space of a tune: knobs and their values, the baseline configuration, the exclusions; what a race
between two configurations answers (:class:`RaceResult`) and who runs one (:class:`Racer`).

A **configuration** is one value per knob, as a tuple of (knob, value) pairs in the space's knob order
(hashable: a race is keyed by its two configurations and its operating point).  Its **neighbours** are the
configurations that change exactly one knob and are not excluded.  An **exclusion** is a partial configuration:
every configuration that agrees with it on all its knobs is left out (``{ k = 8, slots = 4 }``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Literal, Mapping, Optional, Protocol, Union

from typing_extensions import TypeAlias

from ..knob_values import config_words

#: A knob's value: what a placeholder of the engine's command template is filled with.
KnobValue: TypeAlias = Union[str, int, float, bool]
#: One value per knob, in the space's knob order.
Config: TypeAlias = tuple[tuple[str, KnobValue], ...]
#: What a race decided about the candidate against the incumbent (the sequential verdict's words: ``better`` is
#: "pays", ``worse`` is "does not pay" with the ratio below 1, ``same`` is "equivalent" or "does not pay" above 1
#: but under the least effect, ``undecided`` stopped at the most repeats without a verdict, ``refused`` the guard
#: refused the comparison: it can never make the candidate win).
Outcome: TypeAlias = Literal["better", "worse", "same", "undecided", "refused"]


def words(config: Config) -> str:
    """A configuration in words: ``k=4 slots=2`` (:func:`leverbench.knob_values.config_words`)."""
    return config_words(config)


@dataclass(frozen=True)
class Space:
    """Knobs (name → the values it may take, in the file's order), the baseline (the user's current
    configuration: where the search starts), the exclusions."""

    knobs: Mapping[str, tuple[KnobValue, ...]]
    baseline: Config
    exclude: tuple[Mapping[str, KnobValue], ...] = ()

    def config(self, values: Mapping[str, KnobValue]) -> Config:
        """The configuration with these values (every knob named), in knob order."""
        return tuple((k, values[k]) for k in self.knobs)

    def allowed(self, config: Config) -> bool:
        """Whether no exclusion matches *config*."""
        got = dict(config)
        return not any(all(got.get(k) == v for k, v in ex.items()) for ex in self.exclude)

    def changed(self, config: Config, knob: str, value: KnobValue) -> Config:
        """*config* with *knob* set to *value*."""
        return tuple((k, value if k == knob else v) for k, v in config)

    def neighbours(self, config: Config) -> list[Config]:
        """Every allowed configuration that differs from *config* in exactly one knob, knob by knob in order, each
        knob's values in the file's order."""
        here = dict(config)
        return [c for k, values in self.knobs.items() for v in values if v != here[k]
                if self.allowed(c := self.changed(config, k, v))]

    def grid(self) -> list[Config]:
        """Every allowed configuration (the full grid a search is held against)."""
        names = list(self.knobs)
        return [c for combo in itertools.product(*self.knobs.values())
                if self.allowed(c := tuple(zip(names, combo)))]


@dataclass(frozen=True)
class RaceResult:
    """One race: *candidate* against *incumbent* at operating point *point* (requests in flight), what it decided,
    the ratio incumbent time / candidate time (> 1: the candidate is faster) with its interval, the
    engine-seconds it cost (every engine's time up, starts included), the repeats it took, why it was refused or
    undecided, and where its run is (None: not run here, e.g. a test's racer)."""

    incumbent: Config
    candidate: Config
    point: int
    outcome: Outcome
    ratio: Optional[float]
    low: Optional[float]
    high: Optional[float]
    engine_s: float
    repeats: int
    reason: Optional[str] = None
    run_dir: Optional[str] = None


class Racer(Protocol):
    """Who runs a race: the runner (:mod:`.races`), or a test's model of one."""

    def __call__(self, incumbent: Config, candidate: Config, point: int) -> RaceResult: ...


@dataclass
class SearchResult:
    """A search at one operating point: every race in the order run (``path``), the configuration it recommends
    (``best``), why it stopped (``converged``: no single change pays and the final check held; ``budget``: the
    engine-seconds ran out, ``best`` is the incumbent then), the engine-seconds spent, the final check's races
    (the winner against each neighbour and against the baseline), and what the search did not test (pairs of
    knobs never changed together from the winner: an interaction among them is not excluded)."""

    point: int
    path: list[RaceResult]
    best: Config
    stopped: Literal["converged", "budget"]
    engine_s: float
    final: list[RaceResult] = field(default_factory=list)
    not_excluded: list[str] = field(default_factory=list)

    def against_baseline(self, baseline: Config) -> Optional[RaceResult]:
        """The final race of the winner against the baseline (None when the baseline won)."""
        return next((r for r in self.final if r.incumbent == baseline and r.candidate == self.best), None)
