"""The fast paths of the 1M-call read and summary (issue 39) give what the plain Python they replaced gave, bit
for bit: each is checked here against that plain Python (the oracle, written out in this file) on random and
edge-case inputs."""

from __future__ import annotations

import math
import mmap
from types import SimpleNamespace

import numpy as np
import pytest

from leverbench.analysis.experiment import revisits, verdicts
from leverbench.analysis.rates.regression import _count, _counts, round4
from leverbench.analysis.sequential import confidence
from leverbench.errors import BadInput
from leverbench.ledger import reader

RNG = np.random.default_rng(39)


def _bits(x: float) -> tuple:
    return (math.isnan(x), x if x == x else 0.0, math.copysign(1.0, x))


def test_round4_is_pythons_round_to_four_places():
    halves = (np.arange(-200_000, 200_000) + 0.5) / 1e4  # v·10⁴ at or next to a half: where rint and round part
    values = np.concatenate([
        RNG.uniform(0, 100, 200_000), RNG.exponential(1.0, 200_000), -RNG.exponential(3.0, 50_000),
        halves, np.nextafter(halves, np.inf), np.nextafter(halves, -np.inf),
        RNG.integers(0, 2**62, 2000).view(np.float64),  # any bit pattern: huge, tiny, NaN
        [0.0, -0.0, -1e-9, np.nan, np.inf, -np.inf, 1e300, 5e-324, 2.675, 1.00005, 1e9 + 0.00005, 2.0**30 / 1e4]])
    got = round4(values)
    assert all(type(g) is float for g in got)
    assert [_bits(g) for g in got] == [_bits(round(v, 4)) for v in values.tolist()]


@pytest.mark.parametrize("x", [np.arange(50.0), [1.5, 2.0], [np.nan, 3.0], [np.inf, 1.0], [-0.0, 2.0**70], []])
def test_counts_are_count_of_each(x):
    x = np.asarray(x, dtype=float)
    got, want = _counts(x), [_count(v) for v in x.tolist()]
    assert [(type(g), _bits(float(g))) for g in got] == [(type(w), _bits(float(w))) for w in want]


def _lines_oracle(data: bytes) -> tuple[list[int], list[int], list[bool], list[bool]]:
    """(starts, ends, nonblank, closed) by splitting the bytes (reader._lines' contract)."""
    starts, ends, at = [], [], 0
    for piece in data.split(b"\n")[: -1 if data.endswith(b"\n") else None] if data else []:
        starts.append(at)
        ends.append(at + len(piece))
        at += len(piece) + 1
    return (starts, ends, [bool(data[a:b].strip()) for a, b in zip(starts, ends)],
            [b > 0 and data[b - 1:b] == b"}" for b in ends])


@pytest.mark.parametrize("block", [64, 1 << 20])
def test_lines_are_found_as_a_split_finds_them(tmp_path, monkeypatch, block):
    """Long and short lines (a block of short lines goes to numpy: a small block and few lines force it)."""
    monkeypatch.setattr(reader, "NEWLINE_BLOCK", block)
    monkeypatch.setattr(reader, "SHORT_LINES", 3)
    pieces = [b"", b" ", b"{}", b'{"a": 1}', b"x" * 300, b"{" + b"y" * 150 + b"}", b"\t{}"]
    for trial in range(60):
        lines = [pieces[i] for i in RNG.integers(0, len(pieces), int(RNG.integers(1, 400)))]
        data = b"\n".join(lines) + [b"", b"\n", b"\n\n"][trial % 3]
        if not data:
            continue
        path = tmp_path / "f"
        path.write_bytes(data)
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            got = [a.tolist() for a in reader._lines(mm)]
        assert got == [list(v) for v in _lines_oracle(data)], data[:80]


def _log_ratios_oracle(ref: dict, arm: dict) -> list[float]:
    out = []
    for r in sorted(ref.keys() & arm.keys()):
        a, b = ref[r], arm[r]
        if a is None or b is None or math.isnan(a) or math.isnan(b):
            continue
        if a <= 0 or b <= 0 or math.isinf(a) or math.isinf(b):
            raise BadInput("positive")
        out.append(math.log(a / b))
    return out


