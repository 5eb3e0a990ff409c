"""The columnar reader: CSV and JSON-lines logs through polars, in bounded memory.

One pass over the file: polars parses it in batches (``scan_csv`` /
``scan_ndjson``, streaming), expressions inside its engine check each row as
the row-by-row importers do (the same skip reasons: missing, non-numeric,
negative, fractional or too large (:mod:`.bounds`) token counts, a CSV row with fewer cells than the
header, bad JSON), the skip counts and the first line of each reason are
summed batch by batch, and the usable rows, in the canonical columns
(``records.COLUMNS``), are kept in memory up to ``memory_budget()`` bytes and
past it written batch by batch to temporary Arrow IPC files (lz4) that the
analysis scans lazily.  So a log larger than memory is read without loading
it whole.

The passes (``Source``), tried in order until one parses the whole file:
typed (number columns parsed as numbers by polars: the fast one, for clean
logs), as text (every cell as text: a cell that is not a number gets its skip
reason) and, for JSON lines, line by line (a line that is not JSON at all); for a generic CSV whose
records and lines the polars passes cannot line up (a quoted cell spanning lines), record by record.

Line numbers: a CSV row's is its record number + 1 (a quoted cell spanning
lines shifts the later ones); a JSON line's is exact (blank lines counted).
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import orjson
import polars as pl

from ...errors import BadInput
from .bounds import MAX_CALL_S, MAX_STAMP_S, MAX_TOKENS, tokens_text
from .records import COLUMNS, DType, TrafficLoad, no_usable_rows

BATCH_ROWS = 500_000
MAX_CELL_CHARS = 1 << 26  # a CSV cell the careful pass reads (64 Mi characters: a prompt's text is far shorter)


def memory_budget() -> int:
    """Bytes of usable rows kept in memory before the rest spills to disk: $LEVERBENCH_TRAFFIC_MEMORY_MB, else
    a quarter of the physical memory, at most 2 GiB."""
    env = os.environ.get("LEVERBENCH_TRAFFIC_MEMORY_MB")
    if env:
        return int(float(env) * (1 << 20))
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        phys = 8 << 30
    return min(2 << 30, phys // 4)


@dataclass(frozen=True)
class Field:
    """A source column (or dotted JSON path) read into column ``name``.

    kind: ``count`` (a token count the row needs: a bad value skips the row,
    named ``what``), ``opt_count``, ``seconds`` (optional, ≥ 0, × scale),
    ``stamp`` (a number × scale, else an ISO 8601 datetime; epoch seconds) or
    ``str``.
    """

    name: str
    key: str
    kind: str = "str"
    what: str = ""
    scale: float = 1.0


def _number(c: pl.Expr) -> pl.Expr:
    return c.str.strip_chars().cast(pl.Float64, strict=False)


def _missing(c: pl.Expr) -> pl.Expr:
    return c.is_null() | (c.str.strip_chars() == "")


def _bad_number(x: pl.Expr) -> pl.Expr:
    return x.is_null() | x.is_nan() | x.is_infinite()


def _is_count(x: pl.Expr) -> pl.Expr:
    return ~_bad_number(x) & (x >= 0) & (x == x.floor()) & (x <= MAX_TOKENS)


def _stamp(c: pl.Expr, scale: float) -> pl.Expr:
    """Epoch seconds: a number × scale, else an ISO 8601 datetime (naive = UTC)."""
    x = _number(c)
    text = c.str.strip_chars().str.replace(r"Z$", "+00:00")
    naive = text.str.to_datetime(time_unit="ns", strict=False, format="%Y-%m-%d %H:%M:%S%.f")
    iso = text.str.to_datetime(time_unit="ns", strict=False, format="%Y-%m-%dT%H:%M:%S%.f")
    zoned = text.str.to_datetime(time_unit="ns", strict=False, format="%Y-%m-%dT%H:%M:%S%.f%:z", time_zone="UTC")
    dt = pl.coalesce(naive.dt.replace_time_zone("UTC"), iso.dt.replace_time_zone("UTC"), zoned)
    # whole microseconds, as datetime.timestamp() reads them; seconds + fraction apart, so that the sum is rounded
    # once (polars may turn a division by 1e6 into a multiplication by 1e-6, off by one unit in the last place)
    us = dt.dt.epoch("us")
    t = pl.when(~_bad_number(x)).then(x * scale).otherwise((us // 1_000_000) + (us % 1_000_000) / 1e6)
    return pl.when(t.abs() <= MAX_STAMP_S).then(t)  # a stamp past ±MAX_STAMP_S s (or not finite): unknown


NUMERIC = ("count", "opt_count", "seconds")


def checked(fields: list[Field], reason: pl.Expr | None = None, *,
            typed: bool = False) -> tuple[pl.Expr, list[pl.Expr]]:
    """(the skip reason, null for a usable row; the parsed columns) of the raw columns named by ``Field.name``:
    text, or with ``typed`` the NUMERIC kinds already parsed as Float64 (null: missing)."""
    whens: list[tuple[pl.Expr, str]] = []
    cols: list[pl.Expr] = []
    for f in fields:
        c = pl.col(f.name)
        numeric = typed and f.kind in NUMERIC
        x = c if numeric else _number(c)
        if f.kind == "count":
            whens += [(c.is_null() if numeric else _missing(c), f"missing {f.what}"),
                      (_bad_number(x), f"non-numeric {f.what}"), (x < 0, f"negative {f.what}"),
                      (x != x.floor(), f"fractional {f.what}"), (x > MAX_TOKENS, f"{f.what} above {tokens_text()}")]
            cols.append(x.cast(pl.Int64, strict=False).alias(f.name))
        elif f.kind == "opt_count":
            cols.append(pl.when(_is_count(x)).then(x.cast(pl.Int64, strict=False)).alias(f.name))
        elif f.kind == "seconds":
            y = x * f.scale
            cols.append(pl.when(~_bad_number(x) & (y >= 0) & (y <= MAX_CALL_S)).then(y).alias(f.name))
        elif f.kind == "stamp":
            cols.append(_stamp(c, f.scale).alias(f.name))
        else:
            cols.append(pl.when(c != "").then(c).alias(f.name))
    expr = reason if reason is not None else pl.lit(None, pl.String)
    chain = None
    for cond, text in whens:
        chain = (pl.when(cond) if chain is None else chain.when(cond)).then(pl.lit(text))
    if chain is not None:
        expr = pl.coalesce(expr, chain.otherwise(pl.lit(None, pl.String)))
    return expr.alias("reason"), cols


# ---------------------------------------------------------------- sources: raw text columns with line numbers


def csv_source(path: Path, fields: list[Field], header: list[str], *, short_rows: str = "no",
               typed: bool = False) -> pl.LazyFrame:
    """The CSV's columns named by ``fields`` as text (with ``typed``: the NUMERIC kinds as Float64, and a cell
    that is not a number an error), ``line`` and ``reason``; rows whose cells are all blank are dropped, as the
    csv module's readers skip them.  ``short_rows``: ``count`` reads each line's cells again (a second, text scan)
    and gives a row with fewer cells than the header its reason; ``guard`` only marks ``maybe_short`` the rows
    whose last cell is empty (which a short row's is), for the caller to count them in a later pass."""
    numeric = {f.key for f in fields if typed and f.kind in NUMERIC}
    raw = pl.scan_csv(path, infer_schema=False, new_columns=header, raise_if_empty=False, encoding="utf8",
                      truncate_ragged_lines=True,  # extra cells ignored, as the csv module's readers do
                      schema_overrides=dict.fromkeys(numeric, pl.Float64))
    blank = [pl.col(h).is_null() if h in numeric else pl.col(h).is_null() | (pl.col(h).str.strip_chars() == "")
             for h in header]
    parts = [raw.select(*[(pl.col(f.key) if f.key in header else pl.lit(None, pl.String)).alias(f.name)
                          for f in fields], blank=pl.all_horizontal(blank), maybe_short=pl.col(header[-1]).is_null())]
    if short_rows == "count":
        sep = (pl.scan_csv(path, has_header=False, skip_rows=1, separator="\x1f", quote_char=None,
                           new_columns=["text"], schema={"text": pl.String}, raise_if_empty=False)
               .select(cells=pl.col("text").str.count_matches(",", literal=True) + 1))
        parts.append(sep)
    lf = pl.concat(parts, how="horizontal").with_row_index("line", offset=2)
    short = (pl.col("cells") < len(header)) if short_rows == "count" else pl.lit(False)
    lf = lf.filter(~pl.col("blank")).with_columns(
        reason=pl.when(short).then(pl.lit("fewer cells than the header")).otherwise(pl.lit(None, pl.String)))
    return lf if short_rows == "guard" else lf.drop("maybe_short")


_Tree = dict[str, "DType | _Tree"]  # a dotted key's parts as nested keys, its type at the leaf


def _json_schema(keys: Mapping[str, DType]) -> dict[str, DType]:
    """A polars schema reading each dotted key as its type, nested objects as structs."""
    tree: _Tree = {}
    for k, dtype in keys.items():
        node = tree
        parts = k.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise BadInput(f"JSON key {k!r} reads into {p!r}, which another column reads as a value")
        node.setdefault(parts[-1], dtype)

    def conv(t: _Tree) -> dict[str, DType]:
        return {k: pl.Struct(conv(v)) if isinstance(v, dict) else v for k, v in t.items()}

    return conv(tree)


def _json_get(key: str) -> pl.Expr:
    parts = key.split(".")
    e = pl.col(parts[0])
    for p in parts[1:]:
        e = e.struct.field(p)
    return e


def jsonl_source(path: Path, fields: list[Field], *, typed: bool = False) -> pl.LazyFrame:
    """The JSON lines' values at ``fields``' keys as text (with ``typed``: the NUMERIC kinds as Float64, and any
    other JSON value there an error), and ``line`` (the record number; blank lines are skipped)."""
    lf = pl.scan_ndjson(path, schema=_json_schema(
        {f.key: pl.Float64 if typed and f.kind in NUMERIC else pl.String for f in fields}))
    return lf.select(*[_json_get(f.key).alias(f.name) for f in fields]).with_row_index("line", offset=1).with_columns(
        reason=pl.lit(None, pl.String))


def _text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return orjson.dumps(v).decode()


def _path(obj: Mapping[str, Any], key: str) -> Any:
    if key in obj:
        return obj[key]
    cur: Any = obj
    for part in key.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def jsonl_lines(path: Path, fields: list[Field]) -> Iterator[pl.DataFrame]:
    """The careful path: batches of the same columns, a line at a time, bad lines kept with their reason."""
    names = [f.name for f in fields]
    cols: dict[str, list[Any]] = {n: [] for n in ["line", "reason", *names]}
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
                reason = None if isinstance(obj, dict) else "not a JSON object"
            except orjson.JSONDecodeError:
                obj, reason = None, "bad JSON"
            cols["line"].append(i)
            cols["reason"].append(reason)
            for f in fields:
                cols[f.name].append(_text(_path(obj, f.key)) if reason is None else None)
            if len(cols["line"]) >= BATCH_ROWS:
                yield pl.DataFrame(cols, schema={"line": pl.Int64, "reason": pl.String,
                                                 **dict.fromkeys(names, pl.String)})
                cols = {n: [] for n in cols}
    yield pl.DataFrame(cols, schema={"line": pl.Int64, "reason": pl.String, **dict.fromkeys(names, pl.String)})


def csv_rows(path: Path, fields: list[Field], header: list[str]) -> Iterator[pl.DataFrame]:
    """The careful CSV path, for a file the polars passes cannot line up with its lines (a quoted cell that
    spans lines): the csv module's records, batch by batch, a row with fewer cells than the header given its
    reason; ``line``: the line the record ends on, as the csv module counts."""
    names = [f.name for f in fields]
    at = {h: i for i, h in enumerate(header)}  # a repeated column: its last cell, as dict(zip(header, cells))
    schema = {"line": pl.Int64, "reason": pl.String, **dict.fromkeys(names, pl.String)}
    cols: dict[str, list[Any]] = {n: [] for n in schema}
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, MAX_CELL_CHARS))  # a cell of prompt text may pass the csv module's 128 KiB
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh)
            next(reader, None)
            for cells in reader:
                if not any(c.strip() for c in cells):
                    continue
                cols["line"].append(reader.line_num)
                cols["reason"].append("fewer cells than the header" if len(cells) < len(header) else None)
                for f in fields:
                    i = at.get(f.key)
                    cols[f.name].append(cells[i] if i is not None and i < len(cells) else None)
                if len(cols["line"]) >= BATCH_ROWS:
                    yield pl.DataFrame(cols, schema=schema)
                    cols = {n: [] for n in schema}
    except csv.Error as exc:
        raise BadInput(f"{path}: line {reader.line_num}: not CSV the reader can split ({exc})") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not UTF-8 text ({exc.reason}); traffic files are CSV, JSON or JSONL") from None
    finally:
        csv.field_size_limit(limit)
    yield pl.DataFrame(cols, schema=schema)


