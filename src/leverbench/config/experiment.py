"""The experiment file: TOML in, validated pydantic models out (the ``[[load]]`` stages: :mod:`.stages`).

Every problem is reported as a :class:`~leverbench.errors.ConfigError` naming
the file, the key (dotted path, e.g. ``arms[1].engine.kind``) and what is wrong;
unknown keys get the nearest valid key as a suggestion.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..engines.llama_flags import FlagError
from ..engines.llama_flags import check as check_llama_flags
from ..errors import ConfigError
from ..redact import redact_url
from .adaptive import AdaptiveSpec, check_adaptive
from .files import read_json, read_text, resolve_binary
from .stages import LoadStage, check_stages, check_trace_paths

DEFAULT_EXPERIMENT = Path("examples/agent-turns.toml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class TimeoutsSpec(_Strict):
    """A call's time limits in seconds (``[experiment] timeouts``); the one definition of their defaults,
    which the client (:func:`leverbench.runner.client.stream_chat`) uses as its ``Timeouts`` too.  Frozen:
    one instance serves as the client's default for every call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    connect_s: float = Field(30.0, gt=0)
    first_token_s: float = Field(600.0, gt=0)
    idle_s: float = Field(120.0, gt=0)
    total_s: float = Field(1800.0, gt=0)


class ExperimentSection(_Strict):
    name: str
    repeats: int = Field(3, ge=1, le=1000)
    order: Literal["interleaved", "blocked"] = "interleaved"
    baseline: str
    volume_tolerance_cell: float = Field(0.20, ge=0)
    volume_tolerance_total: float = Field(0.05, ge=0)
    store_text: bool = False
    drift_tolerance: float = Field(0.10, gt=0)
    sentinel_tokens: int = Field(48, ge=0, description="tokens each drift sentinel decodes (more: a steadier rate); "
                                                       "0 disables them")
    timeouts: TimeoutsSpec = Field(default_factory=TimeoutsSpec)
    retries: int = Field(0, ge=0, le=10, description="retry a failed call this many times; every attempt is recorded")
    engaged_acceptance_min: float = Field(0.2, ge=0, le=1)
    adaptive: AdaptiveSpec | None = Field(None, description="adaptive repeats (true: the defaults; false or left "
                                                            "out: a fixed number of repeats)")

    @field_validator("adaptive", mode="before")
    @classmethod
    def _adaptive_switch(cls, v: Any) -> Any:
        if v is True:
            return {}
        return None if v is False else v


class EngineSpec(_Strict):
    """An engine the tool starts and stops for the arm.  ``kind``: ``embedded`` = llama.cpp's
    llama-server (the name predates a second engine and is kept), ``vllm`` = vLLM's OpenAI server
    (``scripts/install.sh --vllm``).  ``args`` go to the server after the tool's own flags;
    ``ctx_size`` is llama.cpp's ``--ctx-size`` and vLLM's ``--max-model-len``; ``threads`` is
    llama.cpp's (vLLM's CPU build binds its threads itself: ``VLLM_CPU_OMP_THREADS_BIND``)."""

    kind: Literal["embedded", "vllm"] = "embedded"
    args: list[str] = Field(default_factory=list)
    threads: int | None = Field(None, ge=1)
    ctx_size: int = Field(8192, ge=256)
    startup_timeout_s: float = Field(300.0, gt=0)
    # llama.cpp only: a llama-server binary to run instead of the prebuilt engine (a name on PATH, or a path
    # relative to the experiment file; the loaded experiment holds it resolved)
    binary: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _threads_for_llamacpp(self) -> "EngineSpec":
        if self.kind == "vllm" and self.threads is not None:
            raise ValueError("threads is llama.cpp's setting; vLLM's CPU build binds its own threads "
                             "(set VLLM_CPU_OMP_THREADS_BIND in the environment instead)")
        if self.kind == "vllm" and self.binary is not None:
            raise ValueError("binary names a llama-server for kind = \"embedded\"; vLLM is started from the "
                             "installed package (scripts/install.sh --vllm)")
        owned = ("--port", "--host", "-m", "--model") if self.kind == "embedded" else ("--port", "--host")
        for flag in owned:
            if flag in self.args:
                raise ValueError(f"args may not set {flag}: the tool starts the engine with its own (a free loopback "
                                 "port" + (", the bundled model)" if self.kind == "embedded" else ")"))
        if self.kind == "embedded" and self.binary is None:
            try:  # the prebuilt engine maps flags onto its parameters: one it does not know is an error now
                check_llama_flags(self.args)
            except FlagError as exc:
                raise ValueError(str(exc)) from None
        return self


