"""The KV-cache dtype, a lever added as one module (issue 24's acceptance test): it appears in the knobs, the
engagement, the projection and the recommendation without any other file changing."""

from __future__ import annotations

import pytest
from ledgers import header, ledger, probes_for, timed, turn, warned

from leverbench.analysis.base.knobs import all_arm_knobs, comparisons, lever_phase
from leverbench.analysis.summary import summarize
from leverbench.analysis.traffic.words import recommend
from leverbench.levers import by_fact, by_flag, lever
from leverbench.runner.discover import knobs as discovered_knobs

VLLM_MODELS = [{"id": "m", "owned_by": "vllm", "root": "m", "max_model_len": 4096}]


def _vllm(args: list[str], cache_dtype: str) -> dict:
    """A vLLM endpoint's discovered record as discovery writes it (its knobs from the raw answers)."""
    cache = {"enable_prefix_caching": "False", "block_size": "16", "cache_dtype": cache_dtype}
    raw = {"known": {"engine": "vllm", "engine_args": args}, "models": VLLM_MODELS,
           "metrics": {"vllm:cache_config_info": [cache]}, "version": {"version": "0.11.0"}}
    return {"engine_args": args, "cache_config": cache, "models": ["m"], "version": {"version": "0.11.0"},
            "knobs": discovered_knobs(raw)}


def test_it_is_found_by_name_flag_and_fact_and_acts_on_decode():
    assert lever("kv_cache_dtype").words == "KV-cache dtype" and lever("cache_type_k").name == "kv_cache_dtype"
    assert {by_flag(f).name for f in ("--kv-cache-dtype", "--cache-type-k", "-ctv")} == {"kv_cache_dtype"}
    assert by_fact("cache_config.cache_dtype").name == by_fact("server_info.kv_cache_dtype").name == "kv_cache_dtype"
    assert lever_phase("kv_cache_dtype") == "decode"


def test_discovery_names_it_from_the_arguments_or_the_engines_report():
    assert _vllm(["--kv-cache-dtype", "fp8"], "fp8")["knobs"]["kv_cache_dtype"] == "fp8"
    assert "kv_cache_dtype" not in _vllm([], "auto")["knobs"]  # the model's own dtype: no knob
    assert discovered_knobs({"known": {"engine": "llama.cpp", "engine_args": ["-ctk", "q8_0", "-ctv", "q8_0"]},
                             "props": {}})["kv_cache_dtype"] == "q8_0"
    assert discovered_knobs({"server_info": {"kv_cache_dtype": "fp8_e5m2"}})["kv_cache_dtype"] == "fp8_e5m2"


def test_an_arm_started_with_it_against_one_without_is_a_controlled_comparison():
    arms = {"base": {"conditions": {}, "discovered": _vllm([], "auto")},
            "fp8": {"conditions": {}, "discovered": _vllm(["--kv-cache-dtype", "fp8"], "fp8")}}
    knobs, contradictions = all_arm_knobs(arms, {}, ["base", "fp8"])
    assert knobs["fp8"]["kv_cache_dtype"] == "fp8" and not any(contradictions.values())
    [comp] = comparisons(["base", "fp8"], "base", knobs, {"base": "baseline", "fp8": "treatment"})
    assert comp.controlled and comp.lever == "kv_cache_dtype" and comp.knobs == ("kv_cache_dtype",)


def _run(fp8_reports: str) -> dict:
    """base and fp8 (started with --kv-cache-dtype fp8; its engine reports *fp8_reports*): the same prefill, fp8
    decoding at 100 tok/s against 50."""
    arms = {"base": {}, "fp8": {}}
    head = header(arms, ["c"])
    head["arms"]["base"]["discovered"] = _vllm([], "auto")
    head["arms"]["fp8"]["discovered"] = _vllm(["--kv-cache-dtype", "fp8"], fp8_reports)
    recs = probes_for(head, {"base": {}}, decode_tps=50.0) + probes_for(head, {"fp8": {}}, decode_tps=100.0)
    for r in range(3):
        for arm, tps in (("base", 50.0), ("fp8", 100.0)):
            c = timed(arm, "c", r, prompt=1000, cached=0, out=200, prefill_tps=1000.0, decode_tps=tps)
            recs += turn(arm, "c", r, c["latency_s"], 200, prompt=1000, calls=[c])
    return summarize(ledger(head, recs), scenario=(1000, 1000))


def test_it_is_engaged_projected_on_decode_and_recommended():
    s = _run("fp8_e4m3")
    eng = {e["arm"]: e for e in s["engaged"]}
    assert eng["fp8"]["levers"]["kv_cache_dtype"] == {"used": True, "source": "discovered cache dtype "
                                                      "(vLLM cache_config_info: fp8_e4m3)"}
    assert "levers" not in eng["base"]  # turned on nowhere else: no judgement
    (row,) = [r for r in s["levers"] if r["lever"] == "kv_cache_dtype"]
    assert row["arm"] == "fp8" and row["vs"] == "base" and row["engaged"] is True and row["multiplier"] > 1.5
    (proj,) = s["projection"]["levers"]
    assert proj["lever"] == "kv_cache_dtype" and proj["phase"] == "decode" and proj["credited"]
    assert proj["saved_s"] == pytest.approx(1000 / 50 - 1000 / 100)
    assert "kv_cache_dtype" in s["projection"]["recommendation"] and "acting on decode" in s["projection"][
        "recommendation"]


def test_an_engine_that_reports_another_dtype_leaves_engagement_unknown():
    s = _run("auto")
    eng = {e["arm"]: e for e in s["engaged"]}
    assert eng["fp8"]["levers"]["kv_cache_dtype"]["used"] is None
    assert any("reports the cache dtype 'auto'" in w["text"] for w in warned(s, "engagement_unknown", "fp8"))


def test_a_decode_bound_traffic_is_told_to_measure_it():
    result = {"overall": {"dominant": "decode", "prefill_share": 0.1, "decode_share": 0.9}, "levers": [],
              "queue": {"measured": False}, "distribution": {"input_output_ratio": 0.5}}
    text = recommend(result)
    assert "the KV-cache dtype (vLLM / SGLang: --kv-cache-dtype fp8" in text


def test_its_engaged_rows_are_the_schemas():
    from pydantic import TypeAdapter

    from leverbench.schema.lever_rows import EngagedRow
    rows = TypeAdapter(list[EngagedRow]).validate_python(_run("fp8")["engaged"])
    assert rows[1]["levers"]["kv_cache_dtype"]["used"] is True
