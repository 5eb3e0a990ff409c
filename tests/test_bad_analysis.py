"""Bad input to the analysis commands (issue 28): ``analyze``, ``whatif``, ``project`` and the traffic and summary
files they read end in one clear error line, exit code 2, naming the option or the file and what is wrong; or,
where the input is legitimate after all, in a sane result.  Never a traceback, a hang, or exit 0 with nonsense.

Each case ran on the code before this work and failed there: a traceback (``IndexError``, ``RecursionError``,
``OverflowError``, ``TypeError``, ``ZeroDivisionError``), a hang (``--orders`` past the budget's reach), or exit 0
with negative or NaN dollars, negative TTFTs and GPU-hours, infinite or 10^300-second figures.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from leverbench.cli import cli
from leverbench.workload.traces import files, load_traffic

GOLDEN = Path(__file__).parent / "golden"
TRACES = Path(__file__).parent / "data" / "traces"
MOONCAKE = TRACES / "mooncake_conversation_trace.jsonl"
HAND = ["--prefill-tps", "1000", "--decode-tps", "50"]


def refused(args: list[str], *names: str, progress: bool = False) -> str:
    """Run the command; assert exit 2 and exactly one stderr line, ``leverbench: error: ...``, naming each of
    ``names`` (an option, a file, a field), and no traceback (``progress``: after the lines a run prints on its
    way).  Returns the line."""
    res = CliRunner().invoke(cli, args)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    if progress:
        assert sum("leverbench: error:" in line for line in lines) == 1, res.stderr
        lines = lines[-1:]
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2, (res.exit_code, res.output[-2000:])
    assert len(lines) == 1 and lines[0].startswith("leverbench: error: "), res.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def served(args: list[str]) -> dict:
    """Run the command with --json/--format json; assert a clean exit 0 and return the JSON."""
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0 and res.exception is None, res.output[-2000:]
    return json.loads(res.stdout)


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """The first 12 calls of the Mooncake conversation trace."""
    path = tmp_path / "small.jsonl"
    path.write_text("".join(MOONCAKE.read_text().splitlines(keepends=True)[:12]))
    return path


@pytest.fixture
def summary(tmp_path: Path) -> Path:
    path = tmp_path / "run" / "summary.json"
    path.parent.mkdir()
    shutil.copy(GOLDEN / "sim.summary.json", path)
    return path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "ledger-run"
    run.mkdir()
    shutil.copy(GOLDEN / "handmade.ledger.jsonl", run / "ledger.jsonl")
    return run


# ---------------------------------------------------------------- options: every number bounded


@pytest.mark.parametrize("bad", [
    ["--gpus", "-1"],  # printed negative GPU-hours
    ["--gpus", "0"],
    ["--gpu-hour-usd", "nan"],  # printed nan dollars
    ["--gpu-hour-usd", "-3"],  # printed negative dollars
    ["--prefill-tps", "inf", "--decode-tps", "50"],  # a prefill of 0 s
    ["--prefill-tps", "1e-300", "--decode-tps", "50"],  # 10^300-second calls
    ["--drafter-speedup", "inf"],  # "speedup infx"
    ["--prefill-a-s", "nan"],  # nan seconds per call
    ["--cache-tokens", "inf"],  # TypeError: unsupported format string passed to NoneType.__format__
    ["--answer-cap", "1" + "0" * 30],
    ["--block-tokens", "1" + "0" * 23],
], ids=lambda b: " ".join(b)[:30])
def test_analyze_options_are_bounded(small: Path, summary: Path, bad: list[str]) -> None:
    rates = [] if "--prefill-tps" in bad else ["--rates", str(summary)]
    line = refused(["analyze", str(small), *rates, *bad, "--format", "json"], bad[0])
    assert "out of range" in line and bad[1] in line


@pytest.mark.parametrize("bad", [
    ["--orders", "1000000"],  # 50,000 orders x 3 arms: minutes of simulation (a hang)
    ["--scale-input", "1e300"],  # TTFTs of 10^300 s, exit 0
    ["--scale-output", "1e6"],
    ["--speed", "1e-300"],  # output tok/s 2.6e-297, exit 0
    ["--template-tokens", "1" + "0" * 23],  # TTFTs of 10^19 s
    ["--max-input-tokens", "1" + "0" * 23],
    ["--requests", "1" + "0" * 23],
    ["--gpus", "1e308"],  # GPU-hours inf
    ["--cached-share", "nan"],
], ids=lambda b: " ".join(b)[:30])
def test_whatif_options_are_bounded(small: Path, summary: Path, bad: list[str]) -> None:
    line = refused(["whatif", str(small), "--rates", str(summary), "--json", *bad], bad[0])
    assert "out of range" in line


def test_whatif_arms_naming_no_arm_is_refused(small: Path, summary: Path) -> None:
    """``--arms ,`` named no arm and served every arm."""
    refused(["whatif", str(small), "--rates", str(summary), "--arms", ",", "--json"], "--arms")


@pytest.mark.parametrize("bad", [
    ["--input-tokens", "1" + "0" * 400],  # OverflowError: int too large to convert to float
    ["--input-tokens", "1" + "0" * 30],  # a turn of 10^26 s
    ["--output-tokens", "1" + "0" * 400],
    ["--gpu-hour-usd", "-5"],
    ["--gpu-hour-usd", "inf"],
], ids=lambda b: " ".join(b)[:30])
def test_project_options_are_bounded(run_dir: Path, bad: list[str]) -> None:
    args = {"--input-tokens": "1000", "--output-tokens": "100"}
    args.update({bad[0]: bad[1]})
    refused(["project", str(run_dir), *[x for kv in args.items() for x in kv], "--json"], bad[0])


def test_project_inf_tokens_is_one_line_not_usage_text(run_dir: Path) -> None:
    """``--input-tokens inf`` got click's three-line usage error."""
    refused(["project", str(run_dir), "--input-tokens", "inf", "--output-tokens", "100"], "--input-tokens", "inf")


