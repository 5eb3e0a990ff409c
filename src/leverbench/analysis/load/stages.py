# size: one idea, the load metrics of a stage (issue 5): a sixth of it is their definitions (the
# docstring), the per-call formulas sit next to the row that combines them and its warnings.
"""Load metrics from the ledger (issue 5): pure functions over ``load`` records.

One row per (arm, stage): counts, throughput, goodput, and for each latency
metric its p50, p90, p95, p99, mean and max.  Warm-up calls and attempts that
were retried are left out; when a stage ran more than once on an arm (a
resumed run re-runs its stages) only the latest execution (``load_run``)
counts.

Every latency is taken from the call's **scheduled** send time, not from when
the client actually sent it: a client that falls behind its schedule (or waits
for ``max_in_flight``) then adds its delay to the latency instead of hiding it
(no "coordinated omission").  ``client_lag`` reports the client's own part of
that delay by itself, ``slot_wait`` the part spent waiting for a ``max_in_flight``
slot (the server's backlog reaching the client's cap).

Failed calls (a timeout, an error status, a broken stream) are not dropped from
the latencies: a stage whose slow calls time out would otherwise read fast.
``e2e``, ``ttft`` and ``ttfat`` are over **every measured call**, a failed one at
its elapsed time (e2e: scheduled send → when the client gave up or the error
came; a failed call's ``latency_s`` runs to that moment).  A call that failed
before its first token has no TTFT: it counts at its elapsed time, a lower
bound ("at least": its first token, had it come, would have come later); one
that failed after its first token counts at that token's time (likewise TTFAT,
for the first answer token).  ``e2e_ok``, ``ttft_ok`` and ``ttfat_ok`` are the
same over the successful calls alone, beside them (a failed call without a
recorded time, which the runner never writes, is left out).  ``p50_s``/``p99_s`` (the
sweep's curve and its knee) are ``e2e``'s.  A failed call has no token count
(no usage), so **TPOT and ITL are over successful calls only**, and so are
``queue``, ``server_wait``, ``service`` and ``connect``.  A failed call never
meets an SLO (``goodput_rps``, ``slo_met_share``), whatever its elapsed time.

Definitions (per successful call unless said otherwise; times in seconds; tokens as the server
counted them in ``usage``).  A call's ``ttft_s``, ``t_first_answer_s``,
``latency_s`` and ``chunk_t`` count from when its request went out; ``connect_s``
(0 on a reused connection, and where the record has none) is the time it spent
opening a connection and ``send_s`` (0 where the record has none: a ledger before
version 4 counts from the connection ready) the client's own queue from then until
the request went out, so from the schedule both are added back:

- delay       = t_send − scheduled_t           (how late the call went out, for whatever reason)
- slot_wait   = slot_wait_s: of that delay, the time it waited for a ``max_in_flight`` slot (0 where the
                record has none: no cap, or a ledger from before it was recorded)
- client_lag  = delay − slot_wait              (the client's own lateness: its loop, its machine)
- ready       = t_send + connect_s + send_s    (epoch the request went out; chunk i arrived at ready + chunk_t[i])
- ttft        = delay + connect_s + send_s + ttft_s            (first streamed token, reasoning included)
- ttfat       = delay + connect_s + send_s + t_first_answer_s  (first token of the answer proper)
- e2e         = delay + connect_s + send_s + latency_s         (scheduled send → last byte; for a failed call,
                                                      → its failure: its elapsed time)
- ttft, ttfat of a failed call: as above where it had that token, else its e2e (a lower bound)
- connect     = connect_s, over the calls that opened a connection (``new_connections`` counts them)
- tpot        = (latency_s − ttft_s) / (completion_tokens − 1)   (calls with ≥ 2 tokens)
- itl         = each gap between consecutive streamed chunks / (completion_tokens / chunks):
                a chunk that carries several tokens (a drafter's step) counts as several
                tokens; pooled over all the stage's calls
- queue       = e2e − service, service = (timings.prompt_ms + timings.predicted_ms) / 1000
                when the server reports llama.cpp-style timings ("server timings"); otherwise
                queue = ttft − the arm's lowest ttft_s for the same case and prefix_sharing ("ttft above
                floor"; closed and open stages only, whose calls all send prompts of one length and
                share).  All the time the call waited from its scheduled send time without being
                served: client lag + network + the server's queue and overhead
- server_wait = queue − delay − send_s: the part of the wait after the call left the client (the
                server's queue, plus network and the server's per-request overhead)
- server_queue_s = Δ vllm:request_queue_time_seconds_sum / Δ _count between the scrapes around
                the stage (SGLang: sglang:queue_time_seconds); covers warm-up calls too
- server_figures = every figure of the server's own metrics over the stage (those scrapes:
                :func:`.metrics.arm_metrics`: a drafter's acceptance and draft tokens, the prefix cache's
                hits, queue and phase times), warm-up included; {} without them
- window      = [first scheduled_t, last t_send] of the measured calls: the time during which the
                stage offered its planned load (without the warm-up before it and the drain after
                it, when fewer calls are in flight).  When that is shorter than the median e2e (a
                stage that sends nearly everything at once has no steady state), the window runs to
                the last measured call's end instead (``window_basis`` "whole stage").
- cached_share = Σ cached_tokens / Σ prompt_tokens of the measured successful calls (compare
                ``prefix_sharing``, the share of each prompt the stage's requests have in common);
                where no call reports cached tokens (vLLM's default flags), the server's own
                prefix-cache counters over the stage (warm-up included), else unknown
                (``cached_share_source``)
- output_tps  = output tokens that arrived within the window, from every call of the stage (warm-up
                and drain included: they share the server during the window) / window length; a
                chunk's tokens = completion_tokens / chunks
- total_tps   = output_tps + prompt tokens of the calls whose first token arrived within the window
                / window length
- requests_per_s = successful calls that ended within the window / window length
- goodput_rps = of those, the calls that met every SLO the stage sets (ttft ≤ slo_ttft_s,
                tpot ≤ slo_tpot_s, e2e ≤ slo_e2e_s) / window length; None without SLOs
- slo_met_share = of the measured calls (failed ones included), the share that met every SLO; a
                failed call meets none
- queueing    = mean server_wait > max(QUEUE_FLOOR_S, QUEUE_SHARE × mean service): the server
                made calls wait (the client's own lag does not count here)

Percentiles: linear interpolation between order statistics (NumPy's default,
``numpy.percentile``): rank = p/100 × (n − 1).  The metrics are computed on
columns (NumPy arrays, one value per call; NaN where a call lacks the value),
so a ledger of a million load calls is summarised in seconds.

The knee of a sweep (stages of one ``[[load]]`` entry with a list of
concurrencies or rates, per arm, in the order run): the first stage *i* for
which some later stage *j* has p99 e2e > KNEE_LATENCY_FACTOR × stage i's while
its output throughput is < (1 + KNEE_THROUGHPUT_GAIN) × stage i's: beyond it,
more load buys latency, not throughput.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence, TypeGuard, cast

import numpy as np
import numpy.typing as npt

from ...schema.warning_kinds import RunWarning, WarningKind
from ..base.dataset import cached_tokens
from ..base.metrics import arm_metrics

if TYPE_CHECKING:
    from ...ledger.reader import Ledger
    from ...ledger.rows import CallRow, MetricsRow, RunHeaderRow, StageEndRow
    from ...schema.load_rows import CurvePoint, Distribution, LoadCurve, LoadRow, LostWorker, StageSlo

PCTS = (50, 90, 95, 99)
KNEE_LATENCY_FACTOR = 1.5
KNEE_THROUGHPUT_GAIN = 0.10
LAG_WARN_S = 0.010  # client lag (send lag or event-loop stall) above this is warned about
QUEUE_FLOOR_S = 0.005
QUEUE_SHARE = 0.05
TOKEN_ERROR_WARN = 0.05

FloatArray = npt.NDArray[np.float64]  # (float64 typed: numpy's arithmetic on an untyped array is Any)
Cols = Mapping[str, FloatArray]
#: The calls that share a TTFT floor: (arm, case, prefix_sharing).
FloorKey = tuple[str, str | None, float | None]


# ------------------------------------------------------------------ distributions


def distribution(xs: Iterable[float | None] | np.ndarray) -> Distribution | None:
    """n, p50, p90, p95, p99 (linear interpolation), mean (Σx/n) and max of the values that are not None/NaN."""
    a = xs if isinstance(xs, np.ndarray) else np.array(list(xs), dtype=float)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return None
    p50, p90, p95, p99 = (float(v) for v in np.percentile(a, PCTS))
    return {"n": int(a.size), "p50": p50, "p90": p90, "p95": p95, "p99": p99, "mean": float(np.mean(a)),
            "max": float(np.max(a))}


# ------------------------------------------------------------------ columns


def columns(rs: Sequence[CallRow]) -> dict[str, FloatArray]:
    """The per-call values the metrics need, as float arrays (NaN where a call lacks one)."""
    def col(key: str) -> FloatArray:
        return np.array([r.get(key) for r in rs], dtype=float)

    timings = [r.get("timings") or {} for r in rs]
    return {
        "t_send": col("t_send"), "connect_s": col("connect_s"), "send_s": col("send_s"),
        "scheduled_t": col("scheduled_t"),
        "slot_wait_s": col("slot_wait_s"),
        "ttft_s": col("ttft_s"), "t_first_answer_s": col("t_first_answer_s"), "latency_s": col("latency_s"),
        "completion_tokens": col("completion_tokens"), "prompt_tokens": col("prompt_tokens"),
        "prompt_ms": np.array([t.get("prompt_ms") for t in timings], dtype=float),
        "predicted_ms": np.array([t.get("predicted_ms") for t in timings], dtype=float),
    }


# ------------------------------------------------------------------ per-call metrics (on columns)


def delay(c: Cols) -> FloatArray:
    """How late the call went out: t_send − scheduled_t (0 where no schedule was recorded)."""
    lag = c["t_send"] - c["scheduled_t"]
    return np.where(np.isnan(lag), 0.0, lag)


def slot_wait(c: Cols) -> FloatArray:
    """Of that delay, the time the call waited for a ``max_in_flight`` slot: slot_wait_s (0 where not recorded)."""
    return np.nan_to_num(c["slot_wait_s"], nan=0.0)


def client_lag(c: Cols) -> FloatArray:
    """How late the client itself sent the call: delay − slot_wait (a wait for a slot is the server's backlog)."""
    return delay(c) - slot_wait(c)


def connect(c: Cols) -> FloatArray:
    """Seconds the call spent opening a connection: connect_s (0 where reused, absent or null)."""
    return np.nan_to_num(c["connect_s"], nan=0.0)


def send(c: Cols) -> FloatArray:
    """Seconds from the connection ready until the request went out (the client's own queue): send_s (0 where
    the record has none)."""
    return np.nan_to_num(c["send_s"], nan=0.0)


def ready(c: Cols) -> FloatArray:
    """Epoch at which the call's request went out, from which its own times count: t_send + connect_s + send_s."""
    return c["t_send"] + connect(c) + send(c)


def ttft(c: Cols) -> FloatArray:
    """Time to first token from the schedule: delay + connect_s + send_s + ttft_s."""
    return delay(c) + connect(c) + send(c) + c["ttft_s"]


def ttfat(c: Cols) -> FloatArray:
    """Time to first answer token (reasoning excluded) from the schedule: delay + connect_s + send_s +
    t_first_answer_s."""
    return delay(c) + connect(c) + send(c) + c["t_first_answer_s"]


def e2e(c: Cols) -> FloatArray:
    """End-to-end latency from the schedule: delay + connect_s + send_s + latency_s."""
    return delay(c) + connect(c) + send(c) + c["latency_s"]


def at_least_elapsed(x: FloatArray, c: Cols, failed: np.ndarray) -> FloatArray:
    """A time to some event (*x*: ttft, ttfat) with each failed call that never reached it counted at its elapsed
    time instead: where(failed and x is NaN, e2e, x) — a lower bound for that call ("at least")."""
    return np.where(failed & np.isnan(x), e2e(c), x)


def tpot(c: Cols) -> FloatArray:
    """Time per output token after the first: (latency_s − ttft_s) / (completion_tokens − 1), calls with ≥ 2 tokens."""
    n = c["completion_tokens"]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n >= 2, (c["latency_s"] - c["ttft_s"]) / (n - 1), np.nan)


