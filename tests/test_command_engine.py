"""Any engine, from a command template (issue 40 part 1, ``kind = "command"``): the simulator started through
``{python} -m leverbench sim --port {port} --draft-k {k}`` runs an experiment end to end (started, reset, stopped,
nothing left), the ledger's header records the template, the arguments it ran and each placeholder's value, and
each placeholder is one knob (``value:NAME``, or the lever's that owns the flag it fills); its reset is the
request the arm names, refused in words without one; a template that cannot be filled is one config error
naming its key."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from limits import SERVER_READY_S, STOP_S
from sim_engine import engine_pids

from leverbench.analysis.base.knobs import all_arm_knobs, differing
from leverbench.config import EngineSpec, load
from leverbench.engines import kinds, make_engine
from leverbench.engines.command import CommandEngine
from leverbench.engines.command_template import argv, check_values, value_flags
from leverbench.engines.process import group_members
from leverbench.errors import ConfigError, EngineError
from leverbench.gpu.nvml import NVML_MODULE_ENV
from leverbench.ledger.reader import read_ledger
from leverbench.runner.run import Runner

TAG = "command-engine-test"  # the model the simulator serves: on its command line, how its processes are found
SIM = "{python} -m leverbench sim --port {port} --draft-k {k} --model {model} --decode-tps 2000 --prefill-tps 50000"


def _toml(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _experiment(tmp: Path, *engines: dict) -> Path:
    """An experiment of one arm per engine table (arm ``a`` the baseline) and one short case."""
    arms = "".join(f'\n[[arms]]\nname = "{chr(97 + i)}"\nrole = "{"baseline" if i == 0 else "treatment"}"\n'
                   f"engine = {_toml(e)}\n" for i, e in enumerate(engines))
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "command"
repeats = 1
baseline = "a"
sentinel_tokens = 8
{arms}
[[cases]]
name = "hello"
prompt = "{' '.join(f'word{i}' for i in range(200))} say hi"
max_tokens = 16
''')
    return p


def _sim(k: int, **more: object) -> dict:
    """The engine table of the simulator started through the template, drafting *k* tokens."""
    return {"kind": "command", "command": SIM, "values": {"python": sys.executable, "k": k, "model": TAG},
            "startup_timeout_s": SERVER_READY_S, **more}


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setenv(NVML_MODULE_ENV, "no_such_nvml_binding")  # this machine's truth: no NVML


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _assert_gone(pid: int, port: int) -> None:
    """Nothing of the engine *pid* (the leader of its process group) is left, and its port is free (as
    tests/test_signals.py checks a stopped engine)."""
    deadline = time.monotonic() + STOP_S
    while (group_members(pid) or not _port_free(port)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_members(pid), f"its process group still holds {group_members(pid)}"
    assert _port_free(port), f"port {port} is still taken"


# ------------------------------------------------------------------ a run


def test_a_command_engine_runs_end_to_end(tmp_path, no_nvml):
    """Two arms of one template, k = 2 and k = 4: each started, its reset checked to take (llama.cpp's erase of every
    slot; the other's a plain request), turned, stopped and gone; the header says what ran, and k is the one knob
    in which they differ."""
    p = _experiment(tmp_path, _sim(2, reset="POST /slots/{id}?action=erase"),
                    _sim(4, reset="POST /slots/0?action=erase"))
    Runner(load(p), tmp_path / "run").run()
    assert engine_pids(TAG) == []
    led = read_ledger(tmp_path / "run")
    a, b = led.header["arms"]["a"], led.header["arms"]["b"]
    d = a["discovered"]
    assert (d["engine"], d["command"], a["model"]) == ("command", SIM, TAG)
    assert d["values"] == {"python": sys.executable, "k": 2, "model": TAG}
    assert d["value_flags"] == {"python": [], "k": ["--draft-k"], "model": ["--model"]}
    port = d["engine_args"][d["engine_args"].index("--port") + 1]
    assert d["engine_args"] == argv(SIM, {"python": sys.executable, "k": "2", "model": TAG, "port": port})
    assert d["engine_args"][:4] == [sys.executable, "-m", "leverbench", "sim"] and "{" not in " ".join(d["engine_args"])
    assert b["discovered"]["values"]["k"] == 4 and "4" in b["discovered"]["engine_args"]
    assert d["knobs"]["simulator"] is True
    table = led.header["config"]["arms"][0]["engine"]
    assert (table["kind"], table["command"], table["values"]["k"], table["reset"]) == \
        ("command", SIM, 2, "POST /slots/{id}?action=erase")
    assert not {"args", "threads", "ctx_size", "binary"} & set(table)  # (llama.cpp's: not this kind's settings)
    knobs, _ = all_arm_knobs(led.header["arms"], {}, ["a", "b"])
    assert differing(knobs["a"], knobs["b"]) == ["value:k"] and (knobs["a"]["value:k"], knobs["b"]["value:k"]) == (2, 4)
    starts, stops = list(led.of_kind("engine_start")), list(led.of_kind("engine_stop"))
    assert len(starts) == 2 and all(s["error"] is None and s["pid"] for s in starts)
    assert len(stops) == 2 and all(s["released"] is True for s in stops)
    plans = {r["arm"]: r for r in led.of_kind("cache_reset") if r.get("case") is None}
    assert {arm: (r["method"], r["check"]) for arm, r in plans.items()} == {"a": ("reset", "took"),
                                                                            "b": ("reset", "took")}
    assert all(t["error"] is None and t["cache"]["method"] == "reset" for t in led.of_kind("turn"))


# ------------------------------------------------------------------ the engine itself


def _engine(tmp: Path, command: str = SIM, **kw: object) -> CommandEngine:
    values = kw.pop("values", {"python": sys.executable, "k": 2, "model": TAG})
    return CommandEngine("a", tmp / "a.log", command, values, startup_timeout_s=SERVER_READY_S, **kw)


async def _reset(eng: CommandEngine) -> str | None:
    async with aiohttp.ClientSession() as session:
        return await eng.reset_cache(session, {})


def test_its_reset_is_the_request_the_arm_names_and_without_one_it_says_so(tmp_path):
    eng = _engine(tmp_path)
    eng.start()
    try:
        said = asyncio.run(_reset(eng))
        assert said is not None and "names no reset" in said and 'reset = "METHOD /path"' in said
        eng.reset = "POST /slots/0?action=erase"
        assert asyncio.run(_reset(eng)) is None
        eng.reset = "POST /no/such/reset"
        said = asyncio.run(_reset(eng))
        assert said is not None and said.startswith("POST /no/such/reset answered 404")
    finally:
        eng.stop()


def test_stop_leaves_no_process_of_its_group(tmp_path):
    """A template that starts a shell leaving a child in the engine's process group: stopped, nothing of it is
    left (the child neither), and its port is free."""
    eng = _engine(tmp_path, "sh -c 'sleep 300 & exec {python} -m leverbench sim --port {port} --model {model}'",
                  values={"python": sys.executable, "model": TAG})
    eng.start()
    pid, port = eng.ready().pid, eng.port
    assert pid is not None and port is not None and len(group_members(pid)) == 2  # the simulator, the sleep
    eng.stop()
    _assert_gone(pid, port)
    assert eng.released().gone and eng.death_note() is None and engine_pids(TAG) == []


def test_its_health_path_environment_and_model(tmp_path):
    """``health``: the path polled until it answers 200 (one that never does: not healthy, nothing left);
    ``env``: added to its environment; ``model``: the name its calls ask for (else its {model}'s value)."""
    eng = _engine(tmp_path, health="/v1/models", env={"LEVERBENCH_COMMAND_TEST": "yes"}, model="asked-for")
    eng.start()
    try:
        pid = eng.ready().pid
        with open(f"/proc/{pid}/environ", "rb") as fh:
            assert b"LEVERBENCH_COMMAND_TEST=yes" in fh.read().split(b"\0")
        assert eng.model_id == "asked-for" and eng.facts()["model_id"] == "asked-for"
    finally:
        eng.stop()
    assert _engine(tmp_path).model_id == TAG
    never_healthy_s = 2.0  # a short start timeout on purpose: the engine answers 404 on its health path for ever
    never = CommandEngine("a", tmp_path / "b.log", SIM, {"python": sys.executable, "k": 2, "model": TAG},
                          health="/never", startup_timeout_s=never_healthy_s)
    with pytest.raises(EngineError, match="command engine not healthy after 2 s"):
        never.start()
    pid = never.ready().pid
    assert pid is not None and never.released().gone


def test_a_program_that_is_not_there_is_said_before_anything_starts(tmp_path):
    eng = _engine(tmp_path, "no-such-engine-server --port {port}", values={})
    with pytest.raises(EngineError, match="'no-such-engine-server' is no program on PATH nor a file"):
        eng.start()
    assert eng.ready().pid is None


# ------------------------------------------------------------------ the template


def test_json_in_a_flag_and_the_flags_each_placeholder_fills():
    template = ("vllm serve {model} --port {port} --max-num-seqs {seqs} --speculative-config "
                "'{{\"method\": \"ngram\", \"num_speculative_tokens\": {k}}}' --x={k} {extra}")
    values = {"model": "m/x", "seqs": "4", "k": "3", "extra": "--enforce-eager --seed 1"}
    assert argv(template, {**values, "port": "8000"}) == [
        "vllm", "serve", "m/x", "--port", "8000", "--max-num-seqs", "4", "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 3}', "--x=3", "--enforce-eager", "--seed", "1"]
    assert value_flags(template, values) == {"model": [], "seqs": ["--max-num-seqs"],
                                             "k": ["--speculative-config", "--x"], "extra": []}


def _header_arm(seqs: int, slots: int | None) -> dict:
    template = "vllm serve m --port {port} --max-num-seqs {seqs}"
    return {"role": "treatment", "conditions": {}, "model": "m", "discovered": {
        "engine": "command", "command": template, "values": {"seqs": seqs}, "value_flags": {"seqs": ["--max-num-seqs"]},
        "engine_args": argv(template, {"seqs": str(seqs), "port": "1"}),
        "knobs": {"engine": "vllm", **({"slots": slots} if slots is not None else {})}}}


@pytest.mark.parametrize(("slots", "knob"), [((2, 4), "slots"), ((None, None), "value:seqs"), ((4, 4), "value:seqs")])
def test_a_placeholder_that_fills_a_levers_flag_is_that_levers_knob_where_it_shows(slots, knob):
    """``--max-num-seqs {seqs}``: where the engines report the slots it sets, the comparison is the slots lever's;
    where they do not (or report them alike), it is the placeholder's; one knob either way."""
    arms = {"a": _header_arm(2, slots[0]), "b": _header_arm(4, slots[1])}
    knobs, _ = all_arm_knobs(arms, {}, ["a", "b"])
    assert differing(knobs["a"], knobs["b"]) == [knob]


def _refused(tmp: Path, engine: dict, key: str, *words: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(_experiment(tmp, engine))
    assert err.value.key == key, str(err.value)
    assert all(w in str(err.value) for w in words), str(err.value)


BASE = {"kind": "command", "command": "server --port {port} --k {k}", "values": {"k": 2}}


@pytest.mark.parametrize(("change", "key", "words"), [
    ({"values": {}}, "arms[0].engine.values", ["{k} in command has no value"]),  # a placeholder no value fills
    ({"values": {"k": 2, "j": 1}}, "arms[0].engine.values", ["j: no placeholder of command is {j}"]),  # unused
    ({"command": "server --port {port} --k {k"}, "arms[0].engine.command", ["unbalanced '{' at character 26"]),
    ({"command": "server --port {port} '{\"a\": {k}}'"}, "arms[0].engine.command", ["unbalanced '{'", "{{"]),
    ({"command": "server --port {port} --k {k}}"}, "arms[0].engine.command", ["unbalanced '}'", "}}"]),
    ({"command": "  "}, "arms[0].engine.command", ["is empty"]),
    ({"command": "server --k {k}"}, "arms[0].engine.command", ["has no {port}", "--port {port}"]),
    ({"values": {"k": 2, "port": 8000}}, "arms[0].engine.values", ["{port} is the tool's"]),
    ({"command": "server --port {port} '--k {k}"}, "arms[0].engine.command", ["no closing quotation"]),
    ({"values": {"k": "'"}}, "arms[0].engine.values", ["with these values, command does not split"]),
    ({"reset": "/reset_prefix_cache"}, "arms[0].engine.reset", ["is no request", "POST /reset_prefix_cache"]),
    ({"health": "health"}, "arms[0].engine.health", ["is no path"]),
    ({"env": {"A=B": "1"}}, "arms[0].engine.env", ["'A=B'"]),
    ({"command": None}, "arms[0].engine", ["kind = \"command\" needs the command"]),
    ({"args": ["--x"]}, "arms[0].engine", ["args: not a setting of kind = \"command\""]),
    ({"kind": "sim", "values": {}, "command": None, "reset": "POST /x"}, "arms[0].engine",
     ["values, reset: a setting of kind = \"command\" only"]),
])
def test_a_template_that_cannot_be_filled_is_one_config_error(tmp_path, change, key, words):
    engine = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    _refused(tmp_path, engine, key, *words)


def test_a_value_holds_no_nul():
    with pytest.raises(ValueError, match="k: a value may not hold a NUL"):
        check_values("server --port {port} --k {k}", {"k": "a\x00b"})


def test_the_tables_of_the_other_kinds_are_written_as_before(tmp_path):
    """The ledger header's copy of an engine table: another kind's has none of the command's keys, as before they
    existed; a command's has none of llama.cpp's settings."""
    assert list(EngineSpec(kind="sim").model_dump()) == ["kind", "args", "threads", "ctx_size", "startup_timeout_s",
                                                         "binary", "devices"]
    spec = load(_experiment(tmp_path, {**BASE, "env": {"X": "1"}})).spec.arms[0].engine
    assert spec is not None and list(spec.model_dump()) == ["kind", "startup_timeout_s", "devices", "command", "values",
                                                            "health", "reset", "env", "model"]


def test_the_registry_builds_it_from_the_arms_table(tmp_path):
    assert "command" in kinds()
    eng = make_engine("a", EngineSpec(**BASE, reset="POST /reset_prefix_cache", model="m"), tmp_path / "a.log")
    assert isinstance(eng, CommandEngine) and (eng.reset, eng.model_id) == ("POST /reset_prefix_cache", "m")
    assert eng.facts()["engine_args"] == ["server", "--port", "{port}", "--k", "2"]  # (not started: no port yet)


def test_python_is_this_installation_s_unless_the_values_give_one():
    """``{python}`` needs no value: the Python that runs leverbench fills it (so that ``{python} -m leverbench sim``
    runs this installation's simulator); a value given for it wins."""
    template = "{python} -m leverbench sim --port {port} --draft-k {k}"
    check_values(template, {"k": 2})
    assert argv(template, {"k": "2", "port": "0"})[0] == sys.executable
    assert argv(template, {"k": "2", "port": "0", "python": "/opt/py"})[0] == "/opt/py"


def test_the_bundled_model_is_the_embedded_engine_s_unless_the_values_give_one():
    """``{bundled_model}`` needs no value: the GGUF the embedded engine serves fills it (so that a template can run
    this installation's llama.cpp server on its model, as examples/tune.toml does)."""
    from leverbench.engines.embedded import model_path  # noqa: PLC0415

    template = "{python} -m leverbench.engines.llama_launcher -m {bundled_model} --port {port}"
    check_values(template, {})
    assert argv(template, {"port": "0"})[4] == str(model_path())
    assert argv(template, {"port": "0", "bundled_model": "/m.gguf"})[4] == "/m.gguf"


@pytest.mark.parametrize(("values", "reported", "knob"), [
    (("--enable-prefix-caching", "--no-enable-prefix-caching"), (True, False), "prefix_cache"),
    (("--enable-prefix-caching", "--no-enable-prefix-caching"), (None, None), "value:cache"),
])
def test_a_placeholder_whose_value_is_a_levers_flag_is_that_levers_knob(values, reported, knob):
    """``{cache}`` filled with ``--enable-prefix-caching`` or ``--no-enable-prefix-caching``: the value is the flag,
    so where the engines report the prefix cache the comparison is that lever's, one knob, not two."""
    template = "vllm serve m --port {port} {cache}"

    def arm(value: str, on: bool | None) -> dict:
        return {"role": "treatment", "conditions": {}, "model": "m", "discovered": {
            "engine": "command", "command": template, "values": {"cache": value}, "value_flags": {"cache": []},
            "engine_args": argv(template, {"cache": value, "port": "1"}),
            "knobs": {"engine": "vllm", **({"prefix_cache": on} if on is not None else {})}}}

    arms = {"a": arm(values[0], reported[0]), "b": arm(values[1], reported[1])}
    knobs, _ = all_arm_knobs(arms, {}, ["a", "b"])
    assert differing(knobs["a"], knobs["b"]) == [knob]


def test_engine_dir_is_a_directory_of_each_engines_own_made_when_it_starts_and_no_knob(tmp_path):
    """``{engine_dir}`` needs no value: each arm's engine gets its own directory beside its log (made by its start),
    the flag it fills is no fact that tells the arms apart, and a value given for it is used instead."""
    template = "server --port {port} --slot-save-path {engine_dir} --k {k}"
    check_values(template, {"k": 1})  # (no value needed)
    engines = {a: CommandEngine(a, tmp_path / f"engine-{a}.log", template, {"k": k}) for a, k in (("a", 1), ("b", 2))}
    assert engines["a"].arguments()[4] == str(tmp_path / "engine-a.files")
    assert engines["b"].arguments()[4] == str(tmp_path / "engine-b.files")
    arms = {a: {"role": "treatment", "conditions": {}, "discovered": dict(e.facts())} for a, e in engines.items()}
    knobs, _ = all_arm_knobs(arms, {}, ["a", "b"])
    assert differing(knobs["a"], knobs["b"]) == ["value:k"]
    given = CommandEngine("c", tmp_path / "engine-c.log", template, {"k": 1, "engine_dir": "/srv/slots"})
    assert given.arguments()[4] == "/srv/slots"
    with pytest.raises(EngineError):  # (no program "server": the start fails after the directory is made)
        engines["a"].start()
    assert (tmp_path / "engine-a.files").is_dir() and not (tmp_path / "engine-b.files").exists()
