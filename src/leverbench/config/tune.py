"""A tune file (``leverbench tune``, issue 40): an experiment file with one arm, the **template**, whose engine is a
command template (``kind = "command"``), and a ``[tune]`` table saying which of its placeholders to search over.

    [[arms]]
    name = "sim"
    engine = { kind = "command", command = "leverbench sim --port {port} --draft-k {k} --slots {slots}" }

    [tune]
    knobs = { k = [0, 2, 4, 8], slots = [1, 2] }   # placeholders of the template, and the values each may take
    baseline = { k = 0, slots = 1 }                 # the configuration run today (default: the template's own
                                                    # values, else each knob's first)
    exclude = [{ k = 8, slots = 2 }]                # partial configurations left out of the search
    concurrency = [1, 4]                            # the operating points: requests in flight on the engine while
                                                    # each turn runs (its race's [experiment] in_flight)
    min_effect = 1.05                               # the least speed-up that counts as "better"
    confidence = 0.95
    max_repeats = 12                                # a race stops undecided here
    budget_engine_s = 1800                          # stop starting races past this many engine-seconds
    objective = "turn_time"                         # or "gpu_hours": a turn's time × its configuration's GPUs
    # gpus = "tp"                                   # the GPUs of each configuration (a knob of counts, or
                                                    # { KNOB = [N, ...] } per value); default: the template's

Every race is a run of this experiment with two arms made from the template (:func:`race_experiment`): the
incumbent (the baseline role) and the candidate (the treatment), each placeholder of a knob filled with the
configuration's value.  The file's other tables (``[experiment]``, ``[[cases]]``, ``[probes]``) apply to every race.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..engines.command_template import as_text, check_command, check_values, placeholders
from ..engines.llama_flags import FlagError
from ..engines.llama_flags import check as check_llama_flags
from ..errors import ConfigError
from ..levers.registry import SERVED_BY_KIND, moots, serve_args
from .adaptive import AdaptiveSpec
from .experiment import Arm, LoadedExperiment, load_data, read_toml
from .limits import InFlight, Repeats
from .names import Label
from .problems import first_error

#: A knob's value in the file: what the template's placeholder is filled with.
TomlValue = Union[bool, int, float, str]
#: The most configurations a space may hold (a grid this large is no tune: split it).
MAX_CONFIGURATIONS = 10_000


class TuneSpec(BaseModel):
    """The ``[tune]`` table (module docstring)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    knobs: dict[Label, list[TomlValue]] = Field(min_length=1)
    baseline: dict[Label, TomlValue] = Field(default_factory=dict)
    exclude: list[dict[Label, TomlValue]] = Field(default_factory=list)
    concurrency: list[InFlight] = Field(default_factory=lambda: [1], min_length=1)
    min_effect: float = 1.05
    confidence: float = 0.95
    max_repeats: Repeats = 12
    budget_engine_s: float | None = Field(None, gt=0.0)
    # what "better" means: the turn's time, or the GPU-hours a turn costs (its time × the configuration's GPUs)
    objective: Literal["turn_time", "gpu_hours"] = "turn_time"
    # the GPUs of each configuration: the knob whose values are the GPU count ("tp"), or one knob's GPU count per
    # value ({ tp = [1, 2, 4] }); left out: each configuration's template conditions' gpus (default 1)
    gpus: Union[Label, dict[Label, list[int]], None] = None

    def gpus_of(self, config: dict[str, TomlValue]) -> int | None:
        """The GPUs configuration *config* runs on (None: as the template declares, the same for every one)."""
        if self.gpus is None:
            return None
        if isinstance(self.gpus, str):
            v = config[self.gpus]
            assert isinstance(v, int)  # (checked: a count)
            return v
        ((knob, counts),) = self.gpus.items()
        return counts[self.knobs[knob].index(config[knob])]

    def adaptive(self) -> AdaptiveSpec:
        """Each race's adaptive repeats: the tune's least effect, confidence and most repeats."""
        return AdaptiveSpec(min_effect=self.min_effect, confidence=self.confidence, max_repeats=self.max_repeats)

    @model_validator(mode="after")
    def _consistent(self) -> TuneSpec:
        try:
            self.adaptive()
        except ValidationError as err:  # (the same bounds as [experiment] adaptive's, said the same way)
            e = err.errors()[0]
            raise ValueError(f"{e['loc'][0]}: {e['msg'].removeprefix('Value error, ')}") from None
        for name, values in self.knobs.items():
            if not values:
                raise ValueError(f"knob {name!r} has no values")
            for i, v in enumerate(values):
                for w in values[:i]:  # (1 and true, 0 and 0.0, 1 and "1": one value, or one text in the command)
                    if v == w or as_text(v) == as_text(w):
                        raise ValueError(f"knob {name!r} lists {w!r} and {v!r}, which are the same value in the "
                                         "command: list each value once")
        for name, value in self.baseline.items():
            if name not in self.knobs:
                raise ValueError(f"baseline names {name!r}, which is not a knob (knobs: {', '.join(self.knobs)})")
            if value not in self.knobs[name]:
                raise ValueError(f"baseline {name} = {value!r} is not one of its values {self.knobs[name]}")
        for i, ex in enumerate(self.exclude):
            if not ex:
                raise ValueError(f"exclude[{i}] is empty (it would exclude every configuration)")
            for name, value in ex.items():
                if name not in self.knobs:
                    raise ValueError(f"exclude[{i}] names {name!r}, which is not a knob")
                if value not in self.knobs[name]:
                    raise ValueError(f"exclude[{i}]: {name} = {value!r} is not one of its values")
        size = math.prod(len(values) for values in self.knobs.values())
        if size > MAX_CONFIGURATIONS:
            raise ValueError(f"the knobs make {size:,} configurations, more than {MAX_CONFIGURATIONS:,}: search fewer "
                             "values (or tune in steps)")
        if len(set(self.concurrency)) < len(self.concurrency):
            raise ValueError(f"concurrency {self.concurrency} names a point twice")
        self._check_gpus()
        if self.objective == "gpu_hours" and self.gpus is None:
            raise ValueError('objective "gpu_hours" needs each configuration\'s GPUs: gpus = "KNOB" (a knob of GPU '
                             'counts) or gpus = { KNOB = [N, ...] } (without them every configuration has the same '
                             'GPUs, and the objective is the turn time: leave it out)')
        return self

    def _check_gpus(self) -> None:
        if isinstance(self.gpus, str):
            if self.gpus not in self.knobs:
                raise ValueError(f"gpus names {self.gpus!r}, which is not a knob (knobs: {', '.join(self.knobs)})")
            bad = [v for v in self.knobs[self.gpus] if isinstance(v, bool) or not isinstance(v, int) or v < 1]
            if bad:
                raise ValueError(f"gpus = {self.gpus!r}: its values are the GPU counts, whole numbers of at least 1, "
                                 f"not {bad[0]!r} (give them per value: gpus = {{ {self.gpus} = [1, 2, ...] }})")
        elif isinstance(self.gpus, dict):
            if len(self.gpus) != 1:
                raise ValueError("gpus gives the GPU counts of one knob's values: gpus = { KNOB = [N, ...] }")
            ((knob, counts),) = self.gpus.items()
            if knob not in self.knobs:
                raise ValueError(f"gpus names {knob!r}, which is not a knob (knobs: {', '.join(self.knobs)})")
            if len(counts) != len(self.knobs[knob]) or any(isinstance(n, bool) or n < 1 for n in counts):
                raise ValueError(f"gpus.{knob}: one GPU count (a whole number of at least 1) per value of the knob "
                                 f"({len(self.knobs[knob])}: {self.knobs[knob]}), not {counts}")


