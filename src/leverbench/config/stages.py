"""Load shapes of the experiment file: the ``[[load]]`` stages (issue 5), their sweeps and cross-checks.

A stage drives one or more arms with many calls at once, in one of three modes:

``closed``
    Closed loop: ``concurrency`` clients, each sending its next request the
    moment its previous one ends (so N calls are always in flight).  The
    request's scheduled send time is the end of the client's previous call.
``open``
    Open loop: requests are sent at scheduled times, ``rate`` per second on
    average, whether or not earlier ones have finished.  Inter-arrival gaps
    are ``constant`` (1/rate), ``poisson`` (exponential, mean 1/rate) or
    ``gamma`` (shape k = ``burstiness``, scale 1/(rate·k): mean 1/rate,
    coefficient of variation 1/√k; k = 1 is Poisson, k < 1 burstier, k > 1
    more regular).  ``seed`` fixes the draws (:mod:`leverbench.workload.load`
    draws them).
``trace``
    Replay of recorded traffic (``trace`` = a file, read by
    :func:`leverbench.workload.traces.load_traffic`) at its own arrival times
    divided by ``speed`` (2 = twice as fast).  TraceLab sessions are replayed
    as multi-call turns: a round goes out when the previous round's answer
    has arrived and its tool wait (also divided by ``speed``) is over.

closed and open stages send the first call of ``case`` (default: the first
case), each request with a **distinct prompt** by default: a short seeded
unique part (a few words) is inserted so that only the leading
``prefix_sharing`` fraction of the prompt's tokens (0.0–1.0, default 0.0) is
the same in all requests of the stage — the shared part first, then the
unique part and the rest of the case's text, which a prefix cache cannot reuse
after the unique part.  1.0 sends the identical prompt every time (a
cache-hit benchmark on a server with a prefix cache).  Tokens are counted as
the simulator counts them (a message's role, then one per whitespace word), so
on a real tokenizer the share is approximate; tool schemas, which chat
templates put first, are shared whatever the setting.  Each stage has an
optional warm-up (``warmup_requests`` requests and/or ``warmup_s`` seconds,
sent but marked ``warmup`` and left out of the analysis) and a bound after
the warm-up: ``requests`` and/or ``duration_s``, whichever comes first.  A
list in ``concurrency`` or ``rate`` is a sweep: one stage per value, run in
the order given, named ``NAME@c4`` / ``NAME@2.5rps``.  ``workers`` (default 1)
sends the stage from that many client processes, Ray actors, its schedule
computed once and split across them (:mod:`leverbench.runner.shares`,
:mod:`leverbench.runner.workers`): a closed loop's concurrency (at least one
client each) and ``max_in_flight`` are split too.

Every number has its bounds (:mod:`.limits`), and a stage whose plan would not
fit — more than :data:`~.limits.MAX_REQUESTS` requests (an open loop's rate ×
its duration), or longer than :data:`~.limits.MAX_STAGE_S` (requests at a low
rate) — is refused when the file is loaded (:func:`check_plans`).

Example::

    [[load]]
    name = "ramp"
    mode = "closed"
    case = "short"
    concurrency = [1, 2, 4, 8]
    warmup_requests = 4
    requests = 64
    duration_s = 60
    slo_ttft_s = 0.5

    [[load]]
    name = "mooncake"
    mode = "trace"
    trace = "traces/mooncake_conversation_trace.jsonl"   # relative to this file
    speed = 4.0
    requests = 200
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..json_types import JSONObject
from ..trace_formats import TRACE_FORMATS
from .limits import (
    MAX_REQUESTS,
    MAX_STAGE_S,
    Burstiness,
    CallSeconds,
    Flag,
    Fraction,
    InFlight,
    InputCap,
    Requests,
    Scale,
    Seed,
    Speed,
    StageSeconds,
    StageSecondsOrZero,
    Tokens,
    WarmupRequests,
    Workers,
    check_concurrency,
    check_rate,
)
from .names import FilePath, Label


class LoadStage(BaseModel):
    """One ``[[load]]`` entry (before sweep expansion); see the module docstring."""

    # strict: a string or a boolean is not a number; the bounds of each number: .limits
    model_config = ConfigDict(extra="forbid", strict=True)

    name: Label = Field(min_length=1)
    mode: Literal["closed", "open", "trace"] = "closed"
    arms: list[str] | None = Field(None, description="arms to drive, one after another (default: all)")
    # what to send
    case: str | None = Field(None, description="closed/open: the case whose first call is sent (default: the first)")
    prefix_sharing: Fraction = Field(0.0, description="closed/open: fraction of each prompt's tokens shared by all "
                                     "the stage's requests (shared part first; 0: all distinct, 1: identical)")
    trace: FilePath | None = Field(None, description="trace mode: traffic file, relative to the experiment file")
    trace_format: Literal[TRACE_FORMATS] | None = None  # type: ignore[valid-type]  # pydantic unpacks the tuple
    speed: Speed = Field(1.0, description="trace mode: arrival times and tool waits are divided by this")
    scale_input: Scale = Field(1.0, description="trace mode: input lengths (and prefix blocks) times this")
    scale_output: Scale = Field(1.0, description="trace mode: output lengths times this")
    max_input_tokens: InputCap | None = Field(None, description="trace mode: cap on a call's input tokens")
    max_tokens: Tokens | None = Field(None, description="cap on generated tokens (closed/open: replaces the case's)")
    force_output: Flag = Field(True, description="trace mode: force the trace's output length "
                                                 "(ignore_eos + min_tokens)")
    block_tokens: Tokens = Field(512, description="trace mode: tokens per Mooncake hash block (before scale_input)")
    # shape
    concurrency: int | list[int] | None = None
    rate: float | list[float] | None = None
    arrival: Literal["constant", "poisson", "gamma"] = "poisson"
    burstiness: Burstiness = Field(1.0, description="gamma shape k: CV of the gaps = 1/sqrt(k)")
    seed: Seed = 0
    ramp_s: StageSecondsOrZero = Field(0.0, description="closed loop: client k of N starts k·ramp_s/N after the first "
                                                        "(0: all at once, so their sends come in bursts)")
    keep_alive: Flag = Field(True, description="reuse connections between calls, as the turns do (false: a new "
                                               "connection per call); connect time is recorded apart (connect_s)")
    max_in_flight: InFlight | None = Field(None, description="open/trace: cap on calls in flight (late sends "
                                                             "still count their wait: latency is taken from the "
                                                             "schedule)")
    workers: Workers = Field(1, description="client processes the stage's schedule is split across (Ray actors, "
                                            "each with its own asyncio client and ledger shard; > 1 needs "
                                            "pip install 'leverbench[ray]')")
    # bounds
    warmup_requests: WarmupRequests = 0
    warmup_s: StageSecondsOrZero = 0.0
    requests: Requests | None = Field(None, description="measured requests after the warm-up (trace: calls replayed)")
    duration_s: StageSeconds | None = Field(None, description="seconds after the warm-up during which requests are "
                                                              "sent")
    # service-level objectives for goodput
    slo_ttft_s: CallSeconds | None = None
    slo_tpot_s: CallSeconds | None = None
    slo_e2e_s: CallSeconds | None = None

    @field_validator("concurrency", "rate", mode="before")
    @classmethod
    def _sweep_values(cls, v: object, info: ValidationInfo) -> object:
        """Each value of a sweep (or the one value) in its range, before the union of a value and a list is
        tried (whose complaint would name neither)."""
        key = info.field_name or ""
        check = check_concurrency if key == "concurrency" else check_rate
        if v is None:
            return v
        if isinstance(v, list) and not v:
            raise ValueError(f"{key} must be a value or a non-empty list of them (a sweep)")
        for j, x in enumerate(_as_list(v)):
            problem = check(x)
            if problem:
                raise ValueError(f"{key} {problem}" + (f" ({key}[{j}] of the sweep)" if isinstance(v, list) else ""))
        return v

    @model_validator(mode="after")
    def _shape(self) -> "LoadStage":
        if self.ramp_s and self.mode != "closed":
            raise ValueError("ramp_s applies to mode = \"closed\" only")
        if self.max_in_flight is not None and self.max_in_flight < self.workers:
            raise ValueError(f"max_in_flight ({self.max_in_flight}) is split across the workers: it needs at least "
                             f"one call per worker (workers = {self.workers})")
        if self.mode == "trace":
            if not self.trace:
                raise ValueError("a trace stage needs trace = \"FILE\" (path relative to the experiment file)")
            for k in ("case", "concurrency", "rate"):
                if getattr(self, k) is not None:
                    raise ValueError(f"{k} does not apply to a trace stage (the trace sets what and when)")
            if "prefix_sharing" in self.model_fields_set:
                raise ValueError("prefix_sharing does not apply to a trace stage (its prompts share what the trace's "
                                 "hash ids share)")
            return self
        if self.trace is not None:
            raise ValueError("trace applies to mode = \"trace\" only")
        if self.requests is None and self.duration_s is None:
            raise ValueError("a closed or open stage needs a bound: requests and/or duration_s")
        if self.mode == "closed":
            if self.rate is not None:
                raise ValueError("rate applies to mode = \"open\"; a closed stage sets concurrency")
            vals = _as_list(self.concurrency if self.concurrency is not None else 1)
            if not vals or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in vals):
                raise ValueError("concurrency must be a whole number >= 1 or a list of them")
            if min(vals) < self.workers:
                raise ValueError(f"concurrency {min(vals)} is split across the workers: each of the {self.workers} "
                                 "needs at least one client (lower workers or raise concurrency)")
        else:
            if self.concurrency is not None:
                raise ValueError("concurrency applies to mode = \"closed\"; an open stage sets rate "
                                 "(cap calls in flight with max_in_flight)")
            if self.rate is None:
                raise ValueError("an open stage needs rate (requests per second, or a list for a sweep)")
            rates = _as_list(self.rate)
            if not rates or any(not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                                     and math.isfinite(v)) for v in rates):
                raise ValueError("rate must be a number > 0 or a list of them")
        return self

    @property
    def is_sweep(self) -> bool:
        return isinstance(self.concurrency, list) or isinstance(self.rate, list)


_T = TypeVar("_T")


def _as_list(v: _T | list[_T]) -> list[_T]:
    return list(v) if isinstance(v, list) else [v]


@dataclass(frozen=True)
class PlannedStage:
    """One stage as run: a sweep's value filled in.  ``sweep`` names the [[load]] entry it came from."""

    stage: LoadStage
    name: str
    sweep: str | None
    concurrency: int | None
    rate: float | None

    def params(self) -> JSONObject:
        """The stage's parameters as recorded with every call."""
        s = self.stage
        out: JSONObject = {"stage": self.name, "mode": s.mode}
        if self.sweep:
            out["sweep"] = self.sweep
        if s.mode == "closed":
            out["concurrency"] = self.concurrency
            if s.ramp_s:
                out["ramp_s"] = s.ramp_s
        elif s.mode == "open":
            out.update(rate=self.rate, arrival=s.arrival)
            if s.arrival == "gamma":
                out["burstiness"] = s.burstiness
        if s.mode != "trace":
            out["prefix_sharing"] = s.prefix_sharing
        else:
            out["speed"] = s.speed
        if s.workers > 1:
            out["workers"] = s.workers
        for k in ("slo_ttft_s", "slo_tpot_s", "slo_e2e_s"):
            if getattr(s, k) is not None:
                out[k] = getattr(s, k)
        return out


