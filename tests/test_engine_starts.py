"""Each engine start and stop in the ledger (issue 27's review): a resumed run numbers its starts on, a start is
written before its warm-up and a failed one with its error, stops pair with their starts by time, a release
whose GPUs were not checked is "unchecked", and vLLM's model load time is this start's own (the simulator as
each arm's engine: tests/sim_engine.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ledgers import warned
from sim_engine import SimEngine, engine_pids, patch_engines
from test_engine_blocks import SIMS, _run, experiment

from leverbench.errors import EngineError
from leverbench.gpu.nvml import NVML_MODULE_ENV
from leverbench.ledger.reader import read_ledger
from leverbench.runner import telemetry
from leverbench.runner.endpoint import Interrupted
from leverbench.runner.run import Runner

pytestmark = pytest.mark.slow  # ~25 s of simulator engine processes on a busy 2-core machine: .ci/run runs it


@pytest.fixture
def sims(monkeypatch):
    patch_engines(monkeypatch, SIMS)
    monkeypatch.setenv(NVML_MODULE_ENV, "no_such_nvml_binding")  # this machine's truth: no NVML


def test_a_stop_whose_gpus_were_not_checked_is_unchecked_not_released(tmp_path):
    """Without NVML an engine's GPUs cannot be checked: its stop is not a confirmed release (None, shown
    "unchecked"), and it does not end the run (only a release seen to fail does)."""
    from leverbench.analysis.hardware.engines import engines_section  # noqa: PLC0415
    from leverbench.report.hardware_tables import engines_table  # noqa: PLC0415

    tel = telemetry.Telemetry(hz=0, why="nvidia-ml-py is not installed")
    released, check, left = tel.release(("0",), None, {}, wait_s=0.0)
    assert released is None and "its GPUs not checked (nvidia-ml-py is not installed)" in check and left == []
    assert tel.release(None, None, {}, wait_s=0.0)[0] is True  # an engine on the CPU: its process group is all
    start = {"arm": "a", "block": 0, "part": "round", "round": 0, "t": 1.0, "ready_s": 1.0, "timeout_s": 300.0}
    stop = {"arm": "a", "block": 0, "t": 5.0, "stop_s": 0.2, "released": released, "check": check}
    section, warnings = engines_section({"engines": {"mode": "one at a time"}}, [start], [stop])
    [arm] = section["arms"]
    assert (arm["released"], arm["unchecked"], section["starts"][0]["stopped"]) == (None, 1, True) and not warnings
    assert engines_table({"engines": section}).rows[0][-1] == "unchecked"


def _interrupt_at(monkeypatch, method: str, n_at: int):
    """Runner.*method* raises KeyboardInterrupt (Ctrl-C) at its *n_at*-th call; returns the original."""
    orig, n = getattr(Runner, method), [0]

    async def wrapped(self, *a, **k):
        n[0] += 1
        if n[0] == n_at:
            raise KeyboardInterrupt
        return await orig(self, *a, **k)

    monkeypatch.setattr(Runner, method, wrapped)
    return orig


def _starts_and_stops(out: Path) -> tuple[list[dict], list[dict]]:
    led = read_ledger(out)
    return list(led.of_kind("engine_start")), list(led.of_kind("engine_stop"))


def test_a_resumed_run_numbers_its_engine_starts_on(tmp_path, sims, monkeypatch):
    """Starts and stops are matched by (arm, block): a resumed run numbers its starts after the ledger's, so none
    collides with the first session's and no engines are reported up at once that never were."""
    orig = _interrupt_at(monkeypatch, "do_unit", 9)
    with pytest.raises(Interrupted):
        _run(experiment(tmp_path, repeats=3), tmp_path / "run")
    first = len(_starts_and_stops(tmp_path / "run")[0])
    monkeypatch.setattr(Runner, "do_unit", orig)
    s = _run(experiment(tmp_path, repeats=3), tmp_path / "run", resume=True)
    starts, stops = _starts_and_stops(tmp_path / "run")
    assert [x["block"] for x in starts] == list(range(len(starts))) and len(starts) > first
    assert sorted((x["arm"], x["block"]) for x in stops) == sorted((x["arm"], x["block"]) for x in starts)
    assert s["engines"]["overlaps"] == 0 and not warned(s, "engines_overlap")


