"""A ledger is read through its schema (issue 28): a header or record of the wrong shape is one clear error
naming the file, the line and the field (exit 2) from every command that reads a ledger, never a traceback
deep in the analysis; ``--salvage`` skips such a record, and the report counts it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner

from leverbench.cli import cli
from leverbench.errors import LedgerError
from leverbench.ledger import reader
from leverbench.ledger.reader import read_ledger
from leverbench.ledger.records import MAX_COUNT
from leverbench.ledger.writer import LedgerWriter
from leverbench.schema.warning_kinds import WarningKind as W

GOLDEN = Path(__file__).parent / "golden"
BASE = GOLDEN / "demo1.ledger.jsonl"  # calls, turns, probes, sentinels, metrics, warm-ups of 3 arms
MOONCAKE = Path(__file__).parent / "data" / "traces" / "mooncake_conversation_trace.jsonl"

Change = Callable[[dict[str, Any]], Any]


def _records() -> list[dict[str, Any]]:
    return [json.loads(x) for x in BASE.read_text().splitlines() if x.strip()]


def _at(kind: str, n: int = 0) -> Callable[[list[dict[str, Any]]], int]:
    """The index of the *n*-th record of *kind* (the header is index 0, line 1)."""
    return lambda recs: [i for i, r in enumerate(recs) if r["kind"] == kind][n]


def _arm(head: dict[str, Any]) -> dict[str, Any]:
    return next(iter(head["arms"].values()))


# id -> (which record, the change, the field the error names)
CASES: dict[str, tuple[Callable[[list[dict[str, Any]]], int], Change, str]] = {
    "latency-string": (_at("call"), lambda r: r.update(latency_s="1.5"), "latency_s"),
    "latency-dict": (_at("call"), lambda r: r.update(latency_s={"s": 1.5}), "latency_s"),
    "latency-list": (_at("call"), lambda r: r.update(latency_s=[1.5]), "latency_s"),
    "ttft-string": (_at("call"), lambda r: r.update(ttft_s="0.1"), "ttft_s"),
    "ttft-dict": (_at("call"), lambda r: r.update(ttft_s={}), "ttft_s"),
    "ttft-list": (_at("call"), lambda r: r.update(ttft_s=[0.1]), "ttft_s"),
    "probe-latency-string": (_at("probe"), lambda r: r.update(latency_s="1.0"), "latency_s"),
    "chunk_t-strings": (_at("probe"), lambda r: r.update(chunk_t=["a", "b"]), "chunk_t[0]"),
    "chunk_t-nulls": (_at("probe"), lambda r: r.update(chunk_t=[None, None]), "chunk_t[0]"),
    "completion-1e308": (_at("call"), lambda r: r.update(completion_tokens=1e308), "completion_tokens"),
    "completion-past-bound": (_at("call"), lambda r: r.update(completion_tokens=MAX_COUNT + 1), "completion_tokens"),
    "negative-latency": (_at("call"), lambda r: r.update(latency_s=-1.0), "latency_s"),
    "negative-turn": (_at("turn"), lambda r: r.update(turn_s=-2.0), "turn_s"),
    "cached-over-prompt": (_at("call"), lambda r: r.update(cached_tokens=r["prompt_tokens"] + 1), "cached_tokens"),
    "arm-list": (_at("call"), lambda r: r.update(arm=["x"]), "arm"),
    "arm-unknown": (_at("call"), lambda r: r.update(arm="ghost"), "arm"),
    "turn-arm-unknown": (_at("turn"), lambda r: r.update(arm="ghost"), "arm"),
    "no-arm": (_at("probe"), lambda r: r.pop("arm"), "arm"),
    "call-no-arm": (_at("call"), lambda r: r.pop("arm"), "arm"),
    "no-t_send": (_at("probe"), lambda r: r.pop("t_send"), "t_send"),
    "call-no-t_send": (_at("call"), lambda r: r.pop("t_send"), "t_send"),
    "metrics-no-when": (_at("metrics"), lambda r: r.pop("when"), "when"),
    "hash-number": (_at("call"), lambda r: r.update(output_sha256=5), "output_sha256"),
    "error-text": (_at("call"), lambda r: r.update(error="boom"), "error"),
    "timings-text": (_at("call"), lambda r: r.update(timings={"prompt_ms": "1.5"}), "timings.prompt_ms"),
    "baseline-no-arm": (_at("run"), lambda h: h["config"]["experiment"].update(baseline="zzz"),
                        "config.experiment.baseline"),
    "config-list": (_at("run"), lambda h: h.update(config=[]), "config"),
    "no-experiment": (_at("run"), lambda h: h["config"].pop("experiment"), "config.experiment"),
    "arms-list": (_at("run"), lambda h: h.update(arms=[]), "arms"),
    "config-arms-dict": (_at("run"), lambda h: h["config"].update(arms={}), "config.arms"),
    "cases-string": (_at("run"), lambda h: h["config"].update(cases="x"), "config.cases"),
    "conditions-list": (_at("run"), lambda h: _arm(h).update(conditions=[1]), "conditions"),
    "knobs-list": (_at("run"), lambda h: _arm(h).update(discovered={"knobs": [1]}), "discovered.knobs"),
    "adaptive-string": (_at("run"), lambda h: h["config"]["experiment"].update(adaptive="x"),
                        "config.experiment.adaptive"),
    "repeats-x": (_at("run"), lambda h: h["config"]["experiment"].update(repeats="x"), "config.experiment.repeats"),
    "gpu_hour_usd-string": (_at("run"), lambda h: _arm(h)["conditions"].update(gpu_hour_usd="5"),
                            "conditions.gpu_hour_usd"),
    # issue 42, item 7: what the analysis compares or computes with, null or of the wrong type
    "drift_tolerance-null": (_at("run"), lambda h: h["config"]["experiment"].update(drift_tolerance=None),
                             "config.experiment.drift_tolerance"),
    "probes-tolerance-null": (_at("run"), lambda h: h["config"]["probes"].update(tolerance=None),
                              "config.probes.tolerance"),
    "latency-null": (_at("call"), lambda r: r.update(latency_s=None), "latency_s"),
    "latency-missing": (_at("call"), lambda r: r.pop("latency_s"), "latency_s"),
    "knob-slots-string": (_at("run"), lambda h: _arm(h).setdefault("discovered", {}).setdefault("knobs", {})
                          .update(slots="x"), "discovered.knobs.slots"),
    "conditions-slots-string": (_at("run"), lambda h: _arm(h)["conditions"].update(slots="x"), "conditions.slots"),
}


def _write(tmp_path: Path, recs: list[dict[str, Any]]) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True, exist_ok=True)
    (run / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run


def _bad_run(tmp_path: Path, case: str) -> tuple[Path, int]:
    """The golden ledger with *case*'s change: (its run directory, the line changed)."""
    where, change, _ = CASES[case]
    recs = _records()
    i = where(recs)
    change(recs[i])
    return _write(tmp_path, recs), i + 1


