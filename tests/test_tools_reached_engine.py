"""The real embedded engine drops tool schemas its chat template cannot render (SmolLM2's: ``/props``
``chat_template_caps.supports_tools: false``), and the run says so (issue 42, item 1).  The oracle is the engine's own
usage: the prompt it counted equals the template's rendering without the schemas.
Skipped when the engine is not installed, unless LEVERBENCH_REQUIRE_ENGINE is set (CI sets it)."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner
from engine_marks import SLOW_ENGINE_MARKS

from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.ledger.reader import read_ledger

pytestmark = SLOW_ENGINE_MARKS

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city today",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string", "description": "the city name"}},
                                               "required": ["city"]}}}]
EXP = '''
[experiment]
name = "tools-on-llama"
repeats = 2
baseline = "current"
sentinel_tokens = 0

[[arms]]
name = "current"
role = "baseline"
engine = { kind = "embedded", args = [], threads = 2, ctx_size = 2048 }

[[cases]]
name = "weather"
system = "You are helpful."
prompt = "What is the weather in Paris?"
max_tokens = 4
temperature = 0.0
tools = "tools.json"
'''


def test_the_embedded_engine_drops_the_tools_and_the_run_says_so(tmp_path):
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    (tmp_path / "exp.toml").write_text(EXP)
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "exp.toml"), "--out", str(tmp_path / "run")],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    led = read_ledger(tmp_path / "run")
    calls = [r for r in led.records if r["kind"] == "call"]
    assert len(calls) == 2 and all(c["tools_sent"] == 1 and c["tools_reached"] == "no" for c in calls)
    check = next(c["tools_check"] for c in calls if c.get("tools_check"))
    assert "supports_tools: false" in check
    with_n, without_n = map(int, re.search(r"renders (\d+) prompt tokens with the schemas, (\d+) without",
                                           check).groups())
    assert with_n == without_n
    assert all(c["prompt_tokens"] == without_n for c in calls)  # the engine's own count: no schema in the prompt
    s = summarize(led)
    assert [(r["calls"], r["dropped"]) for r in s["tools"]] == [(2, 2)]
    assert "Tools DROPPED" in res.output