def test_legitimate_numbers_still_serve(small: Path, summary: Path, run_dir: Path) -> None:
    out = served(["analyze", str(small), "--rates", str(summary), "--gpus", "8", "--gpu-hour-usd", "2.5",
                  "--format", "json"])
    assert out["cost"]["gpus"] == 8 and out["cost"]["usd_per_1000_calls"] > 0
    out = served(["whatif", str(small), "--rates", str(summary), "--orders", "2", "--speed", "0.5", "--json"])
    assert all(r["ttft_p50_s"] > 0 for r in out["arms"])
    out = served(["project", str(run_dir), "--input-tokens", "1000", "--output-tokens", "100", "--json"])
    assert out["cost"]


def test_out_is_a_directory_is_one_line(small: Path, tmp_path: Path) -> None:
    """``--out DIR`` got click's three-line usage error."""
    refused(["analyze", str(small), *HAND, "--format", "json", "--out", str(tmp_path)], "--out", str(tmp_path))


# ---------------------------------------------------------------- a summary.json read back


def _summary(tmp_path: Path, change) -> Path:
    data = json.loads((GOLDEN / "sim.summary.json").read_text())
    change(data)
    path = tmp_path / "bad-summary.json"
    path.write_text(json.dumps(data, allow_nan=True))
    return path


def _model(d: dict) -> dict:
    return d["rate_models"][0]


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: _model(d)["prefill"].update(b_s_per_token=-2e-5), "rate_models[0].prefill.b_s_per_token"),
    (lambda d: _model(d)["prefill"].update(a_s=-5.0), "rate_models[0].prefill.a_s"),  # negative TTFTs
    (lambda d: _model(d)["decode"].update(d0_s_per_token=-0.001), "rate_models[0].decode.d0_s_per_token"),
    (lambda d: _model(d)["prefill"].update(c_s_per_token2=-1e-3), "rate_models[0].prefill.c_s_per_token2"),
    (lambda d: _model(d)["prefill"].update(b_s_per_token=float("nan")), "rate_models[0].prefill.b_s_per_token"),
    (lambda d: _model(d)["decode"].update(d0_s_per_token=float("inf")),  # IndexError: index out of range
     "rate_models[0].decode.d0_s_per_token"),
    (lambda d: (_model(d)["prefill"].update(b_s_per_token=0.0), _model(d)["decode"].update(d0_s_per_token=0.0)),
     "rate_models[0].decode"),  # free answers: infinite throughput (a flat prefill alone is a fit's: below)
    (lambda d: _model(d).update(batch={"concurrency": [0, 0], "slowdown": [1, 1]}),  # ZeroDivisionError
     "rate_models[0].batch.concurrency[0]"),
    (lambda d: _model(d).update(batch={"concurrency": [1, 2], "slowdown": [-1, 1]}), "rate_models[0].batch.slowdown"),
    (lambda d: _model(d).update(slots="2"), "rate_models[0].slots"),  # a string taken for a number
    (lambda d: d["rate_models"][2]["decode"].update(acceptance="x"),  # ValueError: Unknown format code '%'
     "rate_models[2].decode.acceptance"),
    (lambda d: [r.update(prefill_tps=1e-300, decode_tps=1e-300) for r in d["rates"]], "rates[0].decode_tps"),
    (lambda d: [r.update(prefill_a_s=-10) for r in d["rates"]], "rates[0].prefill_a_s"),
    (lambda d: d["arms"][0]["conditions"].update(gpus=-2), "arms[0].conditions.gpus"),
    (lambda d: d["arms"][0]["conditions"].update(gpu_hour_usd=float("nan")), "arms[0].conditions.gpu_hour_usd"),
    (lambda d: d["arms"][1]["knobs"].update(kv_capacity_tokens=float("inf")), "arms[1].knobs.kv_capacity_tokens"),
    (lambda d: d["rates"][0].update(arm="zzz"), "rates[0].arm"),
    (lambda d: _model(d)["decode"].update(range_context=[22, [1, 2]]),  # TypeError: '>' between int and list
     "rate_models[0].decode.range_context"),
    (lambda d: _model(d)["prefill"].update(range_uncached=[21, "x"]),  # numpy UFuncTypeError
     "rate_models[0].prefill.range_uncached"),
], ids=["neg-b", "neg-a", "neg-d0", "neg-c", "nan-b", "inf-d0", "free", "conc-0", "neg-slowdown", "str-slots",
        "str-acceptance", "tiny-rates", "neg-a-rates", "neg-gpus", "nan-usd", "inf-kv", "unknown-arm", "list-range",
        "str-range"])
