"""``leverbench analyze TRAFFIC``: where the time of recorded traffic goes, and which lever to try first.

A thin command over :func:`leverbench.pipeline.traffic_files.analyze_file`;
:mod:`leverbench.report.traffic` renders the result (terminal tables,
Markdown, JSON or one self-contained HTML page).  Both load polars, so they
are imported on first use and ``leverbench --help`` does not load it.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import BadInput, RuntimeFailure
from ..workload.traces.names import FORMATS
from . import numbers as n
from .common import Command, console
from .report import of_rates

OUTPUTS = ("table", "md", "json", "html")


@click.command(name="analyze", cls=Command)
@click.argument("traffic", type=click.Path(path_type=Path))
@click.option("--trace-format", "fmt", type=click.Choice(FORMATS), help="Format of TRAFFIC (default: detected).")
@click.option("--columns", help="Generic CSV/JSONL columns: input=COL,output=COL,cached=COL,latency=COL,ttft=COL,"
                                "model=COL,arrival=COL,session=COL (COL:ms for milliseconds).")
@click.option("--rates", "rates_dir", type=click.Path(path_type=Path),
              help="A leverbench run whose measured rates to use (its baseline arm; its drafter arm's speedup): a run "
                   "directory (its ledger, else its summary.json) or a summary.json file.")
@click.option("--prefill-tps", type=n.TPS, help="Prefill rate by hand, tokens/s (overrides --rates and fits).")
@click.option("--prefill-a-s", type=n.SECONDS, default=0.0, show_default=True,
              help="Fixed seconds per call before prefill, with --prefill-tps.")
@click.option("--decode-tps", type=n.TPS, help="Decode rate by hand, tokens/s (overrides --rates and fits).")
@click.option("--drafter-speedup", type=n.SPEEDUP, help="Decode speedup of a drafter (overrides the run's).")
@click.option("--answer-cap", type=n.TOKENS_OR_NONE,
              help="Answer-length cap in tokens (default: the median output).")
@click.option("--cached-share", type=n.SHARE,
              help="Assume this share of each prompt is cached where the traffic records none.")
@click.option("--cache-tokens", type=n.CACHE, help="Where the traffic shows potential prefix sharing (Mooncake hash "
              "ids): the capacity of a finite prefix cache to estimate beside the unbounded one (default: the run's "
              "cache arm's, else 262,144 tokens).")
@click.option("--block-tokens", type=n.BLOCK, help="That cache's block size (default: the run's "
              "cache arm's, else 16).")
@click.option("--gpus", type=n.GPUS, help="GPUs per server (default: the run's, else 1).")
@click.option("--gpu-hour-usd", type=n.GPU_HOUR_USD, help="Price of a GPU-hour, for $ per 1,000 calls.")
@click.option("--format", "out_fmt", type=click.Choice(OUTPUTS + FORMATS), default="table", show_default=True,
              metavar="[" + "|".join(OUTPUTS) + "]",
              help="table: terminal tables; md: Markdown; json: the whole result; html: one self-contained page "
                   "(fetches nothing, runs no script).  A trace format's name here (the old spelling) means "
                   "--trace-format.")
@click.option("--out", "out_path", type=click.Path(path_type=Path),
              help="Write the md, json or html output to this file (and print its path) instead of stdout.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--salvage", is_flag=True,
              help="Read a damaged leverbench ledger (TRAFFIC or --rates) past its bad lines, each one reported.")
def analyze_command(traffic: Path, fmt: str | None, columns: str | None, rates_dir: Path | None,
                    prefill_tps: float | None, prefill_a_s: float, decode_tps: float | None,
                    drafter_speedup: float | None, answer_cap: int | None, cached_share: float | None,
                    cache_tokens: float | None, block_tokens: int | None, gpus: float | None,
                    gpu_hour_usd: float | None, out_fmt: str, out_path: Path | None, as_json: bool,
                    salvage: bool) -> None:
    """Where the time of recorded traffic goes (prefill, decode, queueing), and which lever
    (prefix cache, drafter, shorter answers) to try first.

    TRAFFIC is a Mooncake, Azure, TraceLab (replay CSV or round JSONL), `vllm bench serve`
    result, AIPerf profile_export.jsonl, leverbench ledger or generic CSV/JSONL file, or a
    recording of `leverbench record` (its directory or exchanges.jsonl: its turns, calls per
    turn, tool rounds, tokens, the prefix its turns share and where the engine's time went
    come first; rates from the engine's timings unless given).
    Large logs (generic CSV/JSONL, Azure, TraceLab replay) are read columnar, in bounded
    memory: tens of millions of calls take seconds, and a log larger than memory is fine.
    """
    if out_fmt in FORMATS:
        fmt, out_fmt = fmt or out_fmt, "table"
    if as_json:
        out_fmt = "json"
    if out_path is not None and out_fmt == "table":
        raise BadInput("--out writes --format md, json or html")
    if out_path is not None and out_path.is_dir():
        raise BadInput(f"--out: {out_path} is a directory; give the file to write")
    from ..pipeline.traffic_files import analyze_file  # noqa: PLC0415 (as above)
    from ..report import traffic as report  # noqa: PLC0415 (polars: ~0.3 s)

    try:
        result = analyze_file(traffic, fmt=fmt, columns=columns, rates_dir=rates_dir, prefill_tps=prefill_tps,
                              prefill_a_s=prefill_a_s, decode_tps=decode_tps, drafter_speedup=drafter_speedup,
                              answer_cap=answer_cap, cached_share=cached_share, gpus=gpus,
                              gpu_hour_usd=gpu_hour_usd, salvage=salvage, cache_tokens=cache_tokens,
                              block_tokens=block_tokens)
    except BadInput as exc:
        raise of_rates(rates_dir, exc) from None
    if out_fmt == "table":
        report.render_terminal(result, console)
        return
    text = report.RENDER[out_fmt](result)
    if out_path is None:
        click.echo(text)
        return
    try:
        out_path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    except OSError as exc:  # as replay --out: a runtime failure (exit 1)
        raise RuntimeFailure(f"cannot write {out_path}: {exc.strerror or exc}") from None
    click.echo(str(out_path))
