"""The client's timestamps and connections under load (issue 25, part 0): a chunk is stamped when its bytes
arrive, not when the call's task parses it; the idle limit holds without a timer per chunk; a server that
closes each connection costs no failed call; a load stage's sends are not held up by a full collection of
the process's heap; the pool allows the concurrency asked for."""

from __future__ import annotations

import asyncio
import errno
import gc
import json
import os
import time

import aiohttp
import pytest
from test_harness import answer_one_stream

from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.runner.client import Timeouts, client_session, stream_chat
from leverbench.runner.connections import STALE_IN_A_ROW, server_habit
from leverbench.runner.load import heap_frozen
from leverbench.runner.sse import SSELines

BODY = {"model": "sim", "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 4}


class _Protocol:  # what a StreamReader asks of its protocol
    def pause_reading(self) -> None: ...

    def resume_reading(self, resume_parser: bool = True) -> None: ...


def test_sse_lines_carry_the_time_their_bytes_arrived_not_when_they_are_read():
    async def go() -> tuple[list[tuple[bytes, float]], float, float, float]:
        reader = aiohttp.StreamReader(_Protocol(), 2**16, loop=asyncio.get_running_loop())
        lines = SSELines(reader)
        t_a = time.perf_counter()
        reader.feed_data(b"data: a\n\ndata: b")  # "data: b" not complete yet
        time.sleep(0.05)
        t_b = time.perf_counter()
        reader.feed_data(b"c\n\n")
        time.sleep(0.05)
        reader.feed_eof()
        t_read = time.perf_counter()
        return [x async for x in lines], t_a, t_b, t_read

    got, t_a, t_b, t_read = asyncio.run(go())
    assert [line for line, _ in got] == [b"data: a", b"", b"data: bc", b""]
    stamps = [t for _, t in got]
    assert t_a <= stamps[0] == stamps[1] < t_a + 0.04  # fed together, read 0.1 s later
    assert t_b <= stamps[2] == stamps[3] < t_b + 0.04 < t_read  # a line is complete when its end arrives


def test_a_chunk_parsed_late_keeps_the_time_it_arrived(monkeypatch):
    """Each content chunk arrives while the loop has 0.1 s of other work queued before the call's task (as
    with 128 streams' chunks arriving together): its time is still within a few ms of the server's stamp.
    (The chunks come 0.25 s apart: a chunk that arrives while the loop is blocked is seen when it is free.)"""
    feed = aiohttp.streams.StreamReader.feed_data

    def busy_after(self, data, *args):
        if b'"content"' in data:  # the loop has other work queued before the task that reads this chunk
            asyncio.get_running_loop().call_soon(time.sleep, 0.1)
        return feed(self, data, *args)

    monkeypatch.setattr(aiohttp.streams.StreamReader, "feed_data", busy_after)

    async def go(url: str):
        async with client_session() as session:
            return (await stream_chat(session, url, BODY)).record

    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=4.0, output_tokens=4)) as sim:
        rec = asyncio.run(go(sim.base_url + "/v1/chat/completions"))
        truth = sim.truth()[-1]
    assert rec.error is None and len(rec.chunk_t) == len(truth["chunk_times"]) == 4
    ready = rec.t_send + rec.connect_s
    late = [ready + c - s for c, s in zip(rec.chunk_t, truth["chunk_times"])]
    assert all(-0.01 < x < 0.05 for x in late), late  # each parsed 0.1 s after it arrived


