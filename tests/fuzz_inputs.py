"""Hostile inputs for the fuzz suite (``tests/test_fuzz.py``) and its long run (``benchmarks/fuzz_inputs.py``).

Each generator starts from a *valid* input and mutates it, as a user (or a broken tool upstream) would get it
wrong: values of the wrong type, numbers infinite, NaN, huge, negative or zero, strings with NUL and control
characters or very long, odd URLs and paths, keys deleted, duplicated or unknown, nesting where none belongs,
cross-references broken.  Three kinds:

- :func:`experiments`: an experiment file (TOML) and its support files (a document, tool schemas, a tool
  script, a trace) in a folder, its arms pointing at a closed port (``127.0.0.1:1``: every call is refused
  at once), sized tiny, so that an input that is valid after all runs to its end in seconds;
- :func:`ledgers`: a run directory whose ``ledger.jsonl`` is a golden ledger (``tests/golden``) with
  header fields, record fields or whole lines mutated;
- :func:`traffic`: a traffic file (a few lines of the traces in ``tests/data/traces``) with cells, fields or
  lines mutated.

Each draws a :class:`Case`: the files (name → bytes), the command line to run on them (relative to the folder
they are written to), and a list of what was changed, in words.  :class:`CliWorker` runs a command line in a
separate process (imported once, reused) with a time limit, a memory limit and the folder as working
directory; :func:`problems` says what is wrong with an :class:`Outcome`: an exit code other than 0, 1 or 2
(70: the internal-error handler of ``leverbench.cli.common`` caught an exception), a traceback, an error that
is not one line ``leverbench: error: ...`` at the end of stderr, a hang, a crash of the process.
"""

from __future__ import annotations

import copy
import json
import math
import multiprocessing as mp
import os
import re
import resource
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

TESTS = Path(__file__).resolve().parent
GOLDEN = TESTS / "golden"
TRACES = TESTS / "data" / "traces"
CLOSED_URL = "http://127.0.0.1:1/v1"  # nothing listens on port 1: connection refused at once
WORKER_MEMORY_BYTES = 4 << 30  # a worker's address space: a runaway allocation is a MemoryError, not the OOM killer

# ------------------------------------------------------------------ hostile values

HUGE_INTS = [2**31, 2**53 + 1, 2**62, 2**63, 2**64, 10**30, 10**400]
ODD_NUMBERS = [0, -1, -(2**63), 0.0, -0.0, -1.5, 0.5, 1e-300, 5e-324, 1e300, 1.7976931348623157e308, -1e308,
               math.inf, -math.inf, math.nan, *HUGE_INTS]
ODD_URLS = ["http://127.0.0.1:99999/v1", "http://127.0.0.1:-1/v1", "http://127.0.0.1:ab/v1", "http://[::1/v1",
            "http://", "https://", "file:///etc/passwd", "ftp://x/v1", "javascript:alert(1)", "not a url", "",
            "http://127.0.0.1:1/v1\r\nX-Evil: 1", "http://user:pw@127.0.0.1:1/v1", "http://127.0.0.1:0/v1",
            "http://127.0.0.1:1/v1?x=\x00", "http://" + "a" * 300 + ":1/v1", "//127.0.0.1:1/v1", "127.0.0.1:1",
            "http://127.0.0.1:1/v1#frag", "HTTP://127.0.0.1:1/V1", "http://[::1]:1/v1", "unix:///tmp/x.sock"]
ODD_PATHS = ["/dev/zero", "/dev/null", "/", ".", "..", "nonexistent.txt", "/proc/self/status", "a\x00b",
             "x" * 5000, "doc.txt/", "~/doc.txt", "${HOME}/x", "*", "tools.json", "trace.jsonl"]
CONTROL = "".join(chr(c) for c in range(32) if chr(c) not in "\t\n") + "\x7f"
ODD_STRINGS = ["", " ", "\x00", "a\x00b", "\r\n", "\x1b[31mred", "\u202e", "\ufeff", "é" * 3, "名前", "😀",
               "x" * 300, "y" * 100_000, "../../etc", "a/b", ".", "NaN", "inf", "-1", "1e999", "true", "null",
               "{}", "[]", "%s%n", "'; DROP TABLE", CONTROL]


