"""``leverbench``: a leverbench ledger (``ledger.jsonl`` or its run directory) as traffic.

Records of kind ``call`` with prompt_tokens, completion_tokens, cached_tokens,
latency_s, ttft_s; the arm stands in for the model.  Probes and sentinels are
not traffic.  Read by the ledger's own reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import Format, Sniff
from .records import Rows, Skip, TrafficCall, TrafficLoad, count, opt_count, opt_seconds, opt_stamp, opt_str


def load(path: Path, *, salvage: bool = False, **_: Any) -> TrafficLoad:
    from ...ledger.reader import read_ledger  # noqa: PLC0415 (the ledger reader only when a ledger is read)

    ledger = read_ledger(path, salvage=salvage)  # raises LedgerError (bad input) for a foreign or broken ledger
    rows = Rows()
    for i, r in enumerate(ledger.records, start=2):
        if r.get("kind") != "call":
            continue
        try:
            if r.get("error") is not None:
                raise Skip("failed call")
            inp = count(r.get("prompt_tokens"), "prompt_tokens")
            out = count(r.get("completion_tokens"), "completion_tokens")
        except Skip as s:
            rows.skip(s.reason, i)
            continue
        cached = opt_count(r.get("cached_tokens"))
        rows.add(TrafficCall(input_tokens=inp, output_tokens=out,
                             cached_tokens=min(cached, inp) if cached is not None else None,
                             latency_s=opt_seconds(r.get("latency_s")), ttft_s=opt_seconds(r.get("ttft_s")),
                             model=opt_str(r.get("arm")), session=opt_str(r.get("turn_id")),
                             round=opt_count(r.get("step"))), opt_stamp(r.get("t_send")))
    return rows.load(ledger.path, "leverbench", cached_served=True,
                     notes=["model = the run's arm; probes and sentinels are not traffic and are left out",
                            *ledger.warnings])


def detect(s: Sniff) -> bool:
    return (s.obj is not None and s.obj.get("kind") == "run"
            and str(s.obj.get("schema", "")).startswith("leverbench.ledger/"))


FORMAT = Format("leverbench", detect, load, directory="ledger.jsonl")
