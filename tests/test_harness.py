"""The harness stays out of the measured time (issue 11, part 5): ledger appends off the measured
path, connections kept alive per arm with connect time recorded apart, distinct load prompts with
a set prefix share, greedy decoding by default."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import aiohttp
import pytest
from test_load import experiment as load_experiment

from leverbench.analysis.load.stages import load_summary
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread, chat_prompt_tokens, synthetic_text
from leverbench.errors import ConfigError
from leverbench.ledger.reader import read_ledger
from leverbench.ledger.writer import LedgerWriter
from leverbench.runner.client import client_session, stream_chat
from leverbench.runner.prompts import UNIQUE_WORDS, SharedPrefix
from leverbench.runner.run import Runner

FAST = dict(prefill_tps=1_000_000.0, decode_tps=200.0, output_tokens=10)  # a call: 10 / 200 = 0.05 s


def call_end(rec: dict) -> float:
    """Epoch time a recorded call ended: t_send + connect_s + send_s + latency_s."""
    return rec["t_send"] + (rec.get("connect_s") or 0.0) + (rec.get("send_s") or 0.0) + (rec.get("latency_s") or 0.0)


def experiment(tmp: Path, arms: dict[str, str], load_toml: str = "", *, prompt: str = "hello there",
               max_tokens: int = 10, steps: int = 0) -> Path:
    """test_load's experiment, its case without a temperature (the default must be greedy)."""
    return load_experiment(tmp, arms, load_toml, prompt, max_tokens, steps=steps, temperature=None)


# ------------------------------------------------------------------ A: the fsync is off the measured path


def test_a_slow_ledger_write_delays_no_send_and_no_turn(tmp_path, monkeypatch):
    """Every append sleeps 0.2 s: a closed loop still sends each request at its previous call's end,
    a turn's time is its calls' time, and every record still reaches the ledger."""
    real_append = LedgerWriter.append

    def slow_append(self, record):
        time.sleep(0.2)
        real_append(self, record)

    monkeypatch.setattr(LedgerWriter, "append", slow_append)
    stage = '[[load]]\nname = "loop"\nmode = "closed"\nconcurrency = 1\nrequests = 6\n'
    with SimulatorThread(SimConfig(**FAST)) as sim:
        Runner(load(experiment(tmp_path, {"a": sim.base_url}, stage, steps=2)), tmp_path / "run").run()
        served = len(sim.truth())
    led = read_ledger(tmp_path / "run")
    loads = sorted((r for r in led.records if r["kind"] == "load"), key=lambda r: r["repeat"])
    calls = [r for r in led.records if r["kind"] == "call"]
    turns = [r for r in led.records if r["kind"] == "turn"]
    assert len(loads) == 6 and len(calls) == 3 and len(turns) == 1  # nothing lost
    checks = [r for r in led.records if r["kind"] == "warmup" and r.get("position") == "check"]
    assert len(checks) == 3  # the check that the arm's cache reset takes (runner.cache_reset): recorded too
    assert served == 1 + 3 + 3 + 6  # warm-up, the check, the turn's calls, the stage: every call the server saw
    assert all(r["error"] is None for r in loads + calls)
    # the last records: the load stage's closing scrape and its stage_end (the turns' 'after' scrape comes earlier)
    assert [(r["kind"], r.get("when") or r.get("stage")) for r in led.records[-2:]] == [("metrics", "load-end loop"),
                                                                                    ("stage_end", "loop")]
    for prev, nxt in zip(loads, loads[1:]):
        assert nxt["scheduled_t"] == pytest.approx(call_end(prev), abs=1e-6)
        gap = nxt["t_send"] - call_end(prev)
        assert 0 <= gap < 0.05, f"request {nxt['repeat']} went out {gap * 1000:.0f} ms after the previous call ended"
    in_calls = sum(c["connect_s"] + c.get("send_s", 0.0) + c["latency_s"] for c in calls)
    assert turns[0]["turn_s"] - in_calls < 0.05  # no append inside the turn's wall clock


# ------------------------------------------------------------------ B: connections


class SlowResolver(aiohttp.abc.AbstractResolver):
    """Resolves every name to 127.0.0.1 after DELAY s: opening a connection takes that long."""

    DELAY = 0.3

    async def resolve(self, host, port=0, family=socket.AF_INET):
        await asyncio.sleep(self.DELAY)
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET, "proto": 0,
                 "flags": socket.AI_NUMERICHOST}]

    async def close(self):
        pass


