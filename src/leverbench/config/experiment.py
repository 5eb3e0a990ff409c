"""The experiment file: TOML in, validated pydantic models out (the ``[[load]]`` stages: :mod:`.stages`).

Every problem is reported as a :class:`~leverbench.errors.ConfigError` naming
the file, the key (dotted path, e.g. ``arms[1].engine.kind``) and what is wrong;
unknown keys get the nearest valid key as a suggestion.
"""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, ValidationError, field_validator, model_validator

from ..errors import ConfigError
from ..json_types import JSONObject
from ..recording import RecordedTurn
from ..redact import redact_url
from .adaptive import AdaptiveSpec, check_adaptive
from .cache import CacheBetweenTurns, CacheReset, cache_problem, check_restart
from .engine_spec import EngineSpec as EngineSpec  # (an arm's engine table: its own module)
from .files import read_json, read_text, regular_file, resolve_binary
from .limits import (
    MAX_CONCURRENCY,
    MAX_DEPTHS,
    MAX_GPU_HOUR_USD,
    MAX_GPUS,
    MAX_SELECT,
    MAX_TOKENS,
    CallSeconds,
    CallSecondsOrZero,
    Flag,
    Fraction,
    GpuSampleHz,
    InFlight,
    PositiveTolerance,
    Repeats,
    Retries,
    Seed,
    Steps,
    Temperature,
    Tokens,
    TokensOrZero,
    Tolerance,
    Turns,
    check_number,
)
from .names import FilePath, Label, RunName, Url, json_problem
from .problems import first_error
from .recorded import recorded_case_problem
from .stages import LoadStage, check_plans, check_stages, check_trace_paths
from .variants import expand_variants

DEFAULT_EXPERIMENT = Path("examples/agent-turns.toml")
#: Declared conditions taken as numbers (key, lowest, highest): the ledger's header model says the same
#: (``ledger.schema.KnobNumbers``); kv_capacity_tokens need not be whole.
KNOB_NUMBERS = (("slots", 1, MAX_CONCURRENCY), ("context_length", 1, 1e12), ("block_size", 1, MAX_TOKENS),
                ("num_gpu_blocks", 0, 1e12), ("kv_capacity_tokens", 0, 1e12))


class _Strict(BaseModel):
    # strict: a string or a boolean is not a number (repeats = "2", rate = true), a float not a whole number
    model_config = ConfigDict(extra="forbid", frozen=False, strict=True)


