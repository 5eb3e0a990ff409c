"""The run's plan: what is sent when, as data, built before anything is sent.

:func:`build_plan` lays the experiment out — :mod:`.schedule`'s order of its units (turns, probes, drift
sentinels), the engines' mode (:mod:`.engine_mode`), what a resumed run has done — as a :class:`Plan` of typed,
immutable records; :class:`leverbench.runner.execute.Executor` runs it step by step, and decides nothing of what
is sent but what an adaptive run's looks decide (``leverbench run --dry-run`` prints a plan: :func:`describe`).

Before the work, in this order: with engines together, each engine started (:attr:`Plan.starts`, part ``run``);
with engines one at a time on a new run, each engine started, asked what it serves and stopped
(:attr:`Plan.discovery`); the header written (:attr:`Plan.header`); each arm warmed (:attr:`Plan.warm_ups`: its
sentinel's call until its decode rate is stable, :class:`WarmUp`); each arm's way to its cache state chosen and
its reset checked (:attr:`Plan.cache_states`).

The work (:attr:`Plan.steps`), with engines together: the units in schedule order (:class:`Do`; a turn with the
cache state its arm is brought to before it, :class:`CacheBefore`), each arm's Prometheus counters scraped
around them (:class:`Scrape` ``before`` and ``after``: in blocked order around each arm's block, so that arms
sharing an endpoint are told apart) and around each run of probes (``probes-before``, ``probes-after``: one
prompt sent again, what a cache finds); then the load stages (:class:`LoadStage`), each stage on each of its arms.
With engines one at a time: :class:`Block` after block (:func:`.schedule.build_blocks`), each one arm's engine
started, warmed, its units run between scrapes of its counters, (closing blocks) its load stages, the engine
stopped.  A block or unit a resumed run has done is left out, and so is a load stage it finished.

An adaptive run's rounds are not known before it runs: a :class:`Look` stands after the initial repeats, before
the probes and the closing sentinels.  There the ledger so far is read and the next round's cells decided
(:mod:`.rounds`); :meth:`Plan.after_look` is the plan with the round's steps in the look's place, followed by the
next look (none once every comparison is decided).  What comes before a look never changes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Collection, Iterator, Mapping, Optional, Sequence, Union

from ..config import LoadedExperiment
from ..config.stages import PlannedStage
from .engine_mode import ONE_AT_A_TIME, TOGETHER
from .load import stage_work
from .schedule import SENTINEL_CASE, Unit, blocks_of, build_blocks, build_schedule

WARMUP_MAX_CALLS = 8  # warm-up calls per arm at most, until its sentinel rate is stable


@dataclass(frozen=True)
class WarmUp:
    """An arm warmed before its first measured call: the sentinel's call (kind ``warmup``, repeat 0, 1, …) of
    ``tokens`` tokens until its decode rate is stable, ``max_calls`` at most (without sentinels, one short call)."""

    arm: str
    max_calls: int
    tokens: int


@dataclass(frozen=True)
class CacheStates:
    """Each arm's way to the declared cache state chosen before the first turn (:mod:`.cache_state`), its reset
    checked where ``check`` (every endpoint is up; engines one at a time: each engine's reset is checked in its
    first block, before its first turn)."""

    check: bool


@dataclass(frozen=True)
class CacheBefore:
    """What a turn's arm is brought to before it (:mod:`.cache_state`): the declared ``state`` (cold, shared,
    keep) by the experiment's ``reset`` (``cache_reset``; auto: each arm's method chosen with
    :attr:`Plan.cache_states`); a recorded turn (a case ``from`` a recording) is brought to it only as its
    recording's first turn of the round on its arm (``first_of_recording``; the later ones meet what the earlier
    left; None: not a recorded turn)."""

    state: str
    reset: str
    first_of_recording: Optional[bool] = None


@dataclass(frozen=True)
class Scrape:
    """The arms' Prometheus counters scraped into a ``metrics`` record each (``when``: before, after,
    probes-before, probes-after, load-start STAGE, load-end STAGE); ``arms`` None: every arm."""

    when: str
    arms: Optional[tuple[str, ...]] = None


@dataclass(frozen=True)
class Do:
    """One unit of work — a turn (its arm first brought to ``cache``), a probe or a drift sentinel — its records on
    disk after it; ``then``: the scrape that closes a run of probes, right after it.  After it an engine that died
    ends the run."""

    unit: Unit
    cache: Optional[CacheBefore] = None
    then: Optional[Scrape] = None


@dataclass(frozen=True)
class Look:
    """A decision point of an adaptive run: the ledger so far read and the cells still open given one more
    repeat, round ``repeat`` (or the next round with any unit a resumed run has not done); its steps take the
    look's place (:meth:`Plan.after_look`)."""

    repeat: int