def test_b_connect_time_is_recorded_apart_and_out_of_ttft():
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}

    async def two_calls(url: str) -> tuple[dict, dict]:
        async with client_session(resolver=SlowResolver()) as session:
            first, second = await stream_chat(session, url, body), await stream_chat(session, url, body)
            return first.record.to_dict(), second.record.to_dict()  # as the ledger holds them

    with SimulatorThread(SimConfig(**FAST)) as sim:
        url = sim.base_url.replace("127.0.0.1", "localhost") + "/v1/chat/completions"
        first, second = asyncio.run(two_calls(url))
        truth = sim.truth()  # in completion order: the two calls, one after the other
    assert first["error"] is None and second["error"] is None
    assert first["connect_s"] >= SlowResolver.DELAY  # a new connection: its opening time, apart
    assert second["connect_s"] == 0.0  # the same connection, kept alive
    for rec, t in zip((first, second), truth):
        server_ttft = t["first_token"] - t["arrival"]
        assert rec["ttft_s"] == pytest.approx(server_ttft, abs=0.03)  # TTFT holds no connect time
        # nothing lost end to end: start + connect + ttft is when the first token was written (one clock)
        out = rec["t_send"] + rec["connect_s"] + rec.get("send_s", 0.0)  # when the request went out
        assert out + rec["ttft_s"] == pytest.approx(t["first_token"], abs=0.03)
        assert out + rec["latency_s"] == pytest.approx(t["end"], abs=0.03)


def test_b_turns_and_load_stages_keep_connections_alive_per_arm(tmp_path):
    stage = '[[load]]\nname = "loop"\nmode = "closed"\nconcurrency = 2\nrequests = 6\n'
    with SimulatorThread(SimConfig(**FAST)) as a, SimulatorThread(SimConfig(**FAST)) as b:
        exp = load(experiment(tmp_path, {"a": a.base_url, "b": b.base_url}, stage, steps=2))
        Runner(exp, tmp_path / "run").run()
    led = read_ledger(tmp_path / "run")
    for arm in ("a", "b"):
        warm = [r for r in led.records if r["kind"] == "warmup" and r["arm"] == arm]
        calls = [r for r in led.records if r["kind"] == "call" and r["arm"] == arm]
        loads = [r for r in led.records if r["kind"] == "load" and r["arm"] == arm]
        assert warm[0]["connect_s"] > 0  # the arm's first call opens its connection ...
        assert len(calls) == 3 and all(c["connect_s"] == 0.0 for c in calls)  # ... its turn reuses it
        # a stage opens its own pool: one connection per client, then reused
        assert sorted(r["connect_s"] > 0 for r in loads) == [False] * 4 + [True] * 2
        assert all(c["request"]["temperature"] == 0.0 for c in calls + loads)  # D: greedy unless the case says
    rows = load_summary(led)
    assert [r["new_connections"] for r in rows] == [2, 2]


# ------------------------------------------------------------------ C: distinct prompts, a set prefix share


def common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.83, 0.9, 0.99, 1.0])
def test_c_shared_prefix_is_the_set_fraction_of_simulator_tokens(fraction):
    messages = [{"role": "system", "content": synthetic_text(50, "sys") + "\n\nand a second line"},
                {"role": "user", "content": "  " + synthetic_text(12, "user") + " "}]
    sp = SharedPrefix(messages, fraction, "salt")
    one, two = chat_prompt_tokens(sp.for_request(1)), chat_prompt_tokens(sp.for_request(2))
    plain = chat_prompt_tokens(messages)
    assert len(one) == len(two) == len(plain) + (UNIQUE_WORDS if fraction < 1 else 0) == sp.total_tokens
    shared = common_prefix(one, two)
    assert shared == sp.shared_tokens
    # the unique words come after the shared part: at most all the case's own tokens are shared
    want = fraction if fraction == 1 else min(fraction, len(plain) / len(one))
    assert abs(shared / len(one) - want) <= 1 / len(one) + 1e-9
    if fraction < 1:  # the case's text is all there, unchanged around the inserted words
        i, off = sp.at
        orig, text = messages[i]["content"], sp.for_request(1)[i]["content"]
        assert text.startswith(orig[:off]) and text.endswith(orig[off:])
        assert len(text[off:len(text) - len(orig[off:])].split()) == UNIQUE_WORDS
        assert sp.for_request(1)[1 - i] == messages[1 - i]  # the other message is untouched
        assert sp.for_request(1) != sp.for_request(2)
    else:
        assert sp.for_request(1) is messages


