"""``leverbench compare``'s guard and gate (issue 41's review): the machine-speed correction shown beside the measured
figures and gating the exit code only with ``--correct-machine``; reference arms that disagree; prefill not read off a
short sentinel; a salted run matched with one that resets its cache; ``--strict``; variants, ``--match``, output
volume and the bad inputs.  On hand-made ledgers shaped as the runner writes them (``tests/ledgers.py``), timed by
the simulator's model (``tests/test_compare.py`` holds the checks against the simulator itself)."""

from __future__ import annotations

import hashlib
import math
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ledgers import header, ledger, timed, turn, write

from leverbench.analysis.compare import compare_runs, run_view
from leverbench.cli import cli
from leverbench.errors import BadInput
from leverbench.report.compare import render_text

CASES = ("x", "y", "z")
DECODE, PREFILL, OUT, SENTINEL = 1000.0, 20000.0, 64, 48
NOISE = 0.02  # lognormal scatter of each request's speed: small, so that the figures are near their truth


def _records(arms: dict[str, tuple[float, float]], *, seed: int, repeats: int, prompt: int, sentinel_prompt: int,
             salt: bool) -> list[dict[str, Any]]:
    """Every arm's turns (one call each, its decode at *arms*[arm][0] tokens/s) and its drift sentinels (decode at
    *arms*[arm][1]) at each round's start and at the end, the sentinels' time to first token holding the step that
    samples the first token, as an engine's does."""
    rng = random.Random(seed)

    def k() -> float:
        return math.exp(rng.gauss(0.0, NOISE))

    def sentinel(arm: str, r: int, position: str, t: float) -> dict[str, Any]:
        f = k()
        s = timed(arm, "(sentinel)", r, kind="sentinel", prompt=sentinel_prompt, cached=0, out=SENTINEL,
                  prefill_tps=PREFILL / f, decode_tps=arms[arm][1] / f, probe_tokens=SENTINEL, position=position,
                  input_chars=372, t_send=t)
        step = f / arms[arm][1]
        s["ttft_s"] += step
        s["latency_s"] += step
        s["timings"]["prompt_ms"] += step * 1000
        return s

    recs: list[dict[str, Any]] = []
    t = 0.0
    for r in range(repeats):
        for arm in arms:
            recs.append(sentinel(arm, r, "start", t))
            for case in CASES:
                f = k()
                sent = f"{case} salt {rng.random()}" if salt else case
                c = timed(arm, case, r, prompt=prompt, cached=0, out=OUT, prefill_tps=PREFILL / f,
                          decode_tps=arms[arm][0] / f, input_sha256=hashlib.sha256(sent.encode()).hexdigest())
                recs += turn(arm, case, r, c["latency_s"] + 0.002, OUT, calls=[c])
                if salt:
                    recs[-1]["cache"] = {"state": "cold", "method": "salt", "salt": "turn"}
                t += 1.0
    recs += [sentinel(arm, 0, "end", t) for arm in arms]
    return recs


def _head(arms: list[str], repeats: int, run_id: str, name: str = "guard") -> dict[str, Any]:
    head = header({a: {} for a in arms}, list(CASES), repeats=repeats, name=name)
    head["run_id"] = run_id
    return head


