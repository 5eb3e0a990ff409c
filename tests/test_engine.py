"""One end-to-end run on the real embedded engine (llama.cpp's server from the prebuilt xllamacpp + SmolLM2-135M),
tiny prompts.

Skipped when the engine is not installed, unless LEVERBENCH_REQUIRE_ENGINE is set (CI sets it).
"""

from __future__ import annotations

import json

import limits
import pytest
from click.testing import CliRunner
from engine_marks import ENGINE_MARKS

from leverbench.analysis.base.stats import median
from leverbench.cli import cli
from leverbench.errors import EngineError
from leverbench.ledger.reader import read_ledger

pytestmark = ENGINE_MARKS

EXP = '''
[experiment]
name = "engine-smoke"
repeats = 2
baseline = "current"
sentinel_tokens = 8

[[arms]]
name = "current"
role = "baseline"
engine = { kind = "embedded", args = [], threads = 2, ctx_size = 2048 }
request = { cache_prompt = false }
conditions = { prefix_cache = false, drafter = "none" }

[[arms]]
name = "cache"
role = "control"
engine = { kind = "embedded", args = [], threads = 2, ctx_size = 2048 }
conditions = { prefix_cache = true, drafter = "none" }

[[cases]]
name = "tiny"
system = "You are terse."
documents = ["doc.txt"]
prompt = "Repeat the first sentence."
max_tokens = 12
temperature = 0.0
[[cases.steps]]
prompt = "Again, shorter."
max_tokens = 6

[probes]
output_tokens = [4, 48]
repeats = 2
'''


def test_end_to_end_on_llama_server(tmp_path):
    (tmp_path / "doc.txt").write_text("The ledger is append-only. Every call is recorded with its conditions. " * 6)
    (tmp_path / "exp.toml").write_text(EXP)
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "exp.toml"), "--out", str(tmp_path / "run")],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    led = read_ledger(tmp_path / "run")
    calls = [r for r in led.records if r["kind"] == "call"]
    assert len(calls) == 2 * 2 * 2
    for c in calls:
        assert c["error"] is None, c["error"]
        assert c["prompt_tokens"] > 50 and 1 <= c["completion_tokens"] <= 12
        assert c["timings"]["prompt_n"] >= 1 and c["timings"]["predicted_ms"] > 0
        assert c["chunk_t"] and c["ttft_s"] <= c["latency_s"]
    # the baseline computes every prompt; the cache arm reuses the turn's prefix on its second call
    assert all(c["timings"]["cache_n"] == 0 for c in calls if c["arm"] == "current")
    second = [c for c in calls if c["arm"] == "cache" and c["step"] == 1]
    assert all(c["timings"]["cache_n"] > 0.5 * c["prompt_tokens"] for c in second)
    build = led.header["arms"]["cache"]["discovered"]["engine_build"]
    assert build["package"] == "xllamacpp" and build["build_number"] > 11000
    assert led.header["arms"]["cache"]["discovered"]["knobs"]["engine_version"] == f"b{build['build_number']}"
    probes = [r for r in led.records if r["kind"] == "probe"]
    assert sorted(p["completion_tokens"] for p in probes) == [4] * 4 + [48] * 4  # ignore_eos honoured
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert {c["n"] for c in s["cells"]} == {2}
    assert next(e for e in s["engaged"] if e["arm"] == "cache")["prefix_cache"] is True
    # the probes' decode rate (the client's clock: the stream from the first token to the last, two-point
    # formula) against llama.cpp's own timings of the same probe calls: its predicted_ms runs on the same span
    # (first token to last), for predicted_n tokens, and the same formula on it, (n2 − n1) / (p2 − p1), must
    # give the rate the client measured.  No call took the client less time than the server spent on it.
    assert {p["arm"] for p in s["probes"]} == {"current", "cache"}
    for r in probes:
        t = r["timings"]
        assert r["latency_s"] * 1000 >= t["prompt_ms"] + t["predicted_ms"] - 1
        assert r["ttft_s"] * 1000 >= t["prompt_ms"] - 1
        assert t["predicted_n"] == r["completion_tokens"]
    for p in s["probes"]:
        mine = [r for r in probes if r["arm"] == p["arm"]]
        n1, n2 = (median([r["timings"]["predicted_n"] for r in mine if r["probe_tokens"] == n]) for n in (4, 48))
        s1, s2 = (median([r["timings"]["predicted_ms"] for r in mine if r["probe_tokens"] == n]) for n in (4, 48))
        server_tps = (n2 - n1) / ((s2 - s1) / 1000)
        assert p["decode_tps"] == pytest.approx(server_tps, rel=0.10), (p, server_tps)
    verdict = next(v for v in s["verdicts"] if v["arm"] == "cache")
    assert "prefix_cache  cache vs current" in res.output and f"{verdict['ratio']:.2f}x" in res.output
    # issue 38: each turn cold.  The engines were started so that a slot erase forgets every prompt; the check
    # before the turns saw it take; every repeat's first call found what the first repeat's did (llama.cpp's
    # own timings.cache_n), and the comparison is not refused for revisits
    log = (tmp_path / "run" / "engine-cache.log").read_text()
    assert "--slot-save-path" in log and "--cache-ram 0" in log
    plans = {r["arm"]: r for r in led.records if r["kind"] == "cache_reset"}
    assert plans["cache"]["method"] == "reset" and plans["cache"]["check"] == "took", plans["cache"]
    first = [c["timings"]["cache_n"] for c in calls if c["arm"] == "cache" and c["step"] == 0]
    assert len(first) == 2 and first[1] == first[0], first
    assert not s["repeats"]["pairs"]
    assert (tmp_path / "run" / "report.md").read_text().startswith("# leverbench: engine-smoke")


