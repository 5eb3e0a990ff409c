"""What every engine the tool starts has in common: a server process for one arm.

An engine (llama.cpp's ``llama-server``, vLLM's OpenAI server) is started on a
free loopback port with its output in a log file, in a process group of its own
(not a session of its own: see :meth:`EngineProcess.start`), is healthy when
``/health`` answers 200, and is stopped with its whole process group.  It dies with the tool (:func:`spawn`):
however the tool ends (SIGKILL, a crash), the engine gets SIGTERM and takes its own children with it.  A subclass gives
:meth:`EngineProcess.command` (the argument vector, port included),
:meth:`EngineProcess.environment` (None: the tool's own), ``label`` (how
messages name the program), ``model_id`` (the model name its chat endpoint
serves), :meth:`EngineProcess.facts` (facts about itself for the ledger's
header; discovery adds what the endpoint says) and ``reset_dialect`` (whose cache-reset endpoint its server
serves).  Every one is an :class:`~.interface.Engine`, the interface the runner drives it through.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import EngineError
from .interface import EngineFacts, Readiness, Release

if TYPE_CHECKING:
    import aiohttp


def exit_words(returncode: int) -> str:
    """How a process ended, in words: ``exited with code 1``, or the signal that killed it (a negative
    :attr:`subprocess.Popen.returncode`) named, with what SIGILL means for a server binary."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    why = (" (an instruction this CPU lacks: a binary built for another machine's CPU, e.g. with -march=native; "
           "rebuild it here or portable)") if -returncode == signal.SIGILL else ""
    return f"was killed by {name} (exit code {returncode}){why}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_ERROR_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception):\s")


def log_tail(path: Path, lines: int = 20) -> str:
    """The log's last *lines* lines; when the first error line (``SomethingError: ...``, e.g. a child
    process's traceback, which the parent's shutdown noise buries) lies above them, it comes first."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    tail = text[-lines:]
    first = next((ln for ln in text[:-lines] if _ERROR_LINE.search(ln) and not ln.startswith("$ ")), None) \
        if len(text) > lines else None  # (the first line is the command)
    return "\n".join(([f"first error in the log: {first.strip()}", "..."] if first else []) + tail)


def end_group(pgid: int, grace_s: float) -> None:
    """SIGTERM to process group *pgid*, then SIGKILL to what is left of it after *grace_s* seconds."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int | None) -> list[int]:
    """The processes of process group *pgid* still there (zombies not counted), from /proc."""
    if pgid is None:
        return []
    out = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            out.append(pid)
    return out


def stop_group(proc: subprocess.Popen[bytes], stop_timeout_s: float, grace_s: float) -> None:
    """Stop *proc*, the leader of a process group of its own, and its group: SIGTERM, SIGKILL after
    *stop_timeout_s*; what its group still holds once it has exited (a child it left behind, e.g. vLLM's engine
    core) gets SIGTERM and SIGKILL after *grace_s* (:func:`end_group`): killed at once, vLLM's resource tracker
    left its shared memory in /dev/shm."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=stop_timeout_s)
        except (ProcessLookupError, PermissionError):
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    end_group(proc.pid, grace_s)  # (an empty group: returns at once)


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (Linux); None where there is none."""
    try:
        import ctypes  # noqa: PLC0415

        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


