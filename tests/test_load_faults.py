"""Load without collapse: a few hundred calls at concurrency through the fault-injecting simulator,
each checked against the simulator's own record of what it did to that request."""

from __future__ import annotations

import time
import tracemalloc
from collections import Counter

import limits

from leverbench.analysis.summary import summarize
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread, llama_clocks_ms
from leverbench.ledger.reader import read_ledger
from leverbench.runner.run import Runner

FIRST_TOKEN_S = 1.0  # long beside the queueing (ms) and the client's lag under tracemalloc and a loaded machine
FAULTY = SimConfig(prefill_tps=200_000.0, decode_tps=2000.0, output_tokens=16, slots=8, seed=7,
                   fault_http_500=0.05, fault_http_429=0.03, fault_cut_stream=0.05, fault_malformed=0.03,
                   fault_no_usage=0.03, fault_stall=0.03, fault_stall_s=2.0)
CHAT_KINDS = ("call", "warmup", "sentinel", "probe", "load")
HTTP_MESSAGE = {"http_500": "simulated internal error", "http_429": "simulated rate limit"}


CLIENT_SLACK_S = 0.5  # how much later than the server's stamp the client may see a first token on a loaded machine


def near_timeout(t: dict) -> bool:
    """Whether the server's first token came so close to the client's first-token timeout that the client may
    have given up first: on a loaded machine the client sees a chunk up to CLIENT_SLACK_S after the server
    stamps it."""
    if t["first_token"] is None:
        return False
    return FIRST_TOKEN_S - CLIENT_SLACK_S < t["first_token"] - t["arrival"] <= FIRST_TOKEN_S


def expected(t: dict) -> tuple[str | None, str]:
    """The error class (None: success) the client must record for a request the simulator handled as *t*
    says, and why.  An HTTP fault answers at once; a stall (2 s) outlasts the 1 s first-token timeout;
    a malformed line comes mid-stream, before a cut (which drops the second half); a missing usage is
    counted by the simulator's tokenizer.  Any call but an HTTP fault can time out waiting for its first
    token while every slot is busy (then the simulator's first token came late): the fault in its stream
    never reached the client."""
    faults = set((t["fault"] or "").split(",")) - {"", "client_disconnect"}
    for name in ("http_500", "http_429"):
        if name in faults:
            return "http_status", name
    if "stall" in faults:
        return "timeout_first_token", "stall"
    late = t["first_token"] is None or t["first_token"] - t["arrival"] > FIRST_TOKEN_S
    if late:  # the client gave up before the stream (and any fault in it) began
        return "timeout_first_token", "queued past the first-token timeout"
    if "malformed" in faults:
        return "malformed", "malformed"
    if "cut_stream" in faults:
        return "stream_cut", "cut_stream"
    return None, "none"


def settled_truth(sim: SimulatorThread, n: int, timeout: float = limits.SETTLE_S) -> list[dict]:
    """The simulator's records once all *n* requests are in: one whose client gave up (a stall) ends later."""
    deadline = time.monotonic() + timeout
    while len(truth := sim.truth()) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return truth


def test_hundreds_of_faulty_calls_at_concurrency_are_all_accounted_for(tmp_path):
    with SimulatorThread(FAULTY) as sim:
        p = tmp_path / "exp.toml"
        p.write_text(f'''
[experiment]
name = "faults"
repeats = 1
baseline = "sim"
sentinel_tokens = 0
cache_between_turns = "keep"  # the load stage's faults are counted here: no reset check's calls beside them
timeouts = {{ first_token_s = {FIRST_TOKEN_S}, idle_s = 1, total_s = 5 }}

[[arms]]
name = "sim"
role = "baseline"
base_url = "{sim.base_url}"
model = "sim"

[[cases]]
name = "c"
prompt = "a short question"
max_tokens = 16

[[load]]
name = "storm"
mode = "closed"
concurrency = 16
warmup_requests = 0
requests = 300
''')
        tracemalloc.start()
        Runner(load(p), tmp_path / "run").run()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        led = read_ledger(tmp_path / "run")
        chat = [r for r in led.records if r["kind"] in CHAT_KINDS]
        truth = settled_truth(sim, len(chat))
    recs = [r for r in led.records if r["kind"] == "load"]
    assert len(recs) == 300  # every call sent is in the ledger
    # one ledger record per request the simulator saw (the turn's call, the warm-up call, 300 load calls)
    assert len(chat) == 302 and len(truth) == 302

    # a completed call is matched to its simulator record by the timings the simulator sent with it
    served = [t for t in truth if t["decode_s"] > 0]  # (an HTTP fault answers before any of it: 0, 0)
    by_timings = {llama_clocks_ms(t["prefill_s"], t["first_step_s"], t["decode_s"]): t for t in served}
    assert len(by_timings) == len(served)
    matched = set()
    for r in (r for r in chat if r["error"] is None):
        t = by_timings.pop((r["timings"]["prompt_ms"], r["timings"]["predicted_ms"]))
        matched.add(t["id"])
        # the simulator applied no fault that should have failed it (a first token near the timeout may make it)
        assert expected(t)[0] is None or (near_timeout(t) and expected(t)[0] == "timeout_first_token"), (t, r)
        assert bool(r.get("usage_missing")) == ("no_usage" in (t["fault"] or "")), (t, r)
        assert r["completion_tokens"] == t["completion_tokens"]
        if not r.get("usage_missing"):  # (counted again by /tokenize, the prompt lacks the chat template's role word)
            assert r["prompt_tokens"] == t["prompt_tokens"]
    # every other request failed on the simulator's side, and the ledger holds exactly those failures, each
    # with the class its fault calls for: nothing extra, nothing missing
    rest = [t for t in truth if t["id"] not in matched]
    failed = [r for r in chat if r["error"] is not None]
    want = Counter(expected(t)[0] for t in rest)
    got = Counter(r["error"]["class"] for r in failed)
    assert len(failed) == len(rest)
    # exactly as expected, except that a call whose first token came near the timeout may have been given up
    # by the client first, whatever its stream would have carried: such calls move to timeout_first_token
    movable = Counter(expected(t)[0] for t in rest if near_timeout(t))
    moved = {c: want[c] - got[c] for c in movable if c != "timeout_first_token"}
    assert all(0 <= n <= movable[c] for c, n in moved.items()), (want, got, movable)
    assert all(want[c] == got[c] for c in want if c not in movable and c != "timeout_first_token"), (want, got)
    assert got["timeout_first_token"] - want["timeout_first_token"] == sum(moved.values()), (want, got)
    for name, message in HTTP_MESSAGE.items():
        assert (sum(1 for t in rest if expected(t)[1] == name)
                == sum(1 for r in failed if message in r["error"]["message"]))
    # the seed makes every kind of fault fire at least once in 302 requests
    assert {expected(t)[1] for t in rest} >= {"http_500", "http_429", "stall", "malformed", "cut_stream"}
    assert any("no_usage" in (t["fault"] or "") for t in truth if t["id"] in matched)

    # the load table counts the same calls and classes as the ledger
    row = next(x for x in summarize(led)["load"] if x["stage"].startswith("storm"))
    failed_load = [r for r in recs if r["error"] is not None]
    assert (row["requests"], row["failed"], row["ok"]) == (300, len(failed_load), 300 - len(failed_load))
    assert row["errors"] == dict(Counter(r["error"]["class"] for r in failed_load))
    assert peak < 60 * 2**20, f"peak traced memory {peak / 2**20:.1f} MiB"
