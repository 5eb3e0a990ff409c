"""``leverbench analyze TRAFFIC``: where the time of recorded traffic goes, and which lever to try first.

A thin command over :func:`analyze_file`, which reads the traffic and the rates
and calls the pure analysis in :mod:`leverbench.analysis.traffic`.
Rates come from where they are best known, field by field: by hand
(``--prefill-tps``/``--decode-tps``) > a run directory (``--rates RUN_DIR``)
> fitted from the traffic's own latencies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .errors import BadInput
from .analysis.traffic import (PHASES, analyze_traffic, choose_rates, fit_rates, hand_rates, rates_from_summary,
                               summarize_skips, with_drafter)
from .workload.traces import FORMATS, load_traffic


def _run_cost_defaults(summary: dict[str, Any]) -> tuple[float | None, float | None]:
    """(gpus, gpu_hour_usd) declared in the run's baseline arm conditions, if any."""
    base = next((a for a in summary.get("arms") or [] if a.get("name") == summary.get("baseline")), {})
    cond = base.get("conditions") or {}
    gpus = cond.get("gpus")
    usd = cond.get("gpu_hour_usd")
    return (float(gpus) if gpus is not None else None), (float(usd) if usd is not None else None)


def analyze_file(traffic: str | Path, *, fmt: str | None = None, columns: str | None = None,
                 rates_dir: str | Path | None = None, prefill_tps: float | None = None,
                 prefill_a_s: float = 0.0, decode_tps: float | None = None, drafter_speedup: float | None = None,
                 answer_cap: int | None = None, cached_share: float | None = None, gpus: float | None = None,
                 gpu_hour_usd: float | None = None, salvage: bool = False) -> dict[str, Any]:
    """Read ``traffic`` and the rates, analyse, and return the JSON-ready result.

    The result is :func:`~leverbench.analysis.traffic.analyze_traffic`'s, plus
    ``input`` (file, format, rows used and skipped with reasons, notes),
    ``fits`` (the per-model fits when rates were fitted from the traffic) and
    ``rates_used`` (in words).  *salvage*: read a leverbench ledger (TRAFFIC or ``rates_dir``) past
    its bad lines.
    """
    load = load_traffic(traffic, fmt, columns=columns, salvage=salvage)
    hand = hand_rates(prefill_tps, decode_tps, prefill_a_s)
    run = None
    if rates_dir is not None:
        from .report.files import summarize_dir  # noqa: PLC0415

        summary = summarize_dir(Path(rates_dir), salvage=salvage)
        run = rates_from_summary(summary, f"run {rates_dir}")
        run_gpus, run_usd = _run_cost_defaults(summary)
        gpus = gpus if gpus is not None else run_gpus
        gpu_hour_usd = gpu_hour_usd if gpu_hour_usd is not None else run_usd
    fitted, fits = None, []
    need_fit = run is None and not ("prefill_tps" in hand and "decode_tps" in hand)
    if need_fit and any(c.latency_s is not None for c in load.calls):
        fitted, fits = fit_rates(load.calls, cached_served=load.cached_served)
        if not fitted and not hand:
            reasons = "; ".join(f"{f['model']}: {f.get('refused') or f.get('prefill_refused')}" for f in fits)
            raise BadInput(f"{load.path}: could not fit rates from the traffic's latencies ({reasons}); "
                           "give --rates RUN_DIR or --prefill-tps and --decode-tps")
    book = with_drafter(choose_rates(hand, run, fitted), drafter_speedup)
    # queueing cannot be told apart from prefill when the prefill rate was fitted from these same TTFTs
    fitted_prefill = any(r.source.startswith("fitted") and "prefill_tps by hand" not in r.source for r in book.values())
    result = analyze_traffic(load.calls, book, cached_served=load.cached_served, queue_from_ttft=not fitted_prefill,
                             answer_cap=answer_cap, assumed_cached_share=cached_share,
                             gpus=gpus if gpus is not None else 1.0, gpu_hour_usd=gpu_hour_usd,
                             cached_meaning=_cached_note(load.notes))
    result["input"] = {"path": str(load.path), "format": load.fmt, "rows": load.rows, "used": load.used,
                       "skipped": load.skipped, "first_skipped_line": load.first_skipped_line, "notes": load.notes}
    result["fits"] = fits
    result["rates_used"] = sorted({r.source for r in book.values()})
    return result


