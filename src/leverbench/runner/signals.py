"""Signals while a run goes on: SIGTERM stops it as Ctrl-C does, and both wait while engines are stopped."""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable


def sigterm_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


_HELD = (signal.SIGINT, signal.SIGTERM)


def on_main_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` where signals can be handled (the main thread); elsewhere (a test's thread) None."""
    return fn(*args) if threading.current_thread() is threading.main_thread() else None


def hold_signals() -> dict[int, Any]:
    """Ignore Ctrl-C and SIGTERM (on the main thread), returning the handlers to put back."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, signal.SIG_IGN) for s in _HELD}


def release_signals(held: dict[int, Any]) -> None:
    for s, handler in held.items():
        signal.signal(s, handler)
