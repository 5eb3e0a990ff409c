"""NVIDIA's management library (NVML) through its Python binding, ``nvidia-ml-py`` (module ``pynvml``).

The binding is taken through one seam, :func:`binding`: the module ``$LEVERBENCH_NVML_MODULE`` names (default
``pynvml``), so that a test puts a fake of the binding in its place and everything above it runs unchanged.
Without the binding (``pip install 'leverbench[gpu]'``), or without a driver, :meth:`Nvml.open` says why and
the GPU facts are recorded as unknown, with that reason.

What is read (the binding's names):

- the system: ``nvmlSystemGetDriverVersion``, ``nvmlSystemGetCudaDriverVersion_v2`` (12040 → "12.4");
- a device's facts: ``nvmlDeviceGetName``, ``nvmlDeviceGetUUID``, ``nvmlDeviceGetMemoryInfo`` (``total``),
  ``nvmlDeviceGetPowerManagementLimit`` (mW), ``nvmlDeviceGetMaxClockInfo`` (``NVML_CLOCK_SM``,
  ``NVML_CLOCK_MEM``), ``nvmlDeviceGetMigMode`` (current mode == ``NVML_DEVICE_MIG_ENABLE``);
- a reading (:class:`~.readings.Reading`): ``nvmlDeviceGetUtilizationRates`` (``gpu``, ``memory``: percent of
  the driver's last sample period), ``nvmlDeviceGetMemoryInfo`` (``used``), ``nvmlDeviceGetPowerUsage`` (mW),
  ``nvmlDeviceGetClockInfo`` (``NVML_CLOCK_SM``), ``nvmlDeviceGetTotalEnergyConsumption`` (mJ);
- which processes hold a device: ``nvmlDeviceGetComputeRunningProcesses`` (``pid``).

A call the device does not support (``NVMLError`` not supported or function not found, or a binding without the
function) gives None for its field, and is not tried again on that device; any other error (a timeout, an
unknown error, no permission) gives None for that call only, and the next reading asks again.
"""

from __future__ import annotations

import importlib
import os
import time
from types import ModuleType
from typing import Any, Optional

from .readings import GpuFacts, Reading, combined

NVML_MODULE_ENV = "LEVERBENCH_NVML_MODULE"
#: NVML's error codes that say a device lacks a function for good (``NVML_ERROR_NOT_SUPPORTED``,
#: ``NVML_ERROR_FUNCTION_NOT_FOUND``; the binding's constants where it has them)
LACKING = ("NVML_ERROR_NOT_SUPPORTED", 3), ("NVML_ERROR_FUNCTION_NOT_FOUND", 13)
INSTALL_HINT = "nvidia-ml-py is not installed (pip install 'leverbench[gpu]')"
MIB = 1 << 20


def binding() -> tuple[Optional[ModuleType], Optional[str]]:
    """(the NVML binding module, None), or (None, why it cannot be had): the seam (module docstring)."""
    name = os.environ.get(NVML_MODULE_ENV) or "pynvml"
    try:
        return importlib.import_module(name), None
    except ImportError as exc:
        return None, INSTALL_HINT if name == "pynvml" else f"the NVML binding {name!r} cannot be imported: {exc}"


DRIVER_GPUS = "/proc/driver/nvidia/gpus"  # the Linux driver's directory: one entry per GPU


def driver_gpu_count() -> int:
    """How many GPUs the NVIDIA driver lists (:data:`DRIVER_GPUS`), without NVML: 0 where there is none."""
    try:
        return len(os.listdir(DRIVER_GPUS))
    except OSError:
        return 0


def _text(v: Any) -> Any:
    return v.decode(errors="replace") if isinstance(v, bytes) else v


def cuda_version(v: Optional[int]) -> Optional[str]:
    """NVML's CUDA driver version as CUDA writes it: 12040 → "12.4"."""
    return None if v is None else f"{v // 1000}.{v % 1000 // 10}"


