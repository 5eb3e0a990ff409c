"""Trace importers: turn a traffic file into uniform per-call records.

Every importer returns a :class:`TrafficLoad`: the usable calls as
:class:`TrafficCall` records, and per reason the number of rows it skipped.
A bad row never stops an import; only a file with no usable row at all, an
unknown format or an unreadable file raises :class:`~leverbench.errors.BadInput`
(exit code 2), naming the file, the line where known, and what to do.

Formats (``detect_format`` picks one; ``load_traffic(path, fmt)`` names one):

``mooncake``
    JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``,
    ``hash_ids`` (one id per 512-token block of the prompt; equal ids mean an
    equal prefix).  cached_tokens = 512 × the length of the longest leading
    run of this request's ids that all occurred in some earlier request,
    capped at input_length − 1: what an unbounded prefix cache that never
    evicts could have reused (an upper bound).
``azure``
    CSV (Azure LLM inference trace, Splitwise): ``TIMESTAMP`` (datetime),
    ``ContextTokens``, ``GeneratedTokens``.  No cached-token information.
``tracelab-replay``
    CSV (TraceLab session runner): ``session_id`` (or ``id``), ``round_idx``,
    ``prefix_len``, ``input_len``, ``output_len``, ``tool_wait_after_ms`` and
    optionally ``arrival_time`` (ms, the session's start).  ``input_len`` is the
    *new* tokens appended this round, not the whole prompt: TraceLab's runner
    builds the prompt from ``prefix_len + input_len`` tokens, and in
    ``multi_session_large.csv`` every round's prefix_len equals the previous
    round's prefix_len + input_len + output_len.  So input_tokens = prefix_len +
    input_len and cached_tokens = prefix_len (the context carried over).  Only
    a session's first round has a known arrival; later rounds are sent when
    the previous answer and the tool wait are over (closed loop), so their
    arrival_s is None.
``tracelab-round``
    JSONL (TraceLab round trace of coding agents): ``input_tokens_total``
    (prefix included), ``prefix_tokens`` (cached), ``output_tokens`` (as the
    provider counted them; OpenAI-style counts include reasoning tokens),
    ``model``, ``session_id``, ``round_index``, ``timing_events``, ``tools``.
    latency_s ≈ last assistant event − last input event (log timestamps, not
    a client measurement); tool_wait_s = last tool result − first tool call.
``vllm-bench``
    JSON written by ``vllm bench serve --save-result``: per-request arrays
    ``input_lens``, ``output_lens``, ``ttfts`` (s), ``itls`` (lists, s),
    ``errors``, optionally ``start_times`` and ``e2els``/``latencies`` (s;
    vLLM 0.32 writes ``latencies``, and ``queue_times``: the client's own wait
    for ``--max-concurrency``, not used).
    latency_s = e2els[i] if present, else ttfts[i] + Σ itls[i].
``aiperf``
    AIPerf ``profile_export.jsonl``: per request ``metadata``
    (request_start_ns, x_correlation_id, turn_index), ``metrics`` each
    ``{"value", "unit"}`` (input_sequence_length, output_sequence_length,
    request_latency, time_to_first_token), ``error``.
``leverbench``
    A leverbench ledger (``ledger.jsonl`` or a run directory): records of kind
    ``call`` with prompt_tokens, completion_tokens, cached_tokens, latency_s,
    ttft_s; the arm stands in for the model.
``generic``
    CSV or JSONL of per-call records; columns named with ``columns``
    (``input``, ``output``, ``cached``, ``latency``, ``ttft``, ``model``,
    ``arrival``, ``session``); JSONL keys may be dotted paths
    (``usage.prompt_tokens``).  Without names, common ones are tried (see
    ``GENERIC_DEFAULTS``).  Times are seconds, or milliseconds when the column
    name ends in ``_ms`` or the spec says ``COL:ms``.

The importers know nothing of the analysis; trace replay reuses them.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..errors import BadInput

BLOCK_TOKENS = 512
FORMATS = ("mooncake", "azure", "tracelab-replay", "tracelab-round", "vllm-bench", "aiperf", "leverbench", "generic")

GENERIC_DEFAULTS: dict[str, tuple[str, ...]] = {
    "input": ("input_tokens", "prompt_tokens", "input_len", "input_length", "prompt_len", "num_prompt_tokens",
              "isl", "usage.prompt_tokens", "usage.input_tokens"),
    "output": ("output_tokens", "completion_tokens", "output_len", "output_length", "generated_tokens",
               "num_output_tokens", "osl", "usage.completion_tokens", "usage.output_tokens"),
    "cached": ("cached_tokens", "cached_prompt_tokens", "cache_read_tokens", "cache_read_input_tokens",
               "prefix_tokens", "prefix_len", "usage.prompt_tokens_details.cached_tokens"),
    "latency": ("latency_s", "latency", "e2e_s", "e2e_latency_s", "duration_s", "request_latency_s",
                "latency_ms", "e2e_ms", "duration_ms", "request_latency_ms"),
    "ttft": ("ttft_s", "ttft", "time_to_first_token_s", "ttft_ms", "time_to_first_token_ms"),
    "model": ("model", "model_name", "endpoint", "arm"),
    "arrival": ("arrival_s", "timestamp", "arrival_time", "start_time", "t_send", "created"),
    "session": ("session", "session_id", "conversation_id"),
}


@dataclass(frozen=True, slots=True)
class TrafficCall:
    """One model call of recorded traffic, whatever file it came from.

    arrival_s is seconds after the file's first usable row; cached_tokens is
    the part of the prompt known to be reusable (or reused) from a prefix
    cache; None means "not recorded".
    """

    input_tokens: int
    output_tokens: int
    arrival_s: float | None = None
    cached_tokens: int | None = None
    latency_s: float | None = None
    ttft_s: float | None = None
    model: str | None = None
    session: str | None = None
    round: int | None = None
    prefix_blocks: tuple[int, ...] | None = None
    tool_wait_s: float | None = None


@dataclass
class TrafficLoad:
    """What an importer returns: the usable calls and why other rows were skipped.

    ``cached_served`` says what cached_tokens mean: True when the serving stack
    reported them as actually read from its cache (so they were not prefilled),
    False when they are only known to be shareable (the trace's prefix ids).
    """

    path: Path
    fmt: str
    calls: list[TrafficCall]
    skipped: dict[str, int] = field(default_factory=dict)
    first_skipped_line: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cached_served: bool = False

    @property
    def used(self) -> int:
        return len(self.calls)

    @property
    def rows(self) -> int:
        return self.used + sum(self.skipped.values())


class _Skip(Exception):
    """A row that cannot be used; ``reason`` is what the user sees, counted."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------- small parsers


def _num(v: Any, what: str) -> float:
    """A finite number from a JSON value or CSV cell, else _Skip naming ``what``."""
    if v is None or (isinstance(v, str) and not v.strip()):
        raise _Skip(f"missing {what}")
    if isinstance(v, bool):
        raise _Skip(f"non-numeric {what}")
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise _Skip(f"non-numeric {what}") from None
    if not math.isfinite(x):
        raise _Skip(f"non-numeric {what}")
    return x


def _count(v: Any, what: str) -> int:
    """A token count: a non-negative whole number."""
    x = _num(v, what)
    if x < 0:
        raise _Skip(f"negative {what}")
    if x != int(x):
        raise _Skip(f"fractional {what}")
    return int(x)


def _opt_seconds(v: Any, scale: float = 1.0) -> float | None:
    """An optional non-negative duration × scale; unusable values become None."""
    try:
        x = _num(v, "time") * scale
    except _Skip:
        return None
    return x if x >= 0 else None


def _opt_count(v: Any) -> int | None:
    try:
        return _count(v, "count")
    except _Skip:
        return None


def _opt_str(v: Any) -> str | None:
    return None if v is None or v == "" else str(v)


def _timestamp(v: Any) -> float | None:
    """Epoch seconds from a number (s) or an ISO 8601 datetime string, else None."""
    if v is None or v == "":
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    s = str(v).strip()
    try:
        return float(s)
    except ValueError:
        pass
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    head, dot, frac = s.partition(".")
    if dot:  # fromisoformat takes at most 6 fractional digits before 3.12 (Azure has 7)
        digits = len(frac) - len(frac.lstrip("0123456789"))
        s = head + "." + frac[:min(digits, 6)] + frac[digits:]
    try:
        t = dt.datetime.fromisoformat(s)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()


def _path_get(obj: Mapping[str, Any], key: str) -> Any:
    """obj[key], or a dotted path into nested objects (``usage.prompt_tokens``)."""
    if key in obj:
        return obj[key]
    cur: Any = obj
    for part in key.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


class _Rows:
    """Collects calls and skip reasons while an importer walks a file."""

    def __init__(self) -> None:
        self.calls: list[TrafficCall] = []
        self.skipped: Counter[str] = Counter()
        self.first_line: dict[str, int] = {}
        self.soft: Counter[str] = Counter()  # usable rows with a field we had to drop

    def skip(self, reason: str, line: int) -> None:
        self.skipped[reason] += 1
        self.first_line.setdefault(reason, line)

    def load(self, path: Path, fmt: str, notes: Iterable[str] = (), cached_served: bool = False) -> TrafficLoad:
        all_notes = list(notes) + [f"{n} row(s): {what}" for what, n in sorted(self.soft.items())]
        load = TrafficLoad(path=path, fmt=fmt, calls=self.calls, skipped=dict(self.skipped),
                           first_skipped_line=dict(self.first_line), notes=all_notes, cached_served=cached_served)
        if not load.calls:
            reasons = "; ".join(f"{r}: {n} (first at line {self.first_line[r]})" for r, n in self.skipped.items())
            raise BadInput(f"{path}: no usable rows as format {fmt!r}" + (f" ({reasons})" if reasons else " (empty)")
                           + f"; check the file, or name its format with --format ({', '.join(FORMATS)})"
                           + (" and its columns with --columns" if fmt == "generic" else ""))
        return load


def _relative(calls: list[TrafficCall], stamps: list[float | None]) -> list[TrafficCall]:
    """Replace arrival_s by seconds after the first known stamp."""
    known = [s for s in stamps if s is not None]
    if not known:
        return calls
    t0 = known[0]
    return [_with(c, arrival_s=None if s is None else s - t0) for c, s in zip(calls, stamps)]


def _with(c: TrafficCall, **kw: Any) -> TrafficCall:
    return replace(c, **kw)


# ---------------------------------------------------------------- file access


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory; give a traffic file (or a leverbench run directory)") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not UTF-8 text (byte {exc.start}); traffic files are CSV, JSON or JSONL") from None


