"""Load metrics from the ledger (issue 5).  Placeholder until the load analysis lands."""

from __future__ import annotations

from typing import Any


def load_summary(ledger: Any) -> list[dict[str, Any]]:
    """Per (arm, stage): throughput, percentiles, goodput; [] when the run had no load stages."""
    return []
