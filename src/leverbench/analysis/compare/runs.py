"""One run as a comparison across runs reads it: per (arm, case) its counted turns, what each case sent first, each
arm's drift sentinels and whether the arm drifted within the run.

**What a case sent** (:func:`case_prints`): the SHA-256 of the chat messages of each turn's first call (the call
records' ``input_sha256`` at step 0), the same on every repeat and every arm of a run that resets its caches between
turns, so two runs whose case sent the same first request hold the same hashes, whatever the case is called.  The
later calls of a turn carry the model's answers and differ wherever an answer did, so they identify nothing.  A
run that salts its turns (``cache_between_turns`` met by a salt: a tag unique to the run, case and repeat put before
the first message, :mod:`leverbench.runner.cache_state`) sends a different first request every turn; there the case
is identified by its definition in the ledger's header (its prompt, system prompt, documents by name, steps, tools,
sampling), which cannot see a document edited in place (said where it is used).  Every case has its definition's
print, so a case of a run that resets its cache is matched with one of a run that salts by their definitions.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...json_types import JSONValue
from ...ledger.reader import Ledger
from ...ledger.rows import RunHeaderRow
from ...schema.compare_rows import RunInfo
from ..base.dataset import Dataset, dataset
from ..experiment.drift import family_confidence, sentinel_prefill_speed, sentinel_rate, series, trend

DRIFT_FAMILY = 0.99  # the drift trends of two runs hold together at this confidence (:func:`_drifted`)
#: The keys of a case's definition that do not change what it sends (its name, where it came from).
_NOT_SENT = ("name", "variants", "variant_of", "recorded_from", "recorded_turn", "recorded_skipped")


@dataclass
class Cell:
    """One (arm, case) of a run: its counted turns' times, outputs and failures (the turn's failed calls, a failed
    turn counting at least one)."""

    turn_s: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)  # the turns' rows in the run's TurnTable
    output: list[float] = field(default_factory=list)
    failed: int = 0


@dataclass(frozen=True)
class Sentinel:
    """A successful drift sentinel of an arm: its decode speed, its time to the first token (llama.cpp's
    ``prompt_ms`` where sent: the prefill and the step that samples the first token), its prompt's tokens, and what
    identifies its call (the forced length and the prompt's characters: the prompt itself carries a fresh tag)."""

    decode: float | None
    first_s: float | None
    tokens: int | None
    chars: int | None
    prompt_tokens: int | None = None


@dataclass
class RunView:
    """A run, read for comparing: :class:`~leverbench.schema.compare_rows.RunInfo` and the parts above."""

    path: str
    ds: Dataset
    info: RunInfo
    cells: dict[tuple[str, str], Cell]
    prints: dict[str, tuple[str | None, str]]  # case → (its prompt hashes' print or None, its definition's print)
    sentinels: dict[str, list[Sentinel]]
    drifted: dict[str, str]  # arm → its own drift within the run, in words

    @property
    def tolerance_cell(self) -> float:
        return float(self.ds.settings.volume_tolerance_cell)

    @property
    def drift_tolerance(self) -> float:
        return float(self.ds.settings.drift_tolerance)


def run_view(path: str | Path, ledger: Ledger[RunHeaderRow]) -> RunView:
    """*ledger* (read from *path*) as a :class:`RunView`."""
    ds = dataset(ledger)
    h = ledger.header
    info: RunInfo = {"path": str(path), "experiment_name": ds.settings.name, "run_id": h.get("run_id"),
                     "started_at": h.get("started_at"), "tool_version": h.get("tool_version"),
                     "schema": h["schema"], "arms": list(ds.arms), "cases": list(ds.cases),
                     "warnings": list(ledger.warnings)}
    return RunView(str(path), ds, info, _cells(ds), case_prints(ledger, ds), _sentinels(ds), _drifted(ds))


def _cells(ds: Dataset) -> dict[tuple[str, str], Cell]:
    T, C = ds.turn, ds.call
    failed_calls = np.bincount(np.maximum(C.turn, 0), weights=(~C.ok & ~C.retried & (C.turn >= 0)).astype(float),
                               minlength=len(T))[:len(T)]
    out: dict[tuple[str, str], Cell] = {}
    for i in range(len(T)):
        key = (ds.arm_names[int(T.arm[i])], ds.case_names[int(T.case[i])])
        cell = out.setdefault(key, Cell())
        companions = float(T.companion_failed[i]) if math.isfinite(T.companion_failed[i]) else 0.0
        failed = int(failed_calls[i] + companions)
        if not T.ok[i]:
            failed = max(failed, 1)
        cell.failed += failed
        if T.ok[i] and math.isfinite(T.turn_s[i]):
            cell.turn_s.append(float(T.turn_s[i]))
            cell.rows.append(i)
            if math.isfinite(T.output_tokens[i]):
                cell.output.append(float(T.output_tokens[i]))
    return out


def _digest(value: JSONValue) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def case_prints(ledger: Ledger[RunHeaderRow], ds: Dataset) -> dict[str, tuple[str | None, str]]:
    """Per case its two prints (module docstring): the digest of its sorted first-call hashes (None where a turn of it
    was salted or no first call carries a hash), and the digest of its definition."""
    salted = {t.get("case") for t in ledger.of_kind("turn") if "salt" in str(t.get("cache", {}).get("method"))}
    sent: dict[str, set[str]] = {}
    for c in ledger.of_kind("call"):
        if int(c.get("step") or 0) == 0 and c.get("input_sha256") and c.get("case") is not None:
            sent.setdefault(str(c["case"]), set()).add(str(c["input_sha256"]))
    out: dict[str, tuple[str | None, str]] = {}
    for case in ds.config.get("cases", []):
        name = case["name"]
        hashed = _digest(list[JSONValue](sorted(sent[name]))) if name in sent and name not in salted else None
        definition = {k: v for k, v in dict(case).items() if k not in _NOT_SENT}
        out[name] = (hashed, _digest(definition))  # type: ignore[arg-type]  # (the header's JSON)
    return out


def _sentinels(ds: Dataset) -> dict[str, list[Sentinel]]:
    out: dict[str, list[Sentinel]] = {}
    for s in ds.sentinels:
        if s.get("error") is not None:
            continue
        tokens, prompt = s.get("probe_tokens"), s.get("prompt_tokens")
        speed = sentinel_prefill_speed(s)
        out.setdefault(s["arm"], []).append(Sentinel(sentinel_rate(s), 1.0 / speed if speed else None,
                                                     tokens if isinstance(tokens, int) else None,
                                                     s.get("input_chars"), prompt if isinstance(prompt, int) else None))
    return out


def _drifted(ds: Dataset) -> dict[str, str]:
    """Arm → its own drift within the run in words, for the arms whose trend over the run was detected (significant
    and beyond the drift tolerance: :mod:`..experiment.drift`'s rule), each trend at 1 − 1 %/m, m the decode and
    prefill trends of every arm of two runs (Bonferroni: a drift refuses every cell of its arm, so noise alone must
    seldom do it)."""
    tol = ds.settings.drift_tolerance
    confidence = family_confidence(4 * max(len(ds.arms), 1), DRIFT_FAMILY)
    out = {}
    for arm, pts in series(ds).items():
        x = [p.x for p in pts]
        trends = [(phase, trend(x, [getattr(p, phase) for p in pts], confidence)) for phase in ("decode", "prefill")]
        said = [f"{phase} {tr.words()}" for phase, tr in trends if tr.detected(tol)]
        if said:
            out[arm] = "; ".join(said) + f" over the run, tolerance {tol:.0%}"
    return out
