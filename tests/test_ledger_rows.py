"""The ledger's row types (:mod:`leverbench.ledger.rows`) hold the same keys as the one definition of each
record: the writer's dataclasses and the schema's models (no second, drifting copy of the fields)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from pydantic import BaseModel

from leverbench.ledger import rows, schema
from leverbench.ledger.records import CallRecord, TurnRecord


def _keys(td: type) -> set[str]:
    return set(td.__annotations__) | set(getattr(td, "__required_keys__", ())) | set(
        getattr(td, "__optional_keys__", ()))


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} - {"extra"}


def _model_keys(model: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def test_call_fields_are_the_dataclass_fields() -> None:
    assert _keys(rows.CallFields) == _fields(CallRecord)


def test_turn_row_is_the_dataclass() -> None:
    assert _keys(rows.TurnRow) == _fields(TurnRecord)


def test_call_row_holds_every_extra_the_schema_types() -> None:
    assert set(schema.CALL_EXTRAS) <= _keys(rows.CallRow)
    assert _keys(rows.CallFields) <= _keys(rows.CallRow)
    extras = (rows.TurnCallExtras, rows.ProbeExtras, rows.LoadExtras)
    assert not set().union(*map(_keys, extras)) & _fields(CallRecord)  # extra never names a field


@pytest.mark.parametrize(("model", "row"), [
    (schema.MetricsModel, rows.MetricsRow), (schema.StageEndModel, rows.StageEndRow),
    (schema.ClockModel, rows.ClockRow), (schema.ResumeModel, rows.ResumeRow),
    (schema.ShardHeader, rows.ShardHeaderRow), (schema.RunHeader, rows.RunHeaderRow),
    (schema.RunConfig, rows.RunConfigRow), (schema.Experiment, rows.ConfigExperimentRow),
    (schema.ConfigArm, rows.ConfigArmRow), (schema.ConfigCase, rows.ConfigCaseRow),
    (schema.Probes, rows.ConfigProbesRow), (schema.HeaderArm, rows.HeaderArmRow),
    (schema.RecordError, rows.ErrorRow), (schema.Timings, rows.TimingsRow),
    (schema.EngineStartModel, rows.EngineStartRow), (schema.EngineStopModel, rows.EngineStopRow),
    (schema.GpuSamplesModel, rows.GpuSamplesRow), (schema.Engines, rows.EnginesRow),
    (schema.EngineWarmedModel, rows.EngineWarmedRow),
])
def test_every_field_a_model_checks_is_a_key_of_its_row(model: type[BaseModel], row: type) -> None:
    assert _model_keys(model) - {"kind"} <= _keys(row)


def test_required_keys_are_known_at_runtime() -> None:
    """(A ``from __future__ import annotations`` in rows.py would leave every key of a total=False row optional.)"""
    assert rows.CallRow.__required_keys__ == {"kind", "arm"}
    assert rows.RunHeaderRow.__required_keys__ == {"kind", "schema", "config", "arms"}
    assert rows.MetricsRow.__required_keys__ == {"kind", "arm", "when", "samples"}


def test_rows_import_no_pydantic() -> None:
    code = "import sys, leverbench.ledger.rows; sys.exit('pydantic' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
