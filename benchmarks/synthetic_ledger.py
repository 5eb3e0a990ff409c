"""A synthetic ledger of any size, shaped as the runner writes one today (for ``analysis_speed.py``).

The experiment is an experiment file (3 arms: ``current`` the baseline, ``cache`` with the prefix cache, the
control, ``cache+drafter`` with a drafter too; cases of turns of :data:`CALLS_PER_TURN` calls, the first prompt
and three scripted steps), loaded by ``leverbench.config.load``; the header is ``runner.header.run_header``'s
for that experiment against three llama.cpp endpoints (what discovery would have found: ``runner.discover.knobs``
of a /props, /slots and model list); the records are ``CallRecord``'s and ``TurnRecord``'s ``to_dict`` (a
template per arm and kind, its values replaced per call, the keys in the order they make) and the runner's
other kinds as a run against endpoints writes them (tests/test_benchmarks.py checks every record's keys
against a real run's on the simulator); the lines go through ``ledger.writer.LedgerWriter`` (compact JSON,
one fsync per round).  In file order, as the runner writes them: per arm two warm-up calls and three reset
checks, its ``cache_reset`` record (cold before every turn, by the engine's reset endpoint) and its ``metrics``
scrape; then per round a sentinel of every arm and each case's turn on every arm (the arms in a rotating
order), each turn's calls then its turn record (with its ``cache``); closing sentinels and scrapes.

A repeat is a round; a ledger may hold at most ``config.limits.MAX_REPEATS`` of them (the reader refuses
more), so a larger ledger spreads its calls over more cases (:func:`shape`: 1,000,000 calls are 84 cases of
992 repeats, 999,936 calls).  The values are seeded: a call's answer length (20-200 tokens) and its answer's
hash are the same on every arm (greedy decoding of one model); prefill at 0.3 ms per uncached prompt token,
decode at 50 tokens/s, or 125 with the drafter (accepting half its drafts); the cache arms find in their cache
the previous step's prompt (whole 16-token blocks); every time ±3 %.  Chunks: 16 per answer (48 per
sentinel), as before.
"""

from __future__ import annotations

import hashlib
import math
import random
import uuid
from pathlib import Path
from typing import Any

from leverbench.config import load
from leverbench.config.limits import MAX_REPEATS
from leverbench.ledger.records import CallRecord, TurnRecord
from leverbench.ledger.rows import CacheResetRow, CallExtras, CallRow, MetricsRow
from leverbench.ledger.writer import LedgerWriter
from leverbench.runner.discover import knobs
from leverbench.runner.endpoint import ArmEndpoint
from leverbench.runner.engine_mode import arm_server_state, choose, server_state
from leverbench.runner.header import run_header
from leverbench.runner.telemetry import Telemetry

ARMS = {"current": ("baseline", False, "none"), "cache": ("control", True, "none"),
        "cache+drafter": ("treatment", True, "ngram-mod K=7")}  # name: (role, prefix_cache, drafter)
CALLS_PER_TURN = 4
MIN_CASES = 4  # the cases of a small ledger; a large one has more (shape)
CHUNKS = 16  # streamed chunks per answer
SENTINEL_TOKENS = 48  # the experiment's default sentinel_tokens
MAX_TOKENS = 256
BLOCK = 16  # the prefix cache's block, in tokens
DECODE_TPS = {"current": 50.0, "cache": 50.0, "cache+drafter": 125.0}
PREFILL_S_PER_TOKEN = 0.0003
T0 = 1.8e9  # the run's first epoch second
METRICS = ("prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total", "tokens_predicted_total",
           "tokens_predicted_seconds_total", "n_decode_total", "n_tokens_max_total",
           "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total",
           "spec_decode_num_drafts_total", "prompt_tokens_seconds", "predicted_tokens_seconds",
           "requests_processing", "requests_deferred", "n_busy_slots_per_decode")  # llama.cpp's, as scraped