# ---------------------------------------------------------------- the pass


class _Sink:
    """Usable rows: in memory up to the budget, then in temporary Arrow IPC files."""

    def __init__(self) -> None:
        self.frames: list[pl.DataFrame] = []
        self.size = 0
        self.dir: tempfile.TemporaryDirectory[str] | None = None
        self.files: list[str] = []
        self.budget = memory_budget()

    def add(self, df: pl.DataFrame) -> None:
        if df.height == 0:
            return
        self.frames.append(df)
        self.size += df.estimated_size()
        if self.dir is not None or self.size > self.budget:
            if self.dir is None:
                self.dir = tempfile.TemporaryDirectory(prefix="leverbench-traffic-")
            for f in self.frames:
                name = os.path.join(self.dir.name, f"{len(self.files):06d}.arrow")
                f.write_ipc(name, compression="lz4")
                self.files.append(name)
            self.frames = []

    def frame(self, schema: Mapping[str, Any]) -> pl.LazyFrame:
        if self.dir is not None:
            return pl.scan_ipc(self.files)
        if not self.frames:
            return pl.DataFrame(schema=dict(schema)).lazy()
        return pl.concat(self.frames, rechunk=False).lazy()


@dataclass
class Plan:
    """How one format's rows become calls: its fields, the canonical columns from them, soft notes."""

    fields: list[Field]
    columns: dict[str, pl.Expr]  # canonical name → expression over the checked fields
    soft: dict[str, pl.Expr]  # note → condition, over usable rows, counted
    notes: list[str]
    cached_served: bool = False


