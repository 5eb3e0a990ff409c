"""Odd endpoints: a host that never accepts, an SSE line past aiohttp's limit, NaN metric samples.
Each becomes a classified record or a kept value; none stops the run."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import aiohttp
import limits
import pytest
from aiohttp import web
from click.testing import CliRunner
from one_arm import one_arm_experiment

from leverbench.analysis.base.metrics import arm_metrics
from leverbench.cli import cli
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.writer import LedgerWriter
from leverbench.runner.client import Timeouts, client_session, stream_chat
from leverbench.runner.load import CONNECT_FAILS_ABORT
from leverbench.runner.run import Runner
from leverbench.runner.sse import MAX_SSE_LINE_BYTES

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def one_call(url: str, timeouts: Timeouts = Timeouts()) -> dict:
    async def go():
        async with aiohttp.ClientSession() as s:
            return (await stream_chat(s, url, BODY, timeouts=timeouts)).record.to_dict()  # as the ledger holds it
    return asyncio.run(go())


# ------------------------------------------------------------------ a host that never accepts

BLACKHOLE_PROBE_S = 0.3  # the scenario, not a limit: a connect that must time out, here after 0.3 s


@contextmanager
def blackhole() -> Iterator[int]:
    """A port whose listening socket never accepts and whose queue is full: Linux drops further SYNs,
    so a connect hangs (as to a blackholed host) instead of being refused."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fill = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fill.append(c)
    time.sleep(0.1)
    try:
        probe = socket.create_connection(("127.0.0.1", port), timeout=BLACKHOLE_PROBE_S)
    except TimeoutError:
        pass
    else:  # pragma: no cover - the test would be meaningless
        probe.close()
        raise AssertionError("the blackhole port accepted a connection")
    try:
        yield port
    finally:
        for c in fill:
            c.close()
        srv.close()


def test_connect_timeout_is_timeout_connect():
    with blackhole() as port:
        rec = one_call(f"http://127.0.0.1:{port}/v1/chat/completions",
                       Timeouts(connect_s=0.3, first_token_s=5, idle_s=5, total_s=10))
    assert rec["error"]["class"] == "timeout_connect", rec["error"]
    assert rec["status"] is None and 0.25 < rec["latency_s"] < 2


def test_load_stage_against_a_blackholed_host_aborts(tmp_path):
    requests = CONNECT_FAILS_ABORT + 15
    with blackhole() as port:
        p = one_arm_experiment(
            tmp_path, f"http://127.0.0.1:{port}/v1", arm='metrics_url = "http://127.0.0.1:9/metrics"',
            experiment="timeouts = { connect_s = 0.1, first_token_s = 5, idle_s = 5, total_s = 10 }",
            tail=f'[[load]]\nname = "dead"\nmode = "closed"\nconcurrency = 1\nrequests = {requests}\n')
        runner = Runner(load(p), tmp_path / "run")
        runner._prepare_endpoints()
        runner.open_ledger()

        async def go():
            async with aiohttp.ClientSession() as s:
                await runner.run_load(s)
        try:
            asyncio.run(go())
        finally:
            runner.close_ledger()
    recs = [json.loads(x) for x in (tmp_path / "run" / "ledger.jsonl").read_text().splitlines()]
    load_recs = [r for r in recs if r["kind"] == "load"]
    assert [r["error"]["class"] for r in load_recs] == ["timeout_connect"] * CONNECT_FAILS_ABORT


# ------------------------------------------------------------------ SSE lines past aiohttp's limit


@contextmanager
def serve(app: web.Application) -> Iterator[str]:
    """*app* on 127.0.0.1 in a thread; yields its base URL."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict = {}

    async def start() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        box["runner"] = runner
        box["url"] = f"http://127.0.0.1:{runner.addresses[0][1]}"
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert started.wait(limits.SERVER_READY_S)
    try:
        yield box["url"]
    finally:
        asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(limits.THREAD_STOP_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(limits.THREAD_STOP_S)


def _chunk(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def sse_app(first_line: bytes) -> web.Application:
    """Streams *first_line* (in 64 KiB writes), then a normal end: finish reason, usage, [DONE]."""

    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(0, len(first_line), 65536):
            await resp.write(first_line[i:i + 65536])
        await resp.write(_chunk({"choices": [{"delta": {}, "finish_reason": "stop"}]}))
        await resp.write(_chunk({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}))
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def test_a_data_line_past_aiohttps_limit_is_read_whole():
    """aiohttp's readline stops at 128 KiB ("Chunk too big"); a 1 MiB content chunk is a valid line."""
    text = "x" * 2**20
    with serve(sse_app(_chunk({"choices": [{"delta": {"content": text}}]}))) as url:
        rec = one_call(url + "/v1/chat/completions")
    assert rec["error"] is None, rec["error"]
    assert rec["content_chars"] == len(text) and rec["chunk_chars"] == [len(text)]
    assert rec["finish_reason"] == "stop" and rec["completion_tokens"] == 1


