"""Repeats that revisit the cache (analysis/experiment/revisits.py), on hand-made ledgers with the figures worked
out by hand: a cache arm whose later repeats find their prompts cached by its first repeat is warned, with the
first-visit ratio; one whose repeats each start cold (engines one at a time) is not; a cache shared within a
repeat (a common system prompt) is no revisit."""

from __future__ import annotations

import pytest
from ledgers import call, header, ledger, turn, warned

from leverbench.analysis.base.dataset import dataset
from leverbench.analysis.experiment.revisits import REVISIT_SHARE, first_visit_ratio, revisit_shares
from leverbench.analysis.summary import summarize
from leverbench.report.first_screen import first_screen
from leverbench.schema.warning_kinds import WarningKind as W

ARMS = {"current": {"prefix_cache": False}, "cache": {"prefix_cache": True}}
CASES = ["a", "b"]
PROMPT = 1000


def _turns(cached_later: int, *, shared: int = 0) -> list[dict]:
    """Three repeats, two cases, two calls a turn (the second extends the first: its first 900 tokens cached
    on the cache arm).  The cache arm's first call caches *shared* tokens (a system prompt common to the cases)
    in repeat 0 and *cached_later* in later repeats.  Turn times: current 10 s (case a) and 8 s (b) every
    repeat; cache 5 s and 4 s in repeat 0, 2 s and 2 s after."""
    recs: list[dict] = []
    for r in range(3):
        for case, (base_s, first_s, later_s) in {"a": (10.0, 5.0, 2.0), "b": (8.0, 4.0, 2.0)}.items():
            recs += turn("current", case, r, base_s, 20, calls=[
                call("current", case, r, latency=base_s / 2, out=10, prompt=PROMPT, step=0),
                call("current", case, r, latency=base_s / 2, out=10, prompt=PROMPT, step=1)])
            first_cached = shared if r == 0 else cached_later
            recs += turn("cache", case, r, first_s if r == 0 else later_s, 20, calls=[
                call("cache", case, r, latency=1.0, out=10, prompt=PROMPT, cached=first_cached, step=0),
                call("cache", case, r, latency=1.0, out=10, prompt=PROMPT, cached=900, step=1)])
    return _in_time(recs)


def _in_time(recs: list[dict]) -> list[dict]:
    """Each record one second after the one before it, in the order written (a turn starts before its calls)."""
    for i, r in enumerate(recs):
        r["t_start" if r["kind"] == "turn" else "t_send"] = 1.7e9 + i
    for r in recs:
        if r["kind"] == "turn":
            r["t_start"] = min(c["t_send"] for c in recs if c.get("turn_id") == r["turn_id"] and c["kind"] == "call")
    return recs


def test_later_repeats_that_hit_the_first_ones_cache_are_warned_with_the_first_visit_figure():
    head = header(ARMS, CASES)
    for a in head["config"]["arms"]:
        a["engine"] = {"kind": "embedded", "args": []}  # engines the tool starts, together
    led = ledger(head, _turns(cached_later=990))
    ds = dataset(led)
    # later repeats: 2 repeats × 2 cases = 4 turns; their first visits computed 1000 (first call) + 100 (second call,
    # 900 of its 1000 cached) tokens; the later turns' first calls found 990 more cached: 4 × 990 / (4 × 1100)
    assert revisit_shares(ds) == {"current": 0.0, "cache": 4 * 990 / 4400}
    # first visits: (10 + 8) / (5 + 4)
    assert first_visit_ratio(ds, "cache", "current") == 2.0
    s = summarize(led)
    [w] = warned(s, W.REVISITS, "cache")
    assert w["text"].startswith("cache vs current on first visits") and ": 2.00x;" in w["text"]
    # a run before ledger v5 declared no state: its figure across repeats is no new turn's: refused all the same,
    # and told that a run today starts each turn cold
    assert "3960 of the 4400 prompt tokens their first visits computed (90%)" in w["text"]
    assert 'cache_between_turns = "cold"' in w["text"] and "declared no cache state" in w["text"]
    [pair] = s["repeats"]["pairs"]
    assert s["repeats"]["state"] is None and pair["first_visit"] == 2.0 and pair["refused"]
    assert not any(m["citable"] for m in s["multipliers"] if m["arm"] == "cache")
    line = next(ln for ln in first_screen(s).lines() if ln.strip().startswith("prefix_cache"))
    assert "cache vs current     (first visits 2.00x" in line  # the honest figure heads the line


