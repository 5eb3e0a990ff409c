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
    "hardware": {"base"},
    "sections": {"base", "sequential", "rates", "load", "experiment", "hardware"},
    "compare": {"base", "experiment"},
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


#: The renderers (``report/``) and the only parts they may import: the typed summary and its vocabulary (``schema``:
#: the rows, warning kinds, reason codes; ``readable``: figures in words; ``knob_values``: what a knob's value
#: means), the levers' words, the settings and the ledger's typed records (the replay plots calls).  Never the
#: analysis (a renderer formats what the summary holds and computes no figure of its own), nor anything that runs.
RENDERER_PARTS: dict[str, set[str]] = {
    "leverbench.report": {"leverbench.schema", "leverbench.readable", "leverbench.knob_values", "leverbench.levers",
                          "leverbench.json_types", "leverbench.errors", "leverbench.config", "leverbench.ledger"},
}


#: What the renderers may not reach even through the parts they import (a chain of imports at any depth): the
#: analysis and every part that runs something.  (``config`` validates an arm's engine table with the engines'
#: settings, which are data: llama.cpp's flag tables, the simulator's settings and a command template's checks, the
#: modules of ``engines`` a renderer may reach.)
RENDERERS_NEVER_REACH = ("leverbench.analysis", "leverbench.runner", "leverbench.pipeline", "leverbench.cli",
                         "leverbench.proxy", "leverbench.workload", "leverbench.engines")
RENDERERS_MAY_REACH = {"leverbench.engines.llama_flags", "leverbench.engines.sim_config",
                       "leverbench.engines.command_template"}


def reached(graph: dict[str, set[str]], part: str) -> dict[str, list[str]]:
    """Every module the modules of *part* import at any depth, with one chain of imports that reaches it."""
    chains = {m: [m] for m in graph if m == part or m.startswith(part + ".")}
    todo = list(chains)
    while todo:
        m = todo.pop()
        for t in sorted(graph.get(m, ())):
            if t not in chains:
                chains[t] = [*chains[m], t]
                todo.append(t)
    return chains


def renderer_reaches(graph: dict[str, set[str]], never: tuple[str, ...] = RENDERERS_NEVER_REACH,
                     may: set[str] = RENDERERS_MAY_REACH) -> list[str]:
    """The modules of *never* that ``leverbench.report`` reaches (but *may*), each with its chain of imports."""
    return [" → ".join(chain) for m, chain in sorted(reached(graph, "leverbench.report").items())
            if m.startswith(tuple(p + "." for p in never) + never) and m not in may]


def test_the_renderers_import_no_analysis():
    graph = import_graph(SRC)
    assert set(RENDERER_PARTS) <= set(part_graph(graph))
    found = low_part_trespasses(graph, RENDERER_PARTS)
    assert not found, "renderers importing what they may not (the analysis, or a part that runs): " + " | ".join(found)
    found = renderer_reaches(graph)
    assert not found, "renderers reaching the analysis or a part that runs through other parts: " + " | ".join(found)


def test_the_renderer_rule_follows_imports_through_other_parts(tmp_path):
    src = _package(tmp_path, {
        "__init__.py": "", "config.py": "from .analysis.words import x\n", "analysis/__init__.py": "",
        "analysis/words.py": "x = 1\n", "report/__init__.py": "", "report/a.py": "from ..config import x\n",
    })
    assert renderer_reaches(import_graph(src)) == [
        "leverbench.report.a → leverbench.config → leverbench.analysis.words"]


def test_the_renderer_rule_catches_an_analysis_import(tmp_path):
    # (one that only a type checker reads counts too)
    src = _package(tmp_path, {
        "__init__.py": "", "schema.py": "", "analysis/__init__.py": "", "analysis/words.py": "x = 1\n",
        "report/__init__.py": "", "report/a.py": ("from typing import TYPE_CHECKING\nfrom ..schema import *\n"
                                                  "if TYPE_CHECKING:\n    from ..analysis.words import x\n"),
    })
    assert low_part_trespasses(import_graph(src), {"leverbench.report": {"leverbench.schema"}}) == [
        "leverbench.report → leverbench.analysis"]


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


