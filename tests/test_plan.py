"""The run's plan (issue 39): built from the experiment before anything is sent (no server), it matches a
hand-written expectation — the order interleaved and blocked, the repeats, the warm-ups, the drift sentinels and
the metrics scrapes where the run puts them, engines one at a time as blocks, an adaptive run's looks — and it is
what a run then does: the ledger of a run against the simulator holds the plan's units and scrapes, in its order.
``leverbench run --dry-run`` prints it and starts, sends and writes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.cli import cli
from leverbench.config import load, with_adaptive
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import read_ledger
from leverbench.runner.engine_mode import ONE_AT_A_TIME
from leverbench.runner.plan import Block, Do, LoadStage, Look, Plan, Scrape, build_plan
from leverbench.runner.run import Runner
from leverbench.runner.schedule import Unit
from leverbench.workload.recorded.expand import with_recorded


def experiment(tmp: Path, *, order: str = "interleaved", engine: bool = False, urls: dict[str, str] | None = None,
               extra: str = "", load_stage: bool = True) -> Path:
    """Arms a and b (each on its engine, or at *urls*: nothing listens by default), one case, two repeats."""
    urls = urls or {"a": "http://127.0.0.1:9", "b": "http://127.0.0.1:9"}
    arms = "".join(f'''
[[arms]]
name = "{a}"
role = "{"baseline" if a == "a" else "treatment"}"
{'engine = { kind = "embedded" }' if engine else f'base_url = "{urls[a]}"{chr(10)}model = "sim"'}
conditions = {{ prefix_cache = {"false" if a == "a" else "true"} }}
''' for a in ("a", "b"))
    stage = '\n[[load]]\nname = "ramp"\nmode = "closed"\nconcurrency = 2\nrequests = 3\n' if load_stage else ""
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "plan"
repeats = 2
order = "{order}"
baseline = "a"
sentinel_tokens = 8
{extra}
[probes]
repeats = 1
output_tokens = [8, 16]
[[cases]]
name = "c"
max_tokens = 12
prompt = "say something"
{arms}{stage}''')
    return p


def words(steps) -> list:
    """Steps as short tuples: ("scrape", when, arms), (kind, arm, repeat, position or tokens), ("load", stage, arm),
    ("look", repeat), ("block", part, arm, repeat, engine, [its steps])."""
    out: list = []
    for s in steps:
        if isinstance(s, Scrape):
            out.append(("scrape", s.when, s.arms))
        elif isinstance(s, Do):
            u = s.unit
            out.append((u.kind, u.arm, u.repeat, u.probe_tokens if u.kind == "probe" else u.position))
            if s.then is not None:
                out.append(("scrape", s.then.when, s.then.arms))
        elif isinstance(s, LoadStage):
            out.append(("load", s.stage.name, s.arm))
        elif isinstance(s, Look):
            out.append(("look", s.repeat))
        else:
            assert isinstance(s, Block)
            out.append(("block", s.part, s.arm, s.repeat, s.engine, words(s.steps)))
    return out


def plan_of(path: Path, mode: str = "together", **kw) -> Plan:
    return build_plan(load(path), {"c": 10}, mode, **kw)


def test_an_interleaved_plan_is_the_hand_written_one(tmp_path):
    """Two arms, one case, two repeats: each round opens with a sentinel of each arm (the Williams rows: a b,
    then b a), its turns in the same rows; the probes; the closing sentinels; scrapes before and after the work and
    around the run of probes; then the load stage on each arm.  Each arm is warmed before, its cache state planned
    and checked."""
    plan = plan_of(experiment(tmp_path))
    every = None
    assert words(plan.steps) == [
        ("scrape", "before", every),
        ("sentinel", "a", 0, "start"), ("sentinel", "b", 0, "start"), ("turn", "a", 0, None), ("turn", "b", 0, None),
        ("sentinel", "b", 1, "start"), ("sentinel", "a", 1, "start"), ("turn", "b", 1, None), ("turn", "a", 1, None),
        ("scrape", "probes-before", every), ("probe", "a", 0, 8), ("probe", "b", 0, 8), ("probe", "a", 0, 16),
        ("probe", "b", 0, 16), ("scrape", "probes-after", every),
        ("sentinel", "a", 0, "end"), ("sentinel", "b", 0, "end"),
        ("scrape", "after", every),
        ("load", "ramp", "a"), ("load", "ramp", "b")]
    assert plan.header and plan.starts == plan.discovery == ()
    assert [(w.arm, w.max_calls, w.tokens) for w in plan.warm_ups] == [("a", 8, 8), ("b", 8, 8)]
    assert plan.cache_states is not None and plan.cache_states.check
    turns = [s for s in plan.steps if isinstance(s, Do) and s.unit.kind == "turn"]
    assert {(s.cache.state, s.cache.reset, s.cache.first_of_recording) for s in turns} == {("cold", "auto", None)}
    assert (plan.total, plan.done) == (14, 0)


def test_a_blocked_plan_is_the_hand_written_one(tmp_path):
    """Blocked: each arm's repeats together, every arm's sentinel before each of them (their repeat numbered on
    across the blocks), its probes in its block; the counters scraped around each arm's block; the closing
    sentinels last, in a block of their own (whose scrapes name no arm)."""
    plan = plan_of(experiment(tmp_path, order="blocked", load_stage=False))
    a, b, end = ("a",), ("b",), ("(end)",)
    assert words(plan.steps) == [
        ("scrape", "before", a),
        ("sentinel", "a", 0, "start"), ("sentinel", "b", 0, "start"), ("turn", "a", 0, None),
        ("sentinel", "b", 1, "start"), ("sentinel", "a", 1, "start"), ("turn", "a", 1, None),
        ("scrape", "probes-before", a), ("probe", "a", 0, 8), ("probe", "a", 0, 16), ("scrape", "probes-after", a),
        ("scrape", "after", a), ("scrape", "before", b),
        ("sentinel", "a", 2, "start"), ("sentinel", "b", 2, "start"), ("turn", "b", 0, None),
        ("sentinel", "b", 3, "start"), ("sentinel", "a", 3, "start"), ("turn", "b", 1, None),
        ("scrape", "probes-before", b), ("probe", "b", 0, 8), ("probe", "b", 0, 16), ("scrape", "probes-after", b),
        ("scrape", "after", b), ("scrape", "before", end),
        ("sentinel", "a", 0, "end"), ("sentinel", "b", 0, "end"),
        ("scrape", "after", end)]


def test_engines_one_at_a_time_plan_blocks(tmp_path):
    """One at a time: each engine's discovery start first; then a block per arm and round (the rows a b, then its
    mirror b a), each its engine started and warmed, its sentinel and turn between scrapes of its own counters;
    the closing blocks (the third row's order) with the probes, the closing sentinel and the arm's load stage.
    Nothing is warmed before the blocks, and each reset is checked in its engine's first block."""
    plan = plan_of(experiment(tmp_path, engine=True), ONE_AT_A_TIME)

    def round_block(arm: str, r: int) -> tuple:
        return ("block", "round", arm, r, True, [("scrape", "before", (arm,)), ("sentinel", arm, r, "start"),
                                                 ("turn", arm, r, None), ("scrape", "after", (arm,))])

    def closing(arm: str) -> tuple:
        mine = (arm,)
        return ("block", "closing", arm, 2, True, [
            ("scrape", "before", mine), ("scrape", "probes-before", mine), ("probe", arm, 0, 8),
            ("probe", arm, 0, 16), ("scrape", "probes-after", mine), ("sentinel", arm, 0, "end"),
            ("scrape", "after", mine), ("load", "ramp", arm)])
    assert words(plan.steps) == [round_block("a", 0), round_block("b", 0), round_block("b", 1), round_block("a", 1),
                                 closing("a"), closing("b")]
    assert plan.discovery == ("a", "b") and plan.starts == () and plan.warm_ups == ()
    assert plan.cache_states is not None and not plan.cache_states.check
    assert all(isinstance(s, Block) and s.warm_up is not None for s in plan.steps)


def test_a_resumed_plan_leaves_out_what_is_done(tmp_path):
    """A resumed run: the units with a successful record and the load stages finished are not planned again (a
    block left with nothing is dropped); no header, no discovery starts (the ledger has them)."""
    path = experiment(tmp_path, engine=True)
    done = {Unit("sentinel", "a", "(sentinel)", 0, 8, "start").key(), Unit("turn", "a", "c", 0).key()}
    plan = plan_of(path, ONE_AT_A_TIME, done=done, stages_done={("ramp", "b")}, resumed=True)
    assert [(s.part, s.arm, s.repeat) for s in plan.steps if isinstance(s, Block)] == [
        ("round", "b", 0), ("round", "b", 1), ("round", "a", 1), ("closing", "a", 2), ("closing", "b", 2)]
    last = plan.steps[-1]
    assert isinstance(last, Block) and not any(isinstance(s, LoadStage) for s in last.steps)
    assert not plan.header and plan.discovery == () and (plan.total, plan.done) == (14, 2)


def test_an_adaptive_plan_looks_after_the_initial_repeats(tmp_path):
    """Adaptive: a look after the initial repeats, before the probes and the closing sentinels; the round a look
    makes takes its place, the next look after it, and what came before is unchanged; a look that finds every
    comparison decided leaves the rest as planned."""
    exp = with_adaptive(load(experiment(tmp_path, load_stage=False)), True)
    plan = build_plan(exp, {"c": 10})
    k = next(i for i, s in enumerate(plan.steps) if isinstance(s, Look))
    assert words(plan.steps[k - 2:k + 3]) == [("turn", "b", 1, None), ("turn", "a", 1, None), ("look", 2),
                                               ("scrape", "probes-before", None), ("probe", "a", 0, 8)]
    round2 = [Unit("sentinel", "a", "(sentinel)", 2, 8, "start"), Unit("sentinel", "b", "(sentinel)", 2, 8, "start"),
              Unit("turn", "a", "c", 2), Unit("turn", "b", "c", 2)]
    after = plan.after_look(k, round2, Look(3))
    assert after.steps[:k] == plan.steps[:k] and after.total == plan.total + 4
    assert words(after.steps[k:k + 6]) == [("sentinel", "a", 2, "start"), ("sentinel", "b", 2, "start"),
                                            ("turn", "a", 2, None), ("turn", "b", 2, None), ("look", 3),
                                            ("scrape", "probes-before", None)]
    done = after.after_look(k + 4, [], None)
    assert words(done.steps) == words(after.steps[:k + 4] + after.steps[k + 5:])
    with pytest.raises(ValueError, match="no look"):
        plan.after_look(0, [], None)


def test_recorded_turns_are_brought_to_the_cache_state_before_their_recordings_first_turn_only(tmp_path):
    """A recording's turns (a case each) share what their recording shares: each arm is brought to the declared
    state before the recording's first turn of each round; its later turns meet what the earlier left; a case of
    its own is brought to it every time."""
    shutil.copy(Path(__file__).parent / "data" / "recorded" / "openai-batch.jsonl", tmp_path / "rec.jsonl")
    path = experiment(tmp_path, load_stage=False)
    path.write_text(path.read_text().replace('[[cases]]\nname = "c"\n',
                                             '[[cases]]\nname = "rec"\nfrom = "rec.jsonl"\nlimit = 3\n'
                                             '[[cases]]\nname = "c"\n'))
    exp = with_recorded(load(path))
    plan = build_plan(exp, {c.name: 10 for c in exp.spec.cases})
    got = [(s.unit.arm, s.unit.case, s.unit.repeat, s.cache.first_of_recording) for s in plan.steps
           if isinstance(s, Do) and s.cache is not None]
    firsts = {(arm, case, r): first for arm, case, r, first in got}
    assert [c.name for c in exp.spec.cases] == ["rec/t0001", "rec/t0002", "c"]
    assert firsts == {(arm, case, r): {"rec/t0001": True, "rec/t0002": False, "c": None}[case]
                      for arm in ("a", "b") for case in ("rec/t0001", "rec/t0002", "c") for r in (0, 1)}
    # each turn after its recording's first of the round on its arm
    for arm, case, r, first in got:
        if first is False:
            assert got.index((arm, "rec/t0001", r, True)) < got.index((arm, case, r, first))


def test_a_run_does_what_its_plan_says(tmp_path):
    """The oracle for the executor: a run against the simulator (its own server for each arm, counters on) writes
    the plan's units and scrapes, in the plan's order, and a stage_end after each load stage."""
    with SimulatorThread(SimConfig(decode_tps=4000, prefill_tps=200_000, output_tokens=20)) as a, \
            SimulatorThread(SimConfig(decode_tps=4000, prefill_tps=200_000, output_tokens=20, prefix_cache=True)) as b:
        path = experiment(tmp_path, urls={"a": a.base_url, "b": b.base_url}, order="blocked")
        plan = Runner(load(path), tmp_path / "dry").plan()
        Runner(load(path), tmp_path / "run").run()
    assert not (tmp_path / "dry").exists()
    def scraped(when: str, arms: tuple[str, ...] | None) -> list[tuple]:
        return [("metrics", arm, when) for arm in ("a", "b") if arms is None or arm in arms]
    want: list = []
    for s in plan.steps:
        if isinstance(s, Scrape):
            want += scraped(s.when, s.arms)
        elif isinstance(s, Do):
            want.append((s.unit.kind, s.unit.arm, s.unit.repeat))
            want += scraped(s.then.when, s.then.arms) if s.then is not None else []
        elif isinstance(s, LoadStage):
            want += scraped(f"load-start {s.stage.name}", s.arms) + scraped(f"load-end {s.stage.name}", s.arms)
    got = []
    for r in read_ledger(tmp_path / "run").records:
        if r["kind"] == "metrics":
            got.append(("metrics", r["arm"], r["when"]))
        elif r["kind"] in ("turn", "probe", "sentinel"):
            got.append((r["kind"], r["arm"], r["repeat"]))
    assert got == want
    loads = [(s.stage.name, s.arm) for s in plan.steps if isinstance(s, LoadStage)]
    ends = [(r["stage"], r["arm"]) for r in read_ledger(tmp_path / "run").of_kind("stage_end")]
    assert ends == loads == [("ramp", "a"), ("ramp", "b")]


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    path = experiment(tmp_path, engine=True)
    res = CliRunner().invoke(cli, ["run", str(path), "--out", str(tmp_path / "run"), "--dry-run"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "engines: together; order: interleaved; 14 units, 0 done before"
    assert lines[1:3] == ["start engine of a (part run)", "start engine of b (part run)"]
    assert "turn a / c #1 [cache cold by auto]" in lines and lines[-1] == "load stage ramp on b (closed; scrapes of " \
                                                                         "every arm)"
    assert not (tmp_path / "run").exists()
