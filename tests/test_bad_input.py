"""Bad input gets a clear error and exit code 2; property-based tests on the config loader and ledger reader."""

from __future__ import annotations

import json
import string
import tomllib
from pathlib import Path

import ledgers
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leverbench.cli import cli
from leverbench.config import load
from leverbench.errors import ConfigError, LedgerError
from leverbench.ledger.reader import read_ledger
from leverbench.ledger.records import LEDGER_SCHEMA
from leverbench.schema.warning_kinds import WarningKind as W

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# ----------------------------------------------------------------- config loader

_keys = st.sampled_from(["name", "repeats", "order", "baseline", "role", "base_url", "model", "engine", "kind",
                         "args", "prompt", "documents", "max_tokens", "steps", "probes", "output_tokens", "cases",
                         "arms", "experiment", "request", "conditions", "temperature", "timeouts", "idle_s", "x"])
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(-1, 1e4, allow_nan=False),
                     st.text(string.printable, max_size=12))
_values = st.recursive(_scalars, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                         st.dictionaries(_keys, kids, max_size=4)), max_leaves=12)


def _toml_value(v) -> str:
    if v is None:
        return '""'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


@SETTINGS
@given(doc=st.dictionaries(_keys, _values, max_size=6))
def test_config_loader_raises_only_config_errors_on_structures(tmp_path, doc):
    text = "\n".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in doc.items())
    p = tmp_path / "exp.toml"
    p.write_text(text)
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        pass
    try:
        load(p)
    except ConfigError as e:
        assert str(p) in str(e)


@SETTINGS
@given(text=st.text(max_size=300))
def test_config_loader_raises_only_config_errors_on_text(tmp_path, text):
    p = tmp_path / "exp.toml"
    p.write_text(text)
    with pytest.raises(ConfigError):
        load(p)  # no random text is a complete experiment


@SETTINGS
@given(data=st.binary(max_size=200))
def test_config_loader_on_bytes(tmp_path, data):
    p = tmp_path / "exp.toml"
    p.write_bytes(data)
    with pytest.raises(ConfigError):
        load(p)


# ----------------------------------------------------------------- ledger reader

# a valid header (its schema: an experiment, its baseline one of the arms); every text the records below may
# hold is an arm, so that a record's arm is known or not a text
_ARMS = ["call", "turn", "run", "nope"]
HEADER = {"kind": "run", "schema": LEDGER_SCHEMA, "arms": dict.fromkeys(_ARMS, {}),
          "config": {"experiment": {"name": "fuzz", "baseline": "call"}, "arms": [{"name": a} for a in _ARMS]}}
_KEEP = len(json.dumps(HEADER)) + 10  # a cut leaves the header whole


@SETTINGS
@given(data=st.binary(max_size=400))
def test_ledger_reader_on_bytes(tmp_path, data):
    p = tmp_path / "ledger.jsonl"
    p.write_bytes(data)
    try:
        read_ledger(p)
    except LedgerError:
        pass


_records = st.dictionaries(st.sampled_from(["kind", "arm", "case", "x"]),
                           st.one_of(st.sampled_from(["call", "turn", "run", "nope"]), st.integers(), st.none()),
                           max_size=4)


@SETTINGS
@given(lines=st.lists(st.one_of(_records.map(json.dumps), st.text(max_size=30)), max_size=8), cut=st.integers(0, 50))
def test_ledger_reader_on_lines_after_a_valid_header(tmp_path, lines, cut):
    text = json.dumps(HEADER) + "\n" + "\n".join(lines)
    p = tmp_path / "ledger.jsonl"
    p.write_text(text[: len(text) - cut] if cut < len(text) - _KEEP else text)
    try:
        led = read_ledger(p)
        assert all(isinstance(r, dict) for r in led.records)
    except LedgerError as e:
        assert "line" in str(e) or "ledger" in str(e)


@SETTINGS
@given(lines=st.lists(st.one_of(_records.map(json.dumps), st.text(max_size=30)), max_size=8), cut=st.integers(0, 50))
def test_salvage_reads_every_record_and_names_every_other_line(tmp_path, lines, cut):
    """With salvage, nothing after a valid header stops the reading: each non-blank line is a record
    or named in exactly one warning."""
    text = json.dumps(HEADER) + "\n" + "\n".join(lines)
    text = text[: len(text) - cut] if cut < len(text) - _KEEP else text
    p = tmp_path / "ledger.jsonl"
    p.write_text(text)
    led = read_ledger(p, salvage=True)
    assert all(isinstance(r, dict) for r in led.records)
    # blank: ASCII white space only, as the reader strips bytes (str.strip would also take e.g. "\x1f")
    assert len(led.records) + len(led.warnings) == sum(1 for x in text.split("\n")[1:] if x.encode().strip())


def test_newer_schema_says_what_to_do(tmp_path):
    p = tmp_path / "ledger.jsonl"
    p.write_text(json.dumps({**HEADER, "schema": "leverbench.ledger/99"}) + "\n")
    with pytest.raises(LedgerError, match="newer than this leverbench understands.*upgrade"):
        read_ledger(p)