# ---------------------------------------------------------------- one typed summary (issue 39)

#: A mapping type that, subscripted [str, Any], is a summary (or a row) passed untyped.
LOOSE_MAPPINGS = {"dict", "Dict", "Mapping", "MutableMapping"}


def _is_any(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "Any") or (isinstance(node, ast.Attribute) and node.attr == "Any")


def loose_annotation(annotation: ast.expr | None) -> bool:
    """Whether *annotation* names ``dict[str, Any]`` or ``Mapping[str, Any]`` anywhere in it (``… | None``,
    ``list[…]``, ``typing.Dict``, a quoted annotation too)."""
    for node in ast.walk(annotation) if annotation is not None else ():
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                if loose_annotation(ast.parse(node.value, mode="eval").body):
                    return True
            except SyntaxError:
                continue
        if isinstance(node, ast.Subscript):
            name = getattr(node.value, "id", None) or getattr(node.value, "attr", None)
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else []
            if name in LOOSE_MAPPINGS and len(args) == 2 and _is_any(args[1]):
                return True
    return False


def loose_signatures(src: Path, part: str) -> list[str]:
    """Each function of *part* (nested ones and methods too) that takes or returns ``dict[str, Any]`` /
    ``Mapping[str, Any]`` (``**kwargs: Any`` is one as well): ``"report/x.py:12 f(summary, return)"``."""
    out = []
    for path in sorted((src / part).rglob("*.py")):
        found = []
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = fn.args
            bad = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []))
                   if loose_annotation(p.annotation)]
            if a.kwarg and a.kwarg.annotation and (loose_annotation(a.kwarg.annotation) or _is_any(a.kwarg.annotation)):
                bad.append(f"**{a.kwarg.arg}")
            bad += ["return"] if loose_annotation(fn.returns) else []
            if bad:
                found.append((fn.lineno, f"{path.relative_to(src).as_posix()}:{fn.lineno} {fn.name}({', '.join(bad)})"))
        out += [text for _, text in sorted(found)]
    return out


@pytest.mark.parametrize("part", ["report", "pipeline", "analysis"])
def test_the_renderers_take_the_typed_summary(part):
    """Every function of ``report/`` takes the typed summary (``schema.summary.Summary``) or the typed rows it
    shows, never the summary (or a row, or a view of one) as ``dict[str, Any]``: a key a renderer misreads is a
    type error, not a blank cell.  Likewise the library functions behind the commands (``pipeline/``) and the
    analysis (``analysis/``, its sections included)."""
    found = loose_signatures(SRC, part)
    assert not found, (f"functions of {part}/ that take or return dict[str, Any] / Mapping[str, Any] (type them with "
                       "the summary's rows, leverbench.schema, or a TypedDict of their own): " + "; ".join(found))


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


def test_the_typed_summary_rule_catches_a_loose_signature(tmp_path):
    src = _package(tmp_path, {
        "__init__.py": "", "report/__init__.py": "",
        "report/ok.py": "from typing import Any, Mapping\n\n"
                        "def table(summary: Summary, row: Mapping[str, object], *, n: int = 0) -> list[str]:\n"
                        "    def cell(v: Any) -> dict[str, int]: ...\n    return []\n",
        "report/bad.py": "import typing\nfrom typing import Any, Dict, Mapping, Optional\n\n"
                         "def tables(summary: dict[str, Any], ok: int) -> None: ...\n"
                         "def rows(x: 'Sequence[typing.Mapping[str, Any]] | None' = None) -> None: ...\n"
                         "def kw(run: str, **kw: Any) -> None: ...\n"
                         "def view(t: int) -> list[dict[str, Any]]: ...\n"
                         "class Page:\n    async def render(self, d: Optional[Dict[str, typing.Any]]) -> None: ...\n",
    })
    assert loose_signatures(src, "report") == [
        "report/bad.py:4 tables(summary)", "report/bad.py:5 rows(x)", "report/bad.py:6 kw(**kw)",
        "report/bad.py:7 view(return)", "report/bad.py:9 render(d)"]


