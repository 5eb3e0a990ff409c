"""The GPU facts and readings of a DCGM exporter's page (NVIDIA's ``dcgm-exporter``: Prometheus text at
``:9400/metrics``), for the GPUs of an endpoint the tool did not start.

A sample names its GPU by labels: ``gpu`` (the index), ``UUID``, ``modelName``, ``Hostname``, and in newer
exporters ``DCGM_FI_DRIVER_VERSION``; a GPU split by MIG has one sample per instance (``GPU_I_ID``,
``GPU_I_PROFILE``).  A GPU is keyed ``Hostname:gpu`` (a page may hold several hosts' GPUs behind one proxy).
The exporter's Kubernetes mapping repeats a GPU's (or an instance's) series for each pod using it (``pod``,
``namespace``, ``container``: a GPU time-sliced between pods): such duplicates of one field of one GPU
instance (``Hostname:gpu`` and ``GPU_I_ID``) are averaged, never summed; then a GPU's instances are summed
for its framebuffer fields and averaged for the others.

Readings (:class:`~.readings.Reading`) from the fields, where the exporter collects them:

====================  ===========================================================================
``sm``                ``DCGM_FI_PROF_SM_ACTIVE`` (a ratio), else ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, else
                      ``DCGM_FI_DEV_GPU_UTIL`` / 100
``dram``              ``DCGM_FI_PROF_DRAM_ACTIVE`` (a ratio), else ``DCGM_FI_DEV_MEM_COPY_UTIL`` / 100
``mem_used_mib``      ``DCGM_FI_DEV_FB_USED`` (MiB; summed over a MIG GPU's instances, not its duplicates)
``power_w``           ``DCGM_FI_DEV_POWER_USAGE`` (W)
``sm_clock_mhz``      ``DCGM_FI_DEV_SM_CLOCK`` (MHz)
``energy_j``          ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ since boot) / 1000
====================  ===========================================================================

The default exporter collects the ``DCGM_FI_DEV_*`` fields only (its ``default-counters.csv``); the profiling
fields (``DCGM_FI_PROF_*``: the graphics engine, SMs and DRAM actually busy, rather than "a kernel ran") need
``dcp-metrics-included.csv`` (which has ``GR_ENGINE_ACTIVE`` and ``DRAM_ACTIVE``; ``SM_ACTIVE`` is commented
out there).  The exporter refreshes its page every collect interval (``-c``, 30 s by
default): readings taken more often repeat a value, which the analysis says (its resolution).

Facts (:class:`~.readings.GpuFacts`): ``modelName``, how many GPUs, their memory (FB_FREE + FB_USED +
FB_RESERVED, MiB), the driver (``DCGM_FI_DRIVER_VERSION`` label or field), the CUDA version
(``DCGM_FI_CUDA_DRIVER_VERSION``, 12040 → "12.4"), the power limit (``DCGM_FI_DEV_POWER_MGMT_LIMIT``), the
highest SM and memory clocks (``DCGM_FI_DEV_MAX_SM_CLOCK``, ``DCGM_FI_DEV_MAX_MEM_CLOCK``), MIG (an
instance label present: enabled); what the page does not hold is left out.
"""

from __future__ import annotations

import math
from typing import Optional

from prometheus_client.parser import text_string_to_metric_families

from .nvml import cuda_version
from .readings import GpuFacts, Reading, combined

PREFIX = "DCGM_FI_"
SUMMED = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")