@dataclass(frozen=True)
class LoadStage:
    """One load stage on one arm (:mod:`.load`), between scrapes of ``arms``' counters (None: every arm); its
    ``index`` among the experiment's ``of`` stage runs."""

    stage: PlannedStage
    arm: str
    index: int
    of: int
    arms: Optional[tuple[str, ...]] = None


@dataclass(frozen=True)
class Block:
    """One arm's block with its engine to itself (engines one at a time): part ``round`` (round ``repeat``'s
    sentinel and turns) or ``closing`` (its probes, closing sentinel and load stages).  ``engine``: the arm's engine
    is started for it, asked what it serves and warmed (``warm_up``), and stopped after it (an arm with an endpoint
    of its own: nothing to start)."""

    arm: str
    repeat: int
    part: str
    engine: bool
    warm_up: Optional[WarmUp]
    steps: tuple[Step, ...]


Step = Union[Scrape, Do, Look, LoadStage, Block]


@dataclass(frozen=True)
class Layout:
    """What the plan is laid out from, for the rounds its looks add: the arms in the experiment's order, those
    whose engine the tool starts, the engines' mode, the order, the sentinel's tokens, the declared cache state and
    reset, and each recorded case's recording."""

    arms: tuple[str, ...]
    engine_arms: frozenset[str]
    mode: str
    order: str
    sentinel_tokens: int
    cache_state: str
    cache_reset: str
    recordings: tuple[tuple[str, str], ...] = ()
    in_flight: int = 1  # requests in flight on an arm while each turn runs (runner.companions)

    def warm_up(self, arm: str) -> WarmUp:
        n = self.sentinel_tokens
        return WarmUp(arm, WARMUP_MAX_CALLS if n > 0 else 1, n or 8)

    def cache(self, unit: Unit, seen: set[tuple[str, str, int]]) -> Optional[CacheBefore]:
        """A turn's :class:`CacheBefore` (None for another unit); *seen*: the (arm, recording, repeat) whose first
        turn came earlier in the plan (added to)."""
        if unit.kind != "turn":
            return None
        recording = dict(self.recordings).get(unit.case)
        first = None
        if recording is not None:
            key = (unit.arm, recording, unit.repeat)
            first = key not in seen
            seen.add(key)
        return CacheBefore(self.cache_state, self.cache_reset, first)


