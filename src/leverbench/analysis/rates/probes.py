"""Fixed-length probes: prefill and decode from two output lengths, checked at the same context.

The same prompt (the probe case's, or that prompt cut or padded to each of ``[probes] depths`` tokens) is
sent with the output forced to n1 and n2 tokens (``ignore_eos``).  A drafter arm's probes are not forced
(``length_method`` "natural ..."): a drafter predicts the repetitive text that a forced answer produces
past its end unnaturally well, so its decode rate is measured on natural answers.  With c1, c2 the
generated counts (normally n1 and n2) and, per length, the medians of the calls' decode time
f = latency − TTFT (first token → end of stream) and of their TTFT:

    decode_tps = (c2 − c1) / (f2 − f1)          (the tokens c1+1 … c2, at contexts L + c1 … L + c2 − 1)
    prefill_s  = t1 − (c1 − 1) / decode_tps     (t1 the median latency at n1: what is left before decoding)
    context_tokens = L + (c1 + c2 − 1) / 2      (L: the median prompt tokens; the mean context of those tokens)

The latency t1 spans the prefill, which samples the first token, and the c1 − 1 tokens decoded after it,
so c1 − 1 of them are taken off (with TTFT 50 ms and 30 ms a token, prefill_s = 0.05 s: the TTFT, the first
token's sampling included).  Taking the decode time rather than the latency keeps the prefill's noise (a
long prompt's, uncached) out of the decode rate.  Without TTFT (a call that was not streamed) the latencies
stand in: decode_tps = (c2 − c1) / (t2 − t1), and prefill_s by the same formula.

**The check** compares three views of the arm's decode speed at the probe's context, each through the
rate model's form (:mod:`.rate_model`: per-token time d0 + d1·L):

- probe: ``decode_tps`` as measured, a local two-point difference at this one depth (left out of the check
  when it was forced on a drafter arm);
- regression: the per-call regression on the **client's clock** — d0 + d1·L fitted over the arm's counted
  calls and its other probes (not this probe's own calls: a fit that took them in would pass through them,
  above all at a depth no other call reaches), each at its own context, with the decode time the stream
  measured (m = completion − 1 tokens from L = prompt + 1 in latency − TTFT seconds;
  :func:`.rate_fit.fit_decode`), evaluated at the probe's context: 1 / (d0 + d1·context),
  ``regression_extrapolated`` where that context lies outside the fitted calls'.  A per-cell regression of
  latency on output tokens (:mod:`.regression`) is not used: between a turn's steps the context grows with
  the output, so its slope mixes context growth into the decode rate (on the demo it read 11–22 % fast).
  Without a stream (no TTFT) the cell regression stands in, moved from the context it measured at (its
  ``decode_context`` γ) with the model's d1: 1 / (1/decode_tps_reg + d1·(context − γ));
- server: the same form fitted on the **server's clock** (llama.cpp ``predicted_ms`` per call: the arm's
  rate model where its decode comes from server timings), at the probe's context: 1 / (d0 + d1·context).

The two regressions share calls but not clocks (the server's, the arm's rate model, takes the probes in: it
agrees with the client's regression within the clocks' difference wherever the probes are not the only calls
at their depth), so between them they check the client's clock against the server's; the probe checks that
the line fitted on the other calls holds at its depth — the independent check, meaningful where the probe's
context lies inside the calls fitted (``regression_extrapolated`` false: the demo's depths are chosen so).

Natural probes (a drafter arm's): a drafter's speed depends on the text it drafts, and the regression and
the model were measured on other texts (another acceptance), so the check compares the probe with the
server's timings **of the same probe calls** (:func:`same_calls_server_tps`, where the server reports them);
the regression is shown beside it, not checked.

``agreement`` = max / min − 1 over the views present (at least two); ``agrees`` when it is at most the
tolerance (``[probes] tolerance``, default 5 %).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Sequence, TypedDict, TypeVar

import numpy as np

from ...schema.warning_kinds import RunWarning, WarningKind
from ..base.dataset import Dataset, cached_tokens
from ..base.stats import median
from .rate_fit import decode_points, fit_decode, has_drafter, is_natural
from .rate_model import prefill_seconds, tokens_per_second_at

if TYPE_CHECKING:
    from ...ledger.rows import CallRow, Sample, TimingsRow
    from ...schema.rate_rows import (
        DecodeFit,
        DecompositionRow,
        ProbeCheck,
        ProbeMeasure,
        ProbeMeasured,
        ProbeRow,
        RateModelRow,
    )

T = TypeVar("T")


def two_point(c1: float, t1: float, c2: float, t2: float) -> float | None:
    """decode_tps = (c2 − c1) / (t2 − t1) from two (tokens, seconds) points; None unless c2 > c1 and t2 > t1."""
    if c2 <= c1 or t2 <= t1:
        return None
    return (c2 - c1) / (t2 - t1)


def prefill_before(t1: float, c1: float, decode_tps: float) -> float:
    """prefill_s = t1 − (c1 − 1) / decode_tps: the latency t1 of a call that generated c1 tokens less the c1 − 1
    tokens decoded after the first (the first is sampled by the prefill)."""
    return t1 - (c1 - 1) / decode_tps


def spread(values: list[float]) -> float | None:
    """max / min − 1 of positive values (None for fewer than two)."""
    if len(values) < 2:
        return None
    return max(values) / min(values) - 1.0


def _known(v: T | None) -> T:
    """*v*, a field that the probe calls it is read from hold (:func:`_length_rows` kept only those, or the
    caller checked)."""
    assert v is not None, "a probe call without a field it must hold"
    return v


def _sample(v: Sample) -> float:
    """A server's number (llama.cpp ``timings``) as a float: the ledger stores a non-finite one as text."""
    return float(v) if isinstance(v, str) else v