def test_repeats_that_each_start_cold_are_not_warned():
    """Engines one at a time: each round starts the engine afresh, so later repeats cache what the first did."""
    led = ledger(header(ARMS, CASES), _turns(cached_later=0))
    assert revisit_shares(dataset(led))["cache"] == 0.0
    assert not warned(summarize(led), W.REVISITS)


def test_a_prefix_shared_within_each_repeat_is_no_revisit():
    """A system prompt common to the cases is cached in every repeat alike (300 tokens): only what the earlier
    repeats added counts, here 40 more tokens in each of the 4 later turns, whose first visits computed 700 + 100
    tokens: 5 %, below the threshold."""
    led = ledger(header(ARMS, CASES), _turns(cached_later=340, shared=300))
    share = revisit_shares(dataset(led))["cache"]
    assert share == 4 * 40 / (4 * 800) and share < REVISIT_SHARE
    assert not warned(summarize(led), W.REVISITS)


ERR = {"class": "timeout_total", "message": "x"}


def _turn(arm: str, case: str, r: int, turn_s: float, cached: list[int], *, failed_step: int | None = None,
          prompt: int = PROMPT) -> list[dict]:
    """One turn of len(cached) calls (the call at *failed_step* failed), as the runner writes it."""
    calls = [call(arm, case, r, latency=turn_s / len(cached), out=10, prompt=prompt, cached=k, step=i)
             for i, k in enumerate(cached)]
    recs = turn(arm, case, r, turn_s, 10 * len(cached), calls=calls)
    if failed_step is not None:
        calls[failed_step]["error"] = ERR
        recs[-1].update(failed_calls=1, error={"class": ERR["class"], "message": "failed"})
    return recs


def test_a_first_visit_that_failed_or_came_later_in_time_is_not_taken_for_one():
    """Review of this module: (1) the cache arm's first turn of case a failed after its first call had cached the
    prompt, so its next turn is a revisit: case a is left out of the first-visit figure, which is case b's
    10 / 8 = 1.25x (it read 2.0x, pairing a warm 2 s turn); (2) a resumed run re-ran repeat 0 last, on a server
    that kept its cache: the first visit is the earliest in time (repeat 1), not repeat 0."""
    failed = []
    for r in range(3):
        for case in CASES:
            failed += _turn("current", case, r, 10.0, [0, 0])
            failed += (_turn("cache", case, r, 8.0, [0, 0], failed_step=1 if case == "a" else None) if r == 0
                       else _turn("cache", case, r, 2.0, [990, 990]))
    ds = dataset(ledger(header(ARMS, CASES), _in_time(failed)))
    assert first_visit_ratio(ds, "cache", "current") == 1.25

    resumed = []
    for r in (1, 2):
        for case in CASES:
            resumed += _turn("current", case, r, 10.0, [0, 0])
            resumed += _turn("cache", case, r, 8.0 if r == 1 else 2.0, [0, 0] if r == 1 else [990, 990])
    for case in CASES:  # repeat 0, run last
        resumed += _turn("current", case, 0, 10.0, [0, 0]) + _turn("cache", case, 0, 2.0, [990, 990])
    led = ledger(header(ARMS, CASES), _in_time(resumed))
    ds = dataset(led)
    assert revisit_shares(ds)["cache"] == 4 * 2 * 990 / (8 * 1000)  # 4 later turns of 2 calls, each 990 more
    assert first_visit_ratio(ds, "cache", "current") == 20.0 / 16.0
    [w] = warned(summarize(led), W.REVISITS)
    assert "run the experiment again" in w["text"]


