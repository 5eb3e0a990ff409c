"""What load tells: each arm's capacity at its SLO, and the levers measured under load (per level, the
crossover)."""

from __future__ import annotations

from ..experiment.capacity import capacity_rows
from ..experiment.under_load import load_levers
from .base import Product
from .cells import REASONS
from .comparisons import COMPARISONS, KNOBS
from .load import LOAD, LOAD_CALLS

CAPACITY = Product("capacity", (LOAD, LOAD_CALLS), lambda i: capacity_rows(
    i[LOAD], {a: i.ds.conditions(a) for a in i.ds.arms}, i.gpu_hour_usd, calls=i[LOAD_CALLS]), key="capacity")
LOAD_LEVERS = Product("load_levers", (COMPARISONS, LOAD, LOAD_CALLS, REASONS, CAPACITY, KNOBS), lambda i: load_levers(
    i[COMPARISONS], i[LOAD], i[LOAD_CALLS], i.ds.settings.volume_tolerance_total, i[REASONS], i[CAPACITY],
    i[KNOBS][0]), key="load_levers")