def _timings(r: CallRow) -> TimingsRow:
    """A call's llama.cpp ``timings`` ({} without them)."""
    return r.get("timings") or {}


def _length_rows(recs: list[CallRow], arm: str, case: str, n: int, natural: bool,
                 warnings: list[RunWarning]) -> list[CallRow]:
    """The probe calls of one length that count (successful, with a count), warning about the others."""
    recs = [r for r in recs if not r.get("retried")]  # an attempt sent again is not a probe
    ok = [r for r in recs if r.get("error") is None and r.get("completion_tokens") is not None]
    failed = len(recs) - len(ok)
    if failed:
        warnings.append(RunWarning(WarningKind.PROBE_FAILED, f"probe {arm}/{case} at {n} tokens: {failed} of "
                                   f"{len(recs)} call(s) failed", arm, case))
    disobeyed = [_known(r["completion_tokens"]) for r in ok if r["completion_tokens"] != n]
    if disobeyed and not natural:
        warnings.append(RunWarning(WarningKind.PROBE_DISOBEYED,
                                   f"probe {arm}/{case}: asked for {n} output tokens, "
                                   f"the engine generated {sorted(set(disobeyed))} in {len(disobeyed)} of "
                                   f"{len(ok)} call(s) (it did not honour ignore_eos/min_tokens); the actual "
                                   "counts were used", arm, case))
    return ok


def measure(rows1: Sequence[CallRow], rows2: Sequence[CallRow]) -> ProbeMeasure:
    """The two-point measurement of one probe (see the module docstring) from its calls at n1 and n2 (those
    :func:`_length_rows` keeps: successful, with their generated count and latency)."""
    c1 = median([_known(r["completion_tokens"]) for r in rows1])
    c2 = median([_known(r["completion_tokens"]) for r in rows2])
    t1 = median([_known(r["latency_s"]) for r in rows1])
    t2 = median([_known(r["latency_s"]) for r in rows2])
    both = [*rows1, *rows2]
    prompts = [p for r in both if (p := r.get("prompt_tokens")) is not None]
    cached = [c for c in (cached_tokens(r) for r in both) if c is not None]
    input_tokens = median(prompts) if prompts else None
    out: ProbeMeasure = {"t1_s": t1, "t2_s": t2, "c1": c1, "c2": c2, "prefill_s": None, "decode_tps": None,
                         "input_tokens": input_tokens, "cached_tokens": median(cached) if cached else None,
                         "context_tokens": input_tokens + (c1 + c2 - 1) / 2.0 if input_tokens else None,
                         "method": ""}
    if all(r.get("ttft_s") is not None for r in both):
        f1 = median([_known(r["latency_s"]) - _known(r["ttft_s"]) for r in rows1])
        f2 = median([_known(r["latency_s"]) - _known(r["ttft_s"]) for r in rows2])
        out["method"] = "stream: decode time (latency − TTFT) at two lengths"
        out["decode_tps"] = two_point(c1, f1, c2, f2)
    else:
        out["method"] = "latency at two lengths"
        out["decode_tps"] = two_point(c1, t1, c2, t2)
    if out["decode_tps"] is not None:
        out["prefill_s"] = prefill_before(t1, c1, out["decode_tps"])
    if out["decode_tps"] is None:
        out["refused"] = "the longer probe was not slower: cannot separate prefill from decode"
    return out


