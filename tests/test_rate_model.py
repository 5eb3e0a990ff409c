"""The rate model's formulas, by hand."""

from __future__ import annotations

import pytest

from leverbench.analysis.rate_model import decode_seconds, from_rates_row, prefill_seconds

MODEL = {"prefill": {"a_s": 0.1, "b_s_per_token": 0.001, "c_s_per_token2": 1e-6},
         "decode": {"d0_s_per_token": 0.02, "d1_s_per_token_per_ctx": 1e-5}}


def test_prefill_seconds_by_hand():
    # 1000 uncached after 500 cached: 0.1 + 0.001·1000 + 1e-6·1000·(500 + 500) = 0.1 + 1 + 1 = 2.1
    assert prefill_seconds(MODEL, 1000, 500) == pytest.approx(2.1)
    assert prefill_seconds(MODEL, 0, 500) == pytest.approx(0.1)


def test_decode_seconds_by_hand():
    # 10 tokens from context 1000: 10·0.02 + 1e-5·(10·1000 + 10·9/2) = 0.2 + 1e-5·10045 = 0.30045
    assert decode_seconds(MODEL, 1000, 10) == pytest.approx(0.30045)


def test_a_flat_model_from_the_rates_table():
    m = from_rates_row({"arm": "a", "prefill_tps": 1000.0, "prefill_a_s": 0.05, "decode_tps": 50.0})
    assert prefill_seconds(m, 2000, 10_000) == pytest.approx(0.05 + 2.0)  # no position term
    assert decode_seconds(m, 5000, 100) == pytest.approx(2.0)  # no context term
    assert from_rates_row({"arm": "a", "prefill_tps": None, "decode_tps": 50.0}) is None
