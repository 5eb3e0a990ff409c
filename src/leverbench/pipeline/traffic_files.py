"""The library function behind ``leverbench analyze``: a traffic log and rates in, the traffic analysis out.

:func:`analyze_file` reads the traffic (columnar: :mod:`leverbench.workload.traces`)
and the rates, and calls the pure analysis in :mod:`leverbench.analysis.traffic.analyze`;
:mod:`leverbench.report.traffic` renders its result.  Rates come from where they
are best known, field by field: by hand (``--prefill-tps``/``--decode-tps``) >
a run (``--rates RUN_DIR``: its ledger, else its summary.json, checked) > fitted from
the traffic's own latencies.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis.traffic.analyze import (
    analyze_traffic,
    choose_rates,
    fit_rates,
    hand_rates,
    has_latencies,
    rates_from_summary,
    with_drafter,
)
from ..analysis.traffic.rates import Rates
from ..analysis.traffic.recording import cache_served, recording_summary, timing_rates, traffic_calls
from ..analysis.whatif.arms import block_of, capacity_of
from ..analysis.whatif.forecast import cache_pass, prefix_cache_on
from ..analysis.whatif.plan import plan_calls
from ..analysis.whatif.prefix_cache import DEFAULT_BLOCK_TOKENS, DEFAULT_CACHE_TOKENS
from ..errors import BadInput
from ..report.jsonio import number
from ..workload.traces import load_traffic
from ..workload.traces.records import Rows
from .run_files import summarize_dir
from .summary_file import read_summary

if TYPE_CHECKING:
    from ..schema.summary import Summary
    from ..schema.traffic_rows import FiniteCache, FitRow, RecordingSummary, TrafficResult
    from ..workload.traces.records import TrafficLoad


NO_COUNTS = "no token counts (streamed without usage, and no llama.cpp timings)"


def run_summary(run: Path, *, salvage: bool = False) -> Summary:
    """A run's summary: computed from its ledger (RUN: a run directory that has one, or the ledger), else
    read back from its summary.json and checked (RUN: a run directory without a ledger, or a .json file)."""
    run = Path(run)
    if run.suffix == ".json" or (run.is_dir() and not (run / "ledger.jsonl").exists()
                                 and (run / "summary.json").exists()):
        return read_summary(run)
    return summarize_dir(run, salvage=salvage)


def _run_cost_defaults(summary: Summary) -> tuple[float | None, float | None]:
    """(gpus, gpu_hour_usd) declared in the run's baseline arm conditions, if any."""
    base = next((a for a in summary.get("arms") or [] if a.get("name") == summary.get("baseline")), None)
    cond = (base.get("conditions") if base else None) or {}
    return number(cond.get("gpus")), number(cond.get("gpu_hour_usd"))  # (numbers: the experiment checks them)


def analyze_file(traffic: str | Path, *, fmt: str | None = None, columns: str | None = None,
                 rates_dir: str | Path | None = None, prefill_tps: float | None = None,
                 prefill_a_s: float = 0.0, decode_tps: float | None = None, drafter_speedup: float | None = None,
                 answer_cap: int | None = None, cached_share: float | None = None, gpus: float | None = None,
                 gpu_hour_usd: float | None = None, salvage: bool = False, cache_tokens: float | None = None,
                 block_tokens: int | None = None) -> TrafficResult:
    """Read ``traffic`` and the rates, analyse, and return the JSON-ready result.

    The result is :func:`~leverbench.analysis.traffic.analyze.analyze_traffic`'s, plus
    ``input`` (file, format, rows used and skipped with reasons, notes),
    ``fits`` (the per-model fits when rates were fitted from the traffic) and
    ``rates_used`` (in words).  *salvage*: read a leverbench ledger (TRAFFIC or ``rates_dir``) past
    its bad lines.  Where the traffic shows potential prefix sharing (Mooncake hash ids), a cache of
    ``cache_tokens`` in blocks of ``block_tokens`` (default: the run's cache arm's, else
    :mod:`~leverbench.analysis.whatif.prefix_cache`'s defaults) is run over the calls (:func:`finite_cache`).
    """
    if cache_tokens is not None and not cache_tokens >= 0:
        raise BadInput(f"--cache-tokens must be a number >= 0 (got {cache_tokens})")
    recorded = read_recorded(traffic, fmt, columns)
    load = recorded[0] if recorded else load_traffic(traffic, fmt, columns=columns, salvage=salvage)
    hand = hand_rates(prefill_tps, decode_tps, prefill_a_s)
    run: Rates | None = None
    summary: Summary | None = None
    if rates_dir is not None:
        summary = run_summary(Path(rates_dir), salvage=salvage)
        run = rates_from_summary(summary, f"run {rates_dir}")
        run_gpus, run_usd = _run_cost_defaults(summary)
        gpus = gpus if gpus is not None else run_gpus
        gpu_hour_usd = gpu_hour_usd if gpu_hour_usd is not None else run_usd
    fitted: dict[str | None, Rates] | None = None
    fits: list[FitRow] = []
    need_fit = run is None and not ("prefill_tps" in hand and "decode_tps" in hand)
    if need_fit and recorded and recorded[2] is not None:  # the engine's own timings: measured, not fitted
        fitted = {None: recorded[2]}
    elif need_fit and has_latencies(load.frame):
        fitted, fits = fit_rates(load.frame, cached_served=load.cached_served)
        if not fitted and not hand:
            reasons = "; ".join(f"{f['model']}: {f.get('refused') or f.get('prefill_refused')}" for f in fits)
            raise BadInput(f"{load.path}: could not fit rates from the traffic's latencies ({reasons}); "
                           "give --rates RUN_DIR or --prefill-tps and --decode-tps")
    book = with_drafter(choose_rates(hand, run, fitted), drafter_speedup)
    # queueing cannot be told apart from prefill when the prefill rate was fitted from these same TTFTs
    fitted_prefill = any(r.source.startswith("fitted") and "prefill_tps by hand" not in r.source for r in book.values())
    result = analyze_traffic(load.frame, book, cached_served=load.cached_served, queue_from_ttft=not fitted_prefill,
                             answer_cap=answer_cap, assumed_cached_share=cached_share,
                             gpus=gpus if gpus is not None else 1.0, gpu_hour_usd=gpu_hour_usd,
                             cached_meaning=_cached_note(load.notes),
                             finite_cache=finite_cache(load, summary, cache_tokens, block_tokens),
                             load_levers=(summary.get("load_levers") if summary else None) or ())
    result["input"] = {"path": str(load.path), "format": load.fmt, "rows": load.rows, "used": load.used,
                       "skipped": load.skipped, "first_skipped_line": load.first_skipped_line, "notes": load.notes}
    result["fits"] = fits
    result["rates_used"] = sorted({r.source for r in book.values()})
    if recorded:
        result["recording"] = recorded[1]
    return result


