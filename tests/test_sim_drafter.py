"""The simulator's drafter models (``SimConfig.draft_model``, ``draft_cost``; ``engines/simulator/drafter.py``).

The truth functions are the oracle the tune tests use ("the simulator's own formula"), so they are checked here
against hand values, against what a real simulator run logged it did, and for the property the tune feature needs
(the best draft length falls as the batch grows).  The default (``round``, no cost) must leave the simulator as
it was.

Timing tolerance: a run's truth record holds both the decode time the timing model set (``decode_paced_s``, the sum
of its steps' durations) and the time the loop took (``decode_s``).  The first must equal the truth function
computed from the record (its tokens, acceptance, mean batch, speed factor) to float rounding: that is the exact
check.  The second only adds the loop's lateness (the first step's wake-up and the last one's: the steps after the
first are due on the loop clock, so lateness does not accumulate) and is never shorter than the model's time; how
much longer measures the machine's load, not the simulator (tests/limits.py: a speed measurement does not belong in
tests/), so it is bounded only by a hang limit.
"""

from __future__ import annotations

import json
import math
import threading
import urllib.request

import limits
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from leverbench.cli import sim as cli_sim
from leverbench.engines.sim_config import from_args
from leverbench.engines.simulator import (
    SimConfig,
    SimulatorThread,
    batch_factor,
    decode_step_sizes,
    expected_tokens_per_step,
    step_cost,
    step_sizes,
    tokens_per_step,
    true_decode_seconds,
    true_turn_seconds,
)

K, P, C = 4, 0.75, 0.15
E_HAND = (1 - 0.75**5) / 0.25  # 3.05078125
EXPECTED = dict(prefill_tps=1_000_000.0, decode_tps=100.0, draft_k=K, draft_acceptance=P, draft_cost=C,
                draft_model="expected", output_tokens=64)
CLOCK_S = 1e-3  # the loop may wake this early (its clock resolution): far below one step (10 ms and more here)


# ---------------------------------------------------------------- helpers


def _post(base: str, path: str, body: dict) -> bytes:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=limits.HTTP_S) as resp:  # noqa: S310 (loopback)
        return resp.read()


def _get(base: str, path: str) -> str:
    with urllib.request.urlopen(base + path, timeout=limits.HTTP_S) as resp:  # noqa: S310 (loopback)
        return resp.read().decode()


def stream_chunks(base: str, text: str = "alpha beta gamma") -> list[dict]:
    """A streamed chat's chunks that carry choices, in order."""
    raw = _post(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": text}], "stream": True})
    chunks = [json.loads(line[len("data: "):]) for line in raw.decode().splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    return [c for c in chunks if c["choices"]]


def words(chunk: dict) -> int:
    delta = chunk["choices"][0]["delta"]
    return len(((delta.get("content") or "") + " " + (delta.get("reasoning_content") or "")).split())


def metric(text: str, name: str, **labels: str) -> float:
    """A sample's value summed over the label sets that carry *labels* (histogram buckets excluded)."""
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and "le" not in s.labels and all(s.labels.get(k) == v for k, v in labels.items()))


def samples(text: str, name: str) -> list[float]:
    """A gauge's values over its label sets, those at 0 (a rank that served no request) left out."""
    return [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name and s.value]


def truth_of(cfg: SimConfig, t: dict) -> float:
    """:func:`true_decode_seconds` of the request a truth record *t* is of, from the record alone."""
    return true_decode_seconds(t["completion_tokens"], cfg.draft_k, t["draft_acceptance"], cfg.draft_cost,
                               cfg.decode_tps, batch=t["decode_batch"], batch_slowdown=cfg.decode_batch_slowdown,
                               model=cfg.draft_model, context=t["prompt_tokens"],
                               slowdown_per_ctx=cfg.decode_slowdown_per_ctx, speed_factor=t["speed_factor"])


def assert_matches_truth(cfg: SimConfig, t: dict) -> None:
    truth = truth_of(cfg, t)
    assert t["decode_paced_s"] == pytest.approx(truth, rel=1e-9), t
    assert truth - CLOCK_S <= t["decode_s"] <= truth + limits.SETTLE_S, t  # the loop's lateness only


def concurrently(*calls):
    """Run zero-argument callables at once (released together); their results in order."""
    results: list = [None] * len(calls)
    barrier = threading.Barrier(len(calls))

    def run(i, fn):
        barrier.wait(timeout=limits.HTTP_S)
        results[i] = fn()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=limits.HTTP_S)
    return results


