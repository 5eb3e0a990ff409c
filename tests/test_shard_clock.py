"""A worker's shard as read is on the coordinator's clock (issue 17): the reader shifts its absolute times
(t_send, scheduled_t) by the offset its ``clock`` record measured, leaves its durations alone, and says how
well the clocks were aligned; a shard with no clock record is read as written, with a warning.  Also: a
shard whose header line was cut is a LedgerError naming it when a worker opens it."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from test_workers import clock, load_rec, run_dir, shard_lines

from leverbench.analysis.load.stages import load_summary
from leverbench.errors import LedgerError
from leverbench.ledger.reader import read_ledger
from leverbench.runner.workers import LoadWorker

AHEAD_S = 0.2  # worker 1's clock is this far ahead of the coordinator's
SENT = [100.0 + i for i in range(10)]  # each call's send time on the coordinator's clock (latency 0.2 s)
QUEUE = "vllm:request_queue_time_seconds"


def scrape(when: str, t: float, queue_sum: float, count: float) -> dict:
    """A coordinator's metrics scrape (its own clock) around the stage."""
    return {"kind": "metrics", "arm": "a", "when": f"{when} s", "t": t,
            "samples": {f"{QUEUE}_sum": queue_sum, f"{QUEUE}_count": count}}


def stage_run(tmp, *, worker1_clock: bool) -> tuple:
    """A stage on 2 workers, call i from worker i mod 2, worker 1 AHEAD_S ahead (its records written on its
    clock); the coordinator scraped the server 0.1 s after the last call ended (coordinator's clock).
    *worker1_clock*: whether worker 1's shard holds its stage's clock record."""
    recs = [load_rec("s", i, t, "r", worker=i % 2) for i, t in enumerate(SENT)]
    for r in recs[1::2]:
        r["t_send"] += AHEAD_S
        r["scheduled_t"] += AHEAD_S
    clocks = {0: clock(0, "r", 99.5), 1: {**clock(1, "r", 99.5), "offset_s": AHEAD_S, "uncertainty_s": 0.0015}}
    main = [scrape("load-start", 99.9, 1.0, 10.0), scrape("load-end", SENT[-1] + 0.2 + 0.1, 1.5, 20.0),
            {"kind": "stage_end", "stage": "s", "arm": "a", "load_run": "r", "calls": 10, "workers": 2,
             "lost_workers": []}]
    shards = {k: shard_lines(k, [clocks[k]] * (k == 0 or worker1_clock) + recs[k::2]) for k in (0, 1)}
    return run_dir(tmp, main, shards), recs


def test_a_worker_clock_ahead_is_read_on_the_coordinators_clock(tmp_path):
    """Worker 1 runs 200 ms ahead: as read, its calls' t_send and scheduled_t are on the coordinator's clock
    (its durations untouched, its offset and uncertainty kept), so the coordinator's load-end scrape is found
    after the stage's last end (the server's queue time is reported, not silently missing), and the stage's
    duration and throughput window are the true ones."""
    d, written = stage_run(tmp_path, worker1_clock=True)
    led = read_ledger(d)
    assert led.warnings == []
    loads = list(led.of_kind("load"))
    assert [r["repeat"] for r in loads] == list(range(10))
    assert [r["t_send"] for r in loads] == pytest.approx(SENT, abs=1e-9)
    assert [r["scheduled_t"] for r in loads] == pytest.approx(SENT, abs=1e-9)
    assert [(r["clock_offset_s"], r["clock_uncertainty_s"]) for r in loads] == \
        [(0.0, 0.0004), (AHEAD_S, 0.0015)] * 5
    for r, w in zip(loads, written):  # durations: one host's clock, as measured
        assert (r["latency_s"], r["ttft_s"], r["connect_s"], r["chunk_t"]) == \
            (w["latency_s"], w["ttft_s"], w["connect_s"], w["chunk_t"])
    [row] = load_summary(led)
    assert row["server_queue_s"] == pytest.approx(0.5 / 10)
    assert row["duration_s"] == pytest.approx(SENT[-1] + 0.2 - SENT[0])
    assert row["window_s"] == pytest.approx(SENT[-1] - SENT[0])
    assert row["requests_per_s"] == pytest.approx(9 / 9.0)  # the calls that ended within [100, 109]
    assert row["clock_uncertainty_s"] == pytest.approx(0.0015)


def test_a_shard_without_its_clock_record_is_read_as_written_with_a_warning(tmp_path):
    """No clock record for worker 1's stage: its times stay on its clock (nothing to align them by), one
    warning names the shard and the stage, and the stage's row does not claim an alignment."""
    d, written = stage_run(tmp_path, worker1_clock=False)
    led = read_ledger(d)
    loads = list(led.of_kind("load"))
    assert [r["t_send"] for r in loads] == [w["t_send"] for w in written]
    assert ["clock_offset_s" in r for r in loads] == [True, False] * 5
    [warning] = led.warnings
    assert "worker-1.jsonl: no clock record for stage 's' (load_run 'r')" in warning
    assert "its 5 records stay on worker 1's clock" in warning
    [row] = load_summary(led)
    assert row["clock_uncertainty_s"] is None and row["requests"] == 10


@pytest.mark.parametrize("first_line", ['{"kind": "shard", "schema": "leverb', "[1, 2]"])
def test_a_shards_cut_header_is_a_ledger_error_naming_it(tmp_path, first_line):
    """A worker opening a shard whose first line is no JSON object (a header cut by a crash) raises the
    reader's LedgerError naming the file and what to do, not a raw JSONDecodeError."""
    shard = tmp_path / "ledger.d" / "worker-1.jsonl"
    shard.parent.mkdir()
    shard.write_text(first_line)
    with pytest.raises(LedgerError, match=r"worker-1\.jsonl: line 1 is not a shard header.*move it out of ledger\.d/"):
        asyncio.run(LoadWorker(1, str(shard), ()).prepare(SimpleNamespace(run_id="test")))
    shard.write_text(json.dumps({"kind": "shard", "run_id": "other"}) + "\n")  # a whole header is read
    with pytest.raises(Exception, match="a shard of run 'other', not of this run"):
        asyncio.run(LoadWorker(1, str(shard), ()).prepare(SimpleNamespace(run_id="test")))