class TimeoutsSpec(_Strict):
    """A call's time limits in seconds (``[experiment] timeouts``); the one definition of their defaults,
    which the client (:func:`leverbench.runner.client.stream_chat`) uses as its ``Timeouts`` too.  Frozen:
    one instance serves as the client's default for every call."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    connect_s: CallSeconds = 30.0
    first_token_s: CallSeconds = 600.0
    idle_s: CallSeconds = 120.0
    total_s: CallSeconds = 1800.0


class ExperimentSection(_Strict):
    name: RunName
    repeats: Repeats = 3
    order: Literal["interleaved", "blocked"] = "interleaved"
    baseline: str
    volume_tolerance_cell: Tolerance = 0.20
    volume_tolerance_total: Tolerance = 0.05
    store_text: Flag = False
    drift_tolerance: PositiveTolerance = 0.10
    sentinel_tokens: TokensOrZero = Field(48, description="tokens each drift sentinel decodes (more: a steadier "
                                                          "rate); 0 disables them")
    timeouts: TimeoutsSpec = Field(default_factory=TimeoutsSpec)
    retries: Retries = Field(0, description="retry a failed call this many times; every attempt is recorded")
    engaged_acceptance_min: Fraction = 0.2
    adaptive: AdaptiveSpec | None = Field(None, description="adaptive repeats (true: the defaults; false or left "
                                                            "out: a fixed number of repeats)")
    # the engines the tool starts: all up for the whole run ("together"), or each arm's started, warmed, used for
    # its block of the round and stopped before the next arm's ("one at a time"); left out: one at a time when two
    # of them would share a GPU, else together (runner.engine_mode)
    engines: Literal["together", "one at a time"] | None = None
    # GPU telemetry: samples per second (NVML for the engines the tool starts, a DCGM exporter for an endpoint);
    # left out: 10; 0: none
    gpu_sample_hz: GpuSampleHz | None = None
    cache_between_turns: CacheBetweenTurns = "cold"  # the state every turn meets (config.cache)
    cache_reset: CacheReset = "auto"  # how each arm is brought to it
    in_flight: InFlight = Field(1, description="requests in flight on the arm while each turn runs: the turn and "
                                               "in_flight - 1 companions, copies of its case's first call "
                                               "(runner.companions); 1: each turn alone")

    @field_validator("adaptive", mode="before")
    @classmethod
    def _adaptive_switch(cls, v: Any) -> Any:
        if v is True:
            return {}
        return None if v is False else v

    @model_validator(mode="after")
    def _blocks_interleaved(self) -> "ExperimentSection":
        if self.engines == "one at a time" and self.order == "blocked":
            raise ValueError('engines = "one at a time" runs each round as a block per arm, counterbalanced, with '
                             'its sentinels: it needs order = "interleaved" (the default); blocked order runs '
                             "every arm's sentinels inside each arm's block, which needs every engine up")
        problem = cache_problem(self.cache_between_turns, self.cache_reset)
        if problem:
            raise ValueError(problem)
        return self


class Arm(_Strict):
    name: Label = Field(min_length=1)
    role: Literal["baseline", "control", "treatment"] = "treatment"
    base_url: Url | None = None
    model: Label | None = None
    api_key_env: Label | None = None
    engine: EngineSpec | None = None
    # the user's: any TOML value, each (pydantic takes ``object`` as any; ``json_types.JSONObject``, an implicit
    # recursive alias, it cannot build).  Request fields must be JSON (runner.run.check_request_fields).
    request: dict[str, object] = Field(default_factory=dict)  # merged into every request body
    conditions: dict[str, object] = Field(default_factory=dict)  # declared: free-form
    metrics_url: Url | None = None
    metrics_send_key: Flag = False  # send the api_key_env key to a metrics_url on another origin too
    gpu_metrics_url: Url | None = None  # a DCGM exporter's /metrics for the endpoint's GPUs (default: metrics_url's)

    @model_validator(mode="after")
    def _endpoint_xor_engine(self) -> "Arm":
        if self.engine is None and not self.base_url:
            raise ValueError("give either base_url (+ model) for an existing endpoint or engine = { kind = "
                             "\"embedded\" } (llama.cpp), { kind = \"vllm\" }, { kind = \"sim\" } (the simulator) "
                             "or { kind = \"command\" } (any engine, from a command template)")
        if self.engine is not None and self.base_url:
            raise ValueError("give either base_url or engine, not both")
        if self.base_url and not self.model:
            raise ValueError("an arm with base_url needs model (the model id the endpoint serves)")
        for forbidden in ("messages", "stream", "model"):
            if forbidden in self.request:
                raise ValueError(f"request may not set {forbidden!r}: the runner owns it")
        if self.metrics_send_key and not (self.metrics_url and self.api_key_env):
            raise ValueError("metrics_send_key sends the api_key_env key to metrics_url: give both, or drop it")
        if self.api_key_env and self.base_url and "@" in urlsplit(self.base_url).netloc:
            raise ValueError("base_url carries credentials (user:password@) and api_key_env is set: give one of them")
        for what, values in (("request", self.request), ("conditions", self.conditions)):  # sent, or recorded:
            problem = json_problem(values, what, sent=True)  # both as JSON (a TOML date is neither)
            if problem:
                raise ValueError(problem)
        for key, what, positive, hi in (("gpus", "GPUs per server", True, MAX_GPUS),  # costs and budgets are
                                        ("gpu_hour_usd", "the price of a GPU-hour", False, MAX_GPU_HOUR_USD)):  # priced
            v = self.conditions.get(key)  # with them
            problem = None if v is None else check_number(v, 0, hi, lo_open=positive)
            if problem:
                raise ValueError(f"conditions.{key} ({what}) {problem}")
        for key, lo, hi in KNOB_NUMBERS:  # the knobs a what-if serves with: the ledger's reader checks them too
            v = self.conditions.get(key)
            problem = None if v is None else check_number(v, lo, hi) or (
                None if key == "kv_capacity_tokens" or not isinstance(v, float) or v.is_integer()  # (an int: whole)
                else f"must be a whole number, got {v}")
            if problem:
                raise ValueError(f"conditions.{key} {problem}")
        return self


class Step(_Strict):
    prompt: str = Field(min_length=1)
    max_tokens: Tokens | None = None


class Variant(_Strict):
    """A prompt-discipline variant of a case: the same turn with its first prompt changed."""
    name: Label = Field(min_length=1)
    append: str | None = None      # text appended to the first prompt (e.g. "Answer in one sentence.")
    prompt: str | None = None      # or a replacement first prompt
    max_tokens: Tokens | None = None

    @model_validator(mode="after")
    def _one_change(self) -> "Variant":
        if (self.append is None) == (self.prompt is None):
            raise ValueError("give append or prompt (one of them)")
        return self


class Case(_Strict):
    name: Label = Field(min_length=1)
    system: str | None = None
    system_file: FilePath | None = None
    documents: list[FilePath] = Field(default_factory=list)
    prompt: str | None = Field(None, min_length=1)  # required, but for a case of recorded turns (from)
    max_tokens: Tokens = 256
    temperature: Temperature = 0.0  # greedy by default: sampling makes arms generate different volumes
    tools: FilePath | None = None
    # JSON: {"tool_name": "result" | {"result": ..., "latency_s": ...}, "default": ...}
    tool_script: FilePath | None = None
    tool_latency_s: CallSecondsOrZero = 0.0
    max_steps: Steps = 8
    think_tags: Flag = False          # the model writes its reasoning inside <think>...</think>
    steps: list[Step] = Field(default_factory=list)
    variants: list[Variant] = Field(default_factory=list)
    variant_of: str | None = None     # set by the loader on expanded variants; not for the file
    # recorded turns (docs/recording.md): a recording directory or a request log, relative to this file; each of
    # its turns (those select, sample and limit keep) becomes a case of its own, NAME/TURN
    from_: FilePath | None = Field(None, alias="from", min_length=1)
    format: Label | None = None       # the request log's format (default: detected)
    select: list[Label] = Field(default_factory=list, max_length=MAX_SELECT)  # turn ids or glob patterns of them
    sample: Turns | None = None       # this many turns, drawn at random (seed), in the recording's order
    seed: Seed = 0
    limit: Turns | None = None        # at most this many turns (the first, after select and sample)
    replay: Literal["recorded", "live"] = "recorded"
    recorded_from: str | None = None  # set by the loader on a recorded turn's case (its case); not for the file
    recorded_turn: str | None = None  # ... and the turn's id in the recording
    recorded_skipped: str | None = None  # ... and what its import left out, in words (None: nothing)

    @model_validator(mode="after")
    def _one_system(self) -> "Case":
        if self.system is not None and self.system_file is not None:
            raise ValueError("give system or system_file, not both")
        problem = recorded_case_problem(self)
        if problem:
            raise ValueError(problem)
        return self


class Probes(_Strict):
    output_tokens: list[Tokens] = Field(default_factory=lambda: [128, 1024])
    repeats: Repeats = 3
    case: str | None = None
    tolerance: PositiveTolerance = 0.05
    # prompt lengths in tokens; empty: the case's own prompt
    depths: list[Tokens] = Field(default_factory=list, max_length=MAX_DEPTHS)

    @field_validator("output_tokens")
    @classmethod
    def _two_lengths(cls, v: list[int]) -> list[int]:
        if len(v) != 2 or v[0] <= 0 or v[1] <= v[0]:
            raise ValueError("output_tokens must be two lengths [n1, n2] with 0 < n1 < n2")
        return v

    @field_validator("depths")
    @classmethod
    def _increasing_depths(cls, v: list[int]) -> list[int]:
        if any(d <= 0 for d in v) or any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError("depths must be prompt lengths in tokens, each > 0, in increasing order")
        return v


class Experiment(_Strict):
    experiment: ExperimentSection
    arms: list[Arm] = Field(min_length=1)
    cases: list[Case] = Field(min_length=1)
    probes: Probes | None = None
    load: list[LoadStage] = Field(default_factory=list)

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


class LoadedExperiment(BaseModel):
    """An experiment plus what was read from disk for it (document texts)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    path: Path
    spec: Experiment
    texts: dict[str, str]  # resolved relative path -> text
    # the cases' JSON files, as read (JSON: the values are JSONValue; typed ``object`` for pydantic, see Arm)
    tools: dict[str, list[dict[str, object]]]  # case name -> tool schemas
    tool_scripts: dict[str, dict[str, object]] = {}  # case name -> canned tool results
    # case name -> the recorded turn it replays (``from``: workload.recorded.expand.with_recorded reads them)
    recorded: dict[str, InstanceOf[RecordedTurn]] = {}  # (checked as instances: a dataclass of JSON)

    def snapshot(self) -> JSONObject:
        """The validated experiment as JSON, for the ledger's header: the arms' URLs redacted
        (:func:`~leverbench.redact.redact_url`), so credentials in them are never written."""
        snap = self.spec.model_dump(mode="json", by_alias=True)  # keys as the file spells them (from)
        for key in ("adaptive", "engines", "gpu_sample_hz"):  # as the headers of runs before these keys existed
            if snap["experiment"][key] is None:
                del snap["experiment"][key]
        for case in snap["cases"]:
            if case.get("recorded_skipped", 0) is None:
                del case["recorded_skipped"]
        for arm in snap["arms"]:
            for key in ("base_url", "metrics_url", "gpu_metrics_url"):
                if arm.get(key):
                    arm[key] = redact_url(arm[key])
            if arm.get("gpu_metrics_url", 0) is None:
                del arm["gpu_metrics_url"]
            if isinstance(arm.get("engine"), dict) and arm["engine"].get("devices", 0) is None:
                del arm["engine"]["devices"]
        return snap


