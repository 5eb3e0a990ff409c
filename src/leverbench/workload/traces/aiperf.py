"""``aiperf``: AIPerf's ``profile_export.jsonl`` (or its artifact directory).

Per request ``metadata`` (request_start_ns, x_correlation_id, turn_index),
``metrics`` each ``{"value", "unit"}`` (input_sequence_length,
output_sequence_length, request_latency, time_to_first_token), ``error``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .base import Format, Sniff
from .files import jsonl, read_text
from .records import Rows, Skip, TrafficCall, TrafficLoad, count, opt_count, opt_seconds, opt_stamp, opt_str

TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}


def _metric(metrics: Mapping[str, Any], name: str) -> tuple[Any, str | None]:
    m = metrics.get(name)
    if isinstance(m, dict):
        return m.get("value"), m.get("unit")
    return m, None


def _seconds(metrics: Mapping[str, Any], name: str) -> float | None:
    v, unit = _metric(metrics, name)
    scale = TIME_UNITS.get(str(unit or "ms").lower())
    return opt_seconds(v, scale) if scale is not None else None


def load(path: Path, **_: Any) -> TrafficLoad:
    rows = Rows()
    for line, obj in jsonl(read_text(path), rows):
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        metrics = obj.get("metrics") if isinstance(obj.get("metrics"), dict) else None
        try:
            if obj.get("error") or meta.get("was_cancelled"):
                raise Skip("failed request")
            if metrics is None:
                raise Skip("no metrics")
            inp = count(_metric(metrics, "input_sequence_length")[0], "input_sequence_length")
            out_v = _metric(metrics, "output_sequence_length")[0]
            if out_v is None:
                out_v = _metric(metrics, "output_token_count")[0]
            out = count(out_v, "output_sequence_length")
        except Skip as s:
            rows.skip(s.reason, line)
            continue
        rows.add(TrafficCall(input_tokens=inp, output_tokens=out, latency_s=_seconds(metrics, "request_latency"),
                             ttft_s=_seconds(metrics, "time_to_first_token"),
                             session=opt_str(meta.get("x_correlation_id") or meta.get("conversation_id")),
                             round=opt_count(meta.get("turn_index"))),
                 opt_stamp(meta.get("request_start_ns"), 1e-9))
    return rows.load(path, "aiperf")


def detect(s: Sniff) -> bool:
    return s.obj is not None and {"metadata", "metrics"} <= set(s.obj)


FORMAT = Format("aiperf", detect, load, directory="profile_export.jsonl")