class Page:
    """One exporter page, parsed: per GPU (``Hostname:gpu``) its fields' values and its labels."""

    def __init__(self, text: str):
        self.values: dict[str, dict[str, float]] = {}
        self.labels: dict[str, dict[str, str]] = {}
        parts: dict[str, dict[str, dict[str, list[float]]]] = {}  # GPU → field → instance → its duplicates
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if not s.name.startswith(PREFIX) or not math.isfinite(s.value):
                    continue
                key = f"{s.labels.get('Hostname', '')}:{s.labels.get('gpu', s.labels.get('UUID', '?'))}"
                self.labels.setdefault(key, {}).update(s.labels)
                # the parser names a counter's sample NAME_total (the exporter writes NAME): the field's name
                name = fam.name if fam.type == "counter" else s.name
                instance = s.labels.get("GPU_I_ID", "")
                parts.setdefault(key, {}).setdefault(name, {}).setdefault(instance, []).append(float(s.value))
        for key, fields in parts.items():
            self.values[key] = {}
            for name, instances in fields.items():
                each = [sum(v) / len(v) for v in instances.values()]  # an instance's duplicates: averaged
                self.values[key][name] = sum(each) if name in SUMMED else sum(each) / len(each)

    def __bool__(self) -> bool:
        return bool(self.values)

    def readings(self, t: float) -> list[tuple[str, Reading]]:
        """Each GPU's reading, stamped *t* (module docstring)."""
        out = []
        for key, v in self.values.items():
            sm = v.get("DCGM_FI_PROF_SM_ACTIVE", v.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
            if sm is None and "DCGM_FI_DEV_GPU_UTIL" in v:
                sm = v["DCGM_FI_DEV_GPU_UTIL"] / 100.0
            dram = v.get("DCGM_FI_PROF_DRAM_ACTIVE")
            if dram is None and "DCGM_FI_DEV_MEM_COPY_UTIL" in v:
                dram = v["DCGM_FI_DEV_MEM_COPY_UTIL"] / 100.0
            energy = v.get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
            out.append((key, Reading(t, sm=sm, dram=dram, mem_used_mib=v.get("DCGM_FI_DEV_FB_USED"),
                                     power_w=v.get("DCGM_FI_DEV_POWER_USAGE"),
                                     sm_clock_mhz=v.get("DCGM_FI_DEV_SM_CLOCK"),
                                     energy_j=energy / 1000.0 if energy is not None else None)))
        return out

    def fields(self) -> dict[str, str]:
        """Which field each reading's utilisations came from (the first GPU's: a page is one exporter's)."""
        v = next(iter(self.values.values()), {})
        sm = next((f for f in ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE") if f in v),
                  "DCGM_FI_DEV_GPU_UTIL / 100")
        dram = "DCGM_FI_PROF_DRAM_ACTIVE" if "DCGM_FI_PROF_DRAM_ACTIVE" in v else "DCGM_FI_DEV_MEM_COPY_UTIL / 100"
        return {"sm": sm, "dram": dram}

    def facts(self) -> GpuFacts:
        """The GPUs' facts (module docstring)."""
        devices = []
        for key, v in self.values.items():
            lab = self.labels[key]
            mem = [v[f] for f in SUMMED if f in v]
            driver = lab.get("DCGM_FI_DRIVER_VERSION") or _int_text(v.get("DCGM_FI_DRIVER_VERSION"))
            cuda = v.get("DCGM_FI_CUDA_DRIVER_VERSION")
            limit = v.get("DCGM_FI_DEV_POWER_MGMT_LIMIT")
            devices.append({"device": key, "name": lab.get("modelName"),
                            "memory_mib": round(sum(mem)) if len(mem) >= 2 else None,
                            "driver": driver, "cuda": cuda_version(int(cuda)) if cuda is not None else None,
                            "power_limit_w": limit, "sm_clock_max_mhz": _int(v.get("DCGM_FI_DEV_MAX_SM_CLOCK")),
                            "mem_clock_max_mhz": _int(v.get("DCGM_FI_DEV_MAX_MEM_CLOCK")),
                            "mig": "enabled" if ("GPU_I_ID" in lab or "GPU_I_PROFILE" in lab) else None})
        return combined("dcgm", devices)


def _int(v: Optional[float]) -> Optional[int]:
    return None if v is None else int(v)


def _int_text(v: Optional[float]) -> Optional[str]:
    return None if v is None else str(int(v))


def parse(text: str) -> Optional[Page]:
    """The page, or None when *text* is no Prometheus exposition or holds no DCGM field."""
    try:
        page = Page(text)
    except Exception:  # noqa: BLE001 - a malformed exposition is simply not a DCGM page
        return None
    return page if page else None
