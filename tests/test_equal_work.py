"""Issue 22, section 2: equal work — outputs compared call by call, and the equal-work multiplier where the
volumes differ (the arm's turns corrected by its own rate model to the reference's work); and defect 1 of
section 3 (a verdict that "pays" from a case the cell guard refused)."""

from __future__ import annotations

import math
import statistics

import pytest
from click.testing import CliRunner
from ledgers import call, header, ledger, turn

from leverbench.analysis.experiment.equal_work import first_difference
from leverbench.analysis.summary import summarize
from leverbench.cli import cli
from leverbench.engines.simulator import SimConfig, SimulatorThread, synthetic_text
from leverbench.ledger.reader import read_ledger

DECODE_TPS = 50.0
PER_STEP = 3  # the drafter's tokens per decode step: 1 + round(4 × 0.5)


@pytest.fixture(scope="module")
def longer(tmp_path_factory):
    """A drafter arm that writes 12 % longer answers (112 tokens against 100) at a known decode rate."""
    tmp = tmp_path_factory.mktemp("equal-work")
    (tmp / "doc.txt").write_text(synthetic_text(300, "ew"))
    common = dict(prefill_tps=20000.0, decode_tps=DECODE_TPS, cache_block=16)
    with SimulatorThread(SimConfig(output_tokens=100, **common)) as a, \
            SimulatorThread(SimConfig(output_tokens=112, draft_k=4, draft_acceptance=0.5, **common)) as b:
        exp = tmp / "exp.toml"
        exp.write_text(f'''
[experiment]
name = "ew"
repeats = 3
baseline = "control"
sentinel_tokens = 16
store_text = true
[[arms]]
name = "control"
role = "baseline"
base_url = "{a.base_url}/v1"
model = "sim"
conditions = {{ drafter = "none" }}
[[arms]]
name = "drafter"
role = "treatment"
base_url = "{b.base_url}/v1"
model = "sim"
conditions = {{ drafter = "ngram" }}
[[cases]]
name = "read"
documents = ["doc.txt"]
prompt = "summarise"
max_tokens = 200
[[cases.steps]]
prompt = "more detail please with more words"
max_tokens = 200
[probes]
output_tokens = [16, 128]
repeats = 2
''')
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp / "run")], catch_exceptions=False)
        assert res.exit_code == 0, res.output
    return summarize(read_ledger(tmp / "run")), read_ledger(tmp / "run"), res.output


def _truth_at_equal_work(led) -> float:
    """The control's median turn over the drafter's median turn had it generated the control's tokens: each of its
    calls' decode steps (⌈n / 3⌉ at 1/50 s each, the simulator's pacing) replaced by those of the control's call."""
    recs = led.records
    turns = {a: {t["repeat"]: t for t in recs if t["kind"] == "turn" and t["arm"] == a} for a in ("control", "drafter")}
    calls = {}
    for c in recs:
        if c["kind"] == "call":
            calls.setdefault(c["turn_id"], {})[c["step"]] = c
    adjusted = []
    for r, t in turns["drafter"].items():
        theirs = calls[turns["control"][r]["turn_id"]]
        adjusted.append(t["turn_s"] + sum((math.ceil(theirs[k]["completion_tokens"] / PER_STEP)
                                           - math.ceil(c["completion_tokens"] / PER_STEP)) / DECODE_TPS
                                          for k, c in calls[t["turn_id"]].items()))
    return statistics.median(t["turn_s"] for t in turns["control"].values()) / statistics.median(adjusted)


def _total(s):
    return next(m for m in s["multipliers"] if m["arm"] == "drafter" and m["scope"] == "total")


@pytest.mark.slow
def test_the_measured_total_is_refused_and_the_equal_work_one_is_true(longer):
    s, led, _ = longer
    m = _total(s)
    assert not m["citable"] and m["reason_codes"] == ["volume"] and m["volume_spread"] == pytest.approx(0.12)
    ew = m["equal_work"]
    assert ew["citable"], ew["reason"]
    assert ew["value"] == pytest.approx(_truth_at_equal_work(led), rel=0.03)
    assert ew["value"] > m["value"]  # the arm did more work: at equal work it is faster still
    assert ew["token_change"] == pytest.approx(0.12) and "12.0% more tokens than control" in ew["corrected"]


@pytest.mark.slow
def test_the_headline_and_the_verdict_use_the_equal_work_figure_and_say_so(longer):
    s, _, out = longer
    [lever] = [x for x in s["levers"] if x["lever"] == "drafter"]
    assert lever["measure"] == "equal work" and lever["citable"] and lever["multiplier"] == _total(s)["equal_work"][
        "value"]
    assert lever["measured"]["citable"] is False and "equal work" in lever["note"]
    [v] = [v for v in s["verdicts"] if v["lever"] == "drafter"]
    assert v["measure"] == "equal work" and v["refused"] is None and v["verdict"] == "pays"
    assert "equal work" in out


@pytest.mark.slow
def test_outputs_are_compared_call_by_call(longer):
    s, led, _ = longer
    [row] = s["equal_work"]
    assert row["calls"] == 6 and row["identical"] == 0  # 3 repeats × 2 steps, every answer longer on the drafter
    # the simulator's answer repeats the last prompt's words: the two part where the control's answer ends
    control = [len(c["output_text"]) for c in led.records if c["kind"] == "call" and c["arm"] == "control"]
    assert row["divergence_chars_median"] == statistics.median(control)


