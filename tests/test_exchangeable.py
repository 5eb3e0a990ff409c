"""Issue 38 end to end against the simulator: every turn is brought to the declared cache state before it, so that
the repeats are exchangeable samples of one experiment, and the prefix cache's figure is that of a new turn.

The experiment: a two-call turn over a 3,000-token document (the second call extends the first), prefix cache off
against on, 3 repeats, the file saying nothing about caches.  The truth is what the simulator logged it did
(``/sim/truth``): a turn's engine seconds (its calls' prefill and decode), and each call's cached tokens.  The
truth for a new turn is the first repeat's turn (nothing before it sent the document; a fresh simulator), and a
turn brought to the cold state again meets exactly the cache its first repeat met (the second call reuses the
first call's prefix, nothing else)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.engines.simulator import SimConfig, SimulatorThread, synthetic_text
from leverbench.ledger.reader import read_ledger

PREFILL_TPS = 20_000.0
DECODE_TPS = 400.0
DOC_TOKENS = 3000
SYSTEM_TOKENS = 400  # "shared": the system prompt every turn of the case shares
TOLERANCE = 0.10


def _experiment(tmp, urls: dict[str, str], extra: str = "", system: bool = False):
    (tmp / "doc.txt").write_text(synthetic_text(DOC_TOKENS, "exchangeable"))
    sys_line = f'system = "{synthetic_text(SYSTEM_TOKENS, "system")}"\n' if system else ""
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "exchangeable"
repeats = 3
baseline = "nocache"
sentinel_tokens = 0
{extra}
[[arms]]
name = "nocache"
role = "baseline"
base_url = "{urls['nocache']}"
model = "sim"
conditions = {{ prefix_cache = false }}

[[arms]]
name = "cache"
role = "treatment"
base_url = "{urls['cache']}"
model = "sim"
conditions = {{ prefix_cache = true }}

[[cases]]
name = "read"
{sys_line}documents = ["doc.txt"]
prompt = "summarise"
max_tokens = 32
[[cases.steps]]
prompt = "one line"
max_tokens = 16
''')
    return p


def _run(tmp, extra: str = "", system: bool = False, exit_code: int = 0, **sim):
    common = {"prefill_tps": PREFILL_TPS, "decode_tps": DECODE_TPS, "output_tokens": 200, **sim}
    with SimulatorThread(SimConfig(prefix_cache=False, **common)) as a, \
            SimulatorThread(SimConfig(prefix_cache=True, **common)) as b:
        exp = _experiment(tmp, {"nocache": a.base_url, "cache": b.base_url}, extra, system)
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp / "run")], catch_exceptions=False)
        assert res.exit_code == exit_code, res.output
        truth = {"nocache": a.truth(), "cache": b.truth()}
    if exit_code:
        return res, None, truth
    return res, read_ledger(tmp / "run"), truth


def _turns(truth: list[dict]) -> list[list[dict]]:
    """The simulator's records of the turns' calls, a turn's two calls together, in the order they came."""
    calls = [t for t in truth if t["prompt_tokens"] > DOC_TOKENS / 2]
    assert len(calls) == 6, [t["prompt_tokens"] for t in truth]
    return [calls[i:i + 2] for i in range(0, 6, 2)]


def engine_s(turn: list[dict]) -> float:
    return sum(t["prefill_s"] + t["decode_s"] for t in turn)


def _figures(s: dict) -> dict[str, tuple[float, bool]]:
    """The prefix cache's figures as the summary gives them: the total multiplier and the verdict's ratio."""
    total = next(m for m in s["multipliers"] if m["arm"] == "cache" and m["scope"] == "total")
    verdict = next(v for v in s["verdicts"] if v["arm"] == "cache")
    return {"total": (total["value"], total["citable"]), "verdict": (verdict["ratio"], not verdict["refused"])}


def _plans(led) -> dict[str, dict]:
    return {r["arm"]: r for r in led.of_kind("cache_reset")}


