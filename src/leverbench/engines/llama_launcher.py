"""Run llama.cpp's HTTP server from the prebuilt wheel ``xllamacpp``, as a ``llama-server`` would.

``python -m leverbench.engines.llama_launcher [llama-server flags]`` maps the flags onto
``xllamacpp.CommonParams`` (:mod:`leverbench.engines.llama_flags`), starts ``xllamacpp.Server`` (llama.cpp's
own server: ``/health``, ``/v1/chat/completions``, ``/metrics``, ``/slots``, ``/props``) and serves until
SIGTERM, SIGINT or SIGHUP, or until the process that started it is gone (a SIGKILLed tool:
:func:`serve_until`); while the model loads, those signals end it at once.  The embedded engine runs it as a
process of its own, exactly as it runs a compiled ``llama-server``, so a crash, a log and a stop are the same
for both.  ``--version`` prints the build as ``llama-server --version`` does.  A flag it does not map exits
with code 2 and one line naming it.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading

from .llama_flags import FlagError, apply, parse

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def package_version(distribution: str = "xllamacpp") -> str | None:
    """An installed distribution's version, None when it is not installed (``xllamacpp``'s, the default:
    ``2026.10.11549``, year, month, llama.cpp build)."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def build_number(pkg_version: str | None) -> int | None:
    """llama.cpp's build number in an ``xllamacpp`` version (its last part: ``2026.10.11549`` → 11549)."""
    m = re.match(r"\d+\.\d+\.(\d+)", str(pkg_version or ""))  # a local suffix (+cu128) may follow
    return int(m.group(1)) if m else None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    pkg = package_version()
    if "--version" in args:
        print(f"version: {pkg} (build {build_number(pkg) or 0}, commit unknown)\nbuilt as the PyPI wheel xllamacpp")
        return 0
    try:
        settings = parse(args)
    except FlagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        import xllamacpp  # noqa: PLC0415 (the engine's only import of it: the tool runs without it)
    except ImportError as exc:
        why = "is not installed: run scripts/install.sh" if pkg is None else \
            (f"does not load ({exc}); it needs the system's OpenMP runtime libgomp.so.1 "
             "(Debian: apt-get install libgomp1)")
        print(f"error: the prebuilt engine xllamacpp {why}", file=sys.stderr)
        return 2
    params = xllamacpp.CommonParams()
    try:
        apply(params, settings, xllamacpp)
    except FlagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    parent = os.getppid()
    for sig in STOP_SIGNALS:  # while loading (C code, which no Python handler interrupts): they end it at once
        signal.signal(sig, signal.SIG_DFL)
    print(f"leverbench launcher: xllamacpp {pkg} (llama.cpp b{build_number(pkg)}), loading {params.model.path}",
          flush=True)
    try:
        server = xllamacpp.Server(params)  # loads the model and listens (its own threads)
    except Exception as exc:  # noqa: BLE001 - llama.cpp has logged why above; one line says it failed
        print(f"error: the server did not start: {exc}", file=sys.stderr)
        return 1
    print(f"leverbench launcher: listening on {server.listening_address}", flush=True)
    serve_until(parent)
    sys.stdout.flush()
    sys.stderr.flush()
    # The server's threads hold no state worth keeping; leaving at once is the stop llama-server's SIGTERM makes.
    os._exit(0)


def serve_until(parent: int, check_s: float = 0.5) -> None:
    """Return on SIGTERM, SIGINT or SIGHUP, or once *parent* is no longer this process's parent: the tool
    that started it died without stopping it (SIGKILL, a crash) and it was re-parented.  The tool also has
    it sent SIGTERM then (``PR_SET_PDEATHSIG``, Linux); this watch holds where that is missing."""
    stop = threading.Event()
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(check_s):
        if os.getppid() != parent:
            print(f"leverbench launcher: the process that started it ({parent}) is gone; stopping", flush=True)
            return


if __name__ == "__main__":
    sys.exit(main())
