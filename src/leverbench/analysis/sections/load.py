"""The load stages: per (arm, stage) their figures, warnings and curves, and the calls of each level."""

from __future__ import annotations

from ...ledger.reader import Ledger
from ...ledger.records import KINDS
from ...ledger.rows import RunHeaderRow
from ..load.levels import LevelCalls, level_calls
from ..load.stages import load_summary, load_warnings, sweep_curves
from .base import Inputs, Product


def _load_view(i: Inputs) -> Ledger[RunHeaderRow]:
    """The ledger without its turns and their calls (the bulk of a large one, which the reader may hold only as
    columns), for :func:`load_summary`: it reads the load stages' own records (kind ``load``) and metrics
    scrapes."""
    ledger = i.ledger
    return Ledger(path=ledger.path, header=ledger.header, warnings=ledger.warnings,
                  records=list(ledger.of_kind(*(k for k in KINDS if k not in ("call", "turn")))))


LOAD_VIEW = Product("load_view", (), _load_view)
LOAD = Product("load", (LOAD_VIEW,), lambda i: load_summary(i[LOAD_VIEW]), key="load")
LOAD_CURVES = Product("load_curves", (LOAD,), lambda i: sweep_curves(i[LOAD]), key="load_curves")


def _load_warnings(i: Inputs) -> None:
    i.warn(*load_warnings(i[LOAD]))


#: warnings only: the stages' own
LOAD_WARNINGS = Product("load_warnings", (LOAD,), _load_warnings)
#: per (arm, stage), the calls of the level
def _load_calls(i: Inputs) -> dict[tuple[str, str], LevelCalls]:
    view = i[LOAD_VIEW]
    return level_calls(view.of_kind("load")) if i[LOAD] else {}


LOAD_CALLS = Product("load_calls", (LOAD, LOAD_VIEW), _load_calls)