@dataclass(frozen=True)
class Plan:
    """The run, laid out (module docstring).  ``header``: this session writes the ledger's header (a new run; a
    resumed one has its own); ``total``: the units of the schedule (a resumed run's done ones included, the rounds
    of looks not yet made left out), ``done`` of them done before."""

    layout: Layout
    header: bool
    starts: tuple[str, ...]
    discovery: tuple[str, ...]
    warm_ups: tuple[WarmUp, ...]
    cache_states: Optional[CacheStates]
    steps: tuple[Step, ...]
    total: int
    done: int

    def units(self) -> Iterator[Unit]:
        """The units the plan runs, in order (a block's within it)."""
        for s in _flat(self.steps):
            if isinstance(s, Do):
                yield s.unit

    def after_look(self, at: int, units: Sequence[Unit], next_look: Optional[Look]) -> Plan:
        """The plan with the look at step *at* replaced by the round of *units* (none: every comparison decided)
        and *next_look* after it; the steps before *at* are unchanged."""
        look = self.steps[at]
        if not isinstance(look, Look):
            raise ValueError(f"step {at} of the plan is no look: {look!r}")
        lay = self.layout  # (a round's turns are of a repeat of their own: no recording's first turn came before)
        new: tuple[Step, ...]
        if lay.mode == ONE_AT_A_TIME:
            made = [_block(lay, b.arm, b.repeat, b.part, list(b.units), (), set())
                    for b in blocks_of(list(lay.arms), list(units), units[0].repeat)] if units else []
            new = self.steps[:at] + tuple(made) + ((next_look,) if units and next_look else ()) + self.steps[at + 1:]
        else:
            items: list[Unit | Look] = [s.unit if isinstance(s, Do) else s for s in self.steps
                                        if isinstance(s, (Do, Look))]
            k = sum(1 for s in self.steps[:at] if isinstance(s, (Do, Look)))
            items[k:k + 1] = [*units, *([next_look] if units and next_look else [])]
            stages = tuple(s for s in self.steps if isinstance(s, LoadStage))
            new = tuple(_work(lay, items, set())) + stages
            if new[:at] != self.steps[:at]:  # what ran is what was planned
                raise RuntimeError("an adaptive round changed the plan's steps before its look")
        return replace(self, steps=new, total=self.total + len(units))


def _flat(steps: Sequence[Step]) -> Iterator[Step]:
    for s in steps:
        yield s
        if isinstance(s, Block):
            yield from _flat(s.steps)


def _unit_step(lay: Layout, u: Unit, prev: Optional[Unit], nxt: Optional[Unit], arms: Optional[tuple[str, ...]],
               seen: set[tuple[str, str, int]]) -> list[Step]:
    """Unit *u* as steps, between *prev* and *nxt*: a run of probes between scrapes of *arms* (in blocked order a run
    ends where the arm changes)."""
    blocked = lay.order == "blocked"
    out: list[Step] = []
    if u.kind == "probe" and (prev is None or prev.kind != "probe" or (blocked and prev.arm != u.arm)):
        out.append(Scrape("probes-before", arms))
    closes = u.kind == "probe" and (nxt is None or nxt.kind != "probe" or (blocked and nxt.arm != u.arm))
    out.append(Do(u, lay.cache(u, seen), Scrape("probes-after", arms) if closes else None))
    return out


def _work(lay: Layout, items: Sequence[Unit | Look], seen: set[tuple[str, str, int]]) -> list[Step]:
    """Engines together: *items* (units, and an adaptive run's looks) as steps, the counters scraped before the
    first unit and after the last (in blocked order: around each arm's block) and around each run of probes.  The
    looks stand before the probes: no run of probes spans one."""
    blocked = lay.order == "blocked"

    def arms_of(u: Unit) -> Optional[tuple[str, ...]]:
        return (u.block or u.arm,) if blocked else None

    units = [x for x in items if isinstance(x, Unit)]
    out: list[Step] = []
    k = 0  # the next unit's index in units
    for x in items:
        if isinstance(x, Look):
            out.append(x)
            continue
        prev, nxt = (units[k - 1] if k else None), (units[k + 1] if k + 1 < len(units) else None)
        if prev is None or (blocked and (x.block or x.arm) != (prev.block or prev.arm)):
            if prev is not None:
                out.append(Scrape("after", arms_of(prev)))
            out.append(Scrape("before", arms_of(x)))
        out += _unit_step(lay, x, prev, nxt, arms_of(x), seen)
        k += 1
    if units:
        out.append(Scrape("after", arms_of(units[-1])))
    return out


