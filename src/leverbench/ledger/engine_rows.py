"""The ledger's rows of the engines the tool starts and of the GPUs (schema ``leverbench.ledger/3`` and later), as the
reader hands them (see :mod:`.rows`: they describe, :mod:`.schema` checks).  No ``from __future__ import
annotations``, as in :mod:`.rows`."""


from typing_extensions import Literal, Required, TypedDict

from ..json_types import JSONValue


class GpuFactsRow(TypedDict, total=False):
    """The GPUs an arm or the host ran on (``gpu.readings.GpuFacts``: its docstring says what each holds); a
    fact the devices disagree on is a list of theirs; ``unknown``: why they could not be read."""

    source: str
    name: JSONValue
    count: int
    memory_mib: JSONValue
    driver: JSONValue
    cuda: JSONValue
    power_limit_w: JSONValue
    sm_clock_max_mhz: JSONValue
    mem_clock_max_mhz: JSONValue
    mig: JSONValue
    devices: list[JSONValue]
    unknown: str


class EnginesRow(TypedDict, total=False):
    """The header's ``engines``: how the engines the tool starts ran (``runner.engine_mode``): ``mode`` "together"
    or "one at a time", as ``declared`` in the experiment (None: left out, then chosen), why, and the server
    state the measured calls met (``server_state``: "warm" when each engine stays up the whole run, "cold" when
    each block starts its own)."""

    mode: Required[str]
    declared: str | None
    reason: str
    server_state: str


class EngineStartRow(TypedDict, total=False):
    """An ``engine_start`` record: an engine the tool started for an arm, written as soon as it answered (or failed
    to: ``error``), before its warm-up (``runner.engine_blocks``); version 2 ledgers wrote it after, with the
    warm-up's fields."""

    kind: Required[Literal["engine_start"]]
    arm: Required[str]
    mode: str
    block: int
    round: int | None
    part: str  # "round" (one at a time: the arm's block of a round), "closing" (its probes, sentinel, load stages),
    #            "discovery" (started to ask what it serves, before the header), "run" (engines together),
    #            "restart" (started again before a turn: runner.cache_state)
    t: float  # epoch s the start began
    ready_s: float | None  # spawned → its /health answered 200 (None: the start failed)
    model_load_s: float | None  # what the engine's log says loading the model took (vLLM), else None
    warmup_s: float
    warmup_calls: int
    settled: bool
    server_state: str
    timeout_s: float
    timeout_from: str
    devices: list[str] | None
    pid: int | None
    error: str | None  # a failed start: why (the first line of it)


class EngineWarmedRow(TypedDict, total=False):
    """An ``engine_warmed`` record: the warm-up of the engine started under ``arm`` and ``block``: its calls until
    its sentinel's speed was stable (``settled``), or the most allowed."""

    kind: Required[Literal["engine_warmed"]]
    arm: Required[str]
    block: int
    warmup_s: float
    warmup_calls: int
    settled: bool


class EngineStopRow(TypedDict, total=False):
    """An ``engine_stop`` record: an engine stopped, and whether it released its devices."""

    kind: Required[Literal["engine_stop"]]
    arm: Required[str]
    block: int
    t: float
    stop_s: float
    released: bool | None  # None: its process group gone, its GPUs not checked (no NVML)
    check: str  # what was checked, in words
    leftover: list[int]  # pids of the engine's process group, or on its GPUs, still there


class GpuSamplesRow(TypedDict, total=False):
    """A ``gpu`` record: one device's readings since the last (``gpu.readings.Reading``), column by column: ``t``
    and each of ``gpu.readings.FIELDS``, a value or null per reading."""

    kind: Required[Literal["gpu"]]
    source: Required[str]  # "nvml" or "dcgm"
    device: Required[str]
    arms: list[str]  # the arms whose engine or endpoint uses the device
    fields: dict[str, str]  # which field of the source each utilisation is
    t: Required[list[float]]
    sm: list[float | None]
    dram: list[float | None]
    mem_used_mib: list[float | None]
    power_w: list[float | None]
    sm_clock_mhz: list[float | None]
    energy_j: list[float | None]
