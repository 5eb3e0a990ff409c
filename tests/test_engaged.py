"""Engagement judged on every call the run made (issue 22, defect 14): its turns' calls, its probes, its sentinels
(as the server's counters over the arm's block count them) and its load calls (the latest execution of each
stage; warm-up calls, retried attempts and failed calls left out).  A hand-made ledger shaped like a ``whatif --verify``
replay: one tiny turn per arm and a trace stage that does the real work."""

from __future__ import annotations

import pytest
from ledgers import call, header, ledger, turn, warned

from leverbench.analysis.summary import summarize
from leverbench.schema.warning_kinds import WarningKind as W

ARMS = {"off": {"prefix_cache": False}, "on": {"prefix_cache": True}, "spec": {"drafter": "ngram"}}
FAILED = {"class": "http_status", "message": "500"}


def _load(arm: str, i: int, *, cached: int, prompt: int = 1024, run: str = "run-2", **extra) -> dict:
    extra = {"warmup": False, **extra}
    return call(arm, "whatif-verify", i, kind="load", latency=1.0, out=16, prompt=prompt, cached=cached,
                stage="verify", mode="trace", load_run=run, t_send=1000.0 + i, scheduled_t=1000.0 + i, **extra)


def _summary() -> dict:
    recs = []
    for arm in ARMS:  # the replay's one tiny case: 12 prompt tokens, none cached
        recs += turn(arm, "whatif-verify", 0, 0.2, 1, prompt=12)
    spec_timings = {"draft_n": 100, "draft_n_accepted": 80, "prompt_n": 512, "cache_n": 512}
    recs.append(_load("on", 10, cached=0, run="run-1"))  # an earlier execution of the stage, superseded by run-2
    for i in range(4):
        recs.append(_load("off", i, cached=0))
        recs.append(_load("on", i, cached=512))
        recs.append(_load("spec", i, cached=None, timings=spec_timings))
    # on "on", calls that do not count, each of which would change its figures if it did:
    recs.append(_load("on", 11, cached=1024, warmup=True))  # a warm-up call
    recs.append(_load("on", 12, cached=1024, error=FAILED, retried=True))  # a retried attempt
    recs.append(_load("on", 13, cached=1024, error=FAILED))  # a failed call
    # the reference's sentinel: a prompt behind a fresh tag, nothing cached (it counts, as the server counts it)
    recs.append(call("off", "(sentinel)", 0, kind="sentinel", latency=0.5, out=8, prompt=20, cached=0,
                     probe_tokens=8, position="start"))
    return summarize(ledger(header(ARMS, ["whatif-verify"], repeats=1), recs))


def test_a_load_only_run_is_judged_on_its_load_calls():
    """on: prompt 12 + 4 × 1024 = 4108 tokens, cached 4 × 512 = 2048 → 2048 / 4108 = 49.85 % ≥ 1 %: engaged
    (main: the turn's 0 of 12 → "cached only 0.0 %").  off: 0 of 12 + 4096 → not used.  spec: acceptance
    Σ draft_n_accepted / Σ draft_n = 320 / 400 = 0.8 ≥ 0.2: engaged (main: unknown, its turn has no timings);
    its cached count comes from timings.cache_n: 4 × 512 of 12 + 4 × 1024."""
    s = _summary()
    eng = {e["arm"]: e for e in s["engaged"]}
    on = eng["on"]
    assert (on["prompt_tokens"], on["cached_tokens"]) == (4108, 2048)
    assert on["cached_share"] == pytest.approx(2048 / 4108, rel=1e-12)
    assert on["prefix_cache"] is True and on["cache_used"] is True
    assert not warned(s, W.NOT_ENGAGED, "on")
    off = eng["off"]
    assert (off["prompt_tokens"], off["cached_tokens"], off["cache_used"]) == (4108 + 20, 0, False)
    spec = eng["spec"]
    assert (spec["draft_tokens"], spec["accepted_tokens"]) == (400, 320)
    assert spec["acceptance"] == pytest.approx(0.8) and spec["drafter"] is True
    assert (spec["prompt_tokens"], spec["cached_tokens"]) == (4108, 2048)
    assert not warned(s, W.ENGAGEMENT_UNKNOWN, "spec")


def test_the_load_rows_and_engagement_count_the_same_load_calls():
    """The load row's cached tokens (its measured successful calls) are the load calls' part of engaged's."""
    s = _summary()
    row = next(r for r in s["load"] if r["arm"] == "on")
    assert (row["cached_tokens"], row["input_tokens"]) == (2048, 4096)
