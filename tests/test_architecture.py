"""The shape of the source (issue 13): no import cycle, and no long module without a reason.

- No cycle in the import graph between leverbench's modules, nor between its parts (``config``,
  ``workload``, ``engines``, ``runner``, ``ledger``, ``analysis``, ``report``, ``cli``, and the
  top-level modules such as ``errors``): data flows workload → runner → ledger → analysis → report,
  and the experiment's schema (``config``) sits below them all.
- No module over :data:`MAX_LINES` lines without a ``# size:`` comment at its top (before its
  docstring) saying why it stays whole.

The graph is built from the source with :mod:`ast`: every ``import`` and ``from ... import`` of a
leverbench module counts, wherever it stands (inside a function, under ``TYPE_CHECKING``), because a
cycle that a lazy import hides is still a cycle.  An import names the deepest module it reaches
(``from .svg import svg_hbars`` → ``report.svg``; ``from . import aiperf`` → ``traces.aiperf``);
the packages a Python import also runs on the way (their ``__init__``) are not edges.

- Inside ``analysis`` (issue 24), each sub-package imports only the sub-packages :data:`ANALYSIS_PARTS`
  allows (the same rules ``analysis/__init__.py`` states in words); every module of ``analysis`` sits in one
  of them, except ``analysis.summary``, which assembles them all.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "leverbench"
MAX_LINES = 450
SIZE_NOTE = "# size:"

#: Long modules that other work of issue 13 is reshaping now (part 5: the runner's seams; part 7: the
#: ledger's columnar reader).  An entry here must still be needed: the test fails once its module is
#: short enough or carries a note, so that the entry is removed.  (Empty: issue 13 is done.)
PENDING: dict[str, str] = {}

#: The sub-packages of ``leverbench.analysis`` and the other sub-packages each may import (``base`` is below
#: all of them; ``summary``, a module, may import every one).
ANALYSIS_PARTS: dict[str, set[str]] = {
    "base": set(),
    "sequential": {"base"},
    "rates": {"base"},
    "load": {"base"},
    "experiment": {"base", "sequential", "rates", "load"},
    "traffic": {"base", "rates"},
    "whatif": {"base", "rates", "load"},
}
ANALYSIS_TOP = {"leverbench.analysis", "leverbench.analysis.summary"}


# ---------------------------------------------------------------- the import graph


def modules(src: Path) -> dict[str, Path]:
    """Every module of the package at ``src``, by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        parts = [src.name, *path.relative_to(src).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _deepest(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` (its source at ``path``) imports, at any depth."""
    root = name.split(".")[0]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in known else stem for alias in node.names]
        else:
            continue
        for target in targets:
            if target == root or target.startswith(root + "."):
                found = _deepest(target, known)
                if found is not None and found != name:
                    out.add(found)
    return out


def import_graph(src: Path) -> dict[str, set[str]]:
    """Module → the modules it imports, for every module of the package at ``src``."""
    known = modules(src)
    return {name: imports(name, path, known) for name, path in known.items()}


def part_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between the package's parts: ``leverbench.X`` for every module ``leverbench.X[.…]``."""
    def part(name: str) -> str:
        return ".".join(name.split(".")[:2])

    out: dict[str, set[str]] = {part(m): set() for m in graph}
    for m, targets in graph.items():
        out[part(m)] |= {part(t) for t in targets if part(t) != part(m)}
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's cycles, as its strongly connected components of more than one node (Tarjan's
    algorithm, iterative), each sorted; sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def _describe(component: list[str], graph: dict[str, set[str]]) -> str:
    inside = set(component)
    return "; ".join(f"{m} → {', '.join(sorted(graph[m] & inside))}" for m in component)


def analysis_part(name: str) -> str | None:
    """The sub-package (or top-level module) of ``leverbench.analysis`` that module *name* is or sits in; None
    outside analysis and for the package itself."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["leverbench", "analysis"] else None


def analysis_trespasses(graph: dict[str, set[str]], rules: dict[str, set[str]]) -> list[str]:
    """Every import inside ``analysis`` that :data:`ANALYSIS_PARTS`-style *rules* do not allow, and every
    analysis module in no sub-package the rules name (nor at the top, :data:`ANALYSIS_TOP`)."""
    out = []
    for m, targets in sorted(graph.items()):
        if not m.startswith("leverbench.analysis") or m in ANALYSIS_TOP:
            continue
        part = analysis_part(m)
        if part not in rules:
            out.append(f"{m} is in no sub-package of the rules")
            continue
        for t in sorted(targets):
            if t in ANALYSIS_TOP - {"leverbench.analysis"}:
                out.append(f"{m} → {t} (only the top may assemble)")
            other = analysis_part(t)
            if other is not None and other != part and other not in rules[part]:
                out.append(f"{m} → {t} ({part} may import {sorted(rules[part]) or 'no other part'})")
    return out


# ---------------------------------------------------------------- long modules


def size_note(path: Path) -> str | None:
    """The ``# size:`` comment above the module's first statement (its docstring), or None."""
    text = path.read_text(encoding="utf-8")
    body = ast.parse(text).body
    head = text.splitlines()[: body[0].lineno - 1] if body else text.splitlines()
    return next((line for line in head if line.startswith(SIZE_NOTE)), None)


def long_modules(src: Path) -> dict[str, int]:
    """Modules (paths relative to ``src``) over MAX_LINES lines without a size note, with their length."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES and size_note(path) is None:
            out[path.relative_to(src).as_posix()] = n
    return out


# ---------------------------------------------------------------- the source


def test_no_import_cycle_between_modules():
    graph = import_graph(SRC)
    assert len(graph) > 50 and "leverbench.report.tables" in graph["leverbench.report.markdown"]
    found = cycles(graph)
    assert not found, "import cycles: " + " | ".join(_describe(c, graph) for c in found)


def test_no_import_cycle_between_parts():
    graph = part_graph(import_graph(SRC))
    assert {"leverbench.config", "leverbench.workload", "leverbench.report"} <= set(graph)
    found = cycles(graph)
    assert not found, "import cycles between parts: " + " | ".join(_describe(c, graph) for c in found)


def test_analysis_sub_packages_import_only_what_they_may():
    graph = import_graph(SRC)
    assert {analysis_part(m) for m in graph if m not in ANALYSIS_TOP} - {None} == set(ANALYSIS_PARTS)
    found = analysis_trespasses(graph, ANALYSIS_PARTS)
    assert not found, "imports across analysis' sub-packages that the rules forbid: " + " | ".join(found)


#: Parts that sit below analysis, the runner and the reports, and the only other parts each may import (their
#: package docstrings say so): the levers are data over JSON; the summary's schema reads the shared bounds.
LOW_PARTS: dict[str, set[str]] = {
    "leverbench.levers": {"leverbench.json_types"},
    "leverbench.schema": {"leverbench.json_types", "leverbench.bounds"},
}


def low_part_trespasses(graph: dict[str, set[str]], rules: dict[str, set[str]]) -> list[str]:
    """Every import from a part of *rules* into a part its rule does not name."""
    parts = part_graph(graph)
    return [f"{p} → {t}" for p, allowed in sorted(rules.items()) for t in sorted(parts.get(p, set()) - allowed)]


def test_the_levers_and_the_schema_import_only_the_leaves():
    graph = import_graph(SRC)
    assert set(LOW_PARTS) <= set(part_graph(graph))
    found = low_part_trespasses(graph, LOW_PARTS)
    assert not found, "imports out of the low parts that their rules forbid: " + " | ".join(found)


def test_the_low_part_rules_catch_a_trespass(tmp_path):
    src = _package(tmp_path, {
        "__init__.py": "", "json_types.py": "", "config.py": "x = 1\n",
        "levers/__init__.py": "", "levers/a.py": "from ..json_types import *\ndef f():\n    from ..config import x\n",
    })
    assert low_part_trespasses(import_graph(src), {"leverbench.levers": {"leverbench.json_types"}}) == [
        "leverbench.levers → leverbench.config"]


def test_analysis_says_its_rules_in_words():
    """The package's docstring names every sub-package with what it may import, and each sub-package has a
    docstring saying what it holds."""
    import leverbench.analysis as analysis  # noqa: PLC0415

    doc = " ".join((analysis.__doc__ or "").split())
    for part, allowed in ANALYSIS_PARTS.items():
        line = next((x for x in doc.split("- ") if x.startswith(f":mod:`.{part}`")), "")
        assert line, f"analysis/__init__.py does not describe {part}"
        said = set(re.findall(r"``(\w+)``", line.split("May import")[-1])) if "May import" in line else set()
        assert said == allowed, f"analysis/__init__.py: {part} may import {sorted(said)}, the rule {sorted(allowed)}"
        assert (SRC / "analysis" / part / "__init__.py").read_text(encoding="utf-8").startswith('"""')


def test_the_analysis_rules_catch_a_trespass(tmp_path):
    src = _package(tmp_path, {
        "__init__.py": "", "analysis/__init__.py": "", "analysis/summary.py": "from .rates import fit\n",
        "analysis/base/__init__.py": "", "analysis/base/stats.py": "from ..rates.fit import x\n",
        "analysis/rates/__init__.py": "", "analysis/rates/fit.py": "from ..base.stats import y\nx = 1\n",
        "analysis/loose.py": "",
    })
    found = analysis_trespasses(import_graph(src), {"base": set(), "rates": {"base"}})
    assert found == ["leverbench.analysis.base.stats → leverbench.analysis.rates.fit (base may import no other part)",
                     "leverbench.analysis.loose is in no sub-package of the rules"]


def test_long_modules_say_why():
    long = long_modules(SRC)
    unexplained = {m: n for m, n in long.items() if m not in PENDING}
    assert not unexplained, (f"modules over {MAX_LINES} lines without a '{SIZE_NOTE}' comment at their top saying "
                             f"why they stay whole (or split them): {unexplained}")
    stale = sorted(set(PENDING) - set(long))
    assert not stale, f"remove from PENDING in {Path(__file__).name} (now short enough or explained): {stale}"


# ---------------------------------------------------------------- the checks themselves


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    src = tmp_path / "leverbench"
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return src


def test_a_lazy_relative_import_closes_a_cycle(tmp_path):
    src = _package(tmp_path, {
        "__init__.py": "",
        "report/__init__.py": "",
        "report/tables.py": "from .table import Table\n\ndef all_tables():\n    from .load_tables import x\n",
        "report/load_tables.py": "from .tables import all_tables\nx = 1\n",
        "report/table.py": "Table = object\n",
        "workload/__init__.py": "",
        "workload/cases.py": "from ..config import Case\n",
        "config.py": "import leverbench.workload.cases as c\nCase = 1\n",
        "runner/__init__.py": "",
        "runner/run.py": "from ..workload import cases\nfrom leverbench.report import table\n",
    })
    graph = import_graph(src)
    assert graph["leverbench.runner.run"] == {"leverbench.workload.cases", "leverbench.report.table"}
    assert graph["leverbench.report.tables"] == {"leverbench.report.table", "leverbench.report.load_tables"}
    assert cycles(graph) == [["leverbench.config", "leverbench.workload.cases"],
                             ["leverbench.report.load_tables", "leverbench.report.tables"]]
    parts = part_graph(graph)
    assert parts["leverbench.runner"] == {"leverbench.workload", "leverbench.report"}
    assert cycles(parts) == [["leverbench.config", "leverbench.workload"]]


def test_a_cycle_only_between_parts(tmp_path):
    """config.a → workload.b and workload.c → config.d: no module cycle, but the parts import each other."""
    src = _package(tmp_path, {
        "__init__.py": "", "config/__init__.py": "", "workload/__init__.py": "",
        "config/a.py": "from ..workload import b\n", "config/d.py": "",
        "workload/b.py": "", "workload/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                              "    from ..config.d import X\n",
    })
    graph = import_graph(src)
    assert cycles(graph) == []
    assert cycles(part_graph(graph)) == [["leverbench.config", "leverbench.workload"]]


@pytest.mark.parametrize(("head", "explained"), [
    ("", False),
    ('"""Doc."""\n# size: a comment after the docstring does not count\n', False),
    ("# size: one idea, read in one sitting by its table of contents\n", True),
    ("#!/usr/bin/env python\n# size: after a first comment line\n", True),
])
def test_a_long_module_needs_its_note_at_the_top(tmp_path, head, explained):
    body = '"""Doc."""\n' if '"""' not in head else ""
    src = _package(tmp_path, {"__init__.py": "", "big.py": head + body + "x = 1\n" * MAX_LINES,
                              "short.py": "x = 1\n" * (MAX_LINES - 2)})
    assert long_modules(src) == ({} if explained else {"big.py": len((head + body).splitlines()) + MAX_LINES})