def _block(lay: Layout, arm: str, repeat: int, part: str, todo: list[Unit], stages: tuple[LoadStage, ...],
           seen: set[tuple[str, str, int]]) -> Block:
    """Engines one at a time: one arm's block (:class:`Block`) of its units *todo* and load *stages*."""
    arms = (arm,)
    engine = arm in lay.engine_arms
    units: list[Step] = [s for k, u in enumerate(todo) for s in _unit_step(
        lay, u, todo[k - 1] if k else None, todo[k + 1] if k + 1 < len(todo) else None, arms, seen)]
    steps = [Scrape("before", arms), *units, Scrape("after", arms), *stages]
    return Block(arm, repeat, part, engine, lay.warm_up(arm) if engine else None, tuple(steps))


def layout(exp: LoadedExperiment, mode: str) -> Layout:
    """The :class:`Layout` of *exp* with its engines in *mode* (together, one at a time)."""
    spec, x = exp.spec, exp.spec.experiment
    return Layout(tuple(a.name for a in spec.arms), frozenset(a.name for a in spec.arms if a.engine is not None),
                  mode, x.order, x.sentinel_tokens, x.cache_between_turns, x.cache_reset,
                  tuple((c.name, c.recorded_from) for c in spec.cases if c.recorded_from is not None), x.in_flight)


def load_stages(exp: LoadedExperiment, arms: list[str], stages_done: Collection[tuple[str, str]] = (), *,
                only: Optional[list[str]] = None) -> tuple[LoadStage, ...]:
    """The load stages of *exp* (sweeps expanded: :func:`.load.stage_work`), each on each of its arms (default: all
    *arms*) in the order they run, but those in *stages_done* ((stage, arm) pairs); *only*: the stages of these arms
    alone, their counters scraped around each (None: every stage, every arm's counters)."""
    if not exp.spec.load:
        return ()
    work = stage_work(exp, arms)
    return tuple(LoadStage(p, a, n, len(work), None if only is None else tuple(only)) for n, (p, a) in enumerate(work)
                 if (p.name, a) not in stages_done and (only is None or a in only))


def build_plan(exp: LoadedExperiment, sizes: Mapping[str, int], mode: str = TOGETHER, *,
               done: Collection[tuple] = (), stages_done: Collection[tuple[str, str]] = (),
               resumed: bool = False) -> Plan:
    """The plan of *exp* (module docstring): *sizes*, each case's size in characters (the probes' default case is
    the longest); *mode*, the engines' (together, one at a time); a resumed run (*resumed*: its ledger has its
    header) leaves out the units *done* (their keys) and the load stages *stages_done* ((stage, arm) pairs)."""
    spec = exp.spec
    lay = layout(exp, mode)
    one = mode == ONE_AT_A_TIME
    adaptive = spec.experiment.adaptive is not None
    look = Look(spec.experiment.repeats) if adaptive else None

    def stages(arm: Optional[str]) -> tuple[LoadStage, ...]:
        return load_stages(exp, list(lay.arms), stages_done, only=None if arm is None else [arm])
    seen: set[tuple[str, str, int]] = set()
    steps: list[Step] = []
    if one:
        blocks = build_blocks(spec, dict(sizes))
        total = sum(len(b.units) for b in blocks)
        finished = sum(1 for b in blocks for u in b.units if u.key() in done)
        for b in blocks:
            if b.part == "closing" and look is not None:
                steps.append(look)
                look = None
            todo = [u for u in b.units if u.key() not in done]
            mine = stages(b.arm) if b.part == "closing" else ()
            if todo or mine:
                steps.append(_block(lay, b.arm, b.repeat, b.part, todo, mine, seen))
    else:
        units = build_schedule(spec, dict(sizes))
        total = len(units)
        todo = [u for u in units if u.key() not in done]
        finished = total - len(todo)
        items: list[Unit | Look] = list(todo)
        if look is not None:  # after the initial repeats: before the probes and the closing sentinels
            cut = next((k for k, u in enumerate(todo) if u.kind == "probe" or u.position == "end"), len(todo))
            items.insert(cut, look)
        steps = _work(lay, items, seen) + list(stages(None))
    plan = Plan(lay, not resumed, tuple(a for a in lay.arms if a in lay.engine_arms and not one),
                tuple(a for a in lay.arms if a in lay.engine_arms and one and not resumed),
                tuple(lay.warm_up(a) for a in lay.arms if not (one and a in lay.engine_arms)), None, tuple(steps),
                total, finished)
    if adaptive or any(u.kind == "turn" for u in plan.units()):
        plan = replace(plan, cache_states=CacheStates(check=not one))
    return plan


