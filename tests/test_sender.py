"""The runner's seams (issue 13, parts 1 and 5): one typed call record, and load stages that send
through a :class:`~leverbench.runner.send.Sender`, so that their scheduling (and coordinated
omission) is tested here with a fake sender on a virtual clock: no HTTP, no real waiting, exact times."""

from __future__ import annotations

import asyncio
import json
import re
import selectors
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_agent_turns import exp as agent_experiment
from test_load import experiment as load_experiment

import leverbench.runner.load as load_module
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import read_ledger
from leverbench.ledger.records import (
    CALL_FLAGS,
    CALL_HASHES,
    CALL_NUMBERS,
    LABELS,
    TURN_NUMBERS,
    CallError,
    CallRecord,
    ErrorClass,
    TurnRecord,
)
from leverbench.runner.load import StageRun, stage_work
from leverbench.runner.run import Runner
from leverbench.runner.schedule import Unit
from leverbench.runner.send import Sent
from leverbench.runner.turn import run_turn
from leverbench.workload.load import arrival_offsets
from leverbench.workload.traces import load_traffic

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "traces" / "tracelab_example_round_trace.jsonl"
EPOCH = 1000.0  # the virtual clock's "epoch" time at loop time 0 (small: exact sums)


# ------------------------------------------------------------------ a virtual clock, a fake sender


class VirtualSelector(selectors.DefaultSelector):
    """Never waits: when nothing is ready before the loop's next timer, the clock jumps to it."""

    def __init__(self, clock: SimpleNamespace):
        super().__init__()
        self.clock = clock

    def select(self, timeout: float | None = None):
        ready = super().select(0)
        if not ready and timeout is None:
            raise RuntimeError("the loop waits for nothing that will ever come")
        if not ready and timeout > 0:
            self.clock.now += timeout
        return ready


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is the virtual clock's (timers fire in order, at once)."""

    def __init__(self) -> None:
        self.clock = SimpleNamespace(now=0.0)
        super().__init__(VirtualSelector(self.clock))

    def time(self) -> float:
        return self.clock.now


def run_virtual(coro, monkeypatch):
    """Run *coro* on a :class:`VirtualLoop`, the load module's wall clock (``time.time``) being its clock."""
    loop = VirtualLoop()
    monkeypatch.setattr(load_module, "time", SimpleNamespace(time=lambda: EPOCH + loop.clock.now))
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


class FakeSender:
    """A :class:`~leverbench.runner.send.Sender` without HTTP: every call takes ``latency_s`` (virtual) and
    comes back as a synthetic record: sent when ``send`` was called, connection reused."""

    length_by_prompt = False

    def __init__(self, latency_s: float):
        self.latency_s = latency_s
        self.records: list[CallRecord] = []  # in the order the calls ended

    def body(self, messages, max_tokens, temperature, extra=None, tools=None):
        return {"messages": messages, "max_tokens": max_tokens, "temperature": temperature, **(extra or {})}

    async def send(self, body, head, *, think_tags=False, defer_counting=False, forced_tokens=None):
        rec = head.fresh()
        rec.t_send, rec.connect_s = EPOCH + asyncio.get_running_loop().time(), 0.0
        await asyncio.sleep(self.latency_s)
        rec.latency_s = self.latency_s
        self.records.append(rec)
        return Sent(rec, "an answer", 0.0)

    async def count_text_tokens(self, text):
        return None


def stage(tmp: Path, stage_toml: str) -> tuple:
    """The experiment's one load stage, planned, and the experiment (its arm's endpoint is never called)."""
    exp = load(load_experiment(tmp, {"a": "http://127.0.0.1:9/v1"}, '[[load]]\nname = "s"\n' + stage_toml))
    [(plan, arm)] = stage_work(exp, ["a"])
    return exp, plan, arm


def drive(tmp: Path, stage_toml: str, latency_s: float, monkeypatch) -> list[CallRecord]:
    exp, plan, arm = stage(tmp, stage_toml)
    sender = FakeSender(latency_s)
    run_virtual(StageRun(sender, exp, plan, arm).run(), monkeypatch)
    return sender.records


# ------------------------------------------------------------------ scheduling, with the fake sender


