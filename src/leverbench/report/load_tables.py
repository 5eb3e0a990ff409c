"""The load stages' tables (issue 5), built from ``summary["load"]``; formatting only."""

from __future__ import annotations

from typing import Any

from .tables import Table


def _ms(d: dict[str, Any] | None, key: str) -> str:
    if not d or d.get(key) is None:
        return "—"
    v = d[key] * 1000
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"


def _pair(d: dict[str, Any] | None, a: str = "p50", b: str = "p99") -> str:
    return "—" if not d else f"{_ms(d, a)} / {_ms(d, b)}"


def _num(x: float | None, nd: int = 1) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def _shape(r: dict[str, Any]) -> str:
    if r["mode"] == "closed":
        return f"closed c={r['concurrency']}"
    if r["mode"] == "open":
        extra = f" k={r['burstiness']:g}" if r.get("arrival") == "gamma" and r.get("burstiness") is not None else ""
        return f"open {r['rate']:g}/s {r.get('arrival') or ''}{extra}".rstrip()
    return f"trace ×{r['speed']:g}" if r.get("speed") is not None else "trace"


def load_table(summary: dict[str, Any]) -> Table | None:
    """Per (arm, stage): throughput and latency percentiles (ms, from the scheduled send time)."""
    rows_in = summary.get("load") or []
    if not rows_in:
        return None
    rows = []
    for r in rows_in:
        q = r.get("queue")
        queue = "—" if not q else f"{_ms(q, 'mean')} / {_ms(q, 'p99')}" + (" queued" if r.get("queueing") else "")
        sq = r.get("server_queue_s")
        rows.append([
            r["arm"], str(r["stage"]) + (" ◆knee" if r.get("knee") else ""), _shape(r),
            f"{r['ok']}" + (f" ({r['failed']} failed)" if r["failed"] else ""),
            _num(r.get("requests_per_s"), 2), _num(r.get("output_tps")), _num(r.get("total_tps")),
            _num(r.get("goodput_rps"), 2) if r.get("slo") else "—",
            _pair(r.get("ttft")), _pair(r.get("ttfat")), _pair(r.get("tpot")), _pair(r.get("itl")),
            _pair(r.get("e2e")), queue, "—" if sq is None else f"{sq * 1000:.1f}",
            _ms(r.get("client_lag"), "p99"),
        ])
    notes = [
        "Times in ms, p50 / p99, measured from each call's scheduled send time (a late send counts against latency: "
        "no coordinated omission). TTFT: first token; TTFAT: first answer token (reasoning excluded); TPOT: "
        "(latency − TTFT) / (output tokens − 1); ITL: chunk gaps per token (a chunk carrying k tokens counts k); "
        "E2E: schedule → last byte.",
        "queue: mean / p99 of E2E minus the server's own prefill + decode time (its timings), or TTFT above the arm's "
        "lowest TTFT where the server reports no timings; 'queued' = the part after the send (client lag excluded) averages over max(5 ms, 5 % of the service time). "
        "server queue: the engine's own mean queue time from its metrics, where it exports them.",
        "throughput: successful calls, generated (out) and prompt + generated (total) tokens per second of the stage; "
        "goodput: calls per second that met every SLO of the stage. ◆knee: past this stage more load raised p99 "
        "latency over 1.5× while throughput grew under 10 %.",
    ]
    for r in rows_in:
        notes.extend(r.get("warnings") or [])
        ti = r.get("trace_import")
        if ti:
            skipped = ", ".join(f"{k}: {v}" for k, v in {**ti.get("rows_skipped", {}), **ti.get("left_out", {})}.items())
            notes.append(f"{r['arm']}/{r['stage']}: trace {ti['path']} ({ti['fmt']}): {ti['rows_used']} rows read, "
                         f"{ti['replayed']} calls replayed" + (f"; left out: {skipped}" if skipped else ""))
        tc = r.get("token_check")
        if tc and tc.get("source") and tc.get("rel_error_mean") is not None:
            notes.append(f"{r['arm']}/{r['stage']}: synthetic prompt length vs the engine's /tokenize: "
                         f"{tc['rel_error_mean']:+.1%} mean over {tc['samples']} prompts"
                         + (f" (calibrated at {tc['tokens_per_word']:.2f} tokens per word)" if tc.get("calibrated") else ""))
    return Table("load", "Load stages: throughput and latency (ms, p50 / p99)",
                 ["arm", "stage", "shape", "ok", "req/s", "out tok/s", "total tok/s", "goodput req/s", "TTFT",
                  "TTFAT", "TPOT", "ITL", "E2E", "queue mean / p99", "server queue", "client lag p99"], rows, notes)


def sweep_table(summary: dict[str, Any]) -> Table | None:
    """Throughput against latency for each sweep and arm (the data of the throughput–latency plot)."""
    rows = []
    for r in summary.get("load") or []:
        if not r.get("sweep"):
            continue
        load = f"c={r['concurrency']}" if r["mode"] == "closed" else f"{r['rate']:g}/s"
        rows.append([r["arm"], r["sweep"], load, _num(r.get("throughput_tps")), _num(r.get("requests_per_s"), 2),
                     "—" if r.get("p50_s") is None else f"{r['p50_s']:.3f}",
                     "—" if r.get("p99_s") is None else f"{r['p99_s']:.3f}", "◆ knee" if r.get("knee") else ""])
    if not rows:
        return None
    return Table("load_sweep", "Throughput against latency per sweep (E2E seconds from the schedule)",
                 ["arm", "sweep", "load", "out tok/s", "req/s", "p50 s", "p99 s", "knee"], rows,
                 notes=["knee: the first stage past which some later stage's p99 is over 1.5× its p99 while its "
                        "throughput is under 1.1× its throughput."])


def load_tables(summary: dict[str, Any]) -> list[Table]:
    """The load tables that have rows."""
    return [t for t in (load_table(summary), sweep_table(summary)) if t is not None]