class _Retry(Exception):
    """This pass cannot tell what it met: the next one reads the file."""


@dataclass
class Source:
    """One way to read a file: raw columns with ``line`` and ``reason``, as a LazyFrame (``lazy()``, checked
    inside polars' streaming engine) or as ``frames()``; ``typed``: the NUMERIC fields come parsed
    (checked(typed=True)); ``records``: ``line`` counts records, not lines."""

    lazy: Callable[[], pl.LazyFrame] | None = None
    frames: Callable[[], Iterator[pl.DataFrame]] | None = None
    typed: bool = False
    records: bool = False
    guarded: bool = False  # the frame has ``maybe_short``: a row that may be short sends the import to the next pass

    def checked(self, plan: "Plan") -> Iterator[pl.DataFrame]:
        """Batches of ``line``, ``reason`` and the parsed fields (and ``maybe_short``, when guarded)."""
        reason, parsed = checked(plan.fields, pl.col("reason"), typed=self.typed)
        if self.lazy is not None:
            extra = ["maybe_short"] if self.guarded else []
            return iter(self.lazy().select("line", reason, *parsed, *extra).collect_batches())
        assert self.frames is not None
        return (df.lazy().select("line", reason, *parsed).collect() for df in self.frames())


def read(path: Path, fmt: str, plan: Plan, sources: list[Source]) -> TrafficLoad:
    """One pass over the first of ``sources`` that polars can parse: the checked, usable calls and the counts.

    The fast sources come first (typed columns; a cell of another type is an error, and the next source, which
    reads text and names each bad row's reason, takes over), the careful last.  Where a source counts records,
    the first line of each skip reason is looked up again.
    """
    for i, src in enumerate(sources):
        try:
            load = _read(path, fmt, plan, src.checked(plan))
            if src.records and load.first_skipped_line:
                load.first_skipped_line = _record_lines(path, load.first_skipped_line)
            return load
        except (pl.exceptions.PolarsError, _Retry) as exc:
            if i == len(sources) - 1:
                raise BadInput(f"{path}: cannot read as {fmt}: {str(exc).splitlines()[0]}") from None
        except OSError as exc:
            raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None
    raise AssertionError("no source")


