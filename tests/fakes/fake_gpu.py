"""One simulated GPU that the fake torch keeps busy and the fake NVML reads.

Work is recorded as intervals of activity, each of a kind: ``sm`` (a compute-bound kernel: a matrix product)
or ``dram`` (a bandwidth-bound one: a copy).  NVML's utilisations are the driver's: it samples the GPU once per
sample period (:data:`WINDOW_S`, "between 1 second and 1/6 second depending on the product", NVML's
``nvmlUtilization_t``) and a reading returns its last complete sample, the average over the period that ended
at the last sample time before the reading (:func:`sample_end`), so a reading may show work up to two periods
old.  ``utilization.gpu`` is the share of that period any kernel ran (a copy is a kernel too),
``utilization.memory`` weighs its copies at :data:`DRAM_OF_COPY` and its matrix products at
:data:`DRAM_OF_MATMUL` (a compute-bound kernel keeps the memory less busy).  Power follows the same shares over
the period ending when read, between :data:`IDLE_W` and the busy power of each kind; the energy counter
integrates it.  A test may also set the readings outright (:func:`script`): a function of time giving (gpu %,
memory %, power W).

The module's settings are read when used, so a test sets them on the module; a subprocess (``gpu-check``) takes
them from the environment: ``FAKE_GPU_WINDOW_S``, ``FAKE_GPU_DRAM_OF_MATMUL``, ``FAKE_GPU_DELAY_S`` (readings
that show the work this much later than it ran: a sampler whose timestamps lag) and ``FAKE_GPU_SWAP``.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Callable, Optional

WINDOW_S = float(os.environ.get("FAKE_GPU_WINDOW_S") or 1 / 6)  # the driver's sample period: NVML's shortest
DRAM_OF_COPY = 0.92
DRAM_OF_MATMUL = float(os.environ.get("FAKE_GPU_DRAM_OF_MATMUL") or 0.30)
DELAY_S = float(os.environ.get("FAKE_GPU_DELAY_S") or 0.0)
SAMPLE_PHASE_S = 0.0731  # where the driver's sample periods fall: not on the second
IDLE_W, SM_W, DRAM_W = 80.0, 650.0, 420.0
MEMORY_TOTAL = 141 << 30
MEMORY_BASE = 600 << 20

_lock = threading.Lock()
_spans: list[tuple[float, float, str]] = []  # (start, end, kind); end inf while running
_scripted: Optional[Callable[[float], tuple[float, float, float]]] = None
allocated = 0  # bytes the fake torch holds
processes: list[int] = []  # pids NVML lists as compute processes
_t0 = time.time()


def reset() -> None:
    global _scripted, allocated
    with _lock:
        _spans.clear()
    _scripted, allocated = None, 0
    processes.clear()


def script(fn: Optional[Callable[[float], tuple[float, float, float]]]) -> None:
    """Readings from *fn*(t) → (gpu %, memory %, power W) instead of the recorded work."""
    global _scripted
    _scripted = fn


#: FAKE_GPU_SWAP=1: the GPU reads a copy as compute-bound and a matrix product as bandwidth-bound (a broken
#: sampler, for the check to catch)
SWAP = os.environ.get("FAKE_GPU_SWAP") == "1"


def busy(kind: str, seconds: float) -> None:
    """Keep the GPU busy with *kind* for *seconds* (the caller waits: a synchronous kernel)."""
    if SWAP:
        kind = {"sm": "dram", "dram": "sm"}[kind]
    start = time.time()
    with _lock:
        _spans.append((start, float("inf"), kind))
        k = len(_spans) - 1
    time.sleep(seconds)
    with _lock:
        _spans[k] = (start, time.time(), kind)


def sample_end(t: float) -> float:
    """When the driver took its last sample before *t* (its sample periods end every :data:`WINDOW_S`)."""
    return math.floor((t - SAMPLE_PHASE_S) / WINDOW_S) * WINDOW_S + SAMPLE_PHASE_S


def _shares(t: float, window: Optional[float] = None) -> dict[str, float]:
    """The share of [t − window, t] each kind of work ran (*window*: :data:`WINDOW_S` as it is now)."""
    window = WINDOW_S if window is None else window
    lo = t - window
    out = {"sm": 0.0, "dram": 0.0}
    with _lock:
        spans = list(_spans)
    for a, b, kind in spans:
        cover = min(b, t) - max(a, lo)
        if cover > 0:
            out[kind] += cover / window
    return {k: min(1.0, v) for k, v in out.items()}


def utilization(t: float) -> tuple[float, float]:
    """(gpu %, memory %) as read at *t*: the driver's last sample (module docstring)."""
    if _scripted is not None:
        g, m, _ = _scripted(t)
        return g, m
    sh = _shares(sample_end(t - DELAY_S))
    return 100.0 * min(1.0, sh["sm"] + sh["dram"]), 100.0 * min(1.0, DRAM_OF_COPY * sh["dram"] +
                                                              DRAM_OF_MATMUL * sh["sm"])


def power(t: float) -> float:
    if _scripted is not None:
        return _scripted(t)[2]
    sh = _shares(t - DELAY_S)
    return IDLE_W + (SM_W - IDLE_W) * sh["sm"] + (DRAM_W - IDLE_W) * sh["dram"]


def energy_j(t: float) -> float:
    """The energy counter: idle power since the fake started plus each span's extra power (scripted: none)."""
    if _scripted is not None:
        return _scripted(t)[2] * (t - _t0)
    extra = 0.0
    with _lock:
        spans = list(_spans)
    for a, b, kind in spans:
        dur = max(0.0, min(b, t) - a)
        extra += dur * ((SM_W if kind == "sm" else DRAM_W) - IDLE_W)
    return IDLE_W * (t - _t0) + extra
