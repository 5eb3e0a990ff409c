"""What a lever is: the knob it turns, the engine flags and discovered facts that name it, what each engine says
of it (discovery), the phase it acts on, how its engagement is measured, how ``analyze`` estimates it on recorded
traffic, and its words in the recommendation.

A :class:`Lever` is data (a frozen dataclass); its module under :mod:`leverbench.levers` declares it as
``LEVER`` (or several of one family as ``LEVERS``) and :mod:`.registry` finds it there.  This module imports
nothing of leverbench but :mod:`leverbench.json_types`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Callable, Literal, Mapping, Optional, TypedDict

from typing_extensions import TypeAlias

from ..json_types import JSONValue

#: The phases a lever may act on: a call's prefill, its decode, its wait for a slot, or all of its time.
Phase: TypeAlias = Literal["prefill", "decode", "queueing", "both"]
#: How the one-call-at-a-time projection (``analysis/rates/phases.py``) treats a lever: Amdahl on the prefill
#: seconds alone, on the decode seconds alone, or on the whole time ("both").
Projection: TypeAlias = Literal["prefill", "decode", "both"]
#: A knob's value: what an engine reported or a user declared, as JSON.
KnobValue: TypeAlias = JSONValue
#: The arguments that serve a knob's value on an engine the tool starts, for a tune whose knobs name levers
#: (:func:`.registry.serve_args`): *value* the knob's value, *config* the whole configuration (where a lever's
#: parameters are: the drafter's ``draft_tokens``).  ValueError, in words, for a value the engine cannot take.
ServeArgs: TypeAlias = Callable[[KnobValue, Mapping[str, KnobValue]], list[str]]


def engine_args(raw: Mapping[str, JSONValue]) -> list[str] | None:
    """The command line the tool started its engine with (discovery's ``known.engine_args``, each argument as
    text); None when the engine is not one the tool started (no such list)."""
    known = raw.get("known")
    args = known.get("engine_args") if isinstance(known, dict) else None
    return [str(a) for a in args] if isinstance(args, list) else None


def part(raw: Mapping[str, JSONValue], key: str) -> Mapping[str, JSONValue]:
    """One of discovery's raw answers that is a JSON object (``props``, ``server_info``, ``version``, ``known``);
    an empty one where the endpoint gave none."""
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def first_model(raw: Mapping[str, JSONValue]) -> Mapping[str, JSONValue]:
    """The first entry of the endpoint's model list (``/v1/models``), or an empty one."""
    models = raw.get("models")
    return models[0] if isinstance(models, list) and models and isinstance(models[0], dict) else {}


def cache_config(raw: Mapping[str, JSONValue]) -> Mapping[str, JSONValue]:
    """vLLM's ``vllm:cache_config_info`` labels in discovery's metrics scrape, or an empty mapping."""
    metrics = raw.get("metrics")
    labels = metrics.get("vllm:cache_config_info") if isinstance(metrics, dict) else None
    return labels[0] if isinstance(labels, list) and labels and isinstance(labels[0], dict) else {}


def first_of(*values: KnobValue) -> KnobValue:
    """The first value that says something (not None, not ""), in the order the sources are trusted; None."""
    return next((v for v in values if v is not None and v != ""), None)


def as_int(value: object) -> int | None:
    """A number an engine reported as a whole number (``"16"``, 16.0), or None (absent, a boolean, not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return int(value)
    except (ValueError, OverflowError):
        return None


def file_name(path: object) -> str | None:
    """A model path's last part when it is a filesystem path; a hub id (``org/name``) as given; None for nothing."""
    if not isinstance(path, str) or not path:
        return None
    if path.startswith(("/", "./", "../", "~")) or "\\" in path:
        return PurePath(path.replace("\\", "/")).name
    return path


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
    the block, averaged over label sets.  ``served_prompt``: vLLM counters of prompt tokens the lever served
    without prefilling them (a cache's hits): Δ``vllm:prompt_tokens`` less their Δ is what the server prefilled,
    the numerator of its prefill rate.

    Each figure is a key of the arm's ``server_metrics`` row in ``summary.json`` (a number; the schema names the
    built-in levers' and takes any other lever's), is in :attr:`ArmEvidence.metrics`, and is compared under load.
    ``shown``: the figures the report's server-metrics table shows, in order, as (figure, column heading, decimal
    places; None: a percentage); a figure not listed there is in the summary only."""

    shares: tuple[tuple[str, str, str], ...] = ()
    deltas: tuple[tuple[str, str], ...] = ()
    gauges: tuple[tuple[str, str], ...] = ()
    served_prompt: tuple[str, ...] = ()
    shown: tuple[tuple[str, str, Optional[int]], ...] = ()

    def figures(self) -> tuple[str, ...]:
        """The names its figures take in a row, in the table's order (a share's ``llamacpp_`` / ``sglang_`` prefix
        dropped), each once."""
        names = [n.removeprefix("llamacpp_").removeprefix("sglang_") for n, *_ in self.shares]
        return tuple(dict.fromkeys([*names, *(n for n, _ in self.deltas), *(n for n, _ in self.gauges)]))


@dataclass(frozen=True)
class CallSums:
    """What one arm's calls say, summed over the calls engagement counts (``analysis/experiment/engaged.py``), by
    the ledger's names: prompt tokens, cached prompt tokens (usage ``cached_tokens``, else llama.cpp
    ``timings.cache_n``) and whether any call said them, drafted and accepted tokens (``timings.draft_n``,
    ``draft_n_accepted``).  A lever measured from another per-call figure adds it here and in the engagement
    module's sums (a figure the ledger must carry first)."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_seen: bool = False
    draft_n: int = 0
    draft_n_accepted: int = 0


