"""A summary.json read back (``analyze --rates``) is checked against leverbench.summary/1 first."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.cli import cli
from leverbench.errors import BadInput
from leverbench.pipeline.summary_file import check_summary, read_summary
from leverbench.pipeline.traffic_files import analyze_file

GOLDEN = Path(__file__).parent / "golden"
AZURE = Path(__file__).parent / "data" / "traces" / "AzureLLMInferenceTrace_code.csv"


@pytest.mark.parametrize("name", ["demo1", "demo2", "demo3", "handmade", "sim"])
def test_the_golden_summaries_pass(name):
    path = GOLDEN / f"{name}.summary.json"
    assert read_summary(path) == json.loads(path.read_text())


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    """The same run twice: with its ledger, and as its summary.json alone (as written by ``report``)."""
    full = tmp_path / "full"
    full.mkdir()
    shutil.copy(GOLDEN / "handmade.ledger.jsonl", full / "ledger.jsonl")
    assert CliRunner().invoke(cli, ["report", str(full), "--format", "json"]).exit_code == 0
    only = tmp_path / "only"
    only.mkdir()
    shutil.copy(full / "summary.json", only / "summary.json")
    return full, only


def _rounded(x):
    """*x* with every float to 10 significant digits: a sum's last bits depend on the order it is added in (about
    1 run in 20 differed in the 15th digit)."""
    if isinstance(x, float):
        return float(f"{x:.10g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def test_rates_come_from_a_summary_when_the_run_has_no_ledger(tmp_path):
    full, only = _runs(tmp_path)
    want = json.dumps(_rounded(analyze_file(AZURE, rates_dir=full))).replace(str(full), "RUN")
    assert "run RUN, baseline arm 'base'" in want
    for source in (only / "summary.json", only):
        assert json.dumps(_rounded(analyze_file(AZURE, rates_dir=source))).replace(str(source), "RUN") == want


def _broken(tmp_path: Path, change) -> Path:
    data = json.loads((GOLDEN / "handmade.summary.json").read_text())
    change(data)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.pop("rates"), "rates: Field required"),
    (lambda d: d["rates"][1].update(decode_tps="fast"), "rates[1].decode_tps: Input should be a valid number"),
    (lambda d: d["arms"][0].pop("name"), "arms[0].name: Field required"),
    (lambda d: d.update(baseline="nobody"), "baseline: 'nobody' is none of the arms ('base', 'cache'"),
    (lambda d: d.update(schema="leverbench.summary/2"),
     "schema: summary schema version 2 is newer than this leverbench"),
    (lambda d: d.update(schema="other.summary/1"), "schema: not a leverbench summary schema: 'other.summary/1'"),
    (lambda d: d["drift"][0].update(drifted="maybe"), "drift[0].drifted: Input should be a valid boolean"),
    (lambda d: d["warning_items"][0].pop("kind"), "warning_items[0].kind: Field required"),
])
def test_a_bad_summary_is_refused_naming_the_file_the_place_and_the_problem(tmp_path, change, message):
    path = _broken(tmp_path, change)
    with pytest.raises(BadInput) as exc:
        read_summary(path)
    assert str(exc.value).startswith(f"{path}: not a valid leverbench.summary/1: ") and message in str(exc.value)
    res = CliRunner().invoke(cli, ["analyze", str(AZURE), "--rates", str(path)])
    assert res.exit_code == 2 and f"leverbench: error: {path}: not a valid leverbench.summary/1" in res.output


def test_a_summary_that_is_no_json_object_is_refused(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("[1, 2]")
    with pytest.raises(BadInput, match="not a leverbench summary"):
        read_summary(path)
    path.write_text("{cut")
    with pytest.raises(BadInput, match=r"summary.json: not JSON"):
        read_summary(path)
    with pytest.raises(BadInput, match="no summary here"):
        read_summary(tmp_path / "nothing")
    with pytest.raises(BadInput, match="not a leverbench summary"):
        check_summary(None, "x")


SIM = GOLDEN / "sim.summary.json"
MOONCAKE = Path(__file__).parent / "data" / "traces" / "mooncake_conversation_trace.jsonl"


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["arms"][0]["conditions"].update(gpus="two"), "arms[0].conditions.gpus: should be a number"),
    (lambda d: d["arms"][0]["conditions"].update(gpu_hour_usd=[1]),
     "arms[0].conditions.gpu_hour_usd: should be a number"),
    (lambda d: d["arms"][0]["knobs"].update(slots="many"), "arms[0].knobs.slots: should be a number"),
    (lambda d: d["rates"][0].update(decode_tps=-5), "rates[0].decode_tps: Input should be greater than or equal"),
    (lambda d: d.update(rate_models="x"), "rate_models: Input should be a valid list"),
    (lambda d: d["rate_models"][0]["prefill"].update(b_s_per_token="x"),
     "rate_models[0].prefill.b_s_per_token: Input should be a valid number"),
    (lambda d: d["rate_models"][0].update(batch={"concurrency": "x"}), "rate_models[0].batch.concurrency"),
    (lambda d: d.update(engaged=[{"cache_used": True}]), "engaged[0].arm: Field required"),
], ids=["gpus", "usd", "slots", "negative-rate", "rate-models", "term", "batch", "engaged"])
def test_what_analyze_and_whatif_read_of_a_summary_is_checked(tmp_path, change, message):
    """The parts of a summary ``analyze --rates`` (the arms' GPUs and price, the rates) and ``whatif --rates``
    (the rate models, engaged, slots) use are checked too: a mangled one is bad input naming the place, for
    both commands, not a traceback."""
    data = json.loads(SIM.read_text())
    change(data)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BadInput) as exc:
        read_summary(path)
    assert message in str(exc.value)
    for command in ("analyze", "whatif"):
        res = CliRunner().invoke(cli, [command, str(MOONCAKE), "--rates", str(path), "--json"])
        assert res.exit_code == 2 and f"leverbench: error: {path}: not a valid leverbench.summary/1" in res.output, \
            (command, res.output)


def test_a_summary_an_earlier_leverbench_wrote_still_reads(tmp_path):
    """summary.json written at 5504c9b (2026-11-30, the same schema version): its rows carry keys this leverbench
    no longer writes and sections the readers do not use; ``analyze --rates`` and ``whatif --rates`` read it
    (issue 24's review: the reader refused it, naming a projection row it never reads), while the whole-file
    check (``schema summary --check``) still says where it departs."""
    old = Path(__file__).parent / "data" / "summaries" / "handmade-5504c9b.summary.json"
    summary = read_summary(old)
    assert {r["arm"] for r in summary["rates"]} and summary["baseline"] == "base"
    trace = Path(__file__).parent / "data" / "traces" / "AzureLLMInferenceTrace_code.csv"
    res = CliRunner().invoke(cli, ["analyze", str(trace), "--rates", str(old)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["schema", "summary", "--check", str(old)])
    assert res.exit_code == 2 and "Field required" in res.output, res.output