def test_a_closed_loop_sends_each_call_at_its_clients_previous_end(tmp_path, monkeypatch):
    recs = drive(tmp_path, 'mode = "closed"\nconcurrency = 1\nrequests = 5\n', 0.25, monkeypatch)
    assert [r.repeat for r in recs] == [0, 1, 2, 3, 4] and {r.kind for r in recs} == {"load"}
    for prev, nxt in zip(recs, recs[1:]):
        assert nxt.extra["scheduled_t"] == prev.t_end  # the schedule is the previous call's recorded end
        assert nxt.t_send == pytest.approx(prev.t_end, abs=1e-9)  # and the call went out then
    assert recs[-1].t_end - recs[0].t_send == pytest.approx(5 * 0.25)


def test_a_closed_loops_clients_each_wait_for_their_own_previous_call(tmp_path, monkeypatch):
    recs = drive(tmp_path, 'mode = "closed"\nconcurrency = 3\nrequests = 9\n', 0.5, monkeypatch)
    assert len(recs) == 9
    first = [r for r in recs if r.t_send == recs[0].t_send]
    assert len(first) == 3  # three clients, each sends at once
    ends = sorted(r.t_end for r in recs)
    later = sorted(r.extra["scheduled_t"] for r in recs if r not in first)
    assert later == ends[:6]  # each later call is scheduled at one earlier call's end, each end used once
    assert all(r.t_send == pytest.approx(r.extra["scheduled_t"], abs=1e-9) for r in recs if r not in first)


def test_an_open_loops_late_send_keeps_its_scheduled_time(tmp_path, monkeypatch):
    """One slot (max_in_flight = 1), calls of 0.2 s, one every 0.05 s: the calls queue and go out late,
    and each keeps the time the schedule gave it, so that its latency counts the wait."""
    recs = drive(tmp_path, 'mode = "open"\nrate = 20.0\narrival = "constant"\nrequests = 6\nmax_in_flight = 1\n',
                 0.2, monkeypatch)
    recs.sort(key=lambda r: r.repeat)
    offsets = [o for o, _ in zip(arrival_offsets(20.0, "constant"), range(6))]
    scheduled = [r.extra["scheduled_t"] for r in recs]
    assert [s - scheduled[0] for s in scheduled] == pytest.approx([o - offsets[0] for o in offsets], abs=1e-9)
    for prev, nxt in zip(recs, recs[1:]):  # one slot: a call goes out when it is due and the slot is free
        assert nxt.t_send == pytest.approx(max(nxt.extra["scheduled_t"], prev.t_end), abs=1e-9)
    lag = [r.t_send - r.extra["scheduled_t"] for r in recs]
    assert lag == pytest.approx([k * (0.2 - 0.05) for k in range(6)], abs=1e-9)  # late, and later and later
    e2e = [r.t_end - r.extra["scheduled_t"] for r in recs]  # the latency from the schedule counts the wait
    assert e2e == pytest.approx([0.2 + k * 0.15 for k in range(6)], abs=1e-9)
    # each waited that long for the slot, and records it apart: the client itself was on time
    assert [r.extra["slot_wait_s"] for r in recs] == pytest.approx(lag, abs=1e-9)


def test_an_open_loop_on_time_sends_at_its_schedule(tmp_path, monkeypatch):
    recs = drive(tmp_path, 'mode = "open"\nrate = 4.0\narrival = "poisson"\nseed = 7\nrequests = 8\n', 0.5,
                 monkeypatch)
    recs.sort(key=lambda r: r.repeat)
    offsets = [o for o, _ in zip(arrival_offsets(4.0, "poisson", seed=7), range(8))]
    assert [r.t_send - recs[0].t_send for r in recs] == pytest.approx(offsets, abs=1e-9)
    assert all(r.t_send == pytest.approx(r.extra["scheduled_t"], abs=1e-9) for r in recs)


def test_a_trace_sessions_rounds_wait_for_the_answer_and_the_tool(tmp_path, monkeypatch):
    """A TraceLab session (the sample's first: 9 rounds): each round is scheduled at the previous round's
    end plus its tool wait (÷ speed), and sent then."""
    speed = 4.0
    recs = drive(tmp_path, f'mode = "trace"\ntrace = "{TRACE}"\ntrace_format = "tracelab-round"\nspeed = {speed}\n'
                           'requests = 9\nscale_input = 0.01\nmax_tokens = 8\n', 1.5, monkeypatch)
    calls = load_traffic(TRACE, "tracelab-round").calls
    assert len(recs) == 9 and len({r.turn_id for r in recs}) == 1 and recs[0].turn_id is not None
    assert {r.extra["session"] for r in recs} == {recs[0].turn_id}
    recs.sort(key=lambda r: r.step)
    assert [r.step for r in recs] == list(range(9)) and [r.repeat for r in recs] == list(range(9))
    waits = [(calls[r.repeat].tool_wait_s or 0.0) / speed for r in recs[:-1]]
    assert sum(w > 0 for w in waits) >= 5  # the sample has tool waits
    for prev, nxt, wait in zip(recs, recs[1:], waits):
        assert nxt.extra["scheduled_t"] == pytest.approx(prev.t_end + wait, abs=1e-9)
        assert nxt.t_send == pytest.approx(nxt.extra["scheduled_t"], abs=1e-9)


