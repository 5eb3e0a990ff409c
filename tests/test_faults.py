"""Faults from the server become ledger records with an error class; nothing is hidden."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from ledgers import warned
from test_run_sim import experiment

from leverbench.analysis.summary import summarize
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import read_ledger
from leverbench.runner.client import Timeouts, stream_chat
from leverbench.runner.run import Runner
from leverbench.schema.warning_kinds import WarningKind as W

BODY = {"model": "sim", "messages": [{"role": "user", "content": "one two three"}], "max_tokens": 8}
FAST = dict(prefill_tps=100_000.0, decode_tps=500.0, output_tokens=8)


def one_call(base_url: str, timeouts: Timeouts = Timeouts(), body: dict | None = None) -> dict:
    async def go():
        async with aiohttp.ClientSession() as s:
            got = await stream_chat(s, base_url + "/v1/chat/completions", body or BODY, timeouts=timeouts)
            return got.record.to_dict()  # as the ledger holds it
    return asyncio.run(go())


@pytest.mark.parametrize("fault, cls, text", [
    ({"fault_http_500": 1.0}, "http_status", "HTTP 500: simulated internal error"),
    ({"fault_http_429": 1.0}, "http_status", "HTTP 429"),
    ({"fault_cut_stream": 1.0}, "stream_cut", ""),
    ({"fault_malformed": 1.0}, "malformed", "bad SSE data line"),
    ({"fault_no_usage": 1.0}, "no_usage", "no token usage"),
])
def test_fault_matrix(fault, cls, text):
    with SimulatorThread(SimConfig(**FAST, **fault)) as sim:
        rec = one_call(sim.base_url)
    assert rec["error"]["class"] == cls, rec["error"]
    assert text in rec["error"]["message"]


def test_healthy_call_has_no_error():
    with SimulatorThread(SimConfig(**FAST)) as sim:
        rec = one_call(sim.base_url)
    assert rec["error"] is None and rec["completion_tokens"] == 8


def test_first_token_timeout():
    with SimulatorThread(SimConfig(**FAST, fault_stall=1.0, fault_stall_s=2.0)) as sim:
        rec = one_call(sim.base_url, Timeouts(first_token_s=0.3, idle_s=5, total_s=10))
    assert rec["error"]["class"] == "timeout_first_token"
    assert rec["latency_s"] < 1.5


def test_idle_timeout_between_tokens():
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=20.0, output_tokens=8)) as sim:
        # a chunk every 50 ms; an idle limit of 20 ms between chunks
        rec = one_call(sim.base_url, Timeouts(first_token_s=5, idle_s=0.02, total_s=10))
    assert rec["error"]["class"] == "timeout_idle"
    assert rec["ttft_s"] is not None  # it failed after the first token, between chunks


def test_total_timeout():
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=50.0, output_tokens=100)) as sim:
        rec = one_call(sim.base_url, Timeouts(first_token_s=5, idle_s=5, total_s=0.5),
                       body={**BODY, "max_tokens": 100})
    assert rec["error"]["class"] == "timeout_total"
    assert 0.4 < rec["latency_s"] < 1.5


def test_connection_refused():
    rec = one_call("http://127.0.0.1:9")
    assert rec["error"]["class"] == "connect" and rec["status"] is None


def test_retries_are_recorded_as_such(tmp_path):
    with SimulatorThread(SimConfig(**FAST, fault_http_500=0.5, seed=3)) as sim:
        exp = experiment(tmp_path, {"nocache": sim.base_url}, repeats=2, probes=False)
        exp.write_text(exp.read_text().replace("sentinel_tokens = 16", "sentinel_tokens = 16\nretries = 3"))
        Runner(load(exp), tmp_path / "run").run()
        truth = sim.truth()
    led = read_ledger(tmp_path / "run")
    # every HTTP 500 the simulator sent is one failed attempt in the ledger, and nothing else failed
    chat = [r for r in led.records if r["kind"] in ("call", "sentinel", "probe", "warmup")]
    assert len(chat) == len(truth)
    assert sum(1 for r in chat if r["error"]) == sum(1 for t in truth if t["fault"] == "http_500") > 0
    calls = [r for r in led.records if r["kind"] == "call"]
    retried = [c for c in calls if c.get("retried")]
    assert retried, "with a 50 % fault rate some attempts must have failed"
    assert all(c["error"]["class"] == "http_status" and "attempt" in c for c in retried)
    # attempts of one call are numbered 0, 1, … in the ledger's order; only the last may be unretried
    by_call: dict[tuple, list[dict]] = {}
    for r in chat:
        by_call.setdefault((r["kind"], r["arm"], r["case"], r["repeat"], r.get("step"), r.get("probe_tokens"),
                            r.get("position")), []).append(r)
    for attempts in by_call.values():
        assert [a["attempt"] for a in attempts] == list(range(len(attempts)))
        assert all(a.get("retried") for a in attempts[:-1]) and not attempts[-1].get("retried")
        assert len(attempts) <= 4  # retries = 3
    s = summarize(led)
    finals = [c for c in calls if not c.get("retried")]
    assert s["run"]["failed_calls"] == sum(1 for c in finals if c["error"]) + sum(
        1 for r in led.records if r["kind"] in ("sentinel", "probe") and r["error"] and not r.get("retried"))
    assert sum(c["retried_calls"] for c in s["cells"]) == len(retried)
    counted = sum(1 for r in led.records if r["kind"] in ("call", "sentinel", "probe") and r.get("retried"))
    [w] = warned(s, W.RETRIED)
    assert w["text"].startswith(f"{counted} failed attempt(s) were retried (retries = 3)")  # the count