# ---------------------------------------------------------------- the formulas


def test_expected_tokens_per_step_by_hand():
    assert expected_tokens_per_step(4, 0.75) == pytest.approx(E_HAND) == pytest.approx(3.05078125)
    assert expected_tokens_per_step(1, 0.5) == 1.5  # 1 + p
    assert expected_tokens_per_step(3, 1.0) == 4.0  # every draft accepted: K + 1
    assert expected_tokens_per_step(5, 0.0) == 1.0  # none: the step's own token
    assert expected_tokens_per_step(0, 0.75) == 1.0  # no drafter
    assert expected_tokens_per_step(8, 0.75) == pytest.approx(sum(0.75**j for j in range(9)))  # Σ p^j, j = 0..K
    assert step_cost(4, 0.15) == pytest.approx(1.6) and step_cost(4, 0.0) == 1.0 and step_cost(0, 0.15) == 1.0
    # the batch term: requests (round) or each request's 1 + K tokens (expected)
    assert batch_factor(3, 4, 0.1, "round") == pytest.approx(1.2)
    assert batch_factor(3, 4, 0.1, "expected") == pytest.approx(1 + 0.1 * (3 * 5 - 1))
    assert batch_factor(1, 4, 0.1, "expected") == pytest.approx(1.4)  # alone: K tokens more to verify
    assert batch_factor(3, 0, 0.1, "expected") == batch_factor(3, 0, 0.1, "round")  # no drafter: the same


def test_expected_steps_accumulate_e_per_request():
    assert decode_step_sizes(20, K, P, "expected") == [3, 3, 3, 3, 3, 3, 2]  # floor(i·3.05): 3, 6, ..., 18, 20
    for k, p in ((4, 0.75), (1, 0.5), (3, 0.9), (8, 0.75), (2, 0.3), (5, 1.0)):
        e = expected_tokens_per_step(k, p)
        for n in range(1, 300):
            sizes = decode_step_sizes(n, k, p, "expected")
            assert sum(sizes) == n and all(1 <= s <= k + 1 for s in sizes)
            assert set(sizes[:-1]) <= {math.floor(e), math.ceil(e)}
            if abs(n / e - round(n / e)) > 1e-6:  # (at a whole n / E the accumulation's floor decides)
                assert len(sizes) == math.ceil(n / e), (k, p, n)


def test_true_decode_seconds_closed_form():
    n, tps = 64, 100.0
    steps = math.ceil(n / E_HAND)  # 21
    assert len(decode_step_sizes(n, K, P, "expected")) == steps == 21
    assert true_decode_seconds(n, K, P, C, tps) == pytest.approx(steps * 1.6 / tps)
    assert true_decode_seconds(n, K, P, C, tps, batch=4, batch_slowdown=0.1) == \
        pytest.approx(steps * 1.6 * (1 + 0.1 * (4 * 5 - 1)) / tps)
    # round: 1 + round(4 · 0.75) = 4 tokens a step, the batch term counting requests
    assert true_decode_seconds(n, K, P, 0.0, tps, batch=4, batch_slowdown=0.1, model="round") == \
        pytest.approx(16 * 1.3 / tps)
    assert true_decode_seconds(n, 0, 0.0, C, tps) == pytest.approx(n / tps)  # no drafter: one token a step
    # the context term: step i at context prompt + tokens emitted before it
    sizes = decode_step_sizes(n, K, P, "expected")
    before = [sum(sizes[:i]) for i in range(len(sizes))]
    assert true_decode_seconds(n, K, P, C, tps, context=100, slowdown_per_ctx=1e-5) == \
        pytest.approx(sum(1 / tps + 1e-5 * (100 + b) for b in before) * 1.6)


def objective(k: int, concurrency: int, slowdown: float) -> float:
    cfg = SimConfig(**{**EXPECTED, "draft_k": k, "decode_batch_slowdown": slowdown, "slots": 4})
    return true_turn_seconds(cfg, prompt_tokens=32, n_tokens=256, concurrency=concurrency)