@pytest.mark.parametrize("dialect", ["llama.cpp", "vllm", "sglang", "openai"])
def test_each_turn_starts_cold_and_the_figure_is_a_new_turns(tmp_path, dialect):
    """llama.cpp, vLLM and SGLang through their own reset endpoints (each checked to take before the turns), a
    strict OpenAI endpoint (no reset) by a salt on both arms."""
    _, led, truth = _run(tmp_path, dialect=dialect, prompt_tokens_details=True)
    plans = _plans(led)
    want_method = "salt" if dialect == "openai" else "reset"
    assert {p["method"] for p in plans.values()} == {want_method}, plans
    if dialect != "openai":
        assert plans["cache"]["check"] == "took" and plans["cache"]["cached_after"] == 0
        assert plans["nocache"]["check"] == "unverified"  # it caches nothing of the check's prompt
    turns = {a: _turns(t) for a, t in truth.items()}
    for later in turns["cache"][1:]:  # exchangeable: each repeat met the cache its first repeat met
        assert [t["cached_tokens"] for t in later] == [t["cached_tokens"] for t in turns["cache"][0]]
    first = turns["cache"][0]
    assert first[0]["cached_tokens"] < 32 and first[1]["cached_tokens"] >= DOC_TOKENS  # the 2nd reuses the 1st
    new_turn = engine_s(turns["nocache"][0]) / engine_s(turns["cache"][0])
    assert 1.3 < new_turn < 2.5  # (sanity: the document's prefill saved once a turn)
    s = summarize(led)
    figures = _figures(s)
    for name, (value, citable) in figures.items():
        assert citable, (name, s["multipliers"])
        assert value == pytest.approx(new_turn, rel=TOLERANCE), (name, value, new_turn)
    assert not s["repeats"]["pairs"] and s["repeats"]["state"] == "cold"
    turn_recs = list(led.of_kind("turn"))
    assert all(t["cache"]["method"] == want_method and t["cache"]["state"] == "cold" for t in turn_recs)
    if dialect == "openai":  # the same salt on both arms for a turn, another for each repeat
        salts = {(t["arm"], t["repeat"]): t["cache"]["salt"] for t in turn_recs}
        assert all(salts["cache", r] == salts["nocache", r] for r in range(3)) and len(set(salts.values())) == 3


def test_keep_measures_the_revisits_on_purpose(tmp_path):
    """cache_between_turns = "keep": the later repeats meet the cache their first repeat filled, and the figure
    is that of a resent turn (its own truth: the turns the simulator served), cited, labelled."""
    _, led, truth = _run(tmp_path, 'cache_between_turns = "keep"')
    turns = {a: _turns(t) for a, t in truth.items()}
    assert turns["cache"][1][0]["cached_tokens"] >= DOC_TOKENS  # a revisit
    resent = statistics.median(map(engine_s, turns["nocache"])) / statistics.median(map(engine_s, turns["cache"]))
    s = summarize(led)
    value, citable = _figures(s)["total"]
    assert citable and value == pytest.approx(resent, rel=TOLERANCE)
    assert value > 2.5  # the echo: far above a new turn's
    assert s["repeats"]["state"] == "keep" and s["repeats"]["pairs"][0]["refused"] is None
    assert any("on purpose" in w for w in s["warnings"])


def test_shared_warms_the_system_prompt_before_each_cold_turn(tmp_path):
    """cache_between_turns = "shared": cold, then the case's system prompt warmed, so every repeat's first call
    finds the system prompt (and nothing more) cached; the figure is that turn's."""
    _, led, truth = _run(tmp_path, 'cache_between_turns = "shared"', system=True)
    turns = {a: _turns(t) for a, t in truth.items()}
    firsts = [turn[0]["cached_tokens"] for turn in turns["cache"]]
    assert len(set(firsts)) == 1 and SYSTEM_TOKENS - 32 <= firsts[0] <= SYSTEM_TOKENS + 16, firsts
    assert all(turn[0]["cached_tokens"] == 0 for turn in turns["nocache"])
    warms = [r for r in led.of_kind("warmup") if r.get("position") == "shared"]
    assert len(warms) == 6  # one before each turn, on each arm
    shared_turn = engine_s(turns["nocache"][0]) / engine_s(turns["cache"][0])
    for name, (value, citable) in _figures(summarize(led)).items():
        assert citable and value == pytest.approx(shared_turn, rel=TOLERANCE), name


