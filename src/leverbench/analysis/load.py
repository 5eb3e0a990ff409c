"""Load metrics from the ledger (issue 5): pure functions over ``load`` records.

One row per (arm, stage): counts, throughput, goodput, and for each latency
metric its p50, p90, p95, p99, mean and max.  Warm-up calls and attempts that
were retried are left out; when a stage ran more than once on an arm (a
resumed run re-runs its stages) only the latest execution (``load_run``)
counts.

Every latency is taken from the call's **scheduled** send time, not from when
the client actually sent it: a client that falls behind its schedule (or waits
for ``max_in_flight``) then adds its delay to the latency instead of hiding it
(no "coordinated omission").  ``client_lag`` reports that delay by itself.

Definitions (per successful call; times in seconds; tokens as the server
counted them in ``usage``):

- client_lag  = t_send − scheduled_t
- ttft        = client_lag + ttft_s            (first streamed token, reasoning included)
- ttfat       = client_lag + t_first_answer_s  (first token of the answer proper)
- e2e         = client_lag + latency_s         (scheduled send → last byte)
- tpot        = (latency_s − ttft_s) / (completion_tokens − 1)   (calls with ≥ 2 tokens)
- itl         = each gap between consecutive streamed chunks / (completion_tokens / chunks):
                a chunk that carries several tokens (a drafter's step) counts as several
                tokens; pooled over all the stage's calls
- queue       = e2e − service, service = (timings.prompt_ms + timings.predicted_ms) / 1000
                when the server reports llama.cpp-style timings ("server timings"); otherwise
                queue = ttft − the arm's lowest ttft_s for the same case ("ttft above floor"; closed and
                open stages only, whose calls all send the same prompt).  All the time the call
                waited from its scheduled send time without being served: client lag + network +
                the server's queue and overhead
- server_wait = queue − client_lag: the part of the wait after the call left the client (the
                server's queue, plus network and the server's per-request overhead)
- server_queue_s = Δ vllm:request_queue_time_seconds_sum / Δ _count between the scrapes around
                the stage (SGLang: sglang:queue_time_seconds); covers warm-up calls too
- duration    = last end (t_send + latency_s) − first scheduled_t, over the measured calls
- requests_per_s = ok / duration;  output_tps = Σ completion_tokens / duration;
  total_tps   = Σ (prompt_tokens + completion_tokens) / duration
- goodput_rps = calls that succeeded and met every SLO the stage sets (ttft ≤ slo_ttft_s,
                tpot ≤ slo_tpot_s, e2e ≤ slo_e2e_s) / duration; None without SLOs
- queueing    = mean server_wait > max(QUEUE_FLOOR_S, QUEUE_SHARE × mean service): the server
                made calls wait (the client's own lag does not count here)

Percentiles: linear interpolation between order statistics (NumPy's default):
rank = p/100 × (n − 1).

The knee of a sweep (stages of one ``[[load]]`` entry with a list of
concurrencies or rates, per arm, in the order run): the first stage *i* for
which some later stage *j* has p99 e2e > KNEE_LATENCY_FACTOR × stage i's while
its output throughput is < (1 + KNEE_THROUGHPUT_GAIN) × stage i's: beyond it,
more load buys latency, not throughput.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable, Sequence

PCTS = (50, 90, 95, 99)
KNEE_LATENCY_FACTOR = 1.5
KNEE_THROUGHPUT_GAIN = 0.10
LAG_WARN_S = 0.010  # client lag (send lag or event-loop stall) p99 above this is warned about
QUEUE_FLOOR_S = 0.005
QUEUE_SHARE = 0.05
TOKEN_ERROR_WARN = 0.05
_SERVER_QUEUE = (("vllm:request_queue_time_seconds_sum", "vllm:request_queue_time_seconds_count"),
                 ("sglang:queue_time_seconds_sum", "sglang:queue_time_seconds_count"))


# ------------------------------------------------------------------ distributions


def percentile_sorted(s: Sequence[float], p: float) -> float:
    """Linear-interpolation percentile of an already sorted sample: rank = p/100 × (n − 1)."""
    rank = p / 100.0 * (len(s) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def distribution(xs: Iterable[float | None]) -> dict[str, float] | None:
    """n, p50, p90, p95, p99 (linear interpolation), mean (Σx/n) and max of the values that are not None."""
    s = sorted(x for x in xs if x is not None)
    if not s:
        return None
    out: dict[str, float] = {"n": len(s)}
    for p in PCTS:
        out[f"p{p}"] = percentile_sorted(s, p)
    out["mean"] = math.fsum(s) / len(s)
    out["max"] = s[-1]
    return out


# ------------------------------------------------------------------ per-call metrics


def client_lag(r: dict[str, Any]) -> float:
    """How late the client sent the call: t_send − scheduled_t (0 when no schedule was recorded)."""
    st = r.get("scheduled_t")
    return 0.0 if st is None else r["t_send"] - st


def ttft(r: dict[str, Any]) -> float | None:
    """Time to first token from the schedule: client_lag + ttft_s."""
    return None if r.get("ttft_s") is None else client_lag(r) + r["ttft_s"]


def ttfat(r: dict[str, Any]) -> float | None:
    """Time to first answer token (reasoning excluded) from the schedule: client_lag + t_first_answer_s."""
    return None if r.get("t_first_answer_s") is None else client_lag(r) + r["t_first_answer_s"]


def e2e(r: dict[str, Any]) -> float | None:
    """End-to-end latency from the schedule: client_lag + latency_s."""
    return None if r.get("latency_s") is None else client_lag(r) + r["latency_s"]


def tpot(r: dict[str, Any]) -> float | None:
    """Time per output token after the first: (latency_s − ttft_s) / (completion_tokens − 1)."""
    n = r.get("completion_tokens")
    if not n or n < 2 or r.get("ttft_s") is None or r.get("latency_s") is None:
        return None
    return (r["latency_s"] - r["ttft_s"]) / (n - 1)


def itl(r: dict[str, Any]) -> list[float]:
    """Inter-token latencies: each chunk gap / (completion_tokens / chunks), so multi-token chunks count per token."""
    ts = r.get("chunk_t") or []
    n = r.get("completion_tokens")
    if len(ts) < 2 or not n:
        return []
    per_chunk = n / len(ts)
    return [(b - a) / per_chunk for a, b in zip(ts, ts[1:])]


def service_s(r: dict[str, Any]) -> float | None:
    """The server's own busy time for the call: (timings.prompt_ms + timings.predicted_ms) / 1000, or None."""
    t = r.get("timings") or {}
    if t.get("prompt_ms") is None or t.get("predicted_ms") is None:
        return None
    return (t["prompt_ms"] + t["predicted_ms"]) / 1000.0


