"""Everything the reports show, computed from the ledger alone.

``summarize(ledger)`` returns the ``leverbench.summary/1`` dict that is written
as ``summary.json``; every report formats it and computes nothing new.  Its rows are the typed rows of
:mod:`leverbench.schema`; with ``LEVERBENCH_CHECK_SUMMARY=1`` (the test suite sets it, ``tests/conftest.py``)
every summary built is checked against that schema and one that departs is an error at once, so every summary
the suite produces is validated, not only those it writes.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import SummaryMismatch
from ..ledger.reader import Ledger
from ..ledger.records import KINDS, SUMMARY_SCHEMA
from ..levers import used_in
from ..redact import redact_tree
from ..schema.check_rows import Citability, CommonDrift, CostRow, DriftCommon, DriftRow
from ..schema.experiment_rows import CellRow, MultiplierRow
from ..schema.lever_rows import EngagedRow
from ..schema.rate_rows import RateRow
from ..schema.summary import Summary
from .base.dataset import Dataset, dataset, first_seen, groups
from .base.guard import CONTRADICTION, DRIFT, NOT_ENGAGED, REFERENCE_USED, Reason, measurement_guard
from .base.knobs import UNKNOWN, Comparison, comparisons
from .base.metrics import own_metrics, server_metrics
from .base.stats import median
from .base.warning_kinds import RunWarning, WarningKind
from .experiment.capacity import capacity_rows
from .experiment.cells import cells, multipliers, totals
from .experiment.cost import costs, scenario_costs
from .experiment.drift import PairDrift, adjusted_turn_s, common, drift, drifted_arms, pair_drifts
from .experiment.engaged import engaged
from .experiment.equal_work import equal_work, equal_work_rows, turns
from .experiment.fidelity import fidelity
from .experiment.levers import levers
from .experiment.reasoning import prompt_discipline, reasoning_split
from .experiment.revisits import repeats
from .experiment.tools_reached import tools_reached, tools_rows
from .experiment.under_load import load_levers
from .experiment.verdicts import verdicts
from .hardware.engines import engines_section
from .hardware.facts import gpu_section
from .load.levels import level_calls
from .load.stages import load_summary, load_warnings, sweep_curves
from .rates.phases import arm_rates, cell_shares, prefill_model, project
from .rates.probes import probes
from .rates.rate_fit import rate_models
from .rates.regression import decomposition
from .rates.server import server_account


def _largest_case_scenario(ds: Dataset, cell_list: Sequence[CellRow]) -> tuple[int, int] | None:
    """Default scenario: the baseline's largest case — its first call's prompt tokens and the
    generated tokens of its whole turn (medians)."""
    c = ds.call
    if ds.baseline not in ds.arm_names:
        return None
    first = ((c.arm == ds.arm_index(ds.baseline)) & (c.step == 0) & c.ok
             & ~np.isnan(c.prompt_tokens) & (c.prompt_tokens != 0))
    by = groups(np.where(first, c.case, -1), len(ds.case_names))
    order = first_seen(by)
    if not order:
        return None
    medians = [median(c.prompt_tokens[by[k]]) for k in order]
    best = max(range(len(order)), key=lambda i: medians[i])
    case = ds.case_names[order[best]]
    cell = next((x for x in cell_list if x["arm"] == ds.baseline and x["case"] == case), None)
    if not cell or not cell["output_tokens_median"]:
        return None
    return int(medians[best]), int(cell["output_tokens_median"])


def _failed_and_retried(ds: Dataset) -> tuple[int, int]:
    """Calls (turns' calls, probes, sentinels) that failed and were not retried; attempts that were retried
    (a probe the endpoint rejected for its length-forcing fields, sent again by prompt, is neither)."""
    t = ds.call
    failed = int((~t.ok & ~t.retried).sum())
    retried = int(t.retried.sum())
    for c in ds.probes + ds.sentinels:
        failed += c.get("error") is not None and not c.get("retried")
        retried += bool(c.get("retried")) and not c.get("rejected_fields")
    return failed, retried


def _texts(ledger: Ledger, ds: Dataset) -> dict[tuple[str, str, int, int], str]:
    """(arm, case, repeat, step) → the answer's text, of the counted turns' calls (a run with store_text)."""
    counted = {tid: i for i, tid in enumerate(ds.turn_ids) if tid is not None}
    out = {}
    for r in ledger.of_kind("call"):
        i = counted.get(r.get("turn_id"))
        if i is not None and r.get("output_text") is not None and r.get("error") is None \
                and ds.turn.repeat[i] == ds.turn.repeat[i]:  # a turn without a repeat number is no unit
            out.setdefault((r["arm"], r["case"], int(ds.turn.repeat[i]), int(r.get("step") or 0)), r["output_text"])
    return out


def _load_view(ledger: Ledger) -> Ledger:
    """The ledger without its turns and their calls (the bulk of a large one, which the reader may
    hold only as columns), for :func:`load_summary`: it reads the load stages' own records (kind
    ``load``) and metrics scrapes."""
    return Ledger(path=ledger.path, header=ledger.header, warnings=ledger.warnings,
                  records=list(ledger.of_kind(*(k for k in KINDS if k not in ("call", "turn")))))


def rates_table(rates: dict[str, dict[str, Any]]) -> list[RateRow]:
    """Per arm, the measured rates a projection uses: prefill_s = prefill_a_s + uncached / prefill_tps."""
    out: list[RateRow] = []
    for arm, r in rates.items():
        m = prefill_model(r["prefill_points"])
        out.append({"arm": arm, "decode_tps": r["decode_tps"], "decode_source": r["decode_source"],
                    "prefill_tps": 1.0 / m["b"] if m and m["b"] > 0 else None,
                    "prefill_a_s": m["a"] if m else None, "prefill_source": r["prefill_source"],
                    "prefill_input_range": [m["min_input"], m["max_input"]] if m else None,
                    "cached_share": r["cached_share"], "cached_share_source": r["cached_share_source"],
                    "refused": r.get("refused")})
    return out


def comparison_reasons(comps: list[Comparison], contradictions: dict[str, dict[str, str]],
                       engaged_rows: Sequence[EngagedRow], pair_drift: list[PairDrift] | None = None
                       ) -> dict[tuple[str, str], list[Reason]]:
    """Per comparison (arm, vs): why it may not be cited beyond the guard's own rules — drift that biases it
    (:func:`.drift.pair_drift`); a knob in which the two arms differ whose value one arm contradicts; and for
    the comparison that measures a lever, that lever not engaging on the arm that has it, or the reference
    arm using it too (measured, not unknown)."""
    used = {e["arm"]: e for e in engaged_rows}
    drifts = {(d.arm, d.vs): d for d in pair_drift or []}
    out: dict[tuple[str, str], list[Reason]] = {}
    for c in comps:
        reasons: list[Reason] = []
        d = drifts.get((c.arm, c.vs))
        if d is not None and d.refuses:
            reasons.append((DRIFT, f"drift: {d.reason}"))
        reasons += [(CONTRADICTION, f"{a}: {contradictions[a][k]}") for k in c.knobs for a in (c.vs, c.arm)
                    if k in contradictions[a]]
        if c.lever:  # whether each arm used the lever: its module says where the row holds it
            if used_in(used.get(c.arm, {}), c.lever) is False:
                reasons.append((NOT_ENGAGED, f"the lever {c.lever} did not engage on {c.arm}"))
            if used_in(used.get(c.vs, {}), c.lever) is True:
                reasons.append((REFERENCE_USED, f"the reference {c.vs} used {c.lever} too (it is meant to lack it)"))
        if reasons:
            out[(c.arm, c.vs)] = reasons
    return out


def cost_citability(baseline: str, cell_list: Sequence[CellRow], mults: Sequence[MultiplierRow],
                    drift_rows: Sequence[DriftRow], common_row: CommonDrift | None = None) -> Citability:
    """Per arm, whether its cost row may be cited: the baseline by its own measurements, every other
    arm by its total multiplier against the baseline (the comparison "GPU-hours returned" comes from);
    and no arm whose own speed drifted, nor any arm where the machine's speed changed for every arm alike
    (*common_row*: ``drift_common``; a cost per turn is an absolute figure: every drift biases it).
    Takes the summary's own rows, so a command can apply it to a summary read back."""
    drifted = drifted_arms(drift_rows)
    common = "the machine's speed changed during the run, alike for every arm (drift_common)" \
        if (common_row or {}).get("detected") else None
    out = {baseline: measurement_guard([c for c in cell_list if c["arm"] == baseline], drifted)}
    for m in mults:
        if m["scope"] == "total" and m["vs"] == baseline:
            ok, why = m["citable"], m["reason"]
            if m["arm"] in drifted:
                ok, why = False, "; ".join(filter(None, [why, f"drifted ({drifted[m['arm']]})"]))
            out[m["arm"]] = (ok, why)
    if common:
        out = {a: (False, "; ".join(filter(None, [why, common]))) for a, (_, why) in out.items()}
    return out