def test_a_reset_acknowledged_but_not_performed_is_caught_by_the_check_and_salted(tmp_path):
    """The cache arm's server answers its reset and keeps its cache (cache_reset = "fake": llama.cpp's RAM
    prompt cache after a slot erase): the check before the turns sees it not take, and every arm is salted."""
    _, led, truth = _run(tmp_path, cache_reset="fake")
    plans = _plans(led)
    assert plans["cache"]["check"] == "did not take" and plans["cache"]["cached_after"] > 0
    assert {p["method"] for p in plans.values()} == {"salt"} and "did not take" in plans["cache"]["why"]
    turns = {a: _turns(t) for a, t in truth.items()}
    new_turn = engine_s(turns["nocache"][0]) / engine_s(turns["cache"][0])
    for name, (value, citable) in _figures(summarize(led)).items():
        assert citable and value == pytest.approx(new_turn, rel=TOLERANCE), name


def test_a_reset_that_does_not_take_unseen_by_the_check_is_refused_with_the_counts(tmp_path, monkeypatch):
    """The same server, its check not made (as with engines one at a time, where none is up before the turns):
    the turns' own cached counts show the later repeats revisiting, and the comparison is refused, headed by its
    first-visit figure."""
    import leverbench.runner.cache_state as cache_state

    async def unseen(*_a, **_k):
        return "unverified", None, None, None
    monkeypatch.setattr(cache_state, "check_reset", unseen)
    _, led, truth = _run(tmp_path, cache_reset="fake")
    assert {p["method"] for p in _plans(led).values()} == {"reset"}
    s = summarize(led)
    total = next(m for m in s["multipliers"] if m["arm"] == "cache" and m["scope"] == "total")
    assert not total["citable"] and "revisits" in total["reason_codes"]
    assert "not brought to the declared cold state" in total["reason"]
    assert "prompt tokens their first visits computed" in total["reason"]  # the counts
    turns = {a: _turns(t) for a, t in truth.items()}
    [pair] = s["repeats"]["pairs"]
    assert pair["first_visit"] == pytest.approx(engine_s(turns["nocache"][0]) / engine_s(turns["cache"][0]),
                                                rel=TOLERANCE)
    verdict = next(v for v in s["verdicts"] if v["arm"] == "cache")
    assert verdict["refused"]


def test_endpoint_named_and_not_taking_is_a_clear_error(tmp_path):
    res, _, _ = _run(tmp_path, 'cache_reset = "endpoint"', exit_code=2, cache_reset="fake")
    assert "experiment.cache_reset" in res.output and "did not take" in res.output and '"salt"' in res.output


def test_a_drafter_whose_memory_outlives_the_reset_is_refused(tmp_path):
    """A drafter that learns each answer across requests (the simulator's draft_memory, as llama.cpp's
    ngram-mod): its server's cache resets, its drafter does not forget, so its later repeats accept more drafts
    than their first visit: the comparison that holds it is refused."""
    common = {"prefill_tps": PREFILL_TPS, "decode_tps": DECODE_TPS, "output_tokens": 200}
    with SimulatorThread(SimConfig(**common)) as a, \
            SimulatorThread(SimConfig(draft_k=4, draft_acceptance=0.25, draft_memory=0.5, **common)) as b:
        exp = _experiment(tmp_path, {"nocache": a.base_url, "cache": b.base_url})
        text = exp.read_text().replace("prefix_cache = true", "prefix_cache = true, drafter = true")
        text = text.replace("prefix_cache = false", "prefix_cache = true, drafter = false")
        exp.write_text(text)
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")], catch_exceptions=False)
        assert res.exit_code == 0, res.output
    s = summarize(read_ledger(tmp_path / "run"))
    row = next(r for r in s["repeats"]["arms"] if r["arm"] == "cache")
    assert row["draft_later"] - row["draft_first"] >= 0.10
    total = next(m for m in s["multipliers"] if m["arm"] == "cache" and m["scope"] == "total")
    assert not total["citable"] and "drafter accepted" in total["reason"]