def _text() -> st.SearchStrategy[str]:
    chars = st.characters(blacklist_categories=("Cs",))  # no lone surrogates: a file holds UTF-8
    return st.one_of(st.sampled_from(ODD_STRINGS), st.text(chars, max_size=20),
                     st.text(st.sampled_from(CONTROL + "ab"), min_size=1, max_size=8))


@dataclass(frozen=True)
class Deep:
    """A list (or table) nested *depth* deep around ``1``: written straight as text (:meth:`json`, :meth:`toml`),
    never built as Python objects, which the generators' own recursion could not walk."""

    depth: int
    kind: str = "list"

    def json(self) -> str:
        return ("[" * self.depth + "1" + "]" * self.depth if self.kind == "list"
                else '{"a": ' * self.depth + "1" + "}" * self.depth)

    def toml(self) -> str:
        return ("[" * self.depth + "1" + "]" * self.depth if self.kind == "list"
                else "{a = " * self.depth + "1" + "}" * self.depth)


def dump_json(obj: Any) -> str:
    """*obj* as JSON as a careless writer would: NaN and Infinity as such, a :class:`Deep` nesting spelt out,
    anything else JSON has no type for as its string."""
    deep: list[Deep] = []

    def other(o: Any) -> Any:
        if isinstance(o, Deep):
            deep.append(o)
            return f"@@deep{len(deep) - 1}@@"
        return str(o)
    text = json.dumps(obj, allow_nan=True, default=other)
    for i, d in enumerate(deep):
        text = text.replace(f'"@@deep{i}@@"', d.json(), 1)
    return text


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(ODD_NUMBERS), st.integers(), st.floats(), st.booleans(), _text(),
                     st.sampled_from(ODD_URLS), st.sampled_from(ODD_PATHS))


DEEP_ONE_IN = 10
"""One value in this many is a deep nesting (0: none; the long run's ``--deep-one-in``)."""


def values() -> st.SearchStrategy[Any]:
    """Any hostile value: a scalar, a small list or table of them, a deep nesting."""
    small = st.recursive(scalars(), lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                           st.dictionaries(_text(), kids, max_size=3)),
                         max_leaves=6)
    deep = st.builds(Deep, st.sampled_from([30, 200, 1100, 5000]), st.sampled_from(["list", "dict"]))
    if not DEEP_ONE_IN:
        return small
    return st.one_of(*[small] * (DEEP_ONE_IN - 1), deep)  # rarely deep: the rest of the file gets its turn


def same_kind(v: Any) -> st.SearchStrategy[Any]:
    """A hostile value of *v*'s own type: an integer for an integer (huge, negative, zero), a float for a float
    (inf, NaN, tiny, huge), a string for a string (a URL for a URL, a path for a path)."""
    if isinstance(v, bool):
        return st.booleans()
    if isinstance(v, int):
        return st.one_of(st.sampled_from([0, -1, 2, 1000, 1001, 10**6, 10**9, *HUGE_INTS[:-1], -(2**63)]),
                         st.integers(-10, 10**12))
    if isinstance(v, float):
        return st.one_of(st.sampled_from([0.0, -0.0, -1.0, 1e-300, 5e-324, 1e9, 1e300, math.inf, -math.inf, math.nan,
                                          1.0000001, 0.999999]), st.floats())
    if isinstance(v, str) and v.startswith("http"):
        return st.sampled_from(ODD_URLS)
    if isinstance(v, str) and "." in v:
        return st.sampled_from(ODD_PATHS)
    return _text()


def swapped(v: Any) -> list[Any]:
    """*v* as the wrong type: a number as its string, a string as a number, a value in a list, a bool."""
    out: list[Any] = [[v], {"value": v}, None, True, str(v)[:50]]
    if isinstance(v, bool):
        out += [int(v), "yes"]
    elif isinstance(v, (int, float)):
        out += [str(v), float(v) if isinstance(v, int) else int(v) if math.isfinite(v) else 0, -v, v * 1000]
    elif isinstance(v, list) and v:
        out += [v[0], v * 50]
    elif isinstance(v, dict):
        out += [list(v), list(v.values())]
    return [x for x in out if x is not None]