def read_recorded(traffic: str | Path, fmt: str | None,
                  columns: str | None) -> tuple[TrafficLoad, RecordingSummary, Rates | None] | None:
    """A recording (``leverbench record``'s directory, or its exchanges.jsonl) as traffic: the load, the
    recording's own summary (:func:`~leverbench.analysis.traffic.recording.recording_summary`) and the engine's
    rates from its timings; None when *traffic* is no recording (or ``--trace-format`` names a trace format)."""
    from ..workload.recorded.traffic import read_recording, recording_file  # noqa: PLC0415

    if fmt is not None or recording_file(traffic) is None:
        return None
    if columns:
        raise BadInput(f"--columns applies to --trace-format generic only ({traffic} is a recording)")
    rec = read_recording(traffic)
    summary = recording_summary(rec.calls)
    rows = Rows()
    for reason, n in rec.skipped.items():
        rows.skipped[reason] += n
        rows.first_line[reason] = rec.first_skipped_line[reason]
    kept = {id(c): call for c, call in traffic_calls(rec.calls, summary)}
    for c in rec.calls:
        if id(c) in kept:
            rows.add(kept[id(c)], c.t_start)
        else:
            rows.skip(NO_COUNTS, c.line)
    if not kept:  # what needs no counts is said all the same, then why the rest cannot be
        from ..report.traffic_recording import recording_lines  # noqa: PLC0415
        said = [line for line in recording_lines(summary) if not line.startswith("Tokens:")]
        raise BadInput(f"{rec.path}: " + "; ".join(x.rstrip(".") for x in said) + f". None of its {len(rec.calls)} "
                       "calls has token counts (the engine sent no usage and no llama.cpp timings), so where the "
                       "time went and which lever pays cannot be said: have the agent send stream_options="
                       '{"include_usage": true} (vLLM: or start it with --enable-force-include-usage) and record '
                       "again")
    served = cache_served(rec.calls)
    notes = ["cached tokens: as the engine's prefix cache served them when recorded" if served else
             "cached tokens: none was served when recorded; shown: what a prefix cache could serve (the previous "
             "call's prompt within a turn; the prefix every turn shares, estimated, for a turn's first call)"]
    return rows.load(rec.path, "leverbench-recording", notes, cached_served=served), summary, timing_rates(rec.calls)


def finite_cache(load: TrafficLoad, summary: Summary | None, cache_tokens: float | None,
                 block_tokens: int | None) -> FiniteCache | None:
    """A finite prefix cache run over the calls where the log shows potential sharing (prefix block ids) and no
    cache served them; None otherwise.  Capacity and block size: as given, else those of the run's first arm
    with a prefix cache on (:mod:`~leverbench.analysis.whatif.arms`), else the defaults."""
    if load.cached_served or load.records is None or not any(c.prefix_blocks for c in load.records):
        return None
    cap: float | None = None
    src: str | None = None
    blk: int | None = None
    for arm in (summary.get("arms") if summary else None) or []:
        knobs = arm.get("knobs") or arm.get("conditions") or {}
        if prefix_cache_on(knobs):
            cap, src = capacity_of(knobs, int(number(knobs.get("slots")) or 1))  # (a number: the experiment checks it)
            blk, bsrc = block_of(knobs)
            src = f"arm {arm['name']!r}: capacity: {src}; block: {bsrc}"
            break
    if cache_tokens is not None:
        cap, src = float(cache_tokens), "--cache-tokens" + (f"; {src}" if src else "")
    if block_tokens is not None:
        blk = block_tokens
    if cap is None:
        cap, src = float(DEFAULT_CACHE_TOKENS), f"the default {DEFAULT_CACHE_TOKENS:,} tokens (give --cache-tokens)"
    plan = plan_calls(load.records, cached_served=False)
    return {**cache_pass(plan, cap, blk or DEFAULT_BLOCK_TOKENS), "source": src}


def _cached_note(notes: list[str]) -> str | None:
    """The importer's note on what cached tokens mean, for the conditions."""
    return next((n for n in notes if "cached" in n), None)