def test_a_bad_summary_is_refused_naming_the_field(tmp_path: Path, small: Path, change, field: str) -> None:
    path = _summary(tmp_path, change)
    for command in (["whatif", str(small), "--rates", str(path), "--json", "--orders", "1"],
                    ["analyze", str(small), "--rates", str(path), "--format", "json"]):
        line = refused(command, str(path), field)
        assert "not a valid leverbench.summary/1" in line


def test_a_flat_prefill_a_fit_writes_is_served_from_summary_json(tmp_path: Path, small: Path) -> None:
    """The non-negative fit gives b = c = 0 where the prompts' time did not grow with their tokens (a prefix cache
    served them): a run wrote that summary.json and its reader refused it, while the ledger's path served it."""
    path = _summary(tmp_path, lambda d: _model(d)["prefill"].update(b_s_per_token=0.0, c_s_per_token2=0.0))
    served(["whatif", str(small), "--rates", str(path), "--json", "--orders", "1"])



def test_a_summary_nested_too_deep_is_refused(tmp_path: Path, small: Path) -> None:
    """RecursionError."""
    path = tmp_path / "deep.json"
    path.write_text('{"schema": ' + "[" * 10_000 + "]" * 10_000 + "}")
    refused(["whatif", str(small), "--rates", str(path), "--json"], str(path), "nested too deep")


# ---------------------------------------------------------------- traffic files


def test_an_all_null_column_after_the_checks_is_refused(tmp_path: Path) -> None:
    """Outputs past Int64 became nulls, and the median of none: ``IndexError: index 0 is out of bounds``."""
    path = tmp_path / "huge-out.csv"
    path.write_text("input_tokens,output_tokens\n100,1e300\n100,1e20\n")
    refused(["analyze", str(path), *HAND], str(path), "output (output_tokens) above 10,000,000 tokens",
            "line 2")


@pytest.mark.parametrize("body", [
    "[" * 10_000 + "]" * 10_000 + "\n",
    '{"input_length": 5, "output_length": 3, "x": ' + "[" * 10_000 + "]" * 10_000 + "}\n",
], ids=["array", "in-an-object"])
def test_json_nested_10000_deep_is_refused(tmp_path: Path, body: str) -> None:
    """RecursionError while detecting the format."""
    path = tmp_path / "deep.jsonl"
    path.write_text(body)
    refused(["analyze", str(path), *HAND], str(path), "line 1", "nested too deep")


def test_vllm_bench_nested_too_deep_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text('{"input_lens": [100], "output_lens": [3], "x": ' + "[" * 10_000 + "]" * 10_000 + "}")
    refused(["analyze", str(path), "--trace-format", "vllm-bench", *HAND], str(path), "nested too deep")


