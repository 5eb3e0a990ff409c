"""docs/recording.md's worked example on the real engine (issue 42): ``leverbench serve`` (llama.cpp with SmolLM2),
``leverbench record`` in front of it, the example agent on the official ``openai`` SDK (``examples/agent_openai.py``,
this very file: streaming without ``stream_options.include_usage``, two tool schemas) through the recorder; the
recording read back by ``leverbench analyze``; the doc's ``replay.toml`` (cache off and on) run on it.

Oracles, none of them leverbench's reading of the recording: the agent's own account (the calls it made, its tool
rounds, and llama.cpp's ``timings`` as the SDK read them from each stream), and the engine's own counters on
``/metrics`` (``llamacpp:prompt_tokens_total``: prompt tokens computed; ``llamacpp:tokens_predicted_total``), read
before and after the agent ran.  Whether llama.cpp kept the tool schemas in the prompt (SmolLM2's template has no
tools) changes none of them: the counts are compared, whatever they are.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import limits
import pytest
from click.testing import CliRunner
from engine_marks import SLOW_ENGINE_MARKS
from test_record import ENV, start_recorder, stop_recorder

from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.ledger.reader import read_ledger

pytestmark = SLOW_ENGINE_MARKS  # 2.5 min on a busy 2-core machine
pytest.importorskip("openai")  # the test extra (pyproject.toml)

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "examples" / "agent_openai.py"
QUESTIONS = ("How many hammers are in stock?", "What is 12 plus 30?")


def doc_replay_toml() -> str:
    """The ``replay.toml`` docs/recording.md's worked example writes (its ``cat > replay.toml <<'EOF'`` block)."""
    text = (ROOT / "docs" / "recording.md").read_text(encoding="utf-8")
    found = re.search(r"^cat > replay\.toml <<'EOF'\n(.*?)^EOF$", text, re.M | re.S)
    assert found, "docs/recording.md's worked example has no replay.toml"
    return found.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def counters(base: str) -> dict[str, float]:
    text = urllib.request.urlopen(base + "/metrics", timeout=limits.HTTP_S).read().decode()  # noqa: S310 (loopback)
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^llamacpp:(prompt_tokens_total|tokens_predicted_total) (\S+)$", text, re.M)}


def wait_healthy(base: str, proc: subprocess.Popen) -> None:
    end = time.monotonic() + limits.ENGINE_START_S
    while time.monotonic() < end:
        assert proc.poll() is None, "leverbench serve exited"
        try:
            if urllib.request.urlopen(base + "/health", timeout=limits.HTTP_S).status == 200:  # noqa: S310
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError("leverbench serve did not answer /health")


def test_the_worked_example_records_reads_back_and_replays_from_llama_cpp_timings(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 (closed below)
    serve = subprocess.Popen([sys.executable, "-m", "leverbench", "serve", "--port", str(port), "--threads", "2"],
                             stdout=log, stderr=subprocess.STDOUT, env=ENV)
    try:
        wait_healthy(base, serve)
        before = counters(base)
        proc, url = start_recorder(base + "/v1", tmp_path / "rec")
        try:
            res = subprocess.run([sys.executable, str(AGENT), "--base-url", url, "--max-tokens", "8",
                                  *[a for q in QUESTIONS for a in ("--question", q)]],
                                 capture_output=True, text=True, timeout=limits.SMALL_RUN_S, env=ENV)
        finally:
            err = stop_recorder(proc)
        after = counters(base)
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=limits.STOP_S)
        log.close()
    assert res.returncode == 0, res.stderr
    ran = [json.loads(line) for line in res.stdout.splitlines()]
    made = [c for q in ran for c in q["calls"]]
    # what the engine said, as the SDK read it: timings on every call, no usage (the agent did not ask)
    assert made and all(c["usage"] is None and c["timings"]["prompt_n"] >= 0 for c in made)
    assert sum(1 for line in err.splitlines() if "streamed without usage" in line) == 1, err
    assert "llama.cpp's timings give its prompt tokens instead" in err

    out = CliRunner().invoke(cli, ["analyze", str(tmp_path / "rec"), "--format", "json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)["recording"]
    assert got["turns"] == len(QUESTIONS) and got["calls"] == len(made)
    assert [t["calls"] for t in got["per_turn"]] == [len(q["calls"]) for q in ran]
    assert got["tool_rounds"] == sum(q["tool_rounds"] for q in ran)
    assert got["counted_by"] == {"llama.cpp timings": len(made)}
    prompt = [c["timings"]["prompt_n"] + c["timings"]["cache_n"] for c in made]
    assert got["prompt_tokens"] == sum(prompt)
    assert got["cached_tokens"] == sum(c["timings"]["cache_n"] for c in made)
    assert got["output_tokens"] == sum(c["timings"]["predicted_n"] for c in made)
    # the engine's own counters agree: tokens computed (prompt − cached) and tokens generated, over the agent's run
    assert got["prompt_tokens"] - got["cached_tokens"] == after["prompt_tokens_total"] - before["prompt_tokens_total"]
    assert got["output_tokens"] == after["tokens_predicted_total"] - before["tokens_predicted_total"]
    assert got["shared_prefix"]["messages"] >= 1  # every question opens with the agent's system prompt

    # the doc's replay.toml, on the recording: one repeat, each arm's prompts checked against llama.cpp's timings
    (tmp_path / "replay.toml").write_text(doc_replay_toml())
    run = CliRunner().invoke(cli, ["run", str(tmp_path / "replay.toml"), "--out", str(tmp_path / "run"),
                                   "--repeats", "1"], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    led = read_ledger(tmp_path / "run")
    calls = [c for c in led.records if c["kind"] == "call"]
    by_arm = {arm: [c["recorded_prompt_tokens"] for c in calls if c["arm"] == arm] for arm in ("no-cache", "cache")}
    assert by_arm == {"no-cache": prompt, "cache": prompt}
    sec = summarize(led)["recorded"]
    assert [(a["arm"], a["calls"], a["compared"], a["no_recorded_usage"]) for a in sec["arms"]] == \
        [("no-cache", len(made), len(made), 0), ("cache", len(made), len(made), 0)]
    assert all(a["within"] == a["compared"] for a in sec["arms"]), sec["arms"]
    assert "prompts as recorded on every arm (within 1%)" in " ".join(run.output.split())
