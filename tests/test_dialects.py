"""Engines as they speak (issue 11 §4): the simulator's dialects, discovery's knobs, base URLs, and
probes against a strict API.

Each dialect answers as that engine does with its default flags; ground truth is the same in all.
Facts about the real engines: ``tests/data/engines/`` (a real llama-server) and the sources cited
in :mod:`leverbench.engines.simulator.dialects`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import aiohttp
import pytest
import sim_truth
from aiohttp import web
from click.testing import CliRunner
from ledgers import warned
from prometheus_client.parser import text_string_to_metric_families
from test_simulator import FAST, chat, get_json, in_threads, request, stream_chat, user

from leverbench.analysis.base.metrics import arm_metrics
from leverbench.cli import cli
from leverbench.cli import sim as cli_sim
from leverbench.engines import simulator
from leverbench.engines.simulator import SimConfig, SimulatorThread, synthetic_text
from leverbench.engines.simulator.dialects import DIALECTS, SGLANG_DP_SIZE
from leverbench.ledger.reader import read_ledger
from leverbench.ledger.records import CallError, CallRecord, ErrorClass
from leverbench.runner.discover import api_base, api_root, chat_url, endpoint_info, models_url, scrape_metrics
from leverbench.runner.fixed_length import LENGTH_BY_FIELDS, LENGTH_BY_PROMPT, LONG_ANSWER, ask_at_length
from leverbench.runner.send import length_check
from leverbench.schema.warning_kinds import WarningKind as W

DATA = Path(__file__).parent / "data" / "engines"


@contextlib.contextmanager
def sim(**overrides):
    with SimulatorThread(SimConfig(**{**FAST, **overrides})) as thread:
        yield thread


def metric_samples(text: str) -> list[tuple[str, dict, float]]:
    return [(s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def metric_total(text: str, name: str) -> float:
    """A sample name's value summed over its label sets (histogram buckets excluded)."""
    return sum(v for n, labels, v in metric_samples(text) if n == name and "le" not in labels)


def chat_at(base: str, path: str, **body) -> tuple[int, dict]:
    status, raw = request(base, path, body)
    return status, json.loads(raw) if raw else {}


PROMPT = user(synthetic_text(39, "dialects"))  # 40 prompt tokens: 2 whole blocks of 16 can be reused


# --------------------------------------------------------------------------- llama.cpp