def _fmt_rate(r: float) -> str:
    return f"{r:g}"


def expand(stages: list[LoadStage]) -> list[PlannedStage]:
    """Sweeps into one stage per value (order kept); names ``NAME@cN`` / ``NAME@Rrps``."""
    out: list[PlannedStage] = []
    for s in stages:
        if s.mode == "closed":
            vals = _as_list(s.concurrency if s.concurrency is not None else 1)
            sweep = isinstance(s.concurrency, list)
            for c in vals:
                out.append(PlannedStage(s, f"{s.name}@c{c}" if sweep else s.name, s.name if sweep else None, int(c),
                                        None))
        elif s.mode == "open":
            assert s.rate is not None  # an open stage has its rate (LoadStage's check)
            sweep = isinstance(s.rate, list)
            for r in _as_list(s.rate):
                out.append(PlannedStage(s, f"{s.name}@{_fmt_rate(float(r))}rps" if sweep else s.name,
                                        s.name if sweep else None, None, float(r)))
        else:
            out.append(PlannedStage(s, s.name, None, None, None))
    return out


def check_stages(stages: list[LoadStage], arms: list[str], cases: list[str]) -> list[tuple[str, str]]:
    """Cross-checks against the experiment: (key, problem) for each bad reference, duplicate ``[[load]]`` name or
    duplicate stage name."""
    problems: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    entries: dict[str, int] = {}
    for i, s in enumerate(stages):
        if s.name in entries:  # one entry is one sweep: two would share its name, and its axis, in the analysis
            problems.append((f"load[{i}].name", f"duplicate [[load]] name {s.name!r} (also load[{entries[s.name]}]); "
                                                "each entry is its own sweep: give it its own name"))
        entries.setdefault(s.name, i)
        for p in expand([s]):
            if p.name in seen and seen[p.name] != i:
                problems.append((f"load[{i}].name", f"duplicate stage name {p.name!r} (also load[{seen[p.name]}])"))
            seen.setdefault(p.name, i)
        for a in s.arms or []:
            if a not in arms:
                problems.append((f"load[{i}].arms", f"names no arm ({a!r}; arms: {', '.join(arms)})"))
        if s.case is not None and s.case not in cases:
            problems.append((f"load[{i}].case", f"names no case ({s.case!r}; cases: {', '.join(cases)})"))
    return problems