class Arm(_Strict):
    name: str = Field(min_length=1)
    role: Literal["baseline", "control", "treatment"] = "treatment"
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    engine: EngineSpec | None = None
    request: dict[str, Any] = Field(default_factory=dict)
    conditions: dict[str, Any] = Field(default_factory=dict)
    metrics_url: str | None = None
    metrics_send_key: bool = False  # send the api_key_env key to a metrics_url on another origin too

    @model_validator(mode="after")
    def _endpoint_xor_engine(self) -> "Arm":
        if self.engine is None and not self.base_url:
            raise ValueError("give either base_url (+ model) for an existing endpoint or "
                             "engine = { kind = \"embedded\" } (llama.cpp) or { kind = \"vllm\" }")
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
        for key, positive in (("gpus", True), ("gpu_hour_usd", False)):  # costs and budgets are priced with them
            v = self.conditions.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                  or v < 0 or (positive and v == 0)):
                raise ValueError(f"conditions.{key} must be a {'positive' if positive else 'non-negative'} number "
                                 f"(GPUs per server; the price of a GPU-hour), not {v!r}")
        return self


class Step(_Strict):
    prompt: str = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)


class Variant(_Strict):
    """A prompt-discipline variant of a case: the same turn with its first prompt changed."""
    name: str = Field(min_length=1)
    append: str | None = None      # text appended to the first prompt (e.g. "Answer in one sentence.")
    prompt: str | None = None      # or a replacement first prompt
    max_tokens: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _one_change(self) -> "Variant":
        if (self.append is None) == (self.prompt is None):
            raise ValueError("give append or prompt (one of them)")
        return self


class Case(_Strict):
    name: str = Field(min_length=1)
    system: str | None = None
    system_file: str | None = None
    documents: list[str] = Field(default_factory=list)
    prompt: str = Field(min_length=1)
    max_tokens: int = Field(256, ge=1)
    temperature: float = Field(0.0, ge=0)  # greedy by default: sampling makes arms generate different volumes
    tools: str | None = None
    # JSON: {"tool_name": "result" | {"result": ..., "latency_s": ...}, "default": ...}
    tool_script: str | None = None
    tool_latency_s: float = Field(0.0, ge=0)
    max_steps: int = Field(8, ge=1, le=200)
    think_tags: bool = False          # the model writes its reasoning inside <think>...</think>
    steps: list[Step] = Field(default_factory=list)
    variants: list[Variant] = Field(default_factory=list)
    variant_of: str | None = None     # set by the loader on expanded variants; not for the file

    @model_validator(mode="after")
    def _one_system(self) -> "Case":
        if self.system is not None and self.system_file is not None:
            raise ValueError("give system or system_file, not both")
        return self


class Probes(_Strict):
    output_tokens: list[int] = Field(default_factory=lambda: [128, 1024])
    repeats: int = Field(3, ge=1)
    case: str | None = None
    tolerance: float = Field(0.05, gt=0)
    depths: list[int] = Field(default_factory=list)  # prompt lengths in tokens; empty: the case's own prompt

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
    tools: dict[str, list[dict[str, Any]]]  # case name -> tool schemas
    tool_scripts: dict[str, dict[str, Any]] = {}  # case name -> canned tool results

    def snapshot(self) -> dict[str, Any]:
        """The validated experiment as JSON, for the ledger's header: the arms' URLs redacted
        (:func:`~leverbench.redact.redact_url`), so credentials in them are never written."""
        snap = self.spec.model_dump(mode="json")
        if snap["experiment"]["adaptive"] is None:  # as the headers of runs before adaptive repeats existed
            del snap["experiment"]["adaptive"]
        for arm in snap["arms"]:
            for key in ("base_url", "metrics_url"):
                if arm.get(key):
                    arm[key] = redact_url(arm[key])
        return snap


# ---------------------------------------------------------------- errors


