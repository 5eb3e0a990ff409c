"""llama-server flags mapped onto the prebuilt engine's parameters (engines/llama_flags.py), and the experiment
file's ``engine.binary``.  The parser is pure; applying needs xllamacpp (a required part: scripts/install.sh)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from leverbench.config.experiment import load
from leverbench.engines.llama_flags import BINARY_HINT, FLAGS, FlagError, apply, parse
from leverbench.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def _settings(args: list[str]) -> dict[str, object]:
    return {s.target: s.value for s in parse(args)}


def test_the_tools_own_flags_and_a_drafter_parse() -> None:
    got = _settings(["--model", "/m.gguf", "--host", "127.0.0.1", "--port", "8080", "--threads", "2",
                     "--parallel", "1", "--ctx-size", "8192", "--metrics", "--no-webui",
                     "--spec-type", "ngram-mod", "--spec-draft-n-max", "7"])
    assert got == {"model.path": "/m.gguf", "hostnames": ["127.0.0.1"], "port": 8080, "cpuparams.n_threads": 2,
                   "cpuparams_batch.n_threads": 2,  # -t sets the batch threads too, as llama-server's does
                   "n_parallel": 1, "n_ctx": 8192, "endpoint_metrics": True, "ui": False,
                   "speculative.types": [("enum:common_speculative_type", "ngram-mod")],
                   "speculative.draft.n_max": 7}


def test_a_later_flag_wins_and_threads_batch_is_its_own() -> None:
    got = _settings(["-t", "4", "-tb", "1", "-c", "512", "--ctx-size", "1024", "--cache-ram", "0", "-nocb"])
    assert got["cpuparams.n_threads"] == 4 and got["cpuparams_batch.n_threads"] == 1
    assert got["n_ctx"] == 1024 and got["cache_ram_mib"] == 0 and got["cont_batching"] is False


def test_values_of_each_kind() -> None:
    got = _settings(["-fa", "true", "-ngl", "all", "-ctk", "q8_0", "--spec-type", "ngram-simple,ngram-mod",
                     "-a", "x,y", "-to", "30", "--temp", "0.5", "--seed", "-1"])
    assert got["flash_attn_type"] == ("enum:llama_flash_attn_type", "enabled")  # llama.cpp's words for on
    assert got["sampling.seed"] == 0xFFFFFFFF  # -1 (random) wraps to uint32, as llama-server's stoul does
    assert got["n_gpu_layers"] == -2 and got["cache_type_k"] == ("enum:ggml_type", "q8_0")
    assert got["speculative.types"] == [("enum:common_speculative_type", "ngram-simple"),
                                        ("enum:common_speculative_type", "ngram-mod")]
    assert got["model_alias"] == {"x", "y"} and got["timeout_read"] == got["timeout_write"] == 30
    assert got["sampling.temp"] == 0.5
    assert _settings(["-fa", "-1", "-ngl", "12"]) == {"flash_attn_type": ("enum:llama_flash_attn_type", "auto"),
                                                      "n_gpu_layers": 12}  # a value that looks like a flag


@pytest.mark.parametrize("args, words", [
    (["--mlock"], ["'--mlock'", "not mapped", BINARY_HINT]),
    (["--threads"], ["--threads needs a value"]),
    (["--threads", "two"], ["--threads takes a number", "'two'"]),
    (["--spec-type", "eagle"], ["--spec-type takes one of", "'eagle'"]),
    (["-ctk", "Q8_0"], ["-ctk takes one of", "'Q8_0'"]),  # llama-server's words, as it spells them
    (["-fa", "maybe"], ["-fa takes on, off or auto"]),
    (["-fa"], ["-fa needs a value"]),
    (["--ctx-size=512"], ["does not read '--ctx-size=512'"]),  # nor does llama-server
    (["-c", "3000000000"], ["32-bit integer"]),
    (["8"], ["'8' is a value, not a flag"]),
])
def test_what_the_prebuilt_engine_cannot_take_is_one_clear_error(args: list[str], words: list[str]) -> None:
    with pytest.raises(FlagError) as ei:
        parse(args)
    for w in words:
        assert w in str(ei.value)


def _example(text: str, tmp_path: Path) -> Path:
    (tmp_path / "doc.txt").write_text("x")
    p = tmp_path / "exp.toml"
    p.write_text(f'''[experiment]
name = "e"
baseline = "a"
[[arms]]
name = "a"
role = "baseline"
{text}
[[cases]]
name = "c"
documents = ["doc.txt"]
prompt = "p"
''')
    return p


def test_an_unmapped_flag_is_a_config_error_naming_the_arm_and_the_way_out(tmp_path: Path) -> None:
    p = _example('engine = { kind = "embedded", args = ["--mlock"] }', tmp_path)
    with pytest.raises(ConfigError) as ei:
        load(p)
    assert ei.value.key == "arms[0].engine" and "--mlock" in str(ei.value) and 'binary = "PATH"' in str(ei.value)
    # with a binary, every flag is the binary's to read
    exe = tmp_path / "lb-test-llama-server"  # a name no PATH or venv holds
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    p = _example('engine = { kind = "embedded", args = ["--mlock"], binary = "lb-test-llama-server" }', tmp_path)
    os.environ["PATH"], old = "/nonexistent", os.environ["PATH"]
    try:  # a bare name is looked up on PATH, then beside this Python (.venv/bin)
        with pytest.raises(ConfigError) as ei:
            load(p)
        assert "not on PATH" in str(ei.value) and ei.value.key == "arms[0].engine.binary"
        os.environ["PATH"] = str(tmp_path)
        assert load(p).spec.arms[0].engine.binary == str(exe)
    finally:
        os.environ["PATH"] = old
    p = _example('engine = { kind = "embedded", args = ["--mlock"], binary = "./lb-test-llama-server" }', tmp_path)
    assert load(p).spec.arms[0].engine.binary == str(exe)  # relative to the experiment file, made absolute
    exe.chmod(0o644)
    with pytest.raises(ConfigError, match="not executable"):
        load(p)
    p = _example('engine = { kind = "embedded", binary = "./nope" }', tmp_path)
    with pytest.raises(ConfigError, match="no such file"):
        load(p)
    p = _example('engine = { kind = "vllm", binary = "./lb-test-llama-server" }', tmp_path)
    with pytest.raises(ConfigError, match="binary names a llama-server"):
        load(p)


@pytest.mark.parametrize("flag", ["--port", "--host", "--model", "-m"])
def test_an_arm_may_not_take_the_flags_the_tool_starts_its_engine_with(tmp_path: Path, flag: str) -> None:
    p = _example(f'engine = {{ kind = "embedded", args = ["{flag}", "x"] }}', tmp_path)
    with pytest.raises(ConfigError, match=f"args may not set {flag}"):
        load(p)


def test_every_example_arm_runs_on_the_prebuilt_engine() -> None:
    from leverbench.config.tune import load_tune  # noqa: PLC0415

    for f in sorted((ROOT / "examples").glob("*.toml")):
        # (a tune file, [tune], is an experiment of one command-template arm: load_tune checks it)
        exp = load_tune(f).experiment if "\n[tune]" in f.read_text() else load(f)
        for arm in exp.spec.arms:  # load() checks each embedded arm's flags
            assert arm.engine is None or arm.engine.kind != "embedded" or arm.engine.binary is None


@pytest.mark.engine
def test_every_mapped_flag_sets_an_attribute_this_xllamacpp_has() -> None:
    """Each entry of the map, applied to a real CommonParams and read back: a name the installed build renamed
    or dropped fails here, not in a user's run."""
    xlc = pytest.importorskip("xllamacpp")
    sample = {"int": "3", "seed": "-1", "float": "0.25", "str": "/x.gguf", "strlist": "127.0.0.1", "strset": "a",
              "gpu_layers": "5", "flash_attn": "on"}
    for flag in FLAGS:
        name = flag.names[0]
        raw = (flag.choices[-1] if flag.choices else sample.get(flag.kind.split(":")[0], "")) if flag.takes_value \
            else None
        args = [name] if raw is None else [name, raw]
        params = xlc.CommonParams()
        settings = parse(args)
        apply(params, settings, xlc)
        for s in settings:
            obj = params
            for part in s.target.split("."):
                obj = getattr(obj, part)
            value = s.value
            if flag.kind.startswith("enums:"):
                assert [m.name for m in obj] == [("COMMON_SPECULATIVE_TYPE_" + v[1].upper().replace("-", "_"))
                                                 for v in value], name
            elif flag.kind.startswith("enum:") or flag.kind == "flash_attn":
                assert obj.name.endswith(value[1].upper().replace("-", "_")), name
            elif flag.kind == "float":
                assert obj == pytest.approx(value), name
            elif flag.kind == "seed":
                assert obj == 0xFFFFFFFF, name
            else:
                assert obj == value, (name, obj, value)
