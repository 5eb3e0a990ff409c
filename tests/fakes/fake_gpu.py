"""One simulated GPU that the fake torch keeps busy and the fake NVML reads.

Work is recorded as intervals of activity, each of a kind: ``sm`` (a compute-bound kernel: a matrix product)
or ``dram`` (a bandwidth-bound one: a copy).  NVML's readings average over a window ending when read, as the
driver's do (:data:`WINDOW_S`): ``utilization.gpu`` is the share of the window any kernel ran (a copy is a
kernel too), ``utilization.memory`` weighs the window's copies at :data:`DRAM_OF_COPY` and its matrix products
at :data:`DRAM_OF_MATMUL` (a compute-bound kernel keeps the memory less busy).  Power follows the same shares
between :data:`IDLE_W` and the busy power of each kind; the energy counter integrates it.  A test may also set
the readings outright (:func:`script`): a function of time giving (gpu %, memory %, power W).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional

WINDOW_S = 0.05
DRAM_OF_COPY = 0.92
DRAM_OF_MATMUL = 0.30
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


def _shares(t: float, window: float = WINDOW_S) -> dict[str, float]:
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
    """(gpu %, memory %) of the window ending at *t*."""
    if _scripted is not None:
        g, m, _ = _scripted(t)
        return g, m
    sh = _shares(t)
    return 100.0 * min(1.0, sh["sm"] + sh["dram"]), 100.0 * min(1.0, DRAM_OF_COPY * sh["dram"] +
                                                              DRAM_OF_MATMUL * sh["sm"])


def power(t: float) -> float:
    if _scripted is not None:
        return _scripted(t)[2]
    sh = _shares(t)
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
