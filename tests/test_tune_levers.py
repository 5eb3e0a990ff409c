"""A tune whose knobs name levers (issue 40): the embedded llama.cpp or vLLM engine started with the flags the lever
registry knows for each value (``leverbench.levers.registry.serve_args``), checked against the engines' own flag
names (llama.cpp's table ``engines/llama_flags.py``, vLLM's spelling); every wrong file says where, in one line."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from leverbench.config.tune import load_tune, race_experiment
from leverbench.engines.llama_flags import check as check_llama_flags
from leverbench.errors import ConfigError
from leverbench.levers.registry import serve_args
from leverbench.tune.run import launch_command

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def tune_file(tmp: Path, knobs: str, *, kind: str = "embedded", more: str = "") -> Path:
    p = tmp / "tune.toml"
    p.write_text(f'''
[experiment]
name = "levers"
repeats = 2

[[arms]]
name = "engine"
engine = {{ kind = "{kind}", args = ["--seed", "1"] }}

[tune]
knobs = {{ {knobs} }}
{more}

[[cases]]
name = "quote"
prompt = "quote it"
max_tokens = 8
''')
    return p


def arms(tune, incumbent: dict, candidate: dict) -> dict[str, list[str]]:
    exp = race_experiment(tune, incumbent, candidate, "inc", "cand")
    return {a.name: list(a.engine.args) for a in exp.spec.arms}


def test_the_example_races_each_configuration_with_the_flags_its_levers_set():
    tune = load_tune(EXAMPLES / "tune-levers.toml")
    assert tune.baseline == {"drafter": "none", "draft_tokens": 3, "slots": 1, "prefix_cache": True}
    got = arms(tune, tune.baseline, {**tune.baseline, "drafter": "ngram-simple", "draft_tokens": 7, "slots": 2,
                                     "prefix_cache": False})
    assert got == {"inc": ["--parallel", "1", "--cache-prompt"],
                   "cand": ["--spec-type", "ngram-simple", "--spec-draft-n-max", "7", "--parallel", "2",
                            "--no-cache-prompt"]}
    for args in got.values():
        check_llama_flags(args)  # every flag is one the bundled llama-server takes, with a value it takes
    line = launch_command(tune, tuple({**tune.baseline, "slots": 2}.items()))
    assert line == 'engine = { kind = "embedded", args = ["--parallel", "2", "--cache-prompt"], ctx_size = 4096 }'
    assert tomllib.loads(line)["engine"]["ctx_size"] == 4096  # (the template's own settings kept: what was raced)


def test_the_template_s_own_arguments_come_first_and_vllm_gets_its_spelling(tmp_path):
    tune = load_tune(tune_file(tmp_path, 'drafter = ["none", "ngram"], draft_tokens = [3], slots = [4, 2], '
                                         'prefix_cache = [true, false], chunked_prefill = [true, false], '
                                         'kv_cache_dtype = ["auto", "fp8"], batch_tokens = [2048, 8192]',
                               kind="vllm"))
    cand = {"drafter": "ngram", "draft_tokens": 3, "slots": 2, "prefix_cache": False, "chunked_prefill": False,
            "kv_cache_dtype": "fp8", "batch_tokens": 8192}
    got = arms(tune, tune.baseline, cand)
    assert got["inc"] == ["--seed", "1", "--max-num-seqs", "4", "--enable-prefix-caching", "--enable-chunked-prefill",
                          "--kv-cache-dtype", "auto", "--max-num-batched-tokens", "2048"]
    assert got["cand"][:4] == ["--seed", "1", "--speculative-config",
                               json.dumps({"method": "ngram", "num_speculative_tokens": 3})]
    assert got["cand"][4:] == ["--max-num-seqs", "2", "--no-enable-prefix-caching", "--no-enable-chunked-prefill",
                               "--kv-cache-dtype", "fp8", "--max-num-batched-tokens", "8192"]


def test_llama_cpp_kv_cache_dtype_sets_both_caches_and_aliases_name_the_lever(tmp_path):
    tune = load_tune(tune_file(tmp_path, 'cache_type_k = ["f16", "q8_0"], parallel = [1, 2]'))
    got = arms(tune, tune.baseline, {"cache_type_k": "q8_0", "parallel": 2})
    assert got["cand"] == ["--seed", "1", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--parallel", "2"]
    check_llama_flags(got["cand"])


@pytest.mark.parametrize(("knobs", "more", "kind", "key", "words"), [
    ('colour = ["red", "blue"]', "", "embedded", "tune.knobs", "'colour' names no lever llama.cpp can be started "
     "with (knobs: batch_tokens, draft_tokens, drafter, kv_cache_dtype, prefix_cache, slots, or their aliases)"),
    ('chunked_prefill = [true, false]', "", "embedded", "tune.knobs", "'chunked_prefill' (chunked prefill) cannot be "
     "set on llama.cpp by the tool (it can on vllm)"),
    ('draft_tokens = [3, 7]', "", "embedded", "tune.knobs", "'draft_tokens' qualifies the drafter knob, which the "
     "configuration does not have"),
    ('slots = [1, 0]', "", "embedded", "tune.knobs", "slots = 0: slots must be a whole number of at least 1"),
    ('prefix_cache = ["on", "off"]', "", "vllm", "tune.knobs", "prefix_cache = 'on': prefix_cache is on or off: "
     "true or false"),
    ('drafter = ["none", "ngram"]', "", "vllm", "tune.knobs", "vLLM's drafter needs its draft tokens a step: add the "
     "knob draft_tokens"),
    ('drafter = ["none", "bogus-kind"]', "", "embedded", "tune.knobs",
     "with drafter=bogus-kind, llama-server flag --spec-type takes"),
    ('kv_cache_dtype = ["f16", "q9_9"]', "", "embedded", "tune.knobs",
     "with kv_cache_dtype=q9_9, llama-server flag --cache-type-k"),
    ('slots = [1, 2], parallel = [2, 4]', "", "embedded", "tune.knobs", "'slots' and 'parallel' both name slots: keep"),
    ('seed = [1], slots = [1, 2]', "", "embedded", "tune.knobs", "'seed' names no lever"),
    ('drafter = ["none", "ngram-simple"], draft_tokens = [3, 7]', "", "embedded", "tune.exclude",
     'drafter=none draft_tokens=3 and drafter=none draft_tokens=7 start the same engine (no argument of their own): '
     'exclude one, e.g. exclude = [{ drafter = "none", draft_tokens = 7 }]'),
])
def test_a_knob_the_engine_cannot_serve_is_refused_where_it_is_written(tmp_path, knobs, more, kind, key, words):
    with pytest.raises(ConfigError) as err:
        load_tune(tune_file(tmp_path, knobs, kind=kind, more=more))
    assert f"{tmp_path / 'tune.toml'}: {key}: " in str(err.value) and words in str(err.value), str(err.value)


def test_a_flag_the_template_sets_and_a_knob_sets_is_refused(tmp_path):
    p = tune_file(tmp_path, 'kv_cache_dtype = ["f16", "q8_0"]')
    p.write_text(p.read_text().replace('args = ["--seed", "1"]', 'args = ["--cache-type-k", "q4_0"]'))
    with pytest.raises(ConfigError, match=r"arms\[0\]\.engine\.args: sets --cache-type-k, which a knob of \[tune\] "
                       "sets for each configuration"):
        load_tune(p)


def test_a_parameter_in_another_case_is_the_same_knob_and_the_suggestion_never_excludes_the_baseline(tmp_path):
    tune = load_tune(tune_file(tmp_path, 'drafter = ["none", "ngram-simple"], Draft_Tokens = [3, 7]',
                               more='exclude = [{ drafter = "none", Draft_Tokens = 7 }]'))
    got = arms(tune, tune.baseline, {"drafter": "ngram-simple", "Draft_Tokens": 7})
    assert got["cand"] == ["--seed", "1", "--spec-type", "ngram-simple", "--spec-draft-n-max", "7"]
    with pytest.raises(ConfigError) as err:
        load_tune(tune_file(tmp_path, 'drafter = ["none", "ngram-simple"], draft_tokens = [3, 7]',
                            more='baseline = { drafter = "none", draft_tokens = 7 }'))
    assert 'exclude = [{ drafter = "none", draft_tokens = 3 }]' in str(err.value), str(err.value)


def test_the_exclusion_the_error_proposes_is_taken(tmp_path):
    tune = load_tune(tune_file(tmp_path, 'drafter = ["none", "ngram-simple"], draft_tokens = [3, 7]',
                               more='exclude = [{ drafter = "none", draft_tokens = 7 }]'))
    assert tune.baseline == {"drafter": "none", "draft_tokens": 3}


def test_every_lever_that_serves_an_engine_names_flags_that_engine_takes():
    """The llama.cpp flags each lever serves are flags the bundled server's table knows (the table holds every
    flag of the prebuilt server, with its value type); vLLM's are spelled as vLLM's argument parser spells them."""
    llama = serve_args("llama.cpp", {"drafter": "ngram-mod", "draft_tokens": 4, "slots": 3, "batch_tokens": 512,
                                     "kv_cache_dtype": "q4_0", "prefix_cache": False})
    check_llama_flags(llama)
    vllm = serve_args("vllm", {"drafter": "ngram", "draft_tokens": 4, "slots": 3, "batch_tokens": 512,
                               "kv_cache_dtype": "fp8", "prefix_cache": False, "chunked_prefill": True})
    flags = [a for a in vllm if a.startswith("--")]
    assert flags == ["--speculative-config", "--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype",
                     "--no-enable-prefix-caching", "--enable-chunked-prefill"]


def test_dry_run_prints_every_allowed_configuration_with_its_engine_and_writes_nothing(tmp_path):
    from click.testing import CliRunner

    from leverbench.cli import cli

    res = CliRunner().invoke(cli, ["tune", str(EXAMPLES / "tune-levers.toml"), "--dry-run"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].endswith("12 allowed configuration(s) of drafter [none, ngram-simple] × draft_tokens [3, 7] "
                             "× slots [1, 2] × prefix_cache [on, off]")
    engines = [x.strip() for x in lines if x.strip().startswith("engine = ")]
    assert len(engines) == 12 and len(set(engines)) == 12
    assert engines[0] == 'engine = { kind = "embedded", args = ["--parallel", "1", "--cache-prompt"], ctx_size = 4096 }'
    assert all(tomllib.loads(e)["engine"]["kind"] == "embedded" for e in engines)
    assert "  excluded: drafter=none draft_tokens=7" in lines
    missing = CliRunner().invoke(cli, ["tune", str(EXAMPLES / "tune-levers.toml")])
    assert missing.exit_code == 2 and "--out DIR is needed" in missing.output
