"""Request logs read as cases (issue 26): OpenAI's chat-request JSONL and OpenTelemetry GenAI spans imported into
turns, the turns a case keeps, a replay whose upstream counted tokens differently, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread, chat_prompt_tokens
from leverbench.errors import ConfigError
from leverbench.ledger.reader import read_ledger
from leverbench.report.recorded_tables import replay_line
from leverbench.runner.run import Runner
from leverbench.schema.warning_kinds import WarningKind
from leverbench.workload.recorded.expand import with_recorded
from leverbench.workload.recorded.grouping import TurnGrouper
from leverbench.workload.recorded.registry import detect_format, load_requests

DATA = Path(__file__).parent / "data" / "recorded"
BATCH = DATA / "openai-batch.jsonl"
OTEL = DATA / "otel-genai.jsonl"
RATIO = 1.25  # the batch file's usage counts 25 % more prompt tokens than the simulator's tokenizer does


def _experiment(tmp: Path, url: str, case: str, arm: str = "") -> Path:
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "imported"
repeats = 1
baseline = "a"
sentinel_tokens = 0

[[arms]]
name = "a"
role = "baseline"
base_url = "{url}"
model = "sim"
{arm}
[[cases]]
{case}
''')
    return p


def test_an_openai_batch_file_imports_as_turns_with_its_responses():
    assert detect_format(BATCH) == "openai-jsonl"
    imp = load_requests(BATCH)
    assert [t.id for t in imp.turns] == ["t0001", "t0002"]
    agent, other = imp.turns
    # three requests, each extending the one before (a tool round, then a user's next question): one turn
    assert len(agent.calls) == 3 and len(other.calls) == 1
    first, second, third = agent.calls
    assert first.request["max_tokens"] == 128 and first.tools[0]["function"]["name"] == "search_logs"
    # each response found its request by custom_id, in the batch output lines further down the file
    assert [c.name for c in first.tool_calls] == ["search_logs"] and first.finish_reason == "tool_calls"
    assert second.content == "The linker failed on a missing symbol." and third.content.startswith("Commit 9f3e2a1")
    assert first.model == "gpt-4o-mini-2024-07-18"
    tools = first.tools
    assert [c.prompt_tokens for c in agent.calls] == [round(len(chat_prompt_tokens(c.messages, tools)) * RATIO)
                                                      for c in agent.calls]
    assert other.calls[0].prompt_tokens is None  # a request without a response: no usage
    assert imp.skipped == {"url '/v1/embeddings' is not chat completions": 1}


def test_a_replay_says_the_arm_counts_tokens_differently_than_the_recording(tmp_path):
    with SimulatorThread(SimConfig(prefill_tps=1e6, decode_tps=2000, output_tokens=8)) as sim:
        exp = _experiment(tmp_path, sim.base_url + "/v1", f'name = "ci"\nfrom = "{BATCH}"')
        Runner(load(exp), tmp_path / "run").run()
        truth = sim.truth()
    led = read_ledger(tmp_path / "run")
    calls = [r for r in led.records if r["kind"] == "call"]
    assert [(c["case"], c["step"]) for c in calls] == [("ci/t0001", 0), ("ci/t0001", 1), ("ci/t0001", 2),
                                                      ("ci/t0002", 0)]
    # the requests went out as recorded: their sampling as the recording has it (nothing added: the fourth gave no
    # temperature), the arm's model ...
    assert [c["request"] for c in calls] == [{"model": "sim", "max_tokens": 128, "temperature": 0}] * 2 + [
        {"model": "sim", "max_tokens": 64, "temperature": 0}, {"model": "sim", "max_tokens": 32}]
    assert [c["tools_sent"] for c in calls] == [1, 1, 1, 0]
    # ... and the simulator counted what it counts for the recorded messages and tools
    imp = load_requests(BATCH)
    sent = [c for t in imp.turns for c in t.calls]
    assert [t["prompt_tokens"] for t in truth[-4:]] == [len(chat_prompt_tokens(c.messages, c.tools)) for c in sent]
    rec = summarize(led)["recorded"]
    arm = rec["arms"][0]
    # three calls have the recording's usage; each got a prompt 1/1.25 of it: every one differs alike
    assert (arm["compared"], arm["within"], arm["differing_calls"]) == (3, 0, 3)
    assert arm["max_deviation"] == pytest.approx(1 / RATIO - 1, abs=0.01)
    assert "different tokenizer" in arm["reason"] and "a serves sim" in arm["reason"]
    assert {d["reason"] for d in arm["differing"]} == {arm["reason"]}
    kinds = [w["kind"] for w in summarize(led)["warning_items"]]
    assert WarningKind.REPLAY_PROMPT_DIFFERS.value in kinds


def test_the_arms_own_request_fields_override_the_recordings(tmp_path):
    with SimulatorThread(SimConfig(prefill_tps=1e6, decode_tps=2000, output_tokens=8)) as sim:
        exp = _experiment(tmp_path, sim.base_url + "/v1", f'name = "ci"\nfrom = "{BATCH}"\nselect = ["t0001"]',
                          "request = { temperature = 0.5, cache_prompt = false }")
        Runner(load(exp), tmp_path / "run").run()
    calls = [r for r in read_ledger(tmp_path / "run").records if r["kind"] == "call"]
    assert [c["request"] for c in calls] == [{"model": "sim", "temperature": 0.5, "cache_prompt": False,
                                              "max_tokens": n} for n in (128, 128, 64)]


def test_otel_genai_spans_import_as_one_conversation():
    assert detect_format(OTEL) == "otel-genai"
    imp = load_requests(OTEL)
    assert imp.skipped == {"not a chat span": 1}  # the execute_tool span
    (turn,) = imp.turns
    assert turn.id == "s-conv-7" and len(turn.calls) == 2  # its conversation id, in the order the spans started
    first, second = turn.calls
    assert first.messages == [{"role": "system", "content": "You are a helpful travel agent."},
                              {"role": "user", "content": "Weather in Paris?"}]
    assert first.request["max_tokens"] == 100 and first.request["temperature"] == 0.2
    assert first.tools[0]["function"]["name"] == "get_weather"
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert second.messages[2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert second.messages[3] == {"role": "tool", "tool_call_id": "call_w", "content": "rainy, 57F"}
    assert (second.prompt_tokens, second.content) == (48, "It is rainy, 57F.")


def test_select_sample_and_limit_pick_turns(tmp_path):
    def cases(extra: str) -> list[str]:
        exp = _experiment(tmp_path, "http://127.0.0.1:9/v1", f'name = "ci"\nfrom = "{BATCH}"\n{extra}')
        return [c.name for c in with_recorded(load(exp)).spec.cases]

    assert cases("") == ["ci/t0001", "ci/t0002"]
    assert cases('select = ["t0002"]') == ["ci/t0002"]
    assert cases('select = ["t*"]\nlimit = 1') == ["ci/t0001"]
    drawn = cases("sample = 1\nseed = 3")
    assert len(drawn) == 1 and drawn == cases("sample = 1\nseed = 3")  # seeded: the same draw every time
    loaded = with_recorded(load(_experiment(tmp_path, "http://127.0.0.1:9/v1", f'name = "ci"\nfrom = "{BATCH}"')))
    case = loaded.spec.cases[0]
    # the first request's sampling and tools go with the case (the equal-work analysis reads its temperature)
    assert (case.temperature, case.max_tokens, case.replay) == (0.0, 128, "recorded")
    assert loaded.tools["ci/t0001"][0]["function"]["name"] == "search_logs"
    assert loaded.spec.cases[1].temperature == 1.0  # no temperature in the request: the API's default


@pytest.mark.parametrize(("case", "key", "says"), [
    ('name = "x"\nfrom = "missing.jsonl"', "cases[0].from", "no such file"),
    (f'name = "x"\nfrom = "{BATCH}"\nselect = ["nope*"]', "cases[0].from", "matches none of the 2 recorded turns"),
    (f'name = "x"\nfrom = "{BATCH}"\nformat = "har"', "cases[0].format", "unknown request-log format"),
    (f'name = "x"\nfrom = "{BATCH}"\nprompt = "hi"', "cases[0]", "drop prompt"),
    ('name = "x"\nprompt = "hi"\nreplay = "live"', "cases[0]", "replay applies to recorded turns"),
    (f'name = "x"\nfrom = "{BATCH}"\nreplay = "both"', "cases[0].replay", "'recorded' or 'live'"),
])
def test_bad_recorded_cases_are_one_line_naming_the_key(tmp_path, case, key, says):
    exp = _experiment(tmp_path, "http://127.0.0.1:9/v1", case)
    res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")])
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"leverbench: error: {exp}: {key}: ") and says in line


def test_a_request_log_without_a_replayable_line_names_its_reasons(tmp_path):
    bad = tmp_path / "log.jsonl"
    bad.write_text('{"messages": []}\nnot json\n{"messages": [{"content": "no role"}]}\n')
    exp = _experiment(tmp_path, "http://127.0.0.1:9/v1", f'name = "x"\nfrom = "{bad}"')
    with pytest.raises(ConfigError) as err:
        with_recorded(load(exp))
    assert "no request that can be replayed" in str(err.value) and "first line 1" in str(err.value)
    assert "not JSON: 1 line(s), first line 2" in str(err.value)


def test_turns_by_session_or_by_the_conversation_they_extend():
    g = TurnGrouper()
    sys_ = {"role": "system", "content": "rules"}
    a1 = [sys_, {"role": "user", "content": "task a"}]
    b1 = [sys_, {"role": "user", "content": "task b"}]  # the same system prompt, another conversation
    a2 = [*a1, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    assert g.assign(a1) == ("t0001", 0)
    assert g.assign(b1) == ("t0002", 0)
    assert g.assign(list(reversed(a2[::-1]))) == ("t0001", 1)  # extends a1 (key order inside messages aside)
    assert g.assign([{"content": "rules", "role": "system"}, *a2[1:], {"role": "user", "content": "x"}]) == ("t0001", 2)
    assert g.assign(a1) == ("t0003", 0)  # the same request again extends nothing: a new turn
    assert g.assign([{"role": "user", "content": "anything"}], session="sess\n1") == ("s-sess1", 0)
    assert g.assign([{"role": "user", "content": "else"}], session="sess\n1") == ("s-sess1", 1)


def test_a_replay_without_recorded_usage_says_its_prompts_were_not_checked(tmp_path):
    """A log without usage (an agent that streamed without include_usage against vLLM; a log without responses)
    leaves nothing to compare: the first screen says so, never 'as recorded' over 0 of 0, and a single arm's
    requests were compared with no other arm's: never 'identical'."""
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"model": "gpt", "messages": [{"role": "user", "content": f"task {i}"}]}) + "\n"
                           for i in range(2)))
    with SimulatorThread(SimConfig(prefill_tps=1e6, decode_tps=2000, output_tokens=8)) as sim:
        exp = _experiment(tmp_path, sim.base_url + "/v1", f'name = "nu"\nfrom = "{log}"')
        Runner(load(exp), tmp_path / "run").run()
    s = summarize(read_ledger(tmp_path / "run"))
    arm = s["recorded"]["arms"][0]
    assert (arm["calls"], arm["compared"], arm["no_recorded_usage"]) == (2, 0, 2)
    line = replay_line(s)
    assert "prompts not checked: 2 calls have no recorded prompt length" in line, line
    assert "as recorded" not in line and "identical" not in line and "requests not compared across arms" in line
    assert WarningKind.REPLAY_UNCHECKED.value in [w["kind"] for w in s["warning_items"]]
    full = " ".join(CliRunner().invoke(cli, ["report", str(tmp_path / "run"), "--no-write", "--full"],
                                       catch_exceptions=False).output.split())
    assert "Not checked: 2 calls have no recorded prompt length" in full