def check_trace_paths(stages: list[LoadStage], base: Path) -> list[tuple[str, str]]:
    """(key, problem) for each trace stage whose file does not exist (paths are relative to ``base``,
    the experiment file's directory)."""
    problems = []
    for i, s in enumerate(stages):
        if s.trace is not None:
            p = Path(s.trace) if Path(s.trace).is_absolute() else base / s.trace
            if not p.exists():
                problems.append((f"load[{i}].trace", f"file not found: {s.trace} (looked at {p}; paths are relative "
                                                     "to the experiment file)"))
            elif not p.is_file():  # a directory, a device (/dev/zero) or a FIFO: reading it would never end
                problems.append((f"load[{i}].trace", f"{s.trace} is not a regular file (looked at {p}); give a "
                                                     "traffic file"))
    return problems


def _span(seconds: float) -> str:
    """*seconds* in words: ``3e+301 s (1e+294 years)``."""
    if seconds >= 2 * 365 * 86_400:
        return f"{seconds:.3g} s ({seconds / (365 * 86_400):.3g} years)"
    return f"{seconds:.3g} s ({seconds / 86_400:.3g} days)" if seconds >= 86_400 else f"{seconds:.3g} s"


def check_plans(stages: list[LoadStage]) -> list[tuple[str, str]]:
    """(key, problem) for each stage whose plan would not fit: more than :data:`~.limits.MAX_REQUESTS` requests
    (an open loop's rate × its duration, warm-up and measured together), or longer than
    :data:`~.limits.MAX_STAGE_S` (requests at a low rate, warm-up plus duration); checked before anything
    starts, each sweep value on its own."""
    problems: list[tuple[str, str]] = []
    limit_n = f"the limit is {MAX_REQUESTS:,} requests per stage"
    limit_t = f"the limit is {MAX_STAGE_S / 86_400:g} days ({MAX_STAGE_S:g} s) per stage"
    for i, s in enumerate(stages):
        if s.warmup_requests + (s.requests or 0) > MAX_REQUESTS:
            problems.append((f"load[{i}].requests", f"warmup_requests + requests = "
                                                    f"{s.warmup_requests + (s.requests or 0):,}; {limit_n}"))
        if s.warmup_s + (s.duration_s or 0.0) > MAX_STAGE_S:
            problems.append((f"load[{i}].duration_s", f"warmup_s + duration_s = "
                                                      f"{_span(s.warmup_s + (s.duration_s or 0.0))}; {limit_t}"))
        if s.mode != "open":
            continue
        for p in expand([s]):
            r = float(p.rate or 0.0)
            # arrivals: the warm-up (warmup_requests and/or warmup_s), then requests and/or duration_s
            warm_n, warm_t = max(s.warmup_requests, r * s.warmup_s), max(s.warmup_requests / r, s.warmup_s)
            meas_n = min(math.inf if s.requests is None else s.requests,
                         math.inf if s.duration_s is None else r * s.duration_s)
            meas_t = min(math.inf if s.requests is None else s.requests / r,
                         math.inf if s.duration_s is None else s.duration_s)
            what = f"rate {r:g}/s" + (f" (stage {p.name})" if p.sweep else "")
            if warm_n + meas_n > MAX_REQUESTS:
                problems.append((f"load[{i}].rate", f"{what} for {_span(warm_t + meas_t)} plans "
                                                    f"{warm_n + meas_n:.3g} requests; {limit_n} (lower rate or "
                                                    "duration_s, or set requests)"))
            elif warm_t + meas_t > MAX_STAGE_S:
                n = s.warmup_requests + (s.requests or 0)
                problems.append((f"load[{i}].rate", f"{what} × {n:,} requests would take {_span(warm_t + meas_t)}; "
                                                    f"{limit_t} (raise rate or set duration_s)"))
    return problems
