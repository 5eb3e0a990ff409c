"""Load without collapse: a few hundred calls at concurrency through the fault-injecting simulator."""

from __future__ import annotations

import tracemalloc

from leverbench.analysis.summary import summarize
from leverbench.config import load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.ledger.reader import read_ledger
from leverbench.runner.run import Runner

FAULTY = SimConfig(prefill_tps=200_000.0, decode_tps=2000.0, output_tokens=16, slots=8, seed=7,
                   fault_http_500=0.05, fault_http_429=0.03, fault_cut_stream=0.05, fault_malformed=0.03,
                   fault_no_usage=0.03, fault_stall=0.03, fault_stall_s=0.5)


def test_hundreds_of_faulty_calls_at_concurrency_are_all_accounted_for(tmp_path):
    with SimulatorThread(FAULTY) as sim:
        p = tmp_path / "exp.toml"
        p.write_text(f'''
[experiment]
name = "faults"
repeats = 1
baseline = "sim"
sentinel_tokens = 0
timeouts = {{ first_token_s = 0.3, idle_s = 1, total_s = 5 }}

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
        truth = sim.truth()
    led = read_ledger(tmp_path / "run")
    recs = [r for r in led.records if r["kind"] == "load"]
    assert len(recs) == 300  # every call sent is in the ledger
    ok = [r for r in recs if r["error"] is None]
    failed = [r for r in recs if r["error"] is not None]
    assert len(ok) + len(failed) == 300
    classes = {r["error"]["class"] for r in failed}
    assert {"http_status", "stream_cut", "malformed", "timeout_first_token"} <= classes
    # no_usage faults were recovered by the simulator's tokenizer, and say so
    assert any(r.get("usage_missing") for r in ok)
    # the server saw every request the client sent (turn + load + warm-up calls)
    assert len(truth) >= 300
    row = next(x for x in summarize(led)["load"] if x["stage"].startswith("storm"))
    assert row["ok"] + row["failed"] == 300 and row["failed"] == len(failed)
    assert peak < 60 * 2**20, f"peak traced memory {peak / 2**20:.1f} MiB"
