"""The rate model's, load's and the server's sections of the summary."""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from . import STRICT


class RateSections(TypedDict):
    """The summary's sections about rates, phases, load and the server's own account."""

    __pydantic_config__ = STRICT

    decomposition: Any
    probes: list[Any]
    server: list[Any]
    time_shares: Any
    projection: Any
    rates: Any
    rate_models: list[Any]
    load: list[Any]
    load_curves: Any
    server_metrics: list[Any]
