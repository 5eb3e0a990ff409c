"""``leverbench whatif``'s output: its tables and lines, for the terminal and as JSON.

Built from :func:`leverbench.pipeline.whatif_files.whatif_file`'s result (and :func:`~.whatif_files.verify_result`'s
when verified); nothing here computes a statistic, it only formats.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

from ..levers import registry
from .jsonio import finite
from .load_levers import operating_lines
from .table import Table

if TYPE_CHECKING:
    from ..schema.whatif_rows import Forecast


def _s(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def _p(x: float | None, sign: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x:+.1%}" if sign else f"{x:.1%}"


def arms_table(result: Forecast) -> Table:
    rows = []
    for r in result["arms"]:
        c = r.get("cache")
        slots = str(r["slots"]) + (f" ({r['assumptions']['slots']} known)" if r.get("assumptions") else "")
        rows.append([r["arm"], f"{_p(c['hit_share'])} hit" if c else "off", slots, _s(r["ttft_p50_s"]),
                     _s(r["ttft_p99_s"]), _s(r["e2e_p50_s"]), _s(r["e2e_p99_s"]), _s(r["output_tps"]),
                     _s(r["gpu_hours_per_1000_calls"]),
                     f"{r['usd_per_1000_calls']:,.2f}" if r.get("usd_per_1000_calls") is not None else "–"])
    cache = registry.prompt_cache()  # the lever the simulated cache is (the prefix cache)
    return Table("whatif", f"What if these {result['calls']:,} calls were served on each arm (simulated)",
                 ["arm", cache.words if cache else "cache", "slots", "TTFT p50 s", "TTFT p99 s", "e2e p50 s",
                  "e2e p99 s", "output tok/s", "GPU-h/1000 calls", "$/1000 calls"], rows,
                 notes=[f"{r['arm']}: {'; '.join(r['notes'])}" for r in result["arms"] if r.get("notes")])


#: The figures a verification compares (:class:`...schema.whatif_rows.OrderFigures`' and ``MeasuredArm``'s keys),
#: with their labels.
_VERIFIED: tuple[tuple[Literal["ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "output_tps",
                               "gpu_hours_per_1000_calls"], str], ...] = (
    ("ttft_p50_s", "TTFT p50 s"), ("ttft_p99_s", "TTFT p99 s"), ("e2e_p50_s", "e2e p50 s"), ("e2e_p99_s", "e2e p99 s"),
    ("output_tps", "output tok/s"), ("gpu_hours_per_1000_calls", "GPU-h/1000 calls"))


def verify_table(result: Forecast) -> Table | None:
    if not any(r.get("measured") for r in result["arms"]):
        return None
    rows = []
    for r in result["arms"]:
        m, e = r.get("measured"), r.get("error") or {}
        band, inside = r.get("orders"), r.get("in_order_range") or {}
        for k, label in _VERIFIED:
            span = band.get(k) if band else None
            rng = (f"{_s(span[0])}–{_s(span[1])}" + ("" if inside.get(k) is None else
                                                    " (measured inside)" if inside[k] else " (outside)")
                   if span is not None else "–")
            rows.append([r["arm"], label, _s(r.get(k)), rng, _s(m.get(k) if m else None), _p(e.get(k), sign=True)])
        if m and m.get("service_s"):
            rows.append([r["arm"], "engine time s (same calls)", _s(m["service_model_s"]), "–", _s(m["service_s"]),
                         _p(e.get("service_s"), sign=True)])
    notes = [f"{r['arm']}: measured {got['calls']} calls, {got['failed']} failed; "
             f"cache served {_p(got['cached_share'])} of the prompt tokens; the chat template added "
             f"{_s(got['template_tokens'])} tokens to each first prompt (forecast with "
             f"--template-tokens {result['plan'].get('template_tokens', 0)})"
             for r in result["arms"] if (got := r.get("measured"))]
    timed = [r for r in result["arms"] if (got := r.get("measured")) and got.get("service_s")]
    if timed:
        shared = [r["arm"] for r in timed if (r.get("slots") or 1) > 1]
        notes.append("engine time: the rate model's seconds for the verified calls as the engine served them "
                     "against the engine's own timings of them; its error is the engine's change of speed since "
                     "the calibration, apart from queueing" +
                     (f" (on {', '.join(shared)}, with several slots, it also holds the slowdown of calls served "
                      "together in a batch, which the model's per-call seconds leave out)" if shared else ""))
    notes += [f"{r['arm']}: {text}" for r in result["arms"]
              if (check := r.get("assumption_check")) and (text := check.get("text"))]
    if any(r.get("orders") for r in result["arms"]):
        notes.append("forecast: the mean over random orders of the calls that arrive at the same instant; "
                     "over those orders: the lowest and highest")
    return Table("verify", "Forecast vs measured (error = forecast / measured − 1)",
                 ["arm", "figure", "forecast", "over those orders", "measured", "error"], rows, notes=notes)


def ranking_table(result: Forecast) -> Table:
    measured = {r["arm"]: i for i, r in enumerate(result.get("ranking_measured") or [], start=1)}
    rows = [[str(i), r["arm"], ", ".join(r["levers"]) or "(the reference)", _s(r["gpu_hours_per_1000_calls"]),
             f"{r['multiplier']:.2f}x" if r.get("multiplier") else "–", _s(r["e2e_p50_s"]),
             *([str(measured.get(r["arm"], "–"))] if measured else [])]
            for i, r in enumerate(result["ranking"], start=1)]
    notes = []
    if measured:
        notes.append("the measured ranking " + ("matches the forecast" if result.get("ranking_matches") else
                                                "differs from the forecast"))
    return Table("ranking", f"Lever ranking: arms by GPU-hours per 1,000 calls, against arm {result['reference']!r}",
                 ["#", "arm", "knobs that differ", "GPU-h/1000 calls", "multiplier", "e2e p50 s",
                  *(["measured #"] if measured else [])], rows, notes=notes)


def cache_line(result: Forecast) -> str:
    c = result["cache"]
    if c.get("arm") is None:
        return (f"Prefix cache: no arm has one on; an unbounded cache would reuse "
                f"{_p(c.get('unbounded_hit_share'))} of the input tokens")
    cap = f"{c['capacity_tokens']:,.0f} tokens" if c.get("capacity_tokens") is not None else "unbounded"
    text = (f"Prefix cache (arm {c['arm']!r}): capacity {cap} in blocks of {c['block_tokens']} ({c['source']}), "
            + (f"kept as its engine does ({c['rule_text']}): " if c.get("rule_text") else "")
            + f"it serves {_p(c['hit_share'])} of the input tokens; an unbounded cache that never evicts would serve "
            f"{_p(c['upper_bound_hit_share'])} (the upper bound)")
    if c.get("trace_cached_share") is not None:
        text += f"; the trace's own count, as analyze reports it: {_p(c['trace_cached_share'])}"
    return text


def track_line(result: Forecast) -> str | None:
    t = result.get("track_record")
    if not t:
        return None
    worst = []
    for arm, figs in t["errors"].items():
        e = figs.get("e2e_p50_s")
        if e:
            worst.append(f"{arm} e2e p50 within {e['max_abs']:.0%}")
    return (f"Track record of this run's forecasts: {t['verifications']} verification(s) (last {t['last']}), the "
            f"ranking matched {t['ranking_matched']} time(s); " + ("; ".join(worst) or "no errors recorded"))


def whatif_tables(result: Forecast) -> list[Table]:
    return [t for t in (arms_table(result), verify_table(result), ranking_table(result)) if t is not None]


def whatif_lines(result: Forecast) -> list[str]:
    """The lines below the tables: the cache, the notes, the track record, the operating point and the levers
    under load against it."""
    out = [cache_line(result)]
    ca = result.get("cache_already_on")
    if ca:
        out.append(f"The traffic's cache was already on: it served {_p(ca['cached_share'])} of the input tokens "
                   f"({ca['calls']:,} calls), a realized saving of {ca['saved_prefill_s']:.3g} s of prefill.")
    out += result.get("notes") or []
    if result.get("left_out"):
        out.append("left out: " + ", ".join(f"{n} {r}" for r, n in result["left_out"].items()))
    t = track_line(result)
    if t:
        out.append(t)
    return out + operating_lines(result.get("operating_point"), result.get("under_load") or [])


def headline(result: Forecast) -> str:
    inp, plan = result["input"], result["plan"]
    return (f"{inp['path']} ({inp['format']}): {result['calls']:,} calls in {result['sessions']:,} session(s), "
            f"speed {plan['speed']:g}x, input × {plan['scale_input']:g}, output × {plan['scale_output']:g}; "
            f"rates from {result['run']['path']}")


def render_json(result: Forecast) -> str:
    return json.dumps(finite(result), indent=1, ensure_ascii=False, allow_nan=False, default=str)
