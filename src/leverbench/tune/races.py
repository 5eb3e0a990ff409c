"""The racer that runs (:class:`RunRacer`): each race a run of the tune's experiment with two arms, the incumbent
and the candidate (:func:`leverbench.config.tune.race_experiment`), in ``OUT/races/NNN/`` (its ledger, summary and
reports, as ``leverbench run`` writes them), decided by the run's own sequential verdict of the candidate against
the incumbent — so every guard applies to it (equal work, drift, failed calls, engagement, exchangeable repeats): a
comparison the guard refuses is a ``refused`` race, which never makes a candidate win.

``OUT/tune.jsonl`` is the tune's own ledger, append-only: a ``tune`` line (the file, the space), then one ``race``
line per race as it finishes (its number, the two configurations, the point).  A tune killed at any moment is
resumed by running the search again (:func:`leverbench.tune.search.search` is a deterministic function of the races'
outcomes): a race with its line is read back from its run's ledger (re-summarised: nothing is trusted that the
ledger does not hold), a race without one is resumed where its run stopped (``leverbench run --resume``'s rules),
and the first race not started is where new work begins.

The verdict's mapping (:data:`OUTCOMES`): ``pays`` → better; ``equivalent`` → same; ``does not pay`` → worse when
the ratio is below 1, else same (faster, but by less than the least effect); ``undecided``/``open`` → undecided; a
verdict the guard refused (its ``refused`` reason) → refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Optional

from ..analysis.hardware.engines import engine_seconds
from ..config.tune import LoadedTune, TomlValue, race_experiment
from ..errors import BadInput
from ..ledger.reader import Ledger
from ..ledger.rows import RunHeaderRow
from ..pipeline.run_files import report_dir
from ..schema.experiment_rows import VerdictRow
from ..schema.summary import Summary
from .space import Config, Outcome, RaceResult, Space, words

#: The format of ``tune.jsonl``.
TUNE_LEDGER_SCHEMA = "leverbench.tune/1"
#: A progress callback: the race's number, its two configurations, the point, and "start" or "done".
RaceProgress = Callable[[int, RaceResult | None, str], None]


def space_of(tune: LoadedTune) -> Space:
    """The tune file's search space."""
    knobs = {k: tuple(v) for k, v in tune.spec.knobs.items()}
    return Space(knobs=knobs, baseline=tuple((k, tune.baseline[k]) for k in knobs),
                 exclude=tuple(dict(ex) for ex in tune.spec.exclude))


def outcome_of(row: VerdictRow | None) -> tuple[Outcome, Optional[str]]:
    """A race's outcome from the candidate's verdict row against the incumbent (module docstring), and why it was
    refused or left undecided (None: decided)."""
    if row is None:
        return "refused", "the run has no verdict of the candidate against the incumbent (no paired turns)"
    if row["refused"] is not None:
        return "refused", row["refused"]
    verdict = row["verdict"]
    if verdict == "pays":
        return "better", None
    if verdict == "equivalent":
        return "same", None
    if verdict == "does not pay":
        return ("worse" if (row["ratio"] or 1.0) < 1.0 else "same"), None
    return "undecided", row["reason"] or f"no verdict after {max(row['repeats'].values(), default=0):g} repeats"


def result_of(summary: Summary, ledger: Ledger[RunHeaderRow], incumbent: Config, candidate: Config, point: int,
              run_dir: Path) -> RaceResult:
    """A finished race's result, from its run's summary and ledger."""
    inc, cand = words(incumbent), words(candidate)
    row = next((v for v in summary["verdicts"] if v["arm"] == cand and v["vs"] == inc), None)
    outcome, reason = outcome_of(row)
    spent = engine_seconds(list(ledger.of_kind("engine_start")), ledger.of_kind("engine_stop"))
    repeats = int(max(row["repeats"].values(), default=0)) if row else 0
    return RaceResult(incumbent, candidate, point, outcome, row["ratio"] if row else None,
                      row["low"] if row else None, row["high"] if row else None, spent, repeats, reason, str(run_dir))