async def _one_answered_call():
    """One call to a server that answers at once (answer_one_stream); its record and its wall time."""
    server = await asyncio.start_server(answer_one_stream, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    async with server, client_session() as session:
        t = time.perf_counter()
        rec = (await stream_chat(session, url, BODY)).record
        return rec, time.perf_counter() - t


def test_a_first_token_that_came_with_the_headers_keeps_the_time_it_arrived(monkeypatch):
    """The whole answer arrives in one read, with its headers, while the loop has 0.3 s of other work queued
    before the call's task (as with 128 streams answering together): the task finds the first token already
    there when it resumes, and its time is when the connection read it (StampedHandler), not 0.3 s later."""
    received = aiohttp.client_proto.ResponseHandler.data_received

    def busy_before(self, data):
        if data.startswith(b"HTTP/1.1 200"):  # the loop has other work queued before the task this wakes
            asyncio.get_running_loop().call_soon(time.sleep, 0.3)
        return received(self, data)

    monkeypatch.setattr(aiohttp.client_proto.ResponseHandler, "data_received", busy_before)

    rec, took = asyncio.run(_one_answered_call())
    assert rec.error is None and took >= 0.3
    assert rec.ttft_s is not None and rec.ttft_s < 0.15 and rec.latency_s < 0.15, (rec.ttft_s, rec.latency_s)


def test_the_time_a_request_waits_to_go_out_is_recorded_apart_and_hides_in_no_other_time(monkeypatch):
    """aiohttp writes a request's body (its headers go with it) from a task of its own, which on a loop with
    0.3 s of other work queued before it goes out 0.3 s after the connection was ready (as with 128 streams
    opening connections together): that wait is the call's send_s; its TTFT, latency and chunk times count
    from when the request went out, and connect_s + send_s + latency_s is still the call's whole time."""
    import leverbench.runner.connections as connections

    ready = connections._on_create_end

    async def busy_after(session, ctx, params):  # the loop has other work queued before the task that writes it
        await ready(session, ctx, params)
        asyncio.get_running_loop().call_soon(time.sleep, 0.3)

    monkeypatch.setattr(connections, "_on_create_end", busy_after)

    rec, took = asyncio.run(_one_answered_call())
    assert rec.error is None and took >= 0.3
    assert 0.3 <= rec.send_s < 0.4, rec.send_s
    assert rec.ttft_s < 0.1 and rec.latency_s < 0.1, (rec.ttft_s, rec.latency_s)
    assert rec.connect_s + rec.send_s + rec.latency_s == pytest.approx(took, abs=0.05)
    assert rec.t_end - rec.t_send == pytest.approx(took, abs=0.05)


def test_the_idle_limit_holds_without_a_timer_per_chunk():
    """A stream longer than idle_s whose chunks come every 5 ms is not cut (the one timer looks again when
    it fires); one whose chunks come every 50 ms with idle_s = 20 ms is, as timeout_idle."""
    async def go(url: str, idle_s: float):
        async with client_session() as session:
            return (await stream_chat(session, url, {**BODY, "max_tokens": 40},
                                      timeouts=Timeouts(first_token_s=5, idle_s=idle_s, total_s=10))).record

    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=200.0, output_tokens=40)) as sim:
        rec = asyncio.run(go(sim.base_url + "/v1/chat/completions", 0.05))
    assert rec.error is None and rec.latency_s > 0.15 and len(rec.chunk_t) == 40
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=20.0, output_tokens=40)) as sim:
        rec = asyncio.run(go(sim.base_url + "/v1/chat/completions", 0.02))
    assert rec.error is not None and rec.error.cls == "timeout_idle"


async def _closes_on_next_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """llama.cpp's way: a streamed answer that says keep-alive; the connection is dead for the next request
    (closed when it arrives, unanswered: deterministic, where a close right after the answer races)."""
    try:
        await answer_one_stream(reader, writer, delay_s=0.02)
    except asyncio.CancelledError:  # the test's end: the server closes what is still open
        pass
    finally:
        writer.close()