# ------------------------------------------------------------------ tree mutation


def _paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into *tree* (dict keys and list indexes), the root's children first."""
    out: list[tuple] = []
    stack: list[tuple[tuple, Any]] = [(prefix, tree)]
    while stack:
        p, node = stack.pop(0)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((*p, k))
            if len(p) < 8:
                stack.append(((*p, k), v))
    return out


def _get(tree: Any, path: tuple) -> Any:
    for k in path:
        tree = tree[k]
    return tree


def _where(path: tuple) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 80 else s[:60] + f"…({len(s)} chars)"


@st.composite
def mutate_tree(draw: st.DrawFn, tree: Any, *, skip: frozenset[str] = frozenset(), max_ops: int = 3
                ) -> tuple[Any, list[str]]:
    """*tree* (a copy) with 1 to *max_ops* mutations at drawn paths; what each did, in words."""
    tree = copy.deepcopy(tree)
    said: list[str] = []
    for _ in range(draw(st.integers(1, max_ops))):
        paths = [p for p in _paths(tree) if not (set(map(str, p)) & skip)]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, key = _get(tree, path[:-1]), path[-1]
        old = parent[key]
        op = draw(st.sampled_from(["value", "value", "same", "same", "same", "same", "swap", "delete", "add", "dup"]))
        if op == "same" and not isinstance(old, (dict, list)):  # of its own type: past the type check, to the bounds
            parent[key] = draw(same_kind(old))
            said.append(f"{_where(path)} = {_short(parent[key])} (was {_short(old)})")
        elif op == "delete":
            del parent[key]
            said.append(f"{_where(path)} deleted")
        elif op == "add" and isinstance(parent, dict):
            name = draw(st.one_of(st.sampled_from(["extra", "x", "Name", "base_url ", ""]), _text()))
            parent[name] = draw(values())
            said.append(f"{_where((*path[:-1], name))} = {_short(parent[name])} added")
        elif op == "dup" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(old))
            said.append(f"{_where(path)} duplicated")
        elif op == "swap":
            parent[key] = draw(st.sampled_from(swapped(old)))
            said.append(f"{_where(path)} = {_short(parent[key])} (was {_short(old)})")
        else:
            parent[key] = draw(values())
            said.append(f"{_where(path)} = {_short(parent[key])}")
    return tree, said


# ------------------------------------------------------------------ TOML out


class Raw(str):
    """TOML written as is (a datetime, a malformed fragment)."""


def toml_string(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)  # escapes ", \ and U+0000–U+001F; TOML wants U+007F escaped too
    return out.replace("\x7f", "\\u007f")


def toml_key(k: Any) -> str:
    k = str(k)
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else toml_string(k)


def toml_value(v: Any) -> str:
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, Deep):
        return v.toml()
    if v is None:
        return '""'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else "inf" if v == math.inf else "-inf" if v == -math.inf else repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    return toml_string(str(v))


def to_toml(doc: dict[str, Any]) -> str:
    """*doc* as TOML: top-level plain values first, then each table (``[name]``), then arrays of tables
    (``[[name]]``), every value below a table inline (deep nesting stays on one line)."""
    plain, tables, arrays = [], [], []
    for k, v in doc.items():
        if isinstance(v, dict):
            tables.append((k, v))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            arrays.append((k, v))
        else:
            plain.append(f"{toml_key(k)} = {toml_value(v)}")
    out = plain[:]
    for k, v in tables:
        out += [f"\n[{toml_key(k)}]", *(f"{toml_key(a)} = {toml_value(b)}" for a, b in v.items())]
    for k, items in arrays:
        for item in items:
            out += [f"\n[[{toml_key(k)}]]", *(f"{toml_key(a)} = {toml_value(b)}" for a, b in item.items())]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ cases


