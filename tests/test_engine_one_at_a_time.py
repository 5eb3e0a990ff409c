"""Engines one at a time on the real embedded engine (llama.cpp's server from the prebuilt xllamacpp +
SmolLM2-135M), tiny prompts (issue 27): the process table never holds two engine processes during the run, every
block's engine start is in the ledger, and the verdict matches that of the same experiment with engines
together within their intervals.

Skipped when the engine is not installed, unless LEVERBENCH_REQUIRE_ENGINE is set (CI sets it).
"""

from __future__ import annotations

from engine_marks import SLOW_ENGINE_MARKS
from test_engine_blocks import Watch

from leverbench.analysis.summary import summarize
from leverbench.config import load
from leverbench.ledger.reader import read_ledger
from leverbench.runner.run import Runner
from leverbench.runner.schedule import block_order

WATCH_PERIOD_S = 0.05  # how often the process table is read (a sampling period, not a limit)

pytestmark = SLOW_ENGINE_MARKS  # 5 min on a busy 2-core machine

LAUNCHER = "leverbench.engines.llama_launcher"  # in each prebuilt engine's command line
EXP = '''
[experiment]
name = "one-at-a-time"
repeats = 2
baseline = "current"
sentinel_tokens = 8
engines = "{engines}"

[[arms]]
name = "current"
role = "baseline"
engine = {{ kind = "embedded", args = [], threads = 2, ctx_size = 1024 }}
request = {{ cache_prompt = false }}
conditions = {{ prefix_cache = false, drafter = "none" }}

[[arms]]
name = "cache"
role = "control"
engine = {{ kind = "embedded", args = [], threads = 2, ctx_size = 1024 }}
conditions = {{ prefix_cache = true, drafter = "none" }}

[[cases]]
name = "tiny"
system = "You are terse."
documents = ["doc.txt"]
prompt = "Repeat the first sentence."
max_tokens = 8
temperature = 0.0
[[cases.steps]]
prompt = "Again, shorter."
max_tokens = 4
'''


class LlamaWatch(Watch):
    def _loop(self):
        from sim_engine import engine_pids  # noqa: PLC0415

        while not self._stop.is_set():
            pids = engine_pids(LAUNCHER)
            self.most, self.seen = max(self.most, len(pids)), self.seen | set(pids)
            self._stop.wait(WATCH_PERIOD_S)


def _run(tmp, engines: str) -> dict:
    d = tmp / engines.replace(" ", "-")
    d.mkdir()
    (d / "doc.txt").write_text("The ledger is append-only. Every call is recorded with its conditions. " * 8)
    (d / "exp.toml").write_text(EXP.format(engines=engines))
    Runner(load(d / "exp.toml"), d / "run").run()
    return summarize(read_ledger(d / "run"))


def test_one_at_a_time_on_the_embedded_engine(tmp_path):
    with LlamaWatch() as watch:
        one = _run(tmp_path, "one at a time")
    starts = one["engines"]["starts"]
    assert watch.most == 1 and len(watch.seen) == len(starts) == 2 + 2 * 2 + 2
    assert [(s["part"], s["arm"]) for s in starts if s["part"] == "round"] == \
        [("round", a) for r in range(2) for a in block_order(["current", "cache"], r)]
    assert all(s["released"] and s["ready_s"] > 0 for s in starts) and one["engines"]["overlaps"] == 0
    together = _run(tmp_path, "together")
    [v1], [v2] = one["verdicts"], together["verdicts"]
    assert v1["lever"] == v2["lever"] == "prefix_cache"
    assert max(v1["low"], v2["low"]) <= min(v1["high"], v2["high"])
    assert together["engines"]["overlaps"] == 1 and one["engines"]["mode"] == "one at a time"
