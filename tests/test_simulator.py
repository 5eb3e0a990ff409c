"""The simulator keeps its promises: exact counts, set speeds, faults as named.

Timing assertions allow for a noisy 2-core machine (about ±30 % or 50 ms);
counting assertions are exact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import child
import limits
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from leverbench.cli import sim as cli_sim
from leverbench.engines import simulator
from leverbench.engines.simulator import (
    PrefixCache,
    SimConfig,
    SimulatorThread,
    chat_prompt_tokens,
    count_tokens,
    step_sizes,
    synthetic_text,
    tokenize,
)

FAST = dict(prefill_tps=20_000.0, decode_tps=500.0, output_tokens=16)
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Find a fact", "parameters": {}}}]


def close_to(measured: float, expected: float, rel: float = 0.3, floor: float = 0.05) -> bool:
    return abs(measured - expected) <= max(rel * expected, floor)


@contextlib.contextmanager
def sim(**overrides):
    with SimulatorThread(SimConfig(**{**FAST, **overrides})) as thread:
        yield thread


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------- HTTP helpers


def request(base: str, path: str, body: dict | None = None, timeout: float = limits.HTTP_S) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def get_json(base: str, path: str):
    status, raw = request(base, path)
    assert status == 200
    return json.loads(raw)


def chat(base: str, **body) -> dict:
    status, raw = request(base, "/v1/chat/completions", body)
    assert status == 200, raw
    return json.loads(raw)


@dataclass
class Stream:
    chunks: list[dict] = field(default_factory=list)  # chunks with choices
    usage_chunk: dict | None = None
    malformed: list[str] = field(default_factory=list)
    done: bool = False
    error: Exception | None = None
    received_at: list[float] = field(default_factory=list)

    @property
    def finish_reason(self):
        return next((c["choices"][0]["finish_reason"] for c in self.chunks if c["choices"][0]["finish_reason"]), None)

    def text(self, key: str = "content") -> str:
        return "".join(c["choices"][0]["delta"].get(key) or "" for c in self.chunks)

    def words_per_chunk(self) -> list[int]:
        deltas = [c["choices"][0]["delta"] for c in self.chunks]
        return [count_tokens((d.get("content") or "") + " " + (d.get("reasoning_content") or "")) for d in deltas]


def stream_chat(base: str, stop_after: int | None = None, **body) -> Stream:
    """POST a streaming chat request and parse every SSE line; errors are kept, not raised."""
    body = {"stream": True, **body}
    req = urllib.request.Request(
        base + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    out = Stream()
    try:
        with urllib.request.urlopen(req, timeout=limits.HTTP_S) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                _take(out, line[len("data: ") :])
                if stop_after is not None and len(out.chunks) >= stop_after:
                    break
    except (http.client.HTTPException, OSError) as err:
        out.error = err
    return out


def _take(out: Stream, data: str) -> None:
    if data == "[DONE]":
        out.done = True
        return
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError:
        out.malformed.append(data)
        return
    if chunk["choices"]:
        out.chunks.append(chunk)
        out.received_at.append(time.time())
    else:
        out.usage_chunk = chunk


def in_threads(*calls):
    """Run zero-argument callables at once; return their results in order."""
    results: list = [None] * len(calls)

    def run(i, fn):
        results[i] = fn()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
        time.sleep(0.005)  # a fixed arrival order
    for t in threads:
        t.join(timeout=limits.HTTP_S)
    return results


# ------------------------------------------------------------------- tokenizer


def test_tokenizer_is_one_token_per_word():
    assert tokenize("  alpha beta\n\tgamma ") == ["alpha", "beta", "gamma"]
    assert count_tokens("a b  c") == 3
    assert count_tokens("") == 0


def test_chat_prompt_counts_role_words_and_tools():
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is two plus two ?"}]
    assert chat_prompt_tokens(messages) == "system You are terse. user What is two plus two ?".split()
    tool_words = len(json.dumps(TOOLS).split())
    assert len(chat_prompt_tokens(messages, TOOLS)) == 11 + tool_words
    parts = [{"role": "user", "content": [{"type": "text", "text": "one two"}, {"type": "image_url", "image_url": {}}]}]
    assert chat_prompt_tokens(parts) == ["user", "one", "two"]


def test_server_reports_the_true_prompt_size():
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is two plus two ?"}]
    with sim() as s:
        plain = chat(s.base_url, messages=messages)
        with_tools = chat(s.base_url, messages=messages, tools=TOOLS, tool_choice="auto")
        truth = s.truth()
    assert plain["usage"]["prompt_tokens"] == 11
    assert with_tools["usage"]["prompt_tokens"] == 11 + len(json.dumps(TOOLS).split())
    assert [r["prompt_tokens"] for r in truth] == [11, with_tools["usage"]["prompt_tokens"]]


@given(st.integers(0, 400), st.one_of(st.integers(), st.text(max_size=20)))
@settings(max_examples=50, deadline=None)
def test_synthetic_text_has_exact_length(n, seed):
    text = synthetic_text(n, seed)
    assert count_tokens(text) == n
    assert synthetic_text(n, seed) == text


def test_synthetic_text_depends_on_seed():
    assert synthetic_text(50, 1) != synthetic_text(50, 2)
    assert synthetic_text(50, "doc-a") != synthetic_text(50, "doc-b")


# ---------------------------------------------------------------- prefix cache


def test_repeated_prompt_reuses_whole_blocks():
    prompt = user(synthetic_text(99, "cache"))  # 100 tokens with the role word
    ask = dict(messages=prompt, stream_options={"include_usage": True})
    with sim(cache_block=16) as s:
        first = stream_chat(s.base_url, **ask)
        second = stream_chat(s.base_url, **ask)
        uncached = stream_chat(s.base_url, cache_prompt=False, **ask)
        truth = s.truth()
    cached = [st.usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"] for st in (first, second, uncached)]
    assert cached == [0, 96, 0]
    assert [st.usage_chunk["usage"]["prompt_tokens"] for st in (first, second, uncached)] == [100, 100, 100]
    last = second.chunks[-1]["timings"]
    assert (last["cache_n"], last["prompt_n"]) == (96, 4)
    assert [r["cached_tokens"] for r in truth] == [0, 96, 0]


def test_cache_always_leaves_a_token_to_compute_and_can_be_off():
    exact = user(synthetic_text(31, "exact"))  # 32 tokens: two whole blocks
    with sim(cache_block=16) as s:
        chat(s.base_url, messages=exact)
        again = chat(s.base_url, messages=exact)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 16
    with sim(prefix_cache=False) as s:
        chat(s.base_url, messages=exact)
        again = chat(s.base_url, messages=exact)
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_a_request_without_cache_reuse_still_fills_the_cache():
    prompt = user(synthetic_text(49, "fill"))  # 50 tokens
    with sim(cache_block=16) as s:
        first = chat(s.base_url, messages=prompt, cache_prompt=False)
        second = chat(s.base_url, messages=prompt)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 48


def test_shared_prefix_is_reused_up_to_its_last_whole_block():
    shared = synthetic_text(39, "shared")  # 40 tokens with the role word
    with sim(cache_block=16) as s:
        chat(s.base_url, messages=user(shared + " first question here"))
        other = chat(s.base_url, messages=user(shared + " another question entirely different"))
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 32


@given(st.lists(st.lists(st.sampled_from("abc"), min_size=1, max_size=40), min_size=1, max_size=8), st.integers(1, 8))
@settings(max_examples=100, deadline=None)
def test_prefix_cache_matches_a_brute_force_oracle(prompts, block):
    cache = PrefixCache(block)
    seen: list[list[str]] = []
    for tokens in prompts:
        best = 0
        for old in seen:
            common = next((i for i, (a, b) in enumerate(zip(old, tokens)) if a != b), min(len(old), len(tokens)))
            best = max(best, min(common // block * block, (len(tokens) - 1) // block * block))
        assert cache.lookup(tokens) == best
        cache.insert(tokens)
        seen.append(tokens)


# -------------------------------------------------------------- answer length


@pytest.mark.parametrize(
    "extra, expected, finish",
    [
        ({}, 16, "stop"),
        ({"max_tokens": 5}, 5, "length"),
        ({"max_tokens": 16}, 16, "stop"),
        ({"max_tokens": 40, "ignore_eos": True}, 40, "length"),
        ({"max_completion_tokens": 7, "ignore_eos": True}, 7, "length"),
        ({"max_tokens": 100, "min_tokens": 30}, 30, "stop"),
        ({"max_tokens": 20, "min_tokens": 30}, 20, "length"),
    ],
)
def test_length_rules(extra, expected, finish):
    with sim() as s:
        got = stream_chat(s.base_url, messages=user("say something"), stream_options={"include_usage": True}, **extra)
        plain = chat(s.base_url, messages=user("say something"), **extra)
    assert got.usage_chunk["usage"]["completion_tokens"] == expected
    assert count_tokens(got.text()) == expected
    assert got.finish_reason == finish
    assert plain["usage"]["completion_tokens"] == expected
    assert count_tokens(plain["choices"][0]["message"]["content"]) == expected
    assert plain["choices"][0]["finish_reason"] == finish
    assert got.done


def test_output_jitter_is_bounded_and_deterministic():
    lengths = {}
    with sim(output_tokens=20, output_jitter=0.5, seed=7, decode_tps=5000) as s:
        for i in range(12):
            lengths[i] = chat(s.base_url, messages=user(f"prompt number {i}"))["usage"]["completion_tokens"]
        again = chat(s.base_url, messages=user("prompt number 3"))["usage"]["completion_tokens"]
    assert all(10 <= n <= 30 for n in lengths.values())
    assert len(set(lengths.values())) > 1
    assert again == lengths[3]


def test_answer_words_come_from_the_last_user_message():
    with sim(output_tokens=5) as s:
        got = chat(s.base_url, messages=user("ignored") + [{"role": "assistant", "content": "ok"}] + user("red green"))
    assert got["choices"][0]["message"]["content"].split() == ["red", "green", "red", "green", "red"]


# ------------------------------------------------------------ drafter, reasoning


def test_drafter_sends_several_tokens_per_chunk():
    with sim(output_tokens=10, draft_k=4, draft_acceptance=0.5) as s:
        got = stream_chat(s.base_url, messages=user("alpha beta gamma"), stream_options={"include_usage": True})
        truth = s.truth()
        metrics = _metric_values(request(s.base_url, "/metrics")[1].decode())
    assert got.words_per_chunk() == [3, 3, 3, 1]
    assert got.usage_chunk["usage"]["completion_tokens"] == 10
    timings = got.chunks[-1]["timings"]
    assert (timings["draft_n"], timings["draft_n_accepted"], timings["predicted_n"]) == (16, 6, 10)
    assert len(truth[0]["chunk_times"]) == 4
    assert metrics["llamacpp:spec_decode_num_draft_tokens_total"] == 16
    assert metrics["llamacpp:spec_decode_num_accepted_tokens_total"] == 6


def test_step_sizes_cover_the_answer():
    assert step_sizes(10, 3) == [3, 3, 3, 1]
    assert step_sizes(9, 3) == [3, 3, 3]
    assert step_sizes(4, 1) == [1, 1, 1, 1]


def test_reasoning_tokens_come_first_and_are_counted():
    ask = dict(messages=user("think about this"), stream_options={"include_usage": True})
    with sim(output_tokens=12, reasoning_tokens=5) as s:
        got = stream_chat(s.base_url, **ask)
        plain = chat(s.base_url, messages=ask["messages"])
    assert count_tokens(got.text("reasoning_content")) == 5
    assert count_tokens(got.text("content")) == 7
    assert "content" not in got.chunks[0]["choices"][0]["delta"]
    usage = got.usage_chunk["usage"]
    assert (usage["completion_tokens"], usage["completion_tokens_details"]["reasoning_tokens"]) == (12, 5)
    message = plain["choices"][0]["message"]
    assert (count_tokens(message["reasoning_content"]), count_tokens(message["content"])) == (5, 7)


# ------------------------------------------------------------------ tool calls


def _tool_turns(n_tool_messages: int) -> list[dict]:
    messages = user("what is the capital of France ?")
    for i in range(1, n_tool_messages + 1):
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]}]
        messages += [{"role": "tool", "tool_call_id": f"call_{i}", "content": "Paris"}]
    return messages


def test_tool_call_rounds_then_an_answer():
    with sim(tool_call_rounds=2) as s:
        first = chat(s.base_url, messages=_tool_turns(0), tools=TOOLS)
        streamed = stream_chat(s.base_url, messages=_tool_turns(1), tools=TOOLS, stream_options={"include_usage": True})
        final = chat(s.base_url, messages=_tool_turns(2), tools=TOOLS)
        no_tools = chat(s.base_url, messages=_tool_turns(0))
    call = first["choices"][0]["message"]["tool_calls"][0]
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    assert (call["id"], call["function"]["name"]) == ("call_1", "lookup")
    assert json.loads(call["function"]["arguments"]) == {"round": 1}
    assert first["usage"]["completion_tokens"] == 8

    fragments = [c["choices"][0]["delta"]["tool_calls"][0] for c in streamed.chunks]
    assert fragments[0]["id"] == "call_2" and fragments[0]["function"]["name"] == "lookup"
    assert json.loads("".join(f["function"]["arguments"] for f in fragments)) == {"round": 2}
    assert streamed.finish_reason == "tool_calls"
    assert streamed.usage_chunk["usage"]["completion_tokens"] == 8 == len(streamed.chunks)

    for answer in (final, no_tools):
        assert answer["choices"][0]["finish_reason"] == "stop"
        assert "tool_calls" not in answer["choices"][0]["message"]
        assert answer["usage"]["completion_tokens"] == 16


# ---------------------------------------------------------------------- faults


def test_http_500_fault():
    with sim(fault_http_500=1.0) as s:
        status, raw = request(s.base_url, "/v1/chat/completions", {"messages": user("hi")})
        truth = s.truth()
    assert status == 500
    assert json.loads(raw) == {"error": {"code": 500, "message": "simulated internal error", "type": "server_error"}}
    assert truth[0]["fault"] == "http_500" and truth[0]["completion_tokens"] == 0


def test_http_429_fault():
    with sim(fault_http_429=1.0) as s:
        status, raw = request(s.base_url, "/v1/chat/completions", {"messages": user("hi"), "stream": True})
    assert status == 429
    assert json.loads(raw)["error"]["type"] == "rate_limit_error"


def test_cut_stream_fault_drops_the_connection_halfway():
    with sim(fault_cut_stream=1.0) as s:
        got = stream_chat(s.base_url, messages=user("hi there"), stream_options={"include_usage": True})
        with pytest.raises((http.client.HTTPException, ConnectionError)):  # non-streaming: no response at all
            request(s.base_url, "/v1/chat/completions", {"messages": user("hi")})
        truth = s.truth()
    assert not got.done and got.usage_chunk is None and got.finish_reason is None
    assert count_tokens(got.text()) == 8
    assert (truth[0]["fault"], truth[0]["completion_tokens"], truth[0]["finish_reason"]) == ("cut_stream", 8, None)
    assert (truth[1]["fault"], truth[1]["completion_tokens"]) == ("cut_stream", 8)


def test_malformed_fault_sends_one_bad_line_mid_stream():
    with sim(fault_malformed=1.0) as s:
        got = stream_chat(s.base_url, messages=user("hi there"), stream_options={"include_usage": True})
        truth = s.truth()
    assert len(got.malformed) == 1
    assert got.done and got.usage_chunk["usage"]["completion_tokens"] == 16
    assert 0 < len([c for c in got.chunks]) < 17
    assert truth[0]["fault"] == "malformed"


def test_no_usage_fault_omits_usage():
    with sim(fault_no_usage=1.0) as s:
        got = stream_chat(s.base_url, messages=user("hi"), stream_options={"include_usage": True})
        plain = chat(s.base_url, messages=user("hi"))
    assert got.done and got.usage_chunk is None and count_tokens(got.text()) == 16
    assert "usage" not in plain


def test_usage_only_when_asked_but_timings_always():
    with sim() as s:
        got = stream_chat(s.base_url, messages=user("hi"))
    assert got.done and got.usage_chunk is None
    assert got.chunks[-1]["timings"]["predicted_n"] == 16
    assert all("timings" not in c for c in got.chunks[:-1])


def test_stall_fault_delays_the_first_token():
    with sim(fault_stall=1.0, fault_stall_s=0.2) as s:
        start = time.time()
        got = stream_chat(s.base_url, messages=user("hi"))
        record = s.truth()[0]
    assert got.received_at[0] - start >= 0.2
    assert close_to(record["stall_s"], 0.2)
    assert record["first_token"] - record["arrival"] >= 0.2
    assert record["fault"] == "stall"


def test_fault_draws_follow_the_seed_in_arrival_order():
    def statuses(s):
        return [request(s.base_url, "/v1/chat/completions", {"messages": user("x")})[0] for _ in range(20)]

    rng = random.Random(3)
    expected = []
    for _ in range(20):
        draws = [rng.random() for _ in simulator.FAULT_NAMES]
        expected.append(500 if draws[0] < 0.5 else 200)
    with sim(fault_http_500=0.5, seed=3, output_tokens=1) as s:
        first = statuses(s)
        request(s.base_url, "/sim/reset", {})
        again = statuses(s)
    assert first == expected == again
    assert 0 < first.count(500) < 20


def test_client_disconnect_frees_the_slot():
    with sim(output_tokens=200) as s:
        partial = stream_chat(s.base_url, stop_after=1, messages=user("long answer"))
        start = time.time()
        chat(s.base_url, messages=user("next"), max_tokens=2)
        waited = time.time() - start
        truth = s.truth()
    assert len(partial.chunks) == 1
    assert waited < 0.4 + 0.3  # the dropped request's 0.4 s of decoding did not all run first
    dropped = next(r for r in truth if r["fault"])
    assert dropped["fault"] == "client_disconnect" and dropped["completion_tokens"] < 200


# ---------------------------------------------------------------------- timing


def test_prefill_and_decode_take_the_set_time():
    prompt = user(synthetic_text(1999, "long"))  # 2000 tokens: 0.1 s at 20000 tok/s
    with sim(output_tokens=50, overhead_s=0.05) as s:  # 50 tokens: 0.1 s at 500 tok/s
        got = stream_chat(s.base_url, messages=prompt, stream_options={"include_usage": True})
        record = s.truth()[0]
    assert 0.1 - 1e-3 <= record["prefill_s"] and close_to(record["prefill_s"], 0.1)
    assert 0.05 - 1e-3 <= record["overhead_s"] and close_to(record["overhead_s"], 0.05)
    assert 0.1 - 1e-3 <= record["decode_s"] and close_to(record["decode_s"], 0.1)
    ttft = record["first_token"] - record["admitted"]
    assert close_to(ttft, 0.05 + 0.1 + 0.002)
    times = record["chunk_times"]
    assert len(times) == len(got.chunks) == 50
    assert close_to(times[-1] - times[0], 49 * 0.002)
    assert record["first_token"] == times[0]
    timings = got.usage_chunk["timings"]
    # llama.cpp's clocks: prompt_ms until the first token (the prefill and its step), predicted_ms the other 49
    assert timings["prompt_ms"] == pytest.approx((record["prefill_s"] + record["first_step_s"]) * 1000)
    assert close_to(record["first_step_s"], 0.002)
    assert timings["predicted_ms"] == pytest.approx((record["decode_s"] - record["first_step_s"]) * 1000)
    assert close_to(timings["predicted_ms"] / 1000, 49 * 0.002)
    assert timings["prompt_n"] == 2000 and timings["predicted_n"] == 50


def test_one_slot_queues_requests_fifo():
    n_tokens = 50  # 0.1 s of decoding each, plus a tiny prefill
    ask = dict(messages=user("queue me please"), max_tokens=n_tokens, ignore_eos=True)
    with sim(slots=1) as s:
        in_threads(*[lambda: stream_chat(s.base_url, **ask) for _ in range(3)])
        records = sorted(s.truth(), key=lambda r: r["arrival"])
    service = 4 / 20_000 + n_tokens / 500
    assert [r["admitted"] for r in records] == sorted(r["admitted"] for r in records)
    for k, record in enumerate(records):
        assert close_to(record["queue_s"], k * service), (k, record["queue_s"])
        assert record["queue_s"] == pytest.approx(record["admitted"] - record["arrival"], abs=0.01)
    for ahead, behind in zip(records, records[1:]):
        assert behind["admitted"] >= ahead["end"] - 0.01


def test_enough_slots_means_no_queue():
    ask = dict(messages=user("no queue"), max_tokens=50, ignore_eos=True)
    with sim(slots=3) as s:
        in_threads(*[lambda: stream_chat(s.base_url, **ask) for _ in range(3)])
        records = s.truth()
    assert len(records) == 3
    assert all(r["queue_s"] < 0.05 for r in records)


# ------------------------------------------------------- metrics and endpoints


def _metric_values(text: str) -> dict[str, float]:
    families = text_string_to_metric_families(text)
    return {sample.name: sample.value for family in families for sample in family.samples if "le" not in sample.labels}


def test_metrics_parse_and_agree_with_truth():
    """The default (llama.cpp) dialect exports llama-server's own unlabelled families."""
    prompt = user(synthetic_text(49, "metrics"))
    with sim(draft_k=3, draft_acceptance=1.0) as s:
        for _ in range(3):
            chat(s.base_url, messages=prompt)
        status, raw = request(s.base_url, "/metrics")
        truth = s.truth()
    assert status == 200
    families = {f.name: f.type for f in text_string_to_metric_families(raw.decode())}
    assert not any(name.startswith("vllm:") for name in families)
    for name in ("prompt_tokens", "prompt_tokens_cached", "prompt_seconds", "tokens_predicted", "n_decode",
                 "spec_decode_num_draft_tokens", "spec_decode_num_accepted_tokens", "spec_decode_num_drafts"):
        assert families["llamacpp:" + name] == "counter"
    values = _metric_values(raw.decode())
    assert values["llamacpp:prompt_tokens_total"] == 50 + 2 + 2  # only the tokens computed
    assert values["llamacpp:prompt_tokens_cached_total"] == sum(r["cached_tokens"] for r in truth) == 2 * 48
    assert values["llamacpp:tokens_predicted_total"] == 3 * 16
    assert values["llamacpp:n_decode_total"] == 3 * 4
    assert values["llamacpp:spec_decode_num_draft_tokens_total"] == sum(r["draft_tokens"] for r in truth) == 3 * 4 * 3
    assert values["llamacpp:spec_decode_num_accepted_tokens_total"] == 3 * (16 - 4)
    assert values["llamacpp:spec_decode_num_drafts_total"] == 3 * 4
    assert values["llamacpp:requests_processing"] == 0 and values["llamacpp:requests_deferred"] == 0
    assert values["llamacpp:prompt_seconds_total"] == pytest.approx(sum(r["prefill_s"] for r in truth))
    assert values["llamacpp:tokens_predicted_seconds_total"] == pytest.approx(sum(r["decode_s"] for r in truth))