def test_foreign_and_unreadable_ledgers(tmp_path):
    p = tmp_path / "ledger.jsonl"
    p.write_text('{"some": "other tool"}\n')
    with pytest.raises(LedgerError, match="not a leverbench run header"):
        read_ledger(p)
    p.write_text(json.dumps({**HEADER, "schema": "otherbench.ledger/1"}) + "\n")
    with pytest.raises(LedgerError, match="foreign ledger schema"):
        read_ledger(p)
    p.write_bytes(b"\xff\xfe garbage")
    with pytest.raises(LedgerError, match="not UTF-8"):
        read_ledger(p)
    with pytest.raises(LedgerError, match="no ledger here"):
        read_ledger(tmp_path / "nowhere")


def _damaged_run(tmp_path: Path) -> Path:
    """A run of two arms × 3 repeats whose ledger has base's repeat-1 turn record (line 7) cut short
    in the middle of the file, with nothing resumed after it: damage, not a crash."""
    head = ledgers.header({"base": {"prefix_cache": False}, "fast": {"prefix_cache": True}}, ["c"])
    recs = []
    for r in range(3):
        recs += ledgers.turn("base", "c", r, 2.0 + r, 10, prompt=1000)
        recs += ledgers.turn("fast", "c", r, 1.0 + r, 10, prompt=1000)
    run = ledgers.write(tmp_path / "run", head, recs)
    path = run / "ledger.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    assert json.loads(lines[6])["kind"] == "turn" and json.loads(lines[6])["repeat"] == 1  # line 7
    lines[6] = lines[6][:50] + "\n"
    path.write_text("".join(lines))
    return run


@pytest.mark.parametrize("command", [
    ["report", "{run}", "--format", "json", "--no-write"],
    ["replay", "{run}", "--case", "c", "--out", "{tmp}/replay.html"],
    ["project", "{run}", "--input-tokens", "1000", "--output-tokens", "10", "--json"],
    ["analyze", "{run}/ledger.jsonl", "--prefill-tps", "1000", "--decode-tps", "50", "--json"],
], ids=lambda c: c[0])
def test_a_corrupt_line_in_the_middle_stops_every_command_until_salvage(tmp_path, command):
    run = _damaged_run(tmp_path)
    args = [a.format(run=run, tmp=tmp_path) for a in command]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2, res.output
    assert f"{run / 'ledger.jsonl'}: line 7 is not valid JSON" in res.output and "--salvage" in res.output
    res = CliRunner().invoke(cli, [*args, "--salvage"])
    assert res.exit_code == 0, res.output


def test_salvage_reads_past_the_corrupt_line_and_says_so(tmp_path):
    run = _damaged_run(tmp_path)
    with pytest.raises(LedgerError, match=r"line 7 is not valid JSON.*--salvage") as exc:
        read_ledger(run)
    assert exc.value.exit_code == 2
    res = CliRunner().invoke(cli, ["report", str(run), "--format", "json", "--no-write", "--salvage"])
    s = json.loads(res.output)
    cells = {c["arm"]: c for c in s["cells"]}
    # base lost its repeat-1 turn record: its call is an orphan, its cell has repeats 0 and 2 (2.0 s, 4.0 s)
    assert (cells["base"]["n"], cells["base"]["times_s"]) == (2, [2.0, 4.0])
    assert (cells["fast"]["n"], cells["fast"]["times_s"]) == (3, [1.0, 2.0, 3.0])
    # the wording matters here: it names the file and the line
    assert [(w["kind"], w["text"]) for w in s["warning_items"] if w["kind"] == W.LEDGER_REPAIR] == \
        [(W.LEDGER_REPAIR, f"{run / 'ledger.jsonl'}: line 7 is not valid JSON; skipped (--salvage)")]


def test_report_on_a_bad_ledger_exits_2(tmp_path):
    (tmp_path / "ledger.jsonl").write_text("not json at all\n")
    res = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "line 1" in res.output


def test_analyze_out_to_an_unwritable_path_is_a_clean_error(tmp_path):
    """``analyze --out`` into a folder that does not exist: one error line naming the file, no traceback
    (as ``replay --out`` does)."""
    traffic = tmp_path / "t.csv"
    traffic.write_text("input,output\n100,10\n200,20\n")
    out = tmp_path / "no-such-dir" / "a.html"
    res = CliRunner().invoke(cli, ["analyze", str(traffic), "--columns", "input=input,output=output",
                                   "--prefill-tps", "1000", "--decode-tps", "50", "--format", "html",
                                   "--out", str(out)])
    assert res.exit_code == 1, res.output
    assert not isinstance(res.exception, OSError) and f"cannot write {out}" in res.output


def test_sim_on_a_port_it_cannot_bind_is_a_clean_error():
    """``sim --port`` out of range (or in use): one error line naming the port, exit code 2, no traceback."""
    res = CliRunner().invoke(cli, ["sim", "--port", "-5"])
    assert res.exit_code == 2, res.output
    assert not isinstance(res.exception, (OSError, OverflowError)) and "--port" in res.output