def _dies_with(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child sent SIGTERM when *parent* (this process) dies, by any means: a
    SIGKILL or a crash runs no cleanup, and an engine in a process group of its own would otherwise keep its
    port and memory.  Everything is looked up before the fork: the child only calls."""
    prctl, term = _prctl(), int(signal.SIGTERM)
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, term)
        if os.getppid() != parent:  # the parent died before the line above: no signal will come
            os._exit(1)
    return preexec


_spawner: ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def _on_lasting_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` on a thread that lives as long as the process: Linux sends the parent-death signal when the
    *thread* that forked the child ends, so a child forked on a passing thread (``asyncio.to_thread``: the
    runner's restarts) would be stopped when that thread is.  The main thread lasts; elsewhere one thread
    kept for the purpose forks."""
    global _spawner
    if threading.current_thread() is threading.main_thread():
        return fn()
    with _spawner_lock:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leverbench-spawner")
    return _spawner.submit(fn).result()


def spawn(cmd: list[str], **popen_kw: Any) -> subprocess.Popen[bytes]:
    """Start *cmd* in a process group of its own (see :meth:`EngineProcess.start`) that gets SIGTERM when this
    process dies, however it dies (``PR_SET_PDEATHSIG``, Linux; the prebuilt engine's launcher also leaves when
    its parent is gone).  The child must take its own children with it on SIGTERM (vLLM's server does)."""
    preexec = _dies_with(os.getpid())
    return _on_lasting_thread(lambda: subprocess.Popen(cmd, process_group=0, preexec_fn=preexec, **popen_kw))


DEFAULT_STARTUP_TIMEOUT_S = 300.0  # an engine's start, unless the arm sets startup_timeout_s (or its model's size)
STARTUP_S_PER_GB = 5.0  # ... a model of G GB gets DEFAULT_STARTUP_TIMEOUT_S + this × G: read at 200 MB/s at worst


def derived_timeout(model_bytes: int | None, where: str) -> tuple[float, str]:
    """(the start timeout, where it came from in words) for a model of *model_bytes* (None: not known) at *where*:
    :data:`DEFAULT_STARTUP_TIMEOUT_S` + :data:`STARTUP_S_PER_GB` s per GB of it."""
    if not model_bytes:
        return DEFAULT_STARTUP_TIMEOUT_S, f"the default ({where}: its size not known)"
    gb = model_bytes / 1e9
    return (DEFAULT_STARTUP_TIMEOUT_S + STARTUP_S_PER_GB * gb,
            f"derived from the model's size: {DEFAULT_STARTUP_TIMEOUT_S:g} s + {STARTUP_S_PER_GB:g} s per GB of "
            f"its {gb:.1f} GB ({where})")


class EngineProcess:
    """One server process for one arm, an :class:`~.interface.Engine`: ``start()`` → base URL, ``ready()``,
    ``alive()``, ``death_note()``, ``reset_cache()``, ``facts()``, ``stop()``, ``released()`` (its process group).

    ``startup_timeout_s`` None: derived from the model's size where the engine knows it (:meth:`model_bytes`,
    :func:`derived_timeout`), else :data:`DEFAULT_STARTUP_TIMEOUT_S`; ``timeout_from`` says which.  ``devices``:
    the GPUs it may use (``CUDA_VISIBLE_DEVICES``, in NVML's order: ``CUDA_DEVICE_ORDER=PCI_BUS_ID``); None:
    the tool's own environment.  A start is timed: ``t_start`` (epoch s) and ``ready_s`` (spawned → healthy).
    Every start appends to the arm's log: ``log_offset`` is where this start's part begins
    (:meth:`log_since_start`)."""

    label = "engine"
    model_id = ""
    reset_dialect: str | None = None  # whose cache-reset endpoint its server serves (engines.reset); None: none
    health_path = "/health"  # what answers 200 once it is up
    stop_timeout_s = 10.0
    orphan_grace_s = 5.0

    def __init__(self, name: str, args: list[str], log_path: Path, *, startup_timeout_s: float | None = None,
                 devices: list[int] | None = None):
        self.name = name
        self.args = list(args)
        self.log_path = Path(log_path)
        self.explicit_timeout = startup_timeout_s
        self.startup_timeout_s = startup_timeout_s or DEFAULT_STARTUP_TIMEOUT_S
        self.timeout_from = "the arm's startup_timeout_s" if startup_timeout_s else "the default"
        self.devices = None if devices is None else [str(d) for d in devices]
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._stopped = False  # stopped by :meth:`stop` (not dead of its own)
        self.t_start: float | None = None
        self.ready_s: float | None = None
        self.log_offset = 0

    def model_bytes(self) -> tuple[int | None, str]:
        """(the size of the model the engine loads, in bytes, or None; where it is) for the start timeout."""
        return None, "model"

    def model_load_s(self) -> float | None:
        """What the engine's log says loading its model took (None: it does not say)."""
        return None

    def log_since_start(self) -> str:
        """What this start wrote to the log (from ``log_offset``; "" when it cannot be read)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self.log_offset)
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def _timeout(self) -> None:
        if self.explicit_timeout is None:
            size, where = self.model_bytes()
            self.startup_timeout_s, self.timeout_from = derived_timeout(size, where)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        """The process's environment; None: the tool's own."""
        return None

    def facts(self) -> EngineFacts:
        raise NotImplementedError

    def ready(self) -> Readiness:
        """How the latest start went (:class:`~.interface.Readiness`)."""
        return Readiness(self.startup_timeout_s, self.timeout_from, self.t_start,
                         self.proc.pid if self.proc is not None else None, self.ready_s, self.model_load_s())

    def reset_slots(self) -> int:
        """The slots it was started with (llama.cpp's: erased where ``GET /slots`` lists none and ``GET /props``
        reports no ``total_slots``)."""
        return 1

    async def reset_cache(self, session: aiohttp.ClientSession, headers: Mapping[str, str]) -> str | None:
        """Empty its cache through its server's own endpoint (:func:`.reset.reset_through`, ``reset_dialect``)."""
        from .reset import reset_through  # noqa: PLC0415 (aiohttp: only a run that resets needs it)

        return await reset_through(self.reset_dialect, session, self.base_url, headers, self.reset_slots())

    def released(self) -> Release:
        """Its process group (its process's id: the group's leader) and the processes of it still there."""
        group = self.proc.pid if self.proc is not None else None
        return Release(group, tuple(group_members(group)))

    def start(self) -> str:
        """Start on a free loopback port and wait until ``health_path`` answers 200; returns the base URL.
        A process that exits while starting, or is not healthy within ``startup_timeout_s``, is stopped with its
        process group (:meth:`stop`) and raises :class:`EngineError` with the log's last lines."""
        self.proc, self._stopped = None, False  # (an earlier start's process is not this one's)
        self.port = free_port()
        self._timeout()
        cmd = self.command()
        env = self.environment()
        if self.devices is not None:
            env = {**(env if env is not None else os.environ), "CUDA_VISIBLE_DEVICES": ",".join(self.devices),
                   "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        self.t_start, self.ready_s, t0 = time.time(), None, time.monotonic()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.log_offset = log.tell()  # appending: the end of the earlier starts' part
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        # A process group of its own (the terminal's Ctrl-C reaches only the tool, which stops the engine), in
        # the tool's session: a session of its own is a scheduling group of its own where the kernel groups by
        # session (autogroup, on by default), and a busy machine then gives the whole server one share, which
        # its threads, waiting on each other at every token, turned into 0.5-2 tokens/s instead of 35-60 here
        # (benchmarks/engine_session.py).
        # (:func:`spawn`: it dies with the tool)
        self.proc = spawn(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        log.close()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()  # what its group still holds (a child it left behind): a failed start leaves nothing
                raise EngineError(
                    f"arm {self.name!r}: {self.label} {exit_words(self.proc.returncode)} while starting; "
                    f"last lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            try:
                with urllib.request.urlopen(self.base_url + self.health_path, timeout=2) as resp:  # noqa: S310
                    if resp.status == 200:
                        self.ready_s = time.monotonic() - t0
                        return self.base_url
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.2)
        self.stop()
        raise EngineError(f"arm {self.name!r}: {self.label} not healthy after {self.startup_timeout_s:g} s (start "
                          f"timeout: {self.timeout_from}; set the arm's engine startup_timeout_s); last lines of "
                          f"{self.log_path}:\n{log_tail(self.log_path)}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def death_note(self) -> str | None:
        """None while running, and once :meth:`stop` stopped it; otherwise why it stopped, with the log's tail."""
        if self.proc is None or self.proc.poll() is None or self._stopped:
            return None
        return (f"arm {self.name!r}: {self.label} died ({exit_words(self.proc.returncode)}); "
                f"last lines of {self.log_path}:\n{log_tail(self.log_path)}")

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after ``stop_timeout_s``; what the group holds once the
        leader has exited (a child it left behind, e.g. vLLM's engine core, holds the memory) gets SIGTERM
        too and SIGKILL after ``orphan_grace_s`` (:func:`stop_group`)."""
        if self.proc is not None:
            stop_group(self.proc, self.stop_timeout_s, self.orphan_grace_s)
            self._stopped = True