def test_an_engine_start_is_recorded_before_its_warm_up(tmp_path, sims, monkeypatch):
    """Ctrl-C while a block's engine warms up: its start is in the ledger (written as soon as it answered), its
    stop follows; no stop without its start."""
    orig = _interrupt_at(monkeypatch, "_warm_up", 2)
    with pytest.raises(Interrupted):
        _run(experiment(tmp_path, repeats=2), tmp_path / "run")
    assert engine_pids() == []
    starts, stops = _starts_and_stops(tmp_path / "run")
    assert [(x["arm"], x["block"]) for x in stops] == [(x["arm"], x["block"]) for x in starts]
    warmed = list(read_ledger(tmp_path / "run").of_kind("engine_warmed"))
    assert [(x["arm"], x["block"]) for x in warmed] == [(x["arm"], x["block"]) for x in starts[2:3]]
    monkeypatch.setattr(Runner, "_warm_up", orig)
    s = _run(experiment(tmp_path, repeats=2), tmp_path / "run", resume=True)
    rows = s["engines"]["starts"]
    assert all(r["stopped"] for r in rows) and rows[2]["warmup_calls"] >= 1 and rows[3]["warmup_calls"] is None


def test_a_failed_engine_start_is_recorded_with_its_error(tmp_path, sims, monkeypatch):
    """An engine that dies while starting: an engine_start with its error under its own block, the stop of
    what it left under the same block, and a resumed run that finishes."""
    started, n = SimEngine.start, [0]

    def start(self):
        n[0] += 1
        if n[0] == 4:  # the first round's second block: the simulator refuses its arguments and exits
            self.sim_args = ["--no-such-flag"]
        try:
            return started(self)
        finally:
            self.sim_args = SIMS[self.name]

    monkeypatch.setattr(SimEngine, "start", start)
    with pytest.raises(EngineError, match="while starting"):
        _run(experiment(tmp_path, repeats=2), tmp_path / "run")
    assert engine_pids() == []
    starts, stops = _starts_and_stops(tmp_path / "run")
    failed = starts[-1]
    assert failed["block"] == 3 and "exited with code" in failed["error"] and failed["ready_s"] is None
    assert all((x["arm"], x["block"]) in {(y["arm"], y["block"]) for y in starts} for x in stops)
    s = _run(experiment(tmp_path, repeats=2), tmp_path / "run", resume=True)
    assert s["verdicts"] and [a["failed"] for a in s["engines"]["arms"]] == [0, 1]
    assert s["engines"]["starts"][3]["error"] == failed["error"] and s["engines"]["overlaps"] == 0


def test_start_and_stop_records_whose_blocks_repeat_pair_by_time():
    """A ledger resumed before block numbers went on (two starts of arm a numbered 0): each stop pairs with the
    start before it, and no overlap is counted that never was."""
    from leverbench.analysis.hardware.engines import engines_section  # noqa: PLC0415

    starts = [{"arm": "a", "block": 0, "t": 1.0}, {"arm": "b", "block": 1, "t": 3.0},
              {"arm": "a", "block": 0, "t": 10.0}]
    stops = [{"arm": "a", "block": 0, "t": 2.0, "stop_s": 0.1, "released": True},
             {"arm": "b", "block": 1, "t": 4.0, "stop_s": 0.1, "released": True},
             {"arm": "a", "block": 0, "t": 11.0, "stop_s": 0.1, "released": True}]
    section, warnings = engines_section({"engines": {"mode": "one at a time"}}, starts, stops)
    assert section["overlaps"] == 0 and not warnings and [r["stop_s"] for r in section["starts"]] == [0.1] * 3


def test_model_load_time_is_read_from_this_starts_part_of_the_log(tmp_path):
    """Every start appends to the arm's engine log: what loading the model took is read after this start's
    offset, never a line an earlier start left."""
    from leverbench.engines.vllm import VllmEngine  # noqa: PLC0415

    log = tmp_path / "engine-a.log"
    log.write_text("$ python -m vllm...\nINFO Model loading took 14.99 GiB memory and 21.53 seconds\n")
    before = log.stat().st_size
    eng = SimEngine("a", log, SIMS["base"])
    eng.start()
    eng.stop()
    assert eng.log_offset == before and "Model loading" not in eng.log_since_start()
    v = VllmEngine("a", ["--model", str(tmp_path)], log)
    v.log_offset = eng.log_offset
    assert v.model_load_s() is None  # this start's part says nothing (the last start's 21.53 s is not its)
    with open(log, "a") as fh:
        fh.write("INFO [gpu_model_runner.py:1890] Model loading took 3.2 GiB memory and 9.5 seconds\n")
    assert v.model_load_s() == 9.5
