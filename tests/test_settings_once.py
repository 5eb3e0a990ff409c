"""Settings once (issue 39, part 3): analysis and the reports read a run's settings typed, from the one loader of
the ledger header's experiment (:class:`leverbench.config.settings.RunSettings`), whose defaults are the
experiment file's own (the pydantic fields of :mod:`leverbench.config.experiment`); never the header's JSON."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from leverbench.analysis.base.dataset import dataset
from leverbench.analysis.summary import summarize
from leverbench.config import ExperimentSection, Probes
from leverbench.config.settings import RunSettings, default
from leverbench.errors import LedgerError
from leverbench.ledger.reader import read_ledger

SRC = Path(__file__).resolve().parents[1] / "src" / "leverbench"
GOLDEN = Path(__file__).parent / "golden"
MINIMAL = {"experiment": {"name": "minimal", "baseline": "a"}}  # all a header must hold (the reader's schema)
#: the settings whose absence means something of its own: a run before ledger v5 declared no cache state
UNDECLARED = {"cache_between_turns"}


def _default(model: type, key: str) -> object:
    """The oracle: the pydantic field's own default."""
    return model.model_fields[key].get_default(call_default_factory=True)


# ---------------------------------------------------------------- no raw reads of the header's settings


def _raw_reads(path: Path) -> list[str]:
    """The places in one module that read the header's settings as JSON: ``X["experiment"]`` or
    ``X.get("experiment")`` (in any spelling of X, f-strings included), and ``config``'s ``"probes"``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            receiver, key = node.value, node.slice
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args):
            receiver, key = node.func.value, node.args[0]
        else:
            continue
        if not isinstance(key, ast.Constant):
            continue
        of_config = any(w in ast.unparse(receiver).lower() for w in ("config", "cfg", "header"))
        if key.value == "experiment" or (key.value == "probes" and of_config):
            out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return out


def raw_settings_reads(src: Path) -> list[str]:
    """:func:`_raw_reads` of every module of ``analysis/`` and ``report/`` under *src*."""
    return [hit for part in ("analysis", "report") for path in sorted((src / part).rglob("*.py"))
            for hit in _raw_reads(path)]


def test_analysis_and_the_reports_read_no_setting_from_the_header_s_json():
    found = raw_settings_reads(SRC)
    assert not found, ("read the run's settings from ds.settings (or RunSettings.of_header), typed, with the "
                       "experiment file's defaults, not from the header's JSON: " + " | ".join(found))


def test_the_rule_catches_a_raw_read(tmp_path):
    mod = tmp_path / "analysis" / "x.py"
    mod.parent.mkdir(parents=True)
    (tmp_path / "report").mkdir()
    mod.write_text('def f(ds, summary, config):\n'
                   '    a = ds.config["experiment"].get("drift_tolerance", 0.10)\n'
                   '    b = (config.get("experiment") or {}).get("store_text")\n'
                   '    c = (ds.config.get("probes") or {}).get("tolerance", 0.05)\n'
                   '    d = f"{ds.config[\'experiment\'].get(\'retries\')}"\n'
                   '    return summary["probes"], ds.settings.drift_tolerance\n')
    assert [h.split(": ")[0] for h in raw_settings_reads(tmp_path)] == ["x.py:2", "x.py:3", "x.py:4", "x.py:5"]


# ---------------------------------------------------------------- what a header lacks: the experiment file's default


@pytest.mark.parametrize("key", sorted(set(ExperimentSection.model_fields) - {"name", "baseline"} - UNDECLARED))
def test_a_setting_the_header_lacks_is_the_experiment_file_s_default(key):
    settings = RunSettings.of_header(MINIMAL)
    assert getattr(settings, key) == _default(ExperimentSection, key)
    assert key not in settings.model_fields_set  # not declared: left out of what a new experiment carries


@pytest.mark.parametrize("key", sorted(Probes.model_fields))
def test_a_probes_setting_the_header_lacks_is_the_default(key):
    assert getattr(RunSettings.of_header(MINIMAL).probes, key) == _default(Probes, key)  # no [probes] at all
    one = RunSettings.of_header({**MINIMAL, "probes": {"repeats": 7}}).probes  # [probes] without the key
    assert getattr(one, key) == (7 if key == "repeats" else _default(Probes, key))


def test_an_undeclared_cache_state_stays_undeclared():
    """A run before ledger v5 declared no state: None, not today's default (analysis says its repeats may have
    revisited); a declared one is read."""
    assert _default(ExperimentSection, "cache_between_turns") == "cold"
    assert RunSettings.of_header(MINIMAL).cache_between_turns is None
    declared = {"experiment": {**MINIMAL["experiment"], "cache_between_turns": "keep"}}
    assert RunSettings.of_header(declared).cache_between_turns == "keep"


def test_a_summary_of_a_header_without_the_tolerances_uses_the_defaults():
    """The handmade golden ledger with its tolerances taken out of the header: the summary's tolerances, each
    drift row's and the guard's are the pydantic defaults; a value the header holds is the one used."""
    ledger = read_ledger(GOLDEN / "handmade.ledger.jsonl")
    exp = ledger.header["config"]["experiment"]
    for key in ("volume_tolerance_cell", "volume_tolerance_total", "drift_tolerance", "engaged_acceptance_min"):
        del exp[key]
    del ledger.header["config"]["probes"]["tolerance"]
    summary = summarize(ledger)
    assert summary["tolerances"] == {"volume_cell": _default(ExperimentSection, "volume_tolerance_cell"),
                                     "volume_total": _default(ExperimentSection, "volume_tolerance_total"),
                                     "probe_agreement": _default(Probes, "tolerance"),
                                     "drift": _default(ExperimentSection, "drift_tolerance")}
    assert {d["tolerance"] for d in summary["drift"]} == {_default(ExperimentSection, "drift_tolerance")}
    exp["drift_tolerance"] = 0.37
    assert {d["tolerance"] for d in summarize(ledger)["drift"]} == {0.37}


def test_default_names_the_experiment_file_s():
    assert default("drift_tolerance") == _default(ExperimentSection, "drift_tolerance")
    with pytest.raises(KeyError):
        default("no_such_setting")


# ---------------------------------------------------------------- headers an older version wrote


def test_an_older_schema_s_header_reads_with_today_s_defaults():
    """demo1 is a ledger v1: its header has a key that is no setting today (request_timeout_s: left out) and
    lacks timeouts, retries and the cache state (the defaults; the state undeclared)."""
    ledger = read_ledger(GOLDEN / "demo1.ledger.jsonl")
    header = ledger.header["config"]["experiment"]
    assert ledger.header["schema"].endswith("/1") and "request_timeout_s" in header and "retries" not in header
    settings = dataset(ledger).settings
    assert settings.timeouts == _default(ExperimentSection, "timeouts")
    assert settings.retries == _default(ExperimentSection, "retries")
    assert settings.cache_between_turns is None
    assert settings.sentinel_tokens == header["sentinel_tokens"] == 16
    assert settings.declared() == {k: v for k, v in header.items() if k != "request_timeout_s"}


def test_a_current_header_s_settings_are_declared_as_written():
    header = json.loads((GOLDEN / "demo3.ledger.jsonl").open().readline())["config"]
    settings = RunSettings.of_header(header)
    assert settings.declared() == header["experiment"]
    assert settings.probes.model_dump() == {**Probes().model_dump(), **header["probes"]}
    ExperimentSection.model_validate(settings.declared())  # a new experiment file may carry them


#: values an older version wrote that today's loader refuses, and the ledger's reader still reads
OUT_OF_TODAY_S_BOUNDS = {"drift_tolerance": 0, "retries": 50, "name": "run/with a slash"}


def test_a_value_out_of_today_s_bounds_is_kept_as_recorded():
    """A run is judged by the settings it was made with: a value today's loader refuses (an older version's
    looser bounds) is kept, and the summary is made with it."""
    for key, value in OUT_OF_TODAY_S_BOUNDS.items():
        with pytest.raises(ValidationError):  # the premise: today's loader refuses each
            ExperimentSection.model_validate({**MINIMAL["experiment"], key: value})
    ledger = read_ledger(GOLDEN / "handmade.ledger.jsonl")
    ledger.header["config"]["experiment"].update(OUT_OF_TODAY_S_BOUNDS)
    settings = dataset(ledger).settings
    assert (settings.drift_tolerance, settings.retries, settings.name) == (0.0, 50, "run/with a slash")
    summary = summarize(ledger)
    assert summary["run"]["name"] == "run/with a slash" and summary["tolerances"]["drift"] == 0.0
    assert any("retries = 50" in w for w in summary["warnings"])


def test_a_list_longer_than_today_s_bound_is_kept_as_recorded():
    """Review: ``[probes] depths`` had no length bound before 2026-12-02; a run with 101 depths is read with
    them (a too_long error is a bound, as a value_error is), not refused as a damaged header."""
    from leverbench.config.limits import MAX_DEPTHS  # noqa: PLC0415
    from leverbench.config.settings import RunSettings  # noqa: PLC0415

    ledger = read_ledger(GOLDEN / "handmade.ledger.jsonl")
    depths = list(range(1, MAX_DEPTHS + 2))
    ledger.header["config"].setdefault("probes", {})["depths"] = depths
    with pytest.raises(ValidationError):  # the premise: today's loader refuses it
        Probes.model_validate({"depths": depths})
    assert list(RunSettings.of_header(ledger.header["config"]).probes.depths) == depths


def test_the_run_row_says_what_the_header_declared_not_a_default():
    """Review: a header without ``repeats``, ``order`` or ``retries`` gets the defaults for the analysis, but the
    summary's ``run`` row and the retried warning say what the run recorded: nothing (null), as before."""
    ledger = read_ledger(GOLDEN / "handmade.ledger.jsonl")
    exp = ledger.header["config"]["experiment"]
    declared = summarize(ledger)["run"]
    assert declared["repeats"] == exp["repeats"] and declared["order"] == exp["order"]
    for key in ("repeats", "order", "retries"):
        del exp[key]
    summary = summarize(ledger)
    assert summary["run"]["repeats"] is None and summary["run"]["order"] is None
    assert all("retries = 0" not in w for w in summary["warnings"])


@pytest.mark.parametrize(("key", "value"), [("order", "random"), ("gpu_sample_hz", "fast"), ("timeouts", 3),
                                            ("adaptive", {"min_effect": "big"}), ("cache_reset", 1)])
def test_a_setting_of_another_type_is_a_damaged_header(key, value):
    """A value no version wrote (the ledger's reader does not type these): a LedgerError naming the key, not a
    default in its place."""
    ledger = read_ledger(GOLDEN / "handmade.ledger.jsonl")
    ledger.header["config"]["experiment"][key] = value
    with pytest.raises(LedgerError, match=f"config.experiment.{key}"):
        summarize(ledger)