def test_a_line_too_long_is_malformed_with_its_size():
    line = b"data: " + b"y" * (MAX_SSE_LINE_BYTES + 2**20) + b"\n\n"  # past the client's own limit
    with serve(sse_app(line)) as url:
        rec = one_call(url + "/v1/chat/completions")
    assert rec["error"]["class"] == "malformed", rec["error"]
    msg = rec["error"]["message"]
    assert f"longer than {MAX_SSE_LINE_BYTES} bytes" in msg
    size = int(msg.split("(")[1].split(" bytes")[0])
    assert MAX_SSE_LINE_BYTES < size <= len(line)
    assert rec["status"] == 200 and rec["chunk_t"] == []


# ------------------------------------------------------------------ NaN and infinite metric samples


def test_non_numeric_samples_are_skipped_by_the_analysis():
    before = {"vllm:prefix_cache_hits_total": 10.0, "vllm:prefix_cache_queries_total": 20.0,
              "vllm:request_queue_time_seconds_sum": "NaN", "vllm:request_queue_time_seconds_count": 1.0,
              "sglang:cache_hit_rate": "+Inf"}
    after = {"vllm:prefix_cache_hits_total": 13.0, "vllm:prefix_cache_queries_total": 26.0,
             "vllm:request_queue_time_seconds_sum": 4.0, "vllm:request_queue_time_seconds_count": 3.0,
             "sglang:cache_hit_rate": "-Inf"}
    # the NaN queue sum, the ±Inf gauge leave no figure; the numeric counters do
    assert arm_metrics(before, after) == {"prefix_cache_hit_share": 0.5, "prefix_cache_hit_tokens": 3.0,
                                          "prefix_cache_query_tokens": 6.0}


