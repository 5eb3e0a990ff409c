"""Every record kind is read through its schema (issue 42, item 7): a load call, a ``stage_end``, a ledger of
zeros, a stage said to have run on 10^9 workers, and a case too long for the context the endpoint reports each
end in one clear error naming the file, the line and the field (exit 2), or in a sane result (exit 0), and
within :data:`LIMIT_S` — never in an internal error (exit 70) or a run of minutes.

The ledger mutated here is a real one: two arms of the simulator with turns, probes and a closed-loop load
sweep with an SLO (:func:`load_run`, made once for the module).  The header's and the calls' own families
(``drift_tolerance`` null, a call's latency null, a knob ``slots`` as text) are in ``test_bad_ledger.py``.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner

from leverbench.cli import cli
from leverbench.ledger import reader

TRACE = Path(__file__).parent / "data" / "traces" / "mooncake_synthetic_trace.jsonl"
LIMIT_S = 20.0  # the bound on an answer to a hostile input (quiet: about 1 s each); it hung before
Records = list[dict[str, Any]]


@pytest.fixture(scope="module")
def load_run(tmp_path_factory) -> Records:
    """The records of a small real run with a load sweep: arms ``nocache`` and ``cache`` on the simulator, one
    case, probes, and a closed stage at concurrency 1 and 2 with ``slo_ttft_s``."""
    from leverbench.config import load  # noqa: PLC0415
    from leverbench.engines.simulator import SimConfig, SimulatorThread  # noqa: PLC0415
    from leverbench.runner.run import Runner  # noqa: PLC0415

    tmp = tmp_path_factory.mktemp("load-run")
    cfg = {"prefill_tps": 100_000, "decode_tps": 2000, "slots": 2, "output_tokens": 8}
    with SimulatorThread(SimConfig(**cfg, prefix_cache=False)) as a, \
            SimulatorThread(SimConfig(**cfg, prefix_cache=True)) as b:
        (tmp / "exp.toml").write_text(f'''
[experiment]
name = "load"
repeats = 2
baseline = "nocache"
sentinel_tokens = 0
[[arms]]
name = "nocache"
role = "baseline"
base_url = "{a.base_url}"
model = "sim"
[[arms]]
name = "cache"
role = "treatment"
base_url = "{b.base_url}"
model = "sim"
conditions = {{ prefix_cache = true }}
[[cases]]
name = "short"
prompt = "hello there, tell me a story about caches"
max_tokens = 8
temperature = 0.0
[probes]
output_tokens = [4, 16]
repeats = 2
case = "short"
[[load]]
name = "ramp"
mode = "closed"
case = "short"
concurrency = [1, 2]
requests = 6
slo_ttft_s = 0.5
''')
        Runner(load(tmp / "exp.toml"), tmp / "run").run()
    return [json.loads(x) for x in (tmp / "run" / "ledger.jsonl").read_text().splitlines() if x.strip()]


def _write(tmp_path: Path, recs: Records) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True, exist_ok=True)
    (run / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run


COMMANDS = {
    "report": lambda run: ["report", str(run), "--format", "json", "--no-write"],
    "whatif": lambda run: ["whatif", str(TRACE), "--rates", str(run), "--requests", "20", "--json"],
    "project": lambda run: ["project", str(run), "--input-tokens", "100", "--output-tokens", "10"],
}


def _invoke(args: list[str]) -> tuple[Any, float]:
    t0 = time.monotonic()
    res = CliRunner().invoke(cli, args)
    return res, time.monotonic() - t0


def _one_error_line(res: Any) -> str:
    """Exit 2, one ``leverbench: error: ...`` line ending stderr (progress lines may come before it), no traceback."""
    assert res.exit_code == 2, (res.exit_code, res.output[-2000:], res.exception)
    errs = [x for x in res.stderr.splitlines() if x.startswith("leverbench: ")]
    assert len(errs) == 1 and res.stderr.rstrip("\n").endswith(errs[0]) and errs[0].startswith("leverbench: error: ")
    assert "Traceback" not in res.output
    return errs[0]


def _nth(kind: str, n: int = 0) -> Callable[[Records], int]:
    return lambda recs: [i for i, r in enumerate(recs) if r.get("kind") == kind][n]


# id -> (which record, the change, the field the error names, the commands)
CASES: dict[str, tuple[Callable[[Records], int], Callable[[dict[str, Any]], Any], str, tuple[str, ...]]] = {
    "load-stage-null": (_nth("load"), lambda r: r.update(stage=None), "stage", ("report",)),
    "load-stage-missing": (_nth("load"), lambda r: r.pop("stage"), "stage", ("report",)),
    "load-concurrency-text": (_nth("load"), lambda r: r.update(concurrency="x"), "concurrency", ("report", "whatif")),
    "load-concurrency-zero": (_nth("load"), lambda r: r.update(concurrency=0), "concurrency", ("report",)),
    "load-slo-text": (_nth("load"), lambda r: r.update(slo_ttft_s="x"), "slo_ttft_s", ("report", "whatif")),
    "load-slo-zero": (_nth("load", 5), lambda r: r.update(slo_ttft_s=0), "slo_ttft_s", ("report", "project")),
    "load-mode-null": (_nth("load"), lambda r: r.update(mode=None), "mode", ("report",)),
    "lost_workers-text": (_nth("stage_end"), lambda r: r.update(lost_workers="x"), "lost_workers", ("report",)),
    "lost_workers-numbers": (_nth("stage_end"), lambda r: r.update(lost_workers=[1, 2]), "lost_workers[0]",
                             ("report",)),
    "lost_worker-fields": (_nth("stage_end"), lambda r: r.update(lost_workers=[{"worker": "x", "error": 5}]),
                           "lost_workers[0].worker", ("report",)),
    "lost_worker-no-recorded": (_nth("stage_end"), lambda r: r.update(lost_workers=[{"worker": 1, "error": "died"}]),
                                "lost_workers[0].recorded", ("report",)),
    "workers-1e9": (_nth("stage_end"), lambda r: r.update(workers=10**9), "workers", ("report",)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_load_record_is_one_error_naming_line_and_field(load_run, tmp_path, case):
    where, change, field, commands = CASES[case]
    recs = copy.deepcopy(load_run)
    i = where(recs)
    change(recs[i])
    run = _write(tmp_path, recs)
    for command in commands:
        res, took = _invoke(COMMANDS[command](run))
        err = _one_error_line(res)
        assert f"{run / 'ledger.jsonl'}: line {i + 1}: field {field}:" in err, (command, err)
        assert took < LIMIT_S, (command, took)


def test_the_unmutated_load_run_reads_and_serves(load_run, tmp_path):
    """The mutations above start from a valid ledger: every command answers it."""
    run = _write(tmp_path, load_run)
    for command in COMMANDS.values():
        res, _ = _invoke(command(run))
        assert res.exit_code == 0, (res.output[-2000:], res.exception)


def test_a_context_an_engine_really_serves_is_not_refused(load_run, tmp_path):
    """A discovered context length of 10,485,760 tokens (vLLM serving Llama 4 Scout at full context) is a fact,
    not bad input: every command reads the ledger and the summary.json it writes."""
    recs = copy.deepcopy(load_run)
    for arm in recs[0]["arms"].values():
        arm.setdefault("discovered", {}).setdefault("knobs", {})["context_length"] = 10_485_760
    run = _write(tmp_path, recs)
    for command in COMMANDS.values():
        res, _ = _invoke(command(run))
        assert res.exit_code == 0, (res.output[-2000:], res.exception)


def _zero(x: Any) -> Any:
    if isinstance(x, bool):
        return x
    if isinstance(x, (int, float)):
        return 0
    if isinstance(x, dict):
        return {k: _zero(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_zero(v) for v in x]
    return x


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_ledger_of_zeros_is_one_error_naming_the_field(load_run, tmp_path, command):
    """Every number 0, the header's too: refused where a zero is not a value the writer writes (its repeats)."""
    run = _write(tmp_path, [_zero(r) for r in load_run])
    err = _one_error_line(_invoke(COMMANDS[command](run))[0])
    assert f"{run / 'ledger.jsonl'}: line 1: field config.experiment.repeats: " in err, err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_load_records_of_zeros_give_a_sane_result(load_run, tmp_path, command):
    """Every number of the load calls and stage ends 0 but those the schema bounds away from it (a concurrency,
    an SLO): every call sent at one instant and answered in no time.  A valid ledger, so the commands answer it
    (it used to divide by the stage's sending time, 0); the stages' throughput is unknown, not infinite."""
    keep = ("concurrency", "workers", "slo_ttft_s")
    recs = [{**_zero(r), **{k: r[k] for k in keep if k in r}} if r.get("kind") in ("load", "stage_end") else r
            for r in load_run]
    run = _write(tmp_path, recs)
    res, took = _invoke(COMMANDS[command](run))
    assert res.exit_code == 0, (res.output[-2000:], res.exception)
    assert took < LIMIT_S
    if command == "report":
        rows = json.loads(res.stdout)["load"]
        assert rows and all(r["requests_per_s"] is None for r in rows)


