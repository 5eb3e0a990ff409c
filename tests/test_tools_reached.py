"""Tool schemas an engine drops without a word (issue 42, item 1): the simulator, told that its chat template lacks
tools (``template_tools`` off), drops them from the prompt as llama.cpp does with SmolLM2's template and says so in
``/props``; the runner asks each arm once per tool set (``runner.tools_check``) and writes the answer on every call;
the summary, the first screen and the reports say which turns ran without their tools.

The oracle is the simulator's own count: the prompt it computed (its log, ``truth()``) is the messages' tokens alone
when it dropped the tools, and those plus the schemas' JSON words when it rendered them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import limits
from click.testing import CliRunner

from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.engines.simulator.tokens import tokenize
from leverbench.ledger.reader import read_ledger
from leverbench.report.first_screen import first_screen
from leverbench.report.markdown import render_markdown
from leverbench.runner.run import Runner
from leverbench.schema.reason_codes import TOOLS
from leverbench.schema.warning_kinds import WarningKind

TESTS = Path(__file__).parent
FAST = dict(prefill_tps=1e6, decode_tps=5000.0, output_tokens=8)
TOOLS_JSON = [{"type": "function", "function": {"name": "search_docs", "description": "search the documentation",
                                                "parameters": {"type": "object",
                                                               "properties": {"q": {"type": "string"}}}}}]
SCHEMA_TOKENS = len(tokenize(json.dumps(TOOLS_JSON)))
PROMPT = "find what the cache does"


def _experiment(tmp: Path, arms: dict[str, str], cases: str | None = None, repeats: int = 2) -> Path:
    (tmp / "tools.json").write_text(json.dumps(TOOLS_JSON))
    (tmp / "script.json").write_text(json.dumps({"default": "found it"}))
    arm_toml = "".join(f'''
[[arms]]
name = "{name}"
role = "{"baseline" if i == 0 else "treatment"}"
base_url = "{url}"
model = "sim"
conditions = {{ prefix_cache = {"false" if i == 0 else "true"} }}
''' for i, (name, url) in enumerate(arms.items()))
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "tools"
repeats = {repeats}
baseline = "{next(iter(arms))}"
sentinel_tokens = 0
{arm_toml}
''' + (cases or '''
[[cases]]
name = "agent"
system = "You are an agent with a search tool."
prompt = "find what the cache does"
max_tokens = 8
tools = "tools.json"
tool_script = "script.json"
'''))
    return p


def _run(tmp: Path, configs: dict[str, SimConfig], cases: str | None = None) -> tuple[dict, list[dict], dict]:
    sims = {name: SimulatorThread(cfg) for name, cfg in configs.items()}
    for s in sims.values():
        s.__enter__()
    try:
        Runner(load(_experiment(tmp, {n: s.base_url for n, s in sims.items()}, cases)), tmp / "run").run()
        truth = {n: s.truth() for n, s in sims.items()}
    finally:
        for s in sims.values():
            s.__exit__(None, None, None)
    led = read_ledger(tmp / "run")
    return summarize(led), [r for r in led.records if r["kind"] == "call"], truth


def test_an_engine_that_drops_the_tools_is_caught_on_every_page(tmp_path):
    s, calls, truth = _run(tmp_path, {"plain": SimConfig(**FAST, template_tools=False),
                                      "cached": SimConfig(**FAST, template_tools=False)})
    # the simulator's own log: the prompts it computed held no schema (the oracle for the ledger's flag)
    with_tools = [c for c in calls if c["tools_sent"] == 1]
    assert len(with_tools) == len(calls) == 4
    assert all(c["tools_reached"] == "no" for c in calls)
    by_hand = len(["system", *"You are an agent with a search tool.".split(), "user", *PROMPT.split()])
    assert all(c["prompt_tokens"] == by_hand for c in calls)
    assert sum(t["prompt_tokens"] == by_hand for ts in truth.values() for t in ts) == 4  # as the simulator computed
    # the check ran once per arm (its words on that arm's first call) and says how it knew
    checks = [c for c in calls if c.get("tools_check")]
    assert sorted(c["arm"] for c in checks) == ["cached", "plain"]
    assert all("supports_tools: false" in c["tools_check"] for c in checks)
    # summary.json
    assert [(r["arm"], r["case"], r["calls"], r["reached"], r["dropped"], r["not_known"]) for r in s["tools"]] == \
        [("plain", "agent", 2, 0, 2, 0), ("cached", "agent", 2, 0, 2, 0)]
    assert sum(w["kind"] == WarningKind.TOOLS_DROPPED for w in s["warning_items"]) == 2
    # the first screen, before any figure
    screen = "\n".join(first_screen(s).lines())
    assert "Tools DROPPED" in screen and "agent on plain (2 of 2 calls)" in screen
    assert screen.index("Tools DROPPED") < screen.index("prefix_cache")
    # report.md: its own table, and the token table no longer says the schemas were included
    md = render_markdown(s)
    assert "Did the tool schemas reach the model?" in md
    assert "system prompt and tool schemas included" not in md and "dropped for agent" in md
    # both arms dropped alike: they served the same (tool-less) prompts, so the pair is not refused for it
    assert all(TOOLS not in m["reason_codes"] for m in s["multipliers"])
    CliRunner().invoke(cli, ["report", str(tmp_path / "run"), "--format", "html"], catch_exceptions=False)
    html = (tmp_path / "run" / "report.html").read_text()
    assert "Did the tool schemas reach the model?" in html and "Tools DROPPED" in html


def test_tools_that_reach_the_model_are_not_flagged(tmp_path):
    s, calls, truth = _run(tmp_path, {"plain": SimConfig(**FAST), "cached": SimConfig(**FAST)})
    assert all(c["tools_reached"] == "yes" for c in calls)
    checks = [c["tools_check"] for c in calls if c.get("tools_check")]
    assert len(checks) == 2 and all(x.startswith("reached") for x in checks)
    # the oracle: the simulator's prompts held the schemas' words, so the count the check measured differs by them
    by_hand = len(["system", *"You are an agent with a search tool.".split(), "user", *PROMPT.split()])
    assert all(f"{by_hand + SCHEMA_TOKENS} prompt tokens with the schemas, {by_hand} without" in x for x in checks)
    assert all(c["prompt_tokens"] == by_hand + SCHEMA_TOKENS for c in calls)
    assert sum(t["prompt_tokens"] == by_hand + SCHEMA_TOKENS for ts in truth.values() for t in ts) == 4
    assert [(r["reached"], r["dropped"]) for r in s["tools"]] == [(2, 0), (2, 0)]
    assert not any(w["kind"] == WarningKind.TOOLS_DROPPED for w in s["warning_items"])
    assert "Tools DROPPED" not in "\n".join(first_screen(s).lines())
    assert "system prompt and tool schemas included" in render_markdown(s)


def test_a_pair_whose_tools_reached_one_arm_only_is_refused(tmp_path):
    s, calls, _ = _run(tmp_path, {"plain": SimConfig(**FAST), "cached": SimConfig(**FAST, template_tools=False)})
    assert {c["arm"]: c["tools_reached"] for c in calls} == {"plain": "yes", "cached": "no"}
    refused = [m for m in s["multipliers"] if TOOLS in m["reason_codes"]]
    assert refused and not any(m["citable"] for m in refused)
    assert all("reached the model on one arm and were dropped on the other" in (m["reason"] or "") for m in refused)
    assert "Tools DROPPED" in "\n".join(first_screen(s).lines())


def test_the_vllm_dialect_is_checked_by_its_tokenizer_and_a_strict_api_is_not_known(tmp_path):
    (tmp_path / "a").mkdir()
    s, calls, _ = _run(tmp_path / "a", {"plain": SimConfig(**FAST, dialect="vllm", template_tools=False),
                                        "cached": SimConfig(**FAST, dialect="vllm")})
    assert {c["arm"]: c["tools_reached"] for c in calls} == {"plain": "no", "cached": "yes"}
    assert all("without" in c["tools_check"] for c in calls if c.get("tools_check"))  # counted, no /props
    (tmp_path / "b").mkdir()
    s, calls, _ = _run(tmp_path / "b", {"plain": SimConfig(**FAST, dialect="openai"),
                                        "cached": SimConfig(**FAST, dialect="openai")})
    assert all(c["tools_reached"] == "not known" and c["tools_sent"] == 1 for c in calls)
    assert [(r["not_known"], r["dropped"]) for r in s["tools"]] == [(2, 0), (2, 0)]
    md = render_markdown(s)  # nothing checked: the token table does not claim the schemas were included
    assert "tool schemas included" not in md and "whether the tool schemas reached the model is not known" in md
    assert "Tools DROPPED" not in "\n".join(first_screen(s).lines())


def test_a_recorded_agent_replayed_on_an_arm_that_drops_its_tools_is_flagged(tmp_path):
    """A recording made through ``leverbench record`` (the agent of tests/agent_script.py, its tools honoured),
    replayed on an arm whose template drops them and on one that renders them."""
    with SimulatorThread(SimConfig(**FAST, tool_call_rounds=1)) as up:
        proc = subprocess.Popen([sys.executable, "-m", "leverbench", "record", "--upstream", up.base_url + "/v1",
                                 "--listen", "127.0.0.1:0", "--out", str(tmp_path / "rec")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            url = proc.stdout.readline().strip()
            assert url.startswith("http://"), proc.stderr.read()
            ran = subprocess.run([sys.executable, str(TESTS / "agent_script.py"), "--base-url", url, "--key", "k",
                                  "--task", "fix the build"], capture_output=True, text=True,
                                 timeout=limits.SMALL_COMMAND_S)
            assert ran.returncode == 0, ran.stderr
        finally:
            proc.terminate()
            proc.communicate(timeout=limits.STOP_S)
    cases = f'\n[[cases]]\nname = "agent"\nfrom = "{tmp_path / "rec"}"\n'
    s, calls, _ = _run(tmp_path, {"drops": SimConfig(**FAST, tool_call_rounds=1, template_tools=False),
                                  "renders": SimConfig(**FAST, tool_call_rounds=1)}, cases)
    assert calls and all(c["tools_sent"] >= 1 for c in calls)
    assert {c["arm"]: c["tools_reached"] for c in calls} == {"drops": "no", "renders": "yes"}
    assert [(r["arm"], r["dropped"] == r["calls"]) for r in s["tools"]] == [("drops", True), ("renders", False)]
    assert "Tools DROPPED" in "\n".join(first_screen(s).lines())
    assert any(TOOLS in m["reason_codes"] for m in s["multipliers"])
    assert "Did the tool schemas reach the model?" in render_markdown(s)


def test_a_check_cut_off_is_asked_again_by_the_calls_that_waited_for_it(monkeypatch):
    """The call that runs an arm's check is cancelled (its turn stopped): a call waiting for the same tool set is
    not cancelled with it, it asks again; a later call gets that answer without asking."""
    import asyncio  # noqa: PLC0415

    from leverbench.runner import tools_check  # noqa: PLC0415

    asked = []

    async def slow(session, ep, messages, tools):
        asked.append(1)
        await asyncio.sleep(0.2)
        return tools_check.ToolsCheck(True, "reached")

    monkeypatch.setattr(tools_check, "check_tools", slow)

    async def main():
        checks = tools_check.ToolsChecks()
        first = asyncio.create_task(checks.get(None, None, [], TOOLS_JSON))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(checks.get(None, None, [], TOOLS_JSON))
        await asyncio.sleep(0.01)
        first.cancel()
        got = await asyncio.gather(first, second, return_exceptions=True)
        return got, await checks.get(None, None, [], TOOLS_JSON)

    (first, second), third = asyncio.run(main())
    assert isinstance(first, asyncio.CancelledError)
    assert second[0].reached is True and second[1] is True  # it ran the check itself
    assert third[0].reached is True and third[1] is False and len(asked) == 2


def test_a_second_case_with_the_same_tools_shows_the_arms_check(tmp_path):
    """The check runs once per arm and tool set: a second case sending the same tools gets the arm's words."""
    two = '''
[[cases]]
name = "one"
prompt = "find what the cache does"
max_tokens = 8
tools = "tools.json"

[[cases]]
name = "two"
prompt = "find what the drafter does"
max_tokens = 8
tools = "tools.json"
'''
    s, calls, _ = _run(tmp_path, {"plain": SimConfig(**FAST), "cached": SimConfig(**FAST, template_tools=False)}, two)
    assert len([c for c in calls if c.get("tools_check")]) == 2  # one per arm
    assert len(s["tools"]) == 4 and all(r["how"] for r in s["tools"])
    assert all(r["how"].startswith("dropped" if r["arm"] == "cached" else "reached") for r in s["tools"])


