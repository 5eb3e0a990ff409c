"""Readings of the GPUs at a set rate, on a thread of the sampler's own, off the measured path.

:class:`Sampler` calls its *read* function (every device's :class:`~.readings.Reading`, keyed by device) ``hz``
times a second on a daemon thread and keeps what it read; the run takes the readings with :meth:`Sampler.drain`
between units of work, when nothing is being measured, and writes them to the ledger as ``gpu`` records.  The
thread holds the interpreter only for the few microseconds a reading's bookkeeping takes (NVML's calls are
foreign calls, which release it), so the client's measurements on the event loop do not wait for it.  A
reading that raises is counted (:attr:`Sampler.errors`, the first message kept) and sampling goes on.  Ticks
are kept on a fixed grid (start + k / hz); one that falls behind (a stalled machine) is skipped, not bunched.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterable, Optional

from .readings import Reading

DEFAULT_HZ = 10.0

#: What a sampler reads at each tick: (device key, reading) of each device.
ReadFn = Callable[[], Iterable[tuple[str, Reading]]]


class Sampler:
    """Reads at ``hz`` on its own thread (module docstring); a context manager (start, stop)."""

    def __init__(self, read: ReadFn, hz: float = DEFAULT_HZ, *, name: str = "gpu-sampler"):
        if not hz > 0:
            raise ValueError(f"a sampler's rate must be > 0 Hz, got {hz}")
        self.read = read
        self.period = 1.0 / hz
        self._lock = threading.Lock()
        self._buffer: dict[str, list[Reading]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.errors = 0
        self.first_error: Optional[str] = None
        self.ticks = 0

    def __enter__(self) -> "Sampler":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the tick under way (idempotent)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _tick(self) -> None:
        try:
            got = list(self.read())
        except Exception as exc:  # noqa: BLE001 - a failed reading is counted; sampling goes on
            self.errors += 1
            if self.first_error is None:
                self.first_error = f"{type(exc).__name__}: {exc}"
            return
        with self._lock:
            for key, r in got:
                self._buffer.setdefault(key, []).append(r)
        self.ticks += 1

    def _loop(self) -> None:
        start = time.monotonic()
        k = 0
        while not self._stop.is_set():
            self._tick()
            k += 1
            now = time.monotonic()
            if start + k * self.period < now:  # fell behind: the next tick on the grid that is still ahead
                k = int((now - start) / self.period) + 1
            self._stop.wait(start + k * self.period - now)

    def drain(self) -> dict[str, list[Reading]]:
        """The readings taken since the last drain, by device, in time order."""
        with self._lock:
            out, self._buffer = self._buffer, {}
        return out