def _good_baseline(run: Path) -> Path:
    """The golden ledger, another run of it (its own run_id), beside *run*: a baseline to compare *run* with."""
    recs = _records()
    recs[0]["run_id"] = "the-baseline"
    return _write(run.parent / "baseline", recs)


COMMANDS = {
    "report": lambda run: ["report", str(run), "--format", "json", "--no-write"],
    "whatif": lambda run: ["whatif", str(MOONCAKE), "--rates", str(run), "--json"],
    "compare": lambda run: ["compare", str(_good_baseline(run)), str(run), "--format", "json"],
}


def _one_error_line(res: Any) -> str:
    """The one line a bad input gets: exit 2, ``leverbench: error: ...`` alone on stderr, no traceback."""
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("leverbench: error: "), res.stderr
    assert "Traceback" not in res.output
    return lines[0]


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_ledger_is_one_error_naming_line_and_field(tmp_path, case, command):
    run, line = _bad_run(tmp_path, case)
    err = _one_error_line(CliRunner().invoke(cli, COMMANDS[command](run)))
    path = run / "ledger.jsonl"
    assert f"{path}: line {line}: field " in err, err
    field = err.split(f"line {line}: field ", 1)[1].split(":", 1)[0]
    assert field.endswith(CASES[case][2]), (field, err)


@pytest.mark.parametrize("case", list(CASES))
def test_the_columnar_read_names_the_same_line_and_field(tmp_path, monkeypatch, case):
    """Read as columns (a large ledger), the same record is refused with the same words: the columns' types and
    bounds find it, the record's schema names it."""
    run, line = _bad_run(tmp_path, case)
    with pytest.raises(LedgerError) as small:
        read_ledger(run)
    monkeypatch.setattr(reader, "COLUMNAR_MIN_BYTES", 0)
    with pytest.raises(LedgerError) as large:
        read_ledger(run)
    assert str(small.value) == str(large.value) and f"line {line}: field " in str(large.value)


