"""The load stages' tables (issue 5), built from ``summary["load"]``; formatting only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from typing_extensions import TypeAlias

from .load_levers import lever_load_tables
from .table import Table

if TYPE_CHECKING:
    from ..schema.load_rows import Distribution, LoadRow
    from ..schema.summary import Summary


#: A statistic of a :class:`...schema.load_rows.Distribution`.
Stat: TypeAlias = Literal["n", "p50", "p90", "p95", "p99", "mean", "max"]


def _seconds_ms(x: float | None) -> str:
    """Seconds as milliseconds: three figures from 100 ms up, else one decimal."""
    if x is None:
        return "—"
    v = x * 1000
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"


def _ms(d: Distribution | None, key: Stat) -> str:
    return _seconds_ms(d.get(key) if d else None)


def _pair(d: Distribution | None, a: Stat = "p50", b: Stat = "p99") -> str:
    return "—" if not d else f"{_ms(d, a)} / {_ms(d, b)}"


def _num(x: float | None, nd: int = 1) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def _shape(r: LoadRow) -> str:
    mode = r.get("mode")
    if mode == "open" or (mode is None and r.get("rate") is not None):
        k = r.get("burstiness")
        extra = f" k={k:g}" if r.get("arrival") == "gamma" and k is not None else ""
        return f"open {r.get('rate', 0):g}/s {r.get('arrival') or ''}{extra}".rstrip()
    if mode == "trace":
        return f"trace ×{r['speed']:g}" if r.get("speed") is not None else "trace"
    return f"closed c={r.get('concurrency')}" if r.get("concurrency") is not None else (mode or "—")


def load_table(summary: Summary) -> Table | None:
    """Per (arm, stage): throughput and latency percentiles (ms, from the scheduled send time)."""
    rows_in = summary.get("load") or []
    if not rows_in:
        return None
    # columns that would only repeat another are left out: TTFAT when no answer was preceded by reasoning,
    # the server's queue when no endpoint exported one, goodput when no stage set an SLO
    show_ttfat = any((a := r.get("ttfat")) and (b := r.get("ttft")) and abs(a["p50"] - b["p50"]) > 0.001
                     for r in rows_in)
    show_server_q = any(r.get("server_queue_s") is not None for r in rows_in)
    show_goodput = any(r.get("slo") for r in rows_in)
    # the successful calls' own percentiles, beside every call's, where some call failed (else they repeat them)
    show_ok = any(r.get("failed") for r in rows_in)
    headers = ["arm", "stage", "shape", "ok", "req/s", "out tok/s", "total tok/s"]
    headers += ["goodput req/s"] if show_goodput else []
    headers += ["TTFT"] + (["TTFT ok"] if show_ok else []) + (["TTFAT"] if show_ttfat else [])
    headers += ["TPOT", "ITL", "E2E"] + (["E2E ok"] if show_ok else []) + ["queue mean / p99"]
    headers += (["server queue"] if show_server_q else []) + ["client lag p99"]
    rows = []
    for r in rows_in:
        q = r.get("queue")
        queue = "—" if not q else f"{_ms(q, 'mean')} / {_ms(q, 'p99')}" + (" queued" if r.get("queueing") else "")
        sq = r.get("server_queue_s")
        failed = r.get("failed") or 0
        row = [str(r.get("arm", "")), str(r.get("stage", "")) + (" ◆knee" if r.get("knee") else ""), _shape(r),
               ("—" if r.get("ok") is None else str(r["ok"])) + (f" ({failed} failed)" if failed else ""),
               _num(r.get("requests_per_s"), 2), _num(r.get("output_tps", r.get("throughput_tps"))),
               _num(r.get("total_tps"))]
        if show_goodput:
            row.append(_num(r.get("goodput_rps"), 2) if r.get("slo") else "—")
        row.append(_pair(r.get("ttft")))
        if show_ok:
            row.append(_pair(r.get("ttft_ok")))
        if show_ttfat:
            row.append(_pair(r.get("ttfat")))
        row += [_pair(r.get("tpot")), _pair(r.get("itl")),
                _pair(r.get("e2e")) if r.get("e2e")
                else f"{_seconds_ms(r.get('p50_s'))} / {_seconds_ms(r.get('p99_s'))}"]
        if show_ok:
            row.append(_pair(r.get("e2e_ok")))
        row.append(queue)
        if show_server_q:
            row.append("—" if sq is None else f"{sq * 1000:.1f}")
        row.append(_ms(r.get("client_lag"), "p99"))
        rows.append(row)
    notes = [
        "Times in ms, p50 / p99, measured from each call's scheduled send time (a late send counts against latency: "
        "no coordinated omission). TTFT: first token; TTFAT: first answer token (reasoning excluded); TPOT: "
        "(latency − TTFT) / (output tokens − 1); ITL: chunk gaps per token (a chunk carrying k tokens counts k); "
        "E2E: schedule → last byte; client lag: actual send − scheduled send.",
        "TTFT, TTFAT and E2E count every measured call, a failed or timed-out one at its elapsed time (schedule → "
        "when it failed); a call that failed before its first token counts that time as its TTFT, a lower bound. "
        + ("TTFT ok, E2E ok: the successful calls alone. " if show_ok else "")
        + "TPOT, ITL and queue: successful calls only (a failed call has no token count). A failed call meets no "
        "SLO.",
        "queue: mean / p99 of E2E minus the server's own prefill + decode time (its timings), or TTFT above the arm's "
        "lowest TTFT where the server reports no timings; 'queued': the part after the send (client lag excluded) "
        "averages over max(5 ms, 5 % of the service time). server queue: the engine's own mean queue time from its "
        "metrics (warm-up included).",
        "throughput over the time the stage was sending (warm-up and drain left out): calls that ended, tokens "
        "generated (out) and prompt + generated (total) per second; goodput: calls per second that met every SLO of "
        "the stage. ◆knee: past this stage more load raised p99 latency over 1.5× while throughput grew under 10 %.",
    ]
    for r in rows_in:
        notes.extend(r.get("warnings") or [])
        ti = r.get("trace_import")
        if ti:
            skipped = ", ".join(f"{k}: {v}"
                                for k, v in {**ti.get("rows_skipped", {}), **ti.get("left_out", {})}.items())
            notes.append(f"{r['arm']}/{r['stage']}: trace {ti['path']} ({ti['fmt']}): {ti['rows_used']} rows read, "
                         f"{ti['replayed']} calls replayed" + (f"; left out: {skipped}" if skipped else ""))
        tc = r.get("token_check")
        if tc and tc.get("source") and tc.get("rel_error_mean") is not None:
            notes.append(f"{r['arm']}/{r['stage']}: synthetic prompt length vs the engine's /tokenize: "
                         f"{tc['rel_error_mean']:+.1%} mean over {tc['samples']} prompts"
                         + (f" (calibrated at {tc['tokens_per_word']:.2f} tokens per word)"
                            if tc.get("calibrated") else ""))
    return Table("load", "Load stages: throughput and latency (ms, p50 / p99)", headers, rows, notes)


def sweep_table(summary: Summary) -> Table | None:
    """Throughput against latency for each sweep and arm (the data of the throughput–latency plot)."""
    rows = []
    for r in summary.get("load") or []:
        if not r.get("sweep"):
            continue
        load = f"{r['rate']:g}/s" if r.get("mode") == "open" else f"c={r.get('concurrency')}"
        rows.append([str(r.get("arm", "")), str(r["sweep"]), load, _num(r.get("throughput_tps")),
                     _num(r.get("requests_per_s"), 2),
                     "—" if r.get("p50_s") is None else f"{r['p50_s']:.3f}",
                     "—" if r.get("p99_s") is None else f"{r['p99_s']:.3f}", "◆ knee" if r.get("knee") else ""])
    if not rows:
        return None
    return Table("load_sweep", "Throughput against latency per sweep (E2E seconds from the schedule)",
                 ["arm", "sweep", "load", "out tok/s", "req/s", "p50 s", "p99 s", "knee"], rows,
                 notes=["p50, p99: E2E over every measured call, a failed one at its elapsed time. knee: the first "
                        "stage past which some later stage's p99 is over 1.5× its p99 while its throughput is under "
                        "1.1× its throughput."])


def load_tables(summary: Summary) -> list[Table]:
    """The load tables that have rows, then the levers under load's (:mod:`.load_levers`)."""
    return [t for t in (load_table(summary), sweep_table(summary)) if t is not None] + lever_load_tables(summary)
