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
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledgers import call, header, ledger, turn

from leverbench.analysis.rates.regression import SCATTER_POINTS_KEPT
from leverbench.analysis.summary import summarize
from leverbench.ledger import reader
from leverbench.ledger.reader import Columns, Ledger, read_ledger
from leverbench.ledger.records import (
    CALL_FLAGS,
    CALL_NUMBERS,
    CALL_TIMINGS,
    LABELS,
    LEDGER_SCHEMA,
    TURN_FLAGS,
    TURN_NUMBERS,
)

GOLDEN = Path(__file__).parent / "golden"
NAMES = sorted(p.name.removesuffix(".ledger.jsonl") for p in GOLDEN.glob("*.ledger.jsonl"))


#: Keys the summary gained after the goldens were made, each checked here against its own oracle instead: a decode
#: fit's ``tps_over_context`` (issue 39: the report shows it, no longer computing it) is 1 / (d0 + d1·L) at the two
#: ends of its ``range_context``, worked out from the golden's own d0, d1 and range.
ADDED_SINCE_GOLDEN = {"tps_over_context", "companion_calls", "companion_failed"}


def _added_keys_hold(got: dict, want: dict, where: str) -> None:
    for key in ("companion_calls", "companion_failed"):  # the golden runs timed each turn alone: no companions
        if key in got and key not in want:
            assert got[key] == 0, f"{where}.{key}"
    if "tps_over_context" in got and "tps_over_context" not in want:
        d0, d1, ends = want["d0_s_per_token"], want["d1_s_per_token_per_ctx"], want["range_context"]
        expected = [1.0 / (d0 + d1 * L) if d0 + d1 * L > 0 else None for L in ends]
        assert got["tps_over_context"] == pytest.approx(expected, rel=1e-9), f"{where}.tps_over_context"


def same(got, want, where="summary"):
    """Assert *got* equals *want* (both JSON-shaped): floats to 1e-9 relative, ints as ints; a key of
    :data:`ADDED_SINCE_GOLDEN` that *want* lacks is checked by its oracle."""
    if isinstance(want, dict):
        assert isinstance(got, dict), where
        _added_keys_hold(got, want, where)
        got = {k: v for k, v in got.items() if k in want or k not in ADDED_SINCE_GOLDEN}
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


def read_as_columns(monkeypatch, checked: bool = False, chunk: int = 997) -> None:
    """Make read_ledger take the columnar path for any file; *checked*: as if polars refused the
    whole file, so that it reads chunks (small ones: lines straddle them) and checks line by line
    each chunk it refuses."""
    monkeypatch.setattr(reader, "COLUMNAR_MIN_BYTES", 0)
    if checked:
        frame = reader._frame
        monkeypatch.setattr(reader, "_frame", lambda source: None if isinstance(source, Path) else frame(source))
        monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)


def digest(cols: Columns) -> dict:
    """*cols* as plain values per row (labels decoded, NaN as None), with each array's dtype."""
    out = {k: [names[i] for i in codes.tolist()] for k, (codes, names) in cols.labels.items()}
    arrays = {**cols.numbers, **cols.flags, "failed": cols.failed, "has_timings": cols.has_timings}
    for k, v in arrays.items():
        out[k] = (str(v.dtype), [None if x != x else x for x in v.tolist()])
    out["label_dtypes"] = sorted({str(codes.dtype) for codes, _ in cols.labels.values()})
    for k, codes in cols.hashes.items():  # equal texts, equal codes: compared as the pattern of first appearances
        first: dict[int, int] = {}
        out[f"hash {k}"] = [None if c < 0 else first.setdefault(c, len(first)) for c in codes.tolist()]
    return out


def same_columns(led: Ledger, kind: str) -> None:
    """The reader's columns of *kind* are those built from its records (dicts)."""
    records = [r for r in led.records if r["kind"] == kind]
    got, want = digest(led.columns(kind)), digest(Columns.of(kind, records))
    assert got == want
    assert led.columns(kind).n == len(records)
    for k in LABELS:
        assert got[k] == [r.get(k) for r in records]
    assert got["label_dtypes"] == ["int64"] and got["failed"][0] == got["has_timings"][0] == "bool"


