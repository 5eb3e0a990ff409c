"""Children that a test stops with Ctrl-C (SIGINT).

A shell without job control starts its background commands with SIGINT ignored (``pytest … &``, a CI step,
``nohup``), and an ignored signal stays ignored across fork and exec: a child of such a test run would never
see the test's SIGINT (Python installs its KeyboardInterrupt handler only where SIGINT is not ignored at
start).  :func:`popen` starts the child with SIGINT as Python's default, whatever this process inherited.
"""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def popen(args: list[str], **kw: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, **kw)`` with SIGINT not ignored in the child (a handled signal is reset to its
    default on exec; an ignored one is not, hence the handler installed here for the moment of the start)."""
    prev = signal.getsignal(signal.SIGINT)
    if prev == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(args, **kw)
    finally:
        if prev == signal.SIG_IGN:
            signal.signal(signal.SIGINT, prev)
