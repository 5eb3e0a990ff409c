"""What a lever is: the knob it turns, the engine flags and discovered facts that name it, the phase it acts on,
how its engagement is measured per dialect, and its words in the recommendation.

A :class:`Lever` is data (a frozen dataclass); its module under :mod:`leverbench.levers` declares it as
``LEVER`` (or several of one family as ``LEVERS``) and :mod:`.registry` finds it there.  This module imports
nothing of leverbench but :mod:`leverbench.json_types`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Mapping, Optional

from typing_extensions import TypeAlias

from ..json_types import JSONValue

#: The phases a lever may act on: a call's prefill, its decode, its wait for a slot, or all of its time.
Phase: TypeAlias = Literal["prefill", "decode", "queueing", "both"]
#: How the one-call-at-a-time projection (``analysis/rates/phases.py``) treats a lever: Amdahl on the prefill
#: seconds alone, on the decode seconds alone, or on the whole time ("both").
Projection: TypeAlias = Literal["prefill", "decode", "both"]
#: A knob's value: what an engine reported or a user declared, as JSON.
KnobValue: TypeAlias = JSONValue


def flag_value(args: list[str], *flags: str) -> str | None:
    """The value given to the first of *flags* in a command line (``--kv-cache-dtype fp8`` or
    ``--kv-cache-dtype=fp8``), or None when none of them is there (or one is last, without a value)."""
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name in flags:
            if eq:
                return value
            if i + 1 < len(args):
                return args[i + 1]
    return None


@dataclass(frozen=True)
class MetricTable:
    """The Prometheus figures a lever's engagement is read from (``analysis/base/metrics.py``), per dialect.

    ``shares``: (figure, numerator counter, denominator counter), Δnum / Δden over the arm's block; a figure named
    ``llamacpp_X`` or ``sglang_X`` is figure ``X`` when no earlier entry gave it (an SGLang numerator not yet
    written counts as zero).  ``deltas``: (figure, counter), its Δ.  ``gauges``: (figure, gauge), as read after
    the block, averaged over label sets."""

    shares: tuple[tuple[str, str, str], ...] = ()
    deltas: tuple[tuple[str, str], ...] = ()
    gauges: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ArmEvidence:
    """What an engagement judge (:attr:`Lever.judge`) sees of one arm: its knobs (``analysis/base/knobs.py``),
    its ``discovered`` record (the ledger header's, as discovery wrote it) and its own server-metrics figures."""

    arm: str
    knobs: Mapping[str, KnobValue]
    discovered: Mapping[str, JSONValue]
    metrics: Mapping[str, float]


@dataclass(frozen=True)
class Use:
    """A judge's answer: whether the arm used the lever (True, False, or None: nothing says), from what
    (``source``), and the warning to give when it did not or nothing says (None: no warning)."""

    used: Optional[bool]
    source: Optional[str] = None
    warning: Optional[str] = None


#: What discovery hands a lever's :attr:`Lever.discover`: the raw answers (``props``, ``slots``, ``version``,
#: ``server_info``, ``models``, ``metrics`` label sets by sample name, ``known``: what the runner knows of an
#: engine it started, ``engine_args`` among it) and the engine found (``engine`` key of the knobs so far).
Discover: TypeAlias = Callable[[Mapping[str, JSONValue], Optional[str]], KnobValue]
Judge: TypeAlias = Callable[[ArmEvidence], Use]


@dataclass(frozen=True)
class Lever:
    """One lever: a knob (:attr:`name`) an experiment can turn, and everything the tool knows of it.

    - ``aliases``: other names of the knob across engines and users (its phase is known by them too);
    - ``flags``: engine command-line flags that set it (llama.cpp's, vLLM's, SGLang's), exactly;
      ``flag_prefixes``: every flag starting with one of these sets it (a drafter's many ``--draft-*`` flags);
      ``request_fields``: request body fields that switch it per call (llama.cpp's ``cache_prompt``): an arm that
      sends one has the knob, on or off as the field's value says;
    - ``facts``: discovered facts (flattened paths of the ``discovered`` record: ``cache_config.X`` for vLLM's
      ``cache_config_info`` labels, ``server_info.X`` for SGLang's ``/get_server_info``, ``props.X`` for
      llama.cpp's ``/props``; a path ending in "." covers every path below it) whose difference this knob's
      difference covers;
    - ``phases``: what it acts on; ``projection``: how the projection treats it (see :data:`Projection`);
    - engagement: ``usage_fields`` (OpenAI usage fields), ``timings`` (llama.cpp ``timings`` fields) and
      ``metrics`` (:class:`MetricTable`) it is measured by; ``used_field``: the ``engaged`` row's field that says
      whether an arm used it, for the levers whose judgement the engagement module computes from calls
      (prefix cache, drafter); ``judge``: for any other lever, a function of one arm's evidence — its answer is
      the row's ``levers[name]``; ``unknown_hint``: what would report it, for the "engagement unknown" warning;
    - ``discover``: the knob's value from discovery's raw answers (None: not found); ``server_info_keys``: the
      SGLang ``/get_server_info`` keys discovery keeps for it; ``reported_by``: paths of the ``discovered``
      record (as ``facts``; ``engine_args``: the arguments the tool started its engine with) whose presence
      means the endpoint did report this knob — where one is there and discovery found no value, the engine
      runs its default (off), not an unknown value (a knob discovery states only when it is on);
    - ``words``: its name in the recommendation's prose; ``advice``: how to turn it on, per engine;
    - ``rank``: where it stands among the levers (the registry's order; the built-in ones first).
    """

    name: str
    summary: str
    phases: tuple[Phase, ...]
    projection: Projection
    words: str
    advice: str = ""
    aliases: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    flag_prefixes: tuple[str, ...] = ()
    request_fields: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()
    usage_fields: tuple[str, ...] = ()
    timings: tuple[str, ...] = ()
    metrics: MetricTable = field(default_factory=MetricTable)
    used_field: Optional[str] = None
    judge: Optional[Judge] = None
    unknown_hint: str = ""
    discover: Optional[Discover] = None
    server_info_keys: tuple[str, ...] = ()
    reported_by: tuple[str, ...] = ()
    rank: int = 100

    def names(self) -> tuple[str, ...]:
        """The knob's name and its aliases."""
        return (self.name, *self.aliases)
