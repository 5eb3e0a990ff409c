"""Hand-made ledgers for analysis tests: records shaped exactly like the runner's."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from leverbench.ledger.reader import Ledger
from leverbench.ledger.records import LEDGER_SCHEMA


def header(arms: dict[str, dict[str, Any]], cases: list[str], *, baseline: str | None = None, repeats: int = 3,
           **experiment: Any) -> dict[str, Any]:
    baseline = baseline or next(iter(arms))
    exp = {"name": "hand-made", "repeats": repeats, "order": "interleaved", "baseline": baseline,
           "volume_tolerance_cell": 0.20, "volume_tolerance_total": 0.05, "drift_tolerance": 0.10,
           "engaged_acceptance_min": 0.2, **experiment}
    return {
        "kind": "run", "schema": LEDGER_SCHEMA, "tool_version": "test", "run_id": "test",
        "started_at": "2026-01-01T00:00:00+00:00",
        "host": {"cpu": "test", "cores": 2}, "experiment_file": "x.toml",
        "config": {"experiment": exp, "arms": [{"name": a} for a in arms], "cases": [{"name": c} for c in cases]},
        "arms": {a: {"role": "baseline" if a == baseline else "treatment", "conditions": c, "discovered": {}}
                 for a, c in arms.items()},
    }


def call(arm: str, case: str, repeat: int, *, latency: float, out: int, prompt: int = 100, ttft: float | None = None,
         step: int = 0, turn_id: str = "", kind: str = "call", error: dict | None = None, cached: int = 0,
         timings: dict | None = None, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "arm": arm, "case": case, "repeat": repeat, "step": step, "turn_id": turn_id,
            "t_send": 0.0, "ttft_s": ttft if ttft is not None else latency * 0.1, "latency_s": latency,
            "chunk_t": [], "chunk_chars": [], "status": 200 if error is None else 500, "error": error,
            "prompt_tokens": prompt, "completion_tokens": out, "cached_tokens": cached, "reasoning_tokens": None,
            "token_source": "usage", "finish_reason": "stop", "timings": timings, **extra}


def turn(arm: str, case: str, repeat: int, turn_s: float, out: int, *, prompt: int = 100,
         error: dict | None = None, calls: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A turn record plus its call records (one call by default)."""
    tid = uuid.uuid4().hex[:12]
    calls = calls or [call(arm, case, repeat, latency=turn_s, out=out, prompt=prompt, error=error)]
    for c in calls:
        c["turn_id"] = tid
    failed = sum(1 for c in calls if c["error"] is not None)
    rec = {"kind": "turn", "arm": arm, "case": case, "repeat": repeat, "turn_id": tid, "t_start": 0.0,
           "turn_s": turn_s, "calls": len(calls), "planned_calls": len(calls), "failed_calls": failed,
           "output_tokens": sum(c["completion_tokens"] or 0 for c in calls),
           "prompt_tokens": sum(c["prompt_tokens"] or 0 for c in calls),
           "error": None if not failed else {"class": calls[0]["error"]["class"], "message": "failed"}}
    return [*calls, rec]


def timed(arm: str, case: str, r: int, *, prompt: int, cached: int, out: int, prefill_tps: float, decode_tps: float,
          kind: str = "call", **kw: Any) -> dict[str, Any]:
    """A call timed as the rate model reads it: the first token ends prefill, the other out − 1 decode (with
    llama.cpp's timings saying the same)."""
    prefill, decode = (prompt - cached) / prefill_tps, (out - 1) / decode_tps
    return call(arm, case, r, kind=kind, prompt=prompt, cached=cached, out=out, ttft=prefill, latency=prefill + decode,
                timings={"prompt_n": prompt - cached, "prompt_ms": prefill * 1000, "predicted_n": out,
                         "predicted_ms": decode * 1000, "cache_n": cached}, **kw)


def probes_for(head: dict[str, Any], arms: dict[str, dict[str, Any]], case: str = "c", prefill_tps: float = 1000.0,
               decode_tps: float = 50.0) -> list[dict[str, Any]]:
    """Probes at 32 and 256 tokens on every arm, timed exactly (1000 prompt tokens; cached on an arm with a
    prefix cache after the first), so that each arm's rate model is fitted and passes its cross-check."""
    head["config"]["probes"] = {"output_tokens": [32, 256], "repeats": 2, "case": case, "tolerance": 0.05}
    return [timed(a, case, r, kind="probe", prompt=1000, cached=990 if arms[a].get("prefix_cache") and r else 0,
                  out=n, prefill_tps=prefill_tps, decode_tps=decode_tps, probe_tokens=n)
            for r in (0, 1) for n in (32, 256) for a in arms]


def ledger(head: dict[str, Any], records: list[dict[str, Any]]) -> Ledger:
    return Ledger(path=Path("mem"), header=head, records=records)


def write(path: Path, head: dict[str, Any], records: list[dict[str, Any]]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "ledger.jsonl", "w") as fh:
        for r in [head, *records]:
            fh.write(json.dumps(r) + "\n")
    return path


def warned(summary: dict[str, Any], kind: str, arm: str | None = None, case: str | None = None) -> list[dict[str, Any]]:
    """The summary's warning items of *kind* (a :class:`~leverbench.schema.warning_kinds.WarningKind`), for *arm*
    and *case* when given: tests check which warnings fired by kind, not by wording."""
    return [w for w in summary["warning_items"] if w["kind"] == kind and arm in (None, w["arm"])
            and case in (None, w["case"])]