def test_a_tools_reached_outside_its_values_is_refused_on_every_read_path(tmp_path, monkeypatch):
    import pytest  # noqa: PLC0415

    from leverbench.errors import LedgerError  # noqa: PLC0415
    from leverbench.ledger import reader  # noqa: PLC0415

    _, calls, _ = _run(tmp_path, {"plain": SimConfig(**FAST), "cached": SimConfig(**FAST)})
    path = tmp_path / "run" / "ledger.jsonl"
    lines = path.read_text().splitlines()
    i = next(k for k, line in enumerate(lines) if '"tools_reached":"yes"' in line)
    lines[i] = lines[i].replace('"tools_reached":"yes"', '"tools_reached":"maybe"')
    path.write_text("\n".join(lines) + "\n")
    for size in (10**12, 0):  # line by line, then as columns
        monkeypatch.setattr(reader, "COLUMNAR_MIN_BYTES", size)
        with pytest.raises(LedgerError, match=f"line {i + 1}.*tools_reached"):
            read_ledger(tmp_path / "run")


def test_a_knob_an_endpoint_reports_out_of_range_is_kept_aside_not_fatal(tmp_path, monkeypatch):
    """A context length of 0 reported by an endpoint: recorded apart (``knobs_out_of_range``), the run goes on."""
    from leverbench.runner import discover  # noqa: PLC0415

    found = discover.knobs
    monkeypatch.setattr(discover, "knobs", lambda raw: {**found(raw), "context_length": 0})
    _, calls, _ = _run(tmp_path, {"plain": SimConfig(**FAST), "cached": SimConfig(**FAST)})
    assert len(calls) == 4
    arms = read_ledger(tmp_path / "run").header["arms"]
    assert all(a["discovered"]["knobs_out_of_range"] == {"context_length": 0} for a in arms.values())
    assert all("context_length" not in a["discovered"]["knobs"] for a in arms.values())