@pytest.mark.parametrize("checked", [False, True], ids=["columns", "chunks"])
@pytest.mark.parametrize("name", NAMES)
def test_columnar_path_matches_golden(name, checked, monkeypatch):
    """A ledger read as a large one (polars' columns for calls and turns, records parsed again on
    demand) summarizes the same, and its records are the ones read line by line."""
    path = GOLDEN / f"{name}.ledger.jsonl"
    read_as_columns(monkeypatch, checked)
    led = read_ledger(path)
    assert led._records is None and sorted(led._columns) == ["call", "turn"]  # nothing parsed as dicts yet
    want = json.loads((GOLDEN / f"{name}.summary.json").read_text())
    same(as_json(summarize(led)), want)
    texts = led.header["config"]["experiment"].get("store_text")  # (with texts, equal work reads the answers)
    assert texts or led._records is None  # summarize did not need the call records as dicts
    monkeypatch.setattr(reader, "COLUMNAR_MIN_BYTES", 1 << 40)
    eager = read_ledger(path)
    others = ("run", "probe", "sentinel", "metrics", "warmup", "resume")
    assert list(led.of_kind(*others)) == list(eager.of_kind(*others)) and (texts or led._records is None)
    assert led.records == eager.records and led.warnings == eager.warnings
    assert list(led.of_kind("turn")) == list(eager.of_kind("turn"))
    for kind in ("call", "turn"):
        same_columns(led, kind)