@dataclass
class Case:
    """One generated input: *files* (relative name → bytes) written to a folder, *args* (the ``leverbench``
    command line, paths relative to that folder), *mutations* (what was changed, in words), *kind*."""

    kind: str
    files: dict[str, bytes]
    args: list[str]
    mutations: list[str] = field(default_factory=list)

    def write(self, folder: Path) -> None:
        for name, data in self.files.items():
            p = folder / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)

    def describe(self) -> str:
        return f"{self.kind}: leverbench {' '.join(self.args)}: " + "; ".join(self.mutations)

    def __repr__(self) -> str:  # what hypothesis prints of a failing example: the words, not the bytes
        sizes = ", ".join(f"{k} ({len(v)} bytes)" for k, v in self.files.items())
        return f"Case({self.describe()!r}; files: {sizes})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # hypothesis's printer (it spells dataclasses out)
        p.text(repr(self))


TOOLS = [{"type": "function", "function": {"name": "search_docs", "description": "search",
                                            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
SCRIPT = {"search_docs": {"result": "found: the cache helps", "latency_s": 0.0}, "default": "nothing"}


def base_experiment() -> dict[str, Any]:
    """A valid experiment that touches most keys and runs in a few seconds against the closed port: one warm-up,
    a case with a variant, a step and tools, probes at two lengths and depths, a closed, an open and a trace
    stage of a few requests each."""
    return {
        "experiment": {"name": "fuzz", "repeats": 1, "order": "interleaved", "baseline": "a",
                       "volume_tolerance_cell": 0.2, "volume_tolerance_total": 0.05, "store_text": False,
                       "drift_tolerance": 0.1, "sentinel_tokens": 0, "retries": 0, "engaged_acceptance_min": 0.2,
                       "timeouts": {"connect_s": 5.0, "first_token_s": 5.0, "idle_s": 5.0, "total_s": 10.0}},
        "arms": [
            {"name": "a", "role": "baseline", "base_url": CLOSED_URL, "model": "m", "request": {"top_p": 1.0},
             "conditions": {"prefix_cache": False, "gpus": 1, "gpu_hour_usd": 2.0}},
            {"name": "b", "role": "treatment", "base_url": CLOSED_URL, "model": "m",
             "conditions": {"prefix_cache": True}},
        ],
        "cases": [
            {"name": "c", "system": "be brief", "documents": ["doc.txt"], "prompt": "summarise", "max_tokens": 2,
             "temperature": 0.0, "tools": "tools.json", "tool_script": "script.json", "tool_latency_s": 0.0,
             "max_steps": 2, "steps": [{"prompt": "more", "max_tokens": 1}],
             "variants": [{"name": "short", "append": "One line.", "max_tokens": 1}]},
        ],
        "probes": {"output_tokens": [1, 2], "repeats": 1, "case": "c", "tolerance": 0.1, "depths": [8, 16]},
        "load": [
            {"name": "closed", "mode": "closed", "case": "c", "concurrency": [1, 2], "requests": 2, "duration_s": 5.0,
             "warmup_requests": 1, "slo_ttft_s": 0.5, "prefix_sharing": 0.5, "max_tokens": 1},
            {"name": "open", "mode": "open", "rate": 50.0, "arrival": "gamma", "burstiness": 0.5, "seed": 1,
             "requests": 2, "duration_s": 2.0, "max_in_flight": 4, "slo_e2e_s": 1.0},
            {"name": "trace", "mode": "trace", "trace": "trace.jsonl", "speed": 1000.0, "requests": 3,
             "scale_input": 0.01, "scale_output": 1.0, "max_input_tokens": 64, "block_tokens": 512},
        ],
    }


def _trace_lines(name: str, n: int) -> list[str]:
    return (TRACES / name).read_text().splitlines()[:n]


def support_files() -> dict[str, bytes]:
    return {"doc.txt": b"The cache helps prefill. " * 20, "tools.json": json.dumps(TOOLS).encode(),
            "script.json": json.dumps(SCRIPT).encode(),
            "trace.jsonl": ("\n".join(_trace_lines("mooncake_synthetic_trace.jsonl", 5)) + "\n").encode()}


EXPERIMENT_SKIP = frozenset({"workers", "engine"})  # never mutated: Ray clusters and engines are not what is fuzzed


@st.composite
def experiments(draw: st.DrawFn) -> Case:
    """A mutated experiment (see the module's docstring), run with ``leverbench run --out run exp.toml``."""
    doc, said = draw(mutate_tree(base_experiment(), skip=EXPERIMENT_SKIP))
    files = support_files()
    text = to_toml(doc)
    extra = draw(st.sampled_from(["none"] * 6 + ["dup-key", "garbage", "datetime", "tools", "script", "trace",
                                                  "bom", "binary"]))
    if extra == "dup-key":
        text = text.replace("[experiment]\n", '[experiment]\nname = "again"\n', 1)
        said.append("experiment.name given twice")
    elif extra == "garbage":
        text += draw(st.sampled_from(["[experiment", "x = ", "= 1", "[[arms]]\nname = ", "\x00", "a = 1\na = 2",
                                      '[arms]\nname = "t"']))
        said.append("garbage appended to the TOML")
    elif extra == "datetime":
        text = text.replace("repeats = 1", "repeats = 1979-05-27T07:32:00Z", 1)
        said.append("experiment.repeats = a TOML datetime")
    elif extra == "bom":
        text = "\ufeff" + text
        said.append("a UTF-8 byte-order mark first")
    elif extra == "binary":
        files["exp.toml"] = text.encode()[:40] + b"\xff\xfe\x00\x81" + text.encode()[40:]
        said.append("invalid UTF-8 bytes in the TOML")
    elif extra in ("tools", "script"):
        tree = TOOLS if extra == "tools" else SCRIPT
        if draw(st.booleans()):
            bad, how = draw(mutate_tree(tree))
            files[f"{extra}.json"] = dump_json(bad).encode()
        else:
            raw = draw(st.sampled_from([b"", b"{", b"null", b"[1, 2]", b"NaN", b'"x"', b"\x00", b"[" * 5000]))
            files[f"{extra}.json"], how = raw, [f"the file is {raw[:20]!r}" + (f"…({len(raw)} bytes)" if len(raw) > 20
                                                                                else "")]
        said.append(f"{extra}.json: " + "; ".join(how))
    elif extra == "trace":
        files["trace.jsonl"] = draw(traffic_bytes("mooncake_synthetic_trace.jsonl"))[0]
        said.append("trace.jsonl mutated")
    files.setdefault("exp.toml", text.encode())
    return Case("experiment", files, ["run", "--out", "run", "exp.toml"], said)


# ------------------------------------------------------------------ ledgers

GOLDEN_LEDGERS = ("sim.ledger.jsonl", "handmade.ledger.jsonl")


def _json_lines(data: bytes) -> list[Any]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


@st.composite
def ledgers(draw: st.DrawFn) -> Case:
    """A golden ledger with its header, a record or its lines mutated, in ``run/ledger.jsonl``; the command
    one of ``report``, ``report --salvage``, ``project``, ``analyze`` on it."""
    name = draw(st.sampled_from(GOLDEN_LEDGERS))
    lines = _json_lines((GOLDEN / name).read_bytes())
    said: list[str] = [name]
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["header", "header", "record", "record", "record", "crossref", "line"]))
        if op == "header":
            lines[0], how = draw(mutate_tree(lines[0], max_ops=1))
            said += [f"header {h}" for h in how]
        elif op == "record":
            i = draw(st.integers(1, len(lines) - 1))
            if isinstance(lines[i], dict):
                lines[i], how = draw(mutate_tree(lines[i], max_ops=1))
                said += [f"line {i + 1} ({lines[i].get('kind') if isinstance(lines[i], dict) else '?'}) {h}"
                         for h in how]
        elif op == "crossref":
            i = draw(st.integers(1, len(lines) - 1))
            key, val = draw(st.sampled_from([("arm", "zzz"), ("kind", "nonsense"), ("case", "no such case"),
                                             ("turn_id", "missing"), ("stage", "nope"), ("repeat", 10**6),
                                             ("step", -5)]))
            if isinstance(lines[i], dict):
                lines[i][key] = val
                said.append(f"line {i + 1} {key} = {val!r}")
            if draw(st.booleans()) and isinstance(lines[0], dict):
                lines[0]["baseline"] = "zzz"
                cfg = lines[0].get("config")
                if isinstance(cfg, dict) and isinstance(cfg.get("experiment"), dict):
                    cfg["experiment"]["baseline"] = "zzz"
                said.append("header baseline = 'zzz'")
        else:
            i = draw(st.integers(0, len(lines) - 1))
            how = draw(st.sampled_from(["delete", "duplicate", "garbage", "nested", "scalar"]))
            if how == "delete":
                del lines[i]
            elif how == "duplicate":
                lines.insert(i, copy.deepcopy(lines[i]))
            elif how == "garbage":
                lines.insert(i, Raw(draw(st.sampled_from(["{", "not json", "", "\x00", '{"kind": "call"',
                                                          "NaN", "[]", "{}", "null"]))))
            elif how == "nested":
                lines.insert(i, Deep(draw(st.sampled_from([200, 1100, 5000]))))
            else:
                lines.insert(i, draw(scalars()))
            said.append(f"line {i + 1} {how}")
    text = "\n".join(x if isinstance(x, Raw) else dump_json(x) for x in lines)
    if draw(st.integers(0, 9)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
        said.append("file cut short")
    cmd = draw(st.sampled_from([["report", "run"], ["report", "--salvage", "run"],
                                ["project", "run", "--input-tokens", "100", "--output-tokens", "10"],
                                ["analyze", "run/ledger.jsonl"]]))
    return Case("ledger", {"run/ledger.jsonl": (text + "\n").encode()}, cmd, said)


# ------------------------------------------------------------------ traffic

TRAFFIC_FILES = ("mooncake_synthetic_trace.jsonl", "AzureLLMInferenceTrace_code.csv",
                 "tracelab_replay_session_workload_example.csv", "tracelab_example_round_trace.jsonl")
CELLS = ["", "nan", "NaN", "inf", "-inf", "-1", "0", "1e400", "1" + "0" * 48, "abc", "1.5", "true", "null",
         "\x00", "x" * 10_000, '"', "1,2", "2023-13-45 99:99:99", "-0", " 12 ", "9" * 400]


@st.composite
def traffic_bytes(draw: st.DrawFn, name: str) -> tuple[bytes, list[str]]:
    """A few lines of the trace *name*, with JSON fields or CSV cells or whole lines mutated."""
    lines = _trace_lines(name, draw(st.integers(1, 12)))
    said = [name]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["field", "field", "field", "line"]))
        if op == "field" and name.endswith(".jsonl"):
            try:
                rec = json.loads(lines[i]) if len(lines[i]) < 1000 else None  # a garbage or deep line inserted
            except ValueError:
                rec = None
            if not isinstance(rec, dict):
                continue
            rec, how = draw(mutate_tree(rec, max_ops=1))
            lines[i] = dump_json(rec)
            said += [f"line {i + 1} {h}" for h in how]
        elif op == "field":
            cells = lines[i].split(",")
            j = draw(st.integers(0, len(cells) - 1))
            cells[j] = draw(st.sampled_from(CELLS))
            if draw(st.integers(0, 4)) == 0:
                cells.append("extra")
            lines[i] = ",".join(cells)
            said.append(f"line {i + 1} cell {j + 1} = {_short(cells[j])}")
        else:
            how = draw(st.sampled_from(["delete", "duplicate", "garbage", "nested", "header-only"]))
            if how == "delete" and len(lines) > 1:
                del lines[i]
            elif how == "duplicate":
                lines.insert(i, lines[i])
            elif how == "garbage":
                lines.insert(i, draw(st.sampled_from(["{", "not json", "", "\x00\x00", ",,,", "[1, 2]", "null"])))
            elif how == "nested":
                lines.insert(i, Deep(draw(st.sampled_from([200, 1100, 5000]))).json())
            else:
                lines = lines[:1]
            said.append(f"line {i + 1} {how}")
    return ("\n".join(lines) + "\n").encode(), said