def test_log_ratios_are_the_loops():
    for _ in range(300):
        def times() -> dict:
            reps = RNG.choice(40, int(RNG.integers(0, 40)), replace=False).tolist()
            return {r: (None if RNG.random() < 0.1 else math.nan if RNG.random() < 0.05
                        else float(RNG.lognormal(0, 1))) for r in reps}
        ref, arm = times(), times()
        assert confidence.log_ratios(ref, arm) == _log_ratios_oracle(ref, arm)
    with pytest.raises(BadInput, match="repeat 3 has 1.0 and -2.0"):
        confidence.log_ratios({1: None, 3: 1.0, 5: -1.0}, {1: 2.0, 3: -2.0, 5: 1.0})
    with pytest.raises(BadInput, match="numbers of seconds"):
        confidence.log_ratios({0: "1.0"}, {0: 1.0})


@pytest.mark.parametrize("n", [2, 3, 17, [2, 5, 9]])
def test_fixed_power_with_its_quantiles_kept_is_the_formula(n):
    """The χ² quantiles kept per (cases, n) give the power the formula computed whole gives (scipy's chi2.ppf
    over the draws and n at once), to the last bit."""
    from scipy.stats import chi2, norm
    from scipy.stats import t as student_t

    cases, est, sd, m, conf, w = 5, 0.2, 0.3, 1.1, 0.95, np.array([0.1, 0.2, 0.3, 0.15, 0.25])
    nn = np.asarray(n, dtype=float)
    df = np.maximum((nn - 1.0)[..., None, None], 1.0)
    x = chi2.ppf(confidence._uniform_draws(cases), df) / df
    v = w / w.sum() * x
    nu = v.sum(-1) ** 2 / np.maximum((v * v).sum(-1), 1e-300) * (nn - 1.0)[..., None]
    qr = student_t.ppf(0.5 + conf / 2.0, np.maximum(nu, 1e-9)) * np.sqrt(v.sum(-1))
    lo = (est - math.log(m)) / (sd / np.sqrt(cases * nn)[..., None])
    want = np.where(nn >= 2, norm.cdf(lo - qr).mean(-1), 0.0)
    for _ in range(2):  # computed, then kept
        got = confidence.fixed_power(n, est, sd, cases, m, conf, confidence.PAYS, w)
        assert np.array_equal(np.asarray(got), want)


def _first_visits_oracle(c: SimpleNamespace, engine: set[int]) -> tuple[list[int], list[int], list[bool]]:
    rows = [i for i in range(len(c.arm)) if c.ok[i] and c.turn[i] >= 0 and c.step[i] == c.step[i]
            and c.t_send[i] == c.t_send[i] and c.case[i] in engine]
    earliest: dict[tuple, int] = {}
    for j, i in enumerate(rows):
        key = (c.arm[i], c.case[i], int(c.step[i]))
        if key not in earliest or c.t_send[i] < c.t_send[rows[earliest[key]]]:
            earliest[key] = j
    first = [earliest[(c.arm[i], c.case[i], int(c.step[i]))] for i in rows]
    return rows, first, [j not in set(earliest.values()) for j in range(len(rows))]


@pytest.mark.parametrize("steps", [8, 2**60])  # (the second: no single 62-bit key, the tuples are ranked)
def test_first_visits_are_each_keys_earliest_send(steps):
    n = 5000
    c = SimpleNamespace(arm=RNG.integers(0, 3, n), case=RNG.integers(0, 7, n), step=RNG.integers(0, 6, n) * 1.0,
                        turn=RNG.integers(-1, 50, n), ok=RNG.random(n) < 0.9,
                        t_send=np.round(RNG.uniform(0, 50, n)))  # (rounded: ties, broken by ledger order)
    c.step[RNG.random(n) < 0.05] = np.nan
    c.step[:2] = [0.0, steps - 1.0]
    cases = ["a", "b", "c", "d", "e", "f", "g"]
    ds = SimpleNamespace(call=c, cases=cases[:5], case_index=cases.index)
    rows, first, later = revisits._first_visits(ds)
    assert (rows.tolist(), first.tolist(), later.tolist()) == _first_visits_oracle(c, set(range(5)))


