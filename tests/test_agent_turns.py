"""Agent turns and reasoning models, against the simulator emitting reasoning and tool calls."""

from __future__ import annotations

import json
from pathlib import Path

from ledgers import warned

from leverbench.analysis.summary import summarize
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread, chat_prompt_tokens
from leverbench.ledger.reader import read_ledger
from leverbench.report.html import render_html
from leverbench.report.markdown import render_markdown
from leverbench.runner.run import Runner
from leverbench.schema.warning_kinds import WarningKind as W

FAST = dict(prefill_tps=100_000.0, decode_tps=1000.0)
TOOLS = [{"type": "function", "function": {"name": "search_docs", "description": "search",
                                            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


def exp(tmp: Path, url: str, case_extra: str = "", *, repeats: int = 2, exp_extra: str = "") -> Path:
    (tmp / "tools.json").write_text(json.dumps(TOOLS))
    (tmp / "script.json").write_text(json.dumps({"search_docs": {"result": "found: the cache helps prefill",
                                                                 "latency_s": 0.25}, "default": "nothing"}))
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "agent"
repeats = {repeats}
baseline = "a"
sentinel_tokens = 0
{exp_extra}
[[arms]]
name = "a"
role = "baseline"
base_url = "{url}"
model = "sim"

[[cases]]
name = "turn"
system = "You are an agent."
prompt = "find out what the cache does"
max_tokens = 64
{case_extra}
''')
    return p


def run(tmp: Path, cfg: SimConfig, case_extra: str = "", **kw) -> tuple[dict, list[dict]]:
    with SimulatorThread(cfg) as sim:
        Runner(load(exp(tmp, sim.base_url, case_extra, **kw)), tmp / "run").run()
    led = read_ledger(tmp / "run")
    return summarize(led), led.records


def test_tool_loop_runs_to_completion_with_steps_in_ledger(tmp_path):
    s, recs = run(tmp_path, SimConfig(**FAST, output_tokens=16, tool_call_rounds=2),
                  'tools = "tools.json"\ntool_script = "script.json"\n')
    calls = [r for r in recs if r["kind"] == "call" and r["repeat"] == 0]
    assert [c["step"] for c in calls] == [0, 1, 2]
    assert [bool(c["tool_calls"]) for c in calls] == [True, True, False]
    assert calls[0]["tool_calls"][0]["name"] == "search_docs" and calls[0]["finish_reason"] == "tool_calls"
    # each call was sent a different, growing input: the tool answers were appended
    assert len({c["input_sha256"] for c in calls}) == 3
    assert calls[0]["input_chars"] < calls[1]["input_chars"] < calls[2]["input_chars"]
    # the server counted the tool schemas in the input
    sys_user = chat_prompt_tokens([{"role": "system", "content": "You are an agent."},
                                   {"role": "user", "content": "find out what the cache does"}], TOOLS)
    assert calls[0]["prompt_tokens"] == len(sys_user)
    turn = next(r for r in recs if r["kind"] == "turn" and r["repeat"] == 0)
    assert turn["calls"] == 3 and turn["tool_s"] == 0.5 and not turn["step_limit"]
    assert abs(turn["turn_s"] - (turn["model_s"] + 0.5)) < 1e-9
    cell = s["cells"][0]
    assert cell["tool_s_median"] == 0.5 and cell["step_limited"] == 0


def test_step_limit_cuts_the_turn_and_is_flagged(tmp_path):
    s, recs = run(tmp_path, SimConfig(**FAST, output_tokens=16, tool_call_rounds=50),
                  'tools = "tools.json"\ntool_script = "script.json"\nmax_steps = 3\n')
    turns = [r for r in recs if r["kind"] == "turn"]
    assert all(t["step_limit"] and t["calls"] == 3 for t in turns)
    assert s["cells"][0]["step_limited"] == 2
    assert warned(s, W.STEP_LIMIT, s["cells"][0]["arm"], s["cells"][0]["case"])
    assert "cut by step limit" in render_markdown(s)


def test_reasoning_and_answer_are_split(tmp_path):
    s, recs = run(tmp_path, SimConfig(**FAST, output_tokens=40, reasoning_tokens=30))
    calls = [r for r in recs if r["kind"] == "call"]
    assert all(c["completion_tokens"] == 40 and c["reasoning_tokens"] == 30 for c in calls)
    assert all(c["reasoning_chars"] > 0 and c["content_chars"] > 0 for c in calls)
    assert all(c["t_first_answer_s"] > c["ttft_s"] for c in calls)  # 30 reasoning tokens come first
    r = s["reasoning"][0]
    assert (r["generated_tokens"], r["reasoning_tokens"], r["answer_tokens"]) == (80, 60, 20)
    assert r["source"] == "usage" and r["first_answer_median_s"] > r["ttft_median_s"]
    assert "Reasoning and answer" in render_markdown(s) and "Reasoning and answer" in render_html(s)
    # the guard's volume is generated tokens, reasoning included
    assert s["cells"][0]["output_tokens_median"] == 40


def test_all_reasoning_truncated_call_is_flagged(tmp_path):
    s, recs = run(tmp_path, SimConfig(**FAST, output_tokens=200, reasoning_tokens=200))
    calls = [r for r in recs if r["kind"] == "call"]
    assert all(c["finish_reason"] == "length" and c["content_chars"] == 0 and c["empty_answer"] for c in calls)
    cell = s["cells"][0]
    assert cell["empty_answers"] == 2
    assert warned(s, W.EMPTY_ANSWER, cell["arm"], cell["case"])
    assert "empty answers" in render_markdown(s)


def test_think_tags_split_reasoning_in_content(tmp_path):
    # with think_tags the client splits <think>…</think> out of the content; the sim writes plain words,
    # so nothing is reasoning there — the split logic itself is covered here on a hand-made stream
    from leverbench.runner.sse import StreamState, split_think
    st = StreamState(0.0, False, True)
    for i, t in enumerate(["<think>", "let me ", "see", "</think>", "Yes."]):
        st.feed({"choices": [{"delta": {"content": t}}]}, float(i))
    assert st.first_answer_s == 4.0 and st.first_token_s == 0.0
    assert split_think("".join(st.content)) == ("let me see", "Yes.")


def test_missing_usage_is_counted_with_the_servers_tokenizer(tmp_path):
    tools = 'tools = "tools.json"\n'
    s, recs = run(tmp_path, SimConfig(**FAST, output_tokens=12, fault_no_usage=1.0), tools)
    calls = [r for r in recs if r["kind"] == "call"]
    assert all(c["error"] is None and c["usage_missing"] for c in calls)
    assert all(c["token_source"] == "tokenize (chat template applied)" for c in calls)  # /apply-template
    assert all(c["completion_tokens"] == 12 for c in calls)
    assert s["cells"][0]["output_tokens_median"] == 12
    # the oracle: the same turns with usage sent: the server's own prompt counts (tool schemas included)
    (tmp_path / "usage").mkdir()
    _, with_usage = run(tmp_path / "usage", SimConfig(**FAST, output_tokens=12), tools)
    assert [c["prompt_tokens"] for c in calls] == [c["prompt_tokens"] for c in with_usage if c["kind"] == "call"]


def test_prompt_discipline_variant_is_never_a_multiplier(tmp_path):
    extra = '[[cases.variants]]\nname = "one sentence"\nappend = "Answer in one sentence."\nmax_tokens = 16\n'
    s, recs = run(tmp_path, SimConfig(**FAST, output_tokens=64), extra, repeats=2)
    assert s["cases"] == ["turn"]  # the variant is not an engine case
    assert all(m["scope"] in ("case:turn", "total") for m in s["multipliers"])
    d = s["prompt_discipline"][0]
    assert d["variant"] == "turn [one sentence]" and d["output_tokens"] == 64 and d["variant_output_tokens"] == 16
    assert d["saved_s"] > 0 and "never a multiplier" in d["kind"]
    md = render_markdown(s)
    assert "Prompt discipline" in md and "not from a faster engine" in md
    assert "Prompt discipline" in render_html(s)
