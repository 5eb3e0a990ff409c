"""The summary's sections, declared: each a :class:`.base.Product` that names what it needs and builds its
typed row and its own warnings; :data:`PRODUCTS` lists them all, in the order their warnings are shown.

A module per concern: :mod:`.comparisons` (the knobs, the pairs of arms, the repeats' cache states, the tool
schemas, drift), :mod:`.engagement` (the server metrics, whether levers engaged), :mod:`.load` (the load
stages), :mod:`.rates` (the phase regression, the probes, the rate fit), :mod:`.cells` (cells, multipliers and
their reasons, variants, equal work, verdicts, cost), :mod:`.projection` (the rates and the projected turn),
:mod:`.capacity` (capacity at an SLO, the levers under load), :mod:`.run` (the run, its arms, engines, GPUs,
the replay's fidelity, the levers' headline).  :func:`.base.build_all` runs them (``analysis/summary.py``).
Adding a section: a product in the module of its concern, listed here, and the renderer that shows it.
"""

from __future__ import annotations

from typing import Any

from .base import Product
from .capacity import CAPACITY, LOAD_LEVERS
from .cells import (
    ADAPTIVE,
    AT_EQUAL_WORK,
    CELL_WARNINGS,
    CELLS,
    COST,
    EQUAL_WORK,
    EQUAL_WORK_ROWS,
    MEASURED,
    MULTIPLIERS,
    PROMPT_DISCIPLINE,
    REASONS,
    TOTALS,
    VARIANT_CELLS,
    VERDICT_ROWS,
    VERDICTS,
)
from .comparisons import (
    COMMON,
    COMPARISONS,
    DRIFT,
    DRIFT_COMMON,
    DRIFT_PAIRS,
    KNOBS,
    PAIR_DRIFT,
    REPEAT_CHECK,
    REPEATS,
    TOOLS,
    TOOLS_CHECK,
    UNKNOWN_KNOBS,
)
from .engagement import ENGAGED, OWN_METRICS, PROBE_METRICS, SERVER_METRICS
from .load import LOAD, LOAD_CALLS, LOAD_CURVES, LOAD_VIEW, LOAD_WARNINGS
from .projection import ARM_RATES, PROJECTION, RATES
from .rates import DECOMPOSITION, PROBES, RATE_MODELS, SERVER, TIME_SHARES
from .run import ARMS, BASELINE, CASES, ENGINES, FAILED, GPU, LEVERS, REASONING, RECORDED, RUN, TOLERANCES

#: Every product, in the order the summary's warnings come (:func:`.base.order` keeps it wherever the needs
#: allow); those that warn are the ones whose place matters.
PRODUCTS: tuple[Product[Any], ...] = (
    KNOBS, COMPARISONS, REPEAT_CHECK, TOOLS_CHECK, DRIFT, PAIR_DRIFT, UNKNOWN_KNOBS, SERVER_METRICS, OWN_METRICS,
    PROBE_METRICS, ENGAGED, COMMON, CELLS, TOTALS, REASONS, MEASURED, LOAD_VIEW, LOAD, RATE_MODELS,
    DECOMPOSITION, PROBES, SERVER, CELL_WARNINGS, VARIANT_CELLS, LOAD_WARNINGS, EQUAL_WORK, AT_EQUAL_WORK,
    EQUAL_WORK_ROWS, MULTIPLIERS,
    ARM_RATES, PROJECTION, FAILED, ENGINES, GPU, VERDICTS, COST, LOAD_CALLS, CAPACITY, LOAD_LEVERS, RECORDED,
    # no warnings: anywhere their needs allow
    RUN, BASELINE, ARMS, LEVERS, VERDICT_ROWS, ADAPTIVE, CASES, PROMPT_DISCIPLINE, REASONING, REPEATS, TOOLS,
    TIME_SHARES, RATES, LOAD_CURVES, DRIFT_PAIRS, DRIFT_COMMON, TOLERANCES,
)

#: The order of the sections in ``summary.json`` (a section not named here comes after these)
SECTION_ORDER = (
    "schema", "run", "baseline", "arms", "levers", "verdicts", "adaptive", "cases", "cells", "totals", "multipliers",
    "variant_cells", "prompt_discipline", "reasoning", "repeats", "tools", "decomposition", "probes", "server",
    "time_shares", "engaged", "projection", "rates", "rate_models", "load", "load_curves", "load_levers",
    "capacity", "server_metrics", "cost", "drift", "drift_pairs", "drift_common", "equal_work", "engines", "gpu",
    "tolerances", "warnings", "warning_items", "recorded",
)
