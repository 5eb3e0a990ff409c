"""The tables of how the time splits and how fast each phase runs, built from ``summary.json``: the regression per
cell, the probes against it and the server's own timings, the rate model, the client's and the server's accounts,
the time shares and the server's own metrics.  Like :mod:`.tables` (which lists them with the rest), formatting
only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from ..levers import registry
from .table import Table, pct, s

if TYPE_CHECKING:
    from ..schema.rate_rows import Span
    from ..schema.summary import Summary


def decomposition_table(summary: Summary) -> Table:
    rows = []
    for d in summary["decomposition"]:
        if d["points"] == 0:
            continue
        rng = f"{d['output_min']:g}–{d['output_max']:g}" if d["output_min"] is not None else "—"
        if d["refused"]:
            rows.append([d["arm"], d["case"], "refused", "—", "—", str(d["points"]), rng, d["refused"]])
        else:
            rows.append([d["arm"], d["case"], s(d["decode_tps"]), s(d["intercept_s"], 2), f"{d['r2']:.3f}",
                         str(d["points"]), rng,
                         "fitted with uncached input as a 2nd regressor"
                         if d.get("method", "").endswith("uncached input")
                         else "mixed prefill: cached and uncached calls" if d.get("mixed_prefill") else ""])
    return Table("decomposition", "Regression per cell: call latency = intercept + output tokens / decode rate",
                 ["arm", "case", "decode tok/s", "intercept s", "R²", "points", "output tokens", "refused / note"],
                 rows)


def probe_table(summary: Summary) -> Table:
    rows = []
    for p in summary["probes"]:
        check = "—" if p.get("agrees") is None else ("PASS" if p["agrees"] else "FAIL")
        if p.get("check_note"):
            check += ": " + p["check_note"]
        if p.get("refused"):
            check = "refused: " + p["refused"]
        probe = s(p.get("decode_tps")) + (" (forced, drafter)" if p.get("forced_on_drafter") else "")
        if p.get("acceptance") is not None:
            probe += f", {pct(p['acceptance'])} accepted"
        reg = s(p.get("regression_decode_tps"))
        if p.get("regression_context") is not None and p.get("regression_decode_tps"):
            reg += f" (cell regression, measured at {p['regression_context']:,.0f})"
        elif p.get("regression_extrapolated") and p.get("regression_decode_tps"):
            reg += " extrapolated"
        server = s(p.get("server_decode_tps")) + (" extrapolated" if p.get("server_extrapolated") else "")
        rows.append([p["arm"], p["case"], "case prompt" if p.get("depth") is None else f"{p['depth']:,}",
                     f"{p['n1']}/{p['n2']}" + (" natural" if p.get("natural") else ""),
                     s(p.get("context_tokens"), 0), s(p.get("prefill_s"), 2), s(p.get("model_prefill_s"), 2),
                     "—" if p.get("prefill_speedup_vs_baseline") is None
                     else f"{p['prefill_speedup_vs_baseline']:.1f}x",
                     probe, reg, server, pct(p.get("agreement"), 1), check])
    tol = summary["tolerances"]["probe_agreement"]
    return Table("probes", "Decode speed at the same context: probes, the regression and the server's own timings",
                 ["arm", "case", "depth", "n1/n2", "context", "prefill s (TTFT)", "model prefill s",
                  "prefill speed-up", "probe tok/s", "regression tok/s", "server timings tok/s", "spread",
                  f"check (≤{pct(tol)})"], rows,
                 notes=["Each view at the probe's context (prompt + the mean position of the tokens the two lengths "
                        "differ by). The regression: per-token decode time d0 + d1·context fitted over the arm's "
                        "calls, each at its own context, on the client's stream clock (latency − TTFT), the probe's "
                        "own calls left out; the "
                        "server timings: the same form fitted on the server's per-call timings. The probe is a "
                        "two-point difference at its one depth. spread = fastest / slowest − 1.",
                        "A drafter arm's probes are natural answers (not forced past end-of-sequence): a drafter "
                        "predicts a forced answer's repetitive text unnaturally well."])


def _span(r: Span | None) -> str:
    """A fit's range of tokens: "1,024–8,192"; "—" where none was recorded."""
    return "—" if r is None else f"{r[0]:,}–{r[1]:,}"


