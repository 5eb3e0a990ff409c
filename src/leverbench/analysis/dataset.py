"""The ledger as analysis sees it: which records count.

A call counts when it belongs to a finished turn (its ``turn_id`` has a
``turn`` record) or is a probe or sentinel.  Calls of a turn that an
interrupted run cut off are not counted (the resumed run re-ran that turn), and
the number left out is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..ledger.reader import Ledger


@dataclass
class Dataset:
    header: dict[str, Any]
    turns: list[dict[str, Any]]
    calls: list[dict[str, Any]]          # kind "call", counted
    probes: list[dict[str, Any]]
    sentinels: list[dict[str, Any]]
    metrics: list[dict[str, Any]]
    arms: list[str]
    cases: list[str]                      # the engine comparison's cases (variants excluded)
    variants: dict[str, str]              # variant case name -> the case it varies
    baseline: str
    config: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def conditions(self, arm: str) -> dict[str, Any]:
        return dict(self.header["arms"].get(arm, {}).get("conditions", {}))

    def role(self, arm: str) -> str:
        return self.header["arms"].get(arm, {}).get("role", "")


def dataset(ledger: Ledger) -> Dataset:
    h = ledger.header
    cfg = h["config"]
    turns = list(ledger.of_kind("turn"))
    # a turn re-run after a resume supersedes nothing: a unit is written once; keep the first of duplicates
    seen: set[tuple] = set()
    unique_turns = []
    for t in turns:
        k = (t["arm"], t["case"], t["repeat"])
        if k not in seen:
            seen.add(k)
            unique_turns.append(t)
    turn_ids = {t["turn_id"] for t in unique_turns}
    all_calls = list(ledger.of_kind("call"))
    calls = [c for c in all_calls if c.get("turn_id") in turn_ids]
    warnings = list(ledger.warnings)
    orphans = len(all_calls) - len(calls)
    if orphans:
        warnings.append(f"{orphans} call(s) of turns cut off by an interrupted run are in the ledger but not counted "
                        "(their turns were run again on resume)")
    arms = [a["name"] for a in cfg.get("arms", [])]
    cases = [c["name"] for c in cfg.get("cases", []) if not c.get("variant_of")]
    variants = {c["name"]: c["variant_of"] for c in cfg.get("cases", []) if c.get("variant_of")}
    return Dataset(
        header=h, turns=unique_turns, calls=calls,
        probes=list(ledger.of_kind("probe")), sentinels=list(ledger.of_kind("sentinel")),
        metrics=list(ledger.of_kind("metrics")), arms=arms, cases=cases, variants=variants,
        baseline=cfg["experiment"]["baseline"], config=cfg, warnings=warnings,
    )
