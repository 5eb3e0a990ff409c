"""Repeats that revisit the cache (analysis/experiment/revisits.py), on hand-made ledgers with the figures worked
out by hand: a cache arm whose later repeats find their prompts cached by its first repeat is warned, with the
first-visit ratio; one whose repeats each start cold (engines one at a time) is not; a cache shared within a
repeat (a common system prompt) is no revisit."""

from __future__ import annotations

from ledgers import call, header, ledger, turn, warned

from leverbench.analysis.base.dataset import dataset
from leverbench.analysis.base.warning_kinds import WarningKind as W
from leverbench.analysis.experiment.revisits import REVISIT_SHARE, first_visit_ratio, revisit_shares
from leverbench.analysis.summary import summarize
from leverbench.report.first_screen import first_screen

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
    # later repeats: 2 repeats × 2 cases × 2 calls = 8 calls of 1000 prompt tokens; extra 990 on the 4 first calls
    assert revisit_shares(ds) == {"current": 0.0, "cache": 4 * 990 / 8000}
    # first visits: (10 + 8) / (5 + 4)
    assert first_visit_ratio(ds, "cache", "current") == 2.0
    s = summarize(led)
    [w] = warned(s, W.REVISITS, "cache")
    assert w["text"].startswith("cache vs current on first visits") and ": 2.00x;" in w["text"]
    assert "'cache' 50% of their prompt tokens" in w["text"] and 'engines = "one at a time"' in w["text"]
    line = next(ln for ln in first_screen(s).lines() if ln.strip().startswith("prefix_cache"))
    note = next(ln for ln in first_screen(s).lines() if "on first visits" in ln)
    assert note.split("]")[0].strip() + "]" in line  # the lever's line points to the note
    assert "2.00x" in note and "revisits" in note
    assert "the repeats after the first" not in note  # the figure alone: first_screen splits the text there


def test_repeats_that_each_start_cold_are_not_warned():
    """Engines one at a time: each round starts the engine afresh, so later repeats cache what the first did."""
    led = ledger(header(ARMS, CASES), _turns(cached_later=0))
    assert revisit_shares(dataset(led))["cache"] == 0.0
    assert not warned(summarize(led), W.REVISITS)


def test_a_prefix_shared_within_each_repeat_is_no_revisit():
    """A system prompt common to the cases is cached in every repeat alike (300 tokens): only what the earlier
    repeats added counts, here 100 more tokens on 4 of 8 calls: 5 %, below the threshold."""
    led = ledger(header(ARMS, CASES), _turns(cached_later=400, shared=300))
    share = revisit_shares(dataset(led))["cache"]
    assert share == 4 * 100 / 8000 and share < REVISIT_SHARE
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
    # endpoint arms (no engine the tool starts): restarting the server is the way to first visits
    assert "a server restarted between rounds" in w["text"] and "one at a time" not in w["text"]


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