def _middle(tmp_path: Path) -> tuple[Path, int, list[dict[str, Any]]]:
    """The golden ledger with a call in the middle whose latency is text: (run, its line, the records
    without it)."""
    recs = _records()
    calls = [i for i, r in enumerate(recs) if r["kind"] == "call"]
    i = calls[len(calls) // 2]
    assert i < len(recs) - 10
    rest = recs[:i] + recs[i + 1:]
    recs[i]["latency_s"] = "slow"
    return _write(tmp_path, recs), i + 1, rest


@pytest.mark.parametrize("way", ["lines", "columns"])
def test_one_bad_record_in_the_middle_stops_the_report_until_salvage(tmp_path, monkeypatch, way):
    """Exit 2 naming the line and the field; with --salvage the report is made from the other records (the
    figures of the ledger without that record) and counts the record it skipped."""
    if way == "columns":
        monkeypatch.setattr(reader, "COLUMNAR_MIN_BYTES", 0)
    run, line, rest = _middle(tmp_path)
    path = run / "ledger.jsonl"
    args = COMMANDS["report"](run)
    err = _one_error_line(CliRunner().invoke(cli, args))
    assert f"{path}: line {line}: field latency_s: " in err and "--salvage" in err
    res = CliRunner().invoke(cli, [*args, "--salvage"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    skipped = [w["text"] for w in got["warning_items"] if w["kind"] == W.LEDGER_REPAIR]
    assert skipped == [f"{path}: line {line}: field latency_s: input should be a valid number (got 'slow'); "
                       "skipped (--salvage)"]
    want = json.loads(CliRunner().invoke(cli, COMMANDS["report"](_write(tmp_path / "rest", rest))).stdout)
    assert got["cells"] == want["cells"] and got["decomposition"] == want["decomposition"]
    table = CliRunner().invoke(cli, ["report", str(run), "--no-write", "--salvage"])
    assert table.exit_code == 0 and f"{W.LEDGER_REPAIR.value} (1)" in table.output, table.output
    assert read_ledger(run, salvage=True).skipped == 1


def test_compare_salvage_reads_past_the_bad_record(tmp_path):
    run, line, _ = _middle(tmp_path)
    err = _one_error_line(CliRunner().invoke(cli, COMMANDS["compare"](run)))
    assert f"{run / 'ledger.jsonl'}: line {line}: field latency_s" in err and "--salvage" in err
    res = CliRunner().invoke(cli, [*COMMANDS["compare"](run), "--salvage"])
    assert res.exit_code in (0, 1), res.output
    (c,) = json.loads(res.stdout)["comparisons"]
    assert any("skipped (--salvage)" in w for w in c["later"]["warnings"]), c["later"]["warnings"]


def test_whatif_salvage_reads_past_the_bad_record(tmp_path):
    run, line, _ = _middle(tmp_path)
    err = _one_error_line(CliRunner().invoke(cli, COMMANDS["whatif"](run)))
    assert f"line {line}: field latency_s" in err
    res = CliRunner().invoke(cli, [*COMMANDS["whatif"](run), "--salvage"])
    assert res.exit_code == 0, res.output


def test_every_golden_ledger_validates():
    for path in sorted(GOLDEN.glob("*.ledger.jsonl")):
        led = read_ledger(path)
        assert not led.warnings and led.skipped == 0, path


def test_the_writer_refuses_a_header_the_reader_would(tmp_path):
    head = _records()[0]
    head["config"]["experiment"]["baseline"] = "zzz"
    with LedgerWriter(tmp_path / "ledger.jsonl") as w, pytest.raises(ValueError, match="config.experiment.baseline"):
        w.append(head)
    assert (tmp_path / "ledger.jsonl").read_text() == ""


def test_a_shards_record_names_an_arm_of_its_run(tmp_path):
    """A worker's shard is read by the same schema, its records' arms the run header's."""
    recs = _records()
    run = _write(tmp_path, recs)
    shard = run / "ledger.d" / "worker-0.jsonl"
    shard.parent.mkdir()
    load = {**recs[_at("call")(recs)], "kind": "load", "stage": "s", "load_run": 1, "worker": 0, "arm": "ghost"}
    head = {"kind": "shard", "schema": recs[0]["schema"], "run_id": recs[0]["run_id"], "worker": 0}
    shard.write_text(json.dumps(head) + "\n" + json.dumps(load) + "\n")
    with pytest.raises(LedgerError, match=f"{shard}: line 2: field arm: 'ghost' is none of the header's arms"):
        read_ledger(run)
    load["arm"] = recs[_at("call")(recs)]["arm"]
    shard.write_text(json.dumps(head) + "\n" + json.dumps(load) + "\n")
    assert sum(r["kind"] == "load" for r in read_ledger(run).records) == 1


def test_an_older_schema_is_validated_once_upgraded(tmp_path, monkeypatch):
    """A ledger of an older schema still reads (its records upgraded first, then validated); one whose upgraded
    record breaks the schema is refused naming the line and the field as it is now called."""
    from leverbench.ledger import upgrade
    from leverbench.ledger.records import LEDGER_SCHEMA_NAME

    monkeypatch.setattr(upgrade, "CURRENT", 2)
    monkeypatch.setattr(upgrade, "UPGRADES", {})

    @upgrade.upgrade_to(2)
    def upgrade_to_2(r):  # version 1 called a call's latency "latency"
        if "latency" in r:
            r["latency_s"] = r.pop("latency")
        return r

    recs = _records()
    recs[0]["schema"] = f"{LEDGER_SCHEMA_NAME}/1"
    for r in recs:
        if "latency_s" in r:
            r["latency"] = r.pop("latency_s")
    run = _write(tmp_path, recs)
    assert read_ledger(run).header["schema"] == f"{LEDGER_SCHEMA_NAME}/2"
    i = _at("call", 3)(recs)
    recs[i]["latency"] = "x"
    run = _write(tmp_path, recs)
    with pytest.raises(LedgerError, match=f"line {i + 1}: field latency_s: input should be a valid number"):
        read_ledger(run)


def _fifo_run(tmp: Path) -> Path:
    import os  # noqa: PLC0415

    run = tmp / "fifo"
    run.mkdir()
    os.mkfifo(run / "ledger.jsonl")
    return run


@pytest.mark.parametrize("make", [_fifo_run, lambda tmp: Path("/dev/zero")], ids=["fifo", "dev-zero"])
@pytest.mark.parametrize("args", [["report", "{p}", "--no-write"],
                                  ["project", "{p}", "--input-tokens", "10", "--output-tokens", "10"],
                                  ["whatif", str(MOONCAKE), "--rates", "{p}", "--json"]], ids=["report", "project",
                                                                                           "whatif"])
def test_a_ledger_that_is_no_regular_file_is_refused_not_read(tmp_path, make, args):
    """A FIFO as ledger.jsonl hung every command that reads a ledger (its open waits for a writer); /dev/zero
    filled the memory (13.5 GB in 15 s)."""
    p = make(tmp_path)
    res = CliRunner().invoke(cli, [a.replace("{p}", str(p)) for a in args])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "not a regular file" in lines[0], res.output


def _edited(tmp: Path, source: Path, edit: Callable[[dict[str, Any]], bool]) -> Path:
    """*source* with the first record *edit* changes (it returns True) changed, as a run directory."""
    out, done = [], False
    for line in source.read_text().splitlines():
        r = json.loads(line)
        if not done:
            done = edit(r)
        out.append(json.dumps(r))
    run = tmp / "run"
    run.mkdir()
    (run / "ledger.jsonl").write_text("\n".join(out) + "\n")
    return run


@pytest.mark.parametrize("columnar", [False, True], ids=["lines", "columns"])
def test_a_call_without_its_case_names_the_field(tmp_path, monkeypatch, columnar):
    """A call record without ``case`` (the long fuzz run): read as a case None, it ended in a TypeError sorting
    the cases, then an AttributeError writing markdown (exit 70).  Read as columns too, it is refused (a null
    ``case`` label makes the record suspect, then its schema names the field)."""
    if columnar:
        monkeypatch.setattr(reader, "COLUMNAR_MIN_BYTES", 1)
    run = _edited(tmp_path, BASE, lambda r: r.get("kind") == "call" and r.pop("case", None) is not None)
    res = CliRunner().invoke(cli, ["report", str(run), "--no-write"])
    assert res.exit_code == 2 and "field case: field required" in res.stderr, res.output
    res = CliRunner().invoke(cli, ["report", str(run), "--no-write", "--salvage"])
    assert res.exit_code == 0, res.output


def test_a_header_endpoint_with_a_bad_port_is_its_own_server(tmp_path):
    """An arm's endpoint ``http://127.0.0.1:-1/v1`` in the header: urlsplit's port raised ValueError (exit 70)."""
    def edit(r: dict[str, Any]) -> bool:
        if r.get("kind") != "run":
            return False
        arm = next(iter(r["arms"].values()))
        arm["endpoint"] = "http://127.0.0.1:-1/v1"
        return True

    run = _edited(tmp_path, GOLDEN / "sim.ledger.jsonl", edit)
    res = CliRunner().invoke(cli, ["report", str(run), "--no-write"])
    assert res.exit_code == 0 and res.exception is None, res.output


def test_a_metrics_record_without_its_samples_names_the_field(tmp_path):
    """A ``metrics`` record without ``samples`` (the long fuzz run): KeyError summing the counters (exit 70)."""
    run = _edited(tmp_path, GOLDEN / "sim.ledger.jsonl",
                  lambda r: r.get("kind") == "metrics" and r.pop("samples", None) is not None)
    res = CliRunner().invoke(cli, ["report", str(run), "--no-write"])
    assert res.exit_code == 2 and "field samples: field required" in res.stderr, res.output
    assert CliRunner().invoke(cli, ["report", str(run), "--no-write", "--salvage"]).exit_code == 0
