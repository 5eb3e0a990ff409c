"""Reading a recording back (issue 42): ``leverbench analyze`` on what ``leverbench record`` wrote, and a recording's
prompt lengths from whatever the engine gave (usage, else llama.cpp's ``timings``), for the replay's fidelity check.

The agent is the worked example's (``examples/agent_openai.py``: the ``openai`` SDK, streaming without
``stream_options.include_usage``, two tools); the upstream the simulator, whose ground truth (``/sim/truth``: the
tokens it counted for every request it was sent) and the agent's own account of its calls are the oracles.  A
hand-written recording checks the shared prefix, the within-turn share and the engine's time, worked out by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import limits
import pytest
from click.testing import CliRunner
from test_record import ENV, start_recorder, stop_recorder

from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import read_ledger
from leverbench.report.recorded_tables import replay_line
from leverbench.runner.run import Runner
from leverbench.workload.recorded.base import token_counts

pytest.importorskip("openai")  # the test extra (pyproject.toml): the worked example's agent is on the SDK

AGENT = Path(__file__).resolve().parents[1] / "examples" / "agent_openai.py"
FAST = dict(prefill_tps=1e6, decode_tps=2000.0, output_tokens=6)
HINT = "streamed without usage (the client did not send stream_options={\"include_usage\": true})"


def run_agent(url: str, *questions: str) -> list[dict]:
    res = subprocess.run([sys.executable, str(AGENT), "--base-url", url, "--max-tokens", "8",
                          *[a for q in questions for a in ("--question", q)]],
                         capture_output=True, text=True, timeout=limits.SMALL_COMMAND_S, env=ENV)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


def analyze_json(target: Path) -> dict:
    res = CliRunner().invoke(cli, ["analyze", str(target), "--format", "json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_token_counts_come_from_usage_else_llama_cpp_timings():
    usage = {"prompt_tokens": 120, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 64}}
    assert token_counts({"usage": usage}) == (120, 64, 9, "usage")
    assert token_counts({"usage": {"prompt_tokens": 50, "completion_tokens": 3},
                         "timings": {"prompt_n": 20, "cache_n": 30}}) == (50, 30, 3, "usage")
    assert token_counts({"usage": None, "timings": {"prompt_n": 18, "cache_n": 145, "predicted_n": 12}}) == \
        (163, 145, 12, "llama.cpp timings")
    assert token_counts({"usage": None, "timings": None}) == (None, None, None, None)
    assert token_counts({"timings": {"prompt_n": -1, "cache_n": 4}}) == (None, None, None, None)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Two questions of the openai-SDK agent through the proxy, against the simulator (llama.cpp's dialect, two
    tool rounds a question); the recording, the agent's account, the simulator's truth, the recorder's stderr."""
    tmp = tmp_path_factory.mktemp("rec-openai")
    with SimulatorThread(SimConfig(**FAST, tool_call_rounds=2)) as sim:
        proc, url = start_recorder(sim.base_url + "/v1", tmp / "rec")
        try:
            ran = run_agent(url, "How many hammers?", "What is 2 plus 3?")
        finally:
            err = stop_recorder(proc)
        truth = sim.truth()
    return tmp / "rec", ran, truth, err


def test_the_recorder_says_once_how_to_get_usage_and_that_llama_cpp_timings_stand_in(recorded):
    _, _, _, err = recorded
    lines = [line for line in err.splitlines() if HINT in line]
    assert len(lines) == 1 and "exchange 1 " in lines[0], err
    assert "llama.cpp's timings give its prompt tokens instead (prompt_n + cache_n)" in lines[0]