def _jsonl(text: str, rows: _Rows) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each JSON-object line; bad lines are counted as skipped."""
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            rows.skip("bad JSON", i)
            continue
        if not isinstance(obj, dict):
            rows.skip("not a JSON object", i)
            continue
        yield i, obj


def _csv(path: Path, text: str, required: Iterable[str] = ()) -> tuple[list[str], Iterator[tuple[int, dict[str, str]]]]:
    """Header and (line number, row) pairs; raises BadInput when a required column is missing."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise BadInput(f"{path}: empty file") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise BadInput(f"{path}: line 1: missing column(s) {', '.join(missing)} (header: {', '.join(header)}); "
                       "is this the right --format?")

    def rows() -> Iterator[tuple[int, dict[str, str]]]:
        for cells in reader:
            if not any(c.strip() for c in cells):
                continue
            yield reader.line_num, dict(zip(header, cells)) | ({"__short__": "1"} if len(cells) < len(header) else {})

    return header, rows()


# ---------------------------------------------------------------- detection


def detect_format(path: str | Path) -> str:
    """Name the format of ``path`` from its name, header or first record.

    A directory is a leverbench run (ledger.jsonl) or an AIPerf artifact
    directory (profile_export.jsonl).  CSV headers and JSON keys decide the
    rest; anything with per-call columns that is none of the known traces is
    ``generic``.  Raises BadInput when nothing fits.
    """
    path = Path(path)
    if path.is_dir():
        if (path / "ledger.jsonl").is_file():
            return "leverbench"
        if (path / "profile_export.jsonl").is_file():
            return "aiperf"
        raise BadInput(f"{path}: a directory without ledger.jsonl or profile_export.jsonl; give the traffic file itself")
    text = _read_text(path)
    return _detect_text(path, text)


