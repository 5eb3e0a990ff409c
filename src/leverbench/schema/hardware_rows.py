"""The summary's sections about the hardware and the engines the tool started: ``engines`` (together or one at
a time, and each engine start: :mod:`leverbench.analysis.hardware.engines`) and ``gpu`` (the GPUs' facts, what
they did in each phase of the calls, the energy per turn: :mod:`leverbench.analysis.hardware.telemetry`).

Utilisations are fractions of a sample period (0–1); power in W, memory in MiB, clocks in MHz, energy in J and
kWh, times in s: finite and not negative.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Union

from annotated_types import Ge, Le, Predicate
from typing_extensions import TypeAlias, TypedDict

from . import strict_row

Count: TypeAlias = Annotated[int, Ge(0)]
Share: TypeAlias = Annotated[float, Ge(0.0), Le(1.0)]
NonNegative: TypeAlias = Annotated[float, Ge(0.0), Predicate(math.isfinite)]
Mode: TypeAlias = Literal["together", "one at a time"]
#: A GPU fact as recorded: one value, or each device's where they differ (``gpu.readings.GpuFacts``).
Fact: TypeAlias = Union[str, int, float, None, list[Any]]


@strict_row
class EngineStartRow(TypedDict):
    """``engines.starts[]``: one start of an engine the tool ran, with its stop (``engine_start`` and
    ``engine_stop`` records)."""

    arm: str
    block: Count | None
    part: str | None  # round, closing, discovery, run
    round: Count | None
    t: NonNegative | None
    ready_s: NonNegative | None
    model_load_s: NonNegative | None
    warmup_s: NonNegative | None
    warmup_calls: Count | None
    settled: bool | None
    timeout_s: NonNegative | None
    timeout_from: str | None
    error: str | None  # a start that failed: why
    stop_s: NonNegative | None
    stopped: bool  # a stop was recorded
    released: bool | None  # None: no stop recorded (the run ended before it), or its GPUs not checked (no NVML)
    check: str | None


@strict_row
class EngineArmRow(TypedDict):
    """``engines.arms[]``: one arm's engine starts summed up."""

    arm: str
    starts: Count
    failed: Count  # starts that failed
    ready_s_median: NonNegative | None
    ready_s_max: NonNegative | None
    model_load_s_median: NonNegative | None
    warmup_s_median: NonNegative | None
    timeout_s: NonNegative | None
    timeout_from: str | None
    timeout_used: NonNegative | None  # the slowest start's share of its timeout
    released: bool | None  # every stop released its devices (None: no stop recorded, or not all checked)
    unchecked: Count  # stops whose GPUs were not checked (no NVML)


@strict_row
class EnginesSection(TypedDict):
    """``engines``: how the engines ran (``mode`` None: the ledger does not say, a run before issue 27), why,
    the server state the calls met, every start, each arm's, and how many times two engines were up at once."""

    mode: Mode | None
    declared: Mode | None
    reason: str | None
    server_state: str | None
    starts: list[EngineStartRow]
    arms: list[EngineArmRow]
    overlaps: Count  # pairs of engine lifetimes of different arms that overlapped in time


@strict_row
class GpuFactsRow(TypedDict, total=False):
    """The GPUs an arm (or the host) ran on, as recorded (``gpu.readings.GpuFacts``); ``unknown``: why not."""

    source: str
    name: Fact
    count: Count
    memory_mib: Fact
    driver: Fact
    cuda: Fact
    power_limit_w: Fact
    sm_clock_max_mhz: Fact
    mem_clock_max_mhz: Fact
    mig: Fact
    devices: list[Any]
    unknown: str


@strict_row
class GpuArmRow(TypedDict):
    """``gpu.arms[]``: the GPUs an arm ran on (``facts``), or why they are unknown."""

    arm: str
    known: bool
    facts: GpuFactsRow
    why: str | None


@strict_row
class PhaseRow(TypedDict):
    """What the arm's GPUs did while its calls were in one phase (:mod:`...analysis.hardware.telemetry`): the
    readings counted, mean SM and memory-bandwidth utilisation (fractions of the period), power (W, summed
    over its GPUs), memory used (MiB, summed) and SM clock (MHz); None where nothing was read."""

    samples: Count
    sm: Share | None
    dram: Share | None
    power_w: NonNegative | None
    mem_used_mib: NonNegative | None
    sm_clock_mhz: NonNegative | None


@strict_row
class TelemetryRow(TypedDict):
    """``gpu.telemetry[]``: one arm's GPUs over one scope of its calls (``turns``: its turns, probes and
    sentinels; ``load:STAGE``: a load stage): prefill (send → first token), decode (first → last token), the
    readings where calls in both phases ran at once (``overlap``), the sampling's period and resolution, and
    what to make of it (``note``)."""

    arm: str
    scope: str
    source: str
    devices: list[str]
    samples: Count
    period_s: NonNegative | None
    resolution_s: NonNegative | None
    prefill: PhaseRow
    decode: PhaseRow
    overlap: PhaseRow
    idle: PhaseRow
    overlap_share: Share | None  # of the readings within calls, those with both phases at once
    concurrent_share: Share | None  # of the readings within calls, those with more than one call at once
    short_prefill_share: Share | None  # of the prefills, those shorter than a sample period
    note: str | None


@strict_row
class EnergyRow(TypedDict):
    """``gpu.energy[]``: one arm's GPU energy per turn (median over its counted turns, over each turn's model
    time), as kWh per 1,000 turns, beside its GPU-hours per 1,000 turns (median turn time × its GPUs); the turns
    whose readings did not cover them, or left a gap in them, are not measured (``note``: why)."""

    arm: str
    turns: Count  # measured
    unmeasured: Count
    gpus: Count
    j_per_turn: NonNegative | None
    kwh_per_1000_turns: NonNegative | None
    gpu_hours_per_1000_turns: NonNegative | None
    source: str | None  # "energy counter" or "power readings"
    note: str | None


@strict_row
class GpuSection(TypedDict):
    """``gpu``: the host's GPUs, each arm's, what they did per phase, the energy per turn, and notes."""

    host: GpuFactsRow | None
    arms: list[GpuArmRow]
    telemetry: list[TelemetryRow]
    energy: list[EnergyRow]
    notes: list[str]


@strict_row
class HardwareSections(TypedDict):
    """The summary's hardware sections."""

    engines: EnginesSection
    gpu: GpuSection
