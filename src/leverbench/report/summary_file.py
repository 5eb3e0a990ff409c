"""A ``summary.json`` read back, checked against ``leverbench.summary/1`` before anything uses it.

``analyze --rates`` and ``whatif --rates`` take a run's rates from its ledger when
the run directory has one, else from its ``summary.json`` (:func:`read_summary`).  The
check covers what a reader of the file uses (the schema, the run, the
baseline and arms with their numeric conditions, the rates, the rate models
``whatif`` serves, engaged, drift, the warnings) and leaves the rest free;
a file that fails it is bad input (exit code 2) naming the file, where it is
wrong and what is wrong.  A summary of a newer schema is refused.

Every number a reader computes with is typed strictly (a string or a boolean is no number) and bounded
(:mod:`leverbench.analysis.base.bounds`): finite, the rate models' coefficients non-negative (a negative one gave
negative TTFTs and GPU-hours), each phase costing something per token, slowdowns positive, concurrencies
and slots at least 1, GPUs and prices within range.  The rows that name an arm name one of the arms.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..analysis.base.bounds import (
    MAX_CACHE_TOKENS,
    MAX_CALL_S,
    MAX_GPU_HOUR_USD,
    MAX_GPUS,
    MAX_SLOTS,
    MAX_TOKENS,
    TPS_RANGE,
)
from ..errors import BadInput
from ..ledger.records import SUMMARY_SCHEMA

SUMMARY_NAME, SUMMARY_VERSION = SUMMARY_SCHEMA.rsplit("/", 1)
MAX_SUMMARY_BYTES = 1 << 28  # a summary.json read whole (a run's summary is kilobytes to a few megabytes)

# ---------------------------------------------------------------- strict, bounded numbers


def _number(lo: float = 0.0, hi: float = math.inf, *, gt: bool = False) -> Any:
    """A finite number (an int is one; a string or a boolean is not) from ``lo`` (above it: ``gt``) to ``hi``."""
    limits = {"gt": lo} if gt else {"ge": lo}
    return Annotated[float, Field(strict=True, allow_inf_nan=False, le=hi, **limits)]


def _whole(lo: int, hi: int) -> Any:
    return Annotated[int, Field(strict=True, ge=lo, le=hi)]


Seconds = _number(0.0, MAX_CALL_S)  # a fixed time per call
PerToken = _number(0.0, 1.0 / TPS_RANGE[0])  # seconds a token (or a token × context): at most 1000
def _measured_or_zero(x: float) -> float:
    if 0 < x < TPS_RANGE[0]:
        raise ValueError(f"{x:g} tokens/s is below {TPS_RANGE[0]:g} (0 means not measured)")
    return x


Rate = Annotated[_number(0.0, TPS_RANGE[1]), AfterValidator(_measured_or_zero)]  # tokens/s; 0: not measured
Share = _number(0.0, 1.0)
Slowdown = _number(0.0, float(MAX_SLOTS), gt=True)  # per-token time under load / alone
Concurrency = _number(1.0, float(MAX_SLOTS))
Tokens = _number(0.0, 1e12)  # a token count or range end (a context, a cache, a sum over calls)
Slots = _whole(1, MAX_SLOTS)
Span = tuple[Tokens, Tokens]  # the lowest and highest tokens a fit saw


def _spans_in_order(model: BaseModel, *names: str) -> None:
    for name in names:
        r = getattr(model, name)
        if r is not None and r[0] > r[1]:
            raise ValueError(f"{name}: [{r[0]:g}, {r[1]:g}] ends below where it starts")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


#: The arms' conditions and knobs a reader takes as numbers (GPUs and price for the cost, slots for the
#: simulation and the cache's capacity), each with its range: (lowest, highest, lowest excluded, whole).
_NUMERIC_KNOBS: dict[str, tuple[float, float, bool, bool]] = {
    "gpus": (0, MAX_GPUS, True, False), "gpu_hour_usd": (0, MAX_GPU_HOUR_USD, False, False),
    "slots": (1, MAX_SLOTS, False, True), "kv_capacity_tokens": (0, MAX_CACHE_TOKENS, False, False),
    "num_gpu_blocks": (0, MAX_CACHE_TOKENS, False, True), "block_size": (1, MAX_TOKENS, False, True),
    "context_length": (1, MAX_TOKENS, False, True),
}


def _n(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _knob_problem(v: Any, lo: float, hi: float, lo_open: bool, whole: bool) -> str | None:
    kind = "a whole number" if whole else "a finite number"
    want = f"{kind} {'above' if lo_open else 'from'} {_n(lo)} {'and at most' if lo_open else 'to'} {_n(hi)}"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"should be a number, {want} (got {v!r:.40})"
    ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi and (not whole or v == int(v))
    return None if ok else f"{v!r:.40} is out of range ({want})"


def _numeric_knobs(v: dict[str, Any] | None) -> dict[str, Any] | None:
    bad = [f"{k}: {p}" for k, rng in _NUMERIC_KNOBS.items() if v and v.get(k) is not None
           for p in [_knob_problem(v[k], *rng)] if p]
    if bad:
        raise ValueError("; ".join(bad))
    return v


class _Arm(_Open):
    name: str
    conditions: dict[str, Any] = Field(default_factory=dict)
    knobs: dict[str, Any] | None = None
    model: str | None = None

    _numbers = field_validator("conditions", "knobs")(_numeric_knobs)


class _Rate(_Open):
    arm: str
    decode_tps: Rate | None = None
    prefill_tps: Rate | None = None
    prefill_a_s: Seconds | None = None
    decode_source: str | None = None
    prefill_source: str | None = None
    prefill_input_range: Span | None = None

    @model_validator(mode="after")
    def _range_in_order(self) -> _Rate:
        _spans_in_order(self, "prefill_input_range")
        return self


class _Batch(_Open):
    """A rate model's ``batch``: the slowdown per concurrency, relative to one request alone; a summary written
    before issue 22 has it relative to ``reference_concurrency`` (its sweep's lowest), with the measured
    ``tpot_s`` beside it that ``whatif`` re-normalises it from."""

    concurrency: list[Concurrency]
    slowdown: list[Slowdown]
    tpot_s: list[_number(0.0, MAX_CALL_S, gt=True)] | None = None  # type: ignore[valid-type]
    single_stream_tpot_s: list[_number(0.0, MAX_CALL_S)] | None = None  # type: ignore[valid-type]
    reference_concurrency: Concurrency | None = None

    @model_validator(mode="after")
    def _one_per_concurrency(self) -> _Batch:
        for name in ("slowdown", "tpot_s", "single_stream_tpot_s"):
            v = getattr(self, name)
            if v is not None and len(v) != len(self.concurrency):
                raise ValueError(f"{name}: {len(v)} values for {len(self.concurrency)} concurrencies")
        return self


class _Prefill(_Open):
    """prefill_s(n, k) = a + b·n + c·n·(k + n/2): every term non-negative; the tokens it was fitted on (what
    ``whatif`` says it extrapolates past).  b and c may both be 0: the non-negative fit gives that where the
    prompts' time did not grow with their tokens (an arm whose prefix cache served them), and the ledger's own
    path serves the same model."""

    a_s: Seconds
    b_s_per_token: PerToken
    c_s_per_token2: PerToken = 0.0
    range_uncached: Span | None = None
    range_cached: Span | None = None

    @model_validator(mode="after")
    def _costs_something(self) -> _Prefill:
        _spans_in_order(self, "range_uncached", "range_cached")
        return self


class _Decode(_Open):
    """decode_s(L, O) = O·d0 + d1·(O·L + O·(O − 1)/2): every term non-negative, a token costing something."""

    d0_s_per_token: PerToken
    d1_s_per_token_per_ctx: PerToken = 0.0
    acceptance: Share | None = None
    range_context: Span | None = None

    @model_validator(mode="after")
    def _costs_something(self) -> _Decode:
        if self.d0_s_per_token == 0 and self.d1_s_per_token_per_ctx == 0:
            raise ValueError("d0_s_per_token and d1_s_per_token_per_ctx are both 0: an answer's tokens would cost "
                             "nothing")
        _spans_in_order(self, "range_context")
        return self


class _RateModel(_Open):
    """A ``rate_models[]`` entry, as ``whatif`` serves it: prefill and decode terms (numbers, bounded; a term's
    ``source`` and ranges are free), the batching slowdown, the slots.  A phase that could not be fitted is
    None (or, as older summaries have it, an empty object)."""

    arm: str
    prefill: _Prefill | None = None
    decode: _Decode | None = None
    batch: _Batch | None = None
    slots: Slots | None = None

    @field_validator("prefill", "decode", mode="before")
    @classmethod
    def _empty_is_none(cls, v: Any) -> Any:
        return None if v == {} else v


class _Engaged(_Open):
    arm: str
    cache_used: bool | None = None


class _Drift(_Open):
    arm: str
    drifted: bool


class _Run(_Open):
    name: str | None = None
    concurrency: Slots | None = None
    host: dict[str, Any] | None = None


class _Item(_Open):
    kind: str
    arm: str | None
    case: str | None
    text: str


class SummaryFile(_Open):
    """The parts of ``leverbench.summary/1`` a reader uses."""

    schema_: str = Field(alias="schema")
    run: _Run
    baseline: str
    arms: list[_Arm]
    rates: list[_Rate]
    drift: list[_Drift]
    warnings: list[str]
    warning_items: list[_Item] | None = None
    rate_models: list[_RateModel] | None = None
    engaged: list[_Engaged] | None = None

    @field_validator("schema_")
    @classmethod
    def _known_schema(cls, v: str) -> str:
        name, _, version = v.rpartition("/")
        if name != SUMMARY_NAME or not version.isdigit():
            raise ValueError(f"not a leverbench summary schema: {v!r} (expected {SUMMARY_SCHEMA})")
        if int(version) > int(SUMMARY_VERSION):
            raise ValueError(f"summary schema version {version} is newer than this leverbench understands "
                             f"({SUMMARY_VERSION}); upgrade leverbench to read it")
        return v

    @model_validator(mode="after")
    def _baseline_is_an_arm(self) -> SummaryFile:
        names = [a.name for a in self.arms]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"arms: {', '.join(map(repr, twice))} named twice")
        if self.baseline not in names:
            raise ValueError(f"baseline {self.baseline!r} is none of the arms ({', '.join(map(repr, names))})")
        for key in ("rates", "rate_models", "engaged", "drift"):
            for i, row in enumerate(getattr(self, key) or []):
                if row.arm not in names:
                    raise ValueError(f"{key}[{i}].arm: {row.arm!r} is none of the arms ({', '.join(map(repr, names))})")
        return self


def _where(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a path into the file: rates[0].decode_tps."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{'schema' if part == 'schema_' else part}"
    return out.lstrip(".")


def check_summary(data: Any, path: Path | str) -> dict[str, Any]:
    """*data* (a parsed summary.json) if it holds what ``leverbench.summary/1`` promises; else
    :class:`BadInput` naming *path*, where and what is wrong (the first three problems)."""
    if not isinstance(data, dict):
        raise BadInput(f"{path}: not a leverbench summary (a JSON object with schema {SUMMARY_SCHEMA!r})")
    try:
        SummaryFile.model_validate(data)
    except ValidationError as exc:
        problems = [f"{_where(e['loc']) or 'summary'}: {e['msg'].removeprefix('Value error, ')}"
                    for e in exc.errors()[:3]]
        more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
        raise BadInput(f"{path}: not a valid {SUMMARY_SCHEMA}: {'; '.join(problems)}{more}") from None
    return data


def read_summary(path: Path | str) -> dict[str, Any]:
    """Read and check a ``summary.json`` (or the one in a run directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / "summary.json"
    try:
        if path.exists() and not path.is_file():
            raise BadInput(f"{path}: not a regular file (expected a run directory or its summary.json)")
        if path.exists() and path.stat().st_size > MAX_SUMMARY_BYTES:
            raise BadInput(f"{path}: {path.stat().st_size:,} bytes, more than a summary.json holds "
                           f"({MAX_SUMMARY_BYTES:,} at most); is this a run's summary?")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no summary here (expected a run directory or its summary.json)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"{path}: not JSON ({exc})") from None
    except RecursionError:
        raise BadInput(f"{path}: not a leverbench summary (JSON nested too deep to read)") from None
    return check_summary(data, path)