def _run(run_id: str, arms: dict[str, tuple[float, float]] | None = None, *, seed: int = 0, repeats: int = 6,
         prompt: int = 20, sentinel_prompt: int = 72, salt: bool = False, name: str = "guard",
         edit=None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    arms = arms or {"a": (DECODE, DECODE)}
    recs = _records(arms, seed=seed, repeats=repeats, prompt=prompt, sentinel_prompt=sentinel_prompt, salt=salt)
    head = _head(list(arms), repeats, run_id, name)
    if edit:
        edit(head, recs)
    return head, recs


def _view(run: tuple[dict[str, Any], list[dict[str, Any]]], label: str):
    return run_view(label, ledger(*run))


def _compare(base, later, **kw):
    return compare_runs(_view(base, "base"), [_view(later, "later")], **kw)


def _text(result) -> str:
    head, parts, closing = render_text(result)
    return "\n".join([*head, *(w for words, _ in parts for w in words), *closing])


SLOW = DECODE / 1.08  # an 8 % slower decode, in the turns and the sentinels alike: engine or machine, nothing says


def test_a_correction_is_shown_beside_the_measured_figures_and_gates_only_with_correct_machine():
    base, later = _run("b"), _run("l", {"a": (SLOW, SLOW)}, seed=1)
    plain = _compare(base, later)
    (c,) = plain["comparisons"]
    (arm,) = c["arm_ratios"]
    assert c["changed"] == [] and c["machine"]["corrected"] and not c["machine"]["gated"]
    assert arm["ratio"] == pytest.approx(1.08, rel=0.02) and arm["verdict"] == "slower"
    assert arm["corrected_ratio"] == pytest.approx(1.0, abs=0.02) and arm["corrected_verdict"] == "same"
    assert plain["exit_code"] == 1 and c["slower"]
    text = _text(plain)
    assert "Corrected for the machine (sentinels: decode -" in text and "pass --correct-machine" in text
    assert "the arm is the same (measured: slower)" in text
    assert any("only reference arm" in n for n in c["machine"]["notes"])  # corrected by its own sentinels alone
    gated = _compare(base, later, correct_machine=True)
    assert gated["exit_code"] == 0 and gated["comparisons"][0]["machine"]["gated"]


def test_reference_arms_that_disagree_refuse_the_correction():
    base = _run("b", {"a": (DECODE, DECODE), "b": (DECODE, DECODE)})
    later = _run("l", {"a": (DECODE * 0.8, DECODE * 0.8), "b": (DECODE, DECODE)}, seed=1)
    m = _compare(base, later)["comparisons"][0]["machine"]
    assert not m["corrected"] and "disagree" in m["text"], m


def test_prefill_is_not_read_off_a_short_sentinel_only_decode_is_corrected():
    """Long cases (2,000-token prompts: prefill 100 ms beside 63 ms of decode), decode alone 20 % slower: the
    sentinel's 72-token time to first token is mostly its decode step, so only decode is corrected — not the false
    "faster" a prefill factor read off it gave."""
    base = _run("b", prompt=2000)
    later = _run("l", {"a": (DECODE * 0.8, DECODE * 0.8)}, seed=1, prompt=2000)
    (c,) = _compare(base, later)["comparisons"]
    assert c["machine"]["prefill"] is None and any("prefill not measured" in n for n in c["machine"]["notes"])
    (arm,) = c["arm_ratios"]
    assert arm["corrected_ratio"] == pytest.approx(1.0, abs=0.02) and arm["corrected_verdict"] == "same"
    # a sentinel prompt long enough (4,000 tokens: 200 ms of prefill, 200 decode steps) does time prefill
    long_ = _compare(_run("b", sentinel_prompt=4000), _run("l", {"a": (SLOW, SLOW)}, seed=1, sentinel_prompt=4000))
    m = long_["comparisons"][0]["machine"]
    assert m["prefill"] is not None and m["prefill"]["change"] == pytest.approx(0.0, abs=0.02)
    assert not any("prefill not measured" in n for n in m["notes"])


def test_a_salted_run_is_matched_with_one_that_resets_its_cache_by_the_cases_definitions():
    (c,) = _compare(_run("b"), _run("l", seed=1, salt=True))["comparisons"]
    assert [(k["case"], k["later"], k["how"]) for k in c["cases"]] == [(x, x, "case definition") for x in CASES]


def _edit_cell(case: str, *, fail: bool = False, keep: int | None = None, scale: float = 1.0,
               out: int | None = None, unknown: bool = False):
    """An edit of a run's records: *case*'s turns failed, cut to *keep*, slowed by *scale*, given *out* tokens."""
    def edit(head, recs):
        drop = []
        seen = 0
        for r in recs:
            if r["kind"] == "turn" and r["case"] == case:
                seen += 1
                if keep is not None and seen > keep:
                    drop.append(r["turn_id"])
                r["turn_s"] *= scale
                if fail and seen == 1:
                    r["error"] = {"class": "http", "message": "failed"}
                if out is not None:
                    r["output_tokens"] = out
                if unknown:
                    r["output_tokens"] = None
        recs[:] = [r for r in recs if r.get("turn_id") not in drop or r["kind"] == "sentinel"]
    return edit


def test_strict_fails_on_rows_undecided_beyond_the_threshold_or_refused_and_the_closing_line_counts_them():
    base = _run("b")
    later = _run("l", seed=1, edit=lambda h, r: (_edit_cell("x", fail=True)(h, r),
                                                 _edit_cell("y", keep=1, scale=1.3)(h, r)))
    result = _compare(base, later)
    (c,) = result["comparisons"]
    assert result["exit_code"] == 0 and not c["slower"]
    assert len(c["refused"]) == 1 and "failed calls" in c["refused"][0]
    assert any("case y" in line for line in c["undecided"]), c["undecided"]
    by = {x["case"]: x for x in c["cells"]}
    assert by["y"]["note"] == "no interval: one repeat in the later run"
    text = _text(result)
    assert f"Nothing shown slower than the threshold; {len(c['undecided'])} row(s) undecided beyond the threshold, " \
           "1 refused: see above" in text
    strict = _compare(base, later, strict=True)
    assert strict["exit_code"] == 1 and "UNDECIDED: " in _text(strict) and "REFUSED: " in _text(strict)


def test_an_arm_whose_cases_have_no_interval_takes_one_from_the_spread_between_them():
    def one_repeat(h, r):
        for case in CASES:
            _edit_cell(case, keep=1, scale=1.3)(h, r)
    (c,) = _compare(_run("b"), _run("l", seed=1, edit=one_repeat))["comparisons"]
    (arm,) = c["arm_ratios"]
    assert all(x["low"] is None for x in c["cells"])
    assert arm["low"] is not None and arm["low"] < arm["ratio"] < arm["high"] and "spread" in (arm["note"] or "")


def test_variant_cases_are_listed_as_not_compared():
    def variant(head, recs):
        head["config"]["cases"].append({"name": "x [short]", "variant_of": "x"})
    (c,) = _compare(_run("b", edit=variant), _run("l", seed=1, edit=variant))["comparisons"]
    (v,) = [k for k in c["cases"] if k["case"] == "x [short]"]
    assert not v["compared"] and "variant of case x" in (v["reason"] or "")


def test_output_volume_none_against_some_is_beyond_the_tolerance_and_unknown_is_said():
    (c,) = _compare(_run("b"), _run("l", seed=1, edit=_edit_cell("x", out=0)))["comparisons"]
    by = {x["case"]: x for x in c["cells"]}
    assert by["x"]["refused"] and "output volume differs" in (by["x"]["reason"] or "")
    (c,) = _compare(_run("b"), _run("l", seed=1, edit=_edit_cell("x", unknown=True)))["comparisons"]
    by = {x["case"]: x for x in c["cells"]}
    assert not by["x"]["refused"] and "output volume unknown in the later run" in (by["x"]["note"] or "")


def test_bad_match_pairs_the_same_run_twice_and_a_bad_threshold_are_bad_input():
    base = _view(_run("b", {"a": (DECODE, DECODE), "b": (DECODE, DECODE)}), "base")
    later = _view(_run("l", {"a": (DECODE, DECODE), "b": (DECODE, DECODE)}, seed=1), "later")
    with pytest.raises(BadInput, match="no later run has an arm 'zz'"):
        compare_runs(base, [later], pairs=[("a", "zz")])
    with pytest.raises(BadInput, match="named twice"):
        compare_runs(base, [later], pairs=[("a", "a"), ("b", "a")])
    with pytest.raises(BadInput, match="the same run twice"):
        compare_runs(base, [_view(_run("b", {"a": (DECODE, DECODE), "b": (DECODE, DECODE)}), "again")])
    for t in (math.inf, math.nan, 1.0, 0.9):
        with pytest.raises(BadInput, match="--threshold"):
            compare_runs(base, [later], threshold=t)
    renamed = _view(_run("l", {"a": (DECODE, DECODE), "b": (DECODE, DECODE)}, seed=1, name="renamed"), "later")
    changed = compare_runs(base, [renamed])["comparisons"][0]["changed"]
    assert {"scope": "run", "arm": None, "what": "experiment name", "baseline": "guard", "later": "renamed"} in changed


def test_the_command_gates_as_the_flags_say(tmp_path: Path):
    base, later = write(tmp_path / "b", *_run("b")), write(tmp_path / "l", *_run("l", {"a": (SLOW, SLOW)}, seed=1))

    def code(*args: str) -> int:
        return CliRunner().invoke(cli, ["compare", str(base), str(later), *args]).exit_code

    assert (code(), code("--correct-machine"), code("--correct-machine", "--strict")) == (1, 0, 0)
    assert code("--threshold", "inf") == 2 and code("--match", "a=nope") == 2
    res = CliRunner().invoke(cli, ["compare", str(base), str(base)])
    assert res.exit_code == 2


@pytest.mark.parametrize("declared", [True, False], ids=["drafter-declared", "drafter-discovered"])
def test_a_served_flag_a_levers_knob_covers_is_named_under_what_changed(declared: bool):
    """A served flag that differs is named with both values, once: as its own knob (``fact:engine_args FLAG``) where
    nothing else of the arm differs, and as an engine flag where the knob that covers it (the drafter, declared as
    the demo declares it, "ngram-mod K=7" → "K=3") differs too and would otherwise hide it."""
    def args(k: str):
        def edit(head: dict[str, Any], recs: list[dict[str, Any]]) -> None:
            head["arms"]["a"]["discovered"] = {"engine": "llama.cpp", "engine_args": [
                "--spec-type", "ngram-mod", f"--spec-draft-n-max={k}", "--seed", "1"]}
            if declared:
                head["arms"]["a"]["conditions"] = {"drafter": f"ngram-mod K={k}"}
        return edit

    base, later = _run("b", edit=args("7")), _run("l", seed=1, edit=args("3"))
    (c,) = _compare(base, later)["comparisons"]
    named = [(r["what"], r["baseline"], r["later"]) for r in c["changed"] if "--spec-draft-n-max" in r["what"]]
    assert named == [("engine flag --spec-draft-n-max" if declared else "fact:engine_args --spec-draft-n-max",
                      "7", "3")], c["changed"]
    assert len(c["changed"]) == 1 + declared
    assert "arm a: " + named[0][0] + " 7 → 3" in _text(_compare(base, later))
    assert _compare(base, _run("s", seed=2, edit=args("7")))["comparisons"][0]["changed"] == []


def test_the_port_and_a_directory_of_the_run_are_no_change():
    """A command engine's port and its ``{engine_dir}`` (a directory of each run) differ between any two runs: they
    are not listed under what changed; a flag a placeholder fills is compared as its knob, not again as a flag."""
    def args(port: str, run: str):
        def edit(head: dict[str, Any], recs: list[dict[str, Any]]) -> None:
            head["arms"]["a"]["discovered"] = {
                "engine": "command", "values": {"k": 3}, "value_flags": {"k": ["--k"], "engine_dir": ["--save"]},
                "engine_args": ["srv", "--port", port, "--save", f"{run}/engine-a.files", "--k", "3"]}
        return edit

    base, later = _run("b", edit=args("8001", "runs/one")), _run("l", seed=1, edit=args("8002", "runs/two"))
    assert _compare(base, later)["comparisons"][0]["changed"] == []
