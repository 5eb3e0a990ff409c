"""A GPU's facts and one reading of it, as the sampler takes them and the ledger's ``gpu`` records hold them.

**Facts** (:class:`GpuFacts`): what the hardware is, recorded with the run (the host's GPUs in the header's
``host.gpu``, each arm's in its ``discovered.gpu``): two arms that differ in one of them were measured on
different hardware, and the comparison is not controlled (``analysis.base.knobs``: a discovered fact in which
two arms differ is a knob).

**A reading** (:class:`Reading`), at epoch time ``t``:

- ``sm``: the fraction of the last sample period the GPU's SMs were busy: NVML's ``utilization.gpu`` / 100 (the
  share of time a kernel ran), or DCGM's ``DCGM_FI_PROF_SM_ACTIVE`` (the share of SMs active, averaged over
  cycles), else ``DCGM_FI_DEV_GPU_UTIL`` / 100;
- ``dram``: the fraction of the period the device memory was busy: NVML's ``utilization.memory`` / 100, DCGM's
  ``DCGM_FI_PROF_DRAM_ACTIVE``, else ``DCGM_FI_DEV_MEM_COPY_UTIL`` / 100;
- ``mem_used_mib``, ``power_w``, ``sm_clock_mhz``: as read at ``t``;
- ``energy_j``: the device's energy counter (NVML's total energy consumption, DCGM's
  ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``), in joules since the driver loaded: the energy of an interval is
  the difference of two readings.

A field the device does not report is None.  NVML's utilisations are averages over the driver's own sample
period (1/6 s to 1 s by product), ending when they are read.

**Classified** (:func:`classify`), by absolute thresholds: ``dram`` when the memory was busy at least
:data:`DRAM_BUSY` of the period (a bandwidth-bound kernel: a large copy, decode), else ``sm`` when the SMs were
busy at least :data:`SM_BUSY` (a compute-bound kernel keeps the memory less busy: a large matrix product,
prefill), else ``idle``.  A first guess only: NVML's ``utilization.memory`` is the share of time the memory
was read or written, which a large bf16 matrix product may keep above half on an H200; ``gpu-check`` judges
its two workloads against each other (:mod:`.check`) and prints this rule as a note.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, Optional, TypedDict, Union

DRAM_BUSY = 0.5
SM_BUSY = 0.5
#: A reading's field besides its time: a key of the ledger's ``gpu`` record (``ledger.rows.GpuSamplesRow``).
ReadingField = Literal["sm", "dram", "mem_used_mib", "power_w", "sm_clock_mhz", "energy_j"]
#: The reading's fields besides its time, in the order the ledger's ``gpu`` record holds them.
FIELDS: tuple[ReadingField, ...] = ("sm", "dram", "mem_used_mib", "power_w", "sm_clock_mhz", "energy_j")


@dataclass(frozen=True, slots=True)
class Reading:
    """One reading of one GPU (the module docstring says what each field is)."""

    t: float
    sm: Optional[float] = None
    dram: Optional[float] = None
    mem_used_mib: Optional[float] = None
    power_w: Optional[float] = None
    sm_clock_mhz: Optional[float] = None
    energy_j: Optional[float] = None

    def values(self) -> dict[str, Optional[float]]:
        out = asdict(self)
        del out["t"]
        return out


def classify(r: Reading, dram_busy: float = DRAM_BUSY, sm_busy: float = SM_BUSY) -> str:
    """``dram``, ``sm`` or ``idle`` (the module docstring); ``unknown`` when neither utilisation was read."""
    if r.dram is None and r.sm is None:
        return "unknown"
    if r.dram is not None and r.dram >= dram_busy:
        return "dram"
    if r.sm is not None and r.sm >= sm_busy:
        return "sm"
    return "idle"


#: A fact's value: one value when every device of the set agrees, else each device's (a list).
FactValue = Union[str, int, float, None, list]
#: The facts read of each device (or of the system: ``driver``, ``cuda``), each a key of :class:`GpuFacts`.
FactName = Literal["name", "memory_mib", "power_limit_w", "sm_clock_max_mhz", "mem_clock_max_mhz", "mig", "driver",
                   "cuda"]


class GpuFacts(TypedDict, total=False):
    """The GPUs an arm (or the host) ran on (the module docstring): where the facts came from (``nvml``,
    ``dcgm``), the devices' model name, how many, their memory (MiB), the driver's version and the CUDA
    version it supports, the power limit (W), the highest SM and memory clocks (MHz), MIG mode
    (``enabled``/``disabled``), which devices (NVML's indices, or the exporter's ``Hostname:gpu``); or, when
    they could not be read, ``unknown``: why."""

    source: str
    name: FactValue
    count: int
    memory_mib: FactValue
    driver: FactValue
    cuda: FactValue
    power_limit_w: FactValue
    sm_clock_max_mhz: FactValue
    mem_clock_max_mhz: FactValue
    mig: FactValue
    devices: list
    unknown: str


def combined(source: str, devices: list[dict], system: Optional[dict] = None) -> GpuFacts:
    """The facts of a set of devices (each a dict of one device's facts, ``index`` included) and the system's
    (``driver``, ``cuda``): each fact one value when the devices agree, else a list of theirs."""
    out: GpuFacts = {"source": source, "count": len(devices)}
    keys: tuple[FactName, ...] = ("name", "memory_mib", "power_limit_w", "sm_clock_max_mhz", "mem_clock_max_mhz", "mig",
                                  "driver", "cuda")
    for key in keys:
        values = [d.get(key, (system or {}).get(key)) for d in devices]
        if not devices and system and key in system:
            values = [system[key]]
        if not values or all(v is None for v in values):
            continue
        out[key] = values[0] if all(v == values[0] for v in values) else values
    out["devices"] = [d.get("device", d.get("index")) for d in devices]
    return out


NO_GPU: GpuFacts = {"source": "none", "name": "none (CPU)", "count": 0}