def test_info_endpoints():
    with sim(slots=4, model="tiny") as s:
        assert get_json(s.base_url, "/health") == {"status": "ok"}
        models = get_json(s.base_url, "/v1/models")
        props = get_json(s.base_url, "/props")
        status, raw = request(s.base_url, "/tokenize", {"content": "one two three one"})
        status_bad, _ = request(s.base_url, "/tokenize", {"text": 1})
    assert s.base_url.startswith("http://127.0.0.1:") and not s.base_url.endswith("/")
    assert [m["id"] for m in models["data"]] == ["tiny"] and models["object"] == "list"
    assert props["model_path"] == "sim" and props["total_slots"] == 4
    assert props["sim"] == dataclasses.asdict(SimConfig(**{**FAST, "slots": 4, "model": "tiny"}))
    tokens = json.loads(raw)["tokens"]
    assert status == 200 and len(tokens) == 4 and tokens[0] == tokens[3] and all(0 <= t < 50_000 for t in tokens)
    assert status_bad == 400


def test_truth_records_and_reset():
    prompt = user(synthetic_text(40, "reset"))
    with sim() as s:
        got = stream_chat(s.base_url, messages=prompt)
        served = get_json(s.base_url, "/sim/truth")
        assert served == s.truth()
        record = served[0]
        request(s.base_url, "/sim/reset", {})
        assert s.truth() == []
        after = chat(s.base_url, messages=prompt)
    expected_keys = set(
        "id arrival admitted queue_s overhead_s prefill_s prompt_tokens cached_tokens completion_tokens"
        " reasoning_tokens chunk_times first_token end fault".split()
    )
    assert expected_keys <= set(record)
    assert record["id"] == got.chunks[0]["id"]
    assert record["arrival"] <= record["admitted"] <= record["first_token"] <= record["end"]
    assert len(record["chunk_times"]) == len(got.chunks) == 16 and record["fault"] is None
    assert after["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # the cache was cleared


@pytest.mark.parametrize(
    "body",
    [
        {"messages": []},
        {"messages": "hi"},
        {"messages": user("hi"), "max_tokens": 0},
        {"messages": user("hi"), "max_tokens": "5"},
    ],
)
def test_bad_requests_get_400(body):
    with sim() as s:
        status, raw = request(s.base_url, "/v1/chat/completions", body)
    assert status == 400 and json.loads(raw)["error"]["type"] == "invalid_request_error"


def test_config_rejects_nonsense():
    for bad in ({"slots": 0}, {"decode_tps": 0}, {"fault_http_500": 1.5}, {"draft_acceptance": -0.1}):
        with pytest.raises(ValueError):
            SimConfig(**bad)


# ------------------------------------------------------------------------- CLI


def test_cli_builds_the_config_and_serves(monkeypatch):
    seen = {}

    def fake_serve(cfg, host, port, on_ready=None):
        seen.update(cfg=cfg, host=host, port=port)
        on_ready("http://127.0.0.1:9999")

    monkeypatch.setattr(simulator, "serve", fake_serve)
    result = CliRunner().invoke(
        cli_sim.sim_command,
        "--port 9999 --prefill-tps 1000 --slots 3 --no-prefix-cache --draft-k 4 --model m".split(),
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "http://127.0.0.1:9999"
    cfg = seen["cfg"]
    assert (seen["host"], seen["port"]) == ("127.0.0.1", 9999)
    assert (cfg.prefill_tps, cfg.slots, cfg.prefix_cache, cfg.draft_k, cfg.model) == (1000.0, 3, False, 4, "m")
    assert cfg.decode_tps == SimConfig().decode_tps


def test_cli_help_and_bad_values():
    runner = CliRunner()
    help_text = runner.invoke(cli_sim.sim_command, ["--help"]).output
    assert "test instrument" in help_text and "not a real engine" in help_text
    for f in dataclasses.fields(SimConfig):
        assert "--" + f.name.replace("_", "-") in help_text
    assert runner.invoke(cli_sim.sim_command, ["--slots", "0"]).exit_code == 2


def test_serve_prints_the_url_and_stops_on_interrupt():
    code = "from leverbench.engines.simulator import SimConfig, serve; serve(SimConfig(), '127.0.0.1', 0)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = child.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)  # takes SIGINT
    try:
        assert select.select([proc.stdout], [], [], limits.SERVER_READY_S)[0], "the simulator printed no URL"
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
        assert get_json(url, "/health") == {"status": "ok"}
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=limits.STOP_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=limits.KILLED_S)