def _read(path: Path, fmt: str, plan: Plan, batches: Iterator[pl.DataFrame]) -> TrafficLoad:
    schema = {k: v for k, v in COLUMNS.items() if k in plan.columns}
    skipped: Counter[str] = Counter()
    first: dict[str, int] = {}
    soft: Counter[str] = Counter()
    sink = _Sink()
    used = 0
    t0: float | None = None
    for df in batches:
        if "maybe_short" in df.columns:
            if df.get_column("maybe_short").any():
                raise _Retry("a row whose last cell is empty may have fewer cells than the header")
            df = df.drop("maybe_short")
        bad = df.filter(pl.col("reason").is_not_null()).group_by("reason").agg(n=pl.len(), first=pl.col("line").min())
        for r, n, line in bad.iter_rows():
            skipped[r] += n
            first[r] = min(first.get(r, line), line)
        ok = df.filter(pl.col("reason").is_null()).select(**plan.columns)
        ok = ok.cast(schema)  # type: ignore[arg-type]  # polars' stubs want a Mapping keyed str | Selector | dtype
        if plan.soft:
            for note, n in ok.select(**{k: v.sum() for k, v in plan.soft.items()}).row(0, named=True).items():
                soft[note] += n or 0
        if "arrival" in ok.columns:  # the earliest stamp (a log need not be in time order)
            first_here = ok.get_column("arrival").min()
            if first_here is not None:
                t0 = float(first_here) if t0 is None else min(t0, float(first_here))
        used += ok.height
        sink.add(ok)
    skipped = Counter(dict(sorted(skipped.items(), key=lambda kv: first[kv[0]])))  # as met, like the row readers
    if used == 0:
        raise no_usable_rows(path, fmt, dict(skipped), first)
    frame = sink.frame(schema)
    if t0 is not None:
        frame = frame.with_columns(pl.col("arrival") - t0)
    notes = plan.notes + [f"{n} row(s): {what}" for what, n in sorted(soft.items()) if n]
    return TrafficLoad(path=path, fmt=fmt, skipped=dict(skipped), first_skipped_line=first, notes=notes,
                       cached_served=plan.cached_served, lazy=frame, count=used, spill=sink.dir)


