"""One engine interface (issue 39 part 5): every registered engine kind is an :class:`~leverbench.engines.Engine`
and the experiment file names the same kinds; an unknown kind's error lists the known ones; the runner drives an
engine through the interface alone (a fake engine of this module's, no process of its own, in the runner's engine
path: its start, its readiness, its resets, its facts, its stop and its release in the ledger as it said them);
the simulator is an engine kind of its own (``kind = "sim"``) that a run starts, resets and stops, whose options
are read as ``leverbench sim`` reads them."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from types import SimpleNamespace
from typing import get_args

import aiohttp
import pytest
from http_stub import answering, serving
from limits import SERVER_READY_S
from sim_engine import engine_pids

from leverbench.cli.sim import sim_command
from leverbench.config import EngineSpec, load
from leverbench.engines import Engine, Readiness, Release, kinds, make_engine
from leverbench.engines.process import EngineProcess
from leverbench.engines.sim_config import SimConfig, from_args
from leverbench.engines.sim_engine import SimEngine
from leverbench.errors import BadInput, ConfigError, EngineError
from leverbench.gpu.nvml import NVML_MODULE_ENV
from leverbench.ledger.reader import read_ledger
from leverbench.runner import telemetry
from leverbench.runner.run import Runner

FAST = ["--decode-tps", "2000", "--prefill-tps", "50000"]
#: What a kind's engine table must hold besides its kind (kind "command": the command that starts it).
TABLES: dict[str, dict[str, str]] = {"command": {"command": "leverbench sim --port {port}"}}


def test_every_registered_kind_is_an_engine(tmp_path):
    """Each kind the registry holds builds, from an arm's engine table, an object with every member of the
    interface; an object that lacks one is not an Engine (the check can fail)."""
    assert set(kinds()) >= {"embedded", "vllm", "sim", "command"}
    for name in kinds():
        eng = make_engine("a", EngineSpec(kind=name, **TABLES.get(name, {})), tmp_path / f"{name}.log")
        assert isinstance(eng, Engine), name
        assert isinstance(eng.ready(), Readiness) and eng.ready().spawned_at is None and eng.ready().timeout_s > 0
        assert eng.model_id and not eng.alive() and eng.death_note() is None
    assert not isinstance(SimpleNamespace(start=lambda: "", stop=lambda: None), Engine)


def test_the_experiment_file_names_the_registrys_kinds():
    assert set(get_args(EngineSpec.model_fields["kind"].annotation)) == set(kinds())


def test_an_unknown_kind_lists_the_known_ones(tmp_path):
    arms_own = 300.0  # (a value of the spec, never waited for: the kind is refused first)
    spec = SimpleNamespace(kind="tgi", args=[], startup_timeout_s=arms_own, model_fields_set=set())
    with pytest.raises(BadInput) as err:
        make_engine("a", spec, tmp_path / "a.log")
    text = str(err.value)
    assert "unknown engine kind 'tgi'" in text and all(f"{k} (" in text for k in ("embedded", "sim", "vllm", "command"))


def test_the_arms_timeout_reaches_the_engine_only_where_it_set_one(tmp_path):
    arms_own = 7.5  # (the arm's setting, read back: nothing is started)
    own = make_engine("a", EngineSpec(kind="sim", startup_timeout_s=arms_own), tmp_path / "a.log").ready()
    default = make_engine("b", EngineSpec(kind="sim"), tmp_path / "b.log").ready()
    assert (own.timeout_s, own.timeout_from) == (7.5, "the arm's startup_timeout_s")
    assert default.timeout_from == "the default"  # (derived from the model's size at the start)


@pytest.mark.parametrize("args", [
    [], FAST, ["--decode-tps=150", "--slots", "3", "--no-prefix-cache", "--dialect", "vllm", "--model", "m/x"],
    ["--prompt-tokens-details", "--drift-per-s", "-0.001", "--cache-reset", "fake", "--output-jitter", "0.5"],
])
def test_sim_args_are_read_as_leverbench_sim_reads_them(args):
    """The arm's args of kind "sim" mean what they mean to ``leverbench sim`` (its click command is the oracle)."""
    params = sim_command.make_context("sim", list(args)).params
    fields = {f.name for f in dataclasses.fields(SimConfig)}
    assert from_args(args) == SimConfig(**{k: v for k, v in params.items() if k in fields})


