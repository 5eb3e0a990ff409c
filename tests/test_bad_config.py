"""Hostile experiment files (issue 28, item 1): every number bounded, every URL, name and file checked when the
file is loaded.  Each input gets one :class:`ConfigError` naming the key, and what was given and what is
allowed; through the CLI, exit code 2 and one line on stderr, never a traceback or a hang."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.cli import cli
from leverbench.config import load, with_repeats
from leverbench.errors import ConfigError

BIG = 2**62

BASE = '''
[experiment]
name = "t"
baseline = "a"
{experiment}

[[arms]]
name = "a"
role = "baseline"
base_url = "http://127.0.0.1:1/v1"
model = "m"
{arm}

[[arms]]
name = "b"
base_url = "http://127.0.0.1:2/v1"
model = "m"
{arm_b}

[[cases]]
name = "c"
prompt = "go"
{case}

{extra}
'''


def experiment(tmp: Path, experiment: str = "", arm: str = "", arm_b: str = "", case: str = "",
               extra: str = "") -> Path:
    (tmp / "doc.md").write_text("a document")
    (tmp / "trace.jsonl").write_text('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n')
    p = tmp / "exp.toml"
    p.write_text(BASE.format(experiment=experiment, arm=arm, arm_b=arm_b, case=case, extra=extra))
    return p


def refused(p: Path, key: str, *needles: str) -> ConfigError:
    with pytest.raises(ConfigError) as ei:
        load(p)
    e = ei.value
    assert e.key == key, str(e)
    assert str(p) in str(e) and key in str(e)
    for n in needles:
        assert n in str(e), str(e)
    return e


def stage(lines: str, mode: str = "open") -> str:
    return f'[[load]]\nname = "s"\nmode = "{mode}"\n{lines}\n'


def test_the_base_experiment_loads(tmp_path):
    """What every case below changes one thing of is valid (and so is each stage shape they use)."""
    assert load(experiment(tmp_path)).spec.experiment.repeats == 3
    ok = stage("rate = 2\nrequests = 5") + stage('trace = "trace.jsonl"\nspeed = 0.5', "trace").replace('"s"', '"t"')
    exp = load(experiment(tmp_path, case="temperature = 1\ntool_latency_s = 1", extra=ok))
    assert exp.spec.load[0].rate == 2.0 and exp.spec.cases[0].temperature == 1.0  # a whole number is a number


# ------------------------------------------------------------------ 1. no coercion

@pytest.mark.parametrize("where, line, key, needle", [
    ("experiment", 'repeats = "2"', "experiment.repeats", "got '2' (a string"),
    ("experiment", "repeats = 2.0", "experiment.repeats", "got 2.0 (not a whole number)"),
    ("experiment", "repeats = true", "experiment.repeats", "got true"),
    ("experiment", 'store_text = "yes"', "experiment.store_text", "true or false"),
    ("experiment", "store_text = 1", "experiment.store_text", "true or false"),
    ("experiment", "sentinel_tokens = false", "experiment.sentinel_tokens", "got false"),
    ("experiment", 'timeouts = { connect_s = "30" }', "experiment.timeouts.connect_s", "got '30'"),
    ("case", 'temperature = "0"', "cases[0].temperature", "got '0'"),
    ("case", "max_tokens = 2.5", "cases[0].max_tokens", "got 2.5"),
    ("extra", stage("rate = true\nrequests = 5"), "load[0].rate", "got true"),
    ("extra", stage('rate = "2"\nrequests = 5'), "load[0].rate", "got '2'"),
    ("extra", stage("concurrency = 2.5\nrequests = 5", "closed"), "load[0].concurrency", "got 2.5"),
    ("extra", stage('rate = 2\nrequests = "5"'), "load[0].requests", "got '5'"),
    ("extra", "[probes]\nrepeats = \"3\"", "probes.repeats", "got '3'"),
], ids=lambda v: v if isinstance(v, str) and "\n" not in v else None)
def test_strings_and_booleans_are_not_numbers(tmp_path, where, line, key, needle):
    refused(experiment(tmp_path, **{where: line}), key, needle)


# ------------------------------------------------------------------ 2. finite

@pytest.mark.parametrize("where, line, key", [
    ("experiment", "volume_tolerance_cell = inf", "experiment.volume_tolerance_cell"),
    ("experiment", "volume_tolerance_total = nan", "experiment.volume_tolerance_total"),
    ("experiment", "drift_tolerance = inf", "experiment.drift_tolerance"),
    ("experiment", "engaged_acceptance_min = nan", "experiment.engaged_acceptance_min"),
    ("experiment", "timeouts = { connect_s = inf }", "experiment.timeouts.connect_s"),
    ("experiment", "timeouts = { first_token_s = inf }", "experiment.timeouts.first_token_s"),
    ("experiment", "timeouts = { idle_s = nan }", "experiment.timeouts.idle_s"),
    ("experiment", "timeouts = { total_s = inf }", "experiment.timeouts.total_s"),
    ("case", "temperature = inf", "cases[0].temperature"),
    ("case", "tool_latency_s = inf", "cases[0].tool_latency_s"),
    ("arm", "request = { temperature = inf }", "arms[0]"),
    ("arm", "conditions = { gpus = inf }", "arms[0]"),
    ("arm", "conditions = { gpu_hour_usd = nan }", "arms[0]"),
    ("arm", "conditions = { note = [1.0, -inf] }", "arms[0]"),
    ("extra", "[probes]\ntolerance = inf", "probes.tolerance"),
    ("extra", stage("rate = 2\nrequests = 5\nslo_ttft_s = inf"), "load[0].slo_ttft_s"),
    ("extra", stage("rate = 2\nrequests = 5\nslo_e2e_s = nan"), "load[0].slo_e2e_s"),
    ("extra", stage("rate = 2\nrequests = 5\nprefix_sharing = nan"), "load[0].prefix_sharing"),
    ("extra", stage("rate = 2\nrequests = 5\narrival = \"gamma\"\nburstiness = inf"), "load[0].burstiness"),
    ("extra", stage("rate = 2\nrequests = 5\nwarmup_s = inf"), "load[0].warmup_s"),
    ("extra", stage("rate = 2\nduration_s = inf"), "load[0].duration_s"),
    ("extra", stage("requests = 5\nramp_s = inf", "closed"), "load[0].ramp_s"),
    ("extra", stage('trace = "trace.jsonl"\nspeed = inf', "trace"), "load[0].speed"),
    ("extra", stage('trace = "trace.jsonl"\nscale_input = inf', "trace"), "load[0].scale_input"),
    ("extra", stage("rate = inf\nrequests = 5"), "load[0].rate"),
    ("extra", stage("rate = [1, nan]\nrequests = 5"), "load[0].rate"),
], ids=lambda v: v if isinstance(v, str) and "\n" not in v else None)
def test_infinity_and_nan_are_refused(tmp_path, where, line, key):
    e = refused(experiment(tmp_path, **{where: line}), key)
    assert "inf" in str(e) or "nan" in str(e)
    assert "finite" in str(e)


@pytest.mark.parametrize("line, needle", [
    ("request = { temperature = inf }", "request.temperature must be a finite number (JSON has no inf)"),
    ("request = { stop = [1.0, nan] }", "request.stop[1] must be a finite number"),
    ("request = { at = 1979-05-27T07:32:00Z }", "request.at is a datetime, which JSON cannot carry"),
    ("request = { x = " + "[" * 70 + "]" * 70 + " }", "nested deeper than 64 levels"),
])
def test_request_fields_are_sent_as_json(tmp_path, line, needle):
    refused(experiment(tmp_path, arm=line), "arms[0]", needle)


def engine_arm(tmp: Path, engine: str) -> Path:
    """The base experiment with arm b an engine the tool starts: ``engine = { ENGINE }``."""
    p = experiment(tmp)
    p.write_text(p.read_text().replace('base_url = "http://127.0.0.1:2/v1"\nmodel = "m"\n',
                                       f'engine = {{ kind = "embedded", {engine} }}\n'))
    return p


def test_an_engine_start_up_time_is_finite(tmp_path):
    refused(engine_arm(tmp_path, "startup_timeout_s = inf"), "arms[1].engine.startup_timeout_s", "got inf", "86,400")


# ------------------------------------------------------------------ 3. whole numbers in a stated range

@pytest.mark.parametrize("where, line, key, needle", [
    ("experiment", "repeats = 1001", "experiment.repeats", "from 1 to 1,000, got 1001"),
    ("experiment", f"sentinel_tokens = {BIG}", "experiment.sentinel_tokens", f"to 10,000,000 tokens, got {BIG}"),
    ("experiment", "retries = 11", "experiment.retries", "from 0 to 10, got 11"),
    ("case", "max_tokens = 100000000", "cases[0].max_tokens", "got 100000000"),
    ("case", "max_steps = 201", "cases[0].max_steps", "from 1 to 200, got 201"),
    ("extra", f"[probes]\nrepeats = {BIG}", "probes.repeats", f"got {BIG}"),
    ("extra", f"[probes]\noutput_tokens = [1, {BIG}]", "probes.output_tokens[1]", f"got {BIG}"),
    ("extra", "[probes]\ndepths = [1000000000]", "probes.depths[0]", "got 1000000000"),
    ("extra", stage(f"rate = 2\nrequests = {BIG}"), "load[0].requests", "to 10,000,000 requests"),
    ("extra", stage("concurrency = 1000000000\nrequests = 5", "closed"), "load[0].concurrency", "to 100,000"),
    ("extra", stage("concurrency = [1, 1000000000]\nrequests = 5", "closed"), "load[0].concurrency",
     "got 1000000000"),
    ("extra", stage("rate = 2\nrequests = 5\nmax_tokens = 1000000000"), "load[0].max_tokens", "got 1000000000"),
    ("extra", stage(f"rate = 2\nrequests = 5\nwarmup_requests = {BIG}"), "load[0].warmup_requests", f"got {BIG}"),
    ("extra", stage("rate = 2\nrequests = 5\nworkers = 1000000"), "load[0].workers", "got 1000000"),
    ("extra", stage("rate = 2\nrequests = 5\nmax_in_flight = 1000000000"), "load[0].max_in_flight",
     "got 1000000000"),
    ("extra", stage(f"rate = 2\nrequests = 5\nseed = {2**63}"), "load[0].seed",
     "to 9,223,372,036,854,775,807 (an int64), got 9223372036854775808"),
    ("extra", stage('trace = "trace.jsonl"\nblock_tokens = 1000000000', "trace"), "load[0].block_tokens",
     "got 1000000000"),
    ("extra", stage('trace = "trace.jsonl"\nmax_input_tokens = 1000000000', "trace"), "load[0].max_input_tokens",
     "got 1000000000"),
    ("arm", "conditions = { gpus = 1000000000000000000000000000000 }", "arms[0]", "at most 1,000,000"),
], ids=lambda v: v if isinstance(v, str) and "\n" not in v else None)
def test_whole_numbers_have_a_range(tmp_path, where, line, key, needle):
    refused(experiment(tmp_path, **{where: line}), key, needle)


def test_an_engine_context_size_has_a_range(tmp_path):
    refused(engine_arm(tmp_path, "ctx_size = 1000000000"), "arms[1].engine.ctx_size",
            "from 256 to 10,000,000 tokens, got 1000000000")
    refused(engine_arm(tmp_path, "threads = 100000"), "arms[1].engine.threads", "got 100000")


@pytest.mark.parametrize("repeats", [2000, 0, -1, BIG])
def test_repeats_from_the_command_line_have_the_files_bound(tmp_path, repeats):
    exp = load(experiment(tmp_path))
    with pytest.raises(ConfigError) as ei:
        with_repeats(exp, repeats)
    assert ei.value.key == "--repeats" and "from 1 to 1,000" in str(ei.value)


# ------------------------------------------------------------------ 4. plans that do not fit

@pytest.mark.parametrize("lines, key, needles", [
    ("rate = 1e-300\nrequests = 10", "load[0].rate", ("rate 1e-300/s × 10 requests would take 1e+301 s",
                                                      "years", "the limit is 7 days")),
    ("rate = 0.0001\nrequests = 1000", "load[0].rate", ("would take 1e+07 s", "the limit is 7 days")),
    ("rate = 1e-300\nrequests = 10\nduration_s = 60\nwarmup_requests = 5", "load[0].rate", ("would take",)),
    ("rate = 1000000\nduration_s = 100", "load[0].rate", ("plans 1e+08 requests", "10,000,000")),
    ("rate = [10, 1000000]\nduration_s = 100", "load[0].rate", ("rate 1e+06/s (stage s@1e+06rps)", "plans")),
    ("rate = 1e9\nduration_s = 10", "load[0].rate", ("got 1000000000.0", "1,000,000 requests/s")),
    ("rate = 1e300\nduration_s = 10", "load[0].rate", ("got 1e+300",)),
    ("rate = 2\nduration_s = 1e9", "load[0].duration_s", ("got 1000000000.0", "604,800 s (a week)")),
    ("rate = 2\nduration_s = 400000\nwarmup_s = 400000", "load[0].duration_s", ("warmup_s + duration_s",
                                                                                 "the limit is 7 days")),
    ("rate = 2\nrequests = 9000000\nwarmup_requests = 2000000", "load[0].requests",
     ("warmup_requests + requests = 11,000,000",)),
], ids=lambda v: v if isinstance(v, str) and "\n" not in v else None)
def test_a_stage_too_big_or_too_long_is_refused_before_it_starts(tmp_path, lines, key, needles):
    refused(experiment(tmp_path, extra=stage(lines)), key, *needles)


@pytest.mark.parametrize("lines, key, needle", [
    ('trace = "trace.jsonl"\nspeed = 1e-300', "load[0].speed", "from 0.001 to 1,000,000, got 1e-300"),
    ('trace = "trace.jsonl"\nspeed = 0', "load[0].speed", "got 0"),
    ('trace = "trace.jsonl"\nscale_input = 1e300', "load[0].scale_input", "got 1e+300"),
], ids=lambda v: v if isinstance(v, str) and "\n" not in v else None)
def test_a_trace_replay_has_bounded_speed_and_scale(tmp_path, lines, key, needle):
    refused(experiment(tmp_path, extra=stage(lines, "trace")), key, needle)


# ------------------------------------------------------------------ 5. URLs

@pytest.mark.parametrize("url, needle", [
    ("file:///x", "http:// or https://"),
    ("ftp://x", "http:// or https://"),
    ("javascript:alert(1)", "http:// or https://"),
    ("http://", "must name a host"),
    ("not a url", "white space"),
    ("http://127.0.0.1:99999/v1", "not a valid URL"),
    ("http://127.0.0.1:-1/v1", "not a valid URL"),
    ("http://127.0.0.1:ab/v1", "not a valid URL"),
    ("http://127.0.0.1:0/v1", "port from 1 to 65535"),
    ("http://[::1/v1", "not a valid URL"),
    ("http://127.0.0.1:1/v1\\r\\nX-Evil: 1", "U+000D"),
    ("http://h\\u0000/v1", "U+0000"),
])
def test_endpoint_urls_are_checked_when_loaded(tmp_path, url, needle):
    p = experiment(tmp_path)
    p.write_text(p.read_text().replace('base_url = "http://127.0.0.1:2/v1"', f'base_url = "{url}"'))
    refused(p, "arms[1].base_url", needle)


def test_metrics_url_is_checked_too(tmp_path):
    refused(experiment(tmp_path, arm='metrics_url = "ftp://x/metrics"'), "arms[0].metrics_url", "ftp://x/metrics")


def test_a_refused_url_is_shown_without_its_credentials(tmp_path):
    p = experiment(tmp_path)
    p.write_text(p.read_text().replace('base_url = "http://127.0.0.1:2/v1"',
                                       'base_url = "ftp://user:s3cret@h/v1?key=s3cret"'))
    e = refused(p, "arms[1].base_url", "http:// or https://")
    assert "s3cret" not in str(e)


# ------------------------------------------------------------------ 6. names

@pytest.mark.parametrize("name, needle", [
    ("a\\u0000b", "U+0000"),
    ("a/b", "no '/'"),
    ("..", "'..'"),
    ("x" * 300, "at most 100 characters"),
    ("\u00e9" * 101, "at most 100 characters"),
    ("\u4e2d" * 90, "270 bytes"),
    ("a\\nb", "U+000A"),
])
def test_the_experiment_name_must_make_a_directory_name(tmp_path, name, needle):
    p = experiment(tmp_path)
    p.write_text(p.read_text().replace('name = "t"', f'name = "{name}"'))
    refused(p, "experiment.name", needle)


@pytest.mark.parametrize("old, new, key", [
    ('name = "b"', 'name = "b\\u0000"', "arms[1].name"),
    ('name = "c"', 'name = "c\\u0007"', "cases[0].name"),
    ('name = "c"', 'name = "c\\u2028d"', "cases[0].name"),
])
def test_arm_and_case_names_hold_no_control_characters(tmp_path, old, new, key):
    p = experiment(tmp_path)
    p.write_text(p.read_text().replace(old, new))
    refused(p, key, "control characters")


def test_stage_and_variant_names_hold_no_control_characters(tmp_path):
    refused(experiment(tmp_path, extra=stage("rate = 2\nrequests = 5").replace('"s"', '"s\\u0000"')), "load[0].name",
            "U+0000")
    refused(experiment(tmp_path, case='[[cases.variants]]\nname = "v\\u001b"\nappend = "short"'),
            "cases[0].variants[0].name", "U+001B")


def test_file_paths_and_engine_arguments_hold_no_nul(tmp_path):
    """Each would end in ``ValueError: embedded null byte`` where the path is opened or the engine started."""
    refused(experiment(tmp_path, case='documents = ["doc\\u0000.md"]'), "cases[0].documents[0]", "U+0000")
    refused(experiment(tmp_path, extra=stage('trace = "t\\u0000.jsonl"', "trace")), "load[0].trace", "U+0000")
    refused(engine_arm(tmp_path, 'args = ["--alias", "x\\u0000"]'), "arms[1].engine.args[1]", "U+0000")
    refused(engine_arm(tmp_path, 'binary = "llama\\u0000server"'), "arms[1].engine.binary", "U+0000")


# ------------------------------------------------------------------ 7. nested JSON, devices, FIFOs, huge files

def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [65, 10_000, 200_000])
@pytest.mark.parametrize("key", ["tools", "tool_script"])
def test_deeply_nested_tool_json_is_refused(tmp_path, key, depth):
    inner = _nested(depth)
    (tmp_path / "f.json").write_text(f'[{{"x": {inner}}}]' if key == "tools" else f'{{"t": {inner}}}')
    refused(experiment(tmp_path, case=f'{key} = "f.json"'), f"cases[0].{key}", "nested deeper than 64")


def test_tool_json_nested_to_the_limit_loads(tmp_path):
    (tmp_path / "f.json").write_text('[{"x": ' + _nested(62) + "}]")
    assert load(experiment(tmp_path, case='tools = "f.json"')).tools["c"]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("line, key", [
    ('documents = ["{dev}"]', "cases[0].documents[0]"),
    ('system_file = "{dev}"', "cases[0].system_file"),
    ('tools = "{dev}"', "cases[0].tools"),
    ('tool_script = "{dev}"', "cases[0].tool_script"),
])
def test_a_device_is_not_read(tmp_path, device, line, key):
    if not os.path.exists(device):
        pytest.skip(f"no {device} here")
    refused(experiment(tmp_path, case=line.format(dev=device)), key, device, "not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_not_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe")  # opening it would wait for a writer forever
    refused(experiment(tmp_path, case='documents = ["pipe"]'), "cases[0].documents[0]", "not a regular file")
    refused(experiment(tmp_path, extra=stage('trace = "pipe"', "trace")), "load[0].trace", "not a regular file")


def test_a_huge_document_is_not_read(tmp_path):
    with open(tmp_path / "big.md", "wb") as f:
        f.truncate(65 * 2**20)  # sparse: no disk is used
    refused(experiment(tmp_path, case='documents = ["big.md"]'), "cases[0].documents[0]", "big.md", "64 MiB")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_the_experiment_file_itself_from_a_device(tmp_path):
    with pytest.raises(ConfigError, match="not a regular file"):
        load("/dev/zero")


def test_a_toml_file_nested_too_deep(tmp_path):
    p = tmp_path / "exp.toml"
    p.write_text("x = " + _nested(100_000))
    with pytest.raises(ConfigError, match="nested too deep"):
        load(p)


# ------------------------------------------------------------------ 8. one baseline

def test_only_the_experiment_baseline_has_role_baseline(tmp_path):
    refused(experiment(tmp_path, arm_b='role = "baseline"'), "arms[1].role", "only the experiment's baseline")


# ------------------------------------------------------------------ through the command line

@pytest.mark.parametrize("edit, args", [
    ({"experiment": "volume_tolerance_cell = inf"}, []),
    ({"experiment": "timeouts = { connect_s = inf }"}, []),
    ({"case": "temperature = inf"}, []),
    ({"arm_b": 'role = "baseline"'}, []),
    ({"experiment": 'repeats = "2"'}, []),
    ({"extra": stage("rate = 1e-300\nrequests = 10")}, []),
    ({"extra": stage("concurrency = 1000000000\nrequests = 5", "closed")}, []),
    ({}, ["--repeats", "2000"]),
    ({"case": 'tools = "deep.json"'}, []),
    ({"case": 'documents = ["/dev/zero"]'}, []),
    ({"name": "x" * 300}, []),
    ({"name": "a\\u0000b"}, []),
    ({"url": "http://127.0.0.1:99999/v1"}, []),
    ({"url": "http://127.0.0.1:1/v1\\r\\nX-Evil: 1"}, []),
    ({"url": "javascript:alert(1)"}, []),
], ids=lambda v: json.dumps(v)[:40] if isinstance(v, dict) else None)
def test_run_gives_one_error_line_and_exit_2(tmp_path, monkeypatch, edit, args):
    monkeypatch.chdir(tmp_path)  # a run without --out would go to runs/NAME-... here
    edit = dict(edit)
    name, url = edit.pop("name", None), edit.pop("url", None)
    p = experiment(tmp_path, **edit)
    (tmp_path / "deep.json").write_text(_nested(10_000))
    text = p.read_text()
    if name is not None:
        text = text.replace('name = "t"', f'name = "{name}"')
    if url is not None:
        text = text.replace('base_url = "http://127.0.0.1:2/v1"', f'base_url = "{url}"')
    p.write_text(text)
    res = CliRunner().invoke(cli, ["run", str(p), *args, *([] if name else ["--out", str(tmp_path / "run")])])
    assert res.exit_code == 2, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"leverbench: error: {p}: "), res.stderr
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit)
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()  # refused before anything started


@pytest.mark.parametrize("host", ["a" * 64, "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 63 + ".com"],
                         ids=["label-64", "name-over-253"])
def test_a_host_that_is_no_dns_name_is_refused_when_loaded(tmp_path, host):
    """A 300-character host (the long fuzz run): the client's IDNA encoding raised UnicodeError (exit 70)."""
    p = experiment(tmp_path)
    p.write_text(p.read_text().replace("http://127.0.0.1:2/v1", f"http://{host}/v1"))
    refused(p, "arms[1].base_url", "host")