class LoadedTune(BaseModel):
    """A tune file read and checked: the experiment as the baseline's run (its one arm the template, its knobs'
    placeholders filled with the baseline's values), the ``[tune]`` table, and the baseline in full."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    path: Path
    experiment: LoadedExperiment
    spec: TuneSpec
    baseline: dict[str, TomlValue]

    @property
    def template(self) -> Arm:
        return self.experiment.spec.arms[0]


def load_tune(path: str | Path) -> LoadedTune:
    """Read and check a tune file (module docstring).  Raises ConfigError only: the file, the key, what is wrong."""
    path = Path(path)
    file = str(path)
    data = read_toml(path)
    raw = data.pop("tune", None)
    if not isinstance(raw, dict):
        raise ConfigError(file, "tune", "a tune file needs a [tune] table (knobs = { NAME = [VALUES] }, ...); "
                          "see docs/tune.md" if raw is None else "must be a table")
    try:
        spec = TuneSpec.model_validate(raw)
    except ValidationError as err:
        problem = first_error(file, err, TuneSpec)
        raise ConfigError(file, f"tune.{problem.key}" if problem.key else "tune", problem.message) from None
    arms = data.get("arms")
    if not isinstance(arms, list) or len(arms) != 1 or not isinstance(arms[0], dict):
        raise ConfigError(file, "arms", "a tune file has exactly one [[arms]], the template each configuration is "
                          "made from")
    engine = arms[0].get("engine", {"kind": "embedded"})
    kind = engine.get("kind", "embedded") if isinstance(engine, dict) else None
    if not isinstance(engine, dict) or not (kind == "command" and isinstance(engine.get("command"), str)
                                            or kind in SERVED_BY_KIND):
        raise ConfigError(file, "arms[0].engine", "the template's engine must be a command template (engine = { kind "
                          "= \"command\", command = \"... --port {port} ... {KNOB} ...\" }), or the embedded "
                          "llama.cpp or vLLM engine (kind \"embedded\" or \"vllm\") with knobs that name levers")
    if kind == "command":
        try:
            check_command(engine["command"])
        except ValueError as exc:
            raise ConfigError(file, "arms[0].engine.command", str(exc)) from None
        found = placeholders(engine["command"])
        for name in spec.knobs:
            if name not in found:
                raise ConfigError(file, f"tune.knobs.{name}", f"is no placeholder of arms[0].engine.command (its "
                                  f"placeholders: {', '.join(sorted(found)) or 'none'})")
    raw_values = engine.get("values") if kind == "command" else None
    given: dict[str, object] = raw_values if isinstance(raw_values, dict) else {}
    baseline: dict[str, TomlValue] = {}
    for name, values in spec.knobs.items():
        value = spec.baseline.get(name, given.get(name, values[0]))
        if not isinstance(value, (bool, int, float, str)) or value not in values:
            raise ConfigError(file, f"arms[0].engine.values.{name}", f"{value!r} is not one of tune.knobs.{name}'s "
                              f"values {values}: the baseline must be in the space")
        baseline[name] = values[values.index(value)]  # (as the knob lists it: 0, not 0.0)
    section = data.get("experiment")
    if isinstance(section, dict) and "adaptive" in section:
        raise ConfigError(file, "experiment.adaptive", "a tune sets each race's adaptive repeats from [tune] "
                          "(min_effect, confidence, max_repeats): leave it out")
    if isinstance(section, dict) and "in_flight" in section:
        raise ConfigError(file, "experiment.in_flight", "a tune sets each race's requests in flight from "
                          "tune.concurrency (its operating points): leave it out")
    if isinstance(section, dict) and isinstance(section.get("repeats"), int) and section["repeats"] > spec.max_repeats:
        raise ConfigError(file, "experiment.repeats", f"{section['repeats']} is more than tune.max_repeats "
                          f"({spec.max_repeats}): a race's first rounds cannot exceed its most repeats")
    arms[0] = {**arms[0], "role": "baseline",
               "engine": {**engine, "values": {**given, **baseline}} if kind == "command" else engine}
    if isinstance(section, dict) and "name" in section and isinstance(arms[0].get("name"), str):
        data["experiment"] = {**section, "baseline": arms[0]["name"]}
    experiment = load_data(data, path)
    checked = experiment.spec.arms[0].engine
    assert checked is not None  # (loaded: an engine the tool starts)
    if checked.command is not None:
        for config in _allowed(spec):  # every configuration's command splits into arguments (a quote a value opens)
            try:
                check_values(checked.command, {**checked.values, **config})
            except ValueError as exc:
                raise ConfigError(file, "tune.knobs", f"with {_words(config)}, {exc}") from None
    else:
        _check_served(file, spec, SERVED_BY_KIND[checked.kind], list(checked.args), baseline)
    if any(ex.items() <= baseline.items() for ex in spec.exclude):
        raise ConfigError(file, "tune.exclude", "excludes the baseline itself")
    return LoadedTune(path=path, experiment=experiment, spec=spec, baseline=baseline)


def _words(config: dict[str, TomlValue]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def _allowed(spec: TuneSpec) -> list[dict[str, TomlValue]]:
    return [c for c in _grid(spec) if not any(ex.items() <= c.items() for ex in spec.exclude)]


def toml_key(k: str) -> str:
    """*k* as a TOML key: bare where it may be, else quoted."""
    return k if k and all(c.isalnum() or c in "_-" for c in k) and k.isascii() else json.dumps(k, ensure_ascii=False)


def _check_served(file: str, spec: TuneSpec, engine: str, template_args: list[str],
                  baseline: dict[str, TomlValue]) -> None:
    """Every allowed configuration of knobs that name levers serves on *engine* (:func:`serve_args`; on llama.cpp,
    arguments the bundled server takes), no flag a knob sets is one the template's own arguments set too, and no two
    configurations serve the same arguments (a knob that another makes moot: ``draft_tokens`` with no drafter)."""
    seen: dict[tuple[str, ...], dict[str, TomlValue]] = {}
    own = {a.partition("=")[0] for a in template_args if a.startswith("-")}
    for config in _allowed(spec):
        try:
            args = tuple(serve_args(engine, dict(config)))
        except ValueError as exc:
            raise ConfigError(file, "tune.knobs", f"{exc}") from None
        twice = sorted(own & {a.partition("=")[0] for a in args if a.startswith("-")})
        if twice:
            raise ConfigError(file, "arms[0].engine.args", f"sets {twice[0]}, which a knob of [tune] sets for each "
                              "configuration: leave it to the knob (remove it from args)")
        if engine == "llama.cpp":
            try:
                check_llama_flags([*template_args, *args])
            except FlagError as exc:
                raise ConfigError(file, "tune.knobs", f"with {_words(config)}, {exc}") from None
        other = seen.setdefault(args, config)
        if other is not config:
            drop = other if config == baseline else config  # (never suggest excluding the baseline)
            keep = config if drop is other else other
            part = {k: v for k, v in drop.items() if keep[k] != v}  # the moot knobs, and what makes them moot
            part = {**{k: v for k, v in drop.items() if k not in part and moots(k, part)}, **part}
            raise ConfigError(file, "tune.exclude", f"{_words(other)} and {_words(config)} start the same engine "
                              f"({' '.join(args) or 'no argument of their own'}): exclude one, e.g. exclude = [{{ "
                              + ", ".join(f"{toml_key(k)} = {json.dumps(v, ensure_ascii=False)}"
                                          for k, v in part.items()) + " }]")


def served_args(tune: LoadedTune, config: dict[str, TomlValue]) -> list[str]:
    """The template's own arguments, then those that serve *config* (an embedded or vLLM template)."""
    engine = tune.template.engine
    assert engine is not None and engine.kind in SERVED_BY_KIND
    return [*engine.args, *serve_args(SERVED_BY_KIND[engine.kind], dict(config))]