# ---------------------------------------------------------------- the runner plans, then executes (issue 39)


def _class_members(node: ast.ClassDef) -> set[str]:
    """What a class has: its methods, its class-level annotations and assignments, and what its methods set on
    ``self`` (``self.x = …``, ``self.a, self.b = …``, ``self.x: T = …``)."""
    out: set[str] = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            out.add(item.target.id)
        elif isinstance(item, ast.Assign):
            out |= {t.id for t in item.targets if isinstance(t, ast.Name)}
    for sub in ast.walk(node):
        targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(sub, ast.AnnAssign) else []
        for t in targets:
            for el in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id == "self":
                    out.add(el.attr)
    return out


def _names_in(annotation: ast.expr | None) -> set[str]:
    """The names an annotation mentions (``a.B`` as ``B``; a quoted annotation parsed)."""
    out: set[str] = set()
    for node in ast.walk(annotation) if annotation is not None else ():
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                out |= _names_in(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                continue
    return out


def runner_takers(src: Path, runner: str = "Runner") -> list[str]:
    """Each function or method of ``runner/`` (the part: every module under it) with a parameter typed as the
    runner (class *runner* of ``runner/run.py``, or a class of ``runner/`` it derives from) or as a Protocol of
    ``runner/`` whose every member the runner has (a Protocol the runner implements: how a part takes the runner
    without naming it); and each module of ``runner/`` but ``run.py`` that imports ``runner.run``:
    ``"runner/x.py:12 f(r: BlockRunner)"``."""
    trees = {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in sorted((src / "runner").rglob("*.py"))}
    classes = {n.name: n for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}

    def lineage(name: str) -> list[ast.ClassDef]:  # the class and its bases defined in runner/
        node = classes.get(name)
        if node is None:
            return []
        return [node] + [c for b in node.bases for c in lineage(getattr(b, "id", getattr(b, "attr", "")))]
    mine = lineage(runner)
    has = set().union(*(_class_members(c) for c in mine)) if mine else set()
    forbidden = {c.name for c in mine}
    for name, node in classes.items():
        members = {m for m in _class_members(node) if not m.startswith("__")}
        if "Protocol" in {getattr(b, "id", getattr(b, "attr", None)) for b in node.bases} and members <= has:
            forbidden.add(name)
    out = []
    for path, tree in trees.items():
        rel = path.relative_to(src).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, [a.vararg, a.kwarg])]:
                    hit = sorted(_names_in(arg.annotation) & forbidden)
                    if hit:
                        out.append(f"{rel}:{node.lineno} {node.name}({arg.arg}: {hit[0]})")
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and rel != "runner/run.py":
                whole = f"{'.' * node.level}{node.module or ''}" if isinstance(node, ast.ImportFrom) else ""
                names = {al.name for al in node.names}
                if (whole in (".run", "leverbench.runner.run") or "leverbench.runner.run" in names
                        or (whole in (".", "leverbench.runner") and "run" in names)):
                    out.append(f"{rel}:{node.lineno} imports runner.run")
    return out


def test_no_runner_part_takes_the_runner():
    """The runner lays the run out as a plan and executes it (runner/plan.py, runner/execute.py); its parts (the
    engines, the load stages, the senders, the cache states, ...) get the narrow things they need, never the
    runner itself nor a Protocol it implements (a cycle in all but name)."""
    found = runner_takers(SRC)
    assert not found, "runner parts that take the runner: " + " | ".join(found)