def metrics_app() -> web.Application:
    """vLLM-style counters that grow with each scrape n: hits n, queries 2n (share 0.5); the queue
    histogram's sum, the draft tokens and a gauge are NaN / +Inf / -Inf."""
    n = {"scrapes": 0}

    async def metrics(request: web.Request) -> web.Response:
        n["scrapes"] += 1
        k = n["scrapes"]
        text = "\n".join([
            f'vllm:prefix_cache_hits_total{{model_name="sim"}} {k}',
            f'vllm:prefix_cache_queries_total{{model_name="sim"}} {2 * k}',
            'vllm:request_queue_time_seconds_sum{model_name="sim"} NaN',
            f'vllm:request_queue_time_seconds_count{{model_name="sim"}} {k}',
            'vllm:spec_decode_num_draft_tokens_total{model_name="sim"} +Inf',
            f'vllm:spec_decode_num_accepted_tokens_total{{model_name="sim"}} {k}',
            'vllm:num_requests_running{model_name="sim"} -Inf',
        ]) + "\n"
        return web.Response(text=text, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


def test_nan_metric_samples_are_recorded_and_the_run_goes_on(tmp_path):
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=2000.0, output_tokens=8)) as sim, \
            serve(metrics_app()) as murl:
        p = one_arm_experiment(tmp_path, sim.base_url + "/v1", repeats=2,
                               arm=f'metrics_url = "{murl}/metrics"\nconditions = {{ drafter = "eagle" }}')
        res = CliRunner().invoke(cli, ["run", str(p), "--out", str(tmp_path / "run")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    recs = [json.loads(x) for x in (tmp_path / "run" / "ledger.jsonl").read_text().splitlines()]
    scrapes = [r for r in recs if r["kind"] == "metrics"]
    assert [r["when"] for r in scrapes] == ["before", "after"]
    for r in scrapes:
        assert r["samples"]["vllm:request_queue_time_seconds_sum"] == "NaN"
        assert r["samples"]["vllm:spec_decode_num_draft_tokens_total"] == "+Inf"
        assert r["samples"]["vllm:num_requests_running"] == "-Inf"
    assert len([r for r in recs if r["kind"] == "turn" and r["error"] is None]) == 2
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    (row,) = summary["server_metrics"]
    figures = {k: v for k, v in row.items() if k not in ("arm", "window", "windows", "attribution")}
    # no queue time (its sum is NaN), no drafter acceptance (+Inf draft tokens); the scrapes counted 1 → 2
    assert figures == {"prefix_cache_hit_share": 0.5, "prefix_cache_hit_tokens": 1.0, "prefix_cache_query_tokens": 2.0,
                       "accepted_tokens": 1.0}
    row = next(e for e in summary["engaged"] if e["arm"] == "sim")
    # the +Inf draft count is not a measurement: the drafter's engagement is unknown, not measured as none
    assert row["draft_tokens"] is None and row["drafter"] is None


def test_ledger_writer_stores_non_finite_floats_as_strings(tmp_path):
    with LedgerWriter(tmp_path / "l.jsonl") as w:
        w.append({"kind": "call", "timings": {"predicted_per_second": float("nan"), "x": [float("inf"), 1.5]},
                  "v": float("-inf")})
    rec = json.loads((tmp_path / "l.jsonl").read_text())
    assert rec == {"kind": "call", "timings": {"predicted_per_second": "NaN", "x": ["+Inf", 1.5]}, "v": "-Inf"}


# ------------------------------------------------------------------ odd payloads are recorded, never raised

_END = [_chunk({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
        _chunk({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}), b"data: [DONE]\n\n"]
_HI = _chunk({"choices": [{"delta": {"content": "hi"}}]})
_STOP = _chunk({"choices": [{"delta": {}, "finish_reason": "stop"}]})
ODD = {  # what a server sends → the error class leverbench records (None: a success)
    "usage is a number": ([_HI, _STOP, _chunk({"choices": [], "usage": 5}), b"data: [DONE]\n\n"], "malformed"),
    "counts are strings": ([_HI, _STOP,
                            _chunk({"choices": [], "usage": {"prompt_tokens": "3", "completion_tokens": "2"}}),
                            b"data: [DONE]\n\n"], "malformed"),
    "count is NaN": ([_HI, _STOP, b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":NaN}}\n\n',
                      b"data: [DONE]\n\n"], "malformed"),
    "count is 1e400": ([_HI, _STOP, b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1e400}}\n\n',
                        b"data: [DONE]\n\n"], "malformed"),
    "details are a string": ([_HI, _STOP, _chunk({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                                                                             "prompt_tokens_details": "x"}}),
                              b"data: [DONE]\n\n"], "malformed"),
    "nested 100,000 deep": ([b"data: " + b"[" * 100_000 + b"\n\n", *_END], "malformed"),
    "finish reason an object": ([_HI, _chunk({"choices": [{"delta": {}, "finish_reason": {"x": 1}}]}), *_END[1:]],
                                "malformed"),
    "tool arguments an object": ([_chunk({"choices": [{"delta": {"tool_calls": [
        {"index": 0, "id": "a", "function": {"name": "f", "arguments": {"a": 1}}}]}}]}), *_END], "malformed"),
    # what the ledger's schema would refuse on reading (issue 28): the run wrote it, then its report said "edited or
    # damaged", nothing read
    "cached more than the prompt": ([_HI, _STOP, _chunk({"choices": [], "usage": {
        "prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 9}}}),
        b"data: [DONE]\n\n"], "malformed"),
    "count past 10^9": ([_HI, _STOP, _chunk({"choices": [], "usage": {"prompt_tokens": 5_000_000_000,
                                                                       "completion_tokens": 2}}),
                         b"data: [DONE]\n\n"], "malformed"),
    "timings a string": ([_HI, _STOP, _chunk({"choices": [], "timings": {"prompt_n": "5", "prompt_ms": 1.0}}),
                          b"data: [DONE]\n\n"], "malformed"),
    "timings a boolean": ([_HI, _STOP, _chunk({"choices": [], "timings": {"prompt_ms": True}}), b"data: [DONE]\n\n"],
                          "malformed"),
    "content as text parts": ([_chunk({"choices": [{"delta": {"content": [{"type": "text", "text": "hi"}]}}]}), *_END],
                              None),
}


def odd_app() -> web.Application:
    """Streams the ODD case named by the request's model."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in ODD[body["model"]][0]:
            await resp.write(part)
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def test_odd_payloads_are_recorded_with_a_class_never_raised():
    """The client's promise: every call ends as a record, failed or not (a usage of the wrong shape, counts that
    are not token counts, JSON nested past Python's recursion limit used to escape as exceptions)."""
    async def go(url: str) -> dict:
        async with aiohttp.ClientSession() as s:
            return {name: (await stream_chat(s, url + "/v1/chat/completions", {**BODY, "model": name})).record.to_dict()
                    for name in ODD}

    with serve(odd_app()) as url:
        recs = asyncio.run(go(url))
    got = {name: (r["error"] or {}).get("class") for name, r in recs.items()}
    assert got == {name: cls for name, (_, cls) in ODD.items()}
    parts = recs["content as text parts"]
    assert parts["completion_tokens"] == 2 and parts["content_chars"] == 2


def test_a_run_meets_an_odd_usage_and_goes_on(tmp_path):
    with serve(odd_app()) as url:
        exp = one_arm_experiment(tmp_path, url + "/v1", repeats=2)
        exp.write_text(exp.read_text().replace('model = "sim"', 'model = "counts are strings"'))
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")])
    # every call failed (issue 28): exit 1, saying so, once the ledger and the reports are written
    assert res.exit_code == 1 and "leverbench: error: every call failed (2 of 2): first error: malformed: " \
        in res.stderr, res.output
    recs = [json.loads(line) for line in (tmp_path / "run" / "ledger.jsonl").read_text().splitlines()]
    calls = [r for r in recs if r["kind"] == "call"]
    assert len(calls) == 2 and {r["error"]["class"] for r in calls} == {"malformed"}


@pytest.mark.parametrize("odd", ["cached more than the prompt", "count past 10^9", "timings a string"])
def test_what_a_run_writes_of_an_odd_server_its_report_reads(tmp_path, odd):
    """The values a server sends that the ledger's schema refuses are refused at the client, the call recorded
    as malformed, so the report reads the run (exit 0) instead of calling its own ledger damaged (exit 2)."""
    with serve(odd_app()) as url:
        exp = one_arm_experiment(tmp_path, url + "/v1", repeats=1)
        exp.write_text(exp.read_text().replace('model = "sim"', f'model = "{odd}"'))
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "every call failed" in res.stderr, res.output
    rep = CliRunner().invoke(cli, ["report", str(tmp_path / "run"), "--no-write"])
    assert rep.exit_code == 0, rep.output


# ------------------------------------------------------------------ failures after the request went out


@contextmanager
def raw_server(kind: str) -> Iterator[str]:
    """A server that reads the whole request, then: "close" after 0.5 s of work, or "garbage" (a status line
    that is not HTTP)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await reader.read(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        n = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1])
        while len(body) < n:
            body += await reader.read(65536)
        if kind == "close":
            await asyncio.sleep(0.5)
        else:
            writer.write(b"HTTP/1.1 abc\r\n\r\n")
            await writer.drain()
        writer.close()

    loop = asyncio.new_event_loop()
    srv = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    finally:
        loop.call_soon_threadsafe(srv.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(limits.THREAD_STOP_S)


def test_a_server_that_took_the_request_and_closed_is_not_a_connect_failure():
    """``connect`` means nothing was sent (it counts towards a load stage's dead-endpoint abort); a server
    that received the request, worked 0.5 s and closed did not fail to connect."""
    async def go(url: str) -> dict:
        async with client_session() as s:  # the runner's session: its hooks see the request go out
            got = await stream_chat(s, url + "/v1/chat/completions", BODY,
                                    timeouts=Timeouts(connect_s=2, first_token_s=5, idle_s=5, total_s=10))
            return got.record.to_dict()

    with raw_server("close") as url:
        rec = asyncio.run(go(url))
    assert rec["error"]["class"] == "stream_cut" and "0.5" in rec["error"]["message"]
    assert "after the request was sent" in rec["error"]["message"] and not rec.get("stale_connection")
    with raw_server("garbage") as url:
        rec = asyncio.run(go(url))
    assert rec["error"]["class"] == "malformed"
