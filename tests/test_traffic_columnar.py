"""The columnar traffic path: bounded-memory reading, sums instead of per-call objects, and analyze's output formats."""

from __future__ import annotations

import html as html_text
import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from leverbench.analysis.rates.regression import regress
from leverbench.analysis.traffic.analyze import Rates, analyze_traffic, fit_rates
from leverbench.analysis.traffic.sums import percentiles
from leverbench.cli.analyze import analyze_command
from leverbench.pipeline.traffic_files import analyze_file
from leverbench.workload.traces import TrafficCall, load_traffic, records

TRACES = Path(__file__).parent / "data" / "traces"  # slices of public traces: see its README.md
RATES = {None: Rates(prefill_tps=2000.0, decode_tps=50.0, source="test", drafter_speedup=1.8)}


def _log(path: Path, n: int = 3000, seed: int = 7) -> list[tuple[int, int, int, float, str]]:
    """A generic CSV log of n calls (input, output, cached, latency, model) with exact latencies."""
    rnd = random.Random(seed)
    rows = []
    for _ in range(n):
        model = rnd.choice(["a", "b"])
        i, o = rnd.randint(10, 90000), rnd.randint(1, 900)
        c = rnd.randint(0, i)
        rows.append((i, o, c, round(0.1 + (i - c) / 4000 + o / (40 if model == "a" else 20), 6), model))
    path.write_text("input_tokens,output_tokens,cached_tokens,latency_s,model\n"
                    + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return rows


def _same(a: object, b: object) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-12, abs=1e-12)
    else:
        assert a == b


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=60))
def test_percentiles_from_value_counts_equal_numpy(xs: list[int]) -> None:
    """The distributions are read from value counts (bounded memory): exactly NumPy's linear percentiles."""
    values, counts = np.unique(np.asarray(xs), return_counts=True)
    assert percentiles(values, counts, [0, 1, 50, 90, 99, 100]) == \
        [float(v) for v in np.percentile(np.asarray(xs, dtype=float), [0, 1, 50, 90, 99, 100])]


def test_fit_from_moments_equals_the_fit_on_the_points(tmp_path: Path) -> None:
    """fit_rates works from centred moments (two passes, bounded memory): its decode fit is regress's on the points."""
    rows = _log(tmp_path / "log.csv", n=400)
    calls = [TrafficCall(input_tokens=i, output_tokens=o, cached_tokens=c, latency_s=lat, model=m)
             for i, o, c, lat, m in rows]
    book, fits = fit_rates(calls, cached_served=True)
    for model in ("a", "b"):
        pts = [r for r in rows if r[4] == model]
        ref = regress([r[1] for r in pts], [r[3] for r in pts], uncached=[r[0] - r[2] for r in pts])
        row = next(f for f in fits if f["model"] == model)
        assert row["method"] == ref["method"] == "latency ~ output + uncached input"
        for key in ("decode_tps", "intercept_s", "r2"):
            assert row[key] == pytest.approx(ref[key], rel=1e-9)
        assert book[model].decode_tps == pytest.approx(40.0 if model == "a" else 20.0, rel=1e-6)
        assert book[model].prefill_tps == pytest.approx(4000.0, rel=1e-6)


def test_a_log_larger_than_the_memory_budget_is_spilled_and_read_the_same(tmp_path: Path, monkeypatch) -> None:
    """Past LEVERBENCH_TRAFFIC_MEMORY_MB the usable rows go to temporary Arrow files, scanned lazily: same numbers."""
    _log(tmp_path / "log.csv")
    in_memory = load_traffic(tmp_path / "log.csv")
    assert in_memory.spill is None
    monkeypatch.setenv("LEVERBENCH_TRAFFIC_MEMORY_MB", "0.001")
    spilled = load_traffic(tmp_path / "log.csv")
    assert spilled.spill is not None and len(list(Path(spilled.spill.name).glob("*.arrow"))) >= 1
    assert spilled.used == in_memory.used == 3000
    a = analyze_traffic(in_memory, RATES, cached_served=True)
    b = analyze_traffic(spilled, RATES, cached_served=True)
    _same(a, b)  # sums taken in another order: equal to the last few bits
    assert spilled.calls == in_memory.calls


def test_analyze_builds_no_per_call_objects(tmp_path: Path, monkeypatch) -> None:
    """The defect behind 13.5 s for 2,000,000 calls: analyze built a Python record per call.  Now it reads the
    columnar frame only; the records are never built (trace replay still gets them on demand)."""
    _log(tmp_path / "log.csv", n=500)

    def refuse(*_a, **_k):
        raise AssertionError("analyze built per-call records")

    monkeypatch.setattr(records, "frame_calls", refuse)
    res = analyze_file(tmp_path / "log.csv")
    assert res["calls"] == 500 and {f["model"] for f in res["fits"]} == {"a", "b", "all calls"}
    res = analyze_file(tmp_path / "log.csv", prefill_tps=2000, decode_tps=50)
    assert res["rates_used"] == ["given by hand"]