def test_analyze_reads_a_recording_directory_with_the_agents_turns_and_the_servers_counts(recorded):
    rec, ran, truth, _ = recorded
    r = analyze_json(rec)
    assert analyze_json(rec / "exchanges.jsonl")["recording"] == r["recording"]  # the file as the directory
    got = r["recording"]
    # the agent's own account: one turn a question, every call it made, its tool rounds
    assert got["turns"] == len(ran) == 2
    assert got["calls"] == r["calls"] == sum(len(q["calls"]) for q in ran) == len(truth) == 8
    assert [t["calls"] for t in got["per_turn"]] == [len(q["calls"]) for q in ran] == [4, 4]
    assert got["tool_rounds"] == sum(q["tool_rounds"] for q in ran) == 4
    assert [t["tool_rounds"] for t in got["per_turn"]] == [q["tool_rounds"] for q in ran]
    # the tokens the simulator counted for each request it was sent, from llama.cpp's timings (no usage was sent)
    assert all(c["usage"] is None and c["timings"] for q in ran for c in q["calls"])
    assert got["counted_by"] == {"llama.cpp timings": 8}
    assert got["prompt_tokens"] == sum(t["prompt_tokens"] for t in truth)
    assert got["cached_tokens"] == sum(t["cached_tokens"] for t in truth) > 0
    assert got["output_tokens"] == sum(t["completion_tokens"] for t in truth)
    assert [t["first_prompt"] for t in got["per_turn"]] == [truth[0]["prompt_tokens"], truth[4]["prompt_tokens"]]
    # every turn opens with the agent's system prompt and its two tools
    assert (got["shared_prefix"]["messages"], got["shared_prefix"]["tools"]) == (1, 2)
    assert r["cache_already_on"] is True and r["input"]["format"] == "leverbench-recording"
    text = CliRunner().invoke(cli, ["analyze", str(rec)], catch_exceptions=False).output
    flat = " ".join(text.split())
    assert "Recording: 2 turns, 8 calls (per turn: 4); tool rounds: 4 in 2 turns (at most 2 in a turn)" in flat
    assert "counts from llama.cpp timings at 8 of 8 calls" in flat and "Recommendation" in flat
    md = CliRunner().invoke(cli, ["analyze", str(rec), "--format", "md"], catch_exceptions=False).output
    page = rec.parent / "analyze.html"
    CliRunner().invoke(cli, ["analyze", str(rec), "--format", "html", "--out", str(page)], catch_exceptions=False)
    assert "Recording: 2 turns, 8 calls" in page.read_text()
    for shown in (flat, md, page.read_text()):  # the recording's turns, then the tables a trace gets
        assert "Turns as recorded" in shown and "Levers, ranked by time saved" in shown and "Lengths (tokens)" in shown


def test_a_replay_of_a_recording_without_usage_checks_its_prompts_from_the_timings(recorded, tmp_path):
    rec, _, truth, _ = recorded
    exp = tmp_path / "exp.toml"
    exp.write_text(f'''
[experiment]
name = "timings"
repeats = 1
baseline = "sim"
sentinel_tokens = 0

[[arms]]
name = "sim"
role = "baseline"
base_url = "BASE/v1"
model = "sim"

[[cases]]
name = "agent"
from = "{rec}"
''')
    with SimulatorThread(SimConfig(**FAST, tool_call_rounds=2)) as sim:
        exp.write_text(exp.read_text().replace("BASE", sim.base_url))
        Runner(load(exp), tmp_path / "run").run()
    led = read_ledger(tmp_path / "run")
    calls = [c for c in led.records if c["kind"] == "call"]
    assert [c["recorded_prompt_tokens"] for c in calls] == [t["prompt_tokens"] for t in truth]
    arm = summarize(led)["recorded"]["arms"][0]
    assert (arm["calls"], arm["compared"], arm["within"], arm["no_recorded_usage"]) == (8, 8, 8, 0)
    assert "prompts as recorded on every arm (within 1%)" in replay_line(summarize(led))


def test_a_stream_without_usage_or_timings_is_said_at_record_and_refused_by_analyze(tmp_path):
    with SimulatorThread(SimConfig(**FAST, dialect="vllm")) as sim:
        proc, url = start_recorder(sim.base_url + "/v1", tmp_path / "rec")
        try:
            run_agent(url, "How many hammers?")
        finally:
            err = stop_recorder(proc)
    said = [line for line in err.splitlines() if HINT in line]
    assert len(said) == 1 and "its prompt length is not recorded and a replay cannot check it" in said[0]
    assert "--enable-force-include-usage" in said[0]
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path / "rec")])
    assert res.exit_code == 2
    assert "has token counts" in res.output and "include_usage" in res.output
    # what needs no counts is said all the same: the turn and its tool rounds (the agent's own account)
    assert "Recording: 1 turn" in res.output and "tool rounds:" in res.output
    assert len(res.output.strip().splitlines()) == 1  # one error line