def queue(r: dict[str, Any], ttft_floor: float | None) -> tuple[float | None, str | None]:
    """Time waiting, not being served: e2e − service_s when the server reports timings,
    else ttft − ttft_floor (the arm's lowest TTFT for the case).  Returns (value, source)."""
    sv, e = service_s(r), e2e(r)
    if sv is not None and e is not None:
        return e - sv, "server timings"
    t = ttft(r)
    if t is not None and ttft_floor is not None:
        return t - ttft_floor, "ttft above floor"
    return None, None


def meets_slo(r: dict[str, Any], slo_ttft: float | None, slo_tpot: float | None, slo_e2e: float | None) -> bool:
    """Whether a successful call met every SLO given (a metric it lacks fails that SLO)."""
    checks = ((slo_ttft, ttft), (slo_tpot, tpot), (slo_e2e, e2e))
    for limit, fn in checks:
        if limit is None:
            continue
        v = fn(r)
        if v is None or v > limit:
            return False
    return True


# ------------------------------------------------------------------ grouping


def load_records(records: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Load records by (arm, stage), keeping only each pair's latest execution (``load_run``)."""
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    last_run: dict[tuple[str, str], Any] = {}
    for r in records:
        if r.get("kind") != "load":
            continue
        k = (r.get("arm"), r.get("stage"))
        run = r.get("load_run")
        if k in last_run and last_run[k] != run:
            by_pair[k] = []  # a later execution supersedes the earlier one
        last_run[k] = run
        by_pair[k].append(r)
    return by_pair


def _server_queue(metrics: list[dict[str, Any]], arm: str, stage: str, t_first: float, t_last: float) -> float | None:
    """Mean server-side queue time over the stage: Δsum / Δcount of the queue-time histogram."""
    starts = [m for m in metrics if m.get("arm") == arm and m.get("when") == f"load-start {stage}"
              and m.get("t", 0) <= t_first]
    ends = [m for m in metrics if m.get("arm") == arm and m.get("when") == f"load-end {stage}" and m.get("t", 0) >= t_last]
    if not starts or not ends:
        return None
    a, b = starts[-1]["samples"], ends[0]["samples"]
    for s_key, c_key in _SERVER_QUEUE:
        if c_key in b:
            dc = b[c_key] - a.get(c_key, 0.0)
            if dc > 0:
                return (b.get(s_key, 0.0) - a.get(s_key, 0.0)) / dc
    return None


def _first(rs: list[dict[str, Any]], key: str) -> Any:
    return next((r[key] for r in rs if r.get(key) is not None), None)


def stage_row(rs: list[dict[str, Any]], ttft_floors: dict[tuple[str, str], float],
              metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of one (arm, stage) from its records (warm-up included in ``rs``; left out here)."""
    r0 = rs[0]
    arm, stage = r0["arm"], r0["stage"]
    final = [r for r in rs if not r.get("retried")]
    measured = [r for r in final if not r.get("warmup")]
    ok = [r for r in measured if r.get("error") is None]
    failed = [r for r in measured if r.get("error") is not None]
    row: dict[str, Any] = {
        "arm": arm, "stage": stage, "sweep": r0.get("sweep"), "mode": r0.get("mode"), "case": r0.get("case"),
        "concurrency": r0.get("concurrency"), "rate": r0.get("rate"), "arrival": r0.get("arrival"),
        "burstiness": r0.get("burstiness"), "speed": r0.get("speed"),
        "requests": len(measured), "ok": len(ok), "failed": len(failed), "warmup_requests": len(final) - len(measured),
        "retried_attempts": len(rs) - len(final),
        "errors": _count_errors(failed),
    }
    if measured:
        start = min(r.get("scheduled_t") or r["t_send"] for r in measured)
        end = max(r["t_send"] + (r.get("latency_s") or 0.0) for r in measured)
        duration = end - start
    else:
        start = end = duration = None
    row["duration_s"] = duration
    out_tok = sum(r.get("completion_tokens") or 0 for r in ok)
    in_tok = sum(r.get("prompt_tokens") or 0 for r in ok)
    cached = sum(r.get("cached_tokens") or 0 for r in ok)
    rate = (lambda x: x / duration) if duration else (lambda x: None)
    row.update(requests_per_s=rate(len(ok)), output_tps=rate(out_tok), total_tps=rate(in_tok + out_tok),
               output_tokens=out_tok, input_tokens=in_tok, cached_tokens=cached,
               cached_share=cached / in_tok if in_tok else None)
    slos = {k: r0.get(k) for k in ("slo_ttft_s", "slo_tpot_s", "slo_e2e_s") if r0.get(k) is not None}
    row["slo"] = slos or None
    if slos:
        good = sum(1 for r in ok if meets_slo(r, slos.get("slo_ttft_s"), slos.get("slo_tpot_s"), slos.get("slo_e2e_s")))
        row["goodput_rps"] = rate(good)
        row["slo_met_share"] = good / len(measured) if measured else None
    else:
        row["goodput_rps"] = None
        row["slo_met_share"] = None
    row["ttft"] = distribution(ttft(r) for r in ok)
    row["ttfat"] = distribution(ttfat(r) for r in ok)
    row["tpot"] = distribution(tpot(r) for r in ok)
    row["itl"] = distribution(g for r in ok for g in itl(r))
    row["e2e"] = distribution(e2e(r) for r in ok)
    floor = ttft_floors.get((arm, r0.get("case"))) if r0.get("mode") != "trace" else None  # one prompt only
    queues = [queue(r, floor) for r in ok]
    row["queue"] = distribution(q for q, _ in queues)
    row["server_wait"] = distribution(None if q is None else q - client_lag(r) for r, (q, _) in zip(ok, queues))
    sources = {src for _, src in queues if src}
    row["queue_source"] = ", ".join(sorted(sources)) or None
    svc = distribution(service_s(r) for r in ok)
    row["service"] = svc
    mean_service = svc["mean"] if svc else (row["e2e"]["mean"] - row["queue"]["mean"] if row["e2e"] and row["queue"] else None)
    sw = row["server_wait"]
    row["queueing"] = bool(sw and mean_service is not None and sw["mean"] > max(QUEUE_FLOOR_S, QUEUE_SHARE * mean_service))
    row["server_queue_s"] = _server_queue(metrics, arm, stage, min(r["t_send"] for r in final),
                                          max(r["t_send"] + (r.get("latency_s") or 0.0) for r in final)) if final else None
    row["client_lag"] = distribution(client_lag(r) for r in final)
    row["loop_lag"] = distribution(r.get("loop_lag_s") for r in final)
    errs = [(r["prompt_tokens"] - r["target_input_tokens"]) / r["target_input_tokens"]
            for r in ok if r.get("target_input_tokens") and r.get("prompt_tokens") is not None]
    row["input_token_error"] = math.fsum(errs) / len(errs) if errs else None
    row["trace_import"] = _first(rs, "trace_import")
    row["token_check"] = _first(rs, "token_check")
    row["p50_s"] = row["e2e"]["p50"] if row["e2e"] else None
    row["p99_s"] = row["e2e"]["p99"] if row["e2e"] else None
    row["throughput_tps"] = row["output_tps"]
    row["knee"] = False
    row["warnings"] = row_warnings(row)
    return row


def _count_errors(failed: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in failed:
        cls = (r.get("error") or {}).get("class", "?")
        out[cls] = out.get(cls, 0) + 1
    return out


def row_warnings(row: dict[str, Any]) -> list[str]:
    """Actionable warnings for one (arm, stage) row."""
    w: list[str] = []
    where = f"load {row['arm']}/{row['stage']}"
    lag = row.get("client_lag")
    if lag and lag["p99"] > LAG_WARN_S:
        w.append(f"{where}: the client sent late (lag behind schedule p99 {lag['p99'] * 1000:.1f} ms, max "
                 f"{lag['max'] * 1000:.1f} ms > {LAG_WARN_S * 1000:.0f} ms); latencies count the delay from the "
                 "schedule, but the load offered was lower than planned: lower the load, raise max_in_flight, or "
                 "run the client on a less busy machine")
    loop = row.get("loop_lag")
    if loop and loop["max"] > LAG_WARN_S:
        w.append(f"{where}: the client's event loop stalled up to {loop['max'] * 1000:.1f} ms (p99 of the per-call "
                 f"windows {loop['p99'] * 1000:.1f} ms); its timestamps (TTFT, inter-token gaps) may be late by as much")
    if row["failed"]:
        errs = ", ".join(f"{k} {v}" for k, v in sorted(row["errors"].items()))
        w.append(f"{where}: {row['failed']} of {row['requests']} calls failed ({errs})")
    if row["requests"] == 0:
        w.append(f"{where}: no measured calls (only warm-up, or the stage was cut short)")
    e = row.get("input_token_error")
    if e is not None and abs(e) > TOKEN_ERROR_WARN:
        w.append(f"{where}: prompts were {e:+.1%} off the trace's input lengths on average (engine's count vs target)")
    return w


def ttft_floors(by_pair: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[tuple[str, str], float]:
    """Per (arm, case): the lowest client TTFT (ttft_s, lag excluded) over all its load calls, warm-up included."""
    out: dict[tuple[str, str], float] = {}
    for rs in by_pair.values():
        for r in rs:
            if r.get("error") is None and r.get("ttft_s") is not None:
                k = (r["arm"], r.get("case"))
                if k not in out or r["ttft_s"] < out[k]:
                    out[k] = r["ttft_s"]
    return out


def mark_knees(rows: list[dict[str, Any]], latency_factor: float = KNEE_LATENCY_FACTOR,
               throughput_gain: float = KNEE_THROUGHPUT_GAIN) -> None:
    """Set ``knee`` on each (arm, sweep)'s knee stage (see the module docstring), rows in run order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("sweep"):
            groups[(r["arm"], r["sweep"])].append(r)
    for grp in groups.values():
        i = knee_index([g["p99_s"] for g in grp], [g["throughput_tps"] for g in grp], latency_factor, throughput_gain)
        if i is not None:
            grp[i]["knee"] = True


def knee_index(p99: Sequence[float | None], tput: Sequence[float | None], latency_factor: float = KNEE_LATENCY_FACTOR,
               throughput_gain: float = KNEE_THROUGHPUT_GAIN) -> int | None:
    """First i with a later j: p99[j] > latency_factor × p99[i] and tput[j] < (1 + throughput_gain) × tput[i]."""
    for i in range(len(p99)):
        if p99[i] is None or tput[i] is None:
            continue
        for j in range(i + 1, len(p99)):
            if p99[j] is None or tput[j] is None:
                continue
            if p99[j] > latency_factor * p99[i] and tput[j] < (1 + throughput_gain) * tput[i]:
                return i
    return None


def load_summary(ledger: Any) -> list[dict[str, Any]]:
    """Per (arm, stage) rows, in the order the stages ran; [] when the run had no load stages."""
    by_pair = load_records(ledger.records)
    if not by_pair:
        return []
    metrics = [r for r in ledger.records if r.get("kind") == "metrics" and str(r.get("when", "")).startswith("load-")]
    floors = ttft_floors(by_pair)
    rows = [stage_row(rs, floors, metrics) for rs in by_pair.values() if rs]
    rows.sort(key=lambda r: (min((x.get("scheduled_t") or x["t_send"]) for x in by_pair[(r["arm"], r["stage"])])))
    mark_knees(rows)
    return rows


def load_warnings(rows: list[dict[str, Any]]) -> list[str]:
    """Every row's warnings, for the summary's ``warnings`` list."""
    return [w for r in rows for w in r.get("warnings", [])]


def sweep_curves(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plot data: per (arm, sweep), the points (load, throughput_tps, p50_s, p99_s, knee) in run order."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if not r.get("sweep"):
            continue
        k = (r["arm"], r["sweep"])
        c = out.setdefault(k, {"arm": r["arm"], "sweep": r["sweep"],
                               "x": "concurrency" if r["mode"] == "closed" else "rate", "points": []})
        c["points"].append({"stage": r["stage"], "load": r["concurrency"] if r["mode"] == "closed" else r["rate"],
                            "throughput_tps": r["throughput_tps"], "requests_per_s": r["requests_per_s"],
                            "p50_s": r["p50_s"], "p99_s": r["p99_s"], "knee": r["knee"]})
    return list(out.values())