def _valid_keys(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the last key of *loc* (for suggestions)."""
    model: type[BaseModel] | None = Experiment
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        ann = field.annotation
        nxt = None
        for cand in (ExperimentSection, AdaptiveSpec, TimeoutsSpec, Arm, EngineSpec, Case, Step, Variant, Probes,
                     LoadStage):
            if ann is cand or cand in getattr(ann, "__args__", ()) or any(
                cand in getattr(a, "__args__", ()) for a in getattr(ann, "__args__", ())
            ):
                nxt = cand
                break
        model = nxt
    return model


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _first_error(file: str, err: ValidationError) -> ConfigError:
    e = err.errors()[0]
    loc = tuple(e["loc"])
    key = _dotted(loc)
    if e["type"] == "extra_forbidden":
        owner = _model_at(loc)
        hint = ""
        if owner is not None:
            near = difflib.get_close_matches(str(loc[-1]), _valid_keys(owner), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; valid keys: {', '.join(_valid_keys(owner))}"
        return ConfigError(file, key, f"unknown key{hint}")
    if e["type"] == "missing":
        return ConfigError(file, key, "required key is missing")
    msg = e["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return ConfigError(file, key, msg)


# ---------------------------------------------------------------- loading


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
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


def _check_names(file: str, spec: Experiment) -> None:
    for what, items in (("arms", spec.arms), ("cases", spec.cases)):
        seen: dict[str, int] = {}
        for i, item in enumerate(items):
            if item.name in seen:
                raise ConfigError(file, f"{what}[{i}].name",
                                  f"duplicate name {item.name!r} (also {what}[{seen[item.name]}])")
            seen[item.name] = i
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


def load(path: str | Path) -> LoadedExperiment:
    """Read, validate and resolve an experiment file.  Raises ConfigError only."""
    path = Path(path)
    file = str(path)
    data = _read_toml(path)
    try:
        spec = Experiment.model_validate(data)
    except ValidationError as err:
        raise _first_error(file, err) from None
    _check_names(file, spec)
    check_adaptive(file, spec.experiment)
    base = path.resolve().parent
    for i, arm in enumerate(spec.arms):
        if arm.engine is not None and arm.engine.binary is not None:
            arm.engine.binary = resolve_binary(file, f"arms[{i}].engine.binary", base, arm.engine.binary)
    texts: dict[str, str] = {}
    tools: dict[str, list[dict[str, Any]]] = {}
    tool_scripts: dict[str, dict[str, Any]] = {}
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
    spec.cases = [*spec.cases, *_expand_variants(file, spec)]
    problems = check_stages(spec.load, [a.name for a in spec.arms], [c.name for c in spec.cases])
    problems += check_trace_paths(spec.load, base)
    if problems:
        raise ConfigError(file, *problems[0])
    for c in spec.cases:
        if c.variant_of:
            tools.update({c.name: tools[c.variant_of]} if c.variant_of in tools else {})
            tool_scripts.update({c.name: tool_scripts[c.variant_of]} if c.variant_of in tool_scripts else {})
    return LoadedExperiment(path=path, spec=spec, texts=texts, tools=tools, tool_scripts=tool_scripts)


def variant_name(case: str, variant: str) -> str:
    return f"{case} [{variant}]"


def _expand_variants(file: str, spec: Experiment) -> list[Case]:
    """Each variant becomes a case of its own, marked ``variant_of`` its case."""
    out = []
    names = {c.name for c in spec.cases}
    for i, case in enumerate(spec.cases):
        for j, v in enumerate(case.variants):
            name = variant_name(case.name, v.name)
            if name in names:
                raise ConfigError(file, f"cases[{i}].variants[{j}].name", f"{name!r} is already a case name")
            names.add(name)
            prompt = v.prompt if v.prompt is not None else f"{case.prompt}\n\n{v.append}"
            out.append(case.model_copy(update={"name": name, "prompt": prompt, "variants": [], "variant_of": case.name,
                                               "max_tokens": v.max_tokens or case.max_tokens}))
    return out


def with_repeats(exp: LoadedExperiment, repeats: int | None) -> LoadedExperiment:
    if repeats is None:
        return exp
    if repeats < 1:
        raise ConfigError(str(exp.path), "--repeats", "must be at least 1")
    spec = exp.spec.model_copy(deep=True)
    spec.experiment.repeats = repeats
    check_adaptive(str(exp.path), spec.experiment, "--repeats")
    return exp.model_copy(update={"spec": spec})


def with_adaptive(exp: LoadedExperiment, adaptive: bool | dict[str, Any]) -> LoadedExperiment:
    """``run --adaptive`` (True): the experiment with adaptive repeats at the defaults of :class:`AdaptiveSpec`,
    unless its file sets them already (then as the file says); a dict: those settings (a resumed run's own)."""
    if not adaptive or exp.spec.experiment.adaptive is not None:
        return exp
    spec = exp.spec.model_copy(deep=True)
    spec.experiment.adaptive = AdaptiveSpec(**adaptive) if isinstance(adaptive, dict) else AdaptiveSpec()
    check_adaptive(str(exp.path), spec.experiment, "--adaptive")
    return exp.model_copy(update={"spec": spec})