def test_concurrent_turns_that_open_alike_each_keep_their_own_calls():
    """Two agents send the same opening request, then their tool rounds interleave: each extension goes to the open
    turn whose latest request it extends, the oldest first (a FIFO per request), never all to the latest turn."""
    g = TurnGrouper()
    s, u = {"role": "system", "content": "S"}, {"role": "user", "content": "fix it"}
    a1 = {"role": "assistant", "content": None,
          "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    r_a, r_b = ({"role": "tool", "tool_call_id": "c1", "content": x} for x in "AB")
    assert [g.assign([s, u]), g.assign([s, u])] == [("t0001", 0), ("t0002", 0)]
    assert g.assign([s, u, a1, r_a]) == ("t0001", 1)
    assert g.assign([s, u, a1, r_b]) == ("t0002", 1)
    done = {"role": "assistant", "content": "done"}
    assert g.assign([s, u, a1, r_b, done, {"role": "user", "content": "more"}]) == ("t0002", 2)
    assert g.assign([s, u, a1, r_a, done, {"role": "user", "content": "more"}]) == ("t0001", 2)
    # the same extension twice (a deterministic model, the same tool result): one each, oldest first
    g = TurnGrouper()
    assert [g.assign([s, u])[0] for _ in range(3)] == ["t0001", "t0002", "t0003"]
    assert [g.assign([s, u, a1, r_a]) for _ in range(3)] == [("t0001", 1), ("t0002", 1), ("t0003", 1)]
    # a request sent again after it failed (a retry) stays in its turn
    g = TurnGrouper()
    assert g.assign([s, u]) == ("t0001", 0)
    assert g.assign([s, u, a1, r_a], failed=True) == ("t0001", 1)
    assert g.assign([s, u, a1, r_a]) == ("t0001", 2)
    assert g.assign([s, u, a1, r_a, done, {"role": "user", "content": "more"}]) == ("t0001", 3)
    # an agent that went back to an earlier request of its turn (a branch) still continues it
    assert g.assign([s, u, {"role": "assistant", "content": "other"}, {"role": "user", "content": "again"}]) == \
        ("t0001", 4)


def test_long_session_ids_with_a_common_start_stay_apart():
    g = TurnGrouper()
    common = "checkout-service/" + "x" * 60
    a, b = g.assign([], session=common + "-alice")[0], g.assign([], session=common + "-bob")[0]
    assert a != b and len(a) == len(b) == 2 + 64 and a.startswith("s-checkout-service/xxx")
    assert g.assign([], session=common + "-alice") == (a, 1)
    assert g.assign([], session="short") == ("s-short", 0)  # a short one as it is


def test_lines_left_out_on_import_are_told_in_the_run_and_its_reports(tmp_path):
    """3 of 5 lines cannot be replayed (no messages, messages not a list, an embeddings request) and the last line
    is cut: the run's header keeps what was left out, and the summary's warnings, the first screen and the full
    report say it."""
    log = tmp_path / "batch.jsonl"
    good = {"model": "gpt", "messages": [{"role": "user", "content": "hello"}]}
    lines = [{"custom_id": "r1", "url": "/v1/chat/completions", "body": good},
             {"custom_id": "r2", "body": {"model": "g"}}, {"custom_id": "r3", "body": {"model": "g", "messages": "hi"}},
             {"custom_id": "r4", "url": "/v1/embeddings", "body": {"model": "e", "input": "x"}}]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines) + json.dumps(good)[:30])
    with SimulatorThread(SimConfig(prefill_tps=1e6, decode_tps=2000, output_tokens=8)) as sim:
        exp = _experiment(tmp_path, sim.base_url + "/v1", f'name = "b"\nfrom = "{log}"')
        Runner(load(exp), tmp_path / "run").run()
    led = read_ledger(tmp_path / "run")
    (case,) = led.header["config"]["cases"]
    assert "left out: " in case["recorded_skipped"] and "(first: line 5)" in case["recorded_skipped"]
    s = summarize(led)
    (w,) = [w for w in s["warning_items"] if w["kind"] == WarningKind.REPLAY_LINES_SKIPPED.value]
    assert "4 line(s) left out" in w["text"] and str(log) in w["text"] and "not JSON (first: line 5)" in w["text"]
    assert s["recorded"]["left_out"] == [w["text"]]
    shown = CliRunner().invoke(cli, ["report", str(tmp_path / "run"), "--no-write"], catch_exceptions=False).output
    assert "replay_lines_skipped (1)" in shown
    full = " ".join(CliRunner().invoke(cli, ["report", str(tmp_path / "run"), "--no-write", "--full"],
                                       catch_exceptions=False).output.split())
    assert "url '/v1/embeddings' is not chat completions (first: line 4)" in full