def test_typed_pass_falls_back_to_text_and_lines(tmp_path: Path) -> None:
    """A clean log is read typed; a cell that is no number (CSV) or a value of another JSON type sends the import
    to the text pass, a bad JSON line to the line-by-line pass: the same rows, reasons and exact line numbers."""
    good = [{"input_tokens": 100 * k, "output_tokens": k} for k in range(1, 6)]
    clean = tmp_path / "clean.jsonl"
    clean.write_text("".join(json.dumps(r) + "\n" for r in good))
    typed = tmp_path / "typed.jsonl"  # blank lines: record numbers are not line numbers
    typed.write_text("\n\n".join(json.dumps(r) for r in good) + "\n"
                     + json.dumps({"input_tokens": -1, "output_tokens": 1}))
    text = tmp_path / "text.jsonl"  # a string where a number goes: polars cannot type it
    text.write_text("".join(json.dumps(r) + "\n" for r in good) + json.dumps({"input_tokens": "x", "output_tokens": 1}))
    lines = tmp_path / "lines.jsonl"  # a line that is no JSON at all
    lines.write_text("".join(json.dumps(r) + "\n" for r in good) + "{oops\n")
    base = [(c.input_tokens, c.output_tokens) for c in load_traffic(clean).calls]
    t = load_traffic(typed)
    assert [(c.input_tokens, c.output_tokens) for c in t.calls] == base
    assert t.skipped == {"negative input (input_tokens)": 1}
    assert t.first_skipped_line == {"negative input (input_tokens)": 10}
    x = load_traffic(text)
    assert x.skipped == {"non-numeric input (input_tokens)": 1}
    assert x.first_skipped_line["non-numeric input (input_tokens)"] == 6
    b = load_traffic(lines)
    assert b.skipped == {"bad JSON": 1} and b.first_skipped_line["bad JSON"] == 6
    assert [(c.input_tokens, c.output_tokens) for c in b.calls] == base
    csv = tmp_path / "padded.csv"
    csv.write_text("input_tokens,output_tokens,cached_tokens\n100,1, 7 \n200,2,\n 300 ,1e1,x\n")
    calls = load_traffic(csv).calls  # padded numbers and 1e1 as the csv module reads them; x is not a count
    assert ([(c.input_tokens, c.output_tokens, c.cached_tokens) for c in calls]
            == [(100, 1, 7), (200, 2, None), (300, 10, None)])


def test_analyze_formats(tmp_path: Path) -> None:
    """analyze --format table|md|json|html shows the same tables; html is one page that fetches and runs nothing."""
    runner = CliRunner()
    args = [str(TRACES / "AzureLLMInferenceTrace_code.csv"), "--prefill-tps", "2000", "--decode-tps", "50",
            "--cached-share", "0.5", "--drafter-speedup", "1.8"]
    data = json.loads(runner.invoke(analyze_command, [*args, "--format", "json"]).output)
    lever = data["levers"][0]
    share = f"{lever['saved_share']:.0%}"
    table = runner.invoke(analyze_command, args)
    md = runner.invoke(analyze_command, [*args, "--format", "md"])
    out = tmp_path / "traffic.html"
    html = runner.invoke(analyze_command, [*args, "--format", "html", "--out", str(out)])
    assert table.exit_code == md.exit_code == html.exit_code == 0, (table.output, md.output, html.output)
    assert html.output.strip() == str(out)
    page = out.read_text()
    for text in (table.output, md.output, page):
        assert "Levers, ranked by time saved" in text and lever["lever"] in text and share in text
        assert "Lengths (tokens)" in text and data["recommendation"][:60] in " ".join(text.split())
    assert f"| 1 | {lever['lever']} |" in md.output
    assert 'http-equiv="Content-Security-Policy"' in page and "default-src 'none'" in html_text.unescape(page)
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert page.count("<svg") == 2  # phase shares by bucket, lever savings
    # the old spelling of the trace format still works
    old = runner.invoke(analyze_command, [*args, "--format", "azure", "--json"])
    assert json.loads(old.output)["input"]["format"] == "azure"


def test_a_csv_row_with_more_cells_than_the_header_is_read_as_before(tmp_path: Path) -> None:
    """A row with an extra cell (a trailing comma, a stray value) is read, its extra cells ignored, as the csv
    module's readers did before the columnar reader; it does not stop the whole import.  The same for a named
    format (Azure) as for the generic one."""
    gen = tmp_path / "extra.csv"
    gen.write_text("input_tokens,output_tokens\n100,1\n200,2,\n300,3,9\n400,4\n")
    assert [(c.input_tokens, c.output_tokens) for c in load_traffic(gen).calls] == [(100, 1), (200, 2), (300, 3),
                                                                                    (400, 4)]
    az = tmp_path / "azure.csv"
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,4808,10\n"
                  "2023-11-16 18:17:04.03,3180,8,extra\n2023-11-16 18:17:04.07,110,27\n")
    t = load_traffic(az, "azure")
    assert [(c.input_tokens, c.output_tokens) for c in t.calls] == [(4808, 10), (3180, 8), (110, 27)]
    assert t.skipped == {}


def test_a_quoted_csv_cell_spanning_lines_is_read_as_before(tmp_path: Path) -> None:
    """A quoted cell holding a newline (a prompt column, a note) is one cell, as the csv module reads it: the
    import goes on (the row's reason named at its line), it does not stop on polars' internal error, and a
    short row is still named."""
    log = tmp_path / "multiline.csv"
    log.write_text('input_tokens,output_tokens,note\n100,1,"a\nb"\n"20\n0",2,x\n300,3,y\n400\n500,5,z\n')
    t = load_traffic(log)
    assert [(c.input_tokens, c.output_tokens) for c in t.calls] == [(100, 1), (300, 3), (500, 5)]
    assert t.skipped == {"non-numeric input (input_tokens)": 1, "fewer cells than the header": 1}
    assert t.first_skipped_line == {"non-numeric input (input_tokens)": 5, "fewer cells than the header": 7}