@pytest.mark.slow
def test_restart_starts_each_turn_on_a_fresh_engine_whose_drafter_forgot(tmp_path, monkeypatch):
    """cache_reset = "restart" on engines the tool starts (the simulator as the engine, sim_engine.py): each turn
    on a fresh process, its drafter's memory gone with it (as llama.cpp's ngram-mod's goes only with its
    process), so the repeats' acceptance is their first visit's and nothing is refused; each restart is followed
    by one short call (warmup, position restart)."""
    from sim_engine import patch_engines

    fast = ["--prefill-tps", str(PREFILL_TPS), "--decode-tps", str(DECODE_TPS), "--output-tokens", "200"]
    patch_engines(monkeypatch, {"nocache": [*fast, "--no-prefix-cache"],
                                "cache": [*fast, "--draft-k", "4", "--draft-acceptance", "0.25",
                                          "--draft-memory", "0.5"]})
    exp = _experiment(tmp_path, {"nocache": "", "cache": ""}, 'cache_reset = "restart"')
    exp.write_text(exp.read_text().replace('base_url = ""\nmodel = "sim"', 'engine = { kind = "embedded" }'))
    res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    led = read_ledger(tmp_path / "run")
    assert {r["method"] for r in led.of_kind("cache_reset")} == {"restart"}
    restarts = [r for r in led.of_kind("warmup") if r.get("position") == "restart"]
    assert len(restarts) == 6 and all(r["error"] is None for r in restarts)
    s = summarize(led)
    row = next(r for r in s["repeats"]["arms"] if r["arm"] == "cache")
    assert row["draft_first"] == pytest.approx(row["draft_later"], abs=0.02) and not s["repeats"]["pairs"]
    total = next(m for m in s["multipliers"] if m["arm"] == "cache" and m["scope"] == "total")
    assert total["citable"], total["reason"]


def test_an_arm_that_reports_no_cached_tokens_is_salted_not_trusted(tmp_path):
    """SGLang without --enable-cache-report says nothing of what it cached, so its reset cannot be checked, nor
    its turns afterwards: "auto" salts every arm instead of trusting a reset it cannot see (here one that does
    not take), and the figure is still a new turn's."""
    _, led, truth = _run(tmp_path, dialect="sglang", cache_reset="fake")
    plans = _plans(led)
    assert plans["cache"]["check"] == "not reported" and {p["method"] for p in plans.values()} == {"salt"}
    turns = {a: _turns(t) for a, t in truth.items()}
    assert turns["cache"][1][0]["cached_tokens"] < 32  # the salt made each repeat's prompt new
    new_turn = engine_s(turns["nocache"][0]) / engine_s(turns["cache"][0])
    for name, (value, citable) in _figures(summarize(led)).items():
        assert citable and value == pytest.approx(new_turn, rel=TOLERANCE), name


