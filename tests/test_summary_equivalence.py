"""The vectorized analysis computes what the record-by-record one did.

``tests/golden/NAME.summary.json`` is ``summarize`` of ``NAME.ledger.jsonl`` as computed before the
analysis worked on columns (see tests/golden/make_golden.py): two real runs of the embedded
llama.cpp engine, a simulator run and a hand-made ledger that reaches the corners (failed, retried
and orphaned calls, probes, sentinels, metrics, tool calls, reasoning, variants, refused fits).
Floats must agree to 1e-9 relative; everything else exactly, ints staying ints.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from ledgers import call, header, ledger, turn

from leverbench.analysis.regression import MAX_SCATTER_POINTS
from leverbench.analysis.summary import summarize
from leverbench.ledger import reader
from leverbench.ledger.reader import Ledger, read_ledger

GOLDEN = Path(__file__).parent / "golden"
NAMES = sorted(p.name.removesuffix(".ledger.jsonl") for p in GOLDEN.glob("*.ledger.jsonl"))


def same(got, want, where="summary"):
    """Assert *got* equals *want* (both JSON-shaped): floats to 1e-9 relative, ints as ints."""
    if isinstance(want, dict):
        assert isinstance(got, dict), where
        if got.get("x_sampled"):  # a decomposition row whose scatter points were capped: compare the rest
            got = {k: v for k, v in got.items() if k not in ("x", "y", "x_sampled")}
            want = {k: v for k, v in want.items() if k not in ("x", "y")}
        assert sorted(got) == sorted(want), f"{where}: keys {sorted(set(got) ^ set(want))}"
        for k in want:
            same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert type(got) is float, f"{where}: {got!r} is not a float (want {want!r})"
        if math.isnan(want):
            assert math.isnan(got), where
        else:
            assert got == pytest.approx(want, rel=1e-9), f"{where}: {got!r} != {want!r}"
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"


def as_json(s: dict) -> dict:
    return json.loads(json.dumps(s))


@pytest.mark.parametrize("name", NAMES)
def test_summary_matches_golden(name):
    want = json.loads((GOLDEN / f"{name}.summary.json").read_text())
    same(as_json(summarize(read_ledger(GOLDEN / f"{name}.ledger.jsonl"))), want)


@pytest.mark.parametrize("name", NAMES)
def test_large_ledger_path_matches_golden(name, monkeypatch):
    """A ledger read as a large one (calls kept as columns, records parsed again on demand, small
    read blocks) summarizes the same, and its records are the ones read at once."""
    path = GOLDEN / f"{name}.ledger.jsonl"
    monkeypatch.setattr(reader, "LAZY_MIN_BYTES", 0)
    monkeypatch.setattr(reader, "BLOCK_BYTES", 997)
    led = read_ledger(path)
    assert led._records is None  # nothing materialized yet
    want = json.loads((GOLDEN / f"{name}.summary.json").read_text())
    same(as_json(summarize(led)), want)
    assert led._records is None  # summarize did not need the call records as dicts
    monkeypatch.setattr(reader, "LAZY_MIN_BYTES", 1 << 40)
    eager = read_ledger(path)
    assert led.records == eager.records and led.warnings == eager.warnings
    assert list(led.of_kind("turn")) == list(eager.of_kind("turn"))


@pytest.mark.parametrize("name", NAMES)
def test_in_memory_ledger_matches_golden(name):
    """A Ledger built from record dicts (as tests and callers do) takes the same path to the same numbers."""
    led = read_ledger(GOLDEN / f"{name}.ledger.jsonl")
    mem = Ledger(path=led.path, header=led.header, records=list(led.records), warnings=led.warnings)
    same(as_json(summarize(mem)), json.loads((GOLDEN / f"{name}.summary.json").read_text()))


@pytest.mark.parametrize("kind", ["call", "turn"])
def test_columns_of_reader_and_of_records_agree(kind, monkeypatch):
    monkeypatch.setattr(reader, "LAZY_MIN_BYTES", 0)
    monkeypatch.setattr(reader, "BLOCK_BYTES", 512)
    for name in NAMES:
        led = read_ledger(GOLDEN / f"{name}.ledger.jsonl")
        a = led.columns(kind)
        b = reader.Columns.of(kind, led.of_kind(kind))
        assert a.n == b.n == len(list(led.of_kind(kind)))
        for k in reader.LABELS:
            (ca, na), (cb, nb) = a.labels[k], b.labels[k]
            assert [na[i] for i in ca] == [nb[i] for i in cb] == [r.get(k) for r in led.of_kind(kind)]
        assert sorted(a.numbers) == sorted(b.numbers) and sorted(a.flags) == sorted(b.flags)
        for k in a.numbers:
            np.testing.assert_array_equal(a.numbers[k], b.numbers[k])
        for k in a.flags:
            np.testing.assert_array_equal(a.flags[k], b.flags[k])
        np.testing.assert_array_equal(a.failed, b.failed)
        np.testing.assert_array_equal(a.has_timings, b.has_timings)


def test_scatter_points_are_capped_evenly():
    arms = {"base": {"prefix_cache": False}, "fast": {"prefix_cache": False, "drafter": "x"}}
    recs = []
    n = 3 * MAX_SCATTER_POINTS + 7
    for r in range(3):
        for arm in arms:
            calls = [call(arm, "c", r, latency=0.1 + (i % 50) / 100.0, out=10 + i % 50, step=i)
                     for i in range(n // 3 + (r == 0) * (n % 3))]
            recs += turn(arm, "c", r, sum(c["latency_s"] for c in calls), 0, calls=calls)
    s = summarize(ledger(header(arms, ["c"]), recs))
    for d in s["decomposition"]:
        assert d["points"] == n
        assert d["x_sampled"] is True and len(d["x"]) == len(d["y"]) == MAX_SCATTER_POINTS
        every = [c for c in recs if c["kind"] == "call" and c["arm"] == d["arm"]]
        pick = [i * n // MAX_SCATTER_POINTS for i in range(MAX_SCATTER_POINTS)]
        assert d["x"] == [every[i]["completion_tokens"] for i in pick]
        assert d["y"] == [round(every[i]["latency_s"], 4) for i in pick]
        assert d["decode_tps"] == pytest.approx(100.0)
    small = summarize(ledger(header(arms, ["c"]), [r for r in recs if r["kind"] != "call" or r["step"] < 10]))
    assert all("x_sampled" not in d and len(d["x"]) == d["points"] for d in small["decomposition"])


@pytest.mark.parametrize("name", NAMES)
def test_turn_groups_shortcut_agrees_with_sorting(name):
    from leverbench.analysis.dataset import _turn_groups_by_sorting, dataset, turn_groups

    ds = dataset(read_ledger(GOLDEN / f"{name}.ledger.jsonl"))
    c = ds.call
    select = ds.turn.ok[c.turn]
    rows = np.flatnonzero(select)
    got = turn_groups(ds, select)
    want = _turn_groups_by_sorting(ds.cell_code(c.arm, c.case), c.turn[rows], rows, len(ds.turn), len(c))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_call_outside_its_turns_cell_is_grouped_by_its_own_cell():
    arms = {"base": {}}
    recs = turn("base", "c", 0, 2.0, 10, calls=[call("base", "c", 0, latency=1.0, out=5),
                                                call("base", "d", 0, latency=1.0, out=5, step=1)])
    recs += turn("base", "c", 1, 2.0, 10)
    s = summarize(ledger(header(arms, ["c", "d"]), recs))
    server = {r["case"]: r for r in s["server"]}
    assert server["c"]["turns"] == 2 and server["d"]["turns"] == 1
    shares = {r["case"]: r for r in s["time_shares"]}
    assert shares["d"]["turn_s"] == 2.0 and shares["d"]["decode_s"] == pytest.approx(0.9)
    assert shares["c"]["decode_s"] == pytest.approx((0.9 + 1.8) / 2)


def _read_all_ways(path: Path, monkeypatch, salvage: bool = False) -> list:
    """read_ledger of *path* as a small ledger, as a large one, and as a large one parsed in two
    processes: (header, records, warnings) or the error message, each."""
    out = []
    for lazy, parallel in ((1 << 40, 1 << 40), (0, 1 << 40), (0, 0)):
        monkeypatch.setattr(reader, "LAZY_MIN_BYTES", lazy)
        monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", parallel)
        try:
            led = read_ledger(path, salvage=salvage)
            out.append((led.header, led.records, led.warnings))
        except reader.LedgerError as exc:
            out.append(str(exc))
    return out


def test_two_processes_read_what_one_reads(monkeypatch):
    path = GOLDEN / "demo2.ledger.jsonl"
    used = []
    result = reader._Helper.result
    monkeypatch.setattr(reader._Helper, "result", lambda self: used.append(r := result(self)) or r)
    one, large, two = _read_all_ways(path, monkeypatch)
    assert used and used[0] is not None  # the helper process did its part
    assert one == large == two
    monkeypatch.setattr(reader, "LAZY_MIN_BYTES", 0)
    same(as_json(summarize(read_ledger(path))), json.loads((GOLDEN / "demo2.summary.json").read_text()))


def test_a_failed_helper_is_replaced_by_this_process(monkeypatch):
    monkeypatch.setattr(reader._Helper, "result", lambda self: None)
    one, large, two = _read_all_ways(GOLDEN / "demo1.ledger.jsonl", monkeypatch)
    assert one == large == two


LINES = (GOLDEN / "handmade.ledger.jsonl").read_bytes().split(b"\n")[:-1]
RESUME = b'{"kind":"resume","at":"2026-01-01T00:00:00+00:00","tool_version":"test","completed_units":3,"repeats":4}'
UNICODE = b'{"kind":"metrics","arm":"base","when":"before","t":1.0,"samples":{"note":"caf\xc3\xa9 \xe2\x80\x94 done"}}'

# case -> (what is done to the hand-made ledger's lines, the lines (1-based) the reader must name without
# --salvage (error) and with it (warnings), and whether it is a cut write (read with a note either way)).
# A crash can cut only the last line written; the writer ends it with a newline when a run resumes, and the
# resumed run's first record is a resume record (or, when nothing was done, a fresh run header).


def _damage(case: str, lines: list[bytes]) -> tuple[list[bytes], bool]:
    """The lines of *case* and whether the file ends with a newline."""
    n = len(lines)
    late = n * 3 // 5  # beyond the middle: in the helper process's part when the file is read in two
    if case == "cut_last":
        lines[-1] = lines[-1][:40]
    elif case == "cut_last_inside_a_character":
        lines[-1] = UNICODE[:UNICODE.index(b"\xe2") + 1]  # the first byte of a 3-byte character
    elif case == "cut_then_resumed":
        lines[n // 2] = lines[n // 2][:55]
        lines.insert(n // 2 + 1, RESUME)
    elif case == "cut_then_resumed_late":
        lines[late] = lines[late][:30]
        lines.insert(late + 1, RESUME)
    elif case == "cut_then_fresh_header":  # resumed before any unit was done: the run writes its header again
        lines[n // 2] = lines[n // 2][:55]
        lines.insert(n // 2 + 1, lines[0])
    elif case == "cut_in_the_middle":  # cut, but no resumed run wrote after it: damage
        lines[n // 2] = lines[n // 2][:55]
    elif case == "garbage_in_the_middle":
        lines[5] = b"%%% this is not json"
    elif case == "garbage_late_and_cut_last":
        lines[late] = b'{"kind": "call", "arm": "base", oops}'
        lines[-1] = lines[-1][:40]
    elif case == "blank_lines":
        lines[3:3] = [b"", b"  "]
        lines[-5:-5] = [b"\t"]
    elif case == "unicode_record":
        lines.insert(n - 2, UNICODE)
    elif case == "unknown_kind_late":
        lines[n - 3] = b'{"kind": "nope"}'
    elif case == "not_utf8_late":
        lines[n - 2] = lines[n - 2][:30] + b"\xff" + lines[n - 2][30:]
    elif case == "bad_line_early_not_utf8_late":
        lines[2] = b'{"kind": "nope"}'
        lines[n - 2] = lines[n - 2][:30] + b"\xc3" + lines[n - 2][31:]
    elif case == "not_a_dict_late":
        lines[n - 4] = b"[1, 2]"
    return lines, case not in ("cut_last", "cut_last_inside_a_character", "no_newline_at_end")


N, LATE = len(LINES), len(LINES) * 3 // 5
# case -> (lines named as damage, lines noted as cut writes), 1-based
EXPECTED = {
    "cut_last": ([], [N]),
    "cut_last_inside_a_character": ([], [N]),
    "cut_then_resumed": ([], [N // 2 + 1]),
    "cut_then_resumed_late": ([], [LATE + 1]),
    "cut_then_fresh_header": ([], [N // 2 + 1]),
    "cut_in_the_middle": ([N // 2 + 1], []),
    "garbage_in_the_middle": ([6], []),
    "garbage_late_and_cut_last": ([LATE + 1], [N]),
    "blank_lines": ([], []),
    "unicode_record": ([], []),
    "unknown_kind_late": ([N - 2], []),
    "not_utf8_late": ([N - 1], []),
    "bad_line_early_not_utf8_late": ([3, N - 1], []),
    "not_a_dict_late": ([N - 3], []),
    "no_newline_at_end": ([], []),
}


@pytest.mark.parametrize("salvage", [False, True], ids=["strict", "salvage"])
@pytest.mark.parametrize("case", list(EXPECTED))
def test_bad_lines_read_the_same_every_way(case, salvage, tmp_path, monkeypatch):
    """A cut last write is read with a note; any other bad line is an error naming the file and the line
    and telling of --salvage, or with --salvage a warning naming it.  The small, the large and the
    two-process reader agree on every case."""
    lines, newline_at_end = _damage(case, list(LINES))
    (tmp_path / "ledger.jsonl").write_bytes(b"\n".join(lines) + (b"\n" if newline_at_end else b""))
    one, large, two = _read_all_ways(tmp_path / "ledger.jsonl", monkeypatch, salvage)
    assert one == large == two
    damaged, cut = EXPECTED[case]
    path = tmp_path / "ledger.jsonl"
    if damaged and not salvage:
        assert isinstance(one, str), f"read a damaged ledger: {one[2] if not isinstance(one, str) else ''}"
        # bytes that are not UTF-8 are named first, wherever they are (the file may be no text at all)
        first = damaged[-1] if case == "bad_line_early_not_utf8_late" else damaged[0]
        assert one.startswith(f"{path}: line {first} ")
        assert "--salvage" in one
        return
    assert not isinstance(one, str), one
    _, records, warnings = one
    assert len(warnings) == len(damaged) + len(cut), warnings
    for line in cut:
        assert any(w.startswith(f"{path}: line {line} is incomplete") for w in warnings), warnings
    for line in damaged:
        assert any(w.startswith(f"{path}: line {line} ") and w.endswith("skipped (--salvage)") for w in warnings)
    nonblank = sum(1 for x in lines if x.strip())
    assert len(records) == nonblank - 1 - len(damaged) - len(cut)  # every other line after the header is read
    if case == "unicode_record":
        assert records[-3]["samples"]["note"] == "café — done"
