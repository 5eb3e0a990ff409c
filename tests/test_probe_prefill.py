"""The probe's prefill (issue 22, defect 8): what is left of the latency at n1 once the c1 − 1 tokens decoded
after the first are taken off — prefill_s = t1 − (c1 − 1) / decode_tps.  Made-up probe calls with a known TTFT
and a known time per token; every expected number is worked out here by hand."""

from __future__ import annotations

import pytest
from ledgers import call, header, ledger, turn, warned

from leverbench.analysis.rates.probes import measure
from leverbench.analysis.summary import summarize
from leverbench.schema.warning_kinds import WarningKind as W


def _probe(n: int, ttft: float, per_token: float, streamed: bool = True) -> dict:
    """A call that generated *n* tokens: its first after *ttft* s, each later one *per_token* s after the last."""
    return {"completion_tokens": n, "prompt_tokens": 500, "ttft_s": ttft if streamed else None,
            "latency_s": ttft + (n - 1) * per_token, "error": None}


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "latency-only"])
def test_prefill_is_the_ttft_when_decode_is_linear(streamed):
    """TTFT 50 ms, 30 ms a token, n1 = 16, n2 = 128: t1 = 0.05 + 15 × 0.03 = 0.50 s, t2 = 0.05 + 127 × 0.03 = 3.86 s.
    Stream: f = latency − TTFT = 0.45, 3.81 → decode_tps = 112 / 3.36 = 33.333 tok/s; latency only:
    112 / (3.86 − 0.50) = 33.333 tok/s.  prefill_s = t1 − (c1 − 1) / decode_tps = 0.50 − 15 × 0.03 = 0.05 s
    (main: t1 − c1 / decode_tps = 0.50 − 0.48 = 0.02 s, one token short)."""
    rows1 = [_probe(16, 0.05, 0.03, streamed) for _ in range(3)]
    rows2 = [_probe(128, 0.05, 0.03, streamed) for _ in range(3)]
    m = measure(rows1, rows2)
    assert m["decode_tps"] == pytest.approx(1 / 0.03, rel=1e-9)
    assert m["prefill_s"] == pytest.approx(0.05, rel=1e-9)


def test_a_short_prompt_does_not_go_negative():
    """TTFT 10 ms (a short prompt), 30 ms a token, n1 = 4, n2 = 32: t1 = 0.01 + 3 × 0.03 = 0.10 s; prefill_s =
    0.10 − 3 × 0.03 = 0.01 s (main: 0.10 − 4 × 0.03 = −0.02 s, and the "negative prefill" warning), in the summary
    of a hand-made ledger with one turn per arm."""
    recs = turn("base", "r", 0, 1.0, 20)
    for n in (4, 32):
        for i in range(3):
            recs.append(call("base", "r", i, kind="probe", probe_tokens=n, out=n, prompt=20, ttft=0.01,
                             latency=0.01 + (n - 1) * 0.03))
    s = summarize(ledger(header({"base": {}}, ["r"]), recs))
    p = next(x for x in s["probes"] if x["arm"] == "base")
    assert p["decode_tps"] == pytest.approx(28 / (0.93 - 0.09), rel=1e-9)  # (32 − 4) / (f2 − f1) = 1 / 0.03
    assert p["prefill_s"] == pytest.approx(0.01, rel=1e-6)
    assert not warned(s, W.PROBE_NEGATIVE_PREFILL)


def test_a_probe_without_its_forced_length_is_left_out():
    """A probe record whose ``probe_tokens`` is null (the ledger's schema allows it) measures no length: it is left
    out, and the probe of the same case at 4 and 32 tokens is the one above, unchanged (a review found the typed
    rewrite raising on it, an internal error)."""
    recs = turn("base", "r", 0, 1.0, 20)
    for n in (4, 32):
        for i in range(3):
            recs.append(call("base", "r", i, kind="probe", probe_tokens=n, out=n, prompt=20, ttft=0.01,
                             latency=0.01 + (n - 1) * 0.03))
    recs.append(call("base", "r", 3, kind="probe", probe_tokens=None, out=7, prompt=20, ttft=0.01, latency=0.5))
    s = summarize(ledger(header({"base": {}}, ["r"]), recs))
    (p,) = [x for x in s["probes"] if x["arm"] == "base"]
    assert (p["n1"], p["n2"], p["repeats"]) == (4, 32, 3)
    assert p["decode_tps"] == pytest.approx(28 / (0.93 - 0.09), rel=1e-9)
