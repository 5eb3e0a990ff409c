"""A fake of NVML's Python binding (``pynvml``, from ``nvidia-ml-py``): the functions and constants leverbench
calls, with the real binding's names, units and return shapes (utilisation in percent, power in mW, energy in
mJ, memory in bytes, strings as ``str``, errors as ``NVMLError``), over the simulated GPU of :mod:`fake_gpu`.

``DEVICES`` holds each GPU's facts (a test may change them; a subprocess sets ``FAKE_NVML_DEVICES``, how many,
and ``FAKE_NVML_MIG=1``, MIG on); ``UNSUPPORTED`` names functions that raise ``NVMLError`` (not supported), as
some GPUs do for the energy counter or MIG; ``FAIL_ONCE`` maps a function to an error code it raises on its
next call only (a transient error: a timeout, an unknown error).  Loaded through leverbench's seam:
``LEVERBENCH_NVML_MODULE=fake_nvml`` (with ``tests/fakes`` on the path) or ``fakes.fake_nvml``.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

try:
    from . import fake_gpu
except ImportError:  # loaded as a top-level module (tests/fakes on PYTHONPATH)
    import fake_gpu  # type: ignore[no-redef]

NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_DEVICE_MIG_ENABLE = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_UNKNOWN = 999
__version__ = "0.0.0+fake"

DEVICES = [{"name": "NVIDIA H200", "uuid": f"GPU-fake-{i:04d}", "power_limit_mw": 700_000, "sm_max": 1980,
            "mem_max": 3201, "mig": int(os.environ.get("FAKE_NVML_MIG") or 0)}
           for i in range(int(os.environ.get("FAKE_NVML_DEVICES") or 1))]
DRIVER = "570.124.06"
NVML_VERSION = "12.570.124.06"
CUDA = 12080
UNSUPPORTED: set[str] = set()
FAIL_ONCE: dict[str, int] = {}
initialised = 0
calls: list[str] = []


class NVMLError(Exception):
    def __init__(self, value: int = NVML_ERROR_NOT_SUPPORTED):
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return "Not Supported" if self.value == NVML_ERROR_NOT_SUPPORTED else f"NVML error {self.value}"


def _check(name: str) -> None:
    calls.append(name)
    if name in UNSUPPORTED:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if name in FAIL_ONCE:
        raise NVMLError(FAIL_ONCE.pop(name))
    if not initialised and name != "nvmlInit":
        raise NVMLError(1)  # uninitialised


def nvmlInit() -> None:
    global initialised
    _check("nvmlInit")
    initialised += 1


def nvmlShutdown() -> None:
    global initialised
    _check("nvmlShutdown")
    initialised -= 1


def nvmlSystemGetDriverVersion() -> str:
    _check("nvmlSystemGetDriverVersion")
    return DRIVER


def nvmlSystemGetNVMLVersion() -> str:
    _check("nvmlSystemGetNVMLVersion")
    return NVML_VERSION


def nvmlSystemGetCudaDriverVersion_v2() -> int:
    _check("nvmlSystemGetCudaDriverVersion_v2")
    return CUDA


def nvmlDeviceGetCount() -> int:
    _check("nvmlDeviceGetCount")
    return len(DEVICES)


def nvmlDeviceGetHandleByIndex(index: int) -> SimpleNamespace:
    _check("nvmlDeviceGetHandleByIndex")
    if not 0 <= index < len(DEVICES):
        raise NVMLError(2)
    return SimpleNamespace(index=index)


def _dev(h: SimpleNamespace) -> dict:
    return DEVICES[h.index]


def nvmlDeviceGetName(h: SimpleNamespace) -> str:
    _check("nvmlDeviceGetName")
    return _dev(h)["name"]


def nvmlDeviceGetUUID(h: SimpleNamespace) -> str:
    _check("nvmlDeviceGetUUID")
    return _dev(h)["uuid"]


def nvmlDeviceGetMemoryInfo(h: SimpleNamespace) -> SimpleNamespace:
    _check("nvmlDeviceGetMemoryInfo")
    used = fake_gpu.MEMORY_BASE + fake_gpu.allocated
    return SimpleNamespace(total=fake_gpu.MEMORY_TOTAL, used=used, free=fake_gpu.MEMORY_TOTAL - used)


def nvmlDeviceGetPowerManagementLimit(h: SimpleNamespace) -> int:
    _check("nvmlDeviceGetPowerManagementLimit")
    return _dev(h)["power_limit_mw"]


def nvmlDeviceGetMaxClockInfo(h: SimpleNamespace, clock: int) -> int:
    _check("nvmlDeviceGetMaxClockInfo")
    return _dev(h)["sm_max" if clock == NVML_CLOCK_SM else "mem_max"]


def nvmlDeviceGetClockInfo(h: SimpleNamespace, clock: int) -> int:
    _check("nvmlDeviceGetClockInfo")
    gpu, _ = fake_gpu.utilization(time.time())
    return int(345 + (_dev(h)["sm_max"] - 345) * gpu / 100.0) if clock == NVML_CLOCK_SM else _dev(h)["mem_max"]


def nvmlDeviceGetMigMode(h: SimpleNamespace) -> list[int]:
    _check("nvmlDeviceGetMigMode")
    return [_dev(h)["mig"], _dev(h)["mig"]]


def nvmlDeviceGetUtilizationRates(h: SimpleNamespace) -> SimpleNamespace:
    _check("nvmlDeviceGetUtilizationRates")
    gpu, mem = fake_gpu.utilization(time.time())
    return SimpleNamespace(gpu=int(round(gpu)), memory=int(round(mem)))


def nvmlDeviceGetPowerUsage(h: SimpleNamespace) -> int:
    _check("nvmlDeviceGetPowerUsage")
    return int(fake_gpu.power(time.time()) * 1000)


def nvmlDeviceGetTotalEnergyConsumption(h: SimpleNamespace) -> int:
    _check("nvmlDeviceGetTotalEnergyConsumption")
    return int(fake_gpu.energy_j(time.time()) * 1000)


def nvmlDeviceGetComputeRunningProcesses(h: SimpleNamespace) -> list[SimpleNamespace]:
    _check("nvmlDeviceGetComputeRunningProcesses")
    return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in fake_gpu.processes]