class Nvml:
    """An initialised NVML (``nvmlInit`` now, ``nvmlShutdown`` at :meth:`close`)."""

    def __init__(self, lib: ModuleType):
        self.lib = lib
        lib.nvmlInit()
        self._handles: dict[int, Any] = {}
        self._unsupported: set[tuple[int, str]] = set()
        self._lacking = {getattr(lib, name, code) for name, code in LACKING}

    @classmethod
    def open(cls) -> tuple[Optional["Nvml"], Optional[str]]:
        """(NVML, None), or (None, why not: no binding, no driver, no GPU)."""
        lib, why = binding()
        if lib is None:
            return None, why
        try:
            nvml = cls(lib)
        except Exception as exc:  # noqa: BLE001 - NVMLError (no driver, no library) or the binding's own
            return None, f"NVML did not start: {exc}"
        if nvml.count() == 0:
            nvml.close()
            return None, "NVML found no GPU"
        return nvml, None

    def close(self) -> None:
        try:
            self.lib.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down: nothing left to do about it
            pass

    def _call(self, index: Optional[int], fn: str, *args: Any) -> Any:
        """The binding's *fn*; None when it fails, and when the device lacks it (then it is not asked again)."""
        key = (-1 if index is None else index, fn)
        if key in self._unsupported:
            return None
        try:
            return getattr(self.lib, fn)(*args)
        except AttributeError:
            self._unsupported.add(key)
            return None
        except getattr(self.lib, "NVMLError", RuntimeError) as exc:
            if getattr(exc, "value", None) in self._lacking:
                self._unsupported.add(key)
            return None

    def count(self) -> int:
        return int(self._call(None, "nvmlDeviceGetCount") or 0)

    def handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self.lib.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def system(self) -> dict[str, Any]:
        """The driver's version and the CUDA version it supports."""
        return {"driver": _text(self._call(None, "nvmlSystemGetDriverVersion")),
                "cuda": cuda_version(self._call(None, "nvmlSystemGetCudaDriverVersion_v2"))}

    def device(self, index: int) -> dict[str, Any]:
        """One device's facts (module docstring)."""
        h = self.handle(index)
        mem = self._call(index, "nvmlDeviceGetMemoryInfo", h)
        limit = self._call(index, "nvmlDeviceGetPowerManagementLimit", h)
        mig = self._call(index, "nvmlDeviceGetMigMode", h)
        enabled = getattr(self.lib, "NVML_DEVICE_MIG_ENABLE", 1)
        return {"index": index, "device": str(index), "name": _text(self._call(index, "nvmlDeviceGetName", h)),
                "uuid": _text(self._call(index, "nvmlDeviceGetUUID", h)),
                "memory_mib": round(mem.total / MIB) if mem is not None else None,
                "power_limit_w": limit / 1000.0 if limit is not None else None,
                "sm_clock_max_mhz": self._call(index, "nvmlDeviceGetMaxClockInfo", h, self.lib.NVML_CLOCK_SM),
                "mem_clock_max_mhz": self._call(index, "nvmlDeviceGetMaxClockInfo", h, self.lib.NVML_CLOCK_MEM),
                "mig": None if not mig else ("enabled" if mig[0] == enabled else "disabled")}

    def facts(self, indices: Optional[list[int]] = None) -> GpuFacts:
        """The facts of *indices* (default: every device), with the system's."""
        idx = list(range(self.count())) if indices is None else indices
        return combined("nvml", [self.device(i) for i in idx], self.system())

    def read(self, index: int) -> Reading:
        """One reading of device *index*, timed at the middle of its calls (module docstring)."""
        h = self.handle(index)
        t0 = time.time()
        util = self._call(index, "nvmlDeviceGetUtilizationRates", h)
        mem = self._call(index, "nvmlDeviceGetMemoryInfo", h)
        power = self._call(index, "nvmlDeviceGetPowerUsage", h)
        clock = self._call(index, "nvmlDeviceGetClockInfo", h, self.lib.NVML_CLOCK_SM)
        energy = self._call(index, "nvmlDeviceGetTotalEnergyConsumption", h)
        t = (t0 + time.time()) / 2.0
        return Reading(t, sm=util.gpu / 100.0 if util is not None else None,
                       dram=util.memory / 100.0 if util is not None else None,
                       mem_used_mib=mem.used / MIB if mem is not None else None,
                       power_w=power / 1000.0 if power is not None else None,
                       sm_clock_mhz=float(clock) if clock is not None else None,
                       energy_j=energy / 1000.0 if energy is not None else None)

    def memory_used_mib(self, index: int) -> Optional[float]:
        mem = self._call(index, "nvmlDeviceGetMemoryInfo", self.handle(index))
        return mem.used / MIB if mem is not None else None

    def processes(self, index: int) -> Optional[list[int]]:
        """The pids of the compute processes on device *index* (None: not readable)."""
        procs = self._call(index, "nvmlDeviceGetComputeRunningProcesses", self.handle(index))
        return None if procs is None else [int(p.pid) for p in procs]
