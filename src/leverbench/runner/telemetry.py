"""The run's GPUs: their facts for the header, their readings for the ledger, and whether an engine let go.

- **Facts** (:class:`~leverbench.gpu.readings.GpuFacts`): the host's GPUs (the header's ``host.gpu``) and each
  arm's (its ``discovered.gpu``): through NVML for an engine the tool starts (the GPUs it would use:
  :func:`.engine_mode.engine_devices`; none: ``none (CPU)``), from a DCGM exporter for an endpoint
  (``gpu_metrics_url``, else a ``metrics_url`` that serves one); else ``unknown``, with why.
- **Readings**: a :class:`~leverbench.gpu.sampler.Sampler` per source (NVML: the started engines' GPUs; each
  exporter page), each on its own thread, NVML's at ``[experiment] gpu_sample_hz`` (default 10), an exporter
  page's at most :data:`DCGM_HZ` (once a second): parsing a page is Python that holds the interpreter
  (about 25 ms for an 8-GPU node's page, a quarter of the measuring process's time at 10 Hz), and the
  exporter refreshes it only every collect interval (``-c``, 30 s by default); the run takes their readings
  between units of work (:meth:`Telemetry.records`) as ``gpu`` ledger records.
- **Release** (:meth:`Telemetry.release`): after an engine stops, that its processes are gone (what the engine
  says: :meth:`leverbench.engines.Engine.released`), none left on its GPUs and their memory back to what it was
  before it started (within :data:`RELEASE_SLACK_MIB`), waiting up to :data:`RELEASE_WAIT_S`; without NVML an
  engine's GPUs cannot be checked, and its release is None (unchecked: its process group gone, nothing said of
  its GPUs) rather than confirmed.  The GPUs are checked here, not by the engine: the run chose them, and holds
  NVML and their memory from before the start.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

from ..engines.process import group_members
from ..gpu import dcgm
from ..gpu.nvml import Nvml, driver_gpu_count
from ..gpu.readings import FIELDS, NO_GPU, GpuFacts, Reading
from ..gpu.sampler import DEFAULT_HZ, Sampler
from ..ledger.rows import GpuSamplesRow
from ..redact import redact_url
from .engine_mode import Devices

RELEASE_WAIT_S = 60.0  # an engine's GPU memory must come back within this after its process group is gone
RELEASE_SLACK_MIB = 256.0  # memory used may stay this much above what it was before the engine started
PAGE_TIMEOUT_S = 5.0
DCGM_HZ = 1.0  # an exporter page is read at most this often (module docstring)
NVML_FIELDS = {"sm": "nvml utilization.gpu", "dram": "nvml utilization.memory"}


def fetch_page(url: str, headers: Mapping[str, str]) -> Optional[dcgm.Page]:
    """The DCGM exporter page at *url*, or None (no answer, not 200, no DCGM field in it)."""
    req = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(req, timeout=PAGE_TIMEOUT_S) as resp:  # noqa: S310 (the user's URL)
            if resp.status != 200:
                return None
            return dcgm.parse(resp.read().decode("utf-8", errors="replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


@dataclass
class Source:
    """One sampled source: its sampler, kind, the arms using each of its devices, the fields it reads."""

    sampler: Sampler
    kind: str
    arms: dict[str, list[str]]
    fields: dict[str, str]


@dataclass
class Telemetry:
    """The run's GPUs (module docstring); ``hz`` 0: no readings."""

    hz: float = DEFAULT_HZ
    nvml: Optional[Nvml] = None
    why: Optional[str] = None  # why NVML is not there
    host: GpuFacts = field(default_factory=GpuFacts)
    pages: dict[str, tuple[dict[str, str], list[str], dict[str, str]]] = field(default_factory=dict)
    sources: list[Source] = field(default_factory=list)

    @classmethod
    def open(cls, hz: Optional[float]) -> "Telemetry":
        nvml, why = Nvml.open()
        out = cls(DEFAULT_HZ if hz is None else hz, nvml, why)
        if nvml is not None:
            out.host = nvml.facts()
        else:
            n = driver_gpu_count()
            out.host = {"unknown": why or "no NVML", **({"count": n} if n else {})}
        return out

    def host_gpus(self) -> int:
        return self.nvml.count() if self.nvml is not None else driver_gpu_count()

    def engine_facts(self, devices: Devices) -> GpuFacts:
        """The facts of the GPUs an engine would use (module docstring)."""
        if devices is None:
            return NO_GPU.copy()
        if self.nvml is None:
            return {"unknown": self.why or "no NVML", "devices": list(devices)}
        idx = _indices(devices, self.nvml.count())
        if idx is None:
            return {"unknown": f"devices {', '.join(devices)} are not NVML's indices 0-{self.nvml.count() - 1}",
                    "devices": list(devices)}
        return self.nvml.facts(idx)

    def endpoint_facts(self, arm: str, url: Optional[str], headers: Mapping[str, str]) -> GpuFacts:
        """An endpoint's GPUs from the DCGM exporter at *url* (its page kept for sampling), else unknown."""
        if not url:
            return {"unknown": "an endpoint's GPUs are read from a DCGM exporter: give the arm gpu_metrics_url"}
        page = fetch_page(url, headers)
        if page is None:
            return {"unknown": f"no DCGM exporter page at {redact_url(url)}"}
        known = self.pages.setdefault(url, (dict(headers), [], page.fields()))
        known[1].append(arm)
        return page.facts()

    def start(self, engine_devices: Mapping[str, Devices]) -> None:
        """Start sampling: NVML over the GPUs of the engines the tool starts (*engine_devices*: arm → GPUs),
        and each exporter page found by :meth:`endpoint_facts`."""
        if self.hz <= 0:
            return
        if self.nvml is not None:
            arms: dict[str, list[str]] = {}
            for arm, devs in engine_devices.items():
                for i in _indices(devs or (), self.nvml.count()) or []:
                    arms.setdefault(str(i), []).append(arm)
            if arms:
                nvml, idx = self.nvml, sorted(int(k) for k in arms)
                sampler = Sampler(lambda: [(str(i), nvml.read(i)) for i in idx], self.hz, name="gpu-nvml")
                self.sources.append(Source(sampler, "nvml", arms, NVML_FIELDS))
        for url, (headers, page_arms, fields) in self.pages.items():
            def read(url: str = url, headers: dict[str, str] = headers) -> list[tuple[str, Reading]]:
                page = fetch_page(url, headers)
                return page.readings(time.time()) if page is not None else []
            sampler = Sampler(read, min(self.hz, DCGM_HZ), name="gpu-dcgm")
            self.sources.append(Source(sampler, "dcgm", {"*": page_arms}, fields))
        for s in self.sources:
            s.sampler.start()

    def records(self) -> list[GpuSamplesRow]:
        """The readings taken since the last call, one ``gpu`` record per device (module docstring)."""
        out: list[GpuSamplesRow] = []
        for s in self.sources:
            for device, readings in s.sampler.drain().items():
                if not readings:
                    continue
                row: GpuSamplesRow = {"kind": "gpu", "source": s.kind, "device": device,
                                      "arms": s.arms.get(device) or s.arms.get("*") or [], "fields": s.fields,
                                      "t": [round(r.t, 4) for r in readings]}
                for name in FIELDS:
                    col = [getattr(r, name) for r in readings]
                    row[name] = [None if v is None else round(v, 4) for v in col]
                out.append(row)
        return out

    def stop(self) -> None:
        for s in self.sources:
            s.sampler.stop()

    def close(self) -> None:
        self.stop()
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None

    def memory(self, devices: Devices) -> dict[str, float]:
        """Memory used (MiB) on each of *devices* NVML can read, now."""
        if self.nvml is None or not devices:
            return {}
        out = {}
        for i in _indices(devices, self.nvml.count()) or []:
            used = self.nvml.memory_used_mib(i)
            if used is not None:
                out[str(i)] = used
        return out

    def release(self, devices: Devices, pgid: Optional[int], before: Mapping[str, float],
                wait_s: float = RELEASE_WAIT_S, *, processes: Optional[Callable[[], Sequence[int]]] = None
                ) -> tuple[Optional[bool], str, list[int]]:
        """(released, what was checked in words, the pids left) after an engine stopped: its process group
        *pgid* gone (*processes*: the engine's processes still there, :meth:`leverbench.engines.Engine.released`;
        default: the group's members); on its GPUs, none of its processes left and the memory used back within
        RELEASE_SLACK_MIB of *before* (module docstring), waiting up to *wait_s*.  Released is None when the group
        is gone but the engine's GPUs could not be checked (no NVML)."""
        deadline = time.monotonic() + wait_s
        while True:
            left = list(processes()) if processes is not None else group_members(pgid)
            on_gpu: list[int] = []
            memory = self.memory(devices)
            if self.nvml is not None:
                for i in _indices(devices or (), self.nvml.count()) or []:
                    on_gpu += [p for p in self.nvml.processes(i) or [] if p in left or _in_group(p, pgid)]
            high = {d: m for d, m in memory.items() if d in before and m > before[d] + RELEASE_SLACK_MIB}
            done = not left and not on_gpu and not high
            if done or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        words = [f"process group {pgid}: " + (f"{len(left)} process(es) left" if left else "gone")]
        if devices and self.nvml is not None:
            words += [f"GPU {d}: {m:.0f} MiB used (before the start: {before.get(d, float('nan')):.0f})"
                      for d, m in memory.items()]
            if on_gpu:
                words.append(f"the engine's processes {sorted(set(on_gpu))} still on its GPUs")
        elif devices:
            words.append("its GPUs not checked (" + (self.why or "no NVML") + ")")
            return (None if done else False), "; ".join(words), sorted(set(left))
        return done, "; ".join(words), sorted(set(left) | set(on_gpu))


def _indices(devices: tuple[str, ...] | list[str], count: int) -> Optional[list[int]]:
    """*devices* as NVML indices, or None when one is not an index below *count* (a UUID, say)."""
    try:
        idx = [int(d) for d in devices]
    except ValueError:
        return None
    return idx if all(0 <= i < count for i in idx) else None


def _in_group(pid: int, pgid: Optional[int]) -> bool:
    try:
        return pgid is not None and os.getpgid(pid) == pgid
    except OSError:
        return False
