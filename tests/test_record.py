"""``leverbench record`` end to end (issue 26): a small agent (``tests/agent_script.py``: an OpenAI-compatible client,
two tool rounds, one long system prompt) runs through the proxy against the simulator; the recording replays on two
simulator arms, as recorded and live, every arm receiving the recording's requests (checked against what each
simulator logged it was sent); a live replay on an arm that answers sooner says where it departed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import limits
import pytest
from click.testing import CliRunner

from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import read_ledger
from leverbench.runner.run import Runner
from leverbench.schema.warning_kinds import WarningKind
from leverbench.workload.recorded.live import shown_call

TESTS = Path(__file__).parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
KEY = "sk-agent-secret-0123456789"
FAST = dict(prefill_tps=1e6, decode_tps=2000.0, output_tokens=12)


def start_recorder(upstream: str, out: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """``leverbench record`` in its own process; its proxy's base URL (the first line it prints)."""
    proc = subprocess.Popen([sys.executable, "-m", "leverbench", "record", "--upstream", upstream, "--listen",
                             "127.0.0.1:0", "--out", str(out), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.kill()
        raise AssertionError(f"leverbench record did not start: {url!r} {proc.stderr.read()}")
    return proc, url


def stop_recorder(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=limits.STOP_S)
    assert proc.returncode == 0, err
    return err


def agent(url: str, *args: str) -> list[dict]:
    res = subprocess.run([sys.executable, str(TESTS / "agent_script.py"), "--base-url", url, "--key", KEY, *args],
                         capture_output=True, text=True, timeout=limits.SMALL_COMMAND_S)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


def exchanges(out: Path) -> list[dict]:
    return [row for row in map(json.loads, (out / "exchanges.jsonl").read_text().splitlines())
            if row["kind"] == "exchange"]


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """Three agent tasks through the proxy: two streamed (their turns found by the conversation each extends), one
    not streamed with a session header; and the model list fetched through the proxy and directly."""
    tmp = tmp_path_factory.mktemp("record")
    with SimulatorThread(SimConfig(**FAST, tool_call_rounds=2)) as sim:
        proc, url = start_recorder(sim.base_url + "/v1", tmp / "rec")
        try:
            ran = agent(url, "--task", "fix the failing build", "--task", "why are the tests slow")
            ran += agent(url, "--task", "tidy the changelog", "--no-stream", "--session", "sess-9")
            import urllib.error  # noqa: PLC0415
            import urllib.request  # noqa: PLC0415

            models = [urllib.request.urlopen(u + "/models", timeout=limits.HTTP_S).read()  # noqa: S310 (loopback)
                      for u in (url, sim.base_url + "/v1")]
            try:  # the Responses API: passed through (the simulator has none), not recorded, counted
                urllib.request.urlopen(url + "/responses", data=b"{}", timeout=limits.HTTP_S)  # noqa: S310
            except urllib.error.HTTPError:
                pass
        finally:
            err = stop_recorder(proc)
        truth = sim.truth()
    return tmp, ran, truth, models, err


def test_the_agent_runs_through_the_proxy_and_every_exchange_is_recorded_in_its_turn(recording):
    tmp, ran, truth, models, err = recording
    rows = exchanges(tmp / "rec")
    # what the agent did: three tasks, each two tool rounds and an answer, as the simulator answered them
    assert [[bool(c["tool_calls"]) for c in task["calls"]] for task in ran] == [[True, True, False]] * 3
    assert [(r["turn"], r["step"]) for r in rows] == [(t, s) for t in ("t0001", "t0002", "s-sess-9") for s in range(3)]
    assert [r["stream"] for r in rows] == [True] * 6 + [False] * 3 and all(r["error"] is None for r in rows)
    assert "recorded 9 exchange(s) (0 failed) in 3 turn(s)" in err
    assert "passed through unrecorded: 1 POST /v1/responses (only chat completions are recorded)" in err
    # the request whole, the response as the agent read it, the usage the simulator counted
    assert all(r["request"]["tools"][0]["function"]["name"] == "read_file" for r in rows)
    assert [r["request"]["messages"][0]["content"][:27] for r in rows] == ["You are a careful build eng"] * 9
    answers = [c for task in ran for c in task["calls"]]
    assert [r["response"]["content"] for r in rows] == [c["content"] for c in answers]
    assert [[(t["name"], t["arguments"]) for t in r["response"]["tool_calls"]] for r in rows] == \
        [[(t["name"], t["arguments"]) for t in c["tool_calls"]] for c in answers]
    assert [r["response"]["usage"]["prompt_tokens"] for r in rows] == [t["prompt_tokens"] for t in truth]
    assert all(r["response"]["timings"]["prompt_n"] >= 0 for r in rows)  # llama.cpp's own timings, as sent
    # each tool round's result grew the prompt: the recording holds what decides the prefix cache
    assert [r["response"]["usage"]["prompt_tokens"] for r in rows[:3]] == sorted(t["prompt_tokens"] for t in truth[:3])
    assert all(r["timing"]["ttft_s"] is not None and 0 < r["timing"]["ttft_s"] <= r["timing"]["latency_s"]
               for r in rows[:6])
    # the key was forwarded (the simulator answered) and is written nowhere
    assert KEY not in (tmp / "rec" / "exchanges.jsonl").read_text()
    # a path the proxy does not record passes through unchanged
    assert models[0] == models[1] and b'"object"' in models[0]


def _experiment(tmp: Path, rec: Path, arms: dict[str, str], cases: str) -> Path:
    arm_toml = "".join(f'''
[[arms]]
name = "{name}"
role = "{"baseline" if i == 0 else "treatment"}"
base_url = "{url}/v1"
model = "sim"
conditions = {{ prefix_cache = {"false" if i == 0 else "true"} }}
''' for i, (name, url) in enumerate(arms.items()))
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "recorded"
repeats = 2
baseline = "{next(iter(arms))}"
sentinel_tokens = 0
{arm_toml}
{cases.replace("REC", str(rec))}''')
    return p


BOTH_MODES = '''
[[cases]]
name = "agent"
from = "REC"

[[cases]]
name = "live"
from = "REC"
replay = "live"
select = ["t0001", "s-*"]
'''


def test_the_recording_replays_on_two_arms_with_the_recorded_requests_in_both_modes(recording, tmp_path):
    rec_dir = recording[0] / "rec"
    recorded = {(r["turn"], r["step"]): r["response"]["usage"]["prompt_tokens"] for r in exchanges(rec_dir)}
    with SimulatorThread(SimConfig(**FAST, tool_call_rounds=2, prefix_cache=False)) as a, \
            SimulatorThread(SimConfig(**FAST, tool_call_rounds=2)) as b:
        exp = _experiment(tmp_path, rec_dir, {"nocache": a.base_url, "cache": b.base_url}, BOTH_MODES)
        Runner(load(exp), tmp_path / "run").run()
        truth = {"nocache": a.truth(), "cache": b.truth()}
    led = read_ledger(tmp_path / "run")
    calls = [r for r in led.records if r["kind"] == "call"]
    cases = {c["name"]: c.get("replay") for c in led.header["config"]["cases"]}
    assert cases == {"agent/t0001": "recorded", "agent/t0002": "recorded", "agent/s-sess-9": "recorded",
                     "live/t0001": "live", "live/s-sess-9": "live"}
    # every call: the recorded step, and the prompt the simulator counted is the recording's (equal: one tokenizer)
    assert len(calls) == 2 * 2 * (3 + 3 + 3 + 3 + 3)
    for c in calls:
        turn = c["case"].split("/", 1)[1]
        assert c["error"] is None and c["replay"] == cases[c["case"]] and c["as_recorded"] is True
        assert c["prompt_tokens"] == c["recorded_prompt_tokens"] == recorded[(turn, c["step"])]
    # ... as each simulator logged what it was sent (the ledger's counts are the servers' own; its warm-up call aside)
    for arm, t in truth.items():
        sent = [c["prompt_tokens"] for c in led.records if c["kind"] in ("call", "warmup") and c["arm"] == arm]
        assert sorted(x["prompt_tokens"] for x in t) == sorted(sent)
    # the two arms received identical requests: the same messages at every case, repeat and step
    by_place: dict[tuple, set[str]] = {}
    for c in calls:
        by_place.setdefault((c["case"], c["repeat"], c["step"]), set()).add(c["input_sha256"])
    assert len(by_place) == 30 and all(len(h) == 1 for h in by_place.values())
    s = summarize(led)
    sec = s["recorded"]
    assert sec["requests_compared"] == sec["requests_identical"] == 30 and sec["departures"] == []
    assert [(a["arm"], a["calls"], a["compared"], a["within"], a["max_deviation"]) for a in sec["arms"]] == \
        [("nocache", 30, 30, 30, 0.0), ("cache", 30, 30, 30, 0.0)]
    kinds = {w["kind"] for w in s["warning_items"]}
    assert not kinds & {WarningKind.REPLAY_DEPARTED, WarningKind.REPLAY_PROMPT_DIFFERS}
    # the prefix cache engaged on the replayed turns: the recorded prefixes are what decides it
    assert next(e for e in s["engaged"] if e["arm"] == "cache")["cached_share"] > 0.5
    shown = CliRunner().invoke(cli, ["report", str(tmp_path / "run"), "--no-write"], catch_exceptions=False).output
    assert "Replay: 5 recorded turns, mode live and recorded; prompts as recorded on every arm (within 1%); " \
           "identical requests on every arm" in shown


def test_a_live_replay_follows_the_arm_and_says_where_it_departed(recording, tmp_path):
    """The arm answers after one tool round where the recorded agent's model called a tool twice: the live replay
    ends its turn there (and says so); the recorded replay still sends all three recorded requests."""
    rec_dir = recording[0] / "rec"
    with SimulatorThread(SimConfig(**FAST, tool_call_rounds=1)) as a:
        exp = _experiment(tmp_path, rec_dir, {"sooner": a.base_url}, '''
[[cases]]
name = "live"
from = "REC"
replay = "live"
select = ["t0001"]

[[cases]]
name = "fixed"
from = "REC"
select = ["t0001"]
''')
        Runner(load(exp), tmp_path / "run").run()
    led = read_ledger(tmp_path / "run")
    calls = [r for r in led.records if r["kind"] == "call" and r["repeat"] == 0]
    live = [c for c in calls if c["case"] == "live/t0001"]
    fixed = [c for c in calls if c["case"] == "fixed/t0001"]
    assert [bool(c["tool_calls"]) for c in live] == [True, False] and len(fixed) == 3
    # the arguments are the agent's content: without store_text the departure names their hash
    assert [c.get("departed") for c in live] == [None, "answered where the recording called "
                                                 + shown_call("read_file", '{"round": 2}', show=False)]
    assert shown_call("read_file", '{"round": 2}', show=False).startswith("read_file(args sha256:")
    # the live path's second request carried the recorded tool result for the arm's own call: the recording's prompt
    assert live[1]["as_recorded"] is True and live[1]["prompt_tokens"] == live[1]["recorded_prompt_tokens"]
    s = summarize(led)
    sec = s["recorded"]
    assert [(d["case"], d["repeat"], d["step"]) for d in sec["departures"]] == [("live/t0001", 0, 1),
                                                                                ("live/t0001", 1, 1)]
    assert sec["arms"][0]["departed_calls"] == 2
    assert WarningKind.REPLAY_DEPARTED in {w["kind"] for w in s["warning_items"]}
    full = CliRunner().invoke(cli, ["report", str(tmp_path / "run"), "--no-write", "--full"],
                              catch_exceptions=False).output
    assert "Recorded turns replayed (2 turns, mode live and recorded)" in full
    assert "departed: answered where the recording called read_file" in " ".join(full.split())
    CliRunner().invoke(cli, ["report", str(tmp_path / "run"), "--format", "html"], catch_exceptions=False)
    assert "Recorded turns replayed (2 turns, mode live and recorded)" in (tmp_path / "run" / "report.html").read_text()