def same_calls_server_tps(rows1: Sequence[CallRow], rows2: Sequence[CallRow]) -> float | None:
    """The server's decode rate on the probe's own calls: (p2 − p1) / (m2 − m1), with p the median
    ``predicted_n`` and m the median ``predicted_ms`` / 1000 (llama.cpp: first token to last) at each length;
    None without timings on every call or when the longer answer was not slower."""
    t = [[_timings(r) for r in rows] for rows in (rows1, rows2)]
    if not all(x.get("predicted_ms") is not None and x.get("predicted_n") is not None for ts in t for x in ts):
        return None
    p1, p2 = (median([_sample(x["predicted_n"]) for x in ts]) for ts in t)
    m1, m2 = (median([_sample(x["predicted_ms"]) for x in ts]) for ts in t)
    return two_point(p1, m1 / 1000.0, p2, m2 / 1000.0)


class ServerExtrapolated(TypedDict, total=False):
    """Whether the server's view lies outside the contexts its fit saw (where there is one: :func:`check`)."""

    server_extrapolated: bool


class ModelPrefill(TypedDict, total=False):
    """The rate model's prefill time of the probe's prompt (where the arm's model has a prefill fit: :func:`check`)."""

    model_prefill_s: float


class CheckNote(TypedDict, total=False):
    """Why a probe's check reads as it does, where that needs words (:func:`probes`)."""

    check_note: str


def check(entry: ProbeMeasured, reg: DecompositionRow | None, stream: DecodeFit | None,
          model: RateModelRow | None, tol: float) -> ProbeCheck:
    """The three views at the probe's context, their ``agreement`` and ``agrees`` (module docstring);
    *stream* is the decode block fitted on the client's stream clock, *reg* the cell regression (used only
    without a stream)."""
    ctx = entry.get("context_tokens")
    dec = model.get("decode") if model else None
    d1 = dec["d1_s_per_token_per_ctx"] if dec else 0.0
    regression_tps: float | None = None
    regression_context: float | None = None
    regression_extrapolated: bool | None = None
    regression_source: str | None = None
    if stream and ctx is not None:
        regression_source = "per-call fit, client stream"
        regression_tps = tokens_per_second_at({"prefill": None, "decode": stream, "batch": None}, ctx)
        rng = stream["range_context"]
        assert rng is not None  # (a decode fit's range: rate_fit.fit_decode always sets it)
        lo, hi = rng
        regression_extrapolated = not lo <= ctx <= hi
    elif reg and (reg_tps := reg.get("decode_tps")):
        regression_source = "cell regression, latency ~ output"
        reg_ctx = reg.get("decode_context")
        regression_tps, regression_context = reg_tps, reg_ctx
        if ctx is not None and reg_ctx is not None:
            t = 1.0 / reg_tps + d1 * (ctx - reg_ctx)
            regression_tps = 1.0 / t if t > 0 else None
    server_tps: float | None = None
    server: ServerExtrapolated = {}
    if entry.get("natural") and (same := entry.get("same_calls_server_tps")):
        # a drafter's speed depends on the text it drafts: only the same calls' server timings are a view of
        # the same thing; the regression and the model (other texts, another acceptance) are shown, not checked
        server_tps = same
        server = {"server_extrapolated": False}
        views = {"probe": entry["decode_tps"], "server": server_tps}
    else:
        if model and dec and dec.get("source") == "server timings" and ctx is not None:  # (dec is model's)
            server_tps = tokens_per_second_at(model, ctx)
            rng = dec["range_context"]
            assert rng is not None  # (the arm's fitted model: rate_fit.fit_decode always sets the range)
            lo, hi = rng
            server = {"server_extrapolated": not lo <= ctx <= hi}
        views = {"probe": None if entry.get("forced_on_drafter") else entry["decode_tps"],
                 "regression": regression_tps, "server": server_tps}
    present = {k: v for k, v in views.items() if v}
    agreement = spread(list(present.values()))
    prefill: ModelPrefill = {}
    if model and model.get("prefill") and (inp := entry.get("input_tokens")):
        k = entry.get("cached_tokens") or 0
        prefill = {"model_prefill_s": prefill_seconds(model, inp - k, k)}
    return {"regression_decode_tps": regression_tps, "regression_context": regression_context,
            "regression_extrapolated": regression_extrapolated, "regression_source": regression_source,
            "server_decode_tps": server_tps, **server, "views": sorted(present), "agreement": agreement,
            "agrees": None if agreement is None else agreement <= tol, **prefill}