# ---------------------------------------------------------------- loading


def _read_toml(path: Path) -> dict[str, object]:
    """The file's TOML document (its tables and values, as tomllib reads them: validated next)."""
    try:
        raw = regular_file(str(path), "", path, "the experiment file")
    except FileNotFoundError:
        raise ConfigError(str(path), "", "file not found") from None
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), "", f"not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        # message carries "(at line L, column C)"
        raise ConfigError(str(path), "", f"malformed TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ConfigError(str(path), "", "malformed TOML: arrays or tables nested too deep") from None


def _check_names(file: str, spec: Experiment) -> None:
    for what, labels in (("arms", [a.name for a in spec.arms]), ("cases", [c.name for c in spec.cases])):
        seen: dict[str, int] = {}
        for i, name in enumerate(labels):
            if name in seen:
                raise ConfigError(file, f"{what}[{i}].name", f"duplicate name {name!r} (also {what}[{seen[name]}])")
            seen[name] = i
    names = [a.name for a in spec.arms]
    if spec.experiment.baseline not in names:
        near = difflib.get_close_matches(spec.experiment.baseline, names, n=1) or [
            n for n in names if n.lower() == spec.experiment.baseline.lower()]
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ConfigError(file, "experiment.baseline", f"names no arm (arms: {', '.join(names)}){hint}")
    if spec.probes and spec.probes.case is not None and spec.probes.case not in {c.name for c in spec.cases}:
        raise ConfigError(file, "probes.case", f"names no case ({spec.probes.case!r})")
    for i, arm in enumerate(spec.arms):
        if arm.name == spec.experiment.baseline and arm.role != "baseline":
            raise ConfigError(file, f"arms[{i}].role",
                              f"arm {arm.name!r} is the experiment's baseline, so its role must be \"baseline\"")
        if arm.name != spec.experiment.baseline and arm.role == "baseline":
            raise ConfigError(file, f"arms[{i}].role",
                              f"only the experiment's baseline ({spec.experiment.baseline!r}) has role \"baseline\"; "
                              f"make arm {arm.name!r} \"control\" or \"treatment\" (or the baseline)")


def load(path: str | Path) -> LoadedExperiment:
    """Read, validate and resolve an experiment file.  Raises ConfigError only."""
    return load_data(_read_toml(Path(path)), Path(path))


def read_toml(path: str | Path) -> dict[str, object]:
    """The experiment file's TOML document, as read (:func:`load_data` validates it).  Raises ConfigError only."""
    return _read_toml(Path(path))


def load_data(data: dict[str, object], path: Path) -> LoadedExperiment:
    """:func:`load` of the TOML document *data* read from *path* (paths in it are relative to that file's folder;
    errors name that file).  Raises ConfigError only."""
    file = str(path)
    try:
        spec = Experiment.model_validate(data)
    except ValidationError as err:
        raise first_error(file, err, Experiment) from None
    _check_names(file, spec)
    check_adaptive(file, spec.experiment)
    base = path.resolve().parent
    for i, arm in enumerate(spec.arms):
        if arm.engine is not None and arm.engine.binary is not None:
            arm.engine.binary = resolve_binary(file, f"arms[{i}].engine.binary", base, arm.engine.binary)
    texts: dict[str, str] = {}
    tools: dict[str, list[dict[str, object]]] = {}
    tool_scripts: dict[str, dict[str, object]] = {}
    for i, case in enumerate(spec.cases):
        for j, doc in enumerate(case.documents):
            key, text = read_text(file, f"cases[{i}].documents[{j}]", base, doc)
            texts[doc] = text
        if case.system_file:
            _, text = read_text(file, f"cases[{i}].system_file", base, case.system_file)
            texts[case.system_file] = text
        if case.tools:
            schemas = read_json(file, f"cases[{i}].tools", base, case.tools)
            if not isinstance(schemas, list) or not all(isinstance(s, dict) for s in schemas):
                raise ConfigError(file, f"cases[{i}].tools", f"{case.tools} must hold a JSON list of tool schemas")
            tools[case.name] = schemas
        if case.tool_script:
            script = read_json(file, f"cases[{i}].tool_script", base, case.tool_script)
            if not isinstance(script, dict):
                raise ConfigError(file, f"cases[{i}].tool_script",
                                  f"{case.tool_script} must hold a JSON object keyed by tool name")
            tool_scripts[case.name] = script
        if case.variant_of is not None:
            raise ConfigError(file, f"cases[{i}].variant_of",
                              "set by leverbench for [[cases.variants]]; use variants instead")
    spec.cases = [*spec.cases, *expand_variants(file, spec)]
    check_restart(file, spec.experiment.cache_reset, spec.arms)
    problems = check_stages(spec.load, [a.name for a in spec.arms], [c.name for c in spec.cases])
    problems += check_plans(spec.load)
    problems += check_trace_paths(spec.load, base)
    if problems:
        raise ConfigError(file, *problems[0])
    for c in spec.cases:
        if c.variant_of:
            tools.update({c.name: tools[c.variant_of]} if c.variant_of in tools else {})
            tool_scripts.update({c.name: tool_scripts[c.variant_of]} if c.variant_of in tool_scripts else {})
    return LoadedExperiment(path=path, spec=spec, texts=texts, tools=tools, tool_scripts=tool_scripts)