def test_a_trace_replay_sends_each_call_at_its_arrival(tmp_path, monkeypatch):
    """Mooncake's calls, one session each, go out at their arrival times (÷ speed), however long the calls take."""
    path = ROOT / "tests" / "data" / "traces" / "mooncake_conversation_trace.jsonl"
    recs = drive(tmp_path, f'mode = "trace"\ntrace = "{path}"\nspeed = 4.0\nrequests = 40\nmax_tokens = 8\n'
                           'scale_input = 0.01\n', 3.0, monkeypatch)
    arrivals = sorted(c.arrival_s for c in load_traffic(path).calls[:40])
    sends = sorted(r.t_send for r in recs)
    assert len(recs) == 40 and all(r.step == 0 and r.turn_id is None for r in recs)
    assert [t - sends[0] for t in sends] == pytest.approx([(a - arrivals[0]) / 4.0 for a in arrivals], abs=1e-9)
    assert all(r.t_send == pytest.approx(r.extra["scheduled_t"], abs=1e-9) for r in recs)


class ToolCallingSender(FakeSender):
    """Answers every call with a tool call; the call numbered *fail_at* (from 0) fails with HTTP 500."""

    def __init__(self, fail_at: int | None = None):
        super().__init__(0.1)
        self.fail_at = fail_at
        self.bodies: list[dict] = []

    async def send(self, body, head, **kw):
        self.bodies.append(body)
        sent = await super().send(body, head, **kw)
        if len(self.records) - 1 == self.fail_at:
            sent.record.error, sent.record.status = CallError(ErrorClass.HTTP_STATUS, "HTTP 500: oops"), 500
        else:
            sent.record.tool_calls = [{"id": f"c{len(self.records)}", "name": "search_docs", "arguments": "{}"}]
            sent.record.completion_tokens = 5
        return sent


def test_a_turn_follows_tool_calls_to_its_step_limit(tmp_path, monkeypatch):
    exp = load(agent_experiment(tmp_path, "http://127.0.0.1:9/v1",
                                'tools = "tools.json"\ntool_script = "script.json"\nmax_steps = 3\n'))
    sender = ToolCallingSender()
    turn = run_virtual(run_turn(sender, exp, Unit("turn", "a", "turn", 1)), monkeypatch)
    assert [(r.kind, r.step, r.turn_id, r.extra) for r in sender.records] == [
        ("call", k, turn.turn_id, {"scripted_step": 0}) for k in range(3)]
    assert (turn.calls, turn.step_limit, turn.failed_calls, turn.error) == (3, True, 0, None)
    assert turn.tool_s == pytest.approx(2 * 0.25)  # the script's latency, for the two tool calls answered
    assert turn.output_tokens == 15 and turn.turn_s == pytest.approx(turn.model_s + turn.tool_s)
    last = sender.bodies[-1]["messages"]  # the conversation carries each answer and its tool result
    assert [m["role"] for m in last[-4:]] == ["assistant", "tool", "assistant", "tool"]
    assert last[-1]["content"] == "found: the cache helps prefill"


def test_a_turn_stops_at_a_failed_call(tmp_path, monkeypatch):
    exp = load(agent_experiment(tmp_path, "http://127.0.0.1:9/v1",
                                'tools = "tools.json"\ntool_script = "script.json"\nmax_steps = 5\n'))
    sender = ToolCallingSender(fail_at=1)
    turn = run_virtual(run_turn(sender, exp, Unit("turn", "a", "turn", 0)), monkeypatch)
    assert (turn.calls, turn.failed_calls, turn.step_limit) == (2, 1, False)
    assert turn.error == CallError(ErrorClass.HTTP_STATUS, "1 of 2 calls failed")
    assert turn.output_tokens is None  # a call without its count: the turn's sum is unknown


