"""Older ledgers are upgraded as they are read (a chain of upgrade_to_N); newer ones are still refused."""

from __future__ import annotations

import json

import pytest
from ledgers import header, turn, write

from leverbench.analysis.summary import summarize
from leverbench.errors import LedgerError
from leverbench.ledger import upgrade
from leverbench.ledger.reader import read_ledger
from leverbench.ledger.records import LEDGER_SCHEMA, LEDGER_SCHEMA_NAME


def test_versions_2_to_6_only_add_so_version_1_reads_as_it_is(tmp_path):
    """Version 2 added the engine and GPU records (issue 27), version 3 the engine_warmed record (an engine's
    start written before its warm-up), version 4 a call's send_s (its times count from when its request went
    out; without it, from when its connection was ready), version 5 the cache_reset records and a turn's cache
    (issue 38), version 6 the companion calls and a turn's in_flight (issue 40), and none changed any: a version 1
    ledger is read as it is, its header keeping its own schema,
    without a pass over its lines."""
    assert upgrade.UPGRADES == dict.fromkeys(range(2, 7), upgrade.additive)
    assert upgrade.CURRENT == 6
    assert upgrade.oldest_readable() == 1
    head = {**header({"a": {}}, ["c"]), "schema": f"{LEDGER_SCHEMA_NAME}/1"}
    run = write(tmp_path / "r", head, turn("a", "c", 0, 1.0, 10))
    with open(run / "ledger.jsonl", "rb") as fh:
        assert upgrade.older_version(run, fh) is None
    led = read_ledger(run)
    assert led.header == head and len(led.records) == 2


@pytest.fixture
def version_3(monkeypatch):
    """A fake future: ledger schema 3, reached from 1 by upgrade_to_2 (latency -> latency_s) and
    upgrade_to_3 (every record gains ``v3``; the header says which steps it took)."""
    monkeypatch.setattr(upgrade, "CURRENT", 3)
    monkeypatch.setattr(upgrade, "UPGRADES", {})

    @upgrade.upgrade_to(2)
    def upgrade_to_2(r):
        if "latency" in r:
            r["latency_s"] = r.pop("latency")
        if r["kind"] == "run":
            r["steps"] = [*r.get("steps", []), 2]
        return r

    @upgrade.upgrade_to(3)
    def upgrade_to_3(r):
        r["v3"] = True
        if r["kind"] == "run":
            r["steps"] = [*r.get("steps", []), 3]
        return r

    return upgrade_to_2, upgrade_to_3


def _old_run(tmp_path, version: int, name: str = "old"):
    """A run written as schema *version*: its calls' latency under the old key when version 1."""
    head = {**header({"a": {}, "b": {}}, ["c"]), "schema": f"{LEDGER_SCHEMA_NAME}/{version}"}
    recs = []
    for r in range(2):
        recs += turn("a", "c", r, 2.0, 10) + turn("b", "c", r, 1.0, 10)
    if version == 1:
        for x in recs:
            if x["kind"] == "call":
                x["latency"] = x.pop("latency_s")
    return write(tmp_path / name, head, recs)


def test_an_older_ledger_goes_through_each_step_in_order(tmp_path, version_3):
    led = read_ledger(_old_run(tmp_path, 1))
    assert led.header["schema"] == f"{LEDGER_SCHEMA_NAME}/3" and led.header["steps"] == [2, 3]
    calls = list(led.of_kind("call"))
    assert calls and all("latency" not in c and c["v3"] for c in calls)
    assert sorted({c["latency_s"] for c in calls}) == [1.0, 2.0]
    s = summarize(led)
    assert {c["arm"]: c["median_s"] for c in s["cells"]} == {"a": 2.0, "b": 1.0}
    # a version-2 ledger takes only the last step
    led2 = read_ledger(_old_run(tmp_path, 2, "v2"))
    assert led2.header["steps"] == [3] and all(c["v3"] for c in led2.of_kind("call"))
    # the file itself is never rewritten
    first = json.loads((tmp_path / "old" / "ledger.jsonl").read_text().split("\n")[0])
    assert first["schema"] == f"{LEDGER_SCHEMA_NAME}/1" and "steps" not in first


def test_an_upgraded_ledger_keeps_the_readers_rules_and_line_numbers(tmp_path, version_3):
    run = _old_run(tmp_path, 1)
    path = run / "ledger.jsonl"
    lines = path.read_text().split("\n")
    path.write_text("\n".join(lines[:4] + ["{not json"] + lines[4:]))  # damage at line 5
    with pytest.raises(LedgerError, match=r"line 5 is not valid JSON.*--salvage"):
        read_ledger(run)
    led = read_ledger(run, salvage=True)
    assert led.warnings == [f"{path}: line 5 is not valid JSON; skipped (--salvage)"]
    path.write_text("\n".join(lines).rstrip("\n") + '\n{"kind":"call","arm":"a')  # a write cut by a crash
    led = read_ledger(run)
    assert len(led.warnings) == 1 and "incomplete" in led.warnings[0]


def test_a_version_no_chain_reaches_and_a_newer_one_are_refused(tmp_path, version_3):
    with pytest.raises(LedgerError,
                       match=r"schema version 0 is older than any this leverbench can upgrade \(it reads 1 to 3\)"):
        read_ledger(_old_run(tmp_path, 0))
    with pytest.raises(LedgerError, match="version 4 is newer than this leverbench understands"):
        read_ledger(_old_run(tmp_path, 4, "new"))


def test_today_a_version_0_ledger_is_refused_not_read_as_version_1(tmp_path):
    head = {**header({"a": {}}, ["c"]), "schema": f"{LEDGER_SCHEMA_NAME}/0"}
    with pytest.raises(LedgerError, match="older than any this leverbench can upgrade"):
        read_ledger(write(tmp_path / "r", head, []))
    assert LEDGER_SCHEMA.endswith("/6")


def test_an_upgrade_is_registered_once(monkeypatch):
    monkeypatch.setattr(upgrade, "UPGRADES", {})
    upgrade.upgrade_to(2)(lambda r: r)
    with pytest.raises(ValueError, match="already registered"):
        upgrade.upgrade_to(2)(lambda r: r)
