"""What a resumed run (``run --resume``) takes from the ledger it continues."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..config import LoadedExperiment
from ..config.settings import RunSettings
from ..errors import BadInput
from ..ledger.reader import read_ledger
from ..ledger.rows import EnginesRow
from .rounds import resumed_adaptive
from .schedule import Unit


def holds_a_run(path: Path) -> bool:
    """Whether a ledger holds its run header: a first line written whole.  A file without one (empty, or a
    header cut by a crash) is what a run stopped before its first record leaves: no measurement in it."""
    with open(path, "rb") as fh:
        return fh.readline().endswith(b"\n")


def nothing_to_resume(out: Path) -> str | None:
    """Why the run directory *out* holds no run to resume (no ``ledger.jsonl``, or one without its header: a
    run stopped before its first record, which measured nothing), or None where it holds one.  ``--resume``
    then starts the run (:func:`completed`), so a supervisor may always restart a run with it."""
    ledger_path = out / "ledger.jsonl"
    if not ledger_path.exists():
        return "no ledger.jsonl"
    if not holds_a_run(ledger_path):
        return "its ledger.jsonl has no run header: the run stopped before its first record"
    return None


@dataclass
class Resumed:
    """What a run continues from (:func:`completed`): the units done (successful), those whose every record
    failed, whether it starts afresh, the experiment (a resumed adaptive run's own settings), the run's id,
    the load stages done, how its engines ran (its header's ``engines``), and the block number its next engine
    start takes (one past the highest in its ``engine_start`` and ``engine_stop`` records: starts and stops
    are matched by arm and block, so a resumed run's must not repeat the first session's)."""

    done: set[tuple] = field(default_factory=set)
    failed: set[tuple] = field(default_factory=set)
    fresh: bool = False
    exp: LoadedExperiment | None = None
    run_id: str | None = None
    stages_done: set[tuple[str, str]] = field(default_factory=set)
    engines: EnginesRow | None = None
    header: bool = False  # the ledger has its header (records may follow)
    next_block: int = 0


def completed(out: Path, resume: bool, exp: LoadedExperiment) -> Resumed:
    """The units a resumed run skips: those with a successful record (a failed unit is run again); what else it
    takes from the ledger in *out* (:class:`Resumed`).  A run with nothing to resume (:func:`nothing_to_resume`:
    none yet, or one that stopped before its header) starts afresh, with *resume* or without."""
    ledger_path = out / "ledger.jsonl"
    if ledger_path.exists() and not holds_a_run(ledger_path):
        # stopped before its first record (engine start, discovery): nothing measured, nothing to keep
        ledger_path.unlink()
        return Resumed(fresh=True)
    if not ledger_path.exists():
        return Resumed(fresh=resume)  # --resume with nothing to resume: the run starts (the CLI said so)
    if not resume:
        raise BadInput(f"{out} already holds a ledger; pass --resume to continue it or choose another --out")
    led = read_ledger(ledger_path, keep_columns=False)  # (it appends next, or writes nothing: --dry-run)
    settings = RunSettings.of_header(led.header["config"], ledger_path)
    exp = resumed_adaptive(exp, settings, out)
    snapshot = exp.snapshot()
    if "cache_between_turns" not in settings.model_fields_set:
        x = exp.spec.experiment  # a run from before ledger v5: its turns met whatever the earlier ones left
        if (x.cache_between_turns, x.cache_reset) != ("keep", "auto"):
            raise BadInput(f"{out}: this run was started by a leverbench that did not bring each turn to a cache "
                           'state (its turns met what earlier turns left): add cache_between_turns = "keep" to the '
                           "file's [experiment] to resume it as it ran, or start a new run")
        experiment = snapshot["experiment"]
        assert isinstance(experiment, dict)  # (the snapshot's [experiment] table: an object, as the model dumps it)
        for key in ("cache_between_turns", "cache_reset"):
            experiment.pop(key, None)
    if "in_flight" not in settings.model_fields_set:  # a run from before ledger v6: each turn alone
        if exp.spec.experiment.in_flight != 1:
            raise BadInput(f"{out}: this run was started by a leverbench that timed each turn alone: remove in_flight "
                           "from the file's [experiment] to resume it as it ran, or start a new run")
        experiment = snapshot["experiment"]
        assert isinstance(experiment, dict)  # (as above)
        experiment.pop("in_flight", None)
    if led.header.get("config") != snapshot:
        old = settings.repeats
        new = exp.spec.experiment.repeats
        cfg_old = {**led.header.get("config", {}),
                   "experiment": {**led.header["config"].get("experiment", {}), "repeats": new}}
        if cfg_old != snapshot:
            raise BadInput(f"{out}: the experiment changed since this run started; resume needs the same "
                           "experiment file (only --repeats may grow)")
        if new < old:
            raise BadInput(f"{out}: --repeats {new} is fewer than the run's {old}")
    units = [(Unit.of_record(rec).key(), rec.get("error") is None) for rec in led.records
             if rec.get("kind") in ("turn", "probe", "sentinel")]
    done = {k for k, ok in units if ok}
    # a stage one of whose workers died is run again whole (its stage_end says which, and what was lost); a
    # stage_end without its stage names none to leave out
    stages = {(stage, rec.get("arm")) for rec in led.of_kind("stage_end")
              if not rec.get("lost_workers") and (stage := rec.get("stage")) is not None}
    blocks = [b for rec in led.of_kind("engine_start", "engine_stop") if isinstance(b := rec.get("block"), int)]
    return Resumed(done, {k for k, _ in units} - done, False, exp, led.header.get("run_id"), stages,
                   led.header.get("engines"), True, max(blocks, default=-1) + 1)