def test_llamacpp_dialect_is_todays_surface_with_its_own_metrics():
    with sim(engine_version="b4242-abc", draft_k=2, draft_acceptance=1.0, model_path="/m/x.gguf") as s:
        first = stream_chat(s.base_url, messages=PROMPT, stream_options={"include_usage": True})
        again = chat(s.base_url, messages=PROMPT, cache_prompt=False)  # llama.cpp honours cache_prompt
        props = get_json(s.base_url, "/props")
        slots = get_json(s.base_url, "/slots")
        text = request(s.base_url, "/metrics")[1].decode()
        assert request(s.base_url, "/version")[0] == 404
    assert first.chunks[-1]["timings"]["draft_n"] == 6 * 2 and first.usage_chunk["timings"]["cache_n"] == 0
    assert first.usage_chunk["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert again["timings"]["cache_n"] == 0 and again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert props["build_info"] == "b4242-abc" and props["model_path"] == "/m/x.gguf" and props["total_slots"] == 1
    assert [sl["speculative"] for sl in slots] == [True]
    names = {n for n, _, _ in metric_samples(text)}
    assert {"llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total", "llamacpp:n_decode_total"} <= names
    assert not any(n.startswith(("vllm:", "sglang:")) for n in names)
    assert all(not labels for n, labels, _ in metric_samples(text) if "per_pos" not in n)  # llama.cpp: no labels


# -------------------------------------------------------------------------------- vLLM


def test_vllm_dialect_usage_has_no_cached_tokens_unless_the_flag_is_set():
    for flag in (False, True):
        with sim(dialect="vllm", prompt_tokens_details=flag) as s:
            chat(s.base_url, messages=PROMPT)
            second = stream_chat(s.base_url, messages=PROMPT, stream_options={"include_usage": True})
            plain = chat(s.base_url, messages=PROMPT)
            truth = s.truth()
        usage = second.usage_chunk["usage"]
        assert truth[1]["cached_tokens"] == 32  # the cache worked either way
        assert "timings" not in second.usage_chunk and all("timings" not in c for c in second.chunks)
        assert "timings" not in plain
        # as vLLM 0.32 answers (tests/data/engines/vllm-0.32.0/): 40 tokens = 2 whole blocks of 16, both cached
        if flag:
            assert usage["prompt_tokens_details"] == {"cached_tokens": 32, "created_cache_tokens": 0}
            assert plain["usage"]["prompt_tokens_details"] == {"cached_tokens": 32, "created_cache_tokens": 0,
                                                               "multimodal_tokens": None}
        else:
            assert "prompt_tokens_details" not in usage and plain["usage"]["prompt_tokens_details"] is None
        assert plain["usage"]["completion_tokens_details"] is None and "completion_tokens_details" not in usage
        assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (40, 16, 56)


def test_vllm_dialect_ignores_cache_prompt_and_honours_forced_lengths():
    with sim(dialect="vllm", output_tokens=8) as s:
        chat(s.base_url, messages=PROMPT)
        body = chat(s.base_url, messages=PROMPT, cache_prompt=False, ignore_eos=True, max_tokens=20, bogus=1)
        longer = chat(s.base_url, messages=user("short"), min_tokens=12)
        truth = s.truth()
    assert truth[1]["cached_tokens"] == 32  # cache_prompt: false changed nothing
    assert body["usage"]["completion_tokens"] == 20 and body["choices"][0]["finish_reason"] == "length"
    assert longer["usage"]["completion_tokens"] == 12


def test_vllm_dialect_info_endpoints():
    with sim(dialect="vllm", engine_version="0.11.2", model="served", model_path="/models/smol-hf") as s:
        version = get_json(s.base_url, "/version")
        models = get_json(s.base_url, "/v1/models")
        status, raw = request(s.base_url, "/tokenize", {"model": "served", "prompt": "one two three"})
        bad, _ = request(s.base_url, "/tokenize", {"content": "one two"})  # llama.cpp's shape is not vLLM's
        assert request(s.base_url, "/props")[0] == 404
        assert request(s.base_url, "/health") == (200, b"")
    assert version == {"version": "0.11.2"}
    entry = models["data"][0]
    assert (entry["id"], entry["owned_by"], entry["root"], entry["max_model_len"]) \
        == ("served", "vllm", "/models/smol-hf", 32768)
    tok = json.loads(raw)
    assert status == 200 and tok["count"] == 3 == len(tok["tokens"]) and tok["max_model_len"] == 32768
    assert bad == 400


def test_vllm_dialect_metrics_names_labels_and_truth():
    with sim(dialect="vllm", draft_k=3, draft_acceptance=1.0, slots=1, decode_tps=100) as s:
        for _ in range(3):
            chat(s.base_url, messages=PROMPT)
        in_threads(lambda: chat(s.base_url, messages=user("a b c")), lambda: chat(s.base_url, messages=user("d e f")))
        text = request(s.base_url, "/metrics")[1].decode()
        truth = s.truth()
    samples = metric_samples(text)
    labelled = [labels for n, labels, _ in samples if n == "vllm:prompt_tokens_total"]
    assert labelled == [{"model_name": "sim", "engine": "0"}]
    assert metric_total(text, "vllm:prefix_cache_queries_total") == sum(t["prompt_tokens"] for t in truth) == 3 * 40 + 8
    assert metric_total(text, "vllm:prefix_cache_hits_total") == sum(t["cached_tokens"] for t in truth) == 2 * 32
    assert metric_total(text, "vllm:prompt_tokens_total") == 3 * 40 + 8
    assert metric_total(text, "vllm:generation_tokens_total") == 5 * 16
    assert metric_total(text, "vllm:spec_decode_num_drafts_total") == 5 * 4
    assert metric_total(text, "vllm:spec_decode_num_draft_tokens_total") == sum(t["draft_tokens"] for t in truth)
    assert metric_total(text, "vllm:spec_decode_num_accepted_tokens_total") == sum(t["accepted_tokens"] for t in truth)
    assert metric_total(text, "vllm:request_queue_time_seconds_count") == 5
    assert metric_total(text, "vllm:request_queue_time_seconds_sum") == pytest.approx(sum(t["queue_s"] for t in truth))
    assert max(t["queue_s"] for t in truth) > 0.01  # one of the two concurrent requests waited for the slot
    assert metric_total(text, "vllm:request_prefill_time_seconds_count") == 5
    info = [labels for n, labels, _ in samples if n == "vllm:cache_config_info"]
    assert info and info[0]["enable_prefix_caching"] == "True" and info[0]["block_size"] == "16"


def test_vllm_dialect_without_drafter_or_cache():
    with sim(dialect="vllm", prefix_cache=False) as s:
        chat(s.base_url, messages=PROMPT)
        chat(s.base_url, messages=PROMPT)
        text = request(s.base_url, "/metrics")[1].decode()
    names = {n for n, _, _ in metric_samples(text)}
    assert not any(n.startswith("vllm:spec_decode") for n in names)  # vLLM registers them only with a drafter
    assert metric_total(text, "vllm:prefix_cache_queries_total") == 0 \
        == metric_total(text, "vllm:prefix_cache_hits_total")
    info = [labels for n, labels, _ in metric_samples(text) if n == "vllm:cache_config_info"]
    assert info[0]["enable_prefix_caching"] == "False"


# ------------------------------------------------------------------------------ SGLang


def test_sglang_dialect_usage_and_endpoints():
    with sim(dialect="sglang", engine_version="0.5.4", reasoning_tokens=3) as s:
        chat(s.base_url, messages=PROMPT)
        plain = chat(s.base_url, messages=PROMPT)
        info = get_json(s.base_url, "/get_server_info")
        model_info = get_json(s.base_url, "/get_model_info")
        status, raw = request(s.base_url, "/v1/chat/completions", {"messages": []})
    with sim(dialect="sglang", prompt_tokens_details=True) as s:
        chat(s.base_url, messages=PROMPT)
        reported = chat(s.base_url, messages=PROMPT)
    assert plain["usage"]["prompt_tokens_details"] is None and plain["usage"]["reasoning_tokens"] == 3
    assert "timings" not in plain
    assert reported["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}
    assert info["version"] == "0.5.4" and info["disable_radix_cache"] is False and info["dp_size"] == SGLANG_DP_SIZE
    assert info["speculative_algorithm"] is None and model_info["model_path"] == "sim"
    error = json.loads(raw)
    assert status == 400 and error["object"] == "error" and "messages" in error["message"]


def test_sglang_dialect_metrics_come_in_several_label_sets_that_sum_to_the_truth():
    with sim(dialect="sglang", metrics="on", draft_k=2, draft_acceptance=0.5) as s:
        before = asyncio.run(_scrape(s.base_url))
        for _ in range(4):
            chat(s.base_url, messages=PROMPT)
        text = request(s.base_url, "/metrics")[1].decode()
        after = asyncio.run(_scrape(s.base_url))
        truth = s.truth()
    queue_sets = [labels for n, labels, _ in metric_samples(text) if n == "sglang:queue_time_seconds_count"]
    assert sorted(labels["dp_rank"] for labels in queue_sets) == ["0", "1"]  # more than one label set per name
    assert all(labels["model_name"] == "sim" and "tp_rank" in labels for labels in queue_sets)
    assert metric_total(text, "sglang:queue_time_seconds_count") == 4
    assert metric_total(text, "sglang:prompt_tokens_total") == 4 * 40
    assert metric_total(text, "sglang:cached_tokens_total") == sum(t["cached_tokens"] for t in truth) == 3 * 32
    assert metric_total(text, "sglang:generation_tokens_total") == 4 * 16
    lengths = [v for n, _, v in metric_samples(text) if n == "sglang:spec_accept_length"]
    assert lengths == [2.0, 2.0]  # 1 + round(2 × 0.5) tokens per verify step on both ranks
    # the analysis sums each counter over its label sets
    figures = arm_metrics(before or {}, after)
    assert figures["queue_s_per_request"] == pytest.approx(sum(t["queue_s"] for t in truth) / 4)
    # the block's cached share comes from the counters; SGLang's cache_hit_rate gauge is its last prefill batch's
    assert figures["prefix_cache_hit_share"] == pytest.approx(3 * 32 / (4 * 40))
    rates = [v for n, _, v in metric_samples(text) if n == "sglang:cache_hit_rate"]
    assert sorted(rates) == [32 / 40, 32 / 40]  # each rank's last request found 32 of its 40 tokens cached


def test_sglang_serves_no_metrics_by_default_like_sglang():
    with sim(dialect="sglang") as s:
        chat(s.base_url, messages=PROMPT)
        status = request(s.base_url, "/metrics")[0]
        info = get_json(s.base_url, "/get_server_info")
    assert status == 404 and info["enable_metrics"] is False


async def _scrape(base: str) -> dict[str, float] | None:
    async with aiohttp.ClientSession() as session:
        return await scrape_metrics(session, base + "/metrics", {})


# ------------------------------------------------------------------------------ OpenAI


def test_openai_dialect_rejects_unknown_fields_like_openai():
    with sim(dialect="openai") as s:
        one = chat_at(s.base_url, "/v1/chat/completions", messages=PROMPT, ignore_eos=True)
        two = chat_at(s.base_url, "/v1/chat/completions", messages=PROMPT, min_tokens=5, cache_prompt=False)
        ok = chat_at(s.base_url, "/v1/chat/completions", messages=PROMPT, max_completion_tokens=4, temperature=0,
                     stream_options={"include_usage": True}, seed=1, top_p=1, stop=["x"], user="u")
        again = chat_at(s.base_url, "/v1/chat/completions", messages=PROMPT)
        missing = [request(s.base_url, path)[0] for path in ("/metrics", "/props", "/version", "/health")]
        tokenize = request(s.base_url, "/tokenize", {"content": "a"})[0]
        truth = s.truth()
    assert one == (400, {"error": {"message": "Unrecognized request argument supplied: ignore_eos",
                                   "type": "invalid_request_error", "param": None, "code": None}})
    assert (two[0] == 400
            and two[1]["error"]["message"] == "Unrecognized request arguments supplied: cache_prompt, min_tokens")
    assert ok[0] == 200 and ok[1]["usage"]["completion_tokens"] == 4
    assert again[1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 32  # OpenAI reports cached tokens
    assert missing == [404] * 4 and tokenize == 404
    assert len(truth) == 2  # the rejected requests were never served


def test_openai_dialect_base_path():
    with sim(dialect="openai", base_path="/v1beta/openai") as s:
        status, body = chat_at(s.base_url, "/v1beta/openai/chat/completions", messages=PROMPT)
        models = get_json(s.base_url, "/v1beta/openai/models")
        assert request(s.base_url, "/v1/chat/completions", {"messages": PROMPT})[0] == 404
    assert status == 200 and body["usage"]["prompt_tokens"] == 40
    assert models["data"][0]["id"] == "sim" and models["sim"]["dialect"] == "openai"


# --------------------------------------------------------------------------- all of them


def test_ground_truth_is_the_same_in_every_dialect():
    """Same requests, same cache, same answers: only the wording differs."""
    seen = {}
    for dialect in DIALECTS:
        with sim(dialect=dialect, draft_k=2, draft_acceptance=0.5) as s:
            chat(s.base_url, messages=PROMPT)
            stream_chat(s.base_url, messages=PROMPT, stream_options={"include_usage": True})
            chat(s.base_url, messages=user("tiny"), max_tokens=5)
            seen[dialect] = [(t["prompt_tokens"], t["cached_tokens"], t["completion_tokens"], t["draft_tokens"],
                              t["accepted_tokens"], t["finish_reason"], t["fault"]) for t in s.truth()]
    assert seen["vllm"] == seen["sglang"] == seen["openai"] == seen["llama.cpp"]
    assert seen["llama.cpp"][1][1] == 32


def test_cli_takes_the_dialect_and_rejects_unknown_ones(monkeypatch):
    got = {}
    monkeypatch.setattr(simulator, "serve", lambda cfg, host, port, on_ready=None: got.update(cfg=cfg))
    res = CliRunner().invoke(cli_sim.sim_command, ["--dialect", "vllm", "--prompt-tokens-details",
                                                   "--engine-version", "0.9", "--base-path", "/v2"])
    assert res.exit_code == 0, res.output
    cfg = got["cfg"]
    assert (cfg.dialect, cfg.prompt_tokens_details, cfg.engine_version, cfg.base_path) == ("vllm", True, "0.9", "/v2")
    assert CliRunner().invoke(cli_sim.sim_command, ["--dialect", "tgi"]).exit_code == 2
    assert CliRunner().invoke(cli_sim.sim_command, ["--base-path", "v1/"]).exit_code == 2
    with pytest.raises(ValueError, match="dialect"):
        SimConfig(dialect="ollama")


# ----------------------------------------------------------------------------- base URLs


@pytest.mark.parametrize("base, chat, root", [
    ("http://h:8000", "http://h:8000/v1/chat/completions", "http://h:8000"),
    ("http://h:8000/", "http://h:8000/v1/chat/completions", "http://h:8000"),
    ("http://h:8000/v1", "http://h:8000/v1/chat/completions", "http://h:8000"),
    ("http://h:8000/v1/", "http://h:8000/v1/chat/completions", "http://h:8000"),
    ("https://h.example/v1beta/openai", "https://h.example/v1beta/openai/chat/completions", "https://h.example"),
    ("https://h.example/v1beta/openai/", "https://h.example/v1beta/openai/chat/completions", "https://h.example"),
    ("http://proxy:80/llama/v1", "http://proxy:80/llama/v1/chat/completions", "http://proxy:80/llama"),
    ("http://h:8000/v1/chat/completions", "http://h:8000/v1/chat/completions", "http://h:8000"),
])
def test_base_urls(base, chat, root):
    assert chat_url(base) == chat and api_root(base) == root
    assert models_url(base) == api_base(base) + "/models" and chat == api_base(base) + "/chat/completions"


def test_a_base_urls_query_goes_with_every_api_call():
    """Azure OpenAI takes its API version in the query string of every call."""
    base = "https://r.openai.azure.com/openai/deployments/d?api-version=2024-10-21"
    assert chat_url(base) == "https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-10-21"
    assert models_url(base) == "https://r.openai.azure.com/openai/deployments/d/models?api-version=2024-10-21"


# ----------------------------------------------------------------------------- discovery


def discover(base: str, **kw) -> dict:
    async def go() -> dict:
        async with aiohttp.ClientSession() as session:
            return await endpoint_info(session, base, {}, **kw)

    return asyncio.run(go())


def test_discovery_knobs_per_dialect():
    with sim(engine_version="b5001-abc", model_path="/models/smol.Q4.gguf", slots=2) as s:
        llama = discover(s.base_url)["knobs"]
    with sim(engine_version="b5001-abc", draft_k=3, draft_acceptance=0.5) as s:
        llama_drafter = discover(s.base_url + "/v1")["knobs"]
    with sim(dialect="vllm", engine_version="0.11.0", model="served", model_path="/hf/SmolLM2-135M",
             cache_block=32) as s:
        vllm = discover(s.base_url + "/v1")
    with sim(dialect="vllm", prefix_cache=False, draft_k=2) as s:
        vllm_other = discover(s.base_url)["knobs"]
    with sim(dialect="sglang", engine_version="0.5.4", prefix_cache=False, draft_k=2) as s:
        sglang = discover(s.base_url)["knobs"]
    with sim(dialect="openai", base_path="/v1beta/openai") as s:
        openai = discover(s.base_url + "/v1beta/openai")
    assert llama == {"engine": "llama.cpp", "engine_version": "b5001-abc", "simulator": True, "model": "sim",
                     "model_file": "smol.Q4.gguf", "slots": 2, "context_length": 32768, "drafter": False}
    assert llama_drafter["drafter"] is True
    assert vllm["knobs"] == {"engine": "vllm", "engine_version": "0.11.0", "prefix_cache": True, "block_size": 32,
                             "drafter": False, "simulator": True, "model": "served", "model_file": "SmolLM2-135M",
                             "context_length": 32768}
    assert vllm["cache_config"]["enable_prefix_caching"] == "True" and vllm["version"] == {"version": "0.11.0"}
    assert (vllm_other["prefix_cache"], vllm_other["drafter"]) == (False, True)
    assert {k: sglang[k] for k in ("engine", "engine_version", "prefix_cache", "drafter",
                                   "tensor_parallel", "data_parallel", "simulator")} == {
        "engine": "sglang", "engine_version": "0.5.4", "prefix_cache": False, "drafter": "NGRAM",
        "tensor_parallel": 1, "data_parallel": 2, "simulator": True}
    assert "drafter_method" not in sglang  # one drafter is one knob: its method is the value
    assert openai["knobs"] == {"simulator": True, "model": "sim"}  # a strict API states no engine
    assert openai["models"] == ["sim"] and "props" not in openai


def _fixture_server(files: dict[str, str]):
    """Serve captured answers of a real engine: path → file under tests/data/engines."""

    async def handler(request: web.Request) -> web.Response:
        name = files.get(request.path)
        if name is None:
            return web.Response(status=404)
        return web.Response(text=(DATA / name).read_text(), content_type="text/plain" if name.endswith(".txt")
                            else "application/json")

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    return app


def discover_fixture(files: dict[str, str], **kw) -> dict:
    async def go() -> dict:
        runner = web.AppRunner(_fixture_server(files))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as session:
                return await endpoint_info(session, f"http://127.0.0.1:{port}/v1", {}, **kw)
        finally:
            await runner.cleanup()

    return asyncio.run(go())


LLAMA = {"/props": "llama.cpp-b11434/props.json", "/v1/models": "llama.cpp-b11434/models.json",
         "/slots": "llama.cpp-b11434/slots.json", "/metrics": "llama.cpp-b11434/metrics.txt"}


def test_discovery_of_the_real_llama_server():
    """llama-server build 11434 (the embedded engine) as it answered: its /props says ``b0-unknown``
    (built without git data), so the build comes from the package the runner started."""
    plain = discover_fixture(LLAMA)
    embedded = discover_fixture(LLAMA, known={"engine": "llama.cpp llama-server", "model_file": "x.gguf",
                                              "engine_build": {"package_version": "11434.0.0"}, "engine_args": []})
    spec = discover_fixture({**LLAMA, "/slots": "llama.cpp-b11434/slots-spec.json"})
    args = discover_fixture(LLAMA, known={"engine_args": ["--spec-type", "ngram-mod", "--spec-draft-n-max", "7"]})
    assert plain["knobs"] == {"engine": "llama.cpp", "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
                              "model_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "slots": 1, "context_length": 4096,
                              "drafter": False}
    assert plain["props"]["build_info"] == "b0-unknown"
    assert embedded["knobs"]["engine_version"] == "b11434"
    assert spec["knobs"]["drafter"] is True
    assert args["knobs"]["drafter"] == "ngram-mod" and "drafter_method" not in args["knobs"]


def test_discovery_survives_an_endpoint_that_answers_nothing():
    assert discover_fixture({}) == {"knobs": {}}


# --------------------------------------------------------------------- probes, strict API


def test_length_check_and_long_answer_prompt():
    forced = {"messages": [], "ignore_eos": True, "min_tokens": 8}
    def rejected(status: int) -> CallRecord:
        return CallRecord(error=CallError(ErrorClass.HTTP_STATUS, "HTTP 400: ..."), status=status)
    assert length_check(rejected(400), forced, 8) == {"rejected_fields": ["ignore_eos", "min_tokens"], "retried": True}
    assert length_check(rejected(422), forced, 8)["rejected_fields"] == ["ignore_eos", "min_tokens"]
    assert length_check(rejected(500), forced, 8) == {}
    assert length_check(rejected(400), {"messages": []}, 8) == {}  # a 400 to a plain body is not a rejected field
    assert length_check(CallRecord(error=None, completion_tokens=8), forced, 8) == {"length_verified": True}
    assert length_check(CallRecord(error=None, completion_tokens=5), {}, 8) == {"length_verified": False}
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    assert ask_at_length(msgs) == [msgs[0], {"role": "user", "content": "q\n\n" + LONG_ANSWER}]
    assert msgs[1]["content"] == "q"  # not changed in place
    parts = [{"role": "user", "content": [{"type": "text", "text": "q"}]}]
    assert ask_at_length(parts)[0]["content"][-1] == {"type": "text", "text": LONG_ANSWER}
    assert ask_at_length([{"role": "assistant", "content": "a"}])[-1] == {"role": "user", "content": LONG_ANSWER}


PREFILL_TPS, DECODE_TPS, DOC_TOKENS = 20_000.0, 400.0, 4000


def test_probes_against_a_strict_api_fall_back_to_a_prompt_and_stay_within_10_percent(tmp_path):
    (tmp_path / "doc.txt").write_text(synthetic_text(DOC_TOKENS, "strict"))
    cfg = SimConfig(dialect="openai", base_path="/v1beta/openai", prefill_tps=PREFILL_TPS, decode_tps=DECODE_TPS,
                    output_tokens=5000, prefix_cache=False)
    with SimulatorThread(cfg) as s:
        exp = tmp_path / "exp.toml"
        exp.write_text(f'''
[experiment]
name = "strict"
repeats = 1
baseline = "hosted"
sentinel_tokens = 16

[[arms]]
name = "hosted"
role = "baseline"
base_url = "{s.base_url}/v1beta/openai"
model = "sim"

[[cases]]
name = "read"
documents = ["doc.txt"]
prompt = "summarise"
max_tokens = 24

[probes]
output_tokens = [16, 128]
repeats = 3
''')
        res = CliRunner().invoke(cli, ["run", str(exp), "--out", str(tmp_path / "run")], catch_exceptions=False)
        truth = s.truth()
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    probe = next(p for p in summary["probes"] if p["arm"] == "hosted")
    # against the same measurement made on the simulator's records of the probe calls (this dialect sends no
    # timings to match them by: they are the calls of the document's prompt at each probe length, three each)
    at = {n: [t for t in truth if t["completion_tokens"] == n and t["prompt_tokens"] > DOC_TOKENS]
          for n in (probe["n1"], probe["n2"])}
    assert [len(rs) for rs in at.values()] == [3, 3]
    true = sim_truth.probe(at[probe["n1"]], at[probe["n2"]])
    assert true["decode_tps"] == pytest.approx(DECODE_TPS, rel=0.5)  # (sanity: the set rate, roughly)
    assert probe["decode_tps"] == pytest.approx(true["decode_tps"], rel=0.10)
    assert probe["prefill_s"] == pytest.approx(true["prefill_s"], rel=0.10)
    led = read_ledger(tmp_path / "run")
    fixed = [r for r in led.records if r["kind"] in ("warmup", "probe", "sentinel")]
    rejected = [r for r in fixed if r.get("rejected_fields")]
    # only the arm's first forced call was rejected; it stays in the ledger, marked, and was sent again by prompt
    assert len(rejected) == 1 and fixed[0] is rejected[0]
    assert rejected[0]["status"] == 400 and rejected[0]["retried"] is True
    assert rejected[0]["length_method"] == LENGTH_BY_FIELDS and "ignore_eos" in rejected[0]["error"]["message"]
    rest = fixed[1:]
    assert rest and all(r["length_method"] == LENGTH_BY_PROMPT and r["error"] is None for r in rest)
    assert all(r["length_verified"] for r in rest) and all("ignore_eos" not in r["request"] for r in rest)
    assert summary["run"]["failed_calls"] == 0  # the rejected attempt was retried, not failed
    assert not warned(summary, W.PROBE_FAILED)
    assert led.header["arms"]["hosted"]["discovered"]["knobs"] == {"simulator": True, "model": "sim"}
