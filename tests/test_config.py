"""Experiment-file validation: every error names the file and the key; exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.cli import cli
from leverbench.config import load
from leverbench.errors import ConfigError

GOOD = '''
[experiment]
name = "t"
baseline = "a"

[[arms]]
name = "a"
role = "baseline"
base_url = "http://127.0.0.1:1"
model = "m"

[[arms]]
name = "b"
engine = { kind = "embedded", args = ["--spec-type", "ngram-mod"] }
request = { cache_prompt = false }
conditions = { prefix_cache = false }

[[cases]]
name = "c"
documents = ["doc.md"]
prompt = "go"
[[cases.steps]]
prompt = "again"
'''


def write(tmp: Path, text: str) -> Path:
    (tmp / "doc.md").write_text("a document")
    p = tmp / "exp.toml"
    p.write_text(text)
    return p


def error(tmp: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as ei:
        load(write(tmp, text))
    assert str(tmp / "exp.toml") in str(ei.value)
    return ei.value


def test_good_file_loads_with_defaults(tmp_path):
    exp = load(write(tmp_path, GOOD))
    e = exp.spec.experiment
    assert (e.repeats, e.order, e.volume_tolerance_cell, e.volume_tolerance_total) == (3, "interleaved", 0.20, 0.05)
    assert exp.spec.cases[0].temperature == 0.0 and len(exp.spec.cases[0].steps) == 1
    assert exp.texts["doc.md"] == "a document"
    assert exp.spec.arms[1].engine.args == ["--spec-type", "ngram-mod"]


def test_unknown_key_suggests_nearest(tmp_path):
    e = error(tmp_path, GOOD.replace('baseline = "a"', 'baseline = "a"\nrepeets = 2'))
    assert e.key == "experiment.repeets" and "did you mean 'repeats'" in str(e)


def test_unknown_key_in_arm(tmp_path):
    e = error(tmp_path, GOOD.replace('model = "m"', 'model = "m"\nbase_ulr = "x"'))
    assert e.key == "arms[0].base_ulr" and "'base_url'" in str(e)


def test_missing_required_key(tmp_path):
    e = error(tmp_path, GOOD.replace('name = "t"\n', ""))
    assert e.key == "experiment.name" and "missing" in str(e)


def test_wrong_type_and_value(tmp_path):
    e = error(tmp_path, GOOD.replace('baseline = "a"', 'baseline = "a"\nrepeats = "three"'))
    assert e.key == "experiment.repeats"
    e = error(tmp_path, GOOD.replace('baseline = "a"', 'baseline = "a"\norder = "random"'))
    assert e.key == "experiment.order" and "interleaved" in str(e)


def test_baseline_naming_no_arm(tmp_path):
    e = error(tmp_path, GOOD.replace('baseline = "a"', 'baseline = "A"'))
    assert e.key == "experiment.baseline" and "names no arm" in str(e) and "'a'" in str(e)


def test_duplicate_names(tmp_path):
    e = error(tmp_path, GOOD.replace('name = "b"', 'name = "a"'))
    assert e.key == "arms[1].name" and "duplicate" in str(e)


def test_missing_document(tmp_path):
    e = error(tmp_path, GOOD.replace('"doc.md"', '"nope.md"'))
    assert e.key == "cases[0].documents[0]" and "nope.md" in str(e)


def test_malformed_toml_gives_line(tmp_path):
    e = error(tmp_path, GOOD.replace('prompt = "go"', 'prompt = "go'))
    assert "malformed TOML" in str(e) and "line" in str(e)


def test_arm_needs_endpoint_or_engine(tmp_path):
    e = error(tmp_path, GOOD.replace('base_url = "http://127.0.0.1:1"\nmodel = "m"\n', ""))
    assert e.key == "arms[0]" and "base_url" in str(e)
    e = error(tmp_path, GOOD.replace('model = "m"\n', ""))
    assert "needs model" in str(e)


def test_gpus_and_their_price_are_numbers(tmp_path):
    """Costs and an adaptive run's budget are priced with them: a word or a zero would crash or make turns free."""
    for bad in ('gpus = "H100"', "gpus = 0", "gpus = -1", 'gpu_hour_usd = "cheap"', "gpu_hour_usd = -2.0",
                "gpus = true"):
        e = error(tmp_path, GOOD.replace("conditions = { prefix_cache = false }",
                                         f"conditions = {{ prefix_cache = false, {bad} }}"))
        assert e.key == "arms[1]" and "must be a" in str(e), bad
    ok = load(write(tmp_path, GOOD.replace("conditions = { prefix_cache = false }",
                                            "conditions = { prefix_cache = false, gpus = 2, gpu_hour_usd = 0 }")))
    assert ok.spec.arms[1].conditions["gpus"] == 2


def test_request_may_not_override_messages(tmp_path):
    e = error(tmp_path, GOOD.replace("request = { cache_prompt = false }", 'request = { stream = false }'))
    assert e.key == "arms[1]" and "stream" in str(e)


def test_baseline_role(tmp_path):
    e = error(tmp_path, GOOD.replace('role = "baseline"', 'role = "control"'))
    assert e.key == "arms[0].role"


def test_probes_validated(tmp_path):
    e = error(tmp_path, GOOD + '\n[probes]\noutput_tokens = [128]\n')
    assert e.key == "probes.output_tokens"
    e = error(tmp_path, GOOD + '\n[probes]\ncase = "zzz"\n')
    assert e.key == "probes.case"


def test_cli_exit_code_2_and_message(tmp_path):
    p = write(tmp_path, GOOD.replace('baseline = "a"', 'baseline = "zz"'))
    res = CliRunner().invoke(cli, ["run", str(p), "--out", str(tmp_path / "r")])
    assert res.exit_code == 2
    assert "experiment.baseline" in res.output and str(p) in res.output
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "missing.toml")])
    assert res.exit_code == 2 and "file not found" in res.output


def test_missing_api_key_env_is_bad_input(tmp_path, monkeypatch):
    monkeypatch.delenv("LB_TEST_KEY", raising=False)
    p = write(tmp_path, GOOD.replace('model = "m"', 'model = "m"\napi_key_env = "LB_TEST_KEY"'))
    res = CliRunner().invoke(cli, ["run", str(p), "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "LB_TEST_KEY is not set" in res.output


def test_bundled_demo_is_valid():
    exp = load(Path(__file__).parents[1] / "examples" / "agent-turns.toml")
    assert [a.name for a in exp.spec.arms] == ["current", "cache", "cache+drafter"]
    assert len([c for c in exp.spec.cases if not c.variant_of]) == 4 and any(c.steps for c in exp.spec.cases)
    assert [c.name for c in exp.spec.cases if c.variant_of] == ["design audit [one sentence]"]
    assert all(c.temperature == 0.0 for c in exp.spec.cases)


def test_one_definition_of_the_timeouts(tmp_path):
    """The client's default time limits are the experiment file's (they were 600 s against 1800 s total)."""
    from leverbench.runner.client import Timeouts

    exp = load(write(tmp_path, GOOD))
    client = Timeouts()
    assert {k: getattr(client, k) for k in ("connect_s", "first_token_s", "idle_s", "total_s")} == \
        exp.spec.experiment.timeouts.model_dump() == {"connect_s": 30.0, "first_token_s": 600.0, "idle_s": 120.0,
                                                      "total_s": 1800.0}
    assert Timeouts(connect_s=0.3, first_token_s=5, idle_s=5, total_s=10).total_s == 10
    with pytest.raises(ValueError, match="frozen"):  # one instance is every call's default
        client.total_s = 10