@st.composite
def traffic(draw: st.DrawFn) -> Case:
    """A mutated traffic file, read by ``leverbench analyze`` (its format detected, or named)."""
    name = draw(st.sampled_from(TRAFFIC_FILES))
    data, said = draw(traffic_bytes(name))
    fname = "traffic" + Path(name).suffix
    files = {fname: data}
    how = draw(st.sampled_from(["hand", "hand", "rates", "fit", "whatif"]))
    if how in ("rates", "whatif"):  # a golden run's measured rates
        files["rates/ledger.jsonl"] = (GOLDEN / "sim.ledger.jsonl").read_bytes()
    args = {"hand": ["analyze", fname, "--prefill-tps", "5000", "--decode-tps", "50"],
            "rates": ["analyze", fname, "--rates", "rates"], "fit": ["analyze", fname],
            "whatif": ["whatif", fname, "--rates", "rates", "--requests", "20"]}[how]
    if how != "whatif" and draw(st.integers(0, 3)) == 0:
        args += ["--format", draw(st.sampled_from(["json", "md"]))]
    return Case("traffic", files, args, said)


# ------------------------------------------------------------------ known hostile inputs (issue 28)


def experiment_with(section: str, key: str, value: Any, index: int | None = None) -> Case:
    """The base experiment with ``section[index].key`` (or ``section.key``) set to *value*."""
    doc = base_experiment()
    where = doc[section] if index is None else doc[section][index]
    where[key] = value
    files = {**support_files(), "exp.toml": to_toml(doc).encode()}
    at = section if index is None else f"{section}[{index}]"
    return Case("experiment", files, ["run", "--out", "run", "exp.toml"], [f"{at}.{key} = {_short(value)}"])