def test_a_variant_is_left_out_as_the_multipliers_leave_it_out():
    head = header(ARMS, CASES)
    head["config"]["cases"].append({"name": "a [short]", "variant_of": "a"})
    recs = []
    for r in range(3):
        for case in [*CASES, "a [short]"]:
            recs += _turn("current", case, r, 10.0, [0, 0])
            revisit = case == "a [short]" and r > 0
            recs += _turn("cache", case, r, 8.0, [990, 990] if revisit else [0, 0])
    led = ledger(head, _in_time(recs))
    assert revisit_shares(dataset(led))["cache"] == 0.0 and not warned(summarize(led), W.REVISITS)


# ---------------------------------------------------------------- declared states (ledger v5, issue 38)


def _plan(arm: str, method: str, state: str = "cold", **kw) -> dict:
    return {"kind": "cache_reset", "arm": arm, "state": state, "method": method, "why": "test", **kw}


def _declared(state: str, method: str, cached_later: int) -> tuple[dict, list[dict]]:
    head = header(ARMS, CASES, cache_between_turns=state, cache_reset="auto")
    return head, [_plan(a, method, state) for a in ARMS] + _turns(cached_later=cached_later)


def test_a_reset_that_did_not_take_is_refused_with_the_counts_and_headed_by_the_first_visit_figure():
    """Declared cold, reset before every turn, and still the cache arm's later repeats met 990 of 1000 tokens of
    their first calls cached (a reset the server acknowledged and did not perform): the comparison is refused
    (reason code revisits, with the counts), and the first screen heads its line with the first-visit figure."""
    head, recs = _declared("cold", "reset", 990)
    s = summarize(ledger(head, recs))
    total = next(m for m in s["multipliers"] if m["arm"] == "cache" and m["scope"] == "total")
    assert not total["citable"] and "revisits" in total["reason_codes"]
    assert "3960 of the 4400 prompt tokens their first visits computed (90%)" in total["reason"]
    assert "not brought to the declared cold state" in total["reason"]
    [pair] = s["repeats"]["pairs"]
    assert pair["first_visit"] == 2.0 and pair["refused"]
    cache_row = next(r for r in s["repeats"]["arms"] if r["arm"] == "cache")
    assert cache_row["method"] == "reset" and cache_row["revisit_share"] == 0.9
    line = next(ln for ln in first_screen(s).lines() if ln.strip().startswith("prefix_cache"))
    assert "(first visits 2.00x (no interval); across repeats" in line
    assert "not citable: repeats revisited" in line


def test_a_reset_that_took_leaves_the_comparison_citable_and_unwarned():
    head, recs = _declared("cold", "reset", 0)
    s = summarize(ledger(head, recs))
    assert not s["repeats"]["pairs"] and not warned(s, W.REVISITS)
    assert all(m["citable"] for m in s["multipliers"] if m["arm"] == "cache")
    assert s["repeats"]["state"] == "cold"


def test_none_revisits_and_is_refused_saying_so():
    head, recs = _declared("cold", "none", 990)
    s = summarize(ledger(head, recs))
    total = next(m for m in s["multipliers"] if m["arm"] == "cache" and m["scope"] == "total")
    assert not total["citable"] and 'cache_reset = "none"' in total["reason"]
    [w] = warned(s, W.REVISITS)
    assert 'cache_reset = "auto" brings every turn' in w["text"]


def test_keep_revisits_on_purpose_warned_not_refused():
    head, recs = _declared("keep", "keep", 990)
    s = summarize(ledger(head, recs))
    assert all(m["citable"] for m in s["multipliers"] if m["arm"] == "cache")
    [w] = warned(s, W.REVISITS)
    assert "on purpose" in w["text"] and ": 2.00x;" in w["text"]
    note = next(ln for ln in first_screen(s).lines() if "on first visits" in ln)
    assert "2.00x" in note and "on purpose" in note


