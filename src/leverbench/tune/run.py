"""A tune from start to answer: the search at each operating point (:func:`.search.search`, each race run by
:class:`.races.RunRacer`), then ``OUT/tune.json`` (:class:`TuneSummary`): the configuration to run at each point
with its launch command, its verdict against the baseline, every race in the order run, the engine-seconds spent
against the full grid's estimate, and what the search did not test.

The budget is shared: the engine-seconds the points before spent count against the next point's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

from ..config.tune import LoadedTune, served_args, toml_key
from ..engines.command_template import ENGINE_DIR, as_text, substitute
from ..knob_values import value_words
from ..schema.tune_rows import TUNE_SUMMARY_SCHEMA, PointRow, RaceRow, TuneSummary
from .races import RaceProgress, RunRacer, space_of
from .search import grid_engine_s, search
from .space import Config, RaceResult, SearchResult, Space, words


def race_row(r: RaceResult) -> RaceRow:
    return {"incumbent": dict(r.incumbent), "candidate": dict(r.candidate), "point": r.point, "outcome": r.outcome,
            "ratio": r.ratio, "low": r.low, "high": r.high, "engine_s": r.engine_s, "repeats": r.repeats,
            "reason": r.reason, "run_dir": r.run_dir}


def launch_command(tune: LoadedTune, config: Config) -> str:
    """The template's command with *config*'s values (and the template's other values), ``{port}`` left for the
    operator to fill; for the embedded llama.cpp or vLLM engine, the experiment file's engine line that starts it so
    (the template's own arguments, then those that serve the configuration's levers)."""
    engine = tune.template.engine
    assert engine is not None  # (load_tune checked: a command template, or an engine the tool starts)
    if engine.command is None:
        fields = {**engine.model_dump(mode="json", exclude_unset=True), "kind": engine.kind,
                  "args": served_args(tune, dict(config))}
        return f"engine = {_inline_toml(fields)}"
    values = {k: as_text(v) for k, v in {**engine.values, **dict(config)}.items()}
    return substitute(engine.command, {ENGINE_DIR: "{engine_dir}", **values, "port": "{port}"})


def _inline_toml(v: object) -> str:
    """*v* (the engine table's JSON-shaped fields) as a TOML inline value: JSON's strings, numbers and booleans are
    TOML's (non-ASCII written as it is: JSON's surrogate escapes are no TOML), its arrays too; tables inline."""
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{toml_key(str(k))} = {_inline_toml(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_inline_toml(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def point_row(tune: LoadedTune, space: Space, result: SearchResult) -> PointRow:
    against = result.against_baseline(space.baseline)
    at_baseline = result.best == space.baseline
    confirmed = at_baseline or (against is not None and against.outcome == "better")
    recommended = result.best if confirmed else space.baseline
    return {"point": result.point, "recommended": dict(recommended), "recommended_words": words(recommended),
            "command": launch_command(tune, recommended), "best": dict(result.best), "best_words": words(result.best),
            "is_baseline": at_baseline, "confirmed": confirmed,
            "against_baseline": race_row(against) if against else None, "stopped": result.stopped,
            "engine_s": result.engine_s, "grid_engine_s": grid_engine_s(space, result.path),
            "grid_configurations": len(space.grid()), "races": len(result.path),
            "path": [race_row(r) for r in result.path], "final": [race_row(r) for r in result.final],
            "not_excluded": list(result.not_excluded)}


def plan(tune: LoadedTune) -> list[str]:
    """What ``leverbench tune --dry-run`` prints: the space, the baseline, the exclusions, the points, the objective
    and its GPUs, the budget, and every allowed configuration with the engine it would start (its launch line)."""
    space, spec = space_of(tune), tune.spec
    grid = space.grid()
    out = [f"tune {tune.path}: {len(grid)} allowed configuration(s) of "
           + " × ".join(f"{k} [{', '.join(value_words(v) for v in vs)}]" for k, vs in spec.knobs.items()),
           f"  baseline: {words(space.baseline)}",
           *(f"  excluded: {words(tuple(ex.items()))}" for ex in spec.exclude),
           f"  operating points: {', '.join(str(n) for n in spec.concurrency)} request(s) in flight",
           f"  objective: {'GPU-hours a turn' if spec.objective == 'gpu_hours' else 'turn time'}; least effect "
           f"{spec.min_effect:g}x at {spec.confidence:.0%} confidence; at most {spec.max_repeats} repeats a race"
           + (f"; budget {spec.budget_engine_s:,.0f} engine-s" if spec.budget_engine_s is not None else ""),
           "  configurations (the baseline first), each with the engine it starts:"]
    for c in sorted(grid, key=lambda c: c != space.baseline):
        gpus = spec.gpus_of(dict(c))
        out.append(f"    {words(c)}" + (f" ({gpus} GPU{'s' * (gpus != 1)})" if gpus is not None else ""))
        out.append(f"      {launch_command(tune, c)}")
    return out


def run_tune(tune: LoadedTune, out: Path, *, progress: Optional[RaceProgress] = None,
             run_progress: Optional[Callable[..., None]] = None) -> TuneSummary:
    """Search at each operating point (a resumed tune reads back the races it finished), then write and return
    ``OUT/tune.json``."""
    racer = RunRacer(tune, out, progress=progress, run_progress=run_progress)
    space = space_of(tune)
    budget = tune.spec.budget_engine_s
    points: list[PointRow] = []
    spent = 0.0
    for point in tune.spec.concurrency:
        left = None if budget is None else max(budget - spent, 0.0)
        result = search(space, point, racer, left)
        spent += result.engine_s
        points.append(point_row(tune, space, result))
    summary: TuneSummary = {
        "schema": TUNE_SUMMARY_SCHEMA, "file": str(tune.path),
        "knobs": {k: list(v) for k, v in tune.spec.knobs.items()}, "baseline": dict(tune.baseline),
        "exclude": [dict(e) for e in tune.spec.exclude], "min_effect": tune.spec.min_effect,
        "confidence": tune.spec.confidence, "budget_engine_s": budget, "engine_s": spent, "points": points,
        "objective": tune.spec.objective, "gpus": {words(c): tune.spec.gpus_of(dict(c)) for c in space.grid()}
        if tune.spec.gpus is not None else None}
    (out / "tune.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary
