"""``leverbench analyze``'s output: its tables, and the terminal, Markdown, JSON and HTML renderings of them.

Built from the result :func:`leverbench.pipeline.traffic_files.analyze_file` returns (the
analysis of :mod:`leverbench.analysis.traffic.analyze` plus the import's counts);
nothing here computes a statistic, it only formats.  The four formats show the
same tables, as ``report`` does for runs; the HTML page is one self-contained
file under the run report's Content-Security-Policy (it fetches nothing and
runs no script).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Mapping

from markupsafe import Markup
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from ..levers import registry
from ..schema.traffic_rows import PHASES
from .jsonio import finite
from .load_levers import operating_lines
from .markdown import md_table
from .svg import svg_hbars, svg_stacked_bars
from .table import Table
from .traffic_recording import recording_lines, turns_table

if TYPE_CHECKING:
    from ..schema.traffic_rows import PhaseRow, TrafficResult
    from .svg import Bar

#: Per table: (first right-aligned column, columns kept left of it): numbers right, words left, in the terminal.
_ALIGN = {"turns": (1, ()), "rates": (1, (5,)), "fits": (1, (2, 7)), "lengths": (1, ()), "phases": (1, ()),
          "levers": (4, (0,)), "bucket_levers": (1, ())}


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


def headline(result: TrafficResult) -> list[str]:
    """The lines above the tables: the file, its rows, the importer's notes and the rates used."""
    inp = result["input"]
    return [f"{inp['path']} ({inp['format']}): {inp['used']:,} calls used, "
            f"{sum(inp['skipped'].values()):,} skipped ({summarize_skips(inp['skipped'])})",
            *recording_lines(result.get("recording")),
            *["  " + note for note in inp["notes"]], "Rates used: " + "; ".join(result["rates_used"])]


def load_lines(result: TrafficResult) -> list[str]:
    """The traffic's operating point and, with a ``--rates`` run that swept load, each lever's side of its
    crossover (:func:`.load_levers.operating_lines`)."""
    return operating_lines(result.get("operating_point"), result.get("under_load") or [])


def cost_line(result: TrafficResult) -> str:
    c = result["cost"]
    cost = (f"Modelled time: {c['seconds_per_call']:.3g} s per call = {c['gpu_hours_per_1000_calls']:.3g} GPU-hours "
            f"per 1,000 calls on {c['gpus']:g} GPU(s)")
    if c["usd_per_1000_calls"] is not None:
        cost += f" = ${c['usd_per_1000_calls']:,.2f} at ${c['gpu_hour_usd']:g}/GPU-hour"
    return cost


def _rates(result: TrafficResult) -> Table:
    # a column for each lever whose traffic saving needs a rate of its own (the drafter's speedup)
    own = [(x.words, x.traffic.rate) for x in registry.traffic_levers()
           if x.traffic and x.traffic.rate not in ("prefill_tps", "decode_tps")]
    rows = []
    for scope, r in result["rates"].items():
        rates: dict[str, object] = dict(r)
        rows.append([scope if scope != "*" else "all calls", _n(r["prefill_tps"]), _n(r["prefill_a_s"]),
                     _n(r["decode_tps"]), *(f"{rates[k]:.2f}x" if rates.get(k) else "–" for _, k in own),
                     r["source"] if result["fits"] else
                     f"{r['source']} (prefill: {r['prefill_source'] or '–'}; decode: {r['decode_source'] or '–'})"])
    return Table("rates", "Rates", ["scope", "prefill tok/s", "a s", "decode tok/s", *(w for w, _ in own), "source"],
                 rows)


def _fits(result: TrafficResult) -> Table | None:
    if not result["fits"]:
        return None
    rows = [[f["model"], str(f["points"]), f.get("method") or "", _n(f.get("decode_tps")), _n(f.get("r2")),
             _n(f.get("prefill_tps")), _n(f.get("prefill_r2")), f.get("refused") or f.get("prefill_refused") or ""]
            for f in result["fits"]]
    return Table("fits", "Fits from the traffic (decode: least squares on latency; prefill: on TTFT, else on "
                 "latency − output/decode_tps, against uncached input)",
                 ["model", "points", "decode fit", "decode tok/s", "R²", "prefill tok/s", "prefill R²",
                  "refused"], rows)


def _lengths(result: TrafficResult) -> Table:
    d = result["distribution"]
    named = (("input tokens", d.get("input_tokens")), ("output tokens", d.get("output_tokens")),
             ("cached tokens", d.get("cached_tokens")))
    rows = [[name, *[_n(dist[k], 4) for k in ("p50", "p90", "p99", "mean", "max")]] for name, dist in named if dist]
    return Table("lengths", "Lengths (tokens)", ["", "p50", "p90", "p99", "mean", "max"], rows)


def _seconds(b: PhaseRow) -> dict[str, float]:
    """A phase row's seconds per phase (:data:`PHASES`)."""
    return {"prefill": b["prefill_s"], "decode": b["decode_s"], "queue": b["queue_s"]}


def _shares(b: PhaseRow) -> dict[str, float | None]:
    """A phase row's share of the time per phase (:data:`PHASES`)."""
    return {"prefill": b["prefill_share"], "decode": b["decode_share"], "queue": b["queue_share"]}


def _phases(result: TrafficResult) -> Table:
    q = result["queue"]
    shown = [p for p in PHASES if p != "queue" or q["measured"]]

    def row(label: str, b: PhaseRow, call_share: float | None) -> list[str]:
        secs = [_n(_seconds(b)[p]) if p in shown else "–" for p in PHASES]
        shares = [_p(_shares(b)[p]) if p in shown else "–" for p in PHASES]
        return [label, f"{b['calls']:,}", _p(call_share), *secs, *shares, b["dominant"] or "–"]

    rows = ([row("all calls", result["overall"], 1.0)]
            + [row(b["bucket"], b, b["call_share"]) for b in result["buckets"]])
    return Table("phases", f"Where the time goes, by input length (queue: {q['note']})",
                 ["input", "calls", "of calls", "prefill s", "decode s", "queue s", "prefill", "decode", "queue",
                  "dominant"], rows)


def _levers(result: TrafficResult) -> Table:
    rows = []
    for i, l in enumerate(result["levers"], start=1):
        if l["estimated"]:
            rng = f" ({_p(r[0])} to {_p(r[1])})" if (r := l.get("range")) else ""
            rows.append([str(i), l["lever"], l["phase"], l.get("parameter") or "", _n(l["saved_s"]),
                         _p(l["saved_share"]) + rng, _n(l["saved_s_per_call"]), _n(l["gpu_hours_per_1000_calls"]),
                         _n(l["usd_per_1000_calls"]) if l["usd_per_1000_calls"] is not None else "–"])
        elif l.get("already_on"):
            rows.append(["on", l["lever"], l["phase"], f"{l['reason']}; it served {_p(l['served_share'])} of input "
                         "tokens; realized:", _n(l["realized_saved_s"]), f"{_p(l['realized_share'])} of the time "
                         "without it", "–", _n(l["realized_gpu_hours_per_1000_calls"]),
                         _n(l["realized_usd_per_1000_calls"]) if l["realized_usd_per_1000_calls"] is not None else "–"])
        else:
            rows.append(["–", l["lever"], l["phase"], l["reason"] or "", "?", f"≤ {_p(l['ceiling_share'])}", "?", "?",
                         "?"])
    sources = "; ".join(sorted({src for l in result["levers"] if (src := l.get("range_source"))}))
    return Table("levers", f"Levers, ranked by time saved (range: {sources})",
                 ["#", "lever", "phase", "parameter", "saved s", "share (range)", "s/call", "GPU-h/1000 calls",
                  "$/1000 calls"], rows)


def _bucket_levers(result: TrafficResult) -> Table:
    rows = [[b["bucket"], *[_p(v) for v in b["levers"].values()]] for b in result["buckets"]]
    names = list(result["buckets"][0]["levers"]) if result["buckets"] else []
    return Table("bucket_levers", "Lever saving as a share of each bucket's time", ["input", *names], rows)


def traffic_tables(result: TrafficResult) -> list[Table]:
    """The tables of an ``analyze`` result, in the order every format shows them."""
    tables = (turns_table(result.get("recording")), _rates(result), _fits(result), _lengths(result),
              _phases(result), _levers(result), _bucket_levers(result))
    return [t for t in tables if t is not None]


# ---------------------------------------------------------------- renderings


def render_terminal(result: TrafficResult, console: Console) -> None:
    lines = headline(result)
    console.print(Text(lines[0], style="bold"))
    for line in lines[1:]:
        console.print(Text(line))
    for t in traffic_tables(result):
        right_from, left = _ALIGN[t.key]
        rt = RichTable(title=Text(t.title), title_justify="left", show_lines=False)
        for i, h in enumerate(t.headers):
            rt.add_column(Text(h), justify="right" if i >= right_from and i not in left else "left", overflow="fold")
        for r in t.rows:
            rt.add_row(*[Text(c) for c in r])
        console.print(rt)
    console.print(Text(cost_line(result)))
    console.print()
    console.print(Text("Recommendation", style="bold"))
    console.print(Text(result["recommendation"]))
    for line in load_lines(result):
        console.print(Text(line))


def render_markdown(result: TrafficResult) -> str:
    lines = headline(result)
    out = ["# leverbench analyze: where the time of this traffic goes", "", lines[0], ""]
    out += [f"- {n.strip()}" for n in lines[1:]] + [""]
    for t in traffic_tables(result):
        out += [md_table(t), ""]
    out += [cost_line(result), "", "## Recommendation", "", result["recommendation"], ""]
    out += [f"- {line}" for line in load_lines(result)] + ([""] if load_lines(result) else [])
    return "\n".join(out)


def render_json(result: TrafficResult) -> str:
    return json.dumps(finite(result), indent=1, ensure_ascii=False, allow_nan=False)


def render_html(result: TrafficResult) -> str:
    """One self-contained page: the headline, a bar of the phase shares per input bucket, the tables."""
    from .html import _STYLE, CSP, _env, _table_view  # noqa: PLC0415 (jinja2 on use)

    shown = [p for p in PHASES if p != "queue" or result["queue"]["measured"]]
    rows: list[Bar] = [{"arm": b["bucket"], "total": None,
                        "segments": [(p, 100 * (_shares(b)[p] or 0.0)) for p in shown]} for b in result["buckets"]]
    overall: list[Bar] = [{"arm": "all calls", "total": None,
                           "segments": [(p, 100 * (_shares(result["overall"])[p] or 0.0)) for p in shown]}]
    phases_svg = svg_stacked_bars([("all calls", overall), ("by input length", rows)],
        label="share of the modelled time per phase", unit="% of the modelled time") if result["buckets"] else None
    est = [l for l in result["levers"] if l["estimated"]]
    levers_svg = svg_hbars([(l["lever"], 100 * (l["saved_share"] or 0.0), _p(l["saved_share"])) for l in est],
                           label="time each lever would save", axis="% of the modelled time saved") if est else None
    lines = headline(result)
    return _env.get_template("traffic.html.j2").render(
        csp=CSP, style=Markup(_STYLE), title="leverbench analyze: " + result["input"]["path"], head=lines[0],
        notes=[n.strip() for n in lines[1:]] + load_lines(result),
        tables=[_table_view(t) for t in traffic_tables(result)],
        phases_svg=phases_svg, levers_svg=levers_svg, cost=cost_line(result), recommendation=result["recommendation"],
        conditions=result.get("conditions") or [])


RENDER = {"md": render_markdown, "json": render_json, "html": render_html}


def summarize_skips(skipped: Mapping[str, int]) -> str:
    """The lines a trace's reading skipped, by reason, most first: '12 no timestamp, 3 bad JSON'; 'none'."""
    return ", ".join(f"{n} {r}" for r, n in sorted(skipped.items(), key=lambda kv: -kv[1])) or "none"
