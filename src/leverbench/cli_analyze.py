"""``leverbench analyze TRAFFIC``: where the time of recorded traffic goes, and which lever to try first.

A thin command over :func:`analyze_file`, which reads the traffic (columnar:
:mod:`leverbench.workload.traces`) and the rates and calls the pure analysis
in :mod:`leverbench.analysis.traffic`; :mod:`leverbench.report.traffic` renders
the result (terminal tables, Markdown, JSON or one self-contained HTML page).
Rates come from where they are best known, field by field: by hand
(``--prefill-tps``/``--decode-tps``) > a run directory (``--rates RUN_DIR``)
> fitted from the traffic's own latencies.  The analysis and the readers load
on first use, so ``leverbench --help`` does not load polars.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .errors import BadInput
from .workload.traces.names import FORMATS


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
    from .analysis.traffic import (analyze_traffic, choose_rates, fit_rates, hand_rates,  # noqa: PLC0415
                                   has_latencies, rates_from_summary, with_drafter)
    from .workload.traces import load_traffic  # noqa: PLC0415

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
    if need_fit and has_latencies(load.frame):
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
                             cached_meaning=_cached_note(load.notes))
    result["input"] = {"path": str(load.path), "format": load.fmt, "rows": load.rows, "used": load.used,
                       "skipped": load.skipped, "first_skipped_line": load.first_skipped_line, "notes": load.notes}
    result["fits"] = fits
    result["rates_used"] = sorted({r.source for r in book.values()})
    return result


def _cached_note(notes: list[str]) -> str | None:
    """The importer's note on what cached tokens mean, for the conditions."""
    return next((n for n in notes if "cached" in n), None)


# ---------------------------------------------------------------- the command


OUTPUTS = ("table", "md", "json", "html")


@click.command(name="analyze")
@click.argument("traffic", type=click.Path(path_type=Path))
@click.option("--trace-format", "fmt", type=click.Choice(FORMATS), help="Format of TRAFFIC (default: detected).")
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
@click.option("--format", "out_fmt", type=click.Choice(OUTPUTS + FORMATS), default="table", show_default=True,
              metavar="[" + "|".join(OUTPUTS) + "]",
              help="table: terminal tables; md: Markdown; json: the whole result; html: one self-contained page "
                   "(fetches nothing, runs no script).  A trace format's name here (the old spelling) means "
                   "--trace-format.")
@click.option("--out", "out_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the md, json or html output to this file (and print its path) instead of stdout.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--salvage", is_flag=True,
              help="Read a damaged leverbench ledger (TRAFFIC or --rates) past its bad lines, each one reported.")
def analyze_command(traffic: Path, fmt: str | None, columns: str | None, rates_dir: Path | None,
                    prefill_tps: float | None, prefill_a_s: float, decode_tps: float | None,
                    drafter_speedup: float | None, answer_cap: int | None, cached_share: float | None,
                    gpus: float | None, gpu_hour_usd: float | None, out_fmt: str, out_path: Path | None,
                    as_json: bool, salvage: bool) -> None:
    """Where the time of recorded traffic goes (prefill, decode, queueing), and which lever
    (prefix cache, drafter, shorter answers) to try first.

    TRAFFIC is a Mooncake, Azure, TraceLab (replay CSV or round JSONL), `vllm bench serve`
    result, AIPerf profile_export.jsonl, leverbench ledger or generic CSV/JSONL file.
    Large logs (generic CSV/JSONL, Azure, TraceLab replay) are read columnar, in bounded
    memory: tens of millions of calls take seconds, and a log larger than memory is fine.
    """
    if out_fmt in FORMATS:
        fmt, out_fmt = fmt or out_fmt, "table"
    if as_json:
        out_fmt = "json"
    if out_path is not None and out_fmt == "table":
        raise click.UsageError("--out writes --format md, json or html")
    result = analyze_file(traffic, fmt=fmt, columns=columns, rates_dir=rates_dir, prefill_tps=prefill_tps,
                          prefill_a_s=prefill_a_s, decode_tps=decode_tps, drafter_speedup=drafter_speedup,
                          answer_cap=answer_cap, cached_share=cached_share, gpus=gpus, gpu_hour_usd=gpu_hour_usd,
                          salvage=salvage)
    from .report import traffic as report  # noqa: PLC0415

    if out_fmt == "table":
        from rich.console import Console  # noqa: PLC0415

        report.render_terminal(result, Console() if Console().is_terminal else Console(width=150))
        return
    text = report.RENDER[out_fmt](result)
    if out_path is None:
        click.echo(text)
        return
    out_path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    click.echo(str(out_path))