def shape(n_calls: int) -> tuple[int, int]:
    """(cases, repeats) of a ledger of about *n_calls* calls: at least MIN_CASES cases, as many more as it takes
    to keep repeats within MAX_REPEATS; repeats = n_calls // (arms × cases × calls per turn), at least 1."""
    per_case_round = len(ARMS) * CALLS_PER_TURN
    cases = max(MIN_CASES, math.ceil(n_calls / (per_case_round * MAX_REPEATS)))
    return cases, max(1, n_calls // (per_case_round * cases))


def experiment_toml(cases: int, repeats: int) -> str:
    """The experiment file the ledger is a run of."""
    text = f'[experiment]\nname = "analysis-speed"\nrepeats = {repeats}\nbaseline = "current"\n'
    for i, (arm, (role, cache, drafter)) in enumerate(ARMS.items()):
        text += (f'\n[[arms]]\nname = "{arm}"\nrole = "{role}"\nbase_url = "http://127.0.0.1:{8081 + i}"\n'
                 f'model = "m"\nconditions = {{ prefix_cache = {str(cache).lower()}, drafter = "{drafter}" }}\n')
    for c in range(cases):
        text += f'\n[[cases]]\nname = "c{c:02d}"\nprompt = "question {c}"\nmax_tokens = {MAX_TOKENS}\n'
        text += f'[[cases.steps]]\nprompt = "next"\nmax_tokens = {MAX_TOKENS}\n' * (CALLS_PER_TURN - 1)
    return text


def header(exp_path: Path, run_id: str) -> Any:
    """The run header the runner would write for the experiment at *exp_path* against llama.cpp endpoints."""
    exp = load(exp_path)
    telemetry = Telemetry.open(0.0)
    try:
        engines = choose(exp.spec.experiment.engines, {}, exp.spec.experiment.order)
        engines["server_state"] = server_state(engines["mode"], [], [a.name for a in exp.spec.arms])
        endpoints = {}
        for arm in exp.spec.arms:
            drafter = ARMS[arm.name][2] != "none"
            props = {"model_path": "/models/m.gguf", "total_slots": 1, "build_info": "b11549", "n_ctx": 32768}
            raw = {"known": {}, "props": {**props, "default_generation_settings": {"n_ctx": 32768}},
                   "slots": [{"id": 0, "speculative": drafter}],
                   "models": [{"id": "m", "owned_by": "llamacpp"}], "metrics": None}
            discovered = {"server_state": arm_server_state(engines["mode"], False), "props": props, "models": ["m"],
                          "knobs": knobs(raw), "gpu": dict(telemetry.endpoint_facts(arm.name, None, {}))}
            endpoints[arm.name] = ArmEndpoint(arm, arm.base_url or "", "m", {}, discovered=discovered)
        return run_header(run_id, exp, endpoints, telemetry, engines)
    finally:
        telemetry.close()


def _call(kind: str, arm: str, extra: CallExtras, **values: Any) -> CallRow:
    """A call record's dict as the runner writes it (every field it writes for such a call, in order)."""
    fields: dict[str, Any] = {
        "turn_id": "t" if kind == "call" else None, "t_send": T0, "connect_s": 0.0, "send_s": 0.0, "ttft_s": 0.0,
        "t_first_answer_s": 0.0, "latency_s": 0.0, "status": 200, "prompt_tokens": 0, "completion_tokens": 0,
        "cached_tokens": 0, "token_source": "usage", "finish_reason": "stop", "output_sha256": "", "input_sha256": "",
        "timings": {"prompt_n": 0, "prompt_ms": 0.0, "predicted_n": 0, "predicted_ms": 0.0, "cache_n": 0}}
    return CallRecord(kind=kind, arm=arm, extra=extra, **(fields | values)).to_dict()


def _timed(tmpl: CallRow, rnd: random.Random, t: float, prompt: int, cached: int, out: int, **values: Any) -> dict:
    """*tmpl* with one call's measurements: sent at *t*, *prompt* tokens of which *cached*, *out* generated."""
    arm = tmpl["arm"]
    prefill = PREFILL_S_PER_TOKEN * (prompt - cached) * rnd.uniform(0.97, 1.03)
    decode = out / DECODE_TPS[arm] * rnd.uniform(0.97, 1.03)
    ttft = prefill + 0.002
    chunks = SENTINEL_TOKENS if tmpl["kind"] in ("sentinel", "warmup") and out > 1 else min(out, CHUNKS)
    timings = {"prompt_n": prompt - cached, "prompt_ms": 1000 * prefill,
               "prompt_per_token_ms": 1000 * prefill / max(1, prompt - cached),
               "prompt_per_second": (prompt - cached) / prefill if prefill else 0.0, "predicted_n": out,
               "predicted_ms": 1000 * decode, "predicted_per_token_ms": 1000 * decode / out,
               "predicted_per_second": out / decode, "cache_n": cached}
    if ARMS[arm][2] != "none":
        timings |= {"draft_n": 2 * out, "draft_n_accepted": out}
    chars = [4 * out // chunks] * chunks
    return {**tmpl, "t_send": t, "send_s": 0.0003, "ttft_s": ttft, "t_first_answer_s": ttft, "latency_s": ttft + decode,
            "chunk_t": [round(ttft + i * decode / chunks, 6) for i in range(chunks)], "chunk_chars": chars,
            "prompt_tokens": prompt, "completion_tokens": out, "cached_tokens": cached, "content_chars": sum(chars),
            "answer_chunks": chunks, "timings": timings, "input_chars": 4 * prompt, **values}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class _Writer:
    """The run's clock, each arm's counters (its metrics scrapes), and the records of the round being written."""

    def __init__(self, path: Path, seed: int):
        self.rnd, self.t, self.lines = random.Random(seed), T0, []
        self.ledger = LedgerWriter(path)
        self.sums = {a: dict.fromkeys(METRICS, 0.0) for a in ARMS}
        self.probe = {a: _call("sentinel", a, CallExtras(probe_tokens=SENTINEL_TOKENS, position="start",
                                                        length_method="ignore_eos"), length_verified=True,
                               finish_reason="length") for a in ARMS}
        self.check = {a: _call("warmup", a, CallExtras(position="check", probe_tokens=1), finish_reason="length")
                      for a in ARMS}
        self.calls = {a: _call("call", a, CallExtras(scripted_step=0)) for a in ARMS}

    def add(self, rec: Any, arm: str | None = None) -> None:
        self.lines.append(rec)
        if arm is not None:  # a call: the clock moves on by its time, the arm's server counts its work
            self.t = rec["t_send"] + (rec["connect_s"] or 0.0) + rec["send_s"] + rec["latency_s"] + 0.001
            s, tm = self.sums[arm], rec["timings"]
            s["prompt_tokens_total"] += tm["prompt_n"]
            s["prompt_tokens_cached_total"] += tm["cache_n"]
            s["prompt_seconds_total"] += tm["prompt_ms"] / 1000
            s["tokens_predicted_total"] += tm["predicted_n"]
            s["n_decode_total"] += tm["predicted_n"]
            s["tokens_predicted_seconds_total"] += tm["predicted_ms"] / 1000
            s["spec_decode_num_draft_tokens_total"] += tm.get("draft_n", 0)
            s["spec_decode_num_accepted_tokens_total"] += tm.get("draft_n_accepted", 0)

    def probe_call(self, arm: str, tmpl: CallRow, repeat: int, prompt: int, out: int, **values: Any) -> None:
        self.add(_timed(tmpl, self.rnd, self.t, prompt, 0, out, repeat=repeat, output_sha256=_sha(f"p{out}"),
                        input_sha256=_sha(f"{tmpl['case']}{repeat}"), **values), arm)

    def scrape(self, when: str) -> None:
        for a in ARMS:
            row: MetricsRow = {"kind": "metrics", "arm": a, "when": when, "t": self.t,
                               "samples": {f"llamacpp:{k}": v for k, v in self.sums[a].items()}}
            self.add(row)

    def flush(self) -> None:
        self.ledger.append_many(self.lines)
        self.lines = []


def write_ledger(path: Path, n_calls: int, seed: int = 1) -> tuple[int, int]:
    """Write a run of about *n_calls* calls to *path* (its experiment file beside it, ``experiment.toml``);
    returns (cases, repeats)."""
    cases, repeats = shape(n_calls)
    exp_path = path.with_name("experiment.toml")
    exp_path.write_text(experiment_toml(cases, repeats))
    path.unlink(missing_ok=True)
    w = _Writer(path, seed)
    w.add(header(exp_path, uuid.UUID(int=w.rnd.getrandbits(128)).hex[:12]))
    sentinel_request = {"model": "m", "max_tokens": SENTINEL_TOKENS, "temperature": 0.0, "ignore_eos": True,
                        "min_tokens": SENTINEL_TOKENS}
    for a in ARMS:
        for i in range(2):
            w.probe_call(a, {**w.probe[a], "kind": "warmup", "case": "(sentinel)", "position": None}, i, 72,
                         SENTINEL_TOKENS, connect_s=0.0004 if i == 0 else 0.0, request=sentinel_request)
    for a in ARMS:
        for i in range(3):
            w.probe_call(a, {**w.check[a], "case": "(reset check)"}, i, 167, 1,
                         request={"model": "m", "max_tokens": 1, "temperature": 0.0})
    for a, (_, cache, _) in ARMS.items():
        reset: CacheResetRow = {
            "kind": "cache_reset", "arm": a, "state": "cold", "method": "reset", "recorded_method": "reset",
            "endpoint": "POST /slots/{id}?action=erase", "why": "POST /slots/{id}?action=erase, which the check saw "
            "take" if cache else "POST /slots/{id}?action=erase, which the check could not see take (the arm cached "
            "nothing of the check's prompt)", "check": "took" if cache else "unverified",
            "cached_before": 160 if cache else 0, "cached_after": 0, "check_tokens": 167}
        w.add(reset)
    w.scrape("before")
    arms = list(ARMS)
    for r in range(repeats):
        order = arms[r % len(arms):] + arms[:r % len(arms)]  # each round in another order (counterbalanced)
        for a in order:
            w.probe_call(a, {**w.probe[a], "case": "(sentinel)"}, r, 72, SENTINEL_TOKENS, request=sentinel_request)
        for c in range(cases):
            case = f"c{c:02d}"
            outs = [w.rnd.randint(20, 200) for _ in range(CALLS_PER_TURN)]  # the same answers on every arm
            for a in (order if c % 2 == 0 else order[::-1]):
                tid, t_start, totals = uuid.UUID(int=w.rnd.getrandbits(128)).hex[:12], w.t, [0, 0]
                for step, out in enumerate(outs):
                    prompt = 1000 + 100 * step
                    cached = (prompt - 100) // BLOCK * BLOCK if ARMS[a][1] and step else 0
                    w.add(_timed(w.calls[a], w.rnd, w.t, prompt, cached, out, case=case, repeat=r, step=step,
                                 turn_id=tid, scripted_step=step, output_sha256=_sha(f"{case}/{r}/{step}/{out}"),
                                 input_sha256=_sha(f"{case}/{step}"), request={"model": "m", "max_tokens": MAX_TOKENS,
                                                                                "temperature": 0.0}), a)
                    totals[0] += prompt
                    totals[1] += out
                turn_s = w.t - 0.001 - t_start
                w.add(TurnRecord(arm=a, case=case, repeat=r, turn_id=tid, t_start=t_start, turn_s=turn_s,
                                 model_s=turn_s, calls=CALLS_PER_TURN, scripted_steps=CALLS_PER_TURN,
                                 prompt_tokens=totals[0], output_tokens=totals[1], reasoning_tokens=0,
                                 cache={"state": "cold", "method": "reset", "reset_s": 0.0016}).to_dict())
                w.t += 0.0016
        w.flush()
    for a in arms:
        w.probe_call(a, {**w.probe[a], "case": "(sentinel)", "position": "end"}, 0, 72, SENTINEL_TOKENS,
                     request=sentinel_request)
    w.scrape("after")
    w.flush()
    w.ledger.close()
    return cases, repeats