def test_the_runner_rule_catches_a_part_that_takes_the_runner(tmp_path):
    src = _package(tmp_path, {
        "__init__.py": "", "runner/__init__.py": "",
        "runner/execute.py": "class Executor:\n    plan: int\n    def do_unit(self): ...\n",
        "runner/run.py": "from .execute import Executor\nfrom .blocks import Blocks\n"
                         "class Runner(Executor):\n    def __init__(self):\n        self.endpoints, self.spec = {}, 1\n"
                         "        self.blocks = Blocks(self)\n    async def scrape(self, when): ...\n",
        "runner/blocks.py": "from typing import Protocol\n"
                            "class BlockRunner(Protocol):\n    endpoints: dict\n    async def scrape(self, when): ...\n"
                            "class Sender(Protocol):\n    def send(self): ...\n"
                            "class Blocks:\n    def __init__(self, runner: BlockRunner, out: Sender): ...\n",
        "runner/load.py": "from . import run\nasync def stages(r: 'run.Runner') -> None: ...\n"
                          "def step(e: 'Executor | None', n: int) -> None: ...\n",
        "runner/send.py": "import leverbench.runner.run\nfrom .blocks import Sender\ndef f(s: Sender) -> None: ...\n",
    })
    assert runner_takers(src) == ["runner/blocks.py:8 __init__(runner: BlockRunner)",
                                  "runner/load.py:1 imports runner.run", "runner/load.py:2 stages(r: Runner)",
                                  "runner/load.py:3 step(e: Executor)", "runner/send.py:1 imports runner.run"]


# ---------------------------------------------------------------- levers are data (issue 39 part 4)

#: Where a lever's names may stand outside ``levers/``, and why.  Everywhere else a lever is asked of the registry
#: (:mod:`leverbench.levers`): by a property its module declares (``caches_prompts``, ``natural_answers``,
#: ``traffic``, ``measure``, ``stated``, ...), never by its name.
LEVER_NAME_PLACES = {
    "levers/": "the levers' own modules",
    "engines/llama_flags.py": "the prebuilt llama.cpp server's flag table: its parameters by llama.cpp's own names "
                              "(cache_prompt, n_parallel, cache_type_k), the spellings the levers' aliases were "
                              "taken from",
    "engines/embedded.py": "the facts the embedded engine says of itself, under the keys discovery reads "
                           "(model_file)",
    "engines/vllm.py": "the facts the vLLM engine says of itself, under the keys discovery reads (model_file, "
                       "tensor_parallel)",
    "engines/simulator/": "a test instrument that models each lever's physics and speaks each engine's API "
                          "(cache_prompt, enable_prefix_caching, speculative)",
    "cli/sim.py": "the simulator's command: its options are the simulator's own settings (user-facing names)",
}
#: Lever names that are also the tool's own words for the serving setup, and why they may stand anywhere.  An entry
#: must still be a lever's name and still be used outside the places above (else the test says to remove it).
LEVER_NAME_WORDS = {
    "engine": "the engine the tool starts, resets and records (every record's engine, the engines' registry)",
    "engine_version": "shown beside the engine in the conditions every figure holds for",
    "model": "the model every request names (OpenAI's field, the traces' column)",
    "device": "the GPU device the telemetry reads",
    "slots": "the number the runner, the experiment's bounds and whatif's queue model take (a queue's servers)",
    "parallel": "the embedded engine's own fact of its slots, and whatif's 'in parallel' figure",
    "context_length": "a number the experiment bounds and the prompts are checked against; whatif's cache size",
    "block_size": "a number the experiment bounds; whatif's cache model's block",
}


def lever_names() -> dict[str, str]:
    """Every lever's knob name, aliases and words (from the registry: a new lever's are covered) → its knob, less
    :data:`LEVER_NAME_WORDS`."""
    from leverbench.levers import registry  # noqa: PLC0415

    return {n: x.name for x in registry.levers() for n in (*x.names(), x.words) if n not in LEVER_NAME_WORDS}


def lever_namings(src: Path, names: dict[str, str], places: dict[str, str] = LEVER_NAME_PLACES) -> list[str]:
    """Every module of the package at *src* that names a lever: outside ``levers/``, an import of a lever's own
    module (any module of ``levers/`` but ``lever`` and ``registry``: an exempted place asks the registry too);
    outside *places*, a string literal that is exactly one of *names* (a docstring's or a message's prose is not
    one).  Python names (a local ``drafter``, a field written by keyword) are not looked at: the rule is about the
    text knobs are matched by."""
    known = modules(src)
    own = {f"{src.name}.levers.{p.stem}" for p in (src / "levers").glob("*.py")} - {
        f"{src.name}.levers.{m}" for m in ("__init__", "lever", "registry")}
    out = []
    for name, path in known.items():
        rel = path.relative_to(src).as_posix()
        if rel.startswith("levers/"):
            continue
        out += [f"{rel} imports {m}" for m in sorted(imports(name, path, known) & own)]
        if rel.startswith(tuple(places)):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                out.append(f"{rel}:{node.lineno} names {names[node.value]} ({node.value!r})")
    return sorted(out)


