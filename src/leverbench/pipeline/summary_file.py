"""A ``summary.json`` read back, checked against ``leverbench.summary/1`` before anything uses it.

``analyze --rates`` and ``whatif --rates`` take a run's rates from its ledger when
the run directory has one, else from its ``summary.json`` (:func:`read_summary`).  The
check is the summary's own schema (:mod:`leverbench.schema`, the typed rows analysis builds and
``leverbench schema summary`` prints): the sections a reader needs
(:data:`~leverbench.schema.check.READER_NEEDS`) must be there, every other section is checked where present,
every row strictly (no unknown key, a string is no number) with the bounds a reader computes with
(:mod:`leverbench.bounds`: finite, the rate models' coefficients non-negative, slowdowns positive,
concurrencies and slots at least 1).  Here, besides, what no row can say of one field: the rows that name an
arm name one of the arms, numeric knobs in range, spans in order, a decode whose tokens cost something.  A file
that fails is bad input (exit code 2) naming the file, where it is wrong and what is wrong.  A summary of a
newer schema is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..analysis.base.bounds import MAX_CACHE_TOKENS, MAX_GPU_HOUR_USD, MAX_GPUS, MAX_SLOTS, MAX_TOKENS
from ..analysis.base.knobs import UNKNOWN
from ..errors import BadInput
from ..ledger.records import SUMMARY_SCHEMA
from ..schema.check import Problem, summary_problems

if TYPE_CHECKING:
    from ..json_types import JSONObject
    from ..schema.check_rows import DriftRow
    from ..schema.lever_rows import EngagedRow
    from ..schema.rate_rows import RateModelRow, RateRow, Span
    from ..schema.summary import Summary

SUMMARY_NAME, SUMMARY_VERSION = SUMMARY_SCHEMA.rsplit("/", 1)
MAX_SUMMARY_BYTES = 1 << 28  # a summary.json read whole (a run's summary is kilobytes to a few megabytes)

# ---------------------------------------------------------------- what the typed rows cannot say of one field


#: The arms' conditions and knobs a reader takes as numbers (GPUs and price for the cost, slots for the
#: simulation and the cache's capacity), each with its range: (lowest, highest, lowest excluded, whole).  A knob
#: may be ``"(unknown)"`` (another arm's endpoint stated it, this one's did not): :func:`read_summary` drops it.
_NUMERIC_KNOBS: dict[str, tuple[float, float, bool, bool]] = {
    "gpus": (0, MAX_GPUS, True, False), "gpu_hour_usd": (0, MAX_GPU_HOUR_USD, False, False),
    "slots": (1, MAX_SLOTS, False, True), "kv_capacity_tokens": (0, MAX_CACHE_TOKENS, False, False),
    "num_gpu_blocks": (0, MAX_CACHE_TOKENS, False, True), "block_size": (1, MAX_TOKENS, False, True),
    "context_length": (1, MAX_CACHE_TOKENS, False, True),  # a context, not a call: engines serve 10,485,760 (Llama 4)
}


def _n(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _knob_problem(v: object, lo: float, hi: float, lo_open: bool, whole: bool) -> str | None:
    kind = "a whole number" if whole else "a finite number"
    want = f"{kind} {'above' if lo_open else 'from'} {_n(lo)} {'and at most' if lo_open else 'to'} {_n(hi)}"
    if v == UNKNOWN:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"should be a number, {want} (got {v!r:.40})"
    ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi and (not whole or v == int(v))
    return None if ok else f"{v!r:.40} is out of range ({want})"


def _span_problem(where: str, r: Span | None) -> list[Problem]:
    return [Problem(where, f"[{r[0]:g}, {r[1]:g}] ends below where it starts")] if r and r[0] > r[1] else []


def _across_rows(data: Summary) -> list[Problem]:
    """What the schema's rows cannot check one field at a time: the arms named once, the baseline and every
    row's arm one of them, the numeric knobs in range, spans in order, a decode whose tokens cost something, a
    batch slowdown per concurrency."""
    out: list[Problem] = []
    names = [a["name"] for a in data["arms"]]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        out.append(Problem("arms", f"{', '.join(map(repr, twice))} named twice"))
    listed = ", ".join(map(repr, names))
    if data["baseline"] not in names:
        out.append(Problem("baseline", f"{data['baseline']!r} is none of the arms ({listed})"))
    armed: list[tuple[str, Sequence[RateRow | RateModelRow | EngagedRow | DriftRow]]] = [
        ("rates", data.get("rates") or []), ("rate_models", data.get("rate_models") or []),
        ("engaged", data.get("engaged") or []), ("drift", data.get("drift") or [])]
    for key, rows in armed:
        for i, row in enumerate(rows):
            if row["arm"] not in names:
                out.append(Problem(f"{key}[{i}].arm", f"{row['arm']!r} is none of the arms ({listed})"))
    for i, arm in enumerate(data["arms"]):
        for part, given in (("conditions", arm.get("conditions")), ("knobs", arm.get("knobs"))):
            for k, rng in _NUMERIC_KNOBS.items():
                v = (given or {}).get(k)
                p = None if v is None else _knob_problem(v, *rng)
                if p:
                    out.append(Problem(f"arms[{i}].{part}.{k}", p))
    for i, r in enumerate(data["rates"]):
        out += _span_problem(f"rates[{i}].prefill_input_range", r.get("prefill_input_range"))
    for i, m in enumerate(data.get("rate_models") or []):
        pre, d, b = m.get("prefill"), m.get("decode"), m.get("batch")
        spans = (("prefill.range_uncached", pre.get("range_uncached") if pre else None),
                 ("prefill.range_cached", pre.get("range_cached") if pre else None),
                 ("decode.range_context", d.get("range_context") if d else None))
        for name, span in spans:
            out += _span_problem(f"rate_models[{i}].{name}", span)
        if d and d["d0_s_per_token"] == 0 and d.get("d1_s_per_token_per_ctx", 0) == 0:
            out.append(Problem(f"rate_models[{i}].decode", "d0_s_per_token and d1_s_per_token_per_ctx are both 0: "
                                                            "an answer's tokens would cost nothing"))
        if not b:
            continue
        for name, values in (("slowdown", b.get("slowdown")), ("tpot_s", b.get("tpot_s")),
                             ("single_stream_tpot_s", b.get("single_stream_tpot_s"))):
            if values is not None and len(values) != len(b["concurrency"]):
                out.append(Problem(f"rate_models[{i}].batch.{name}",
                                   f"{len(values)} values for {len(b['concurrency'])} concurrencies"))
    return out


def _schema_problem(v: object) -> str | None:
    if not isinstance(v, str):
        return f"not a leverbench summary schema: {v!r:.60} (expected {SUMMARY_SCHEMA})"
    name, _, version = v.rpartition("/")
    if name != SUMMARY_NAME or not version.isdigit():
        return f"not a leverbench summary schema: {v!r:.60} (expected {SUMMARY_SCHEMA})"
    if int(version) > int(SUMMARY_VERSION):
        return (f"summary schema version {version} is newer than this leverbench understands ({SUMMARY_VERSION}); "
                "upgrade leverbench to read it")
    return None


def check_summary(data: object, path: Path | str, *, whole: bool = False) -> Summary:
    """*data* (a parsed summary.json) if it fits ``leverbench.summary/1`` (:mod:`leverbench.schema`, the rows
    analysis builds: the sections a reader needs required, every other one checked where present; *whole*:
    every section required), else :class:`BadInput` naming *path*, where and what is wrong (the first three
    problems).  A numeric knob ``"(unknown)"`` is accepted and left out of what is returned."""
    if not isinstance(data, dict):
        raise BadInput(f"{path}: not a leverbench summary (a JSON object with schema {SUMMARY_SCHEMA!r})")
    bad = _schema_problem(data.get("schema"))
    problems = [Problem("schema", bad)] if bad else summary_problems(data, whole=whole)
    # checked when no problem is found: the sections and keys a reader computes with are the schema's typed rows
    # (in a reader's view a section or a key it does not compute with may be absent: its readers .get them)
    summary = cast("Summary", data)
    if not problems:
        problems = _across_rows(summary)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise BadInput(f"{path}: not a valid {SUMMARY_SCHEMA}: {'; '.join(map(str, problems[:3]))}{more}")
    for arm in summary["arms"]:
        if isinstance(arm.get("conditions"), dict):
            arm["conditions"] = _known_knobs(arm["conditions"])
        if isinstance(arm.get("knobs"), dict):
            arm["knobs"] = _known_knobs(arm["knobs"])
    return summary


def _known_knobs(knobs: JSONObject) -> JSONObject:
    """*knobs* less the numeric ones another arm's endpoint stated and this one's did not (``"(unknown)"``)."""
    return {k: v for k, v in knobs.items() if not (k in _NUMERIC_KNOBS and v == UNKNOWN)}


def read_summary(path: Path | str, *, whole: bool = False) -> Summary:
    """Read and check a ``summary.json`` (or the one in a run directory); *whole*: :func:`check_summary`'s."""
    path = Path(path)
    if path.is_dir():
        path = path / "summary.json"
    try:
        if path.exists() and not path.is_file():
            raise BadInput(f"{path}: not a regular file (expected a run directory or its summary.json)")
        if path.exists() and path.stat().st_size > MAX_SUMMARY_BYTES:
            raise BadInput(f"{path}: {path.stat().st_size:,} bytes, more than a summary.json holds "
                           f"({MAX_SUMMARY_BYTES:,} at most); is this a run's summary?")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no summary here (expected a run directory or its summary.json)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"{path}: not JSON ({exc})") from None
    except RecursionError:
        raise BadInput(f"{path}: not a leverbench summary (JSON nested too deep to read)") from None
    return check_summary(data, path, whole=whole)