def ledger_with(line: int, key: str, value: Any, args: list[str] | None = None) -> Case:
    """The golden sim ledger with line *line* (0: the header) field *key* set to *value*."""
    lines = _json_lines((GOLDEN / "sim.ledger.jsonl").read_bytes())
    lines[line][key] = value
    text = "\n".join(dump_json(x) for x in lines) + "\n"
    return Case("ledger", {"run/ledger.jsonl": text.encode()}, args or ["report", "run"],
                [f"line {line + 1} {key} = {_short(value)}"])


def traffic_with(lines: list[str], name: str = "traffic.jsonl", how: str = "") -> Case:
    return Case("traffic", {name: ("\n".join(lines) + "\n").encode()},
                ["analyze", name, "--prefill-tps", "5000", "--decode-tps", "50"], [how])


def known_experiments() -> list[Case]:
    return [experiment_with("experiment", "volume_tolerance_cell", math.inf),
            experiment_with("probes", "tolerance", math.inf),
            experiment_with("load", "speed", math.inf, 2),
            experiment_with("arms", "base_url", "http://127.0.0.1:99999/v1", 0),
            experiment_with("experiment", "name", "a\x00b"),
            experiment_with("experiment", "name", "n" * 300),
            experiment_with("cases", "temperature", math.inf, 0),
            experiment_with("load", "rate", 1e-300, 1),
            experiment_with("load", "block_tokens", 2**63, 2)]


