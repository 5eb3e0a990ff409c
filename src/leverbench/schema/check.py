"""Validating a summary against :class:`.summary.Summary` (pydantic, loaded only when a summary is checked)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any


@cache
def _adapter() -> Any:
    from pydantic import TypeAdapter  # noqa: PLC0415  (pydantic only when checking)

    from .summary import Summary  # noqa: PLC0415

    return TypeAdapter(Summary)


def summary_problems(summary: object) -> list[str]:
    """Where *summary* (as ``summary.json`` holds it: lists, not tuples) departs from the schema: one line per
    error (location: message), empty when it fits."""
    from pydantic import ValidationError  # noqa: PLC0415

    try:
        _adapter().validate_python(json.loads(json.dumps(summary)))
    except ValidationError as e:
        return [f"{'.'.join(str(x) for x in err['loc']) or '(top)'}: {err['msg']}" for err in e.errors()]
    return []


def summary_json_schema() -> str:
    """The JSON Schema of ``summary.json``, as ``leverbench schema summary`` prints it (sorted keys, indent 2)."""
    return json.dumps(_adapter().json_schema(), indent=2, sort_keys=True) + "\n"