def _detect_text(path: Path, text: str) -> str:
    first = next((l for l in text.splitlines() if l.strip()), "")
    if not first:
        raise BadInput(f"{path}: empty file")
    stripped = first.lstrip()
    if stripped.startswith("{") or stripped.startswith("["):
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            try:
                obj = json.loads(text)  # one indented JSON document
            except json.JSONDecodeError:
                raise BadInput(f"{path}: line 1 is not valid JSON; is this a JSONL trace? (or name --format)") from None
        return _detect_json(path, obj)
    header = {h.strip() for h in next(csv.reader([first]))}
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= header:
        return "azure"
    if {"prefix_len", "input_len", "output_len"} <= header and header & {"session_id", "id"}:
        return "tracelab-replay"
    if len(header) >= 2:
        return "generic"
    raise BadInput(f"{path}: line 1: not a known trace header ({first[:80]!r}); name the format with --format "
                   f"({', '.join(FORMATS)})")


def _detect_json(path: Path, obj: Any) -> str:
    if not isinstance(obj, dict):
        raise BadInput(f"{path}: line 1 is a JSON {type(obj).__name__}, not an object; name the format with --format")
    keys = set(obj)
    if obj.get("kind") == "run" and str(obj.get("schema", "")).startswith("leverbench.ledger/"):
        return "leverbench"
    if "input_lens" in keys and "output_lens" in keys:
        return "vllm-bench"
    if {"input_length", "output_length"} <= keys:
        return "mooncake"
    if "input_tokens_total" in keys and ("prefix_tokens" in keys or "timing_events" in keys):
        return "tracelab-round"
    if {"metadata", "metrics"} <= keys:
        return "aiperf"
    return "generic"


