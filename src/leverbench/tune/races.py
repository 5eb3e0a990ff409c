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
and the first race not started is where new work begins.  A race whose run finished but whose line a kill cut
(its ``summary.json`` is there) is read back, not run again; a last line cut mid-write is dropped before the next
is written.  The header keeps a fingerprint of everything that decides a race (the experiment, the knobs, the
baseline, the exclusions, the points, the least effect, the confidence, the most repeats; not the budget, which
may be raised to go on): a tune file changed since is refused.

A race whose engine fails to start (a configuration the engine refuses: too many slots for its memory, a flag its
build lacks) is a ``refused`` race with the error as its reason: the search goes on without it.

The verdict's mapping (:func:`outcome_of`): ``pays`` → better; ``equivalent`` → same; ``does not pay`` → worse when
its whole interval lies below 1 (the ratio, where it has none), else same (no faster by the least effect, and not
shown slower); ``undecided``/``open`` → undecided; a verdict the guard refused (its ``refused`` reason) → refused.

A run orients a lever's verdict toward the lever on (the arm with the drafter against the one without), whichever
arm is its baseline: a candidate that turns a lever off has its race's verdict the other way round, the incumbent
against it (:func:`outcome_reversed`).  Its ratio and interval are inverted (the candidate's are 1 / the
incumbent's: the same confidence sequence), and the outcome read from them: the incumbent ``pays`` → worse;
``equivalent`` → same; ``does not pay`` → better where the inverted interval lies above the least effect, worse
where it lies below 1, same (no better) where it lies below the least effect, and undecided where it still holds
the least effect (the run stopped on the incumbent's question, which left the candidate's open);
``undecided``/``open`` → undecided.

**The GPU-hours objective** (``[tune] objective = "gpu_hours"``, :func:`in_gpu_hours`): a turn costs its time × the
configuration's GPUs (``[tune] gpus``), so the ratio of the costs is the ratio of the times × the incumbent's GPUs /
the candidate's: a constant factor on the confidence sequence the race's run decided, whose bounds hold at any look
(anytime-valid), so the same interval, scaled, decides the cost — better where it lies above the least effect, worse
below 1, no better below the least effect, undecided otherwise (the run stopped on the time's question, which may
leave the cost's open).  With the same GPUs on both sides it is the turn time's outcome.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

from ..analysis.hardware.engines import engine_seconds
from ..config.tune import LoadedTune, race_experiment
from ..errors import BadInput, EngineError
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
        high = row["high"]
        slower = high < 1.0 if high is not None else (row["ratio"] or 1.0) < 1.0
        return ("worse" if slower else "same"), None
    return "undecided", row["reason"] or f"no verdict after {max(row['repeats'].values(), default=0):g} repeats"


def outcome_reversed(row: VerdictRow, min_effect: float) -> tuple[Outcome, Optional[str]]:
    """A race's outcome from the incumbent's verdict row against the candidate (module docstring)."""
    if row["refused"] is not None:
        return "refused", row["refused"]
    verdict, high = row["verdict"], row["high"]
    if verdict == "pays":
        return "worse", None
    if verdict == "equivalent":
        return "same", None
    if verdict == "does not pay":
        low = row["low"]
        if high is None or low is None or high <= 0 or low <= 0:  # (no interval: the ratio says what it can)
            return ("worse" if (row["ratio"] or 1.0) > 1.0 else "same"), None
        up, down = 1.0 / low, 1.0 / high  # the candidate's interval
        if down > min_effect:
            return "better", None
        if up < 1.0:
            return "worse", None
        if up <= min_effect:
            return "same", None
        return "undecided", ("the run stopped on the incumbent's question; the candidate's interval "
                             f"[{down:.2f}–{up:.2f}] still holds the least effect {min_effect:.2f}")
    return "undecided", row["reason"] or f"no verdict after {max(row['repeats'].values(), default=0):g} repeats"


def _inverse(x: float | None) -> float | None:
    return 1.0 / x if x else None


def race_engine_s(ledger: Ledger[RunHeaderRow]) -> float:
    """The engine-seconds of a race's run (:func:`leverbench.analysis.hardware.engines.engine_seconds`)."""
    return engine_seconds(list(ledger.of_kind("engine_start")), ledger.of_kind("engine_stop"))


def in_gpu_hours(r: RaceResult, scale: float, min_effect: float) -> RaceResult:
    """*r* read for the objective GPU-hours a turn (module docstring): its ratio and interval times *scale* (the
    incumbent's GPUs / the candidate's), its outcome from them — better where the interval lies above the least
    effect, worse where it lies below 1, no better where it lies below the least effect, else undecided; a refused
    race stays refused."""
    if scale == 1.0 or r.outcome == "refused" or r.ratio is None:
        return r
    ratio = r.ratio * scale
    low, high = (x * scale if x is not None else None for x in (r.low, r.high))
    reason = None
    if low is not None and low > min_effect:
        outcome: Outcome = "better"
    elif high is not None and high < 1.0:
        outcome = "worse"
    elif high is not None and high <= min_effect:
        outcome = "same"
    else:
        outcome = "undecided"
        reason = (f"in GPU-hours a turn its interval [{low:.2f}–{high:.2f}] still holds the least effect "
                  f"{min_effect:.2f}" if high is not None else "no interval")
    return replace(r, outcome=outcome, ratio=ratio, low=low, high=high, reason=reason)


def result_of(summary: Summary, ledger: Ledger[RunHeaderRow], incumbent: Config, candidate: Config, point: int,
              run_dir: Path) -> RaceResult:
    """A finished race's result, from its run's summary and ledger (in turn time: :func:`in_gpu_hours` reads it for
    the GPU-hours objective)."""
    inc, cand = words(incumbent), words(candidate)
    row = next((v for v in summary["verdicts"] if v["arm"] == cand and v["vs"] == inc), None)
    back = next((v for v in summary["verdicts"] if v["arm"] == inc and v["vs"] == cand), None)
    spent = race_engine_s(ledger)
    if row is None and back is not None:  # the lever's verdict runs toward the lever on: the incumbent's
        outcome, reason = outcome_reversed(back, back["min_effect"])
        repeats = int(max(back["repeats"].values(), default=0))
        return RaceResult(incumbent, candidate, point, outcome, _inverse(back["ratio"]), _inverse(back["high"]),
                          _inverse(back["low"]), spent, repeats, reason, str(run_dir))
    outcome, reason = outcome_of(row)
    repeats = int(max(row["repeats"].values(), default=0)) if row else 0
    return RaceResult(incumbent, candidate, point, outcome, row["ratio"] if row else None,
                      row["low"] if row else None, row["high"] if row else None, spent, repeats, reason, str(run_dir))


def fingerprint(tune: LoadedTune) -> str:
    """A hash of everything that decides a race (module docstring): a resumed tune must have the same."""
    spec = tune.spec.model_dump(mode="json", exclude={"budget_engine_s"})
    for key, default in (("objective", "turn_time"), ("gpus", None)):  # (added later: a tune begun before resumes)
        if spec.get(key) == default:
            spec.pop(key)
    what = {"experiment": tune.experiment.snapshot(), "tune": spec, "baseline": tune.baseline}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


class RunRacer:
    """Runs each race the search asks for as a leverbench run under *out* (module docstring); a race finished
    before (its ``race`` line in ``tune.jsonl``) is read back from its ledger instead."""

    def __init__(self, tune: LoadedTune, out: Path, *, progress: Optional[RaceProgress] = None,
                 run_progress: Optional[Callable[..., None]] = None):
        self.tune, self.out, self.progress, self.run_progress = tune, Path(out), progress, run_progress
        self.count = 0
        self.log = self.out / "tune.jsonl"
        self.done = self._read_log()

    def scale(self, incumbent: Config, candidate: Config) -> float:
        """The incumbent's GPUs over the candidate's where the objective is GPU-hours a turn (1: turn time, or the
        same GPUs)."""
        spec = self.tune.spec
        if spec.objective != "gpu_hours":
            return 1.0
        return float(spec.gpus_of(dict(incumbent)) or 1) / float(spec.gpus_of(dict(candidate)) or 1)

    def _read_log(self) -> dict[int, dict[str, object]]:
        raw = self.log.read_bytes() if self.log.exists() else b""
        if not raw.strip():
            self.out.mkdir(parents=True, exist_ok=True)
            self.log.write_bytes(b"")
            self._append({"kind": "tune", "schema": TUNE_LEDGER_SCHEMA, "file": str(self.tune.path),
                          "fingerprint": fingerprint(self.tune),
                          "knobs": {k: list(v) for k, v in self.tune.spec.knobs.items()},
                          "baseline": dict(self.tune.baseline), "exclude": [dict(e) for e in self.tune.spec.exclude],
                          "concurrency": self.tune.spec.concurrency, "min_effect": self.tune.spec.min_effect,
                          "confidence": self.tune.spec.confidence, "max_repeats": self.tune.spec.max_repeats,
                          "budget_engine_s": self.tune.spec.budget_engine_s})
            return {}
        if not raw.endswith(b"\n"):  # a last line a kill cut mid-write: dropped (its race is read back or resumed)
            raw = raw[:raw.rfind(b"\n") + 1]
            self.log.write_bytes(raw)
        done: dict[int, dict[str, object]] = {}
        for n, line in enumerate(raw.decode("utf-8").splitlines(), 1):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                raise BadInput(f"{self.log}: line {n} is not JSON; the tune's ledger is damaged") from None
            if n == 1:
                if not isinstance(rec, dict) or rec.get("schema") != TUNE_LEDGER_SCHEMA:
                    raise BadInput(f"{self.log}: line 1 is not a {TUNE_LEDGER_SCHEMA} header; is {self.out} a "
                                   "tune's directory?")
                if rec.get("fingerprint") != fingerprint(self.tune):
                    raise BadInput(f"{self.out}: the tune file changed since this tune began (its experiment, knobs, "
                                   "baseline, exclusions, points, least effect, confidence or most repeats; only "
                                   "budget_engine_s may change): start a new tune (another --out)")
            elif isinstance(rec, dict) and rec.get("kind") == "race":
                done[int(rec["race"])] = rec
        return done

    def _append(self, rec: dict[str, object]) -> None:
        with self.log.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def __call__(self, incumbent: Config, candidate: Config, point: int) -> RaceResult:
        _stop_if_asked()
        self.count += 1
        n = self.count
        run_dir = self.out / "races" / f"{n:03d}"
        line = self.done.get(n)
        if line is not None and (_config(line["incumbent"]), _config(line["candidate"]), line["point"]) != (
                incumbent, candidate, point):
            raise BadInput(f"{self.out}: race {n} ran {words(_config(line['candidate']))} against "
                           f"{words(_config(line['incumbent']))}, but the search now asks for {words(candidate)} "
                           f"against {words(incumbent)}: start a new tune (another --out)")
        failed = line.get("failed") if line is not None else None
        if line is None and not (run_dir / "summary.json").exists():
            failed = self._run(n, run_dir, incumbent, candidate, point)
        if isinstance(failed, str):  # its engine did not start: refused, with the engine's words
            spent = 0.0
            if (run_dir / "ledger.jsonl").exists():
                with suppress(BadInput):
                    _, ledger = report_dir(run_dir, write=False)
                    spent = race_engine_s(ledger)
            result = RaceResult(incumbent, candidate, point, "refused", None, None, None, spent, 0,
                                f"an engine did not start: {failed}", str(run_dir))
        else:
            summary, ledger = report_dir(run_dir)
            result = result_of(summary, ledger, incumbent, candidate, point, run_dir)
            result = in_gpu_hours(result, self.scale(incumbent, candidate), self.tune.spec.min_effect)
        if line is None:
            self._append({"kind": "race", "race": n, "incumbent": dict(incumbent), "candidate": dict(candidate),
                          "point": point, "outcome": result.outcome, "ratio": result.ratio,
                          "engine_s": result.engine_s, **({"failed": failed} if isinstance(failed, str) else {})})
        if self.progress:
            self.progress(n, result, "done")
        _stop_if_asked()
        return result

    def _run(self, n: int, run_dir: Path, incumbent: Config, candidate: Config, point: int) -> str | None:
        """Run race *n* (resumed where a kill cut its run); the engine's error where one did not start."""
        from ..runner.run import Runner  # noqa: PLC0415 (aiohttp: only when a race runs)

        if self.progress:
            self.progress(n, None, f"{words(candidate)} against {words(incumbent)}")
        exp = race_experiment(self.tune, dict(incumbent), dict(candidate), words(incumbent), words(candidate),
                              point=point)
        resume = (run_dir / "ledger.jsonl").exists()
        try:
            Runner(exp, run_dir, resume=resume, progress=self.run_progress).run()
        except EngineError as exc:
            return str(exc).splitlines()[0][:500] if str(exc) else type(exc).__name__
        return None


def _stop_if_asked() -> None:
    """A stop signal that arrived while a race's engines were being stopped (held then): stop now, as asked."""
    from ..runner.run import Interrupted  # noqa: PLC0415
    from ..runner.signals import take_held  # noqa: PLC0415

    if take_held():
        raise Interrupted("a stop signal arrived while engines were stopped")


def _config(values: object) -> Config:
    if not isinstance(values, dict):
        raise BadInput(f"a race's configuration must be a JSON object, got {values!r}")
    return tuple((str(k), v) for k, v in values.items())
