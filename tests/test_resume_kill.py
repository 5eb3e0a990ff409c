"""A supervisor that restarts ``leverbench run --resume`` after every crash (issue 42, item 6).

``--resume`` is safe to pass always: on a directory with nothing to resume (none yet, no ``ledger.jsonl``, or
one a crash left without its header) it starts the run and says so; so ten SIGKILLs at any moment, each
followed by ``--resume``, and a last ``--resume`` end with every turn done exactly once, and every line an
earlier session wrote still in the ledger.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import limits
import pytest
from one_arm import one_arm_experiment
from test_resume import run_to_end, start_run

from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.errors import BadInput
from leverbench.ledger.reader import read_ledger
from leverbench.runner.resume import completed, nothing_to_resume

KILLS = 10
KILL_AT_S = (0.5, 4.5)  # after each start: before the ledger exists, in warm-ups and reset checks, in turns
SEED = 42  # the kill moments: the same every run of the test
REPEATS = 3
ARMS = ("nocache", "cache")
CASES = ("read", "short")
# a read turn (96 + 48 + 24 tokens) takes ~1.1 s, a short one (32) ~0.2 s: a kill often lands inside a turn
SLOW = dict(prefill_tps=50_000.0, decode_tps=150.0, output_tokens=200)


def experiment(tmp: Path, urls: dict[str, str]) -> Path:
    """Two arms, two cases (one of three calls), REPEATS repeats, no sentinels (one warm-up call per arm): on a
    quiet machine the header is written ~0.7 s after the start, the turns begin at ~2 s and end at ~12 s."""
    arms = "".join(f'''
[[arms]]
name = "{name}"
role = "{"baseline" if name == ARMS[0] else "treatment"}"
base_url = "{url}"
model = "sim"
conditions = {{ prefix_cache = {str(name != "nocache").lower()} }}
''' for name, url in urls.items())
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "kill-resume"
repeats = {REPEATS}
baseline = "{ARMS[0]}"
sentinel_tokens = 0
{arms}
[[cases]]
name = "read"
prompt = "summarise the design note"
max_tokens = 96
temperature = 0.0
[[cases.steps]]
prompt = "more detail please"
max_tokens = 48
[[cases.steps]]
prompt = "one line"
max_tokens = 24

[[cases]]
name = "short"
prompt = "hello there"
max_tokens = 32
temperature = 0.0
''')
    return p


def whole_lines(out: Path) -> bytes:
    """The ledger's whole lines (a run killed while writing its last one leaves it cut: not counted), or
    nothing where it has no header yet (a resume starts such a run afresh: nothing was measured)."""
    p = out / "ledger.jsonl"
    data = p.read_bytes() if p.exists() else b""
    return data[:data.rfind(b"\n") + 1]


@pytest.mark.slow
def test_sigkills_at_random_moments_each_resumed_complete_every_turn_once(tmp_path):
    """Every start a --resume (the first on no directory at all), each but the last SIGKILLed at a seeded
    moment: no session fails, none loses a whole line an earlier one wrote (the calls of the turns a kill
    cut stay), and the ledger ends with each (arm, case, repeat) turn done exactly once."""
    rng = random.Random(SEED)
    moments = [rng.uniform(*KILL_AT_S) for _ in range(KILLS)]
    with SimulatorThread(SimConfig(**SLOW, prefix_cache=False)) as a, SimulatorThread(SimConfig(**SLOW)) as b:
        exp = experiment(tmp_path, {"nocache": a.base_url, "cache": b.base_url})
        out = tmp_path / "run"  # not there yet: the supervisor's first start is a --resume too
        kept = b""
        for at in moments:
            proc = start_run(exp, out, "--resume")
            try:
                proc.wait(timeout=at)  # (a run that ended by itself before its kill: its exit code is checked)
            except subprocess.TimeoutExpired:
                proc.kill()
            _, err = proc.communicate(timeout=limits.KILLED_S)
            assert proc.returncode in (0, -9), f"a --resume started at {at:.2f} s before its kill failed: {err}"
            now = whole_lines(out)
            assert now.startswith(kept), "a resumed session lost lines an earlier one had written"
            kept = now
        run_to_end(exp, out, "--resume")
    assert (out / "ledger.jsonl").read_bytes().startswith(kept), "the last session lost earlier lines"
    led = read_ledger(out)  # a line cut by a kill is read with a note; any other damage raises
    assert led.header["kind"] == "run" and not [r for r in led.records if r["kind"] == "run"]
    turns = Counter((r["arm"], r["case"], r["repeat"]) for r in led.of_kind("turn") if r.get("error") is None)
    want = {(arm, case, k) for arm in ARMS for case in CASES for k in range(REPEATS)}
    assert set(turns) == want, "a turn is missing"
    assert [k for k, n in turns.items() if n > 1] == [], "a turn was done twice"
    assert (out / "summary.json").exists()


@pytest.mark.slow
def test_resume_on_a_fresh_directory_starts_the_run_and_says_so(tmp_path):
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=2000.0, output_tokens=4)) as sim:
        exp = one_arm_experiment(tmp_path, sim.base_url)
        out = tmp_path / "new"
        res = subprocess.run([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(out), "--resume"],
                             capture_output=True, text=True, timeout=limits.SMALL_RUN_S)
    assert res.returncode == 0, res.stderr
    said = [line for line in res.stderr.splitlines() if "nothing to resume" in line]
    assert said == [f"leverbench: nothing to resume in {out} (no ledger.jsonl): starting the run"], res.stderr
    led = read_ledger(out)
    assert [r["kind"] for r in led.records].count("resume") == 0  # a run of its own, not a resumed one
    assert sum(r["kind"] == "turn" for r in led.records) == 1


@pytest.mark.parametrize("resume", [True, False])
@pytest.mark.parametrize("left, why", [
    ("no directory", "no ledger.jsonl"),
    ("other files", "no ledger.jsonl"),
    ("empty ledger", "its ledger.jsonl has no run header: the run stopped before its first record"),
    ("cut header", "its ledger.jsonl has no run header: the run stopped before its first record"),
])
def test_nothing_to_resume_starts_afresh_and_keeps_every_other_file(tmp_path, left, why, resume):
    """What a run killed before its header leaves: the run starts (with --resume or without), a header-less
    ledger (nothing measured in it) removed so that the new header is its first line, no other file touched."""
    exp = load(one_arm_experiment(tmp_path, "http://127.0.0.1:9"))
    out = tmp_path / "run"
    if left != "no directory":
        out.mkdir()
        (out / "engine-sim.log").write_text("a log\n")
    if left in ("empty ledger", "cut header"):
        (out / "ledger.jsonl").write_text("" if left == "empty ledger" else '{"kind":"run","schema":"leverbe')
    assert nothing_to_resume(out) == why
    got = completed(out, resume, exp)
    assert (got.fresh or not resume) and not got.header and not got.done and got.run_id is None
    assert not (out / "ledger.jsonl").exists()
    if left != "no directory":
        assert (out / "engine-sim.log").read_text() == "a log\n"


@pytest.mark.slow
def test_a_ledger_with_its_header_is_resumed_and_refused_without_resume(tmp_path):
    """Only a ledger whose header was written whole holds a run: --resume continues it, a new run refuses."""
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=2000.0, output_tokens=4)) as sim:
        exp_path = one_arm_experiment(tmp_path, sim.base_url)
        out = tmp_path / "run"
        run_to_end(exp_path, out)
    assert nothing_to_resume(out) is None
    got = completed(out, True, load(exp_path))
    assert not got.fresh and got.header and got.run_id == read_ledger(out).header["run_id"]
    with pytest.raises(BadInput, match="pass --resume"):
        completed(out, False, load(exp_path))