# ---------------------------------------------------------------- importers


def _load_mooncake(path: Path, text: str, **_: Any) -> TrafficLoad:
    rows = _Rows()
    seen: set[int] = set()
    stamps: list[float | None] = []
    for line, obj in _jsonl(text, rows):
        try:
            inp = _count(obj.get("input_length"), "input_length")
            out = _count(obj.get("output_length"), "output_length")
            ids = obj.get("hash_ids")
            if ids is not None and (not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids)):
                raise _Skip("hash_ids not a list of integers")
        except _Skip as s:
            rows.skip(s.reason, line)
            continue
        blocks = tuple(ids) if ids is not None else None
        cached = shared_prefix_tokens(blocks, seen, inp) if blocks is not None else None
        if blocks is not None:
            seen.update(blocks)
        ts = _opt_seconds(obj.get("timestamp"), 1e-3)
        if ts is None:
            rows.soft["no usable timestamp (arrival unknown)"] += 1
        stamps.append(ts)
        rows.calls.append(TrafficCall(input_tokens=inp, output_tokens=out, cached_tokens=cached, prefix_blocks=blocks))
    rows.calls = _relative(rows.calls, stamps)
    return rows.load(path, "mooncake", notes=[
        f"cached tokens from hash_ids ({BLOCK_TOKENS}-token blocks): the leading blocks already seen in an earlier "
        "request, as an unbounded prefix cache that never evicts would hold them (an upper bound)"])


def shared_prefix_tokens(blocks: tuple[int, ...], seen: set[int] | frozenset[int], input_tokens: int) -> int:
    """Tokens of a prompt an unbounded prefix cache could reuse, from Mooncake block ids.

    k = the length of the longest leading run of ``blocks`` whose ids are all in
    ``seen`` (the ids of every earlier request); cached = min(512 × k,
    input_tokens − 1): at least one token is always prefilled, as engines need
    the last position's logits.
    """
    k = 0
    for b in blocks:
        if b not in seen:
            break
        k += 1
    return max(0, min(BLOCK_TOKENS * k, input_tokens - 1))


def _load_azure(path: Path, text: str, **_: Any) -> TrafficLoad:
    rows = _Rows()
    _, it = _csv(path, text, required=("TIMESTAMP", "ContextTokens", "GeneratedTokens"))
    stamps: list[float | None] = []
    for line, r in it:
        try:
            inp = _count(r.get("ContextTokens"), "ContextTokens")
            out = _count(r.get("GeneratedTokens"), "GeneratedTokens")
        except _Skip as s:
            rows.skip(s.reason, line)
            continue
        ts = _timestamp(r.get("TIMESTAMP"))
        if ts is None:
            rows.soft["unreadable TIMESTAMP (arrival unknown)"] += 1
        stamps.append(ts)
        rows.calls.append(TrafficCall(input_tokens=inp, output_tokens=out))
    rows.calls = _relative(rows.calls, stamps)
    return rows.load(path, "azure", notes=["no prefix or cached-token information in this trace"])