def best_k(concurrency: int, slowdown: float) -> int:
    return min(range(9), key=lambda k: objective(k, concurrency, slowdown))


def test_the_best_draft_length_falls_with_the_batch():
    """K ∈ 0..8, p = 0.75, c = 0.15 (issue 40's space): with a batch slowdown the best K alone is larger than at
    four in flight; without one the batch changes nothing."""
    assert best_k(1, 0.1) > best_k(4, 0.1)
    assert (best_k(1, 0.1), best_k(4, 0.1)) == (2, 1)
    assert (best_k(1, 0.05), best_k(4, 0.05)) == (3, 2)
    assert best_k(1, 0.0) == best_k(4, 0.0) == 4
    assert objective(2, 1, 0.1) < objective(0, 1, 0.1)  # the drafter pays alone


def test_true_turn_seconds_queues_beyond_the_slots():
    cfg = SimConfig(**{**EXPECTED, "slots": 2, "overhead_s": 0.01, "decode_batch_slowdown": 0.1})
    service = 0.01 + 32 / cfg.prefill_tps + true_decode_seconds(64, K, P, C, 100.0, batch=2, batch_slowdown=0.1)
    assert true_turn_seconds(cfg, 32, 64, concurrency=2) == pytest.approx(service)
    assert true_turn_seconds(cfg, 32, 64, concurrency=4) == pytest.approx(2 * service)  # two waves
    alone = 0.01 + 32 / cfg.prefill_tps + true_decode_seconds(64, K, P, C, 100.0, batch=1, batch_slowdown=0.1)
    assert true_turn_seconds(cfg, 32, 64) == pytest.approx(alone)


# ---------------------------------------------------------------- a real simulator


def test_expected_mode_run_matches_the_truth_function():
    cfg = SimConfig(**EXPECTED)
    with SimulatorThread(cfg) as s:
        chunks = stream_chunks(s.base_url)
        (t,) = s.truth()
    sizes = decode_step_sizes(64, K, P, "expected")
    assert [words(c) for c in chunks] == sizes and len(sizes) == math.ceil(64 / E_HAND)
    assert t["decode_steps"] == len(sizes) and t["completion_tokens"] == 64 and t["draft_acceptance"] == P
    assert (t["draft_tokens"], t["accepted_tokens"]) == (K * len(sizes), 64 - len(sizes))
    timings = chunks[-1]["timings"]
    assert (timings["draft_n"], timings["draft_n_accepted"]) == (K * len(sizes), 64 - len(sizes))
    assert t["decode_batch"] == 1.0
    assert_matches_truth(cfg, t)
    assert truth_of(cfg, t) == pytest.approx(len(sizes) * 1.6 / 100.0)


@pytest.mark.parametrize("model", ["expected", "round"])
def test_the_batch_term_under_concurrency_matches_the_truth_function(model):
    """Two requests decoding together: each one's paced time is the truth function at its mean batch (the term is
    linear in the batch), counting tokens (expected) or requests (round)."""
    cfg = SimConfig(**{**EXPECTED, "draft_model": model, "slots": 2, "decode_batch_slowdown": 0.1,
                       "output_tokens": 128})
    with SimulatorThread(cfg) as s:
        concurrently(lambda: stream_chunks(s.base_url, "one two"), lambda: stream_chunks(s.base_url, "three four"))
        records = s.truth()
    assert len(records) == 2
    for t in records:
        assert t["decode_steps"] == len(decode_step_sizes(128, K, P, model))
        assert_matches_truth(cfg, t)
    assert max(t["decode_batch"] for t in records) > 1.0  # they overlapped (each decodes for a second or more)
    assert all(t["decode_batch"] <= 2.0 for t in records)