def rate_model_table(summary: Summary) -> Table | None:
    rows = []
    for m in summary.get("rate_models") or []:
        p, d, b = m.get("prefill"), m.get("decode"), m.get("batch")
        if p:
            pre = (f"{p['a_s']:.3f} s + n / {1 / p['b_s_per_token']:,.0f} tok/s" if p["b_s_per_token"] > 0
                   else f"{p['a_s']:.3f} s") + (f" + {p['c_s_per_token2']:.3g}·n·(k + n/2)" if p.get("quadratic")
                                                else "")
            pfit = (f"R² {s(p['r2'], 3)}, {p['points']} points" + (f" ({p['outliers']} outliers)" if p.get("outliers")
                                                                    else "")
                    + f"; n {_span(p['range_uncached'])}, k {_span(p['range_cached'])}; {p['source']}")
        else:
            pre, pfit = "—", m.get("prefill_refused") or "—"
        if d:
            ctx = d["range_context"]
            dec = (f"{s(1 / d['d0_s_per_token'] if d['d0_s_per_token'] > 0 else None)} tok/s at 0"
                   + (f", d1 {d['d1_s_per_token_per_ctx']:.3g} s/token/ctx" if d.get("context_fitted") else ""))
            ends = d.get("tps_over_context")
            over = (f"{s(ends[0])} → {s(ends[1])} tok/s over contexts {_span(ctx)}" if ctx and ends
                    else f"contexts {_span(ctx)}" if ctx else "contexts not recorded")
            dfit = (f"{over}; R² {s(d['r2'], 3)}, "
                    f"{d['points']} points" + (f" ({d['outliers']} outliers)" if d.get("outliers") else "")
                    + f"; {d['source']}" + (f"; acceptance {pct(d['acceptance'])}" if d.get("acceptance") is not None
                                            else ""))
        else:
            dec, dfit = "—", m.get("decode_refused") or "—"
        batch = ("—" if not b else ", ".join(f"×{x:.2f} at {c}" for c, x in zip(b["concurrency"], b["slowdown"])))
        rows.append([m["arm"], pre, pfit, dec, dfit, batch])
    if not rows:
        return None
    return Table("rate_model", "Rate model per arm: prefill and decode at a context",
                 ["arm", "prefill_s(n, k)", "prefill fit", "decode per token", "decode fit", "per-token slowdown "
                  "by concurrency"], rows,
                 notes=["prefill_s(n, k) = a + b·n + c·n·(k + n/2) for n uncached tokens after k cached; decode_s(L, O)"
                        " = O·d0 + d1·(O·L + O·(O − 1)/2) for O tokens from a context of L (a per-token time "
                        "d0 + d1·L); under load, per-token time × the slowdown measured at that concurrency.",
                        "A drafter arm's decode is fitted on its natural answers, with its acceptance beside it."])


def server_table(summary: Summary) -> Table:
    rows = []
    for r in summary["server"]:
        flag = " ≠" if r["prefill_disagrees"] else ""
        flagd = " ≠" if r["decode_disagrees"] else ""
        rows.append([r["arm"], r["case"], s(r["client_prefill_s"], 2), s(r["server_prefill_s"], 2) + flag,
                     s(r["client_decode_s"], 2), s(r["server_decode_s"], 2) + flagd, s(r["server_decode_tps"]),
                     s(r["server_prefill_tps"]), "—" if r["server_cache_n"] is None else str(r["server_cache_n"]),
                     "—" if not r["draft_n"] else f"{r['draft_accepted']}/{r['draft_n']}"])
    return Table("server", "Client's and server's account, seconds per turn (≠ marks a disagreement)",
                 ["arm", "case", "client prefill (TTFT)", "server prefill", "client decode", "server decode",
                  "server decode tok/s", "server prefill tok/s", "cached tokens", "drafts accepted"], rows)


def shares_table(summary: Summary) -> Table:
    rows = []
    for r in summary["time_shares"]:
        rows.append([r["arm"], r["case"], s(r["turn_s"]), f"{s(r['prefill_s'])} ({pct(r['prefill_share'])})",
                     f"{s(r['decode_s'])} ({pct(r['decode_share'])})", f"{s(r['other_s'])} ({pct(r['other_share'])})"])
    return Table("shares", "Where the time goes, per turn (seconds and share of the turn)",
                 ["arm", "case", "turn s", "prefill", "decode", "other"], rows,
                 notes=["prefill and decode come from the server's own timings where it reports them, else from the "
                        "client (prefill ≈ time to first token); 'other' is the rest of the turn: harness, network, "
                        "the gaps between a turn's calls."])


#: The engine's own figures the metrics table shows first (:class:`...schema.rate_rows.ArmMetrics`' keys), as
#: (figure, heading, decimal places); the levers' figures follow, as their modules declare them shown
#: (:attr:`leverbench.levers.MetricTable.shown`).
_ENGINE_FIGURES: tuple[tuple[str, str, int | None], ...] = (
    ("queue_s_per_request", "queue s/request", 3), ("prefill_s_per_request", "prefill s/request", 3),
    ("decode_s_per_request", "decode s/request", 3), ("prefill_tps", "prefill tok/s", 1),
    ("decode_tps", "decode tok/s", 1))


def _figure(row: Mapping[str, object], key: str) -> float | None:
    """A row's figure *key* (a lever's own figure is a key the row's type does not name), or None."""
    v = row.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def metrics_table(summary: Summary) -> Table | None:
    rows_in = summary.get("server_metrics") or []
    if not rows_in:
        return None
    cols = [*_ENGINE_FIGURES, *(c for x in registry.levers() for c in x.metrics.shown)]
    present = [c for c in cols if any(c[0] in r for r in rows_in)]
    rows = [[r["arm"], *((pct(_figure(r, k)) if nd is None else s(_figure(r, k), nd)) for k, _, nd in present),
             "own" if r.get("attribution", "own") == "own" else "MIXED with " + ", ".join(r.get("mixed_with", []))]
            for r in rows_in]
    return Table("metrics", "The server's own metrics over each arm's turns, probes and sentinels (Prometheus "
                 "counters, scraped before and after; load stages excluded)",
                 ["arm", *(h for _, h, _ in present), "attribution"],
                 rows, notes=["'MIXED': another arm used the same server during this arm's block, so its counters are "
                              "not this arm's alone and no per-arm figure is taken from them."])