def _cached_note(notes: list[str]) -> str | None:
    """The importer's note on what cached tokens mean, for the conditions."""
    return next((n for n in notes if "cached" in n), None)


# ---------------------------------------------------------------- printing


def _n(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "–"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _p(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.1%}" if abs(x) < 0.1 else f"{x:.0%}"


def _table(title: str, headers: list[str], rows: list[list[str]], right_from: int = 1,
           left: tuple[int, ...] = ()) -> Table:
    t = Table(title=Text(title), title_justify="left", show_lines=False)
    for i, h in enumerate(headers):
        t.add_column(Text(h), justify="right" if i >= right_from and i not in left else "left", overflow="fold")
    for r in rows:
        t.add_row(*[Text(c) for c in r])
    return t


def render(result: dict[str, Any], console: Console) -> None:
    inp = result["input"]
    head = (f"{inp['path']} ({inp['format']}): {inp['used']:,} calls used, "
            f"{sum(inp['skipped'].values()):,} skipped ({summarize_skips(inp['skipped'])})")
    console.print(Text(head, style="bold"))
    for note in inp["notes"]:
        console.print(Text("  " + note))
    console.print(Text("Rates used: " + "; ".join(result["rates_used"])))

    rows = []
    for scope, r in result["rates"].items():
        rows.append([scope if scope != "*" else "all calls", _n(r["prefill_tps"]), _n(r["prefill_a_s"]),
                     _n(r["decode_tps"]), (f"{r['drafter_speedup']:.2f}x" if r["drafter_speedup"] else "–"),
                     r["source"] if result["fits"] else
                     f"{r['source']} (prefill: {r['prefill_source'] or '–'}; decode: {r['decode_source'] or '–'})"])
    console.print(_table("Rates", ["scope", "prefill tok/s", "a s", "decode tok/s", "drafter", "source"], rows, 1,
                         left=(5,)))
    if result["fits"]:
        rows = [[f["model"], str(f["points"]), f.get("method") or "", _n(f.get("decode_tps")), _n(f.get("r2")),
                 _n(f.get("prefill_tps")), _n(f.get("prefill_r2")), f.get("refused") or f.get("prefill_refused") or ""]
                for f in result["fits"]]
        console.print(_table("Fits from the traffic (decode: least squares on latency; prefill: on TTFT, else on "
                             "latency − output/decode_tps, against uncached input)",
                             ["model", "points", "decode fit", "decode tok/s", "R²", "prefill tok/s", "prefill R²",
                              "refused"], rows, left=(2, 7)))

    d = result["distribution"]
    rows = []
    for name in ("input_tokens", "output_tokens", "cached_tokens"):
        s = d.get(name)
        if s:
            rows.append([name.replace("_", " "), *[_n(s[k], 4) for k in ("p50", "p90", "p99", "mean", "max")]])
    console.print(_table("Lengths (tokens)", ["", "p50", "p90", "p99", "mean", "max"], rows))

    q = result["queue"]

    def phase_row(label: str, b: dict[str, Any], call_share: float | None) -> list[str]:
        shown = [p for p in PHASES if p != "queue" or q["measured"]]
        secs = [_n(b[f"{p}_s"]) if p in shown else "–" for p in PHASES]
        shares = [_p(b[f"{p}_share"]) if p in shown else "–" for p in PHASES]
        return [label, f"{b['calls']:,}", _p(call_share), *secs, *shares, b["dominant"] or "–"]

    rows = [phase_row("all calls", result["overall"], 1.0)] + [phase_row(b["bucket"], b, b["call_share"])
                                                               for b in result["buckets"]]
    console.print(_table(f"Where the time goes, by input length (queue: {q['note']})",
                         ["input", "calls", "of calls", "prefill s", "decode s", "queue s", "prefill", "decode",
                          "queue", "dominant"], rows))

    rows = []
    for i, l in enumerate(result["levers"], start=1):
        if l["estimated"]:
            rng = f" ({_p(l['range'][0])} to {_p(l['range'][1])})" if l.get("range") else ""
            rows.append([str(i), l["lever"], l["phase"], l.get("parameter") or "", _n(l["saved_s"]),
                         _p(l["saved_share"]) + rng, _n(l["saved_s_per_call"]), _n(l["gpu_hours_per_1000_calls"]),
                         _n(l["usd_per_1000_calls"]) if l["usd_per_1000_calls"] is not None else "–"])
        else:
            rows.append(["–", l["lever"], l["phase"], l["reason"], "?", f"≤ {_p(l['ceiling_share'])}", "?", "?", "?"])
    console.print(_table("Levers, ranked by time saved (range: " + "; ".join(
        sorted({l['range_source'] for l in result['levers'] if l.get('range_source')})) + ")",
        ["#", "lever", "phase", "parameter", "saved s", "share (range)", "s/call", "GPU-h/1000 calls", "$/1000 calls"],
        rows, right_from=4, left=(0,)))

    rows = [[b["bucket"], *[_p(v) for v in b["levers"].values()]] for b in result["buckets"]]
    names = list(result["buckets"][0]["levers"]) if result["buckets"] else []
    console.print(_table("Lever saving as a share of each bucket's time", ["input", *names], rows))

    c = result["cost"]
    cost = (f"Modelled time: {c['seconds_per_call']:.3g} s per call = {c['gpu_hours_per_1000_calls']:.3g} GPU-hours "
            f"per 1,000 calls on {c['gpus']:g} GPU(s)")
    if c["usd_per_1000_calls"] is not None:
        cost += f" = ${c['usd_per_1000_calls']:,.2f} at ${c['gpu_hour_usd']:g}/GPU-hour"
    console.print(Text(cost))
    console.print()
    console.print(Text("Recommendation", style="bold"))
    console.print(Text(result["recommendation"]))


# ---------------------------------------------------------------- the command


@click.command(name="analyze")
@click.argument("traffic", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Format of TRAFFIC (default: detected).")
@click.option("--columns", help="Generic CSV/JSONL columns: input=COL,output=COL,cached=COL,latency=COL,ttft=COL,"
                                "model=COL,arrival=COL,session=COL (COL:ms for milliseconds).")
@click.option("--rates", "rates_dir", type=click.Path(path_type=Path),
              help="A leverbench run directory whose measured rates to use (its baseline arm; its drafter arm's speedup).")
@click.option("--prefill-tps", type=float, help="Prefill rate by hand, tokens/s (overrides --rates and fits).")
@click.option("--prefill-a-s", type=float, default=0.0, show_default=True,
              help="Fixed seconds per call before prefill, with --prefill-tps.")
@click.option("--decode-tps", type=float, help="Decode rate by hand, tokens/s (overrides --rates and fits).")
@click.option("--drafter-speedup", type=float, help="Decode speedup of a drafter (overrides the run's).")
@click.option("--answer-cap", type=click.IntRange(min=0), help="Answer-length cap in tokens (default: the median output).")
@click.option("--cached-share", type=float, help="Assume this share of each prompt is cached where the traffic records none.")
@click.option("--gpus", type=float, help="GPUs per server (default: the run's, else 1).")
@click.option("--gpu-hour-usd", type=float, help="Price of a GPU-hour, for $ per 1,000 calls.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--salvage", is_flag=True,
              help="Read a damaged leverbench ledger (TRAFFIC or --rates) past its bad lines, each one reported.")
def analyze_command(traffic: Path, fmt: str | None, columns: str | None, rates_dir: Path | None,
                    prefill_tps: float | None, prefill_a_s: float, decode_tps: float | None,
                    drafter_speedup: float | None, answer_cap: int | None, cached_share: float | None,
                    gpus: float | None, gpu_hour_usd: float | None, as_json: bool, salvage: bool) -> None:
    """Where the time of recorded traffic goes (prefill, decode, queueing), and which lever
    (prefix cache, drafter, shorter answers) to try first.

    TRAFFIC is a Mooncake, Azure, TraceLab (replay CSV or round JSONL), `vllm bench serve`
    result, AIPerf profile_export.jsonl, leverbench ledger or generic CSV/JSONL file.
    """
    from .report.jsonio import finite  # noqa: PLC0415

    result = analyze_file(traffic, fmt=fmt, columns=columns, rates_dir=rates_dir, prefill_tps=prefill_tps,
                          prefill_a_s=prefill_a_s, decode_tps=decode_tps, drafter_speedup=drafter_speedup,
                          answer_cap=answer_cap, cached_share=cached_share, gpus=gpus, gpu_hour_usd=gpu_hour_usd,
                          salvage=salvage)
    if as_json:
        click.echo(json.dumps(finite(result), indent=1, ensure_ascii=False, allow_nan=False))
        return
    console = Console() if Console().is_terminal else Console(width=150)
    render(result, console)