@pytest.mark.slow
def test_a_reset_that_fails_before_a_turn_fails_the_turn_and_resume_runs_it_again(tmp_path, monkeypatch):
    """The check passed, then the endpoint fails every reset before a turn (503): each such turn is recorded
    (a cache_reset record with its error, the turn's own cache.error) and fails (class cache_state): it is no
    sample of the declared experiment, so it does not count (the comparison has no turn of that arm to cite) and
    --resume runs it again, once the endpoint resets again."""
    import leverbench.runner.cache_state as cache_state

    async def took(*_a, **_k):
        return "took", 100, 0, 200

    async def fails(*_a, **_k):
        return "POST /flush_cache answered 503: busy"
    monkeypatch.setattr(cache_state, "check_reset", took)
    monkeypatch.setattr(cache_state, "reset_endpoint", fails)
    common = {"prefill_tps": PREFILL_TPS, "decode_tps": DECODE_TPS, "output_tokens": 200, "dialect": "sglang",
              "prompt_tokens_details": True}
    with SimulatorThread(SimConfig(prefix_cache=False, **common)) as a, \
            SimulatorThread(SimConfig(prefix_cache=True, **common)) as b:
        exp = _experiment(tmp_path, {"nocache": a.base_url, "cache": b.base_url})
        run = ["run", str(exp), "--out", str(tmp_path / "run")]
        assert CliRunner().invoke(cli, run, catch_exceptions=False).exit_code == 0
        led = read_ledger(tmp_path / "run")
        failures = [r for r in led.of_kind("cache_reset") if r.get("error")]
        assert len(failures) == 6 and all("503" in r["error"] for r in failures)
        turns = list(led.of_kind("turn"))
        assert all("503" in t["cache"]["error"] and t["error"]["class"] == "cache_state" for t in turns)
        assert all(c["error"] is None for c in led.of_kind("call"))  # the calls themselves ran
        s = summarize(led)
        total = next(m for m in s["multipliers"] if m["arm"] == "cache" and m["scope"] == "total")
        assert not total["citable"] and "no successful turns" in total["reason"]
        assert next(r for r in s["repeats"]["arms"] if r["arm"] == "cache")["failed_turns"] == 3
        monkeypatch.undo()  # the endpoint resets again: --resume runs every failed turn again, and they count
        res = CliRunner().invoke(cli, [*run, "--resume"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        truth = {"nocache": a.truth(), "cache": b.truth()}
    s = summarize(read_ledger(tmp_path / "run"))
    total = next(m for m in s["multipliers"] if m["arm"] == "cache" and m["scope"] == "total")
    assert total["citable"], total["reason"]
    later = [t for t in truth["cache"] if t["prompt_tokens"] > DOC_TOKENS / 2][-6:]  # the re-run turns' calls
    assert [t["cached_tokens"] for t in later[0::2]] == [0, 0, 0]  # each met the cold state


@pytest.mark.slow
def test_shared_with_a_restart_warms_through_the_new_engines_pool(tmp_path, monkeypatch):
    """"shared" and a restart before each turn: the shared prefix's call goes to the restarted engine (it was
    sent through the closed pool of the old one); each restart is an engine_stop and an engine_start record
    (part "restart"), and the counters are scraped on either side of it."""
    from sim_engine import patch_engines

    fast = ["--prefill-tps", str(PREFILL_TPS), "--decode-tps", str(DECODE_TPS), "--output-tokens", "200"]
    patch_engines(monkeypatch, {"nocache": [*fast, "--no-prefix-cache"], "cache": fast})
    exp = _experiment(tmp_path, {"nocache": "", "cache": ""},
                      'cache_between_turns = "shared"\ncache_reset = "restart"', system=True)
    exp.write_text(exp.read_text().replace('base_url = ""\nmodel = "sim"', 'engine = { kind = "embedded" }'))
    res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    led = read_ledger(tmp_path / "run")
    warms = [r for r in led.of_kind("warmup") if r.get("position") == "shared"]
    assert len(warms) == 6 and all(r["error"] is None for r in warms)
    starts = [r for r in led.of_kind("engine_start") if r["part"] == "restart"]
    assert len(starts) == 6 and len(list(led.of_kind("engine_stop"))) == 6 + 2
    s = summarize(led)
    firsts = [c["cached_tokens"] for c in led.of_kind("call") if c["arm"] == "cache" and c["step"] == 0]
    assert len(set(firsts)) == 1 and firsts[0] > SYSTEM_TOKENS - 32  # the system prompt warmed, every repeat
    assert not s["repeats"]["pairs"]
    own = {r["arm"]: r for r in s["server_metrics"]}
    assert own["cache"]["windows"] >= 3  # a window per engine's life, none across a restart


@pytest.mark.slow
def test_recorded_turns_on_an_endpoint_without_a_reset_are_refused_with_advice(tmp_path):
    """A strict OpenAI endpoint has no reset, and a recorded turn is never salted (its prompts are the
    recording's): its repeats revisit, and the refusal says why and what to do."""
    import shutil

    shutil.copy(Path(__file__).parent / "data" / "recorded" / "openai-batch.jsonl", tmp_path / "rec.jsonl")
    common = {"prefill_tps": PREFILL_TPS, "decode_tps": DECODE_TPS, "output_tokens": 200, "dialect": "openai"}
    with SimulatorThread(SimConfig(prefix_cache=False, **common)) as a, \
            SimulatorThread(SimConfig(prefix_cache=True, **common)) as b:
        exp = _experiment(tmp_path, {"nocache": a.base_url, "cache": b.base_url})
        text = exp.read_text()
        exp.write_text(text[:text.index("[[cases]]")] + '[[cases]]\nname = "rec"\nfrom = "rec.jsonl"\nlimit = 2\n')
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")], catch_exceptions=False)
        assert res.exit_code == 0, res.output
    led = read_ledger(tmp_path / "run")
    assert {r["recorded_method"] for r in led.of_kind("cache_reset")} == {"none"}
    s = summarize(led)
    [pair] = s["repeats"]["pairs"]  # the recording's first turn revisited (416 of its 431 tokens cached): refused
    assert pair["refused"] and next(r for r in s["repeats"]["arms"] if r["arm"] == "cache")["revisit_share"] > 0.5
    [w] = [w for w in s["warnings"] if "first visits" in w]
    assert "recorded turns are never salted" in w
    assert not next(m for m in s["multipliers"] if m["arm"] == "cache" and m["scope"] == "total")["citable"]


@pytest.mark.slow
def test_a_run_from_before_the_cache_state_resumes_only_as_it_ran(tmp_path):
    """A ledger whose header declares no cache state (leverbench before ledger v5) ran its turns on whatever the
    earlier ones left: resuming it under the default "cold" would mix two experiments, so it is refused, with
    what to do; with "keep" declared it resumes."""
    import json

    common = {"prefill_tps": PREFILL_TPS, "decode_tps": DECODE_TPS, "output_tokens": 200}
    with SimulatorThread(SimConfig(prefix_cache=False, **common)) as a, \
            SimulatorThread(SimConfig(prefix_cache=True, **common)) as b:
        exp = _experiment(tmp_path, {"nocache": a.base_url, "cache": b.base_url}, 'cache_between_turns = "keep"')
        run = ["run", str(exp), "--out", str(tmp_path / "run")]
        assert CliRunner().invoke(cli, run).exit_code == 0
        path = tmp_path / "run" / "ledger.jsonl"
        lines = path.read_text().splitlines()
        head = json.loads(lines[0])
        del head["config"]["experiment"]["cache_between_turns"], head["config"]["experiment"]["cache_reset"]
        cut = next(i for i, ln in enumerate(lines) if json.loads(ln)["kind"] == "turn")
        path.write_text("\n".join([json.dumps(head), *lines[1:cut + 1]]) + "\n")  # one turn done, as v4 wrote it
        keep = exp.read_text()
        exp.write_text(keep.replace('cache_between_turns = "keep"\n', ""))
        res = CliRunner().invoke(cli, [*run, "--resume"])
        assert res.exit_code == 2 and 'cache_between_turns = "keep"' in res.output, res.output
        exp.write_text(keep)
        res = CliRunner().invoke(cli, [*run, "--resume"])
        assert res.exit_code == 0, res.output
    assert len(list(read_ledger(tmp_path / "run").of_kind("turn"))) == 6


def test_a_llamacpp_server_without_its_slot_endpoint_is_salted_and_says_why(tmp_path):
    """A llama-server started without --slot-save-path answers 501 to an erase: every arm is salted, and each
    arm's plan quotes the server's answer."""
    _, led, truth = _run(tmp_path, cache_reset="off")
    plans = _plans(led)
    assert {p["method"] for p in plans.values()} == {"salt"}
    assert all("answered 501" in p["why"] and "--slot-save-path" in p["why"] for p in plans.values())
    turns = {a: _turns(t) for a, t in truth.items()}
    new_turn = engine_s(turns["nocache"][0]) / engine_s(turns["cache"][0])
    for name, (value, citable) in _figures(summarize(led)).items():
        assert citable and value == pytest.approx(new_turn, rel=TOLERANCE), name


def test_two_spellings_of_one_server_are_one_server_and_get_a_salt_each():
    from leverbench.config import Arm
    from leverbench.runner.cache_state import TurnStates
    from leverbench.runner.endpoint import ArmEndpoint

    def ep(name, url):
        return ArmEndpoint(Arm(name=name, base_url=url, model="m"), url, "m", {})
    eps = {"a": ep("a", "http://127.0.0.1:9000"), "b": ep("b", "http://localhost:9000/v1/"),
           "c": ep("c", "http://127.0.0.1:9001/v1")}
    states = TurnStates(None, eps, "run")  # type: ignore[arg-type]
    assert states.salt("a", "x", 0) != states.salt("b", "x", 0)  # one server: a salt per arm
    assert len({states.salt("c", "x", 0), states.salt("a", "x", 0), states.salt("b", "x", 0)}) == 3


@pytest.mark.slow
def test_recorded_turns_on_an_arm_without_counts_are_still_reset(tmp_path):
    """SGLang without --enable-cache-report: its reset cannot be checked, so every arm is salted; its recorded
    turns, never salted, are still reset through its endpoint before the recording's first turn of each round
    (the simulator's own counts show each round's first call cold)."""
    import shutil

    shutil.copy(Path(__file__).parent / "data" / "recorded" / "openai-batch.jsonl", tmp_path / "rec.jsonl")
    common = {"prefill_tps": PREFILL_TPS, "decode_tps": DECODE_TPS, "output_tokens": 200, "dialect": "sglang"}
    with SimulatorThread(SimConfig(prefix_cache=False, **common)) as a, \
            SimulatorThread(SimConfig(prefix_cache=True, **common)) as b:
        exp = _experiment(tmp_path, {"nocache": a.base_url, "cache": b.base_url})
        text = exp.read_text()
        exp.write_text(text[:text.index("[[cases]]")] + '[[cases]]\nname = "rec"\nfrom = "rec.jsonl"\nlimit = 1\n')
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        truth = b.truth()
    led = read_ledger(tmp_path / "run")
    plans = _plans(led)
    assert plans["cache"]["method"] == "salt" and plans["cache"]["recorded_method"] == "reset"
    assert {t["cache"]["method"] for t in led.of_kind("turn")} == {"reset"}
    big = [t for t in truth if t["prompt_tokens"] > 400]
    firsts = [t["cached_tokens"] for t in big if t["prompt_tokens"] == big[0]["prompt_tokens"]]
    assert len(firsts) == 3 and max(firsts) < 32, firsts


@pytest.mark.slow
def test_engines_one_at_a_time_check_each_reset_before_its_first_turn(tmp_path, monkeypatch):
    """No engine is up when the run plans (each starts for its block): each started engine's reset is checked
    in its first block, before its first turn, and the arm's plan is recorded again with what the check found."""
    from sim_engine import patch_engines

    fast = ["--prefill-tps", str(PREFILL_TPS), "--decode-tps", str(DECODE_TPS), "--output-tokens", "200"]
    patch_engines(monkeypatch, {"nocache": [*fast, "--no-prefix-cache"], "cache": fast})
    exp = _experiment(tmp_path, {"nocache": "", "cache": ""}, 'engines = "one at a time"')
    exp.write_text(exp.read_text().replace('base_url = ""\nmodel = "sim"', 'engine = { kind = "embedded" }'))
    res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    led = read_ledger(tmp_path / "run")
    plans = [r for r in led.of_kind("cache_reset") if r["arm"] == "cache"]
    assert [p["check"] for p in plans] == [None, "took"] and plans[-1]["cached_after"] == 0
    s = summarize(led)
    assert next(r for r in s["repeats"]["arms"] if r["arm"] == "cache")["check"] == "took"
    assert not s["repeats"]["pairs"]