def test_records_parsed_later_come_from_the_file_as_read(tmp_path, monkeypatch):
    """A ledger read as columns parses its records on first use: lines appended since are not among
    them; a file cut or replaced since is an error that says to read it again."""
    path = tmp_path / "ledger.jsonl"
    path.write_bytes((GOLDEN / "sim.ledger.jsonl").read_bytes())
    read_as_columns(monkeypatch)
    want = read_ledger(path).records
    led = read_ledger(path)
    with open(path, "a") as fh:
        fh.write(json.dumps({"kind": "resume", "at": "later"}) + "\n")
    assert led.records == want
    for change in ("cut", "replaced"):
        led = read_ledger(path)
        data = path.read_bytes()
        if change == "cut":
            path.write_bytes(data[: len(data) // 2])
        else:  # another file of the same size moved into its place
            (tmp_path / "other.jsonl").write_bytes(data)
            (tmp_path / "other.jsonl").replace(path)
        with pytest.raises(reader.LedgerError, match="changed since it was read.*read it again"):
            _ = led.records  # a property: the first access parses the file, and must refuse the changed one


def test_a_cut_line_is_read_by_chunks_without_a_whole_file_attempt(tmp_path, monkeypatch):
    """A line the writer did not end with "}" (a crash cut it) sends polars to chunks at once: reading
    the whole file would be refused after all the work.  Records with white space before them and
    blank lines keep their columns."""
    lines = (GOLDEN / "demo1.ledger.jsonl").read_text().splitlines()
    lines[5], lines[9:9] = "  " + lines[5], ["", " \t"]
    (tmp_path / "ledger.jsonl").write_text("\n".join([*lines, lines[-1][:30]]) + "\n")
    read_as_columns(monkeypatch)
    sources = []
    frame = reader._frame
    monkeypatch.setattr(reader, "_frame", lambda source: sources.append(type(source)) or frame(source))
    led = read_ledger(tmp_path)
    assert sources and bytes in sources and not any(issubclass(t, Path) for t in sources)
    assert led._records is None and sorted(led._columns) == ["call", "turn"]
    assert led.warnings == [f"{tmp_path / 'ledger.jsonl'}: line {len(lines) + 1} is incomplete (a run cut off while "
                            "writing); ignored"]
    for kind in ("call", "turn"):
        same_columns(led, kind)


def test_a_small_ledger_does_not_load_polars():
    """Reading hundreds of records costs no columnar library start-up."""
    code = ("import sys; from leverbench.ledger.reader import read_ledger; "
            f"read_ledger({str(GOLDEN / 'demo2.ledger.jsonl')!r}).columns('call'); print('polars' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("name", NAMES)
def test_in_memory_ledger_matches_golden(name):
    """A Ledger built from record dicts (as tests and callers do) takes the same path to the same numbers."""
    led = read_ledger(GOLDEN / f"{name}.ledger.jsonl")
    mem = Ledger(path=led.path, header=led.header, records=list(led.records), warnings=led.warnings)
    same(as_json(summarize(mem)), json.loads((GOLDEN / f"{name}.summary.json").read_text()))


def test_scatter_points_are_capped_evenly():
    arms = {"base": {"prefix_cache": False}, "fast": {"prefix_cache": False, "drafter": "x"}}
    recs = []
    n = 3 * SCATTER_POINTS_KEPT + 7
    for r in range(3):
        for arm in arms:
            calls = [call(arm, "c", r, latency=0.1 + (i % 50) / 100.0, out=10 + i % 50, step=i)
                     for i in range(n // 3 + (r == 0) * (n % 3))]
            recs += turn(arm, "c", r, sum(c["latency_s"] for c in calls), 0, calls=calls)
    s = summarize(ledger(header(arms, ["c"]), recs))
    for d in s["decomposition"]:
        assert d["points"] == n
        assert d["x_sampled"] is True and len(d["x"]) == len(d["y"]) == SCATTER_POINTS_KEPT
        every = [c for c in recs if c["kind"] == "call" and c["arm"] == d["arm"]]
        pick = [i * n // SCATTER_POINTS_KEPT for i in range(SCATTER_POINTS_KEPT)]
        assert d["x"] == [every[i]["completion_tokens"] for i in pick]
        assert d["y"] == [round(every[i]["latency_s"], 4) for i in pick]
        assert d["decode_tps"] == pytest.approx(100.0)
    small = summarize(ledger(header(arms, ["c"]), [r for r in recs if r["kind"] != "call" or r["step"] < 10]))
    assert all("x_sampled" not in d and len(d["x"]) == d["points"] for d in small["decomposition"])


@pytest.mark.parametrize("name", NAMES)
def test_turn_groups_shortcut_agrees_with_sorting(name):
    from leverbench.analysis.base.dataset import _turn_groups_by_sorting, dataset, turn_groups

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


WAYS = {"lines": (1 << 40, False), "columns": (0, False), "chunks": (0, True)}


def _read_all_ways(path: Path, monkeypatch, salvage: bool = False, chunk: int = 997) -> list:
    """read_ledger of *path* line by line, as columns, and as columns by chunks of *chunk* bytes:
    (header, records, warnings, the columns' digest) or the error message, each."""
    out = []
    for size, checked in WAYS.values():
        with monkeypatch.context() as m:
            read_as_columns(m, checked, chunk)
            m.setattr(reader, "COLUMNAR_MIN_BYTES", size)
            try:
                led = read_ledger(path, salvage=salvage)
                cols = {kind: digest(led.columns(kind)) for kind in ("call", "turn")}
                out.append((led.header, led.records, led.warnings, cols))
            except reader.LedgerError as exc:
                out.append(str(exc))
    return out


def test_what_polars_refuses_is_a_record_its_schema_refuses(tmp_path, monkeypatch):
    """A record polars cannot type (a label that is not text, a flag that is not true or false) is one its
    schema refuses (issue 28): every way of reading names its line and field; with salvage each reads the
    others the same, and such a ledger summarizes the same as its records."""
    lines = (GOLDEN / "handmade.ledger.jsonl").read_text().splitlines()
    rec = json.loads(lines[-1])
    lines.append(json.dumps({**rec, "arm": 7, "retried": 1}))
    (tmp_path / "ledger.jsonl").write_text("\n".join(lines) + "\n")
    small, large, chunks = _read_all_ways(tmp_path / "ledger.jsonl", monkeypatch)
    assert small == large == chunks and f"line {len(lines)}: field arm: " in small
    small, large, chunks = _read_all_ways(tmp_path / "ledger.jsonl", monkeypatch, salvage=True)
    assert small == large == chunks
    read_as_columns(monkeypatch)
    led = read_ledger(tmp_path, salvage=True)
    assert led.skipped == 1 and len(led.records) == len(lines) - 2
    assert summarize(led) == summarize(Ledger(path=led.path, header=led.header, records=led.records,
                                              warnings=led.warnings))


def test_numbers_stored_as_strings_stay_in_columns(tmp_path, monkeypatch):
    """The writer stores a NaN or infinity as "NaN", "+Inf", "-Inf" (where a record holds one: a server's
    ``timings``; a measured duration or count is finite, issue 28): the columnar reader keeps its columns and
    reads them as float() does."""
    lines = (GOLDEN / "demo1.ledger.jsonl").read_text().splitlines()
    calls = [i for i, x in enumerate(lines) if json.loads(x)["kind"] == "call"]
    for i, value in zip(calls, ["+Inf", "NaN", "-Inf"]):
        lines[i] = json.dumps({**json.loads(lines[i]), "timings": {"prompt_ms": value, "cache_n": 1}})
    (tmp_path / "ledger.jsonl").write_text("\n".join(lines) + "\n")
    small, large, chunks = _read_all_ways(tmp_path / "ledger.jsonl", monkeypatch)
    assert small == large == chunks
    read_as_columns(monkeypatch)
    led = read_ledger(tmp_path)
    assert led._records is None and sorted(led._columns) == ["call", "turn"]
    c = led.columns("call")
    t = c.numbers["timings.prompt_ms"]
    assert t[0] == np.inf and np.isnan(t[1]) and t[2] == -np.inf
    assert c.numbers["timings.cache_n"][:3].tolist() == [1, 1, 1]


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
    late = n * 3 // 5  # beyond the middle
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
    and telling of --salvage, or with --salvage a warning naming it.  The line-by-line and the
    columnar reader agree on every case (records, warnings, columns, or the error)."""
    lines, newline_at_end = _damage(case, list(LINES))
    (tmp_path / "ledger.jsonl").write_bytes(b"\n".join(lines) + (b"\n" if newline_at_end else b""))
    one, large, chunks = _read_all_ways(tmp_path / "ledger.jsonl", monkeypatch, salvage)
    assert one == large == chunks
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
    _, records, warnings, _ = one
    assert len(warnings) == len(damaged) + len(cut), warnings
    for line in cut:
        assert any(w.startswith(f"{path}: line {line} is incomplete") for w in warnings), warnings
    for line in damaged:
        assert any(w.startswith(f"{path}: line {line} ") and w.endswith("skipped (--salvage)") for w in warnings)
    nonblank = sum(1 for x in lines if x.strip())
    assert len(records) == nonblank - 1 - len(damaged) - len(cut)  # every other line after the header is read
    if case == "unicode_record":
        assert records[-3]["samples"]["note"] == "café — done"


# Random ledgers for the two readers: records of several kinds whose fields take the values the
# writer stores (text, numbers, null, "NaN"/"+Inf"/"-Inf", objects) or, in wild records, also some it
# never does (a label that is a number, a flag that is 1, a number that is true), among lines cut
# short, noise and blanks.
_number = st.one_of(st.none(), st.integers(-5, 10**20), st.floats(allow_nan=False), st.sampled_from(["NaN", "+Inf"]))
_timings = st.one_of(st.none(), st.dictionaries(st.sampled_from(CALL_TIMINGS), _number, max_size=3))
_fields = {**dict.fromkeys(LABELS, st.one_of(st.none(), st.sampled_from(["a", "b", "5", "é"]))),
           **dict.fromkeys(CALL_NUMBERS + TURN_NUMBERS, _number),
           **dict.fromkeys(CALL_FLAGS + TURN_FLAGS, st.one_of(st.none(), st.booleans())),
           "error": st.one_of(st.none(), st.just({"class": "timeout", "message": "slow"})), "timings": _timings,
           "note": st.text(max_size=8)}
_wild = {**dict.fromkeys(LABELS, st.integers(0, 2)), "step": st.booleans(), "retried": st.integers(0, 1),
         "error": st.just("boom"), "timings": st.just([1]), "kind": st.just("nope")}
_record = st.builds(lambda kind, rest: {"kind": kind, **rest}, st.sampled_from(["call", "call", "turn", "probe",
                    "metrics", "resume", "run"]), st.fixed_dictionaries({}, optional=_fields))
_wild_record = st.builds(lambda rec, extra: {**rec, **extra},
                         _record, st.one_of(*(st.fixed_dictionaries({k: v}) for k, v in _wild.items())))
_line = st.one_of(*[_record.map(json.dumps)] * 4, _wild_record.map(json.dumps),
                  st.tuples(_record.map(json.dumps), st.integers(1, 30)).map(lambda r: r[0][:r[1]]),
                  st.text(max_size=12), st.sampled_from(["", "  ", "[1]", "null"]))
_FUZZ_ARMS = ["a", "b", "5", "é"]  # every text a label above may be: a record's arm is one of the header's, or no text
FUZZ_HEADER = json.dumps({"kind": "run", "schema": LEDGER_SCHEMA, "arms": dict.fromkeys(_FUZZ_ARMS, {}),
                          "config": {"experiment": {"name": "fuzz", "baseline": "a"},
                                     "arms": [{"name": a} for a in _FUZZ_ARMS]}})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_line, max_size=12), newline_at_end=st.booleans(), salvage=st.booleans(),
       chunk=st.integers(1, 300))
def test_random_ledgers_read_the_same_every_way(tmp_path_factory, monkeypatch, lines, newline_at_end, salvage, chunk):
    """Line by line, as columns, and as columns by chunks of *chunk* bytes: the same records,
    warnings and columns, or the same error."""
    path = tmp_path_factory.mktemp("fuzz") / "ledger.jsonl"
    path.write_text("\n".join([FUZZ_HEADER, *lines]) + ("\n" if newline_at_end else ""))
    small, large, chunks = _read_all_ways(path, monkeypatch, salvage, chunk)
    assert small == large == chunks


def test_a_line_polars_takes_and_orjson_refuses_is_not_called_a_changed_file(tmp_path, monkeypatch):
    """An escaped lone surrogate (valid JSON grammar; orjson refuses it, polars takes it) in a ledger read as
    columns: its records are read (by the json module), not refused with "the ledger changed since it was
    read", which it did not; its columns are those built from its records."""
    read_as_columns(monkeypatch)
    lines = (GOLDEN / "sim.ledger.jsonl").read_text().splitlines()
    i = next(j for j, line in enumerate(lines) if line.startswith('{"kind":"call"') and '"finish_reason":"' in line)
    lines[i] = lines[i].replace('"finish_reason":"', '"finish_reason":"\\ud800', 1)
    path = tmp_path / "ledger.jsonl"
    path.write_text("\n".join(lines) + "\n")
    led = read_ledger(path)
    assert led.records[i - 1]["finish_reason"].startswith("\ud800")
    same_columns(led, "call")