def service(c: Cols) -> FloatArray:
    """The server's own busy time for the call: (timings.prompt_ms + timings.predicted_ms) / 1000."""
    return (c["prompt_ms"] + c["predicted_ms"]) / 1000.0


def queue(c: Cols, ttft_floor: float | None) -> tuple[FloatArray, np.ndarray]:
    """Time waiting, not being served, from the schedule: e2e − service where the server reports timings,
    else ttft − ttft_floor (the arm's lowest TTFT for the case).  Returns (values, True where from timings)."""
    sv = service(c)
    from_timings = ~np.isnan(sv)
    fallback = ttft(c) - ttft_floor if ttft_floor is not None else np.full(sv.shape, np.nan)
    return np.where(from_timings, e2e(c) - sv, fallback), from_timings


def meets_slo(c: Cols, slo_ttft: float | None, slo_tpot: float | None, slo_e2e: float | None) -> np.ndarray:
    """Whether each call met every SLO given (a metric it lacks fails that SLO)."""
    ok = np.ones(c["t_send"].shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        for limit, fn in ((slo_ttft, ttft), (slo_tpot, tpot), (slo_e2e, e2e)):
            if limit is not None:
                ok &= fn(c) <= limit  # NaN compares False
    return ok


def itl(r: CallRow) -> list[float]:
    """Inter-token latencies of one call: each chunk gap / (completion_tokens / chunks), so a chunk that
    carries several tokens counts as several."""
    ts = r.get("chunk_t") or []
    n = r.get("completion_tokens")
    if len(ts) < 2 or not n:
        return []
    per_chunk = n / len(ts)
    return [(b - a) / per_chunk for a, b in zip(ts, ts[1:])]


def itl_pooled(rs: Sequence[CallRow]) -> FloatArray:
    """:func:`itl` of every call, pooled into one array (vectorised)."""
    use = [r for r in rs if r.get("completion_tokens") and len(r.get("chunk_t") or ()) >= 2]
    if not use:
        return np.empty(0)
    lengths = np.array([len(r["chunk_t"]) for r in use])
    flat = np.fromiter(itertools.chain.from_iterable(r["chunk_t"] for r in use), dtype=float, count=int(lengths.sum()))
    per_chunk: FloatArray = np.array([r["completion_tokens"] for r in use], dtype=float) / lengths
    gaps: FloatArray = np.diff(flat)
    keep: npt.NDArray[np.bool_] = np.ones(gaps.size, dtype=bool)
    keep[np.cumsum(lengths)[:-1] - 1] = False  # the gap between one call's last chunk and the next call's first
    return gaps[keep] / np.repeat(per_chunk, lengths - 1)


def tokens_in_window(rs: Sequence[CallRow], c: Cols, a: float, b: float) -> float:
    """Output tokens that arrived within [a, b]: each call's chunks there × completion_tokens / chunks
    (chunk i arrived at ready + chunk_t[i])."""
    t0s = ready(c)
    first = np.array([(r.get("chunk_t") or (np.nan,))[0] for r in rs], dtype=float) + t0s
    last = np.array([(r.get("chunk_t") or (np.nan,))[-1] for r in rs], dtype=float) + t0s
    n = np.nan_to_num(c["completion_tokens"])
    inside = (first >= a) & (last <= b)
    total = float(n[inside].sum())
    with np.errstate(invalid="ignore"):
        edge = np.nonzero(~inside & (last >= a) & (first <= b) & (n > 0))[0]
    for i in edge.tolist():  # calls that straddle an edge of the window: count their chunks inside
        r = rs[i]
        ts, t0 = r["chunk_t"], t0s[i]
        total += n[i] * sum(1 for t in ts if a <= t0 + t <= b) / len(ts)
    return total


# ------------------------------------------------------------------ grouping


def _is_load(r: Mapping[str, object]) -> TypeGuard[CallRow]:
    """Whether *r* is a load stage's call (a ``call`` record with its stage's keys: :class:`.rows.CallRow`)."""
    return r.get("kind") == "load"


def _pair(r: CallRow) -> tuple[str, str]:
    """(arm, stage) of a load call.  (Its stage the schema requires, ``LoadModel``; ``CallRow``, the row of
    every kind of call, has it optional.)"""
    return r["arm"], cast(str, r.get("stage"))


def load_records(records: Iterable[Mapping[str, object]]) -> dict[tuple[str, str], list[CallRow]]:
    """Load records by (arm, stage), keeping only each pair's latest execution (``load_run``)."""
    by_pair: dict[tuple[str, str], list[CallRow]] = defaultdict(list)
    last_run: dict[tuple[str, str], object] = {}
    for r in records:
        if not _is_load(r):
            continue
        k = _pair(r)
        run = r.get("load_run")
        if k in last_run and last_run[k] != run:
            by_pair[k] = []  # a later execution supersedes the earlier one
        last_run[k] = run
        by_pair[k].append(r)
    return by_pair


def measured_calls(records: Iterable[Mapping[str, object]]) -> list[CallRow]:
    """The load calls that count (:func:`load_records`: each (arm, stage)'s latest execution), without warm-up
    calls and retried attempts; failed calls kept."""
    return [r for rs in load_records(records).values() for r in rs if not r.get("retried") and not r.get("warmup")]


def stage_metrics(metrics: list[MetricsRow], arm: str, stage: str, t_first: float,
                  t_last: float) -> dict[str, float]:
    """The server's figures over the stage (:func:`.metrics.arm_metrics`: counters summed over label sets)
    between the ``load-start`` scrape before the stage's first send and the ``load-end`` scrape after its
    last end; {} without them.  (A scrape without its time, ``t`` null, is neither.)"""
    starts = [m for m in metrics if m.get("arm") == arm and m.get("when") == f"load-start {stage}"
              and (t := m.get("t", 0)) is not None and t <= t_first]
    ends = [m for m in metrics if m.get("arm") == arm and m.get("when") == f"load-end {stage}"
            and (t := m.get("t", 0)) is not None and t >= t_last]
    if not starts or not ends:
        return {}
    return arm_metrics(starts[-1]["samples"], ends[0]["samples"])


def window(c: Cols, measured: np.ndarray) -> tuple[float, float, str] | None:
    """(start, end, basis) of the throughput window; see the module docstring."""
    if not measured.any():
        return None
    sched = np.where(np.isnan(c["scheduled_t"]), c["t_send"], c["scheduled_t"])[measured]
    a, b = float(sched.min()), float(c["t_send"][measured].max())
    e = e2e(c)[measured]
    e = e[~np.isnan(e)]
    if e.size == 0 or b - a < float(np.median(e)) or b <= a:  # (all sent at one instant: no sending window)
        b = float(np.nanmax((ready(c) + np.nan_to_num(c["latency_s"]))[measured]))
        return (a, b, "whole stage") if b > a else None
    return a, b, "sending"


def _clock_uncertainty(rs: list[CallRow]) -> float | None:
    """max ``clock_uncertainty_s`` of *rs* (each set by the reader); None when one of them lacks it."""
    vals = [v for r in rs if (v := r.get("clock_uncertainty_s")) is not None]
    return None if not rs or len(vals) < len(rs) else float(max(vals))


def stage_row(rs: list[CallRow], ttft_floors: dict[FloorKey, float], metrics: list[MetricsRow],
              end: StageEndRow | None = None) -> LoadRow:
    """The row of one (arm, stage) from its records (warm-up included in ``rs``; left out of the latencies)
    and its execution's ``stage_end`` record (*end*; None when the stage was cut short): ``workers`` (client
    processes) and ``lost_workers`` (those that died: which, and how many scheduled calls have no record).
    ``clock_uncertainty_s``: on workers, the largest ± within which the reader put a worker's absolute times
    on the coordinator's clock (its ``clock`` record); None on one process (one clock) or where a shard had
    no clock record for the stage (the reader warned)."""
    r0 = rs[0]
    arm, stage = _pair(r0)
    workers = r0.get("workers") or 1
    final = [r for r in rs if not r.get("retried")]
    c = columns(final)
    warm = np.array([bool(r.get("warmup")) for r in final], dtype=bool)
    failed_all = np.array([r.get("error") is not None for r in final], dtype=bool)
    measured = ~warm
    okm = measured & ~failed_all  # measured and successful
    ok_c = {k: v[okm] for k, v in c.items()}
    n_measured = int(measured.sum())
    errors: dict[str, int] = {}
    for r in itertools.compress(final, measured & failed_all):
        error = r.get("error")
        cls = error.get("class", "?") if error else "?"
        errors[cls] = errors.get(cls, 0) + 1
    ends = ready(c) + np.nan_to_num(c["latency_s"])
    sched = np.where(np.isnan(c["scheduled_t"]), c["t_send"], c["scheduled_t"])
    out_tok = float(np.nansum(ok_c["completion_tokens"]))
    in_tok = float(np.nansum(ok_c["prompt_tokens"]))
    figures = stage_metrics(metrics, arm, stage, float(np.nanmin(c["t_send"])), float(np.nanmax(ends))) if final else {}
    said = [cached_tokens(r) for r in itertools.compress(final, okm)]
    cached: int | None
    if any(v is not None for v in said):
        cached = int(sum(v or 0 for v in said))
        share, share_source = (cached / in_tok if in_tok else None), "calls"
    else:  # no call said (vLLM's default flags): never read as "nothing cached"
        cached, share = None, figures.get("prefix_cache_hit_share")
        share_source = "server counters over the stage" if share is not None else "not reported"
    slos = stage_slos(r0)
    good_all = meets_slo(c, slos.get("slo_ttft_s"), slos.get("slo_tpot_s"), slos.get("slo_e2e_s")) & ~failed_all

    win = window(c, measured)
    requests_per_s = output_tps = total_tps = goodput_rps = None
    if win:
        a, b, _ = win
        length = b - a
        succ = ~failed_all
        ended = succ & (ends >= a) & (ends <= b)
        out_in = tokens_in_window(list(itertools.compress(final, succ)), {k: v[succ] for k, v in c.items()}, a, b)
        with np.errstate(invalid="ignore"):
            first_tok = ready(c) + c["ttft_s"]
            prompt_in = float(np.nansum(c["prompt_tokens"][succ & (first_tok >= a) & (first_tok <= b)]))
        requests_per_s = float(ended.sum()) / length
        output_tps = out_in / length
        total_tps = (out_in + prompt_in) / length
        goodput_rps = float((ended & good_all).sum()) / length if slos else None

    m_c, m_failed = {k: v[measured] for k, v in c.items()}, failed_all[measured]  # every measured call
    e2e_all, e2e_ok = distribution(e2e(m_c)), distribution(e2e(ok_c))
    floor = ttft_floors.get(floor_key(r0)) if r0.get("mode") != "trace" else None  # one prompt size and share only
    q, from_timings = queue(ok_c, floor)
    queue_d = distribution(q)
    server_wait = distribution(q - delay(ok_c) - send(ok_c))
    sources = []
    if from_timings.any():
        sources.append("server timings")
    if (~from_timings & ~np.isnan(q)).any():
        sources.append("ttft above floor")
    svc = distribution(service(ok_c))
    mean_service = svc["mean"] if svc else (e2e_ok["mean"] - queue_d["mean"] if e2e_ok and queue_d else None)
    conn = connect(ok_c)
    target = np.array([r.get("target_input_tokens") for r in itertools.compress(final, okm)], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        err = (ok_c["prompt_tokens"] - target) / target
    err = err[np.isfinite(err)]
    row: LoadRow = {
        "arm": arm, "stage": stage, "sweep": r0.get("sweep"), "mode": r0.get("mode"), "case": r0.get("case"),
        "concurrency": r0.get("concurrency"), "rate": r0.get("rate"), "arrival": r0.get("arrival"),
        "burstiness": r0.get("burstiness"), "speed": r0.get("speed"), "prefix_sharing": r0.get("prefix_sharing"),
        "requests": n_measured, "ok": int(okm.sum()), "failed": n_measured - int(okm.sum()),
        "warmup_requests": int(warm.sum()), "retried_attempts": len(rs) - len(final), "errors": errors,
        # (the ledger's row types a lost worker's error text, the summary's also None: the same dicts)
        "workers": workers, "lost_workers": cast("list[LostWorker]", (end.get("lost_workers") if end else None) or []),
        "clock_uncertainty_s": _clock_uncertainty(final) if workers > 1 else None,
        "duration_s": float(ends[measured].max() - sched[measured].min()) if n_measured else None,
        "cached_tokens": cached, "cached_share": share, "cached_share_source": share_source,
        "output_tokens": int(out_tok), "input_tokens": int(in_tok), "slo": slos or None,
        "window_s": win[1] - win[0] if win else None, "window_basis": win[2] if win else None,
        "requests_per_s": requests_per_s, "output_tps": output_tps, "total_tps": total_tps,
        "goodput_rps": goodput_rps,
        "slo_met_share": float((good_all & okm).sum()) / n_measured if slos and n_measured else None,
        "ttft": distribution(at_least_elapsed(ttft(m_c), m_c, m_failed)), "ttft_ok": distribution(ttft(ok_c)),
        "ttfat": distribution(at_least_elapsed(ttfat(m_c), m_c, m_failed)), "ttfat_ok": distribution(ttfat(ok_c)),
        "tpot": distribution(tpot(ok_c)),  # successful calls only: a failed call has no token count
        "itl": distribution(itl_pooled(list(itertools.compress(final, okm)))),
        "e2e": e2e_all, "e2e_ok": e2e_ok, "queue": queue_d, "server_wait": server_wait,
        "queue_source": ", ".join(sources) or None, "service": svc,
        "queueing": bool(server_wait and mean_service is not None
                         and server_wait["mean"] > max(QUEUE_FLOOR_S, QUEUE_SHARE * mean_service)),
        "server_queue_s": figures.get("queue_s_per_request"), "server_figures": dict(figures),
        "connect": distribution(conn[conn > 0]), "new_connections": int((conn > 0).sum()),
        "client_lag": distribution(client_lag(m_c)),  # the measured calls': the warm-up's schedule is no level's
        "slot_wait": distribution(slot_wait(m_c)) if np.isfinite(m_c["slot_wait_s"]).any() else None,
        "loop_lag": distribution(np.array([r.get("loop_lag_s") for r in final], dtype=float)),
        "input_token_error": float(err.mean()) if err.size else None,
        "trace_import": next((v for r in rs if (v := r.get("trace_import")) is not None), None),
        "token_check": next((tc for r in rs if (tc := r.get("token_check")) is not None), None),
        "p50_s": e2e_all["p50"] if e2e_all else None, "p99_s": e2e_all["p99"] if e2e_all else None,
        "throughput_tps": output_tps, "knee": False, "warnings": [],
    }
    row["warnings"] = [w.text for w in row_warnings(row)]
    return row


def row_warnings(row: LoadRow) -> list[RunWarning]:
    """Actionable warnings for one (arm, stage) row (its ``warnings`` keeps their texts)."""
    w: list[RunWarning] = []
    where = f"load {row['arm']}/{row['stage']}"

    def warn(kind: WarningKind, text: str) -> None:
        w.append(RunWarning(kind, f"{where}: {text}", row["arm"], row.get("case")))

    lag = row.get("client_lag")
    if lag and lag["p99"] > LAG_WARN_S:
        warn(WarningKind.LOAD_CLIENT_LAG,
             f"the client sent late (lag behind schedule p99 {lag['p99'] * 1000:.1f} ms, max "
             f"{lag['max'] * 1000:.1f} ms > {LAG_WARN_S * 1000:.0f} ms); latencies count the delay from the "
             "schedule, but the load offered was lower than planned: lower the load, or run the client on a less "
             "busy machine")
    wait = row.get("slot_wait")
    if wait and wait["p99"] > LAG_WARN_S:
        warn(WarningKind.LOAD_CLIENT_LAG,
             f"calls waited for a max_in_flight slot (p99 {wait['p99'] * 1000:.1f} ms, max {wait['max'] * 1000:.1f} "
             "ms): the server's backlog reached the cap; latencies count the wait from the schedule, but those calls "
             "went out later than planned: raise max_in_flight to offer the planned load")
    loop = row.get("loop_lag")
    if loop and loop["max"] > LAG_WARN_S:
        warn(WarningKind.LOAD_LOOP_STALL, f"the client's event loop stalled up to {loop['max'] * 1000:.1f} ms (p99 of "
             f"the per-call windows {loop['p99'] * 1000:.1f} ms); its timestamps (TTFT, inter-token gaps) may be late "
             "by as much")
    if row["failed"]:
        errs = ", ".join(f"{k} {v}" for k, v in sorted(row["errors"].items()))
        warn(WarningKind.LOAD_FAILED, f"{row['failed']} of {row['requests']} calls failed ({errs})")
    if row["requests"] == 0:
        warn(WarningKind.LOAD_NO_CALLS, "no measured calls (only warm-up, or the stage was cut short)")
    for lost in row.get("lost_workers") or []:
        never = "an unknown number of" if lost.get("never_sent") is None else \
            f"{lost['never_sent']} of its {lost['scheduled']}"
        warn(WarningKind.LOAD_WORKER_LOST, f"worker {lost['worker']} of {row['workers']} died ({lost.get('error')}); "
             f"its {lost['recorded']} recorded calls are counted, {never} scheduled calls have no record: the load "
             "offered was lower than planned (leverbench run --resume runs the stage again)")
    e = row.get("input_token_error")
    if e is not None and abs(e) > TOKEN_ERROR_WARN:
        warn(WarningKind.LOAD_TOKEN_ERROR, f"prompts were {e:+.1%} off the trace's input lengths on average (engine's "
             "count vs target)")
    return w


def floor_key(r: CallRow) -> FloorKey:
    """The calls that share a TTFT floor: (arm, case, prefix_sharing) (a prompt more shared is cached more)."""
    return r["arm"], r.get("case"), r.get("prefix_sharing")


def stage_slos(r: CallRow) -> StageSlo:
    """The SLOs a stage's call *r* carries (those its stage sets)."""
    slos: StageSlo = {}
    if (ttft_s := r.get("slo_ttft_s")) is not None:
        slos["slo_ttft_s"] = ttft_s
    if (tpot_s := r.get("slo_tpot_s")) is not None:
        slos["slo_tpot_s"] = tpot_s
    if (e2e_s := r.get("slo_e2e_s")) is not None:
        slos["slo_e2e_s"] = e2e_s
    return slos


def ttft_floors(by_pair: dict[tuple[str, str], list[CallRow]]) -> dict[FloorKey, float]:
    """Per (arm, case, prefix_sharing): the lowest client TTFT (ttft_s: lag and connect time excluded) over all
    its load calls, warm-up included."""
    out: dict[FloorKey, float] = {}
    for rs in by_pair.values():
        for r in rs:
            if r.get("error") is None and (t := r.get("ttft_s")) is not None:
                k = floor_key(r)
                if k not in out or t < out[k]:
                    out[k] = t
    return out


def knee_index(p99: Sequence[float | None], tput: Sequence[float | None], latency_factor: float = KNEE_LATENCY_FACTOR,
               throughput_gain: float = KNEE_THROUGHPUT_GAIN) -> int | None:
    """First i with a later j: p99[j] > latency_factor × p99[i] and tput[j] < (1 + throughput_gain) × tput[i]."""
    for i in range(len(p99)):
        p_i, t_i = p99[i], tput[i]
        if p_i is None or t_i is None:
            continue
        for j in range(i + 1, len(p99)):
            p_j, t_j = p99[j], tput[j]
            if p_j is None or t_j is None:
                continue
            if p_j > latency_factor * p_i and t_j < (1 + throughput_gain) * t_i:
                return i
    return None


def mark_knees(rows: list[LoadRow], latency_factor: float = KNEE_LATENCY_FACTOR,
               throughput_gain: float = KNEE_THROUGHPUT_GAIN) -> None:
    """Set ``knee`` on each (arm, sweep)'s knee stage (see the module docstring); rows in run order."""
    groups: dict[tuple[str, str], list[LoadRow]] = defaultdict(list)
    for r in rows:
        if sweep := r.get("sweep"):
            groups[(r["arm"], sweep)].append(r)
    for grp in groups.values():
        i = knee_index([g["p99_s"] for g in grp], [g["throughput_tps"] for g in grp], latency_factor, throughput_gain)
        if i is not None:
            grp[i]["knee"] = True


def load_summary(ledger: Ledger[RunHeaderRow]) -> list[LoadRow]:
    """Per (arm, stage) rows, in the order the stages ran; [] when the run had no load stages."""
    by_pair = load_records(ledger.records)
    by_pair = {k: v for k, v in by_pair.items() if v}
    if not by_pair:
        return []
    metrics = [m for m in ledger.of_kind("metrics") if m["when"].startswith("load-")]
    floors = ttft_floors(by_pair)
    first_t = {k: min(r.get("scheduled_t") or r["t_send"] for r in rs) for k, rs in by_pair.items()}
    ends = {(r.get("arm"), r.get("stage"), r.get("load_run")): r for r in ledger.of_kind("stage_end")}
    rows = [stage_row(rs, floors, metrics, ends.get((arm, stage, rs[0].get("load_run"))))
            for (arm, stage), rs in sorted(by_pair.items(), key=lambda kv: first_t[kv[0]])]
    mark_knees(rows)
    return rows


def load_warnings(rows: list[LoadRow]) -> list[RunWarning]:
    """Every row's warnings, in row order, for the summary's warnings."""
    return [w for r in rows for w in row_warnings(r)]


def sweep_curves(rows: list[LoadRow]) -> list[LoadCurve]:
    """Plot data: per (arm, sweep), the points (load, throughput_tps, p50_s, p99_s, knee) in run order."""
    out: dict[tuple[str, str], LoadCurve] = {}
    for r in rows:
        if not (sweep := r.get("sweep")):
            continue
        k = (r["arm"], sweep)
        c = out.setdefault(k, {"arm": r["arm"], "sweep": sweep,
                               "x": "concurrency" if r["mode"] == "closed" else "rate", "points": []})
        point: CurvePoint = {"stage": r["stage"], "load": r["concurrency"] if r["mode"] == "closed" else r["rate"],
                             "throughput_tps": r["throughput_tps"], "requests_per_s": r["requests_per_s"],
                             "p50_s": r["p50_s"], "p99_s": r["p99_s"], "knee": r["knee"]}
        c["points"].append(point)
    return list(out.values())