def test_c_prefix_sharing_is_validated(tmp_path):
    for toml, msg in (('[[load]]\nname = "x"\nmode = "closed"\nrequests = 2\nprefix_sharing = 1.5\n',
                       "prefix_sharing"),
                      ('[[load]]\nname = "x"\nmode = "closed"\nrequests = 2\nprefix_sharing = -0.1\n',
                       "prefix_sharing"),
                      ('[[load]]\nname = "t"\nmode = "trace"\ntrace = "x.jsonl"\nprefix_sharing = 0.5\n',
                       "does not apply to a trace")):
        with pytest.raises(ConfigError, match=msg):
            load(experiment(tmp_path, {"a": "http://127.0.0.1:9"}, toml))


def test_c_closed_loop_cached_share_follows_prefix_sharing(tmp_path):
    """Against a prefix-caching server, a stage's cached share is its prefix_sharing (the done-when of
    issue 11): by default every request is distinct, so the stage is no cache-hit benchmark."""
    shares = (0.0, 0.5, 0.9)
    stages = "".join(f'[[load]]\nname = "s{f}"\nmode = "closed"\nconcurrency = 2\nwarmup_requests = 2\n'
                     f'requests = 12\n' + (f"prefix_sharing = {f}\n" if f else "") for f in shares)
    cfg = SimConfig(prefill_tps=1_000_000.0, decode_tps=1000.0, output_tokens=4, slots=4, prefix_cache=True,
                    cache_block=16)
    with SimulatorThread(cfg) as sim:
        exp = load(experiment(tmp_path, {"a": sim.base_url}, stages, prompt=synthetic_text(400, "case"), max_tokens=4))
        Runner(exp, tmp_path / "run").run()
    led = read_ledger(tmp_path / "run")
    rows = {r["stage"]: r for r in load_summary(led)}
    for f in shares:
        row = rows[f"s{f}"]
        assert row["ok"] == 12
        assert row["cached_share"] == pytest.approx(f, abs=0.05), (f, row["cached_share"])
        assert row["prefix_sharing"] == f
        recs = [r for r in led.records if r["kind"] == "load" and r["stage"] == f"s{f}"]
        assert all(r["prefix_sharing"] == f for r in recs)  # recorded per call
        assert len({r["input_sha256"] for r in recs}) == len(recs)  # every prompt distinct
        # the unique words lengthen the case's prompt (role + 400 words) by UNIQUE_WORDS tokens only
        assert {r["prompt_tokens"] for r in recs} == {1 + 400 + UNIQUE_WORDS}


async def answer_one_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float = 0.0) -> None:
    """Reads one request, waits *delay_s*, answers it with a two-event stream that says ``Keep-Alive``, then
    waits for the next request on the connection (left unanswered: the caller closes it)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    await reader.readexactly(length)
    if delay_s:
        await asyncio.sleep(delay_s)
    events = [{"choices": [{"delta": {"content": "hi"}}]},
              {"choices": [{"delta": {}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 3, "completion_tokens": 1}}]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                 b"Keep-Alive: timeout=5, max=100\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    await writer.drain()
    await reader.read(1)  # the next request on this connection


async def _closes_after_each_response(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Like llama.cpp's server: answers one streamed request with ``Keep-Alive``, then closes the
    connection when the next request arrives on it, without answering."""
    try:
        await answer_one_stream(reader, writer)
    finally:
        writer.close()


def test_b_a_connection_the_server_closed_is_not_a_failed_call():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

    async def calls() -> list[dict]:
        server = await asyncio.start_server(_closes_after_each_response, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
        async with server, client_session() as session:
            return [(await stream_chat(session, url, body)).record.to_dict() for _ in range(4)]

    recs = asyncio.run(calls())
    assert [r["error"] for r in recs] == [None] * 4
    assert [r.get("stale_connection", False) for r in recs] == [False, True, True, True]
    assert all(r["connect_s"] > 0 for r in recs)  # each went out on a new connection, its time recorded apart