def test_identical_outputs_are_counted_and_the_first_difference_found():
    assert first_difference("abc", "abc") is None and first_difference("abcd", "abXd") == 2
    assert first_difference("ab", "abc") == 2
    arms = {"base": {"hardware": "a"}, "fast": {"hardware": "b"}}
    recs = []
    for r in range(3):
        for a, t in (("base", 2.0), ("fast", 1.0)):
            sha = "same" if r else a
            recs += turn(a, "c", r, t, 100, calls=[call(a, "c", r, latency=t, out=100, output_sha256=sha)])
    s = summarize(ledger(header(arms, ["c"]), recs))
    [row] = s["equal_work"]
    assert (row["calls"], row["identical"], row["identical_share"]) == (3, 2, pytest.approx(2 / 3))


def _two_case_run(out_b_fast: int):
    """Two cases; on case "b" the arm writes *out_b_fast* tokens where the reference writes 100 (times ±1 % from
    repeat to repeat, so that the interval is not a point)."""
    arms = {"base": {"hardware": "a"}, "fast": {"hardware": "b"}}
    recs = []
    for r, f in enumerate((1.0, 1.01, 0.99)):
        recs += turn("base", "a", r, 20.0, 2000) + turn("fast", "a", r, 17.4 * f, 2000)
        recs += turn("base", "b", r, 2.0, 100) + turn("fast", "b", r, 2.0 * out_b_fast / 100 * f, out_b_fast)
    return summarize(ledger(header(arms, ["a", "b"]), recs))


def test_a_verdict_never_pays_from_a_case_the_cell_guard_refused():
    """Defect 1: the arm generated 5× fewer tokens in the short case.  The total (1.24x, volume spread 4 % over
    both cases) is citable, the cell is refused, and the verdict — the geometric mean of the per-case ratios —
    said "pays 2.4x" from it."""
    s = _two_case_run(20)
    total = next(m for m in s["multipliers"] if m["scope"] == "total")
    cell = next(m for m in s["multipliers"] if m["scope"] == "case:b")
    assert total["citable"] and not cell["citable"] and "volume" in cell["reason_codes"]
    [v] = s["verdicts"]
    assert v["ratio"] == pytest.approx(math.sqrt(20 / 17.4 * 5), rel=0.01)  # 2.4x, from the refused case
    assert v["verdict"] != "pays" and v["refused"] and "b: output volume spread" in v["refused"]


def test_equal_work_is_not_citable_without_a_cross_checked_rate_model():
    s = _two_case_run(20)
    cell = next(m for m in s["multipliers"] if m["scope"] == "case:b")
    assert cell["equal_work"] is not None and not cell["equal_work"]["citable"]
    assert "rate model" in cell["equal_work"]["reason"]


def test_equal_work_pairs_the_call_that_counted_not_its_failed_attempt():
    """A retried call shares its step's key with the retry that counted; equal work must pair that retry (review
    of issue 22: the failed attempt was paired and the retry subtracted as a step only the arm ran, so the
    correction read 21 % instead of 12 % and a turn could drop out).  Both arms: 1000 prompt tokens at 1000 tok/s,
    decode 50 tok/s; the reference writes 100 tokens, the arm 120: the correction is 20/50 s of 3.38 s."""
    from ledgers import probes_for, timed

    arms = {"base": {"hardware": "old"}, "fast": {"hardware": "new"}}

    def c(arm, r, out):
        return timed(arm, "c", r, prompt=1000, cached=0, out=out, prefill_tps=1000.0, decode_tps=50.0)

    recs = []
    for r in range(6):
        recs += turn("base", "c", r, 1 + 99 / 50, 100, calls=[c("base", r, 100)])
        calls = [c("fast", r, 120)]
        if r == 0:
            bad = c("fast", r, 60)  # a stream cut after 60 tokens (its usage partial), tried again
            bad.update(error={"class": "stream_cut", "message": "stream broken"}, retried=True, status=200)
            calls = [bad, *calls]
        t = turn("fast", "c", r, 1 + 119 / 50, 120, calls=calls)
        t[-1].update(error=None, failed_calls=0, output_tokens=120)
        recs += t
    head = header(arms, ["c"], repeats=6)
    s = summarize(ledger(head, recs + probes_for(head, arms)))
    [row] = s["equal_work"]
    assert row["turns_corrected"] == 6 and row["calls"] == 6
    assert row["correction_share"] == pytest.approx((20 / 50) / (1 + 119 / 50), rel=0.01)


def test_an_arm_that_sends_another_temperature_is_not_compared_as_greedy():
    """The case is greedy, but one arm's request fields send temperature 0.8 (they override the case's): its
    calls are not compared for identical outputs (review of issue 22: the case alone decided)."""
    def run(request):
        head = header({"base": {"hardware": "a"}, "hot": {"hardware": "b"}}, ["c"])
        head["config"]["arms"][1]["request"] = request
        recs = []
        for arm in ("base", "hot"):
            for r in range(3):
                recs += turn(arm, "c", r, 2.0, 50, calls=[call(arm, "c", r, latency=2.0, out=50,
                                                               output_sha256="ab" * 32)])
        return summarize(ledger(head, recs))["equal_work"][0]

    greedy = run({})
    assert greedy["calls"] == 3 and greedy["identical"] == 3
    hot = run({"temperature": 0.8})
    assert hot["calls"] == 0 and hot["identical_share"] is None
