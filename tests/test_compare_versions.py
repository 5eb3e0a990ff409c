"""``leverbench compare`` reads ledgers of every schema version the tool reads (issue 41): each golden ledger
(``leverbench.ledger/1`` and ``/5``, upgraded as they are read) compared with another run of itself (its own run
id) is "same" at exactly 1x everywhere, exit code 0; a ``/5`` ledger against the same records written as ``/6``
names the schema under what changed and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.cli import cli
from leverbench.ledger.records import LEDGER_SCHEMA

GOLDEN = Path(__file__).parent / "golden"


def _copy(src: Path, dest: Path, **header: str) -> Path:
    lines = src.read_text().splitlines()
    head = json.loads(lines[0])
    head.update(header)
    dest.mkdir(parents=True)
    (dest / "ledger.jsonl").write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    return dest


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.ledger.jsonl")))
def test_each_golden_ledger_against_another_run_of_itself_is_the_same(tmp_path, name):
    src = GOLDEN / name
    schema = json.loads(src.read_text().splitlines()[0])["schema"]
    base = _copy(src, tmp_path / "base")
    later = _copy(src, tmp_path / "later", run_id="another-run")
    res = CliRunner().invoke(cli, ["compare", str(base), str(later), "--format", "json"])
    assert res.exit_code == 0, res.output
    (c,) = json.loads(res.stdout)["comparisons"]
    assert c["changed"] == [] and c["later"]["schema"] == schema
    compared = [x for x in c["cells"] if x["ratio"] is not None]
    assert compared and all(x["ratio"] == pytest.approx(1.0) for x in compared)
    assert all(x["verdict"] in ("same", "refused") for x in c["cells"] + c["arm_ratios"])
    assert all(r["verdict"] == "same" for r in c["arm_ratios"] if r["ratio"] is not None)


def test_a_v5_ledger_against_the_same_records_as_v6_names_the_schema_alone(tmp_path):
    src = GOLDEN / "demo3.ledger.jsonl"
    assert json.loads(src.read_text().splitlines()[0])["schema"] == "leverbench.ledger/5"
    base = _copy(src, tmp_path / "v5")
    later = _copy(src, tmp_path / "v6", run_id="another-run", schema=LEDGER_SCHEMA)
    res = CliRunner().invoke(cli, ["compare", str(base), str(later), "--format", "json"])
    assert res.exit_code == 0, res.output
    (c,) = json.loads(res.stdout)["comparisons"]
    assert [(r["what"], r["baseline"], r["later"]) for r in c["changed"]] == [
        ("ledger schema", "leverbench.ledger/5", LEDGER_SCHEMA)]