# ---------------------------------------------------------------- the plan in words


def _unit_words(u: Unit) -> str:
    if u.kind == "turn":
        return f"turn {u.arm} / {u.case} #{u.repeat + 1}"
    if u.kind == "probe":
        depth = f", depth {u.depth}" if u.depth is not None else ""
        return f"probe {u.arm} / {u.case} #{u.repeat + 1} ({u.probe_tokens} tokens{depth})"
    where = f" ({u.position})" if u.position else ""
    case = "" if u.case == SENTINEL_CASE else f" / {u.case}"
    return f"{u.kind} {u.arm}{case}{where} #{u.repeat + 1}"


def _warm_words(w: WarmUp) -> str:
    if w.max_calls == 1:
        return f"one short call of {w.tokens} tokens"
    return f"the sentinel's call of {w.tokens} tokens until its rate is stable, {w.max_calls} calls at most"


def _arms_words(arms: Optional[tuple[str, ...]]) -> str:
    return "every arm" if arms is None else ", ".join(arms)


def step_words(s: Step) -> list[str]:
    """One step in words, a line each (a block's steps indented under it)."""
    if isinstance(s, Scrape):
        return [f"scrape {s.when} ({_arms_words(s.arms)})"]
    if isinstance(s, Do):
        cache = ""
        if s.cache is not None:
            first = {None: "", True: ", its recording's first this round",
                     False: ", after its recording's earlier turn: meets what it left"}
            cache = f" [cache {s.cache.state} by {s.cache.reset}{first[s.cache.first_of_recording]}]"
        then = f"; then scrape {s.then.when} ({_arms_words(s.then.arms)})" if s.then is not None else ""
        return [_unit_words(s.unit) + cache + then]
    if isinstance(s, Look):
        return [f"look: the ledger read, round #{s.repeat + 1} of the comparisons still open (or none: decided)"]
    if isinstance(s, LoadStage):
        return [f"load stage {s.stage.name} on {s.arm} ({s.stage.stage.mode}; scrapes of {_arms_words(s.arms)})"]
    head = f"block {s.part} #{s.repeat + 1} of {s.arm}: " + (
        f"its engine started, asked what it serves, warmed ({_warm_words(s.warm_up)})" if s.warm_up else
        "its endpoint's own server")
    return [head] + ["  " + line for step in s.steps for line in step_words(step)] + (
        [f"  {s.arm}'s engine stopped, its release checked"] if s.engine else [])


def describe(plan: Plan) -> list[str]:
    """The plan in words, a line each, in the order the run takes it."""
    lay = plan.layout
    out = [f"engines: {lay.mode}; order: {lay.order}; {plan.total} units, {plan.done} done before"]
    out += [f"start engine of {a} (part run)" for a in plan.starts]
    out += [f"discovery: start engine of {a}, ask what it serves, stop it" for a in plan.discovery]
    out += ["write the ledger's header"] if plan.header else []
    out += [f"warm up {w.arm} ({_warm_words(w)})" for w in plan.warm_ups]
    if plan.cache_states is not None:
        out.append(f"cache states: each arm's way to {lay.cache_state} ({lay.cache_reset})"
                   + (", its reset checked" if plan.cache_states.check else ", checked in each engine's first block"))
    if lay.in_flight > 1:
        out.append(f"each turn beside {lay.in_flight - 1} companion(s): copies of its case's first call kept in "
                   "flight on its arm until it ends, then awaited")
    out += [line for s in plan.steps for line in step_words(s)]
    return out