def _grid(spec: TuneSpec) -> list[dict[str, TomlValue]]:
    """Every configuration of the space, exclusions included (at most :data:`MAX_CONFIGURATIONS`: checked)."""
    names = list(spec.knobs)
    return [dict(zip(names, combo)) for combo in itertools.product(*spec.knobs.values())]


def race_experiment(tune: LoadedTune, incumbent: dict[str, TomlValue], candidate: dict[str, TomlValue],
                    incumbent_name: str, candidate_name: str, repeats: int | None = None,
                    point: int = 1) -> LoadedExperiment:
    """The experiment of one race at the operating point *point* (its turns timed at that many requests in flight:
    ``[experiment] in_flight``): the template as two arms, the incumbent (role baseline) and the candidate
    (treatment), each with its configuration's values; adaptive repeats at the tune's least effect, confidence and
    most repeats."""
    template = tune.template
    engine = template.engine
    assert engine is not None  # (load_tune checked: a command template)

    def arm(name: str, role: str, values: dict[str, TomlValue]) -> Arm:
        spec = engine.model_copy(update={"values": {**engine.values, **values}} if engine.command is not None
                                 else {"args": served_args(tune, values)})
        return template.model_copy(update={"name": name, "role": role, "engine": spec})

    base = tune.experiment.spec
    section = base.experiment.model_copy(update={
        "baseline": incumbent_name,
        "repeats": repeats if repeats is not None else base.experiment.repeats,
        "adaptive": tune.spec.adaptive(), "in_flight": point})
    spec = base.model_copy(update={"experiment": section, "arms": [arm(incumbent_name, "baseline", incumbent),
                                                                   arm(candidate_name, "treatment", candidate)]})
    return tune.experiment.model_copy(update={"spec": spec})
