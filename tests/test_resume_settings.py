"""What a resumed run reads of the settings its ledger header recorded, typed (``config.settings.RunSettings``,
issue 39): the repeats it ran, an adaptive run's own adaptive settings, and whether it declared a cache state.
Each test edits one recorded setting of a finished run's header and checks what ``run --resume`` makes of it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from one_arm import one_arm_experiment
from test_resume import run_to_end

from leverbench.config import load, with_repeats
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.errors import BadInput
from leverbench.runner.resume import completed

RECORDED_ADAPTIVE = {"min_effect": 1.5, "confidence": 0.9, "max_repeats": 6, "max_gpu_hours": None}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """A finished run of 2 repeats: (its experiment file, its ledger)."""
    tmp = tmp_path_factory.mktemp("finished")
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=2000.0, output_tokens=4)) as sim:
        exp = one_arm_experiment(tmp, sim.base_url, repeats=2)
        run_to_end(exp, tmp / "run")
    return exp, tmp / "run" / "ledger.jsonl"


def run_with(ledger: Path, out: Path, edit: Callable[[dict], None]) -> Path:
    """*out* holding a copy of *ledger* whose header's ``config.experiment`` *edit* changed."""
    header, rest = ledger.read_text().split("\n", 1)
    head = json.loads(header)
    edit(head["config"]["experiment"])
    out.mkdir()
    (out / "ledger.jsonl").write_text(json.dumps(head) + "\n" + rest)
    return out


def test_resume_takes_the_repeats_the_run_made(finished, tmp_path):
    exp, ledger = finished
    out = run_with(ledger, tmp_path / "run", lambda e: None)
    assert completed(out, True, with_repeats(load(exp), 3)).exp.spec.experiment.repeats == 3  # may grow
    with pytest.raises(BadInput, match=r"--repeats 1 is fewer than the run's 2"):
        completed(out, True, with_repeats(load(exp), 1))


def test_an_adaptive_run_resumes_with_its_recorded_adaptive_settings(finished, tmp_path):
    exp, ledger = finished
    out = run_with(ledger, tmp_path / "run", lambda e: e.update(adaptive=RECORDED_ADAPTIVE))
    got = completed(out, True, load(exp)).exp
    assert got.spec.experiment.adaptive.model_dump() == RECORDED_ADAPTIVE
    with pytest.raises(BadInput, match=r"repeats cannot change on resume \(it ran 2, now 3\)"):
        completed(out, True, with_repeats(load(exp), 3))


def test_a_run_that_declared_no_cache_state_resumes_only_as_it_ran(finished, tmp_path):
    """A header without ``cache_between_turns`` (a run before ledger v5): its turns met what earlier ones left."""
    exp, ledger = finished
    out = run_with(ledger, tmp_path / "run", lambda e: [e.pop(k) for k in ("cache_between_turns", "cache_reset")])
    with pytest.raises(BadInput, match="did not bring each turn to a cache state"):
        completed(out, True, load(exp))
    keep = exp.with_name("keep.toml")
    keep.write_text(exp.read_text().replace("[experiment]\n", '[experiment]\ncache_between_turns = "keep"\n'))
    assert completed(out, True, load(keep)).exp.spec.experiment.cache_between_turns == "keep"