def _load_tracelab_replay(path: Path, text: str, **_: Any) -> TrafficLoad:
    rows = _Rows()
    header, it = _csv(path, text, required=("prefix_len", "input_len", "output_len"))
    sid_col = "session_id" if "session_id" in header else "id"
    if sid_col not in header:
        raise BadInput(f"{path}: line 1: no session_id (or id) column; is this a TraceLab replay CSV?")
    stamps: list[float | None] = []
    for line, r in it:
        try:
            prefix = _count(r.get("prefix_len"), "prefix_len")
            new = _count(r.get("input_len"), "input_len")
            out = _count(r.get("output_len"), "output_len")
        except _Skip as s:
            rows.skip(s.reason, line)
            continue
        rnd = _opt_count(r.get("round_idx"))
        arrival = r.get("arrival_time")
        # only a session's first round has a known send time (the session's arrival)
        stamps.append((_opt_seconds(arrival or 0, 1e-3) if rnd in (0, None) else None))
        rows.calls.append(TrafficCall(input_tokens=prefix + new, output_tokens=out, cached_tokens=prefix,
                                      session=_opt_str(r.get(sid_col)), round=rnd,
                                      tool_wait_s=_opt_seconds(r.get("tool_wait_after_ms"), 1e-3)))
    rows.calls = _relative(rows.calls, stamps)
    return rows.load(path, "tracelab-replay", notes=[
        "input = prefix_len + input_len (input_len is the tokens appended this round); cached = prefix_len; "
        "rounds after a session's first have no fixed arrival (closed loop)"])


_INPUT_EVENTS = {"user_message", "tool_result"}


def _round_timing(events: Any) -> tuple[float | None, float | None]:
    """(start, latency) of a TraceLab round from its timing_events.

    start = the last input event (user message or tool result) — the request
    cannot go out before it; end = the last later event (reasoning, text,
    tool_call, usage_report); latency = end − start.
    """
    if not isinstance(events, list):
        return None, None
    stamped = [(e.get("event_type"), _timestamp(e.get("timestamp"))) for e in events if isinstance(e, dict)]
    stamped = [(k, t) for k, t in stamped if t is not None]
    starts = [t for k, t in stamped if k in _INPUT_EVENTS]
    if not starts:
        return (stamped[0][1] if stamped else None), None
    start = max(starts)
    ends = [t for k, t in stamped if k not in _INPUT_EVENTS and t >= start]
    return start, (max(ends) - start if ends else None)


def _tool_wait(tools: Any) -> float | None:
    if not isinstance(tools, list):
        return None
    emitted = [_timestamp(t.get("emitted_at")) for t in tools if isinstance(t, dict)]
    results = [_timestamp(t.get("result_at")) for t in tools if isinstance(t, dict)]
    emitted = [t for t in emitted if t is not None]
    results = [t for t in results if t is not None]
    if not emitted or not results:
        return None
    return max(0.0, max(results) - min(emitted))


def _load_tracelab_round(path: Path, text: str, **_: Any) -> TrafficLoad:
    rows = _Rows()
    stamps: list[float | None] = []
    for line, obj in _jsonl(text, rows):
        try:
            inp = _count(obj.get("input_tokens_total"), "input_tokens_total")
            out = _count(obj.get("output_tokens"), "output_tokens")
        except _Skip as s:
            rows.skip(s.reason, line)
            continue
        cached = _opt_count(obj.get("prefix_tokens"))
        start, latency = _round_timing(obj.get("timing_events"))
        if latency is None:
            rows.soft["no timing events to estimate latency"] += 1
        stamps.append(start)
        rows.calls.append(TrafficCall(input_tokens=inp, output_tokens=out,
                                      cached_tokens=min(cached, inp) if cached is not None else None,
                                      latency_s=latency, model=_opt_str(obj.get("model")),
                                      session=_opt_str(obj.get("session_id")), round=_opt_count(obj.get("round_index")),
                                      tool_wait_s=_tool_wait(obj.get("tools"))))
    rows.calls = _relative(rows.calls, stamps)
    return rows.load(path, "tracelab-round", cached_served=True, notes=[
        "cached = prefix_tokens (what the provider read from its cache); latency ≈ last assistant event − last "
        "input event in the agent's log (not a client measurement)"])