def test_a_flag_the_prebuilt_engine_does_not_map_is_refused_before_it_starts(tmp_path):
    from leverbench.engines.embedded import EmbeddedEngine

    eng = EmbeddedEngine("bad", ["--no-such-flag-xyz"], tmp_path / "engine.log", threads=1)
    with pytest.raises(EngineError) as ei:
        eng.start()
    msg = str(ei.value)
    assert "arm 'bad'" in msg and "--no-such-flag-xyz" in msg and 'binary = "PATH"' in msg
    assert eng.proc is None  # nothing was started


def test_engine_that_cannot_start_is_reported_with_its_log(tmp_path):
    from leverbench.engines.embedded import EmbeddedEngine

    # a flag the launcher maps, with a value the server refuses: it exits while starting
    eng = EmbeddedEngine("bad", ["--model", str(tmp_path / "missing.gguf")], tmp_path / "engine.log", threads=1)
    with pytest.raises(EngineError) as ei:
        eng.start()
    msg = str(ei.value)
    assert "arm 'bad'" in msg and "exited with code" in msg and "missing.gguf" in msg


def test_engine_that_dies_is_noticed_with_its_log(tmp_path):
    import signal

    from leverbench.engines.embedded import EmbeddedEngine

    eng = EmbeddedEngine("victim", [], tmp_path / "engine.log", threads=1, ctx_size=512)
    eng.start()
    try:
        assert eng.alive() and eng.death_note() is None
        eng.proc.send_signal(signal.SIGKILL)
        eng.proc.wait(timeout=limits.KILLED_S)
        note = eng.death_note()
        assert note and "died" in note and "last lines of" in note and "llama" in note.lower()
        assert "killed by SIGKILL (exit code -9)" in note
    finally:
        eng.stop()


def test_a_signal_that_ended_an_engine_is_named_and_sigill_explained():
    import signal

    from leverbench.engines.process import exit_words

    assert exit_words(1) == "exited with code 1"
    assert exit_words(-signal.SIGTERM) == "was killed by SIGTERM (exit code -15)"
    # CI once ran a llama-server built with -march=native on an AVX-512 machine on a CPU without it: exit -4
    ill = exit_words(-signal.SIGILL)
    assert ill.startswith("was killed by SIGILL (exit code -4)") and "another machine's CPU" in ill
    assert exit_words(-200) == "was killed by signal 200 (exit code -200)"