# ------------------------------------------------------------------ the typed record


def test_a_call_record_is_written_with_its_keys_extra_after_its_head():
    rec = CallRecord(kind="probe", arm="a", case="c", repeat=2, step=0,
                     extra={"probe_tokens": 8, "position": None, "length_method": "ignore_eos"},
                     t_send=1.5, latency_s=0.5, error=CallError(ErrorClass.NO_USAGE, "no usage"), retried=True)
    d = rec.to_dict()
    assert list(d)[:8] == ["kind", "arm", "case", "repeat", "step", "probe_tokens", "position", "length_method"]
    assert d["position"] is None  # an extra key is written as it is, null included
    assert d["error"] == {"class": "no_usage", "message": "no usage"} and d["retried"] is True
    assert d["connect_s"] is None and d["ttft_s"] is None  # measured fields are written, null or not
    for absent in ("turn_id", "stale_connection", "harness_s", "attempt", "output_text", "usage_missing"):
        assert absent not in d  # optional ones only when set
    assert json.loads(json.dumps(d)) == d
    with pytest.raises(ValueError, match="latency_s"):
        CallRecord(extra={"latency_s": 1.0}).to_dict()  # an extra key never hides a field


def test_a_fresh_record_keeps_the_head_only():
    head = CallRecord(kind="load", arm="a", case="c", repeat=3, step=1, turn_id="t", extra={"stage": "s"})
    rec = head.fresh()
    rec.extra["scheduled_t"] = 1.0
    rec.latency_s = 2.0
    assert (rec.kind, rec.arm, rec.case, rec.repeat, rec.step, rec.turn_id) == ("load", "a", "c", 3, 1, "t")
    assert head.extra == {"stage": "s"} and head.latency_s is None  # the head is not changed


def test_turn_records_are_written_whole():
    err = CallError(ErrorClass.HTTP_STATUS, "1 of 2")
    d = TurnRecord(arm="a", case="c", repeat=1, turn_id="t", error=err).to_dict()
    assert list(d) == ["kind", "arm", "case", "repeat", "turn_id", "t_start", "turn_s", "model_s", "tool_s", "calls",
                       "scripted_steps", "failed_calls", "step_limit", "empty_answers", "retried_s", "output_tokens",
                       "prompt_tokens", "reasoning_tokens", "error"]
    assert d["error"] == {"class": "http_status", "message": "1 of 2"}


def test_the_columns_come_from_the_records():
    assert LABELS == ("arm", "case", "turn_id", "tools_reached", "tools_check") and CALL_HASHES == ("output_sha256",)
    assert set(CALL_FLAGS) == {"retried", "empty_answer"}
    assert {"step", "latency_s", "ttft_s", "prompt_tokens", "cached_tokens", "answer_chunks"} <= set(CALL_NUMBERS)
    assert {"repeat", "turn_s", "tool_s", "retried_s", "output_tokens"} <= set(TURN_NUMBERS)


def test_the_error_classes_are_the_documented_ones():
    page = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    listed = page[page.index("A failed call is recorded with its error class"):page.index("Failures are counted")]
    named = set(re.findall(r"`([a-z_]+)`", listed)) - {"connect_s"}  # the setting timeout_connect refers to
    assert named == {c.value for c in ErrorClass}


# ------------------------------------------------------------------ a defect: private keys in the ledger


def test_a_load_call_counted_later_keeps_no_private_key(tmp_path):
    """A load call the server sent no usage for is counted after the stage moved on; its record used to be
    copied only then, when the runner had already put its answer text (``_content``) and ``_retried_s``
    in it: they reached the ledger, the answer written though store_text was off."""
    stage_toml = '[[load]]\nname = "s"\nmode = "closed"\nconcurrency = 2\nrequests = 4\n'
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=2000.0, output_tokens=8,
                                   fault_no_usage=1.0)) as sim:
        p = load_experiment(tmp_path, {"a": sim.base_url}, stage_toml)
        Runner(load(p), tmp_path / "run").run()
    recs = [r for r in read_ledger(tmp_path / "run").records if r["kind"] in ("call", "load", "warmup", "turn")]
    loads = [r for r in recs if r["kind"] == "load"]
    assert len(loads) == 4 and all(r["usage_missing"] and r["error"] is None for r in loads)  # counted
    assert [k for r in recs for k in r if k.startswith("_")] == []
    assert not any("output_text" in r for r in recs)