@dataclass(frozen=True)
class ArmEvidence:
    """What an engagement judge (:attr:`Lever.judge`) or measure (:attr:`Lever.measure`) sees of one arm: its knobs
    (``analysis/base/knobs.py``), its ``discovered`` record (the ledger header's, as discovery wrote it), its own
    server-metrics figures (the levers' :class:`MetricTable` figures), its calls' sums and the experiment's
    engagement settings (``engaged_acceptance_min``)."""

    arm: str
    knobs: Mapping[str, KnobValue]
    discovered: Mapping[str, JSONValue]
    metrics: Mapping[str, float]
    calls: CallSums = field(default_factory=CallSums)
    settings: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Measured:
    """A measured lever's answer for one arm (:attr:`Lever.measure`): its figures (keys of the ``engaged`` row, in
    the row's order, written before the levers' credits), figures written after them (``after``), whether the arm
    used it (True, False, None: nothing reports it), and the warning for an arm that turns it on when it did not
    (``not_engaged``) or when nothing says (``unknown``)."""

    figures: Mapping[str, JSONValue]
    used: Optional[bool]
    not_engaged: str = ""
    unknown: str = ""
    after: Mapping[str, JSONValue] = field(default_factory=dict)


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
Measure: TypeAlias = Callable[[ArmEvidence], Measured]


@dataclass(frozen=True)
class TrafficFacts:
    """What ``analyze`` knows of a trace when it words a lever's parameter (:attr:`TrafficSaving.parameter`): the
    values of the lever's rate across the rates used (its truthy ones), the answer cap and whether it is the
    median output (the default), the calls that record cached tokens, those tokens and all input tokens, and the
    cached share assumed where a call records none (``--cached-share``)."""

    rate_values: tuple[float, ...]
    answer_cap: float
    answer_cap_default: bool
    cached_calls: int
    cached_tokens: float
    input_tokens: float
    assumed_cached_share: Optional[float]


class GroupSums(TypedDict):
    """A group of a trace's calls (one model, one input-length bucket) as ``analyze`` sums it
    (``analysis/traffic/sums.py``; the schema's ``PhaseSums`` is this with the group's model and bucket):
    ``calls``, ``input`` and ``output`` tokens, the modelled ``prefill``, ``decode`` and ``queue`` seconds, ``cached``
    tokens (recorded or assumed) and ``cached_calls`` (the calls that have them), ``excess`` (output tokens above the
    answer cap), ``ttft_calls``, ``beyond`` (calls past the measured input)."""

    calls: int
    input: float
    output: float
    prefill: float
    decode: float
    queue: float
    cached: float | None
    cached_calls: int
    excess: float
    ttft_calls: int
    beyond: int