def test_a_token_count_of_10_48_is_skipped_naming_the_field(tmp_path: Path) -> None:
    """``OverflowError: int value too large for Polars integer types``: now the row is skipped, as a negative
    one is, its reason naming the field and the bound, and the other rows analysed."""
    path = tmp_path / "huge.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1' + "0" * 48 + ', "output_length": 3}\n'
                    '{"timestamp": 1, "input_length": 100, "output_length": 3}\n')
    out = served(["analyze", str(path), *HAND, "--format", "json"])
    assert out["calls"] == 1
    assert out["input"]["skipped"] == {"input_length above 10,000,000 tokens": 1}
    assert out["input"]["first_skipped_line"] == {"input_length above 10,000,000 tokens": 1}


@pytest.mark.parametrize(("fmt", "text", "field"), [
    ("mooncake", '{"timestamp": 0, "input_length": 1e300, "output_length": 3, "hash_ids": [1]}\n', "input_length"),
    ("mooncake", '{"timestamp": 0, "input_length": 100000000000000000000, "output_length": 3}\n', "input_length"),
    ("generic", '{"input_tokens": 1' + "0" * 48 + ', "output_tokens": 3}\n', "input (input_tokens)"),
    ("tracelab-round", '{"input_tokens_total": 1e30, "prefix_tokens": 5, "output_tokens": 3}\n',
     "input_tokens_total"),
    ("aiperf", json.dumps({"metadata": {}, "metrics": {"input_sequence_length": {"value": 1e30},
                                                       "output_sequence_length": {"value": 5}}}) + "\n",
     "input_sequence_length"),
], ids=["mooncake-1e300", "mooncake-1e20", "generic", "tracelab-round", "aiperf"])
def test_a_file_whose_every_row_is_too_long_names_the_file_line_and_field(tmp_path: Path, fmt: str, text: str,
                                                                          field: str) -> None:
    """OverflowError / TypeError (Int128) on building the frame; a trace stage of a run read the same file."""
    path = tmp_path / f"all-huge.{fmt}.jsonl"
    path.write_text(text)
    refused(["analyze", str(path), "--trace-format", fmt, *HAND], str(path), "first at line 1",
            f"{field} above 10,000,000 tokens")
    with pytest.raises(Exception, match="above 10,000,000 tokens"):  # what a run's trace stage reads it with
        load_traffic(path, fmt)


def test_vllm_bench_lengths_too_long_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"input_lens": [1e30, 100], "output_lens": [3, 3], "ttfts": [0.1, 0.1]}))
    load = load_traffic(path, "vllm-bench")
    assert load.used == 1 and load.skipped == {"input length above 10,000,000 tokens": 1}


def test_whatif_on_a_mooncake_trace_with_huge_lengths_is_refused(tmp_path: Path, summary: Path) -> None:
    path = tmp_path / "huge.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1' + "0" * 400 + ', "output_length": 3}\n')
    refused(["whatif", str(path), "--rates", str(summary), "--json"], str(path), "input_length")


def test_out_of_order_stamps_give_arrivals_from_the_earliest(tmp_path: Path) -> None:
    """A log out of time order gave negative arrivals (relative to its first row); now from its earliest stamp,
    on both readers (row by row and columnar)."""
    moon = tmp_path / "unsorted.jsonl"
    moon.write_text('{"timestamp": 5000, "input_length": 5, "output_length": 3}\n'
                    '{"timestamp": 1000, "input_length": 100, "output_length": 3}\n'
                    '{"timestamp": 3000, "input_length": 100, "output_length": 3}\n')
    gen = tmp_path / "unsorted.csv"
    gen.write_text("input_tokens,output_tokens,arrival_s\n5,3,5\n100,3,1\n100,3,3\n")
    for path in (moon, gen):
        arrivals = [c.arrival_s for c in load_traffic(path).calls]
        assert arrivals == [4.0, 0.0, 2.0], (path.name, arrivals)


def test_odd_but_legitimate_rows_give_a_sane_result(tmp_path: Path) -> None:
    """Negative lengths, a NaN or absurd time stamp, a line that is a JSON array or string, a latency of 1e308:
    skipped or left unknown, counted, and the rest analysed (exit 0)."""
    path = tmp_path / "odd.jsonl"
    path.write_text('{"timestamp": 0, "input_length": -5, "output_length": 3}\n'
                    '{"timestamp": NaN, "input_length": 50, "output_length": 3}\n'
                    "[1, 2, 3]\n"
                    '"hello"\n'
                    '{"timestamp": 1e308, "input_length": 70, "output_length": 3}\n'
                    '{"timestamp": 1000, "input_length": 100, "output_length": 3}\n')
    out = served(["analyze", str(path), *HAND, "--format", "json"])
    assert out["calls"] == 3
    assert out["input"]["skipped"] == {"negative input_length": 1, "not a JSON object": 2}
    assert "2 row(s): no usable timestamp (arrival unknown)" in out["input"]["notes"]
    lat = tmp_path / "lat.csv"
    lat.write_text("input_tokens,output_tokens,latency_s\n100,5,1e308\n200,10,1\n")
    assert [c.latency_s for c in load_traffic(lat).calls] == [None, 1.0]  # 1e308 s: a sum of inf