def projection_costs(summary: Mapping[str, Any], gpu_hour_usd: float | None = None) -> list[CostRow]:
    """What one turn of the summary's projected scenario costs per arm (:func:`.cost.scenario_costs`;
    *gpu_hour_usd* where an arm's conditions give no price), each row cited as :func:`cost_citability`
    allows.  Reads only the summary, so it applies to one read back."""
    cite = cost_citability(summary["baseline"], summary["cells"], summary["multipliers"], summary["drift"],
                           summary.get("drift_common"))
    return scenario_costs(summary["projection"]["arms"], {a["name"]: a["conditions"] for a in summary["arms"]},
                          summary["baseline"], gpu_hour_usd, cite)


CHECK_ENV = "LEVERBENCH_CHECK_SUMMARY"


def summarize(ledger: Ledger, *, scenario: tuple[int, int] | None = None,
              gpu_hour_usd: float | None = None) -> Summary:
    """The summary of *ledger* (checked against the schema when :data:`CHECK_ENV` is set)."""
    out = _summarize(ledger, scenario=scenario, gpu_hour_usd=gpu_hour_usd)
    if os.environ.get(CHECK_ENV, "") not in ("", "0"):
        from ..schema.check import summary_problems  # noqa: PLC0415 (pydantic)

        problems = summary_problems(out)
        if problems:
            raise SummaryMismatch(f"summary of {ledger.path} departs from leverbench.summary/1: "
                                  + "; ".join(map(str, problems[:5])))
    return out


