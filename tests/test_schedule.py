"""Issue 22, defect 12 and section 1: the order of the work — a Williams design over (case, repeat), so that
position effects cancel in every pair; a drift sentinel for every arm at the start of every round."""

from __future__ import annotations

from collections import Counter
from itertools import permutations

import pytest

from leverbench.config import load
from leverbench.runner.schedule import arm_order, build_schedule, williams_rows


def _exp(tmp_path, arms: int, cases: int = 1, order: str = "interleaved", repeats: int = 6) -> object:
    names = [chr(ord("a") + i) for i in range(arms)]
    body = f'[experiment]\nname = "x"\nrepeats = {repeats}\nbaseline = "a"\norder = "{order}"\nsentinel_tokens = 8\n'
    for i, n in enumerate(names):
        body += (f'[[arms]]\nname = "{n}"\nrole = "{"baseline" if i == 0 else "treatment"}"\n'
                 f'base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    for c in range(cases):
        body += f'[[cases]]\nname = "c{c}"\nprompt = "go"\n'
    p = tmp_path / "exp.toml"
    p.write_text(body)
    return load(p).spec


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_the_williams_rows_balance_places_and_neighbours(n):
    rows = williams_rows(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n) and all(sorted(r) == list(range(n)) for r in rows)
    places = Counter((a, i) for r in rows for i, a in enumerate(r))
    assert len(set(places.values())) == 1 and len(places) == n * n  # each arm in each place equally often
    follows = Counter(p for r in rows for p in zip(r, r[1:]))
    assert set(follows) == set(permutations(range(n), 2)) and len(set(follows.values())) == 1


def test_a_fixed_two_arm_run_does_not_always_put_the_reference_first(tmp_path):
    """On main a run without adaptive repeats sent A B, A B, …: the reference always first."""
    spec = _exp(tmp_path, 2)
    turns = [u for u in build_schedule(spec, {}) if u.kind == "turn"]
    firsts = Counter(turns[i].arm for i in range(0, len(turns), 2))
    assert firsts == {"a": 3, "b": 3}


def test_with_three_arms_the_first_and_the_last_run_side_by_side(tmp_path):
    """On main the counterbalanced order of three arms was A B C / C B A: A and C never next to each other."""
    spec = _exp(tmp_path, 3, repeats=6)
    turns = [u.arm for u in build_schedule(spec, {}) if u.kind == "turn"]
    rounds = [turns[i:i + 3] for i in range(0, len(turns), 3)]
    neighbours = Counter(frozenset(p) for r in rounds for p in zip(r, r[1:]))
    assert neighbours[frozenset("ac")] == neighbours[frozenset("ab")] == neighbours[frozenset("bc")] == 4
    assert Counter(r[0] for r in rounds) == {"a": 2, "b": 2, "c": 2}


def test_every_round_opens_with_a_sentinel_of_every_arm_and_the_run_ends_with_one(tmp_path):
    spec = _exp(tmp_path, 2, cases=2, repeats=3)
    units = build_schedule(spec, {})
    for r in range(3):
        first = next(i for i, u in enumerate(units) if u.kind == "turn" and u.repeat == r)
        opening = units[first - 2:first]
        assert [(u.kind, u.position, u.repeat) for u in opening] == [("sentinel", "start", r)] * 2
        assert {u.arm for u in opening} == {"a", "b"}
    assert [(u.kind, u.position) for u in units[-2:]] == [("sentinel", "end")] * 2


def test_blocked_order_runs_every_arm_s_sentinel_before_every_repeat_of_each_block(tmp_path):
    spec = _exp(tmp_path, 2, order="blocked", repeats=2)
    units = build_schedule(spec, {})
    sentinels = [(u.arm, u.repeat, u.block) for u in units if u.kind == "sentinel" and u.position == "start"]
    assert len(sentinels) == 2 * 2 * 2 and {s[1] for s in sentinels} == {0, 1, 2, 3}
    assert [u.arm for u in units if u.kind == "turn"] == ["a", "a", "b", "b"]
    assert all(u.block == u.arm for u in units if u.kind == "turn")


def test_arm_order_follows_the_rows_by_case_and_repeat():
    assert arm_order(["a", "b"], 0, 0) == ["a", "b"] and arm_order(["a", "b"], 1, 0) == ["b", "a"]
    assert arm_order(["a", "b", "c"], 0, 3) == ["c", "b", "a"]  # the mirror rows follow the square's
    assert arm_order(["a", "b", "c"], 1, 1, cases=2) == arm_order(["a", "b", "c"], 0, 4)  # row 1 + 1 × 6 // 2


def test_three_arms_two_cases_three_repeats_take_every_row_once():
    """6 cells on 3 arms: the 6 rows of the Williams design each once, so every arm is first, second and last
    twice and every ordered pair of arms is as often one way as the other (starting case c at row c used rows
    1 and 2 twice, 4 and 5 never: a before c in 1 of 6 cells); and each case walks the rows one a round."""
    arms, rows = ["a", "b", "c"], []
    for r in range(3):
        for c in range(2):
            rows.append(tuple(arm_order(arms, c, r, cases=2)))
    assert len(set(rows)) == 6
    for x in arms:
        assert sorted(row.index(x) for row in rows) == [0, 0, 1, 1, 2, 2]
        for y in arms:
            if x != y:
                assert sum(row.index(x) < row.index(y) for row in rows) == 3, (x, y)
    four = [[tuple(arm_order(arms, c, r, cases=4)) for r in range(3)] for c in range(4)]  # 12 cells, 6 rows
    assert sorted({row: sum(x.count(row) for x in four) for row in set(sum(four, []))}.values()) == [2] * 6
    two = [[arm_order(["a", "b"], c, r, cases=2) for r in range(2)] for c in range(2)]
    assert all(x[0] != x[1] for x in two)  # two arms: each case alternates which goes first
