"""``vllm-bench``: the JSON that ``vllm bench serve --save-result`` writes (one document).

Per-request arrays ``input_lens``, ``output_lens``, ``ttfts`` (s), ``itls``
(lists, s), ``errors``, optionally ``start_times`` and ``e2els``/``latencies``
(s; vLLM 0.32 writes ``latencies``, and ``queue_times``: the client's own wait
for ``--max-concurrency``, not used).  latency_s = e2els[i] if present, else
ttfts[i] + Σ itls[i].
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...errors import BadInput
from ...json_types import JSONObject
from .base import Format, Sniff
from .files import loads, read_text
from .records import Rows, Skip, TrafficCall, TrafficLoad, count, opt_seconds, opt_stamp, opt_str


def _read(path: Path) -> JSONObject:
    """The file ``vllm bench serve --save-result`` wrote (its JSON, the per-request arrays checked to be lists)."""
    try:
        obj = loads(path, read_text(path))
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg}); "
                       "expected the file `vllm bench serve --save-result` wrote") from None
    if (not isinstance(obj, dict) or not isinstance(obj.get("input_lens"), list)
            or not isinstance(obj.get("output_lens"), list)):
        raise BadInput(f"{path}: no per-request arrays input_lens/output_lens; "
                       "run `vllm bench serve` with --save-result (and without --save-detailed off)")
    return obj


def _latency(e2els: list[Any] | None, ttft: float | None, itls: list[Any] | None, i: int) -> float | None:
    if e2els:
        return opt_seconds(e2els[i])
    if ttft is not None and itls and isinstance(itls[i], list):
        gaps = [opt_seconds(g) for g in itls[i]]
        return opt_seconds(ttft + sum(g for g in gaps if g is not None))
    return None


def load(path: Path, **_: Any) -> TrafficLoad:
    obj = _read(path)
    rows = Rows()
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
    for i in range(n):
        try:
            if errors is not None and errors[i]:
                raise Skip("failed request")
            inp = count(ins[i], "input length")
            out = count(outs[i], "output length")
        except Skip as s:
            rows.skip(s.reason, 1)
            continue
        ttft = opt_seconds(ttfts[i]) if ttfts else None
        rows.add(TrafficCall(input_tokens=inp, output_tokens=out, ttft_s=ttft, latency_s=_latency(e2els, ttft, itls, i),
                             model=opt_str(obj.get("model_id"))), opt_stamp(starts[i]) if starts else None)
    notes = ["latency = ttft + Σ inter-token latencies" if not e2els else f"latency = {e2e_key} (s)"]
    if obj.get("max_concurrency") not in (None, 1) or obj.get("request_rate") not in (None, 1):
        notes.append(f"measured at max_concurrency={obj.get('max_concurrency')}, "
                     f"request_rate={obj.get('request_rate')}")
    return rows.load(path, "vllm-bench", notes=notes)


def detect(s: Sniff) -> bool:
    return s.obj is not None and "input_lens" in s.obj and "output_lens" in s.obj


FORMAT = Format("vllm-bench", detect, load)