def _summarize(ledger: Ledger, *, scenario: tuple[int, int] | None,
               gpu_hour_usd: float | None) -> Summary:
    ds = dataset(ledger)
    warnings: list[RunWarning] = list(ds.warnings)
    knobs, contradictions = {}, {}
    for a in ds.arms:
        knobs[a], contradictions[a] = ds.knobs_and_contradictions(a)
        warnings += [RunWarning(WarningKind.CONTRADICTION,
                                f"arm {a!r}: {x}; the comparisons in which {k} differs are not citable", a)
                     for k, x in contradictions[a].items()]
    comps = comparisons(ds.arms, ds.baseline, knobs, {a: ds.role(a) for a in ds.arms})
    for c in comps:
        if not c.knobs:
            warnings.append(RunWarning(WarningKind.REPLICATE, f"arms {c.arm!r} and {c.vs!r} differ in no knob (same "
                                       "engine, flags, requests and declared conditions): a replicate, not a lever; "
                                       "declare what differs in their conditions", c.arm))
    repeat_rows, repeat_reasons, w = repeats(ds, comps, ledger.of_kind("cache_reset"))
    warnings += w
    tool_rows = tools_rows(ledger.columns("call"), ledger.of_kind("load"))
    tool_reasons, w = tools_reached(tool_rows, comps)
    warnings += w
    drift_list, w = drift(ds)
    warnings += w
    pair_drift = pair_drifts(ds, comps)
    for d in pair_drift:
        if d.refuses:
            warnings.append(RunWarning(WarningKind.DRIFT_DIFFERENTIAL, f"{d.arm} vs {d.vs}: {d.reason}; the "
                                       "comparison is not citable", d.arm))
    # interleaved and not refused (blocked order refuses an undetermined drift); fewer than 3 sentinels: drift_unknown
    undetermined = [d for d in pair_drift if d.undetermined and not d.refuses and d.decode.low is not None]
    if undetermined:
        tol = ds.config["experiment"].get("drift_tolerance", 0.10)
        warnings.append(RunWarning(WarningKind.DRIFT_UNDETERMINED, "drift undetermined: the sentinels of "
                                   + "; ".join(f"{d.arm} vs {d.vs} (decode {d.decode.words()})" for d in undetermined)
                                   + f" cannot rule out that the two arms drifted apart by more than {tol:.0%} over "
                                   "the run; no drift was seen, so the comparisons are cited, but a drift that hit "
                                   "one arm only would bias them: more repeats (each adds a sentinel) tell"))
    for a in ds.arms:
        unknown = sorted(k for k, v in knobs[a].items() if v == UNKNOWN)
        if unknown:
            warnings.append(RunWarning(WarningKind.KNOB_UNKNOWN, f"arm {a!r}: {', '.join(unknown)} unknown (another "
                                       "arm's endpoint stated it, this one's did not): its comparisons that may "
                                       "differ in it are not controlled; declare it in the arm's conditions", a))
    metrics_rows = server_metrics([m for m in ds.metrics if m["when"] in ("before", "after")], ds.arms, ds.header)
    own = own_metrics(metrics_rows)
    for r in metrics_rows:
        if r["attribution"] == "mixed":
            warnings.append(RunWarning(WarningKind.MIXED_METRICS, f"server metrics of {r['arm']!r} are mixed with "
                                       f"{', '.join(r['mixed_with'])} (one endpoint, overlapping blocks): no per-arm "
                                       "figure is taken from them", r["arm"]))
    probe_own = own_metrics(server_metrics(ds.metrics, ds.arms, ds.header, "probes-before", "probes-after"))
    eng, w = engaged(ds, own, knobs, ledger.of_kind("load"))
    warnings += w
    common_trend = common(ds, pair_drift)
    adjusted = adjusted_turn_s(ds, common_trend)
    common_row: DriftCommon = {**common_trend, "adjusted": adjusted is not None}
    cell_list = cells(ds, turn_s=adjusted)
    total_list = totals(ds, cell_list)
    comp_reasons = comparison_reasons(comps, contradictions, eng, pair_drift)
    for key, more in [*repeat_reasons.items(), *tool_reasons.items()]:
        comp_reasons[key] = [*comp_reasons.get(key, []), *more]
    mults = multipliers(ds, cell_list, total_list, comps, comp_reasons)
    load_view = _load_view(ledger)
    load_rows = load_summary(load_view)
    models = rate_models(ds, load_rows, own)
    decomp = decomposition(ds)
    probe_list, w = probes(ds, decomp, models)
    warnings += w
    server = server_account(ds)
    for s in server:
        if s["prefill_disagrees"] or s["decode_disagrees"]:
            what = " and ".join(p for p, bad in (("prefill", s["prefill_disagrees"]), ("decode", s["decode_disagrees"]))
                                if bad)
            warnings.append(RunWarning(
                WarningKind.CLIENT_SERVER_DISAGREE,
                f"client and server disagree on {what} for {s['arm']}/{s['case']}: client prefill "
                f"{s['client_prefill_s']:.2f} s vs server {s['server_prefill_s']:.2f} s, client decode "
                f"{s['client_decode_s']:.2f} s vs server {s['server_decode_s']:.2f} s per turn", s["arm"], s["case"]))
    for c in cell_list:
        if c["failed_calls"] or c["failed_turns"]:
            warnings.append(RunWarning(WarningKind.FAILED_CALLS, f"{c['arm']}/{c['case']}: {c['failed_turns']} failed "
                                       f"turn(s), {c['failed_calls']} failed call(s); its multipliers are not citable",
                                       c["arm"], c["case"]))
    for m in mults:
        if not m["controlled"] and m["scope"] == "total":
            warnings.append(RunWarning(WarningKind.UNCONTROLLED, f"uncontrolled comparison: {m['arm']} vs {m['vs']} "
                                       f"differ in {len(m['knobs'])} knobs ({', '.join(m['knobs'])}); the multiplier "
                                       "mixes their effects", m["arm"]))
    variant_cells = cells(ds, list(ds.variants)) if ds.variants else []
    for c in cell_list + variant_cells:
        if c["empty_answers"]:
            warnings.append(RunWarning(WarningKind.EMPTY_ANSWER,
                                       f"{c['arm']}/{c['case']}: {c['empty_answers']} call(s) "
                                       "used all of max_tokens and returned no visible answer (reasoning or nothing): "
                                       "the turn did not do its job", c["arm"], c["case"]))
        if c["step_limited"]:
            warnings.append(RunWarning(WarningKind.STEP_LIMIT,
                                       f"{c['arm']}/{c['case']}: {c['step_limited']} turn(s) were "
                                       "cut by the step limit", c["arm"], c["case"]))
    warnings += load_warnings(load_rows)
    model_of = {m["arm"]: m for m in models}
    tt = turns(ds)
    texts = _texts(ledger, ds) if ds.config["experiment"].get("store_text") else None
    volume = {(m["arm"], m["vs"]) for m in mults if "volume" in m["reason_codes"]}
    ews = [equal_work(ds, c, model_of.get(c.arm), probe_list, tt, texts, adjusted, (c.arm, c.vs) in volume)
           for c in comps]
    exp = ds.config["experiment"]
    ew_rows = equal_work_rows(ews, mults, ds.cases, (exp.get("volume_tolerance_cell", 0.20),
                                                     exp.get("volume_tolerance_total", 0.05)))
    rates = arm_rates(ds, probe_list, decomp, own, probe_own)
    scen = scenario or _largest_case_scenario(ds, cell_list)
    queue = {a: r["queue_s_per_request"] for a, r in own.items() if r.get("queue_s_per_request") is not None}
    projection = project(ds, rates, eng, *scen, multipliers=mults, queue_s=queue,
                         models={m["arm"]: m for m in models}) if scen else None
    failed_calls, retried = _failed_and_retried(ds)
    if retried:
        warnings.append(RunWarning(WarningKind.RETRIED, f"{retried} failed attempt(s) were retried (retries = "
                                   f"{ds.config['experiment'].get('retries')}); each attempt is in the ledger, and the "
                                   "cells that hold them are not citable"))
    engines, w = engines_section(ds.header, ledger.of_kind("engine_start"), ledger.of_kind("engine_stop"),
                                 ledger.of_kind("engine_warmed"))
    warnings += w
    gpu, w = gpu_section(ds, ledger.of_kind("gpu"), ledger.of_kind("load"))
    warnings += w
    verdict_rows, adaptive = verdicts(ds, comps, mults, ews)
    citability = cost_citability(ds.baseline, cell_list, mults, drift_list, common_row)
    cost_rows = costs(total_list, {a: ds.conditions(a) for a in ds.arms}, ds.baseline, gpu_hour_usd, citability)
    load_calls = level_calls(load_view.of_kind("load")) if load_rows else {}
    capacity = capacity_rows(load_rows, {a: ds.conditions(a) for a in ds.arms}, gpu_hour_usd, calls=load_calls)
    under_load = load_levers(comps, load_rows, load_calls,
                             ds.config["experiment"].get("volume_tolerance_total", 0.05), comp_reasons, capacity,
                             knobs)
    recorded, w = fidelity(ledger, ds)
    warnings += w
    arms_h = ds.header["arms"]
    return {
        "schema": SUMMARY_SCHEMA,
        "run": {"run_id": ds.header.get("run_id"), "name": ds.config["experiment"]["name"],
                "started_at": ds.header.get("started_at"), "tool_version": ds.header.get("tool_version"),
                "host": ds.header.get("host"), "order": ds.config["experiment"].get("order"),
                "repeats": ds.config["experiment"].get("repeats"), "concurrency": 1,
                "calls": len(ds.call) + len(ds.probes) + len(ds.sentinels), "failed_calls": failed_calls,
                "resumed": sum(1 for _ in ledger.of_kind("resume"))},
        "baseline": ds.baseline,
        "arms": [{"name": a, "role": arms_h.get(a, {}).get("role"),
                  "conditions": arms_h.get(a, {}).get("conditions", {}), "knobs": knobs[a],
                  "discovered": redact_tree(arms_h.get(a, {}).get("discovered", {})),
                  "model": arms_h.get(a, {}).get("model")}
                 for a in ds.arms],
        "levers": levers(ds.arms, knobs, mults, eng, cost_rows),
        "verdicts": verdict_rows,
        "adaptive": adaptive,
        "cases": ds.cases,
        "cells": cell_list,
        "totals": total_list,
        "multipliers": mults,
        "variant_cells": variant_cells,
        "prompt_discipline": prompt_discipline(ds, variant_cells, cell_list),
        "reasoning": reasoning_split(ds),
        "repeats": repeat_rows,
        "tools": tool_rows,
        "decomposition": decomp,
        "probes": probe_list,
        "server": server,
        "time_shares": cell_shares(ds),
        "engaged": eng,
        "projection": projection,
        "rates": rates_table(rates),
        "rate_models": models,
        "load": load_rows,
        "load_curves": sweep_curves(load_rows),
        "load_levers": under_load,
        "capacity": capacity,
        "server_metrics": metrics_rows,
        "cost": cost_rows,
        "drift": drift_list,
        "drift_pairs": [d.as_dict() for d in pair_drift],
        "drift_common": common_row,
        "equal_work": ew_rows,
        "engines": engines,
        "gpu": gpu,
        "tolerances": {"volume_cell": ds.config["experiment"].get("volume_tolerance_cell"),
                       "volume_total": ds.config["experiment"].get("volume_tolerance_total"),
                       "probe_agreement": (ds.config.get("probes") or {}).get("tolerance", 0.05),
                       "drift": ds.config["experiment"].get("drift_tolerance")},
        "warnings": [w.text for w in warnings],
        "warning_items": [w.as_dict() for w in warnings],
        **({"recorded": recorded} if recorded is not None else {}),
    }