def test_the_ledger_keeps_no_recorded_content_without_store_text(tmp_path):
    """A recorded request's fields other than sampling (a predicted output, user, metadata, a JSON schema) and a live
    replay's departures (the tool calls' arguments) hold content: without store_text the ledger keeps their hashes,
    and the sampling fields (and the arm's own request fields) as they are."""
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    first = {"model": "gpt", "messages": [{"role": "user", "content": "read it"}], "tools": tools, "temperature": 0,
             "max_tokens": 16, "seed": 7, "stop": ["END"], "user": "alice@example.com",
             "prediction": {"type": "content", "content": "PREDICTED-SECRET"}, "metadata": {"ticket": "SECRET-TICKET"},
             "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"description":
                                                                                              "SCHEMA-SECRET"}}}}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "ARG-SECRET"}'}}]}
    second = {**first, "messages": [*first["messages"], call, {"role": "tool", "tool_call_id": "c1", "content": "x"}]}
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    with SimulatorThread(SimConfig(prefill_tps=1e6, decode_tps=2000, output_tokens=8, tool_call_rounds=1)) as sim:
        exp = _experiment(tmp_path, sim.base_url + "/v1", f'name = "p"\nfrom = "{log}"\nreplay = "live"',
                          "request = { cache_prompt = false, chat_template_kwargs = { mode = 'fast' } }")
        Runner(load(exp), tmp_path / "run").run()
    text = (tmp_path / "run" / "ledger.jsonl").read_text()
    for secret in ("PREDICTED-SECRET", "alice@example", "SECRET-TICKET", "SCHEMA-SECRET", "ARG-SECRET"):
        assert secret not in text, secret
    calls = [r for r in read_ledger(tmp_path / "run").records if r["kind"] == "call"]
    req = calls[0]["request"]
    assert {k: req[k] for k in ("model", "temperature", "max_tokens", "seed", "stop", "cache_prompt")} == \
        {"model": "sim", "temperature": 0, "max_tokens": 16, "seed": 7, "stop": ["END"], "cache_prompt": False}
    assert req["chat_template_kwargs"] == {"mode": "fast"}  # the arm's own: the experiment file's, not the agent's
    assert all(req[k].startswith("sha256:") for k in ("user", "prediction", "metadata", "response_format"))
    departed = [c["departed"] for c in calls if c.get("departed")]
    assert departed and all("read_file(args sha256:" in d for d in departed), departed
