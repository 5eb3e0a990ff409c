"""The JSON a request carries: strict (RFC 8259), checked once before a run starts and again at the wire.

Python's ``json`` writes ``Infinity``, ``-Infinity`` and ``NaN`` for non-finite floats, which no
JSON parser need accept: a server would answer 400 to every call, or worse read something else.  The
experiment's request fields (an arm's ``request``, a case's ``temperature`` and tool schemas) are
checked by :func:`check_request_fields` before anything starts (a :class:`~leverbench.errors.ConfigError`
naming the key); every body the client sends is written by :func:`dumps` (the session's serializer), which
refuses one all the same (a :class:`~leverbench.errors.BadInput` naming the field).
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..config import LoadedExperiment
from ..errors import BadInput, ConfigError


def non_finite(obj: Any, path: str = "") -> tuple[str, float] | None:
    """The first non-finite float in *obj* (dicts and lists walked without recursion): its dotted path and
    value; None when there is none."""
    stack: list[tuple[str, Any]] = [(path, obj)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return where, v
        if isinstance(v, dict):
            stack.extend((f"{where}.{k}" if where else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, (list, tuple)):
            stack.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return None


def _why(value: float) -> str:
    return f"{value!r} cannot be sent: JSON has no {value!r} (a request carries finite numbers only); give one"


def dumps(obj: Any) -> str:
    """*obj* as strict JSON; a non-finite number is a :class:`BadInput` naming its field."""
    try:
        return json.dumps(obj, allow_nan=False)
    except ValueError:
        bad = non_finite(obj)
        if bad is None:
            raise
        raise BadInput(f"request field {bad[0]}: {_why(bad[1])}") from None


def check_request_fields(exp: LoadedExperiment) -> None:
    """Every field of the experiment that goes into a request body is sendable as strict JSON: a
    :class:`ConfigError` naming the first that is not, before anything starts."""
    spec, file = exp.spec, str(exp.path)
    for i, arm in enumerate(spec.arms):
        if (bad := non_finite(arm.request, f"arms[{i}].request")) is not None:
            raise ConfigError(file, bad[0], _why(bad[1]))
    for j, case in enumerate(spec.cases):
        if (bad := non_finite(case.temperature, f"cases[{j}].temperature")) is not None:
            raise ConfigError(file, bad[0], _why(bad[1]))
        if (bad := non_finite(exp.tools.get(case.name), f"cases[{j}].tools ({case.tools})")) is not None:
            raise ConfigError(file, bad[0], _why(bad[1]))
