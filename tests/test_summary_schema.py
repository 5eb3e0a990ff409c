"""``leverbench schema summary``: the JSON Schema of summary.json, its copy in docs/, ``--check``, and the checks
that every summary leverbench builds or writes fits it (issue 24 part 3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from leverbench.analysis.summary import CHECK_ENV, summarize
from leverbench.cli import cli
from leverbench.errors import SummaryMismatch
from leverbench.ledger.reader import read_ledger
from leverbench.pipeline.run_files import write_reports
from leverbench.schema.check import summary_json_schema, summary_problems

ROOT = Path(__file__).parent.parent
GOLDEN = Path(__file__).parent / "golden"
NAMES = ("demo1", "demo2", "demo3", "handmade", "sim")


def test_the_command_prints_the_schema_and_docs_holds_a_copy() -> None:
    res = CliRunner().invoke(cli, ["schema", "summary"])
    assert res.exit_code == 0, res.output
    assert res.output == summary_json_schema()
    assert (ROOT / "docs" / "summary.schema.json").read_text() == res.output, \
        "docs/summary.schema.json is stale: .venv/bin/leverbench schema summary > docs/summary.schema.json"
    schema = json.loads(res.output)
    assert schema["additionalProperties"] is False and "multipliers" in schema["required"]


@pytest.mark.parametrize("name", NAMES)
def test_every_golden_summary_fits_and_an_independent_validator_agrees(name: str) -> None:
    """pydantic's check and a JSON Schema validator that is not pydantic (jsonschema) both accept the summary
    rebuilt from each golden ledger, and both refuse it with a key added, a number made text, a key removed."""
    summary = json.loads(json.dumps(summarize(read_ledger(GOLDEN / f"{name}.ledger.jsonl"))))
    schema = json.loads(summary_json_schema())
    assert summary_problems(summary) == []
    jsonschema.validate(summary, schema)
    for change in (lambda s: s["run"].update(bogus=1), lambda s: s["cells"][0].update(turn_s_median="1"),
                   lambda s: s["multipliers"][0].pop("arm"), lambda s: s.pop("levers")):
        bad = json.loads(json.dumps(summary))
        change(bad)
        assert summary_problems(bad)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_check_says_a_summary_fits_or_where_it_departs(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(GOLDEN / "handmade.summary.json", run / "summary.json")
    res = CliRunner().invoke(cli, ["schema", "summary", "--check", str(run)])
    assert res.exit_code == 0 and "fits leverbench.summary/1" in res.output, res.output
    data = json.loads((run / "summary.json").read_text())
    del data["levers"]  # a reader may do without it; --check requires every section
    data["cells"][0]["bogus"] = 1
    (run / "summary.json").write_text(json.dumps(data))
    res = CliRunner().invoke(cli, ["schema", "summary", "--check", str(run / "summary.json")])
    assert res.exit_code == 2, res.output
    assert "levers: Field required" in res.output and "cells[0].bogus" in res.output, res.output
    assert "Traceback" not in res.output


def test_write_reports_checks_what_it_wrote(tmp_path: Path) -> None:
    """A summary that departs from the schema is a bug (exit 70), told after the files are written."""
    summary = summarize(read_ledger(GOLDEN / "handmade.ledger.jsonl"))
    write_reports(tmp_path, summary)
    summary["cells"][0]["turn_s_median"] = "slow"
    with pytest.raises(SummaryMismatch) as exc:
        write_reports(tmp_path, summary)
    assert exc.value.exit_code == 70 and "cells[0].turn_s_median" in str(exc.value)
    assert json.loads((tmp_path / "summary.json").read_text())["cells"][0]["turn_s_median"] == "slow"
    assert (tmp_path / "report.html").stat().st_size > 0


def test_the_suite_checks_every_summary_it_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """conftest sets LEVERBENCH_CHECK_SUMMARY: then summarize itself refuses a summary that departs."""
    import leverbench.analysis.summary as mod

    real = mod._summarize
    monkeypatch.setattr(mod, "_summarize", lambda *a, **k: {**real(*a, **k), "bogus": 1})
    ledger = read_ledger(GOLDEN / "handmade.ledger.jsonl")
    assert mod.os.environ.get(CHECK_ENV) == "1"
    with pytest.raises(SummaryMismatch, match="bogus"):
        summarize(ledger)
    monkeypatch.setenv(CHECK_ENV, "0")
    assert summarize(ledger)["bogus"] == 1


def test_a_tolerance_the_experiment_file_allows_fits_the_summary() -> None:
    """The experiment file takes a volume tolerance up to 100 (10,000 %); the summary's schema must too (issue 24's
    review: it capped them at 1, so a run with volume_tolerance_cell = 1.5 ended in exit 70)."""
    ledger = read_ledger(GOLDEN / "handmade.ledger.jsonl")
    ledger.header["config"]["experiment"]["volume_tolerance_cell"] = 1.5
    summary = summarize(ledger)
    assert summary["tolerances"]["volume_cell"] == 1.5
    summary["tolerances"]["volume_cell"] = 101.0
    assert [p.where for p in summary_problems(summary)] == ["tolerances.volume_cell"]