@pytest.mark.parametrize(("args", "words"), [
    (["--port", "9"], "--port is the tool's"), (["--decode-tps"], "needs a value"),
    (["--slots", "two"], "--slots takes an integer"), (["--prefix-cache=1"], "is a switch"),
    (["--no-slots"], "not an option"), (["decode-tps"], "not an option"), (["--decode-tps", "0"], "must be > 0"),
    # accepted at load before the review, and each broke the run: click refuses an underscore; the openai dialect
    # serves no /health (the start polled to its timeout); another base path 404'd every call
    (["--decode_tps", "300"], "spelled with dashes (write --decode-tps)"),
    (["--no_prefix_cache"], "spelled with dashes (write --no-prefix-cache)"),
    (["--dialect", "openai"], "--dialect openai imitates a hosted API, which serves no /health"),
    (["--dialect=openai"], 'run `leverbench sim --dialect openai` yourself and give the arm base_url = '
                           '"http://HOST:PORT/v1"'),
    (["--base-path", "/api"], "--base-path /api: the tool serves the engines it starts at /v1"),
    (["--base-path", "/openai/v1"], 'base_url = "http://HOST:PORT/openai/v1" and model instead of engine'),
    (["--base-path", ""], 'run `leverbench sim --base-path ""` yourself'),
])
def test_sim_args_that_leverbench_sim_would_refuse_are_refused_at_load(tmp_path, args, words):
    p = _experiment(tmp_path, f'{{ kind = "sim", args = {_toml(args)} }}')
    with pytest.raises(ConfigError, match="engine") as err:
        load(p)
    assert words in str(err.value)


def test_an_underscored_option_is_refused_as_leverbench_sim_refuses_it():
    """``--decode_tps``: ``leverbench sim`` (click) has no such option; neither has the arm (its oracle)."""
    import click  # noqa: PLC0415

    with pytest.raises(click.NoSuchOption):
        sim_command.make_context("sim", ["--decode_tps", "300"])
    with pytest.raises(ValueError, match="write --decode-tps"):
        from_args(["--decode_tps", "300"])
    with pytest.raises(ValueError, match="not an option of leverbench sim"):
        from_args(["--no_such_thing", "1"])


def test_the_default_base_path_and_the_engine_dialects_are_taken(tmp_path):
    for args in (["--base-path", "/v1"], ["--dialect", "sglang"], ["--dialect", "vllm"], ["--dialect", "llama.cpp"]):
        assert load(_experiment(tmp_path, f'{{ kind = "sim", args = {_toml(args)} }}')).spec.arms[0].engine.args == args


def test_an_arm_with_neither_endpoint_nor_engine_is_told_every_kind(tmp_path):
    p = _experiment(tmp_path, "{ kind = \"sim\" }")
    p.write_text(p.read_text().replace('engine = { kind = "sim" }\n', ""))
    with pytest.raises(ConfigError) as err:
        load(p)
    assert all(f'{{ kind = "{k}" }}' in str(err.value) for k in kinds()), str(err.value)


class _Spawns(EngineProcess):
    """A process of a shell that leaves a child in its process group, then exits (*exits*) or never answers."""

    label = "test engine"

    def __init__(self, tmp: Path, exits: bool):
        scenario_s = 1.0  # (the scenario: a start that is not healthy within it fails)
        super().__init__("a", [], tmp / "a.log", startup_timeout_s=scenario_s)
        self.script = "sleep 60 & " + ("exit 3" if exits else "wait")

    def command(self) -> list[str]:
        return ["sh", "-c", self.script]


