"""The lever registry (issue 24 part 1): one module per lever family, and every lookup the analysis and the
runner make of a lever answered from it, as the tables they held before said."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from leverbench.analysis.base import knobs, metrics
from leverbench.levers import by_fact, by_flag, engaged_in, lever, levers, phase_of, registry, used_in

LEVERS_DIR = Path(__file__).resolve().parents[1] / "src" / "leverbench" / "levers"

#: What analysis/knobs.py named before the registry (its FACT_KNOB, FLAG_KNOB, DRAFTER_FLAG_PREFIXES).
OLD_FACT_KNOB = {"props.build_info": "engine_version", "version.version": "engine_version",
                 "engine_build.": "engine_version", "server_info.version": "engine_version",
                 "props.model_path": "model_file", "model_file": "model_file",
                 "models": "model", "server_info.served_model_name": "model", "server_info.model_path": "model_file",
                 "props.total_slots": "slots", "server_info.max_running_requests": "slots",
                 "props.n_ctx": "context_length", "ctx_size": "context_length",
                 "cache_config.enable_prefix_caching": "prefix_cache",
                 "server_info.disable_radix_cache": "prefix_cache", "cache_config.block_size": "block_size",
                 "server_info.speculative_algorithm": "drafter", "server_info.speculative_num_draft_tokens": "drafter",
                 "server_info.tp_size": "tensor_parallel", "server_info.dp_size": "data_parallel",
                 "server_info.device": "device", "engine": "engine", "model_source": "model_file", "parallel": "slots",
                 "model_id": "model"}
OLD_FLAG_KNOB = {"-np": "slots", "--parallel": "slots", "-c": "context_length", "--ctx-size": "context_length",
                 "-t": "fact:threads", "--threads": "fact:threads", "-m": "model_file", "--model": "model_file",
                 "--max-model-len": "context_length", "--enable-prefix-caching": "prefix_cache",
                 "--no-enable-prefix-caching": "prefix_cache", "--tensor-parallel-size": "tensor_parallel",
                 "-tp": "tensor_parallel"}
OLD_DRAFTER_FLAG_PREFIXES = ("--spec", "--draft", "-md", "--speculative", "--model-draft", "-hfd", "--hf-repo-draft",
                             "-ngl-draft", "--gpu-layers-draft", "-cd", "--ctx-size-draft", "-devd", "--device-draft")


def test_the_families_are_there_each_knob_named_once():
    names = {x.name for x in levers()}
    assert {"prefix_cache", "drafter", "slots", "batch_tokens", "quantization", "chunked_prefill", "engine",
            "engine_version", "model", "model_file"} <= names
    every = [n for x in levers() for n in x.names()]
    assert len(every) == len(set(every))
    assert [x.rank for x in levers()] == sorted(x.rank for x in levers())


def test_lookups_by_name_alias_flag_and_fact():
    assert lever("cache_prompt").name == lever(" Prefix_Cache ").name == "prefix_cache"
    assert lever("speculative_decoding").name == "drafter" and lever("no such knob") is None
    assert by_flag("--draft-max").name == by_flag("--speculative-config").name == "drafter"
    assert by_flag("-cd").name == "drafter" and by_flag("-c").name == "context_length"  # the prefix first
    assert by_flag("--max-num-batched-tokens").name == "batch_tokens"
    assert by_flag("--enable-chunked-prefill").name == "chunked_prefill"
    assert by_flag("--quantization").name == "quantization" and by_flag("--cache-reuse") is None
    assert by_fact("engine_build.build_number").name == "engine_version"
    assert by_fact("cache_config.enable_prefix_caching").name == "prefix_cache" and by_fact("props.sim") is None


def test_the_phase_each_family_acts_on_and_how_the_projection_treats_it():
    assert [phase_of(k) for k in ("prefix_cache", "radix_cache", "drafter", "draft_model", "chunked_prefill",
                                  "slots", "quantization", "engine_version", "request.top_k")] == \
        ["prefill", "prefill", "decode", "decode", "prefill", "both", "both", "both", "both"]
    assert lever("slots").phases == ("queueing",)  # the projection serves one call at a time: no queue there
    assert knobs.lever_phase("DRAFTER") == "decode"


def test_the_tables_analysis_reads_are_the_ones_it_held_before():
    assert {k: knobs.FACT_KNOB[k] for k in OLD_FACT_KNOB} == OLD_FACT_KNOB
    assert {k: knobs.FLAG_KNOB[k] for k in OLD_FLAG_KNOB} == OLD_FLAG_KNOB
    assert tuple(p for p, k in registry.flag_prefixes().items() if k == "drafter") == OLD_DRAFTER_FLAG_PREFIXES
    assert metrics._SHARES == {
        "prefix_cache_hit_share": ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"),
        "sglang_prefix_cache_hit_share": ("sglang:cached_tokens", "sglang:prompt_tokens"),
        "drafter_acceptance": ("vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_draft_tokens"),
        "llamacpp_drafter_acceptance": ("llamacpp:spec_decode_num_accepted_tokens_total",
                                        "llamacpp:spec_decode_num_draft_tokens_total")}
    assert list(metrics._DELTAS) == ["cached_prompt_tokens", "prefix_cache_hit_tokens", "prefix_cache_query_tokens",
                                     "draft_tokens", "accepted_tokens"]
    assert metrics._GAUGES == {"sglang_cache_hit_rate": "sglang:cache_hit_rate",
                               "sglang_spec_accept_length": "sglang:spec_accept_length"}
    assert registry.request_fields() == {"cache_prompt": "prefix_cache"}


@pytest.mark.parametrize(("row", "knob", "used", "engaged"), [
    ({"cache_used": True, "prefix_cache": None}, "prefix_cache", True, None),  # used, not turned on there
    ({"drafter_used": False, "drafter": False}, "drafter", False, False),
    ({"cache_used": True, "prefix_cache": True}, "cache_prompt", None, None),  # an alias is another knob in a row
    ({"levers": {"x": {"used": True, "source": "s"}}}, "slots", None, None),  # no judge, no answer
    ({"cache_used": True}, "request.top_k", None, None),
])
def test_what_an_engaged_row_says_of_a_lever(row, knob, used, engaged):
    assert used_in(row, knob) is used and engaged_in(row, knob) is engaged


def test_the_package_sits_below_analysis_and_the_runner():
    for path in LEVERS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 or node.module == "json_types", (path.name, node.module)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any(n.startswith("leverbench.") and not n.startswith(("leverbench.levers",
                               "leverbench.json_types")) for n in names), path.name


def test_a_knob_an_endpoint_reported_as_its_default_is_off_there_not_unknown(monkeypatch):
    """A lever discovery states only when on (``reported_by``): an arm whose endpoint reported the fact, with
    the default, lacks the knob because it is off; an arm whose endpoint said nothing has it unknown."""
    from leverbench.levers import Lever
    x = Lever(name="cache_bits", summary="", phases=("decode",), projection="decode", words="cache bits",
              reported_by=("cache_config.bits",))
    monkeypatch.setattr(registry, "lever", lambda k: x if k == "cache_bits" else None)
    arms = {"on": {"discovered": {"cache_config": {"bits": "8"}, "knobs": {"cache_bits": "8"}}},
            "default": {"discovered": {"cache_config": {"bits": "auto"}, "knobs": {}}},
            "silent": {"discovered": {"knobs": {}}}}
    found, _ = knobs.all_arm_knobs(arms, {}, list(arms))
    assert "cache_bits" not in found["default"] and found["silent"]["cache_bits"] == knobs.UNKNOWN


@pytest.mark.parametrize("name", ["demo1", "demo2", "demo3", "handmade", "sim"])
def test_the_golden_summaries_engaged_rows_are_the_schemas(name):
    import json

    from pydantic import TypeAdapter

    from leverbench.schema.lever_rows import EngagedRow
    golden = Path(__file__).parent / "golden" / f"{name}.summary.json"
    rows = json.loads(golden.read_text(encoding="utf-8"))["engaged"]
    assert TypeAdapter(list[EngagedRow]).validate_python(rows) == rows


@pytest.mark.parametrize(("args", "lever"), [
    (["--quantization", "fp8"], "quantization"), (["-q", "fp8"], "quantization"),
    (["--max-num-seqs", "8"], "slots"), (["--kv-cache-dtype", "fp8"], "kv_cache_dtype"),
])
def test_a_vllm_flag_against_none_is_a_controlled_pair_measuring_its_lever(args, lever):
    """Two vLLM arms the tool started, one with a lever's flag, one without: one knob differs (the other arm runs
    the engine's default, known, not an unknown value), so the pair is controlled and measures that lever
    (issue 24's review: quantisation and chunked prefill had become uncontrolled, -q was a second knob, and
    --max-num-seqs was no lever at all)."""
    from leverbench.analysis.base.knobs import all_arm_knobs, comparisons
    from leverbench.runner.discover import knobs as discovered_knobs

    def vllm(a):
        raw = {"known": {"engine": "vllm", "engine_args": a}, "version": {"version": "0.32.0"},
               "models": [{"id": "m", "owned_by": "vllm", "root": "m", "max_model_len": 4096}]}
        return {"engine_args": a, "models": ["m"], "version": {"version": "0.32.0"}, "knobs": discovered_knobs(raw)}

    arms = {"base": {"conditions": {}, "discovered": vllm([])}, "x": {"conditions": {}, "discovered": vllm(args)}}
    knobs, _ = all_arm_knobs(arms, {}, ["base", "x"])
    [c] = comparisons(["base", "x"], "base", knobs, {"base": "baseline", "x": "treatment"})
    assert (c.knobs, c.lever, c.unknown, c.controlled) == ((lever,), lever, (), True)


def test_chunked_prefill_is_vllm_s_default():
    """vLLM's V1 engine chunks prefill unless told not to: --enable-chunked-prefill changes nothing (the knob is on
    for both arms), --no-enable-chunked-prefill turns the lever off."""
    from leverbench.runner.discover import knobs as discovered_knobs

    def knob(a):
        return discovered_knobs({"known": {"engine": "vllm", "engine_args": a}, "version": {"version": "0.32.0"},
                                 "models": [{"id": "m", "owned_by": "vllm", "root": "m"}]}).get("chunked_prefill")

    assert knob([]) is True and knob(["--enable-chunked-prefill"]) is True
    assert knob(["--no-enable-chunked-prefill"]) is False


def test_whatif_knows_the_prefix_cache_by_every_name_the_registry_has():
    """whatif's arms read the prefix cache from the knobs by the lever's names (issue 24's review: its own list
    missed prompt_cache and radix_cache)."""
    from leverbench.analysis.whatif.forecast import prefix_cache_on

    for name in lever("prefix_cache").names():
        assert prefix_cache_on({name: True}) is True and prefix_cache_on({name: "off"}) is False
    assert prefix_cache_on({"drafter": True}) is None