def _load_vllm_bench(path: Path, text: str, **_: Any) -> TrafficLoad:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg}); "
                       "expected the file `vllm bench serve --save-result` wrote") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("input_lens"), list) or not isinstance(obj.get("output_lens"), list):
        raise BadInput(f"{path}: no per-request arrays input_lens/output_lens; "
                       "run `vllm bench serve` with --save-result (and without --save-detailed off)")
    rows = _Rows()
    ins, outs = obj["input_lens"], obj["output_lens"]
    n = min(len(ins), len(outs))
    if len(ins) != len(outs):
        rows.skipped["arrays of unequal length"] = abs(len(ins) - len(outs))
        rows.first_line["arrays of unequal length"] = 1

    def arr(key: str) -> list[Any] | None:
        v = obj.get(key)
        return v if isinstance(v, list) and len(v) >= n else None

    ttfts, itls, starts = arr("ttfts"), arr("itls"), arr("start_times")
    e2e_key = "e2els" if arr("e2els") else "latencies" if arr("latencies") else None
    e2els = arr(e2e_key) if e2e_key else None
    errors = obj.get("errors") if isinstance(obj.get("errors"), list) and len(obj["errors"]) == n else None
    stamps: list[float | None] = []
    for i in range(n):
        try:
            if errors is not None and errors[i]:
                raise _Skip("failed request")
            inp = _count(ins[i], "input length")
            out = _count(outs[i], "output length")
        except _Skip as s:
            rows.skip(s.reason, 1)
            continue
        ttft = _opt_seconds(ttfts[i]) if ttfts else None
        if e2els:
            latency = _opt_seconds(e2els[i])
        elif ttft is not None and itls and isinstance(itls[i], list):
            gaps = [_opt_seconds(g) for g in itls[i]]
            latency = ttft + sum(g for g in gaps if g is not None)
        else:
            latency = None
        stamps.append(_opt_seconds(starts[i]) if starts else None)
        rows.calls.append(TrafficCall(input_tokens=inp, output_tokens=out, ttft_s=ttft, latency_s=latency,
                                      model=_opt_str(obj.get("model_id"))))
    rows.calls = _relative(rows.calls, stamps)
    notes = ["latency = ttft + Σ inter-token latencies" if not e2els else f"latency = {e2e_key} (s)"]
    if obj.get("max_concurrency") not in (None, 1) or obj.get("request_rate") not in (None, 1):
        notes.append(f"measured at max_concurrency={obj.get('max_concurrency')}, request_rate={obj.get('request_rate')}")
    return rows.load(path, "vllm-bench", notes=notes)


_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}


def _metric(metrics: Mapping[str, Any], name: str) -> tuple[Any, str | None]:
    m = metrics.get(name)
    if isinstance(m, dict):
        return m.get("value"), m.get("unit")
    return m, None


def _aiperf_seconds(metrics: Mapping[str, Any], name: str) -> float | None:
    v, unit = _metric(metrics, name)
    scale = _TIME_UNITS.get(str(unit or "ms").lower())
    return _opt_seconds(v, scale) if scale is not None else None


def _load_aiperf(path: Path, text: str, **_: Any) -> TrafficLoad:
    rows = _Rows()
    stamps: list[float | None] = []
    for line, obj in _jsonl(text, rows):
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        metrics = obj.get("metrics") if isinstance(obj.get("metrics"), dict) else None
        try:
            if obj.get("error") or meta.get("was_cancelled"):
                raise _Skip("failed request")
            if metrics is None:
                raise _Skip("no metrics")
            inp = _count(_metric(metrics, "input_sequence_length")[0], "input_sequence_length")
            out_v = _metric(metrics, "output_sequence_length")[0]
            if out_v is None:
                out_v = _metric(metrics, "output_token_count")[0]
            out = _count(out_v, "output_sequence_length")
        except _Skip as s:
            rows.skip(s.reason, line)
            continue
        start = meta.get("request_start_ns")
        stamps.append(_opt_seconds(start, 1e-9))
        rows.calls.append(TrafficCall(input_tokens=inp, output_tokens=out,
                                      latency_s=_aiperf_seconds(metrics, "request_latency"),
                                      ttft_s=_aiperf_seconds(metrics, "time_to_first_token"),
                                      session=_opt_str(meta.get("x_correlation_id") or meta.get("conversation_id")),
                                      round=_opt_count(meta.get("turn_index"))))
    rows.calls = _relative(rows.calls, stamps)
    return rows.load(path, "aiperf")