@pytest.mark.parametrize("dialect", ["vllm", "llama.cpp", "sglang"])
def test_spec_decode_counters_follow_the_expected_steps(dialect):
    cfg = SimConfig(**{**EXPECTED, "dialect": dialect, "metrics": "on"})
    with SimulatorThread(cfg) as s:
        stream_chunks(s.base_url)
        stream_chunks(s.base_url, "delta epsilon")
        text = _get(s.base_url, "/metrics")
        records = s.truth()
    sizes = decode_step_sizes(64, K, P, "expected") * 2
    steps, accepted = len(sizes), sum(size - 1 for size in sizes)
    assert sum(t["decode_steps"] for t in records) == steps
    assert sum(t["accepted_tokens"] for t in records) == accepted == 2 * 64 - steps
    if dialect == "sglang":  # per scheduler rank: tokens per verify step, the accepted share (E − 1) / K (not p)
        lengths, rates = (samples(text, "sglang:spec_accept_" + what) for what in ("length", "rate"))
        assert lengths and lengths == pytest.approx([2 * 64 / steps] * len(lengths))  # (the same two answers)
        assert rates == pytest.approx([accepted / (K * steps)] * len(lengths))
        return
    prefix = "vllm:" if dialect == "vllm" else "llamacpp:"
    assert metric(text, prefix + "spec_decode_num_drafts_total") == steps
    assert metric(text, prefix + "spec_decode_num_draft_tokens_total") == K * steps
    assert metric(text, prefix + "spec_decode_num_accepted_tokens_total") == accepted
    per_pos = prefix + "spec_decode_num_accepted_tokens_per_pos_total"
    for pos in range(K):  # a step's accepted drafts are its first ones
        assert metric(text, per_pos, position=str(pos)) == sum(1 for size in sizes if size - 1 > pos), pos


# ---------------------------------------------------------------- the default is the old simulator


def test_defaults_leave_the_round_model():
    cfg = SimConfig()
    assert (cfg.draft_model, cfg.draft_cost) == ("round", 0.0)
    for k in range(9):
        for p in (0.0, 0.25, 0.5, 0.6, 0.75, 1.0):
            old = 1 if not k else 1 + round(k * p)  # the simulator's formula before the drafter models
            assert tokens_per_step(SimConfig(draft_k=k, draft_acceptance=p)) == old
            for n in (1, 7, 64, 129):
                assert decode_step_sizes(n, k, p) == decode_step_sizes(n, k, p, "round") == step_sizes(n, old)


def test_default_run_paces_as_before():
    """Round model, no cost: a drafter's steps carry 1 + round(K·p) tokens and each takes 1 / decode_tps (alone,
    the batch term 1): the paced time is the old sum, float for float."""
    cfg = SimConfig(prefill_tps=1_000_000.0, decode_tps=100.0, draft_k=4, draft_acceptance=0.5, output_tokens=40,
                    decode_batch_slowdown=0.3)
    with SimulatorThread(cfg) as s:
        chunks = stream_chunks(s.base_url)
        (t,) = s.truth()
    assert [words(c) for c in chunks] == [3] * 13 + [1]
    assert (t["decode_steps"], t["draft_tokens"], t["accepted_tokens"]) == (14, 56, 26)
    old = 0.0
    for _ in range(14):
        old += (1.0 / cfg.decode_tps + 0.0 * 0) * 1.0 * (1.0 + cfg.decode_batch_slowdown * (1 - 1))
    assert t["decode_paced_s"] == old
    assert_matches_truth(cfg, t)


# ---------------------------------------------------------------- settings


def test_settings_and_flags():
    params = cli_sim.sim_command.make_context("sim", ["--draft-model", "expected", "--draft-cost", "0.15"]).params
    assert (params["draft_model"], params["draft_cost"]) == ("expected", 0.15)
    cfg = from_args(["--draft-model", "expected", "--draft-cost=0.15", "--draft-k", "4"])
    assert (cfg.draft_model, cfg.draft_cost, cfg.draft_k) == ("expected", 0.15, 4)
    runner = CliRunner()
    assert runner.invoke(cli_sim.sim_command, ["--draft-model", "maybe"]).exit_code == 2
    assert "--draft-cost" in runner.invoke(cli_sim.sim_command, ["--help"]).output
    for bad, words_ in (({"draft_model": "maybe"}, "draft_model must be"), ({"draft_cost": -0.1}, "draft_cost must"),
                        ({"draft_cost": float("nan")}, "draft_cost must be a finite number")):
        with pytest.raises(ValueError, match=words_):
            SimConfig(**bad)