@dataclass(frozen=True)
class TrafficSaving:
    """How ``leverbench analyze`` estimates a lever on recorded traffic (``analysis/traffic/analyze.py``): Amdahl,
    each lever removing time from its own phase (the lever's first of :attr:`Lever.phases`) only.

    - ``rate``: the field of the traffic's rates its saving needs (``prefill_tps``, ``decode_tps``,
      ``drafter_speedup``: ``analysis/traffic/rates.py``); the saving's range runs over that rate's measured values;
    - ``saved``: the seconds it removes from one group of calls (:data:`GroupSums`) at a value of that rate (None:
      unknown for the group, as a speedup nobody measured);
    - ``parameter``: the row's parameter in words (:class:`TrafficFacts`; None: none to state);
    - ``unknown``: why it is not estimated when no group's saving is known (what to give);
    - ``first``: whether the recommendation may tell to try it first on the phase it acts on (the answer cap
      only pays where shorter answers still do the job: it is never named first);
    - ``condition``: a condition its figure holds under, in words, for the conditions the analysis states (None:
      none to state).
    """

    rate: str
    saved: Callable[[GroupSums, Optional[float]], Optional[float]]
    parameter: Callable[[TrafficFacts], Optional[str]]
    unknown: str = ""
    first: bool = True
    condition: Optional[Callable[[TrafficFacts], Optional[str]]] = None


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
    - engagement: ``metrics`` (:class:`MetricTable`): the server's figures it is read from; ``measure``: for a
      lever measured on every arm from its calls and those figures (prefix cache, drafter), its figures and
      whether the arm used it (:class:`Measured`), written into the ``engaged`` row under its own keys, the
      answer under ``used_field`` and, where the arm turns it on, under its name; ``judge``: for any other
      lever, a function of one arm's evidence — its answer is the row's ``levers[name]``; ``unknown_hint``: what
      would report it, for the "engagement unknown" warning;
    - ``caches_prompts``: it serves a prompt's prefix it has seen from a cache (the prefix cache): the calls'
      cached tokens are its doing — an arm with it off has none, the traffic's cached tokens are its saving (and
      where a log's were served, it was already on), and ``whatif`` simulates it as a cache of finite capacity;
    - ``natural_answers``: its speed depends on the text it decodes (a drafter): an arm with it on is probed with
      natural answers (never forced past end-of-sequence) and its decode rate fitted on them;
    - ``traffic``: how ``analyze`` estimates it on recorded traffic (:class:`TrafficSaving`; None: it does not);
    - ``file_facts``: those of its facts that name a file, compared by the file's name (one model loaded from two
      directories is one model);
    - ``discover``: the knob's value from discovery's raw answers (None: not found); ``server_info_keys``: the
      SGLang ``/get_server_info`` keys discovery keeps for it; ``reported_by``: paths of the ``discovered``
      record (as ``facts``; ``engine_args``: the arguments the tool started its engine with) whose presence
      means the endpoint did report this knob — where one is there and discovery found no value, the engine
      runs its default (off), not an unknown value (a knob discovery states only when it is on);
    - ``words``: its name in prose (the recommendation's, the reports', and the ``lever`` of its ``analyze``
      row); ``advice``: how to turn it on, per engine; ``stated``: how the report's line of the conditions a
      figure holds for states it ("switch": on or off, "prefix cache on"; "named": its value, none when off,
      "drafter ngram"; "": not there); unknown ("?") where the arm's knobs do not have it;
    - ``serve``: per engine the tool starts ("llama.cpp", "vllm"), the arguments that serve a value of the knob
      (:data:`ServeArgs`), for a tune whose knobs name levers; ``parameters``: other knob names that only qualify
      this lever's value (the drafter's ``draft_tokens``), read from the configuration by its ``serve``;
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
    metrics: MetricTable = field(default_factory=MetricTable)
    measure: Optional[Measure] = None
    used_field: Optional[str] = None
    judge: Optional[Judge] = None
    unknown_hint: str = ""
    caches_prompts: bool = False
    natural_answers: bool = False
    traffic: Optional[TrafficSaving] = None
    file_facts: tuple[str, ...] = ()
    stated: Literal["", "switch", "named"] = ""
    discover: Optional[Discover] = None
    server_info_keys: tuple[str, ...] = ()
    reported_by: tuple[str, ...] = ()
    serve: Mapping[str, ServeArgs] = field(default_factory=dict)
    parameters: tuple[str, ...] = ()
    rank: int = 100

    def names(self) -> tuple[str, ...]:
        """The knob's name and its aliases."""
        return (self.name, *self.aliases)


def count_value(value: KnobValue, what: str) -> int:
    """A knob's value that counts (slots, tokens): a whole number of at least 1; ValueError in words otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a whole number of at least 1, not {value!r}")
    return value


def switch_value(value: KnobValue, what: str) -> bool:
    """A knob's value that is on or off: true or false; ValueError in words otherwise."""
    if not isinstance(value, bool):
        raise ValueError(f"{what} is on or off: true or false, not {value!r}")
    return value


def name_value(value: KnobValue, what: str) -> str:
    """A knob's value that names something (a dtype, a draft kind): a word without blanks; ValueError otherwise."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError(f"{what} must be a name (a word without blanks), not {value!r}")
    return value