@pytest.mark.parametrize("exits", [True, False], ids=["exits while starting", "never healthy"])
def test_a_failed_start_leaves_nothing_behind(tmp_path, exits):
    """The interface's word: a start that fails has stopped what it spawned (the child the shell left in its group
    too), and ready() still names the process it spawned."""
    eng = _Spawns(tmp_path, exits)
    with pytest.raises(EngineError, match="exited|not healthy"):
        eng.start()
    pid = eng.ready().pid
    assert pid is not None and eng.released() == Release(pid, ())
    eng.stop()  # nothing more to end


@pytest.mark.parametrize(("props", "args", "erased"), [
    ({"total_slots": 3}, [], [0, 1, 2]),  # the count the server reports, not the one the arm's args give (none)
    ({"total_slots": 2}, ["-np", "4"], [0, 1]),
    ({}, ["-np", "4"], [0, 1, 2, 3]),  # nothing reported: the slots it was started with
])
def test_a_llamacpp_reset_erases_the_slots_the_server_reports_where_it_lists_none(tmp_path, props, args, erased):
    """``--no-slots``: ``GET /slots`` answers 501, so the erase goes to each slot of ``/props``' ``total_slots``."""
    asyncio.run(_reset_against(tmp_path, props, args, erased))


async def _reset_against(tmp_path: Path, props: dict, args: list[str], erased: list[int]) -> None:
    from aiohttp import web  # noqa: PLC0415

    from leverbench.engines.embedded import EmbeddedEngine  # noqa: PLC0415

    seen: list[int] = []

    async def erase(request: web.Request) -> web.Response:
        seen.append(int(request.match_info["id"]))
        return web.json_response({"id_slot": seen[-1], "n_erased": 0})

    unlisted = answering({"error": "This server does not support slots endpoint."}, 501)
    async with serving({("GET", "/slots"): unlisted, ("POST", "/slots/{id}"): erase,
                        ("GET", "/props"): answering(props)}) as url:
        eng = EmbeddedEngine("a", args, tmp_path / "a.log")
        eng.port = int(url.rsplit(":", 1)[1])
        async with aiohttp.ClientSession() as session:
            assert await eng.reset_cache(session, {}) is None
    assert seen == erased


def test_sim_refuses_settings_that_are_not_its(tmp_path):
    for extra, name in (("threads = 2", "threads"), ('binary = "x"', "binary"), ("ctx_size = 4096", "ctx_size")):
        with pytest.raises(ConfigError, match=f"{name}: not a setting of kind = \"sim\""):
            load(_experiment(tmp_path, f'{{ kind = "sim", {extra} }}'))


def _toml(args: list[str]) -> str:
    return "[" + ", ".join(f'"{a}"' for a in args) + "]"


def _experiment(tmp: Path, engine: str, extra: str = "") -> Path:
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "interface"
repeats = 1
baseline = "a"
sentinel_tokens = 8
{extra}

[[arms]]
name = "a"
role = "baseline"
engine = {engine}

