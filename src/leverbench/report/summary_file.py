"""A ``summary.json`` read back, checked against ``leverbench.summary/1`` before anything uses it.

``analyze --rates`` and ``whatif --rates`` take a run's rates from its ledger when
the run directory has one, else from its ``summary.json`` (:func:`read_summary`).  The
check covers what a reader of the file uses (the schema, the run, the
baseline and arms with their numeric conditions, the rates, the rate models
``whatif`` serves, engaged, drift, the warnings) and leaves the rest free;
a file that fails it is bad input (exit code 2) naming the file, where it is
wrong and what is wrong.  A summary of a newer schema is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import BadInput
from ..ledger.records import SUMMARY_SCHEMA

SUMMARY_NAME, SUMMARY_VERSION = SUMMARY_SCHEMA.rsplit("/", 1)


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


#: The arms' conditions and knobs a reader takes as numbers (GPUs and price for the cost, slots for the
#: simulation and the cache's capacity).
_NUMERIC_KNOBS = ("gpus", "gpu_hour_usd", "slots", "kv_capacity_tokens", "num_gpu_blocks", "block_size",
                  "context_length")


def _numeric_knobs(v: dict[str, Any] | None) -> dict[str, Any] | None:
    bad = [k for k in _NUMERIC_KNOBS if v and v.get(k) is not None
           and (isinstance(v[k], bool) or not isinstance(v[k], (int, float)))]
    if bad:
        raise ValueError(f"{', '.join(bad)}: should be a number (got {', '.join(repr(v[k]) for k in bad)})")
    return v


class _Arm(_Open):
    name: str
    conditions: dict[str, Any] = Field(default_factory=dict)
    knobs: dict[str, Any] | None = None
    model: str | None = None

    _numbers = field_validator("conditions", "knobs")(_numeric_knobs)


class _Rate(_Open):
    arm: str
    decode_tps: float | None = Field(default=None, ge=0)
    prefill_tps: float | None = Field(default=None, ge=0)
    prefill_a_s: float | None = None
    decode_source: str | None = None
    prefill_source: str | None = None
    prefill_input_range: tuple[float, float] | None = None


class _Batch(_Open):
    """A rate model's ``batch``: the slowdown per concurrency, relative to one request alone; a summary written
    before issue 22 has it relative to ``reference_concurrency`` (its sweep's lowest), with the measured
    ``tpot_s`` beside it that ``whatif`` re-normalises it from."""

    concurrency: list[float]
    slowdown: list[float]
    tpot_s: list[float] | None = None
    single_stream_tpot_s: list[float] | None = None
    reference_concurrency: float | None = None

    @model_validator(mode="after")
    def _one_per_concurrency(self) -> _Batch:
        for name in ("slowdown", "tpot_s", "single_stream_tpot_s"):
            v = getattr(self, name)
            if v is not None and len(v) != len(self.concurrency):
                raise ValueError(f"{name}: {len(v)} values for {len(self.concurrency)} concurrencies")
        return self


class _RateModel(_Open):
    """A ``rate_models[]`` entry, as ``whatif`` serves it: prefill and decode terms (numbers; a term's
    ``source`` and ranges are free), the batching slowdown, the slots."""

    arm: str
    prefill: dict[str, Any] | None = None
    decode: dict[str, Any] | None = None
    batch: _Batch | None = None
    slots: int | None = None

    @field_validator("prefill", "decode")
    @classmethod
    def _terms_are_numbers(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        bad = [k for k, x in (v or {}).items() if k.endswith(("_s", "_per_token", "_per_token2", "_per_ctx"))
               and x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)))]
        if bad:
            raise ValueError(f"{', '.join(bad)}: should be a number")
        return v


class _Engaged(_Open):
    arm: str
    cache_used: bool | None = None


class _Drift(_Open):
    arm: str
    drifted: bool


class _Run(_Open):
    name: str | None = None
    concurrency: int | None = None
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
        if self.baseline not in names:
            raise ValueError(f"baseline {self.baseline!r} is none of the arms ({', '.join(map(repr, names))})")
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
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no summary here (expected a run directory or its summary.json)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"{path}: not JSON ({exc})") from None
    return check_summary(data, path)