def test_a_drafter_whose_state_carries_from_repeat_to_repeat_is_refused():
    """The drafter arm's calls accepted 0 drafts per output token on their first visit and 0.5 on later repeats
    (llama.cpp's ngram-mod learns each answer; its first visit reports timings without draft_n: none drafted)."""
    arms = {"cache": {"prefix_cache": True, "drafter": False}, "cache+drafter": {"prefix_cache": True,
                                                                                  "drafter": "ngram-mod"}}
    head = header(arms, CASES, cache_between_turns="cold", cache_reset="auto")
    recs = [_plan("cache", "reset"), _plan("cache+drafter", "restart")]
    for r in range(3):
        for case in CASES:
            recs += _turn("cache", case, r, 4.0, [0, 0])
            t = {"cache_n": 0} if r == 0 else {"cache_n": 0, "draft_n": 8, "draft_n_accepted": 5}
            recs += turn("cache+drafter", case, r, 4.0 if r == 0 else 2.0, 20, calls=[
                call("cache+drafter", case, r, latency=2.0, out=10, prompt=PROMPT, step=i, timings=dict(t))
                for i in range(2)])
    s = summarize(ledger(head, _in_time(recs)))
    row = next(r for r in s["repeats"]["arms"] if r["arm"] == "cache+drafter")
    assert row["draft_first"] == 0.0 and row["draft_later"] == 0.5
    total = next(m for m in s["multipliers"] if m["arm"] == "cache+drafter" and m["scope"] == "total")
    assert not total["citable"] and "drafter accepted 0.50 drafted tokens per output token" in total["reason"]


def test_a_revisit_of_a_long_turns_first_call_is_not_diluted_by_its_later_calls():
    """A twelve-call turn: its later calls reuse the turn's own prefix (900 of 1000 cached at every visit) and its
    first call, in later repeats, found 990 of its 1000 tokens cached by the earlier repeat.  Against all the
    prompt tokens that is 5 %; against what the first visits computed (1000 + 11 × 100) it is 47 %: refused."""
    head = header(ARMS, CASES, cache_between_turns="cold", cache_reset="auto")
    recs = [_plan(a, "reset") for a in ARMS]
    for r in range(3):
        for case in CASES:
            recs += _turn("current", case, r, 20.0, [0] * 12)
            recs += _turn("cache", case, r, 10.0 if r == 0 else 2.0, [0 if r == 0 else 990] + [900] * 11)
    s = summarize(ledger(head, _in_time(recs)))
    row = next(x for x in s["repeats"]["arms"] if x["arm"] == "cache")
    assert row["revisit_share"] == pytest.approx(990 / 2100)
    assert not next(m for m in s["multipliers"] if m["arm"] == "cache" and m["scope"] == "total")["citable"]


def test_a_shorter_later_prompt_is_no_revisit():
    """A later repeat whose second call's prompt is shorter (a shorter answer or tool result before it) computes
    less without finding anything more cached: no revisit, on an arm that caches nothing or on one that does."""
    head = header(ARMS, CASES, cache_between_turns="cold", cache_reset="auto")
    recs = [_plan(a, "reset") for a in ARMS]
    for r in range(3):
        for case in CASES:
            second = 1600 if r == 0 else 1100
            recs += turn("current", case, r, 10.0, 20, calls=[
                call("current", case, r, latency=5.0, out=10, prompt=1000, step=0),
                call("current", case, r, latency=5.0, out=10, prompt=second, step=1)])
            recs += turn("cache", case, r, 5.0, 20, calls=[
                call("cache", case, r, latency=2.5, out=10, prompt=1000, step=0),
                call("cache", case, r, latency=2.5, out=10, prompt=second, cached=900, step=1)])
    s = summarize(ledger(head, _in_time(recs)))
    assert {r["arm"]: r["revisit_share"] for r in s["repeats"]["arms"]} == {"current": 0.0, "cache": 0.0}
    assert not s["repeats"]["pairs"]


def test_none_on_an_arm_that_reports_no_cached_tokens_is_refused_unmeasured():
    """cache_reset = "none" declares that the repeats revisit; where the arm says nothing of what it cached, by
    how much cannot be measured, and the comparison is refused all the same."""
    head = header(ARMS, CASES, cache_between_turns="cold", cache_reset="none")
    recs = [_plan(a, "none") for a in ARMS] + _turns(cached_later=990)
    for r in recs:
        if r["kind"] == "call":
            r["cached_tokens"] = None
    s = summarize(ledger(head, recs))
    total = next(m for m in s["multipliers"] if m["arm"] == "cache" and m["scope"] == "total")
    assert not total["citable"] and "reports no cached tokens" in total["reason"]