def probes(ds: Dataset, decomposition: Sequence[DecompositionRow], models: Sequence[RateModelRow] | None = None
           ) -> tuple[list[ProbeRow], list[RunWarning]]:
    tol = ds.settings.probes.tolerance
    warnings: list[RunWarning] = []
    by: dict[tuple[str, str, int | None], dict[int, list[CallRow]]] = defaultdict(lambda: defaultdict(list))
    for p in ds.probes:  # (a probe's forced length: the runner writes it on every probe, runner.fixed_calls)
        if (tokens := p["probe_tokens"]) is not None:  # (the schema allows null: such a probe measures no length)
            by[(p["arm"], p["case"], p.get("probe_depth"))][tokens].append(p)
    reg = {(d["arm"], d["case"]): d for d in decomposition}
    model_of = {m["arm"]: m for m in models or []}
    measured: list[tuple[ProbeMeasured, ProbeCheck, CheckNote]] = []
    keys = sorted(by, key=lambda k: (ds.arms.index(k[0]) if k[0] in ds.arms else 99, k[1], k[2] or 0))
    for arm, case, depth in keys:
        lengths = by[(arm, case, depth)]
        if len(lengths) < 2:
            continue
        n1, n2 = min(lengths), max(lengths)
        natural = all(is_natural(r) for n in (n1, n2) for r in lengths[n])
        rows = {n: _length_rows(lengths[n], arm, case, n, natural, warnings) for n in (n1, n2)}
        drafter = arm in ds.arm_names and has_drafter(ds, arm)
        # (the row's first keys: check() below makes the check's, and the loop after this one
        # prefill_speedup_vs_baseline, all put together in the row's order there)
        entry: ProbeMeasured = {"arm": arm, "case": case, "depth": depth, "n1": n1, "n2": n2,
                             "repeats": min(len(rows[n1]), len(rows[n2])), "prefill_s": None, "decode_tps": None,
                             "input_tokens": None, "cached_tokens": None, "context_tokens": None, "natural": natural,
                             "forced_on_drafter": drafter and not natural}
        if rows[n1] and rows[n2]:
            entry = {**entry, **measure(rows[n1], rows[n2])}  # (ProbeMeasure's keys added, or updated)
            if entry["decode_tps"] is None and natural:
                entry["refused"] = ("the natural answers were not longer at n2 than at n1 (they ended before "
                                    f"{n1} tokens): no decode rate")
            if entry["prefill_s"] is not None and entry["prefill_s"] < 0:
                warnings.append(RunWarning(WarningKind.PROBE_NEGATIVE_PREFILL,
                                           f"probe {arm}/{case}: solved prefill is "
                                           f"negative ({entry['prefill_s']:.3f} s); decode is not linear in output "
                                           "length here (timing noise or context-length effects)", arm, case))
            if natural:
                entry["same_calls_server_tps"] = same_calls_server_tps(rows[n1], rows[n2])
            if drafter:
                drafts = [_timings(r) for n in (n1, n2) for r in rows[n]]
                dn = sum(_sample(t.get("draft_n") or 0) for t in drafts)
                entry["acceptance"] = sum(_sample(t.get("draft_n_accepted") or 0) for t in drafts) / dn if dn else None
        stream = None
        if arm in ds.arm_names:  # the regression without this probe's own calls (module docstring)
            own = np.array([(r["arm"], r["case"], r.get("probe_depth")) == (arm, case, depth) for r in ds.probes],
                           dtype=bool)
            pts = decode_points(ds, arm, stream=True, left_out=own)
            stream = fit_decode(*pts[:3], pts[4]) if pts[4] else None
        checked = check(entry, reg.get((arm, case)), stream, model_of.get(arm), tol)
        r = reg.get((arm, case))
        note: CheckNote = {}
        if (r and r.get("mixed_prefill") and checked["agrees"] is False and r.get("method") == "latency ~ output"
                and (checked["regression_source"] or "").startswith("cell")
                and (unc := r.get("uncached_input_range"))):  # (a mixed prefill has its range)
            note = {"check_note": ("the regression mixes calls with and without a cached prefix "
                                   f"(uncached input {unc[0]}–{unc[1]} tokens)")}
        if natural and entry.get("same_calls_server_tps") and entry.get("decode_tps"):
            note = {"check_note": ("natural answers: a drafter's speed depends on the text, so the probe is checked "
                                   "against the server's timings of the same calls; the regression and the rate "
                                   "model (other texts) are shown, not checked")}
        if entry["forced_on_drafter"]:
            note = {"check_note": ("forced past end-of-sequence on a drafter arm: its decode rate is not a natural "
                                   "one and is left out of the check")}
        measured.append((entry, checked, note))
    base = {(p["case"], p["depth"]): p for p, _, _ in measured if p["arm"] == ds.baseline}
    out: list[ProbeRow] = []
    for e, checked, note in measured:
        b = base.get((e["case"], e["depth"]))
        b_s, e_s = (b.get("prefill_s") if b else None), e.get("prefill_s")
        speedup = b_s / e_s if b_s and e_s and e_s > 0 and b_s > 0 else None
        out.append({**e, **checked, **note, "prefill_speedup_vs_baseline": speedup})
    return out, warnings