def test_no_module_outside_the_levers_names_a_lever():
    found = lever_namings(SRC, lever_names())
    assert not found, ("a lever named outside levers/ (ask the registry for what its module declares, or say in "
                       "LEVER_NAME_PLACES why the place may): " + " | ".join(found))
    from leverbench.levers import registry  # noqa: PLC0415

    knobs = {n for x in registry.levers() for n in x.names()}
    assert set(LEVER_NAME_WORDS) <= knobs, f"not a lever's name: {sorted(set(LEVER_NAME_WORDS) - knobs)}"
    used = {f.rsplit("(", 1)[-1].strip("')") for f in lever_namings(SRC, {w: w for w in LEVER_NAME_WORDS})}
    assert used == set(LEVER_NAME_WORDS), f"remove from LEVER_NAME_WORDS (unused): {set(LEVER_NAME_WORDS) - used}"
    anywhere = lever_namings(SRC, lever_names(), {"levers/": LEVER_NAME_PLACES["levers/"]})
    idle = [p for p in LEVER_NAME_PLACES if p != "levers/" and not any(f.startswith(p) for f in anywhere)]
    assert not idle, f"remove from LEVER_NAME_PLACES (they name no lever): {idle}"


def test_the_lever_rule_catches_a_lever_named_outside_the_levers(tmp_path):
    """A knob looked up by name, an alias, a lever's words and an import of a lever's module are caught, in the
    schema and in an engine module not listed too, and an import of a lever's module in an exempted place; the
    exempted places' literals, the setup's own words and prose are not."""
    src = _package(tmp_path, {
        "__init__.py": "", "levers/__init__.py": "", "levers/drafter.py": "LEVER = 'drafter'\n",
        "levers/lever.py": "", "levers/registry.py": "",
        "analysis/__init__.py": "", "analysis/x.py": "def on(k):\n    return k.get('kv_cache_dtype')\n",
        "analysis/y.py": "from ..levers.drafter import LEVER\nPHASE = {'prefix cache': 'prefill'}\n",
        "runner/__init__.py": "", "runner/z.py": "SENT = ('model', 'cache_type_k')\n",
        "report/__init__.py": "", "report/ok.py": '"""The drafter and the prefix_cache, in prose."""\n'
                                                 "from ..levers import registry\nWORDS = 'engine'\n",
        "schema/__init__.py": "", "schema/rows.py": "FIELDS = ('prefix_cache', 'drafter')\n",
        "engines/__init__.py": "", "engines/llama_flags.py": "TABLE = {'cache_prompt': 1}\n",
        "engines/vllm.py": "from ..levers.drafter import LEVER\nFACT = 'tensor_parallel'\n",
        "engines/simulator/__init__.py": "", "engines/simulator/server.py": "ON = 'speculative'\n",
        "engines/reset.py": "from ..levers.drafter import LEVER\nFIELD = 'cache_prompt'\n",
    })
    assert lever_namings(src, lever_names()) == [
        "analysis/x.py:2 names kv_cache_dtype ('kv_cache_dtype')",
        "analysis/y.py imports leverbench.levers.drafter",
        "analysis/y.py:2 names prefix_cache ('prefix cache')",
        "engines/reset.py imports leverbench.levers.drafter",
        "engines/reset.py:2 names prefix_cache ('cache_prompt')",
        "engines/vllm.py imports leverbench.levers.drafter",
        "runner/z.py:1 names kv_cache_dtype ('cache_type_k')",
        "schema/rows.py:1 names drafter ('drafter')",
        "schema/rows.py:1 names prefix_cache ('prefix_cache')"]
