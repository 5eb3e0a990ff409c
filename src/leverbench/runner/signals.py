"""Signals that stop the tool: SIGINT (Ctrl-C), SIGTERM (kill, timeout, systemd, a container's stop) and SIGHUP
(the terminal closing) each stop a command as Ctrl-C does, and all three wait while engines are stopped.

Left at its default, SIGTERM or SIGHUP would end the process on the spot: nothing it started would be stopped
(an engine runs in a process group of its own, out of the terminal's reach; its parent-death signal,
:func:`leverbench.engines.process.spawn`, is the last resort, not the way a command stops), a ledger or a
recording would not be closed.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Any, Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Those of :data:`STOP_SIGNALS` whose default ends the process at once (Python turns SIGINT into
#: KeyboardInterrupt itself, and ``asyncio.run`` into a cancellation of its task).
TERMINATING = (signal.SIGTERM, signal.SIGHUP)


def sigterm_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def on_main_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` where signals can be handled (the main thread); elsewhere (a test's thread) None."""
    return fn(*args) if threading.current_thread() is threading.main_thread() else None


def interrupt_on(signals: tuple[int, ...] = TERMINATING) -> dict[int, Any]:
    """Make each of *signals* raise KeyboardInterrupt, as Ctrl-C does (on the main thread; elsewhere nothing),
    returning the handlers to put back (:func:`release_signals`).  SIGINT among them is handled even where the
    process started with it ignored (a shell's background job)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, sigterm_as_interrupt) for s in signals}


def cancel_on(loop: asyncio.AbstractEventLoop, cancel: Callable[[], Any],
              signals: tuple[int, ...] = TERMINATING) -> None:
    """Inside an event loop: each of *signals* calls *cancel* (the main task's), so the task's ``finally``
    blocks run and the calls in flight are recorded; on the main thread only (elsewhere nothing)."""
    if threading.current_thread() is threading.main_thread():
        for s in signals:
            loop.add_signal_handler(s, cancel)


#: The stop signals that arrived while held (:func:`hold_signals`), for a caller that goes on to more work after
#: the engines are stopped (a tune's next race) to honour: :func:`take_held`.
_held: list[int] = []


def _remember(signum: int, frame: Any) -> None:
    _held.append(signum)


def hold_signals() -> dict[int, Any]:
    """Hold Ctrl-C, SIGTERM and SIGHUP (on the main thread): each is remembered (:func:`take_held`) and has no other
    effect, so engines being stopped are not left half-stopped by it; returns the handlers to put back."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, _remember) for s in STOP_SIGNALS}


def take_held() -> bool:
    """Whether a stop signal arrived while signals were held since the last call (and forget it): a command that
    starts more work after a stop (``leverbench tune``'s next race) stops instead, as the signal asked."""
    arrived = bool(_held)
    _held.clear()
    return arrived


def release_signals(held: dict[int, Any]) -> None:
    for s, handler in held.items():
        signal.signal(s, handler if handler is not None else signal.SIG_DFL)