def _load_leverbench(path: Path, text: str | None = None, *, salvage: bool = False, **_: Any) -> TrafficLoad:
    from ..ledger.reader import read_ledger  # noqa: PLC0415

    ledger = read_ledger(path, salvage=salvage)  # raises LedgerError (bad input) for a foreign or broken ledger
    rows = _Rows()
    stamps: list[float | None] = []
    for i, r in enumerate(ledger.records, start=2):
        if r.get("kind") != "call":
            continue
        try:
            if r.get("error") is not None:
                raise _Skip("failed call")
            inp = _count(r.get("prompt_tokens"), "prompt_tokens")
            out = _count(r.get("completion_tokens"), "completion_tokens")
        except _Skip as s:
            rows.skip(s.reason, i)
            continue
        cached = _opt_count(r.get("cached_tokens"))
        stamps.append(_opt_seconds(r.get("t_send")))
        rows.calls.append(TrafficCall(input_tokens=inp, output_tokens=out,
                                      cached_tokens=min(cached, inp) if cached is not None else None,
                                      latency_s=_opt_seconds(r.get("latency_s")), ttft_s=_opt_seconds(r.get("ttft_s")),
                                      model=_opt_str(r.get("arm")), session=_opt_str(r.get("turn_id")),
                                      round=_opt_count(r.get("step"))))
    rows.calls = _relative(rows.calls, stamps)
    return rows.load(ledger.path, "leverbench", cached_served=True,
                     notes=["model = the run's arm; probes and sentinels are not traffic and are left out",
                            *ledger.warnings])