def _record_lines(path: Path, records: dict[str, int]) -> dict[str, int]:
    """Line numbers of the given record numbers (1-based) of a JSON-lines file, whose blank lines are no records."""
    lines = (pl.scan_csv(path, has_header=False, separator="\x1f", quote_char=None, new_columns=["text"],
                         schema={"text": pl.String}).with_row_index("line", offset=1)
             .filter(pl.col("text").str.strip_chars() != "").with_row_index("record", offset=1)
             .filter(pl.col("record").is_in(list(records.values()))).select("record", "line").collect())
    at = dict(lines.iter_rows())
    return {r: int(at.get(n, n)) for r, n in records.items()}


def csv_sources(path: Path, fields: list[Field], header: list[str], *, short_rows: bool = False) -> list[Source]:
    """Typed, then as text: a CSV's ways to be read (a field whose column is absent reads as missing).  With
    ``short_rows``, the first typed pass only guards against rows with fewer cells than the header; a file with
    a row whose last cell is empty is read again, counting every line's cells, and one whose records and lines do
    not line up (a quoted cell spanning lines) by the csv module, record by record."""
    count = "count" if short_rows else "no"
    typed = [Source(lambda: csv_source(path, fields, header, short_rows="guard", typed=True), typed=True,
                    guarded=True)] if short_rows else []
    careful = [Source(frames=lambda: csv_rows(path, fields, header))] if short_rows else []
    return typed + [Source(lambda: csv_source(path, fields, header, short_rows=count, typed=True), typed=True),
                    Source(lambda: csv_source(path, fields, header, short_rows=count)), *careful]


def jsonl_sources(path: Path, fields: list[Field]) -> list[Source]:
    """Typed, as text, then line by line (bad JSON, values of any shape): a JSON-lines file's ways to be read."""
    return [Source(lambda: jsonl_source(path, fields, typed=True), typed=True, records=True),
            Source(lambda: jsonl_source(path, fields), records=True),
            Source(frames=lambda: jsonl_lines(path, fields))]