def test_a_bad_load_record_is_found_when_the_ledger_is_read_as_columns(load_run, tmp_path, monkeypatch):
    """A large ledger's load records are not columns: each is checked as a record, by the same schema."""
    recs = copy.deepcopy(load_run)
    i = _nth("load", 3)(recs)
    recs[i]["concurrency"] = "x"
    run = _write(tmp_path, recs)
    monkeypatch.setattr(reader, "COLUMNAR_MIN_BYTES", 0)
    err = _one_error_line(_invoke(COMMANDS["report"](run))[0])
    assert f"line {i + 1}: field concurrency:" in err, err


# ------------------------------------------------------------------ a case too long for the context


def test_a_case_past_the_endpoints_context_is_refused_before_anything_is_sent(tmp_path, monkeypatch):
    """A 50 MB document for a model serving 8,192 tokens: refused once discovery has the context length (the
    simulator reports one as the engines do), naming the case's documents, nothing sent; it used to be sent
    anyway, to every arm, for minutes."""
    from leverbench.engines.simulator import SimConfig, SimulatorThread, dialects  # noqa: PLC0415

    monkeypatch.setattr(dialects, "CONTEXT_LENGTH", 8192)
    (tmp_path / "doc.txt").write_text("The cache helps prefill. " * (50_000_000 // 25))
    with SimulatorThread(SimConfig(prefill_tps=1e6, decode_tps=5000, output_tokens=4)) as sim:
        (tmp_path / "exp.toml").write_text(f'''
[experiment]
name = "big"
repeats = 1
baseline = "a"
sentinel_tokens = 0
[[arms]]
name = "a"
role = "baseline"
base_url = "{sim.base_url}"
model = "sim"
[[cases]]
name = "small"
prompt = "hi"
max_tokens = 2
[[cases]]
name = "big"
documents = ["doc.txt"]
prompt = "summarise"
max_tokens = 2
''')
        res, took = _invoke(["run", "--out", str(tmp_path / "run"), str(tmp_path / "exp.toml")])
    err = _one_error_line(res)
    assert err.startswith(f"leverbench: error: {tmp_path / 'exp.toml'}: cases[1].documents: ") and "8,192" in err, err
    assert took < LIMIT_S, took
    ledger = tmp_path / "run" / "ledger.jsonl"
    assert not ledger.exists() or '"kind":"call"' not in ledger.read_text()
