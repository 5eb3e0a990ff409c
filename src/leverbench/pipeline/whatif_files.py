"""The library behind ``leverbench whatif``: a trace and a run in, the forecast (and its verification) out.

:func:`whatif_file` reads the traffic (:func:`~leverbench.workload.traces.load_traffic`), the run's summary
(its ledger, else its summary.json, checked: :func:`.traffic_files.run_summary`), plans the calls as trace
replay sends them and serves them on each arm (:mod:`leverbench.analysis.whatif.forecast`).  The run directory's
``whatif-verify.jsonl`` holds every verification of its forecasts (one JSON object a line, appended by
:func:`store_verification`); a later forecast carries their summary as ``track_record``.

:func:`verify_experiment` writes the experiment that serves the same slice for real on the run's arms
(the command runs it: only ``cli`` may start engines), and :func:`verify_result` compares.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..analysis.base.operating_point import sides, under_load
from ..analysis.whatif.arms import arm_specs
from ..analysis.whatif.forecast import forecast
from ..analysis.whatif.orders import ORDERS
from ..analysis.whatif.plan import plan_calls
from ..analysis.whatif.verify import compare, measured, track_record
from ..config.settings import RunSettings
from ..errors import BadInput
from ..ledger.reader import read_ledger
from ..workload.traces import load_traffic
from .traffic_files import run_summary

if TYPE_CHECKING:
    from ..json_types import JSONObject, JSONValue
    from ..schema.load_lever_rows import LoadLeverRow, OperatingPoint
    from ..schema.whatif_rows import Forecast, ForecastArm, VerificationArm, VerificationEntry

TRACK_FILE = "whatif-verify.jsonl"
VERIFY_STAGE = "whatif"


def run_dir_of(rates: Path) -> Path:
    """The run directory of ``--rates`` (a directory, its ledger.jsonl or its summary.json)."""
    rates = Path(rates)
    return rates if rates.is_dir() else rates.parent


def read_track(run_dir: Path) -> list[VerificationEntry]:
    """The verifications stored with a run (oldest first); a line that is not JSON is skipped."""
    path = Path(run_dir) / TRACK_FILE
    if not path.exists():
        return []
    out: list[VerificationEntry] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):  # as written, unchecked: track_record takes what it needs with defaults
            out.append(cast("VerificationEntry", obj))
    return out


def whatif_file(traffic: str | Path, rates: str | Path, *, arms: Sequence[str] | None = None,
                fmt: str | None = None, columns: str | None = None, speed: float = 1.0, scale_input: float = 1.0,
                scale_output: float = 1.0, requests: int | None = None, max_input_tokens: int | None = None,
                max_tokens: int | None = None, cache_tokens: float | None = None, block_tokens: int | None = None,
                cached_share: float | None = None, gpus: float | None = None, gpu_hour_usd: float | None = None,
                template_tokens: int = 0, orders: int | None = None, salvage: bool = False) -> Forecast:
    """Read the traffic and the run, serve the planned calls on each arm; the JSON-ready forecast plus
    ``input`` (the import), ``run`` (the rates' run) and ``track_record`` (earlier verifications)."""
    if cached_share is not None and not 0 <= cached_share < 1:
        raise BadInput(f"--cached-share must be in [0, 1) (got {cached_share})")
    if cache_tokens is not None and not cache_tokens >= 0:
        raise BadInput(f"--cache-tokens must be a number >= 0 (got {cache_tokens})")
    if gpus is not None and not 0 < gpus < math.inf:
        raise BadInput(f"--gpus must be a positive number (got {gpus})")
    if gpu_hour_usd is not None and not 0 <= gpu_hour_usd < math.inf:
        raise BadInput(f"--gpu-hour-usd must be a number >= 0 (got {gpu_hour_usd})")
    load = load_traffic(traffic, fmt, columns=columns, salvage=salvage)
    summary = run_summary(Path(rates), salvage=salvage)
    try:
        specs, left = arm_specs(summary, arms, cache_tokens=cache_tokens, block_tokens=block_tokens, gpus=gpus,
                                gpu_hour_usd=gpu_hour_usd)
    except BadInput as exc:
        raise BadInput(f"{rates}: {exc}") from None
    calls = load.calls if requests is None else load.calls[:requests]
    try:
        plan = plan_calls(load.calls, speed=speed, scale_input=scale_input, scale_output=scale_output,
                          requests=requests, max_input_tokens=max_input_tokens, max_tokens=max_tokens,
                          cached_served=load.cached_served, assumed_share=cached_share,
                          template_tokens=template_tokens)
    except ValueError as exc:
        raise BadInput(f"--speed, --scale-input, --scale-output: {exc}") from None
    if not plan.calls:
        raise BadInput(f"{load.path}: no call to serve ({', '.join(f'{n} {r}' for r, n in plan.left_out.items())})")
    potential = [c for c in calls if c.cached_tokens is not None] if not load.cached_served else []
    trace_share = (sum(c.cached_tokens for c in potential) / sum(c.input_tokens for c in potential)
                   if potential else None)
    result = forecast(plan, specs, summary.get("baseline") or specs[0].name, trace_cached_share=trace_share,
                      orders=ORDERS if orders is None else orders)
    result["notes"] = left + result["notes"]
    result["input"] = {"path": str(load.path), "format": load.fmt, "used": load.used, "skipped": load.skipped,
                       "notes": load.notes, "cached_served": load.cached_served}
    result["run"] = {"path": str(rates), "name": (summary.get("run") or {}).get("name"),
                     "baseline": summary.get("baseline")}
    result["track_record"] = track_record(read_track(run_dir_of(Path(rates))))
    result["operating_point"] = _operating_point(result, summary.get("load_levers") or [])
    result["under_load"] = under_load(summary.get("load_levers") or [])
    return result


def _operating_point(result: Forecast, load_levers: Sequence[LoadLeverRow]) -> OperatingPoint | None:
    """The traffic's operating point as served on the reference arm (simulated), with the side of each of the
    run's levers under load: each pair judged on the calls in flight of its own reference arm where it was served
    (:mod:`leverbench.analysis.base.operating_point`)."""
    points = {r["arm"]: r["operating_point"] for r in result["arms"] if r.get("operating_point")}
    ref = points.get(result["reference"])
    if ref is None:
        return None
    out: OperatingPoint = {**ref, "duration_source": f"each call's end-to-end time as simulated on arm "
                                                     f"{result['reference']!r}", "sides": []}
    for row in load_levers:
        out["sides"] += sides([row], points.get(row["vs"], ref))
    return out


# ---------------------------------------------------------------- verification


def verify_experiment(rates: Path, result: Forecast, *, salvage: bool = False) -> JSONObject:
    """The experiment (as the experiment file's JSON) that serves the forecast's calls for real: the run's own
    arms (those forecast), one trace stage with the same slice and scaling, no probes or sentinels, and one
    tiny case (an experiment needs one).  Needs the run's ledger (its header holds the experiment)."""
    run = run_dir_of(rates)
    if not (run / "ledger.jsonl").exists():
        raise BadInput(f"{rates}: --verify needs the run's ledger.jsonl (its header holds the experiment the arms "
                       "came from)")
    ledger = read_ledger(run, salvage=salvage)
    config, settings = ledger.header["config"], RunSettings.of_header(ledger.header["config"], ledger.path)
    names = [r["arm"] for r in result["arms"]]
    # (each a copy of the experiment file's arm as loaded: JSON, whatever keys it has)
    arms = [cast("JSONObject", dict(a)) for a in config.get("arms") or [] if a.get("name") in names]
    if not arms:
        raise BadInput(f"{run}: the run's experiment has none of the arms {', '.join(names)}")
    base: JSONValue = settings.baseline
    if base not in names:
        base = arms[0]["name"]
    for a in arms:
        a["role"] = "baseline" if a["name"] == base else ("treatment" if a.get("role") == "baseline" else a["role"])
    inp, opts = result["input"], result["plan"]
    stage: JSONObject = {"name": VERIFY_STAGE, "mode": "trace", "trace": str(Path(inp["path"]).resolve()),
                         "trace_format": inp["format"], "speed": opts["speed"], "scale_input": opts["scale_input"],
                         "scale_output": opts["scale_output"], "block_tokens": opts["block_tokens"]}
    for k, v in (("requests", opts.get("requests")), ("max_input_tokens", opts.get("max_input_tokens")),
                 ("max_tokens", opts.get("max_tokens"))):
        if v is not None:
            stage[k] = v
    exp = settings.declared()  # the run's own settings (not the keys an older version wrote that are none today)
    exp.update(name=f"{settings.name}-whatif-verify", repeats=1, baseline=base, sentinel_tokens=0, order="blocked")
    return {"experiment": exp, "arms": [*arms], "load": [stage],
            "cases": [{"name": "whatif-verify", "prompt": "Say OK.", "max_tokens": 1, "temperature": 0.0}]}


def verify_result(result: Forecast, verify_dir: Path) -> Forecast:
    """The forecast with each arm's measured figures and error (the verification run in ``verify_dir``)."""
    ledger = read_ledger(verify_dir)
    gpus = {r["arm"]: r.get("gpus") or 1.0 for r in result["arms"]}
    models = {r["arm"]: model for r in result["arms"] if (model := r.get("rate_model"))}
    meas = measured(ledger.records, VERIFY_STAGE, gpus, models)
    knobs = {r["arm"]: r.get("knobs") or {} for r in result["arms"]}
    out = compare(result, meas, knobs)
    out["verify_dir"] = str(verify_dir)
    return out


def _figure(row: Mapping[str, object], key: str) -> float | None:
    """A row's figure *key* (a number; None where it has none)."""
    v = row.get(key)
    return v if isinstance(v, (int, float)) else None


def _forecast_of(row: ForecastArm, key: str) -> float | None:
    """The forecast an error of a verified arm row compares: the row's figure; for the engine time
    (``service_s``), the rate model's seconds for the served calls (``measured.service_model_s``)."""
    if key == "service_s":
        m = row.get("measured")
        return m.get("service_model_s") if m else None
    return _figure(row, key)


def _verified_arm(r: ForecastArm) -> VerificationArm:
    """A verified arm row as its verification stores it: each compared figure forecast and measured, the errors,
    and whether one request at a time was the wrong assumption."""
    m = r["measured"]
    out: VerificationArm = {"arm": r["arm"], "forecast": {k: _forecast_of(r, k) for k in r["error"] or {}},
                            "measured": {k: _figure(m, k) if m else None for k in r["error"] or {}},
                            "error": r["error"]}
    check = r.get("assumption_check")
    if check:
        out["assumption_wrong"] = check["wrong"]
    return out


def store_verification(rates: Path, verified: Forecast) -> Path:
    """Append the verification's errors to the run's ``whatif-verify.jsonl``; returns its path."""
    path = run_dir_of(rates) / TRACK_FILE
    entry: VerificationEntry = {
        "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "traffic": verified["input"]["path"], "plan": verified["plan"], "verify_dir": verified.get("verify_dir"),
        "ranking": [r["arm"] for r in verified["ranking"]],
        "ranking_measured": [r["arm"] for r in verified.get("ranking_measured") or []],
        "ranking_matches": verified.get("ranking_matches"),
        "arms": [_verified_arm(r) for r in verified["arms"]]}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, allow_nan=False, default=str) + "\n")
    return path
