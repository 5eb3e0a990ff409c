"""The tests' time limits are named in one place (:mod:`limits`), and pytest's backstop agrees with it."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import limits

TESTS = Path(__file__).parent
NOT_YET: set[str] = set()  # every test file names its limits
WAITS = {"wait", "join", "communicate", "result"}  # methods whose first argument is a limit


def _number(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def _clock(node: ast.AST) -> bool:
    """``time.monotonic()``, ``time.time()``, ``time.perf_counter()`` (or the bare names)."""
    f = node.func if isinstance(node, ast.Call) else None
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return name in ("monotonic", "time", "perf_counter")


def hard_coded_limits(source: str) -> list[tuple[int, str]]:
    """(line, what) for each number written where a limit goes: ``timeout=5``, ``.wait(5)``, ``.join(5)``,
    ``.communicate(5)``, ``.result(5)``, ``monotonic() + 5``, a parameter ``timeout…=5`` or ``deadline…=5``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            found += [(node.lineno, f"{k.arg}={k.value.value}") for k in node.keywords
                      if k.arg and ("timeout" in k.arg or "deadline" in k.arg) and _number(k.value)]
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in WAITS and node.args and _number(node.args[0]):
                found.append((node.lineno, f".{f.attr}({node.args[0].value})"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and _clock(node.left) and \
                _number(node.right):
            found.append((node.lineno, f"clock + {node.right.value}"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            named = a.posonlyargs + a.args + a.kwonlyargs
            defaults = [None] * (len(a.posonlyargs + a.args) - len(a.defaults)) + a.defaults + a.kw_defaults
            found += [(node.lineno, f"{p.arg}={d.value}") for p, d in zip(named, defaults)
                      if ("timeout" in p.arg or "deadline" in p.arg) and _number(d)]
    return found


def test_no_test_writes_a_time_limit_as_a_number():
    """A limit is one of :mod:`limits`' names (a scenario's own durations, a local name saying so)."""
    found = {p.name: hits for p in sorted(TESTS.glob("*.py"))
             if p.name not in NOT_YET and (hits := hard_coded_limits(p.read_text()))}
    assert not found, f"time limits written as numbers (use tests/limits.py): {found}"


def test_the_check_finds_what_it_looks_for():
    src = ("def f(timeout=10):\n    p.wait(timeout=5); t.join(3); p.communicate(timeout=limits.STOP_S)\n"
           "    d = time.monotonic() + 30; e = time.monotonic() + limits.PROGRESS_S; time.sleep(0.1)\n")
    assert sorted(hard_coded_limits(src)) == [(1, "timeout=10"), (2, ".join(3)"), (2, "timeout=5"), (3, "clock + 30")]


def test_pytests_backstop_is_the_named_one_and_outlasts_every_limit():
    ini = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ini["timeout"] == limits.PYTEST_TIMEOUT_S
    named = {k: v for k, v in vars(limits).items() if k.endswith("_S") and k != "PYTEST_TIMEOUT_S"}
    assert named and all(isinstance(v, float) and 0 < v < limits.PYTEST_TIMEOUT_S / 2 for v in named.values())