def parse_columns(spec: str | Mapping[str, str] | None) -> dict[str, str]:
    """``input=COL,output=COL,...`` into {role: column}; raises BadInput on unknown roles."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        items = list(spec.items())
    else:
        items = []
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            role, eq, col = part.partition("=")
            if not eq or not col.strip():
                raise BadInput(f"--columns: {part!r} is not ROLE=COLUMN (roles: {', '.join(GENERIC_DEFAULTS)})")
            items.append((role.strip(), col.strip()))
    out = {}
    for role, col in items:
        if role not in GENERIC_DEFAULTS:
            raise BadInput(f"--columns: unknown role {role!r} (roles: {', '.join(GENERIC_DEFAULTS)})")
        out[role] = col
    return out


def _time_column(col: str) -> tuple[str, float]:
    """(key, scale to seconds): ``COL:ms`` or a name ending in _ms means milliseconds."""
    key, colon, unit = col.rpartition(":")
    if colon and unit in _TIME_UNITS:
        return key, _TIME_UNITS[unit]
    return col, (1e-3 if col.endswith("_ms") else 1.0)


def _load_generic(path: Path, text: str, columns: Mapping[str, str] | None = None, **_: Any) -> TrafficLoad:
    rows = _Rows()
    first = next((l for l in text.splitlines() if l.strip()), "").lstrip()
    if first.startswith("{"):
        records: Iterable[tuple[int, Mapping[str, Any]]] = _jsonl(text, rows)
        sample_keys: set[str] | None = None
        try:
            first_obj = json.loads(first)
            sample_keys = _flat_keys(first_obj) if isinstance(first_obj, dict) else None
        except json.JSONDecodeError:
            pass
    else:
        header, records = _csv(path, text)
        sample_keys = set(header)
    chosen = _choose_columns(path, sample_keys or set(), parse_columns(columns))
    get: Callable[[Mapping[str, Any], str], Any] = _path_get
    stamps: list[float | None] = []
    lat_key, lat_scale = _time_column(chosen["latency"]) if "latency" in chosen else (None, 1.0)
    ttft_key, ttft_scale = _time_column(chosen["ttft"]) if "ttft" in chosen else (None, 1.0)
    arr_key, arr_scale = _time_column(chosen["arrival"]) if "arrival" in chosen else (None, 1.0)
    for line, r in records:
        try:
            if r.get("__short__"):
                raise _Skip("fewer cells than the header")
            inp = _count(get(r, chosen["input"]), f"input ({chosen['input']})")
            out = _count(get(r, chosen["output"]), f"output ({chosen['output']})")
        except _Skip as s:
            rows.skip(s.reason, line)
            continue
        cached = _opt_count(get(r, chosen["cached"])) if "cached" in chosen else None
        stamps.append(_arrival(get(r, arr_key), arr_scale) if arr_key else None)
        rows.calls.append(TrafficCall(
            input_tokens=inp, output_tokens=out, cached_tokens=min(cached, inp) if cached is not None else None,
            latency_s=_opt_seconds(get(r, lat_key), lat_scale) if lat_key else None,
            ttft_s=_opt_seconds(get(r, ttft_key), ttft_scale) if ttft_key else None,
            model=_opt_str(get(r, chosen["model"])) if "model" in chosen else None,
            session=_opt_str(get(r, chosen["session"])) if "session" in chosen else None))
    rows.calls = _relative(rows.calls, stamps)
    used = ", ".join(f"{role}={col}" for role, col in chosen.items())
    return rows.load(path, "generic", cached_served=True, notes=[f"columns: {used}"])


def _arrival(raw: Any, scale: float) -> float | None:
    """Seconds from a number (× scale: a column in ms) or from an ISO 8601 datetime."""
    try:
        return _num(raw, "arrival") * scale
    except _Skip:
        return _timestamp(raw)


def _flat_keys(obj: Mapping[str, Any], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for k, v in obj.items():
        keys.add(prefix + k)
        if isinstance(v, Mapping):
            keys |= _flat_keys(v, prefix + k + ".")
    return keys


def _choose_columns(path: Path, keys: set[str], named: dict[str, str]) -> dict[str, str]:
    """Named columns first, then the first default name present in ``keys``."""
    chosen: dict[str, str] = {}
    for role, defaults in GENERIC_DEFAULTS.items():
        if role in named:
            chosen[role] = named[role]
            continue
        hit = next((d for d in defaults if d in keys), None)
        if hit is not None:
            chosen[role] = hit
    for role in ("input", "output"):
        if role not in chosen:
            raise BadInput(f"{path}: line 1: no {role}-token column among {', '.join(sorted(keys)) or '(none)'}; "
                           f"name it with --columns {role}=COLUMN")
    return chosen


_LOADERS: dict[str, Callable[..., TrafficLoad]] = {
    "mooncake": _load_mooncake,
    "azure": _load_azure,
    "tracelab-replay": _load_tracelab_replay,
    "tracelab-round": _load_tracelab_round,
    "vllm-bench": _load_vllm_bench,
    "aiperf": _load_aiperf,
    "leverbench": _load_leverbench,
    "generic": _load_generic,
}


def load_traffic(path: str | Path, fmt: str | None = None, *, columns: str | Mapping[str, str] | None = None,
                 salvage: bool = False) -> TrafficLoad:
    """Import ``path`` (format ``fmt``, or detected) into a :class:`TrafficLoad`.

    ``columns`` (generic format only) names the columns: ``"input=COL,output=COL"``
    or a mapping.  *salvage* (a leverbench ledger only): read past its bad lines
    (see :func:`~leverbench.ledger.reader.read_ledger`).  Raises BadInput for an
    unknown format, an unreadable file or one without a usable row.
    """
    path = Path(path)
    if fmt is not None and fmt not in _LOADERS:
        raise BadInput(f"unknown traffic format {fmt!r}; known: {', '.join(FORMATS)}")
    if path.is_dir():
        fmt = fmt or detect_format(path)
        if fmt == "aiperf":
            path = path / "profile_export.jsonl"
        elif fmt != "leverbench":
            raise BadInput(f"{path}: is a directory; format {fmt!r} reads a file")
    if fmt == "leverbench":
        return _load_leverbench(path, salvage=salvage)
    text = _read_text(path)
    fmt = fmt or _detect_text(path, text)
    if columns and fmt != "generic":
        raise BadInput(f"--columns applies to --format generic only (this file reads as {fmt!r})")
    return _LOADERS[fmt](path, text, columns=columns, salvage=salvage)