def known_ledgers() -> list[Case]:
    i = 9  # a call record
    return [ledger_with(i, "latency_s", "1.5"), ledger_with(i, "ttft_s", {"a": 1}), ledger_with(i, "arm", ["x"]),
            ledger_with(i, "completion_tokens", 1e308), ledger_with(0, "baseline", "zzz"),
            ledger_with(0, "repeats", "x"), ledger_with(i, "latency_s", None)]


def known_traffic() -> list[Case]:
    mooncake = _trace_lines("mooncake_synthetic_trace.jsonl", 3)
    return [traffic_with([*mooncake, Deep(10_000).json()], how="a line nested 10,000 deep"),
            traffic_with(['{"timestamp": 0, "input_length": 1' + "0" * 48 + ', "output_length": 5}'],
                         how="input_length 10^48")]


# ------------------------------------------------------------------ running


@dataclass
class Outcome:
    """What a command line did: its exit code (None: it hung or its process died), its output, its time;
    where an exception escaped (or was caught as an internal error), its type, message and where it was raised."""

    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    hung: bool = False
    died: str | None = None  # the worker process died (signal, exit code)
    exception: str | None = None  # TYPE: MESSAGE of an exception that escaped the command
    raised_at: str | None = None  # FILE:LINE (the innermost frame in leverbench) where it was raised