class RunRacer:
    """Runs each race the search asks for as a leverbench run under *out* (module docstring); a race finished
    before (its ``race`` line in ``tune.jsonl``) is read back from its ledger instead."""

    def __init__(self, tune: LoadedTune, out: Path, *, progress: Optional[RaceProgress] = None,
                 run_progress: Optional[Callable[..., None]] = None):
        self.tune, self.out, self.progress, self.run_progress = tune, Path(out), progress, run_progress
        self.count = 0
        self.log = self.out / "tune.jsonl"
        self.done = self._read_log()

    def _read_log(self) -> dict[int, tuple[Config, Config, int]]:
        if not self.log.exists():
            self.out.mkdir(parents=True, exist_ok=True)
            self._append({"kind": "tune", "schema": TUNE_LEDGER_SCHEMA, "file": str(self.tune.path),
                          "knobs": {k: list(v) for k, v in self.tune.spec.knobs.items()},
                          "baseline": dict(self.tune.baseline), "exclude": [dict(e) for e in self.tune.spec.exclude],
                          "concurrency": self.tune.spec.concurrency, "min_effect": self.tune.spec.min_effect,
                          "confidence": self.tune.spec.confidence, "max_repeats": self.tune.spec.max_repeats,
                          "budget_engine_s": self.tune.spec.budget_engine_s})
            return {}
        done: dict[int, tuple[Config, Config, int]] = {}
        for n, line in enumerate(self.log.read_text(encoding="utf-8").splitlines(), 1):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                if n == len(self.log.read_text(encoding="utf-8").splitlines()):
                    continue  # a last line cut by a kill: its race is resumed from its run
                raise BadInput(f"{self.log}: line {n} is not JSON; the tune's ledger is damaged") from None
            if n == 1 and (not isinstance(rec, dict) or rec.get("schema") != TUNE_LEDGER_SCHEMA):
                raise BadInput(f"{self.log}: line 1 is not a {TUNE_LEDGER_SCHEMA} header; is {self.out} a tune's "
                               "directory?")
            if isinstance(rec, dict) and rec.get("kind") == "race":
                done[int(rec["race"])] = (_config(rec["incumbent"]), _config(rec["candidate"]), int(rec["point"]))
        return done

    def _append(self, rec: dict[str, object]) -> None:
        with self.log.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def __call__(self, incumbent: Config, candidate: Config, point: int) -> RaceResult:
        self.count += 1
        n = self.count
        run_dir = self.out / "races" / f"{n:03d}"
        finished = self.done.get(n)
        if finished is not None and finished != (incumbent, candidate, point):
            raise BadInput(f"{self.out}: race {n} ran {words(finished[0])} against {words(finished[1])}, but the "
                           f"search now asks for {words(incumbent)} against {words(candidate)}: the tune file changed "
                           "since; start a new tune (another --out)")
        if finished is None:
            self._run(n, run_dir, incumbent, candidate)
        summary, ledger = report_dir(run_dir)
        result = result_of(summary, ledger, incumbent, candidate, point, run_dir)
        if finished is None:
            self._append({"kind": "race", "race": n, "incumbent": dict(incumbent), "candidate": dict(candidate),
                          "point": point, "outcome": result.outcome, "ratio": result.ratio,
                          "engine_s": result.engine_s})
        if self.progress:
            self.progress(n, result, "done")
        return result

    def _run(self, n: int, run_dir: Path, incumbent: Config, candidate: Config) -> None:
        from ..runner.run import Runner  # noqa: PLC0415 (aiohttp: only when a race runs)

        if self.progress:
            self.progress(n, None, f"{words(candidate)} against {words(incumbent)}")
        exp = race_experiment(self.tune, _values(incumbent), _values(candidate), words(incumbent), words(candidate))
        resume = (run_dir / "ledger.jsonl").exists()
        Runner(exp, run_dir, resume=resume, progress=self.run_progress).run()


def _config(values: object) -> Config:
    if not isinstance(values, dict):
        raise BadInput(f"a race's configuration must be a JSON object, got {values!r}")
    return tuple((str(k), v) for k, v in values.items())


def _values(config: Config) -> dict[str, TomlValue]:
    return dict(config)
