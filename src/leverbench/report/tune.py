"""``leverbench tune``'s answer in words (:class:`leverbench.schema.tune_rows.TuneSummary`): per operating point, the
configuration to run and its launch command, its verdict against the baseline with the interval, what the search
cost beside the full grid's estimate, the path of races, and what it did not test."""

from __future__ import annotations

from ..knob_values import config_words
from ..schema.tune_rows import PointRow, RaceRow, TuneSummary

OUTCOME_WORDS = {"better": "better", "worse": "worse", "same": "no better", "undecided": "undecided",
                 "refused": "refused"}


def _config(values: dict[str, object]) -> str:
    return config_words(values.items())


def _interval(r: RaceRow) -> str:
    if r["ratio"] is None:
        return ""
    ends = (f" [{r['low']:.2f}–{r['high']:.2f}]" if r["low"] is not None and r["high"] is not None
            and 0 < r["low"] and r["high"] < float("inf") else "")
    return f"{r['ratio']:.2f}x{ends}"


def race_line(r: RaceRow) -> str:
    """One race: 'k=4 slots=1 against k=0 slots=1: better, 1.42x [1.30–1.55], 6 repeats, 210 engine-s'."""
    why = f" ({r['reason']})" if r["reason"] and r["outcome"] in ("refused", "undecided") else ""
    ratio = _interval(r)
    return (f"{_config(r['candidate'])} against {_config(r['incumbent'])}: {OUTCOME_WORDS[r['outcome']]}"
            + (f", {ratio}" if ratio else "") + f", {r['repeats']} repeats, {r['engine_s']:,.0f} engine-s{why}")


#: What a race's ratio is of, by the tune's objective.
RATIO_WORDS = {"turn_time": "ratio = baseline time / its time",
               "gpu_hours": "ratio = baseline GPU-hours a turn / its GPU-hours a turn"}


def point_lines(p: PointRow, confidence: float, objective: str = "turn_time") -> list[str]:
    """The answer at one operating point."""
    raced = len(p["path"])
    lines = [f"At {p['point']} request{'s' * (p['point'] != 1)} in flight: run {p['recommended_words']}"]
    vs = p["against_baseline"]
    if p["is_baseline"] and p["stopped"] == "budget":
        lines.append(f"  the baseline stays: the budget ran out after {raced} race{'s' * (raced != 1)}, and none of "
                     "those decided a change better (not every one-knob change was raced)")
    elif p["is_baseline"]:
        lines.append("  the baseline stays: no single change from it was decided better")
    elif not p["confirmed"]:
        lines.append(f"  the baseline stays: the search ended at {p['best_words']}, but its race against the baseline "
                     f"did not decide it better ({OUTCOME_WORDS[vs['outcome']] if vs else 'not raced'}"
                     + (f", {_interval(vs)}" if vs and _interval(vs) else "") + ")")
    elif vs is not None:
        lines.append(f"  against the baseline: {OUTCOME_WORDS[vs['outcome']]}, {_interval(vs) or 'no ratio'} "
                     f"({confidence:.0%} confidence, {RATIO_WORDS[objective]})")
    if p["stopped"] == "budget" and not p["is_baseline"]:
        lines.append("  the budget ran out before the search converged: this is the best found so far, not checked "
                     "against all its neighbours")
    lines.append(f"  launch: {p['command']}")
    grid = (f" (the full grid of {p['grid_configurations']} configurations: ~{p['grid_engine_s']:,.0f} engine-s, "
            "estimated)" if p["grid_engine_s"] is not None else "")
    lines.append(f"  search: {p['races']} races, {p['engine_s']:,.0f} engine-s{grid}")
    lines += [f"  {i}. {race_line(r)}" for i, r in enumerate(p["path"], 1)]
    if p["final"]:
        lines.append("  final check:")
        lines += [f"     {race_line(r)}" for r in p["final"]]
    lines += [f"  not tested: {n}" for n in p["not_excluded"]]
    return lines


def render_tune(summary: TuneSummary) -> str:
    """The whole answer, a point after another."""
    knobs = "; ".join(f"{k}: {' '.join(str(v) for v in vs)}" for k, vs in summary["knobs"].items())
    budget = summary["budget_engine_s"]
    head = [f"tune {summary['file']}: {knobs}; baseline {_config(summary['baseline'])}; "
            f"least effect {summary['min_effect']:g}x at {summary['confidence']:.0%} confidence"
            + (f"; budget {budget:,.0f} engine-s" if budget is not None else "")
            + ("; objective: GPU-hours a turn (its time × its GPUs)" if summary["objective"] == "gpu_hours" else "")]
    body = [line for p in summary["points"] for line in point_lines(p, summary["confidence"], summary["objective"])]
    return "\n".join(head + body + [f"engine-s spent in all: {summary['engine_s']:,.0f}"])
