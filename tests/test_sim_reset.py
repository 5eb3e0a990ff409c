"""The simulator's cache-reset endpoints and its drafter's memory (``SimConfig.cache_reset``, ``draft_memory``).

Each dialect's own reset (llama.cpp ``POST /slots/{id}?action=erase``, vLLM ``POST /reset_prefix_cache``, SGLang
``/flush_cache``) answers as that engine does and empties the prefix cache ("on"), is missing ("off") or answers
the same and keeps the cache ("fake"); a strict API has none.  The drafter's memory outlives every one of them, as
llama.cpp's ngram-mod state outlives a slot erase; only ``/sim/reset`` (a new process) clears it.  Whether a send
hit the cache is read from the dialect's own report (llama.cpp ``timings.cache_n``, vLLM's and SGLang's
``usage.prompt_tokens_details.cached_tokens``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request

import limits
import pytest
from test_simulator import FAST, chat, user

from leverbench.cli import sim as cli_sim
from leverbench.engines.simulator import SimConfig, SimulatorThread, synthetic_text

PROMPT = user(synthetic_text(39, "reset"))  # 40 prompt tokens: 2 whole blocks of 16 (32 tokens) can be reused
RESET = {"llama.cpp": ("POST", "/slots/0?action=erase"), "vllm": ("POST", "/reset_prefix_cache"),
         "sglang": ("POST", "/flush_cache")}
ENGINES = tuple(RESET)
LLAMA_OFF = {"error": {"code": 501, "type": "not_supported_error",
                       "message": "This server does not support slots action. Start it with `--slot-save-path`"}}
SGLANG_FLUSHED = ("Cache flushed.\nPlease check backend logs for more details. "
                  "(When there are running or waiting requests, the operation will not be performed.)\n")


@contextlib.contextmanager
def sim(**overrides):
    details = {"prompt_tokens_details": True} if overrides.get("dialect") in ("vllm", "sglang") else {}
    with SimulatorThread(SimConfig(**{**FAST, **details, **overrides})) as thread:
        yield thread


def call(base: str, method: str, path: str) -> tuple[int, bytes]:
    """One request without a body (POST sends an empty one); the status and the raw answer."""
    req = urllib.request.Request(base + path, data=b"" if method == "POST" else None, method=method)
    try:
        with urllib.request.urlopen(req, timeout=limits.HTTP_S) as resp:  # noqa: S310 (loopback)
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def reset(s: SimulatorThread) -> tuple[int, bytes]:
    return call(s.base_url, *RESET[s.cfg.dialect])


def send(s: SimulatorThread, messages: list[dict] = PROMPT) -> dict:
    return chat(s.base_url, messages=messages)


def cached(answer: dict, dialect: str) -> int:
    """The cached prompt tokens as the engine reports them."""
    if dialect == "llama.cpp":
        return answer["timings"]["cache_n"]
    return answer["usage"]["prompt_tokens_details"]["cached_tokens"]


def sends(s: SimulatorThread, n: int = 1) -> list[int]:
    return [cached(send(s), s.cfg.dialect) for _ in range(n)]


@contextlib.contextmanager
def running(s: SimulatorThread):
    """A slow streamed chat in the background (40 tokens, at least): inside the block its first token has come
    and it is still decoding."""
    first, done = threading.Event(), threading.Event()

    def stream() -> None:
        body = json.dumps({"messages": user(synthetic_text(20, "slow")), "stream": True, "min_tokens": 40}).encode()
        req = urllib.request.Request(s.base_url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=limits.HTTP_S) as resp:  # noqa: S310 (loopback)
            for line in resp:
                if line.startswith(b"data: "):
                    first.set()
        done.set()

    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    try:
        assert first.wait(limits.HTTP_S), "the slow request never started"
        yield
    finally:
        thread.join(limits.HTTP_S)
    assert done.is_set()


SLOW = dict(decode_tps=25.0, output_tokens=2)  # a plain send decodes for 0.08 s, running()'s for 1.6 s


# --------------------------------------------------------------------------- on, off, fake


@pytest.mark.parametrize("dialect", ENGINES)
def test_reset_on_empties_the_cache(dialect):
    with sim(dialect=dialect, cache_reset="on") as s:
        before = sends(s, 2)
        status, raw = reset(s)
        after = sends(s, 2)
    assert before == [0, 32] and after == [0, 32]  # the reset made the next send miss; then it hits again
    assert status == 200
    if dialect == "llama.cpp":
        assert json.loads(raw) == {"id_slot": 0, "n_erased": 32}
    elif dialect == "vllm":
        assert json.loads(raw) == {"success": True}
    else:
        assert raw.decode() == SGLANG_FLUSHED


@pytest.mark.parametrize("dialect", ENGINES)
def test_reset_off_is_missing_as_on_a_server_started_without_it(dialect):
    with sim(dialect=dialect, cache_reset="off") as s:
        before = sends(s, 2)
        status, raw = reset(s)
        after = sends(s)
        sglang_get = call(s.base_url, "GET", "/flush_cache")[0]
    assert before == [0, 32] and after == [32]  # nothing was reset
    if dialect == "llama.cpp":
        assert (status, json.loads(raw)) == (501, LLAMA_OFF)  # llama-server without --slot-save-path
    else:
        assert status == 404  # vLLM without VLLM_SERVER_DEV_MODE=1; SGLang behind a front that does not pass it
    assert sglang_get == 404 or dialect != "sglang"


@pytest.mark.parametrize("dialect", ENGINES)
def test_reset_fake_answers_as_on_and_keeps_the_cache(dialect):
    with sim(dialect=dialect, cache_reset="on") as real, sim(dialect=dialect, cache_reset="fake") as fake:
        sends(real, 2)
        sends(fake, 2)
        on, faked = reset(real), reset(fake)
        after = sends(fake)
    assert faked == on and faked[0] == 200  # the same status and body, byte for byte
    assert after == [32]  # acknowledged, not performed


@pytest.mark.parametrize("mode", ["on", "off", "fake"])
def test_a_strict_api_has_no_reset_at_all(mode):
    with sim(dialect="openai", cache_reset=mode) as s:
        send(s)
        statuses = [call(s.base_url, method, path)[0] for method, path in RESET.values()]
        statuses.append(call(s.base_url, "GET", "/flush_cache")[0])
        again = send(s)
    assert statuses == [404, 404, 404, 404]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 32


def test_config_and_cli_take_the_new_settings():
    for bad in ({"cache_reset": "maybe"}, {"draft_memory": 1.5}, {"draft_memory": -0.1}):
        with pytest.raises(ValueError):
            SimConfig(**bad)
    assert (SimConfig().cache_reset, SimConfig().draft_memory) == ("on", 0.0)
    ctx = cli_sim.sim_command.make_context("sim", ["--cache-reset", "fake", "--draft-memory", "0.5"])
    assert (ctx.params["cache_reset"], ctx.params["draft_memory"]) == ("fake", 0.5)
    with pytest.raises(Exception, match="maybe"):
        cli_sim.sim_command.make_context("sim", ["--cache-reset", "maybe"])


# --------------------------------------------------------------------------- each engine's details


def test_llamacpp_erase_checks_as_llama_server_does():
    with sim(slots=2) as s, sim(cache_reset="off") as off:
        sends(s, 2)
        answers = {path: call(s.base_url, "POST", path) for path in (
            "/slots/2?action=erase", "/slots/x?action=erase", "/slots/0?action=bogus", "/slots/0",
            "/slots/0?action=save", "/slots/1?action=erase", "/slots/0?action=erase")}
        after = sends(s)
        off_bad_id = call(off.base_url, "POST", "/slots/x?action=bogus")
        slots_get = call(s.base_url, "GET", "/slots/0?action=erase")[0]

    def error(path):
        status, raw = answers[path]
        return status, json.loads(raw)["error"]

    invalid = {"code": 400, "type": "invalid_request_error"}
    assert error("/slots/2?action=erase") == (400, {**invalid, "message": "Invalid slot ID"})  # slots 0 and 1 only
    assert error("/slots/x?action=erase") == (400, {**invalid, "message": "Invalid slot ID"})
    assert error("/slots/0?action=bogus") == error("/slots/0") == (400, {**invalid, "message": "Invalid action"})
    assert error("/slots/0?action=save")[0] == 501  # the simulator has no KV to write to a file
    # any slot's erase empties the one cache all slots share; the next erase finds it empty
    assert json.loads(answers["/slots/1?action=erase"][1]) == {"id_slot": 1, "n_erased": 32}
    assert json.loads(answers["/slots/0?action=erase"][1]) == {"id_slot": 0, "n_erased": 0}
    assert after == [0]
    assert (off_bad_id[0], json.loads(off_bad_id[1])) == (501, LLAMA_OFF)  # without the option, nothing else counts
    assert slots_get == 405


def test_vllm_reset_refuses_while_requests_run_unless_told_to_reset_them():
    with sim(dialect="vllm", slots=2, **SLOW) as s:
        sends(s, 1)
        with running(s):
            refused = reset(s)
            bad_flag = call(s.base_url, "POST", "/reset_prefix_cache?reset_running_requests=maybe")
            kept = sends(s)  # beside the slow request, in the other slot
        with running(s):
            forced = call(s.base_url, "POST", "/reset_prefix_cache?reset_running_requests=true&reset_external=1")
        after = sends(s)
        method = call(s.base_url, "GET", "/reset_prefix_cache")[0]
    assert (refused[0], json.loads(refused[1])) == (200, {"success": False})
    assert kept == [32]  # the refused reset left the cache alone
    assert bad_flag[0] == 400 and json.loads(bad_flag[1])["error"]["type"] == "BadRequestError"
    assert (forced[0], json.loads(forced[1])) == (200, {"success": True})
    assert after == [0]
    assert method == 405  # POST only


def test_sglang_flush_refuses_while_a_request_runs_or_waits_for_it_with_a_timeout():
    with sim(dialect="sglang", **SLOW) as s:
        sends(s, 1)
        with running(s):
            refused = reset(s)
            refused_get = call(s.base_url, "GET", "/flush_cache")
        kept = sends(s)
        with running(s):
            waited = call(s.base_url, "POST", f"/flush_cache?timeout={limits.HTTP_S}")
            flushed_at = time.time()
        after = sends(s)
        bad = call(s.base_url, "GET", "/flush_cache?timeout=-1")
        slow = [t for t in s.truth() if t["completion_tokens"] == 40]
    assert refused == refused_get == (400, b"Flush cache failed.\n")
    assert kept == [32]  # nothing was flushed
    assert waited == (200, SGLANG_FLUSHED.encode())
    assert len(slow) == 2 and max(slow[1]["chunk_times"]) <= flushed_at  # it waited for the last token
    assert after == [0]
    assert bad[0] == 400 and json.loads(bad[1])["object"] == "error"


def test_sglang_flush_timeout_runs_out_while_the_server_stays_busy():
    with sim(dialect="sglang", **SLOW) as s:
        sends(s, 1)
        with running(s):
            timed_out = call(s.base_url, "GET", "/flush_cache?timeout=0.2")
        after = sends(s)
    assert timed_out == (400, b"Timed out waiting for idle state.")
    assert after == [32]


# --------------------------------------------------------------------------- the drafter's memory

DRAFTER = dict(draft_k=4, draft_acceptance=0.25, output_tokens=16)


def acceptances(s: SimulatorThread) -> list[float | None]:
    return [t["draft_acceptance"] for t in s.truth()]


def test_drafter_memory_outlives_a_slot_erase_and_not_a_new_process():
    with sim(**DRAFTER, draft_memory=0.5) as s:
        first = send(s)
        assert call(s.base_url, *RESET["llama.cpp"])[0] == 200
        second = send(s)
        assert acceptances(s) == [0.25, 0.75]
        call(s.base_url, "POST", "/sim/reset")
        third = send(s)
        assert acceptances(s) == [0.25]
    timings = [(a["timings"]["cache_n"], a["timings"]["draft_n"], a["timings"]["draft_n_accepted"])
               for a in (first, second, third)]
    # 16 tokens: 8 steps of 1 + 1 accepted draft (4 drafted each), then 4 steps of 1 + 3; the erase emptied the cache
    assert timings == [(0, 32, 8), (0, 16, 12), (0, 32, 8)]


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_drafter_memory_outlives_every_dialects_reset(dialect):
    with sim(**DRAFTER, draft_memory=0.5, dialect=dialect, metrics="on") as s:
        send(s)
        assert reset(s)[0] == 200
        assert sends(s) == [0]
        text = call(s.base_url, "GET", "/metrics")[1].decode()
        truth = s.truth()
    assert [t["draft_acceptance"] for t in truth] == [0.25, 0.75]
    assert [(t["draft_tokens"], t["accepted_tokens"]) for t in truth] == [(32, 8), (16, 12)]
    if dialect == "vllm":
        assert 'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="sim"} 20.0' in text


def test_drafter_memory_needs_half_the_prompt_and_caps_at_one():
    longer = user(synthetic_text(39, "reset") + " " + synthetic_text(8, "more"))  # 48 tokens, 32 remembered
    mostly_new = user(" ".join(synthetic_text(39, "reset").split()[:15]) + " " + synthetic_text(40, "new"))
    with sim(**{**DRAFTER, "draft_acceptance": 0.75}, draft_memory=0.5, prefix_cache=False) as s:
        for messages in (PROMPT, longer, mostly_new, user(synthetic_text(39, "other")), PROMPT):
            send(s, messages)
        got = acceptances(s)
    assert got == [0.75, 1.0, 0.75, 0.75, 1.0]  # the memory is the drafter's: no prefix cache needed


@pytest.mark.parametrize("settings", [dict(draft_memory=0.0), dict(draft_k=0, draft_memory=0.5)])
def test_without_a_drafter_memory_nothing_changes(settings):
    with sim(**{**DRAFTER, **settings}) as s:
        answers = [send(s), send(s)]
        call(s.base_url, *RESET["llama.cpp"])
        answers.append(send(s))
        got = acceptances(s)
    drafting = settings.get("draft_k", 4) > 0
    assert got == ([0.25] * 3 if drafting else [None] * 3)
    expected = (32, 8) if drafting else (0, 0)
    assert [(a["timings"]["draft_n"], a["timings"]["draft_n_accepted"]) for a in answers] == [expected] * 3