[[cases]]
name = "hello"
prompt = "{' '.join(f'word{i}' for i in range(200))} say hi"
max_tokens = 16
''')
    return p


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setenv(NVML_MODULE_ENV, "no_such_nvml_binding")  # this machine's truth: no NVML


def test_a_sim_engine_runs_end_to_end(tmp_path, no_nvml):
    """``kind = "sim"``: the run starts ``leverbench sim`` with the arm's options, resets its cache through the
    endpoint of the dialect it speaks (checked to take), and stops it; the header's facts say what it is."""
    p = _experiment(tmp_path, f'{{ kind = "sim", args = {_toml([*FAST, "--model", "tiny"])}, '
                              f'startup_timeout_s = {SERVER_READY_S} }}')
    Runner(load(p), tmp_path / "run").run()
    assert engine_pids() == []
    led = read_ledger(tmp_path / "run")
    arm = led.header["arms"]["a"]
    assert arm["discovered"]["engine"] == "leverbench sim" and arm["model"] == "tiny"
    assert arm["discovered"]["knobs"]["simulator"] is True
    [start], [stop] = list(led.of_kind("engine_start")), list(led.of_kind("engine_stop"))
    assert start["error"] is None and start["ready_s"] > 0 and start["pid"] and stop["released"] is True
    [plan] = [r for r in led.of_kind("cache_reset") if r.get("case") is None]
    assert (plan["method"], plan["check"]) == ("reset", "took")
    [turn] = [r for r in led.of_kind("turn")]
    assert turn["error"] is None and turn["cache"]["method"] == "reset"


class FakeEngine:
    """An engine of nothing but the interface (no process of its own): it hands out the URL of a simulator this
    module started, answers with figures of its own, and notes every call the runner makes."""

    def __init__(self, url: str, leaves_after: int):
        self._url, self._leaves_after = url, leaves_after
        self.calls: list[str] = []
        self._t: float | None = None
        self._up = False

    @property
    def model_id(self) -> str:
        return "sim"

    def start(self) -> str:
        self.calls.append("start")
        self._t, self._up = time.time(), True
        return self._url

    def ready(self) -> Readiness:
        self.calls.append("ready")
        return Readiness(42.0, "the fake's own", self._t, 4242 if self._t else None, 0.125 if self._t else None, 0.5)

    def alive(self) -> bool:
        return self._up

    def death_note(self) -> str | None:
        return None if self._up else "the fake is down"

    async def reset_cache(self, session: aiohttp.ClientSession, headers) -> str | None:
        self.calls.append("reset_cache")
        async with session.post(self._url + "/slots/0?action=erase", headers=dict(headers)) as r:
            return None if r.status == 200 else f"erase answered {r.status}"

    def facts(self) -> dict:
        self.calls.append("facts")
        return {"engine": "fake engine", "model_id": "sim"}

    def stop(self) -> None:
        self.calls.append("stop")
        self._up = False

    def released(self) -> Release:
        self.calls.append("released")
        self._leaves_after -= 1
        return Release(4242, (4243,) if self._leaves_after > 0 else ())


@pytest.fixture
def sim_url(tmp_path):
    eng = SimEngine("server", tmp_path / "sim.log", FAST, startup_timeout_s=SERVER_READY_S)
    try:
        yield eng.start()
    finally:
        eng.stop()


def test_the_runner_drives_an_engine_through_the_interface_alone(tmp_path, sim_url, no_nvml, monkeypatch):
    """A fake engine (not an EngineProcess: no process, no log) in the runner's engine path: started, asked its
    facts and readiness, reset before the turn, stopped, and asked again and again whether it let go until it did
    (the third ask); the ledger says what it said."""
    import leverbench.runner.run as run_module  # noqa: PLC0415

    fake = FakeEngine(sim_url, leaves_after=3)
    monkeypatch.setattr(run_module, "make_engine", lambda *a, **k: fake)
    monkeypatch.setattr(telemetry, "RELEASE_WAIT_S", 10.0)
    assert isinstance(fake, Engine)
    Runner(load(_experiment(tmp_path, '{ kind = "embedded" }')), tmp_path / "run").run()
    led = read_ledger(tmp_path / "run")
    [start], [stop] = list(led.of_kind("engine_start")), list(led.of_kind("engine_stop"))
    assert (start["ready_s"], start["pid"], start["timeout_s"], start["timeout_from"], start["model_load_s"]) == \
        (0.125, 4242, 42.0, "the fake's own", 0.5)
    assert stop["released"] is True and stop["check"] == "process group 4242: gone"
    assert led.header["arms"]["a"]["discovered"]["engine"] == "fake engine"
    seen = [c for c in fake.calls if c != "ready"]
    assert seen[:2] == ["start", "facts"] and seen[-4:] == ["stop", "released", "released", "released"]
    assert seen.count("start") == 1 and seen.count("reset_cache") >= 2  # the reset check's, and the turn's
    [turn] = list(led.of_kind("turn"))
    assert turn["error"] is None and turn["cache"]["method"] == "reset"