def _exchange(n: int, turn: str, step: int, messages: list, answer_tools: int, prompt_n: int, cache_n: int,
              out: int, t: float, latency: float, prompt_ms: float, predicted_ms: float) -> dict:
    return {"kind": "exchange", "n": n, "turn": turn, "step": step, "session": None, "t_start": t, "method": "POST",
            "path": "/v1/chat/completions", "status": 200, "stream": True,
            "request": {"model": "m", "messages": messages, "stream": True},
            "response": {"content": "x", "reasoning": "", "finish_reason": "stop", "usage": None,
                         "tool_calls": [{"id": f"c{i}", "name": "f", "arguments": "{}"} for i in range(answer_tools)],
                         "timings": {"prompt_n": prompt_n, "cache_n": cache_n, "predicted_n": out,
                                     "prompt_ms": prompt_ms, "predicted_ms": predicted_ms}},
            "timing": {"ttft_s": latency / 2, "latency_s": latency, "chunks": 3}, "redactions": 0, "error": None}


def test_a_hand_written_recording_reads_as_worked_out_by_hand(tmp_path):
    sys_msg = {"role": "system", "content": "S" * 100}
    a = [sys_msg, {"role": "user", "content": "first"}]
    a2 = [*a, {"role": "assistant", "content": "x"}, {"role": "user", "content": "more"}]
    b = [sys_msg, {"role": "user", "content": "second"}]
    rows = [{"kind": "recording", "schema": "leverbench.recording/1", "tool_version": "0", "started_at": "",
             "upstream": "http://h/v1", "session_header": "X-Session-Id", "redact_patterns": 0},
            _exchange(1, "t0001", 0, a, 1, 100, 0, 10, 1000.0, 2.0, 500.0, 1000.0),
            _exchange(2, "t0001", 1, a2, 0, 20, 100, 10, 1003.5, 1.0, 100.0, 800.0),
            _exchange(3, "t0002", 0, b, 0, 10, 90, 5, 1010.0, 1.0, 50.0, 500.0),
            {**_exchange(4, "t0002", 1, b, 0, 1, 1, 1, 1012.0, 1.0, 1.0, 1.0), "status": 502, "error": "HTTP 502"}]
    (tmp_path / "exchanges.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = analyze_json(tmp_path)
    got = r["recording"]
    assert r["input"]["skipped"] == {"failed exchange": 1}
    assert (got["turns"], got["calls"], got["tool_rounds"]) == (2, 3, 1)
    assert (got["prompt_tokens"], got["cached_tokens"], got["output_tokens"]) == (100 + 120 + 100, 190, 25)
    sp = got["shared_prefix"]
    sys_chars = len(json.dumps(sys_msg, sort_keys=True, separators=(",", ":")))
    assert (sp["messages"], sp["tools"], sp["chars"], sp["cached_median"]) == (1, 0, sys_chars, 90)
    assert got["within_turn_share"] == pytest.approx(100 / 120)  # the second call repeats the first's 100 tokens
    t = got["engine_time"]  # Σ prompt_ms 650, Σ predicted_ms 2300, Σ latency 4 s; the gap 1003.5 − 1002
    assert (t["prefill_s"], t["decode_s"], t["other_s"], t["between_calls_s"]) == \
        pytest.approx((0.65, 2.3, 4 - 0.65 - 2.3, 1.5))
    rates = r["rates"]["*"]  # computed tokens (100 + 20 + 10) over 0.65 s; 25 tokens over 2.3 s
    assert (rates["prefill_tps"], rates["decode_tps"]) == pytest.approx((130 / 0.65, 25 / 2.3))
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path), "--columns", "input=a"])
    assert res.exit_code == 2 and "is a recording" in res.output