def test_one_key_orders_and_groups_as_the_tuples():
    for span in (5, 2**61):
        parts = [RNG.integers(-3, 4, 3000), RNG.integers(0, span, 3000), RNG.integers(0, 3, 3000)]
        key = revisits._one_key(*parts)
        tuples = list(zip(*(p.tolist() for p in parts)))
        order = sorted(range(3000), key=lambda i: (tuples[i], i))
        assert np.argsort(key, kind="stable").tolist() == order
        assert len(set(key.tolist())) == len(set(tuples))


def _random_turns(n: int, repeats: int) -> SimpleNamespace:
    t = SimpleNamespace(arm=RNG.integers(0, 3, n), case=RNG.integers(0, 4, n),
                        repeat=RNG.integers(0, repeats, n) * 1.0, turn_s=RNG.exponential(2.0, n),
                        ok=RNG.random(n) < 0.8)
    t.repeat[RNG.random(n) < 0.05] = np.nan
    t.turn_s[RNG.random(n) < 0.05] = np.nan
    arms, cases = ["x", "y", "z"], ["c0", "c1", "c2", "c3"]
    return SimpleNamespace(turn=t, arm_names=arms, case_names=cases, n_cells=12,
                           cell_code=lambda a, c: a * len(cases) + c)


def _turn_log_oracle(ds: SimpleNamespace) -> dict:
    """The loop turn_log was: (arm, case) → repeat → (turn_s, ok), a repeat met again overwriting."""
    t, out = ds.turn, {}
    for a, c, r, s, ok in zip(t.arm.tolist(), t.case.tolist(), t.repeat.tolist(), t.turn_s.tolist(), t.ok.tolist()):
        if r == r:
            out.setdefault((ds.arm_names[a], ds.case_names[c]), {})[int(r)] = (0.0 if s != s else s, bool(ok))
    return out


@pytest.mark.parametrize("repeats", [300, 10**9])  # (repeats met again in a cell; each met once)
def test_turn_log_is_the_loop(repeats):
    ds = _random_turns(3000, repeats)
    want, got = _turn_log_oracle(ds), verdicts.turn_log(ds).cells
    assert list(got) == list(want)
    for k, cell in got.items():
        assert list(zip(cell.repeat.tolist(), zip(cell.secs.tolist(), cell.ok.tolist()))) == list(want[k].items())


def test_spent_gpu_hours_and_the_equal_work_correction_are_the_loops():
    ds = _random_turns(3000, 10**9)
    log, want = verdicts.turn_log(ds), _turn_log_oracle(ds)
    gpus = {"x": 1.0, "y": 2.0, "z": 0.5}
    for before in (None, 10**8, 5 * 10**8):
        assert verdicts.spent_gpu_hours(log, gpus, before) == sum(
            s * gpus.get(arm, 1.0) for (arm, _), reps in want.items() for r, (s, _) in reps.items()
            if before is None or r < before) / 3600.0
    reps = list(want[("y", "c2")])
    deltas = {("c2", reps[0]): -0.25, ("c2", reps[3]): 1e-9, ("c1", 10**9 + 5): 3.0}
    fixed = verdicts._corrected_log(log, "y", SimpleNamespace(deltas=lambda: deltas)).cells
    for (case, rep), d in deltas.items():
        if rep in want.get(("y", case), {}):
            s, ok = want[("y", case)][rep]
            want[("y", case)][rep] = (s + d, ok)
    assert {k: list(zip(c.repeat.tolist(), zip(c.secs.tolist(), c.ok.tolist()))) for k, c in fixed.items()} == \
        {k: list(v.items()) for k, v in want.items()}
    assert log.cells[("y", "c2")].secs.tolist() != fixed[("y", "c2")].secs.tolist()  # a copy: the log is as it was


def test_sums_add_as_python_adds():
    for x in (RNG.exponential(1.0, 1000) * 10.0 ** RNG.integers(-8, 8, 1000), np.array([-0.0]), np.array([])):
        want = sum(x.tolist())
        got = verdicts._sum(x)
        assert got == want and math.copysign(1.0, got) == math.copysign(1.0, want)