def test_a_csv_cell_past_128_kib_is_read(tmp_path: Path) -> None:
    """``_csv.Error: field larger than field limit (131072)`` on the careful pass."""
    path = tmp_path / "prompts.csv"
    path.write_text('input_tokens,output_tokens,text\n1,2,a\n"' + "x" * 200_000 + '\n",3,\n4,5,\n')
    out = served(["analyze", str(path), *HAND, "--format", "json"])
    assert out["calls"] == 2 and out["input"]["skipped"] == {"non-numeric input (input_tokens)": 1}


def test_a_wide_header_is_cut_in_the_message(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    path.write_text(",".join(f"c{i}" for i in range(5000)) + "\n" + ",".join("1" for _ in range(5000)) + "\n")
    line = refused(["analyze", str(path), *HAND], str(path), "no input-token column")
    assert len(line) < 1000 and "more" in line


def test_a_pipe_or_a_device_is_refused_not_read_forever(tmp_path: Path, small: Path, summary: Path) -> None:
    """A named pipe blocked the read forever (a hang); /dev/zero was read without end."""
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    refused(["analyze", str(fifo), *HAND], str(fifo), "not a regular file")
    refused(["analyze", str(zero), *HAND], str(zero), "not a regular file")
    refused(["whatif", str(small), "--rates", str(zero), "--json"], str(zero), "not a regular file")


def test_a_file_too_large_to_read_whole_is_refused(small: Path, monkeypatch) -> None:
    """The row-by-row formats read a file whole: past MAX_TEXT_BYTES that is refused, saying what to do (here
    with the bound lowered, instead of writing a gigabyte)."""
    monkeypatch.setattr(files, "MAX_TEXT_BYTES", 100)
    refused(["analyze", str(small), *HAND], str(small), "read whole", "generic CSV or JSONL")


def test_a_fit_past_the_rate_bound_is_refused(tmp_path: Path) -> None:
    """Latencies exactly linear in the output, not growing with the input: the prefill slope came out 2e-18
    s/token and a prefill rate of 4 x 10^17 tokens/s was printed and applied (exit 0)."""
    path = tmp_path / "flat.jsonl"
    path.write_text("".join(json.dumps({"usage": {"prompt_tokens": p, "completion_tokens": c,
                                                  "prompt_tokens_details": {"cached_tokens": k}},
                                        "latency_s": s, "model": "m"}) + "\n"
                            for p, c, k, s in [(500, 80, 250, 5.0), (300, 50, 10**30, 3.5), (800, 30, 400, 2.5)]))
    line = refused(["analyze", str(path)], str(path), "could not fit rates")
    # the least-squares slope is 0 to within rounding: it comes out 2e-18 (past the bound) or exactly 0 (not
    # positive) by the order of the floating-point sums; refused either way
    assert "over 1e+09 tokens/s" in line or "slope 0 s/token is not positive" in line, line


def test_report_that_cannot_write_its_files_says_where(run_dir: Path) -> None:
    """A directory where summary.json (or report.html) goes: IsADirectoryError, a traceback."""
    (run_dir / "summary.json").mkdir()
    refused(["report", str(run_dir)], str(run_dir / "summary.json"), "--no-write")
    res = CliRunner().invoke(cli, ["report", str(run_dir), "--no-write", "--format", "md"])
    assert res.exit_code == 0 and "#" in res.stdout


@pytest.mark.parametrize(("old", "new"), [('"gpu_hour_usd": 5.5', '"gpu_hour_usd": -5.5'),
                                          ('"gpus": 2', '"gpus": -2')], ids=["negative-price", "negative-gpus"])
def test_a_ledger_whose_conditions_give_a_negative_price_is_refused(tmp_path: Path, small: Path, old: str,
                                                                     new: str) -> None:
    """A ledger header whose arm conditions say gpu_hour_usd = -5.5 (or gpus = -2): report, project, analyze
    and whatif printed negative dollars and GPU-hours, exit 0."""
    run = tmp_path / "neg"
    run.mkdir()
    head, *rest = (GOLDEN / "handmade.ledger.jsonl").read_text().splitlines(keepends=True)
    assert old in head
    (run / "ledger.jsonl").write_text(head.replace(old, new) + "".join(rest))
    key = new.split('"')[1]
    # the ledger's schema refuses the header first (line 1, the field named)
    refused(["report", str(run), "--no-write", "--format", "json"], str(run), key)
    refused(["project", str(run), "--input-tokens", "1000", "--output-tokens", "100", "--json"], str(run), key)
    refused(["analyze", str(small), "--rates", str(run), "--format", "json"], str(run), key)


def test_columns_naming_no_column_of_a_csv_say_so(tmp_path: Path) -> None:
    """``--columns input=nope`` counted every row as 'missing input (nope)', as if the cells were empty."""
    path = tmp_path / "log.csv"
    path.write_text("input_tokens,output_tokens,latency_s\n100,5,1\n200,10,2\n")
    refused(["analyze", str(path), "--columns", "input=nope,output=output_tokens", *HAND], str(path),
            "--columns input=nope", "no such column")


def test_whatif_scaled_past_the_token_bound_is_refused(summary: Path) -> None:
    """--scale-input 1000 made calls of 87 million tokens, served as if a context held them (exit 0)."""
    refused(["whatif", str(MOONCAKE), "--rates", str(summary), "--scale-input", "1000", "--json"],
            "--scale-input", "more than 10,000,000")


def _trace_experiment(tmp_path: Path, base_url: str, trace: Path) -> Path:
    exp = tmp_path / f"{trace.stem}.toml"
    exp.write_text(f'''
[experiment]
name = "trace-bounds"
repeats = 1
baseline = "a"
sentinel_tokens = 0

[[arms]]
name = "a"
role = "baseline"
base_url = "{base_url}"
model = "sim"

[[cases]]
name = "short"
prompt = "hi"
max_tokens = 4
temperature = 0.0

[[load]]
name = "t"
mode = "trace"
trace = "{trace.name}"
scale_input = 1000.0
max_tokens = 2
''')
    return exp


def test_a_trace_stage_with_huge_lengths_is_refused_or_skips_the_row(tmp_path: Path) -> None:
    """A Mooncake trace with a length of 10^48 tokens in a run's trace stage, scale_input 1000: ``OverflowError:
    Python int too large``.  Now a file whose every row is too long is bad input naming the file, the line and
    the field; a file with good rows too is replayed without the bad one, counted."""
    from leverbench.engines.simulator import SimConfig, SimulatorThread  # noqa: PLC0415
    from leverbench.ledger.reader import read_ledger  # noqa: PLC0415

    huge = tmp_path / "huge.jsonl"
    huge.write_text('{"timestamp": 0, "input_length": 1' + "0" * 48 + ', "output_length": 3}\n')
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(huge.read_text() + '{"timestamp": 10, "input_length": 20, "output_length": 3}\n')
    with SimulatorThread(SimConfig(prefill_tps=2_000_000, decode_tps=4000, slots=1)) as sim:
        refused(["run", str(_trace_experiment(tmp_path, sim.base_url, huge)), "--out", str(tmp_path / "r1")],
                str(huge), "first at line 1", "input_length above 10,000,000 tokens", progress=True)
        res = CliRunner().invoke(cli, ["run", str(_trace_experiment(tmp_path, sim.base_url, mixed)), "--out",
                                       str(tmp_path / "r2")])
    assert res.exit_code == 0, res.output[-2000:]
    load = [r for r in read_ledger(tmp_path / "r2").records if r.get("kind") == "load"]
    assert len(load) == 1 and load[0]["prompt_tokens"] < 100_000


def test_a_trace_whose_calls_have_no_input_tokens_is_analysed(tmp_path: Path) -> None:
    """Mooncake rows with input_length 0 (the fuzz's long run): ZeroDivisionError in the prefix-cache row's
    cached share (exit 70), then a 'None' printed in its place."""
    path = tmp_path / "zero.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 0, "output_length": 5,
                                        "hash_ids": []}) + "\n" for i in range(3)))
    res = CliRunner().invoke(cli, ["analyze", str(path), *HAND, "--format", "md"])
    assert res.exit_code == 0 and res.exception is None, res.output[-2000:]
    assert "None" not in res.stdout