def test_a_server_that_closes_every_connection_is_learnt_and_costs_no_failed_call():
    """Two streams end together, leaving two dead connections in the pool: the next call meets both before
    it opens a new one (the second dead one was a failed call, stream_cut).  After STALE_IN_A_ROW stale
    connections in a row (the third call's two, the fourth's) the session stops pooling: the calls after
    go out on a new connection at once."""
    async def calls() -> list:
        server = await asyncio.start_server(_closes_on_next_request, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
        async with server, client_session() as session:
            recs = [g.record for g in await asyncio.gather(*(stream_chat(session, url, BODY) for _ in range(2)))]
            for _ in range(5):
                recs.append((await stream_chat(session, url, BODY)).record)
            assert server_habit(session).closes
            return recs

    recs = asyncio.run(calls())
    assert [r.error for r in recs] == [None] * 7
    assert STALE_IN_A_ROW == 3
    assert [bool(r.stale_connection) for r in recs] == [False, False, True, True, False, False, False]
    assert all(r.connect_s > 0 for r in recs)  # each went out on a new connection, its time recorded apart


def test_a_load_stage_sends_with_the_heap_frozen():
    before = gc.get_freeze_count()
    junk = [[i] for i in range(1000)]  # objects that exist before the stage: frozen with the rest
    with heap_frozen():
        assert gc.get_freeze_count() >= before + len(junk)
    assert gc.get_freeze_count() == before  # unfrozen when the stage ends


@pytest.mark.parametrize("keep_alive", [True, False])
def test_the_pool_allows_the_concurrency_asked_for(keep_alive):
    """aiohttp's connector holds 100 connections by default (and queues the 101st call until one frees):
    a stage at concurrency 128 would send 28 of its calls late, their wait hidden before t_send."""
    async def limits() -> tuple[int, int]:
        async with client_session(keep_alive=keep_alive) as session:
            return session.connector.limit, session.connector.limit_per_host

    assert asyncio.run(limits()) == (0, 0)  # 0: no limit



class _DeadThenLive:
    """A session whose first post meets a reused connection that died *late* (0.3 s after the request went out,
    by the loop's clock: a loop too busy to read the close sooner) with *exc*; the next post answers."""

    def __init__(self, exc: Exception, written: bool = True):
        self.exc, self.posts, self.written = exc, 0, written

    async def post(self, url, *, data, headers, timeout, trace_request_ctx):
        self.posts += 1
        if self.posts == 1:
            trace_request_ctx.reused, trace_request_ctx.sent_at = True, time.perf_counter() - 0.3
            if self.written:  # the request went out then (its body's write began: StampedPayload)
                trace_request_ctx.wrote_at = trace_request_ctx.sent_at
            raise self.exc
        return "answered"


def test_a_request_that_could_not_be_written_goes_out_again_however_late():
    """aiohttp could not write the body (the connection was closed before the request was out), or the server's
    end reset the connection (data that reached a closed socket): the server never read it, so it goes out
    again, though the failure was seen after STALE_MAX_S (it was a failed call, stream_cut, on a loop busy with
    128 or 256 streams); a late orderly disconnect after the request went out is the call's."""
    from leverbench.runner.connections import ConnectTiming, post

    def first_dead(exc: Exception, written: bool = True) -> tuple[object, ConnectTiming]:
        conn = ConnectTiming()
        got = asyncio.run(post(_DeadThenLive(exc, written), "http://x/v1/chat/completions", BODY, None,
                                aiohttp.ClientTimeout(), conn, time.perf_counter()))
        return got, conn

    got, conn = first_dead(aiohttp.ClientOSError(None, "Can not write request body for http://x/v1/chat/completions"))
    assert got == "answered" and conn.stale
    got, conn = first_dead(aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer"))
    assert got == "answered" and conn.stale  # a reset: the server's end never read it
    with pytest.raises(aiohttp.ServerDisconnectedError):
        first_dead(aiohttp.ServerDisconnectedError())
    # aiohttp took the headers 0.3 s before, but the task that writes the request had not run when the close was
    # read (a loop busy with 256 streams): the request never went out, so it goes out again
    got, conn = first_dead(aiohttp.ServerDisconnectedError(), written=False)
    assert got == "answered" and conn.stale


async def _closes_after_answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """llama.cpp's way: a streamed answer that says keep-alive, then the connection closed at once."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    await reader.readexactly(length)
    body = (b'data: {"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}], '
            b'"usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n\ndata: [DONE]\n\n')
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                 b"Keep-Alive: timeout=5, max=100\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    await writer.drain()
    writer.close()


def test_a_server_that_closes_right_after_its_answer_is_learnt_from_the_first():
    """The first stream's end looks whether the server closed its connection: the calls after it go out on a
    new connection at once, none on a dead one (with many streams ending together, each would have met
    one, and a loop too busy to see it in time failed the call)."""
    async def calls() -> tuple[list, bool]:
        server = await asyncio.start_server(_closes_after_answering, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
        async with server, client_session() as session:
            recs = [(await stream_chat(session, url, BODY)).record for _ in range(4)]
            return recs, server_habit(session).closes

    recs, closes = asyncio.run(calls())
    assert closes and [r.error for r in recs] == [None] * 4
    assert not any(r.stale_connection for r in recs) and all(r.connect_s > 0 for r in recs)


def test_a_server_that_keeps_its_connections_keeps_them():
    async def calls() -> tuple[list, bool]:
        async with client_session() as session:
            recs = [(await stream_chat(session, url, BODY)).record for _ in range(3)]
            return recs, server_habit(session).keeps

    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=1000.0, output_tokens=4)) as sim:
        url = sim.base_url + "/v1/chat/completions"
        recs, keeps = asyncio.run(calls())
    assert keeps and [r.error for r in recs] == [None] * 3
    assert [r.connect_s == 0.0 for r in recs] == [False, True, True]  # one connection, reused


def test_records_handed_over_together_are_written_with_one_fsync(tmp_path, monkeypatch):
    """A group commit: 200 records handed over at once (a load stage's streams ending together) go to disk in
    a few writes, one fsync each (was: one per record, and a writer thread contending with the event loop for
    the interpreter some 500 times); every one written, in order, and on disk when flush returns."""
    import leverbench.ledger.writer as writer_module
    from leverbench.ledger.writer import LedgerWriter
    from leverbench.runner.recorder import Recorder

    fsyncs = []

    class _Os:  # the writer's os, its fsync counted
        def __getattr__(self, name):
            return getattr(os, name)

        def fsync(self, fd):
            fsyncs.append(fd)
            os.fsync(fd)

    monkeypatch.setattr(writer_module, "os", _Os())

    async def go() -> None:
        recorder = Recorder(LedgerWriter(tmp_path / "ledger.jsonl"))
        try:
            for i in range(200):
                recorder.append({"kind": "metrics", "i": i})
            await recorder.flush()
        finally:
            recorder.close()

    asyncio.run(go())
    lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["i"] for line in lines] == list(range(200))
    assert 1 <= len(fsyncs) <= 20, len(fsyncs)


def test_a_load_calls_record_is_finished_after_the_waiting_io_and_never_lost(tmp_path):
    """ArmSender hands a load call's record over later (Recorder.later: after the I/O the loop has waiting),
    not between the call's end and the next send; flush writes it, with what was sent (the input's hash), in
    the order the calls ended, and close writes what is left however the run ended."""
    from types import SimpleNamespace

    from leverbench.ledger.records import CallRecord
    from leverbench.ledger.writer import LedgerWriter
    from leverbench.runner.recorder import Recorder
    from leverbench.runner.send import ArmSender

    async def go(url: str, flush: bool) -> tuple[int, int]:
        recorder = Recorder(LedgerWriter(tmp_path / f"ledger-{flush}.jsonl"))
        try:
            async with client_session() as session:
                ep = SimpleNamespace(base_url=url, model="sim", headers={}, request={}, length_by_prompt=False,
                                     death_note=lambda: None)
                sender = ArmSender(recorder, session, ep, timeouts=Timeouts(), retries=0, keep_text=False)
                for i in range(3):
                    await sender.send(sender.body([{"role": "user", "content": f"call {i}"}], 4, 0.0),
                                      CallRecord(kind="load", repeat=i), defer_counting=True)
                handed_over = recorder.tally.measured.calls  # (counted as the record is handed to the writer)
                if flush:
                    await recorder.flush()
                return handed_over, recorder.tally.measured.calls
        finally:
            recorder.close()

    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=1000.0, output_tokens=4)) as sim:
        before, after = asyncio.run(go(sim.base_url, flush=True))
        asyncio.run(go(sim.base_url, flush=False))
    assert before < 3 and after == 3
    for flushed in (True, False):
        recs = [json.loads(line) for line in (tmp_path / f"ledger-{flushed}.jsonl").read_text().splitlines()]
        assert [r["repeat"] for r in recs] == [0, 1, 2] and all(r["input_sha256"] for r in recs)


def test_the_time_lost_on_a_dead_connection_is_connect_time_even_when_a_live_one_is_reused_next():
    """Two pooled connections; the second closes, unannounced, 50 ms after reading its next request.  The call
    that meets it goes out again on the first, live and pooled: the 50 ms lost count in its connect_s (as after a
    dead connection a new one's opening does), not in send_s, the client's own queue; and connect_s + send_s +
    latency_s is its whole time."""
    conns = []

    async def handle(reader, writer):
        conns.append(writer)
        me, served = len(conns), 0
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            if served and me != 1:  # every connection but the first closes on its second request
                await asyncio.sleep(0.05)
                writer.close()
                return
            events = [{"choices": [{"delta": {"content": "hi"}}]},
                      {"choices": [{"delta": {}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 1}}]
            body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
            await writer.drain()
            served += 1

    async def go():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
        out = []
        async with server, client_session() as session:
            await asyncio.gather(*(stream_chat(session, url, BODY) for _ in range(2)))  # two connections pooled
            for _ in range(2):
                t = time.perf_counter()
                rec = (await stream_chat(session, url, BODY)).record
                out.append((rec, time.perf_counter() - t))
        return out

    got = asyncio.run(go())
    assert all(rec.error is None for rec, _ in got)
    stale = [(rec, took) for rec, took in got if rec.stale_connection]
    assert len(stale) == 1, [r.stale_connection for r, _ in got]
    rec, took = stale[0]
    assert rec.connect_s >= 0.05 and (rec.send_s or 0.0) < 0.02, (rec.connect_s, rec.send_s)
    assert rec.connect_s + (rec.send_s or 0.0) + rec.latency_s == pytest.approx(took, abs=0.02)