def _serve(conn: Any) -> None:
    """The worker's loop: run each command line it is sent with click's test runner, send back an Outcome."""
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    from click.testing import CliRunner  # noqa: PLC0415 (in the worker)

    from leverbench.cli import cli  # noqa: PLC0415

    while True:
        try:
            req = conn.recv()
        except EOFError:
            return
        args, cwd, env = req
        os.chdir(cwd)
        t0 = time.monotonic()
        res = CliRunner().invoke(cli, args, env=env, catch_exceptions=True)
        exc = raised_at = None
        stderr = res.stderr
        rc = res.exit_code
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            tb = "".join(traceback.format_exception(*res.exc_info))  # as Python prints one that escapes
            stderr += tb
            rc = 1
            exc = f"{type(res.exception).__name__}: {' '.join(str(res.exception).split())[:200]}"
            frames = [f for f in traceback.extract_tb(res.exc_info[2]) if "/leverbench/" in f.filename] \
                or traceback.extract_tb(res.exc_info[2])
            if frames:
                f = frames[-1]
                raised_at = f"{f.filename.split('/src/')[-1]}:{f.lineno}"
        conn.send(Outcome(rc, res.stdout, stderr, time.monotonic() - t0, exception=exc, raised_at=raised_at))


class CliWorker:
    """Runs ``leverbench`` command lines in one separate process, reused (the tool imported once); a command
    that takes longer than its limit is a hang: the process is killed and a fresh one started."""

    def __init__(self) -> None:
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child,), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join()
        self._proc = self._conn = None

    def invoke(self, args: list[str], cwd: Path, limit_s: float, env: dict[str, str] | None = None) -> Outcome:
        if self._proc is None or not self._proc.is_alive():
            self._start()
        t0 = time.monotonic()
        self._conn.send((args, str(cwd), env or {}))
        try:
            if self._conn.poll(limit_s):
                return self._conn.recv()
        except (EOFError, OSError):
            self._proc.join()
            code = self._proc.exitcode
            self._kill()
            return Outcome(None, "", "", time.monotonic() - t0, died=f"worker died (exit code {code})")
        self._kill()
        return Outcome(None, "", "", time.monotonic() - t0, hung=True)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._kill()


def run_case(worker: CliWorker, case: Case, folder: Path, limit_s: float,
             env: dict[str, str] | None = None) -> Outcome:
    """Write *case* into *folder* and run its command line there."""
    case.write(folder)
    return worker.invoke(case.args, folder, limit_s, env)


ERROR_PREFIX = "leverbench: error: "


def problems(out: Outcome, limit_s: float) -> list[str]:
    """What is wrong with *out* (empty: nothing): a hang, a dead process, an exit code not 0/1/2, a traceback,
    an error that is not one ``leverbench: error:`` line ending stderr."""
    if out.hung:
        return [f"hang: no exit within {limit_s:.0f} s"]
    if out.died:
        return [out.died]
    found = []
    if out.rc not in (0, 1, 2):
        found.append(f"exit code {out.rc}" + (" (internal error)" if out.rc == 70 else ""))
    if "Traceback" in out.stdout or "Traceback" in out.stderr:
        found.append(f"traceback: {out.exception or '?'} at {out.raised_at or '?'}")
    if out.rc in (1, 2):
        tail = out.stderr.rstrip("\n").split("\n")
        errs = [ln for ln in tail if ln.startswith(ERROR_PREFIX)]
        if len(errs) != 1 or not tail[-1].startswith(ERROR_PREFIX):
            found.append(f"exit {out.rc} without one '{ERROR_PREFIX}' line ending stderr: {tail[-3:]!r}")
    return found
