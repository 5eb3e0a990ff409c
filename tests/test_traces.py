"""Trace importers on the real public samples and on small hand-made bad files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import ledgers
import pytest

from leverbench.errors import BadInput
from leverbench.workload.traces import (
    BLOCK_TOKENS,
    TrafficCall,
    detect_format,
    load_traffic,
    parse_columns,
    shared_prefix_tokens,
)

TRACES = Path(__file__).parent / "data" / "traces"  # slices of public traces: see its README.md

# row counts from tests/data/traces/README.md (slices: the first rows of each public file)
SAMPLES = [
    ("mooncake_conversation_trace.jsonl", "mooncake", 200),
    ("mooncake_synthetic_trace.jsonl", "mooncake", 100),
    ("AzureLLMInferenceTrace_code.csv", "azure", 300),
    ("AzureLLMInferenceTrace_conv.csv", "azure", 300),
    ("tracelab_example_round_trace.jsonl", "tracelab-round", 19),
    ("tracelab_replay_multi_session_large.csv", "tracelab-replay", 303),
    ("tracelab_replay_session_workload_example.csv", "tracelab-replay", 11),
]


def test_trace_slices_are_present_and_intact() -> None:
    """Every slice the tests read is in the repository, byte for byte as cut (a missing one fails, never skips)."""
    sums = dict(reversed(line.split("  ")) for line in (TRACES / "SHA256SUMS").read_text().splitlines())
    assert sorted(sums) == sorted(name for name, _, _ in SAMPLES)
    for name, digest in sums.items():
        assert hashlib.sha256((TRACES / name).read_bytes()).hexdigest() == digest, name
    readme = (TRACES / "README.md").read_text()
    assert all(f"| {name} |" in readme for name in sums)  # each names its source, licence and cut


@pytest.mark.parametrize("name,fmt,rows", SAMPLES)
def test_real_samples_detected_and_fully_read(name: str, fmt: str, rows: int) -> None:
    path = TRACES / name
    assert detect_format(path) == fmt
    load = load_traffic(path)
    assert load.fmt == fmt
    assert load.used == rows
    assert load.skipped == {}
    assert all(c.input_tokens >= 0 and c.output_tokens >= 0 for c in load.calls)


def test_mooncake_cached_tokens_from_hash_ids_by_hand() -> None:
    calls = load_traffic(TRACES / "mooncake_conversation_trace.jsonl").calls
    # row 0: ids 0..13, nothing seen before
    assert calls[0].cached_tokens == 0
    assert calls[0].prefix_blocks == tuple(range(14))
    # rows 1 and 2 start with id 0 (seen in row 0), then new ids: one shared block
    assert calls[1].prefix_blocks[:2] == (0, 14) and calls[1].cached_tokens == 512
    assert calls[2].prefix_blocks[:2] == (0, 28) and calls[2].cached_tokens == 512
    # row 133 (3,024 tokens, 6 blocks) repeats the first 5 blocks of row 66 (2,651 tokens, 6 blocks)
    assert calls[133].input_tokens == 3024
    assert calls[133].prefix_blocks[:5] == calls[66].prefix_blocks[:5]
    assert calls[133].prefix_blocks[5] not in {b for c in calls[:133] for b in c.prefix_blocks}
    assert calls[133].cached_tokens == 5 * 512
    # no row before 133 shares more than the system-prompt block
    assert max(c.cached_tokens for c in calls[:133]) == 512
    # timestamps in ms → seconds after the first row
    assert calls[0].arrival_s == 0.0 and calls[133].arrival_s == pytest.approx(48.0)


def test_shared_prefix_counts_leading_run_only_and_caps() -> None:
    seen = {1, 2, 3, 9}
    assert shared_prefix_tokens((1, 2, 7, 9), seen, 4 * 512) == 2 * 512  # stops at the first unseen id
    assert shared_prefix_tokens((9, 1), seen, 1024) == 1023  # all seen: capped at input − 1
    assert shared_prefix_tokens((5, 1, 2), seen, 1536) == 0  # seen later in the list does not count
    assert shared_prefix_tokens((), seen, 10) == 0


def test_mooncake_hand_made_file_with_bad_rows(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join([
        json.dumps({"timestamp": 1000, "input_length": 1100, "output_length": 5, "hash_ids": [7, 8, 9]}),
        '{"timestamp": 1500, "input_length": 10',  # cut off
        json.dumps({"timestamp": 2000, "input_length": -3, "output_length": 5, "hash_ids": [7]}),
        json.dumps({"timestamp": 2500, "input_length": 600, "output_length": "x", "hash_ids": [7]}),
        json.dumps([1, 2]),
        json.dumps({"timestamp": 3000, "input_length": 1100, "output_length": 9, "hash_ids": [7, 8, 4]}),
        json.dumps({"timestamp": 3500, "input_length": 1024, "output_length": 9, "hash_ids": [7, 8]}),
    ]) + "\n")
    load = load_traffic(p)
    assert load.fmt == "mooncake"
    assert load.used == 3
    assert load.skipped == {"bad JSON": 1, "negative input_length": 1, "non-numeric output_length": 1,
                            "not a JSON object": 1}
    assert load.first_skipped_line["bad JSON"] == 2
    assert [c.cached_tokens for c in load.calls] == [0, 2 * BLOCK_TOKENS, 1023]  # last: capped at input − 1
    assert [c.arrival_s for c in load.calls] == [0.0, 2.0, 2.5]


def test_azure_last_row_without_newline_and_timestamps() -> None:
    calls = load_traffic(TRACES / "AzureLLMInferenceTrace_code.csv").calls
    assert (calls[0].input_tokens, calls[0].output_tokens) == (4808, 10)
    # the row after which the file ends, without a line end (as the public file does):
    # 2023-11-16 18:20:40.8181990,176,88
    assert (calls[-1].input_tokens, calls[-1].output_tokens) == (176, 88)
    assert not (TRACES / "AzureLLMInferenceTrace_code.csv").read_bytes().endswith(b"\n")
    assert calls[1].arrival_s == pytest.approx(0.052, abs=1e-6)  # 18:17:04.0319600 − 18:17:03.9799600
    assert all(c.cached_tokens is None for c in calls)


def test_tracelab_replay_input_includes_prefix() -> None:
    calls = load_traffic(TRACES / "tracelab_replay_multi_session_large.csv").calls
    # CSV rows: 0,117,0,0,2318,200,300 and 0,117,1,2518,348,131,154
    assert (calls[0].input_tokens, calls[0].cached_tokens, calls[0].output_tokens) == (2318, 0, 200)
    assert (calls[1].input_tokens, calls[1].cached_tokens, calls[1].output_tokens) == (2518 + 348, 2518, 131)
    # the reading: each round's prefix is the previous round's whole context
    assert calls[1].cached_tokens == calls[0].input_tokens + calls[0].output_tokens
    assert calls[0].session == "0" and calls[1].round == 1 and calls[0].tool_wait_s == pytest.approx(0.3)
    assert calls[0].arrival_s == 0.0 and calls[1].arrival_s is None  # closed loop: only round 0 has a send time
    assert calls[3].arrival_s == pytest.approx((393 - 117) / 1000)  # session 1 starts at 393 ms


def test_tracelab_replay_canonical_id_form(tmp_path: Path) -> None:
    p = tmp_path / "sim.csv"
    p.write_text("id,input_len,output_len,arrival_time,round_idx,tool_wait_after_ms,prefix_len\n"
                 "a,100,10,0,0,50,0\n"
                 "a,20,5,0,1,0,110\n"
                 "b,oops,5,40,0,0,0\n")
    load = load_traffic(p)
    assert load.fmt == "tracelab-replay"
    assert [(c.input_tokens, c.cached_tokens) for c in load.calls] == [(100, 0), (130, 110)]
    assert load.skipped == {"non-numeric input_len": 1}


def test_tracelab_round_fields_and_timing() -> None:
    load = load_traffic(TRACES / "tracelab_example_round_trace.jsonl")
    c = load.calls[0]
    assert (c.input_tokens, c.cached_tokens, c.output_tokens) == (32272, 27217, 931)
    assert c.model == "claude-opus-4-8" and c.round == 0
    # user_message 05:40:20.151 → last tool_call 05:40:31.647
    assert c.latency_s == pytest.approx(11.496, abs=1e-3)
    # tools emitted 05:40:30.836, last result 05:40:50.938
    assert c.tool_wait_s == pytest.approx(20.102, abs=1e-3)
    assert load.cached_served is True
    assert {x.model for x in load.calls} == {"claude-opus-4-8", "gpt-5.4"}


def _vllm_result() -> dict:
    return {"model_id": "m", "input_lens": [100, 200, 300, 400], "output_lens": [10, 0, 30, -1],
            "ttfts": [0.1, 0.0, 0.3, 0.2], "itls": [[0.02] * 9, [], [0.01] * 29, []],
            "errors": ["", "timeout", "", ""], "start_times": [5.0, 5.5, 6.0, 6.5]}


@pytest.mark.parametrize("indent", [None, 2])
def test_vllm_bench_result(tmp_path: Path, indent: int | None) -> None:
    p = tmp_path / "vllm.json"
    p.write_text(json.dumps(_vllm_result(), indent=indent))
    assert detect_format(p) == "vllm-bench"
    load = load_traffic(p)
    assert load.used == 2
    assert load.skipped == {"failed request": 1, "negative output length": 1}
    a, b = load.calls
    assert (a.input_tokens, a.output_tokens, a.ttft_s, a.model) == (100, 10, 0.1, "m")
    assert a.latency_s == pytest.approx(0.1 + 9 * 0.02)  # ttft + Σ itl
    assert b.latency_s == pytest.approx(0.3 + 29 * 0.01)
    assert (a.arrival_s, b.arrival_s) == (0.0, 1.0)


def test_vllm_bench_without_arrays_is_bad_input(tmp_path: Path) -> None:
    p = tmp_path / "v.json"
    p.write_text(json.dumps({"input_lens": 3, "output_lens": []}))
    with pytest.raises(BadInput, match="input_lens"):
        load_traffic(p, "vllm-bench")


def test_aiperf_records(tmp_path: Path) -> None:
    ok = {"metadata": {"x_correlation_id": "s1", "turn_index": 2, "request_start_ns": 2_000_000_000},
          "metrics": {"input_sequence_length": {"value": 550, "unit": "tokens"},
                      "output_sequence_length": {"value": 9, "unit": "tokens"},
                      "request_latency": {"value": 297.5, "unit": "ms"},
                      "time_to_first_token": {"value": 255.9, "unit": "ms"}}, "error": None}
    failed = {"metadata": {"request_start_ns": 1_000_000_000},
              "metrics": {"error_isl": {"value": 550, "unit": "tokens"}},
              "error": {"code": 499, "type": "RequestCancellationError", "message": "cancelled"}}
    p = tmp_path / "profile_export.jsonl"
    p.write_text(json.dumps(ok) + "\n" + json.dumps(failed) + "\n{not json\n")
    assert detect_format(p) == "aiperf"
    assert detect_format(tmp_path) == "aiperf"  # the artifact directory
    load = load_traffic(tmp_path)
    assert load.used == 1
    assert load.skipped == {"failed request": 1, "bad JSON": 1}
    c = load.calls[0]
    assert (c.input_tokens, c.output_tokens, c.session, c.round) == (550, 9, "s1", 2)
    assert c.latency_s == pytest.approx(0.2975) and c.ttft_s == pytest.approx(0.2559)


def test_leverbench_ledger(tmp_path: Path) -> None:
    head = ledgers.header({"base": {"prefix_cache": False}, "cache": {"prefix_cache": True}}, ["doc"])
    recs = [
        *ledgers.turn("base", "doc", 0, 3.0, 50, prompt=900),
        *ledgers.turn("cache", "doc", 0, 2.0, 50, prompt=900),
        ledgers.call("cache", "doc", 1, latency=1.0, out=10, prompt=900, cached=800),
        ledgers.call("base", "doc", 1, latency=1.0, out=10, error={"class": "Timeout", "message": "x"}),
        ledgers.call("base", "doc", 0, latency=1.0, out=128, kind="probe"),
    ]
    run = ledgers.write(tmp_path / "run", head, recs)
    assert detect_format(run) == "leverbench"
    assert detect_format(run / "ledger.jsonl") == "leverbench"
    load = load_traffic(run)
    assert load.used == 3  # probes are not traffic
    assert load.skipped == {"failed call": 1}
    assert [c.model for c in load.calls] == ["base", "cache", "cache"]
    assert load.calls[2].cached_tokens == 800 and load.calls[2].latency_s == 1.0
    assert load.cached_served is True


def test_generic_csv_counts_every_bad_row(tmp_path: Path) -> None:
    p = tmp_path / "calls.csv"
    p.write_text("prompt_tokens,completion_tokens,cached_tokens,latency_ms,model\n"
                 "1000,100,200,2500,a\n"
                 ",10,0,100,a\n"            # missing input
                 "500,-1,0,100,a\n"         # negative output
                 "500,ten,0,100,a\n"        # non-numeric output
                 "500,1.5,0,100,a\n"        # fractional output
                 "500,10\n"                 # short row
                 "\n"
                 "2000,50,,bad,b")          # no trailing newline; unusable latency is dropped, the row kept
    load = load_traffic(p)
    assert load.fmt == "generic"
    assert load.used == 2
    assert load.skipped == {"missing input (prompt_tokens)": 1, "negative output (completion_tokens)": 1,
                            "non-numeric output (completion_tokens)": 1, "fractional output (completion_tokens)": 1,
                            "fewer cells than the header": 1}
    a, b = load.calls
    assert (a.input_tokens, a.output_tokens, a.cached_tokens, a.latency_s, a.model) == (1000, 100, 200, 2.5, "a")
    assert (b.cached_tokens, b.latency_s, b.model) == (None, None, "b")


def test_generic_jsonl_dotted_and_named_columns(tmp_path: Path) -> None:
    p = tmp_path / "log.jsonl"
    rows = [{"usage": {"prompt_tokens": 300, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 256}},
             "t": 12.5, "dur": 900},
            {"usage": {"prompt_tokens": 400, "completion_tokens": 30}, "t": 14.0, "dur": 1100}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    load = load_traffic(p, columns="latency=dur:ms,arrival=t")
    assert [(c.input_tokens, c.output_tokens, c.cached_tokens) for c in load.calls] == [(300, 20, 256), (400, 30, None)]
    assert [c.latency_s for c in load.calls] == [0.9, 1.1]
    assert [c.arrival_s for c in load.calls] == [0.0, 1.5]


def test_parse_columns() -> None:
    assert parse_columns("input=a, output=b") == {"input": "a", "output": "b"}
    with pytest.raises(BadInput, match="unknown role"):
        parse_columns("inputs=a")
    with pytest.raises(BadInput, match="ROLE=COLUMN"):
        parse_columns("input")


@pytest.mark.parametrize("content,fmt,match", [
    ("", None, "empty"),
    ("TIMESTAMP,ContextTokens\n2023-01-01,5\n", "azure", "missing column"),
    ("a,b\n1,2\n", None, "no input-token column"),
    ('{"input_length": -1, "output_length": 2}\n', None, "no usable rows"),
    ("x\n", None, "not a known trace header"),
    ("{oops\n", None, "not valid JSON"),
])
def test_whole_file_unusable_is_bad_input(tmp_path: Path, content: str, fmt: str | None, match: str) -> None:
    p = tmp_path / "bad.txt"
    p.write_text(content)
    with pytest.raises(BadInput, match=match) as exc:
        load_traffic(p, fmt)
    assert exc.value.exit_code == 2
    assert str(p) in str(exc.value)


def test_unreadable_and_unknown(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such file"):
        load_traffic(tmp_path / "nope.csv")
    with pytest.raises(BadInput, match="unknown traffic format"):
        load_traffic(tmp_path / "nope.csv", "splunk")
    p = tmp_path / "bin.csv"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(BadInput, match="not UTF-8"):
        load_traffic(p)
    with pytest.raises(BadInput, match="--columns applies"):
        q = tmp_path / "m.jsonl"
        q.write_text('{"input_length": 5, "output_length": 2}\n')
        load_traffic(q, columns="input=x")


def test_traffic_call_defaults() -> None:
    c = TrafficCall(input_tokens=5, output_tokens=1)
    assert c.cached_tokens is None and c.latency_s is None and c.prefix_blocks is None
