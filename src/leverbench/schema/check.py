"""Validating a summary against :class:`.summary.Summary` (pydantic, loaded only when a summary is checked).

Two views of the one schema: the whole file (every section, as ``summarize`` builds it and ``write_reports``
checks it: every row strictly, no unknown key) and a reader's (what ``analyze --rates`` and ``whatif --rates``
accept from a summary.json: :data:`READER_NEEDS` required, the other sections it reads (:data:`READER_USES`)
checked where present, the sections it does not read left alone, and in a row a key this leverbench does not
know let pass — a summary of the same schema version written by an earlier leverbench, or cut to what its
reader uses, still reads; every value the reader computes with is checked against the same typed row).
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

from ..json_types import finite

#: The sections a reader of summary.json (``analyze --rates``, ``whatif --rates``) cannot do without.
READER_NEEDS = ("schema", "run", "baseline", "arms", "rates", "drift", "warnings")
#: Every section a reader of summary.json reads: checked where present, in the reader's view (the others are not).
READER_USES = (*READER_NEEDS, "rate_models", "engaged", "warning_items", "load_levers")
#: The keys of a row a reader computes with (a path, list indices left out): in a reader's view a row must have
#: these; any other key of the row is checked where present (a summary cut to what its reader uses, or written
#: by an earlier leverbench of the same schema version, may lack it).
READER_ROW_NEEDS = frozenset({
    "arms.name", "rates.arm", "rate_models.arm", "rate_models.prefill.a_s", "rate_models.prefill.b_s_per_token",
    "rate_models.decode.d0_s_per_token", "rate_models.batch.concurrency", "rate_models.batch.slowdown",
    "engaged.arm", "drift.arm", "drift.drifted", "warning_items.kind", "warning_items.arm", "warning_items.case",
    "warning_items.text", *(f"load_levers.{k}" for k in (
        "lever", "arm", "vs", "sweep", "x", "metrics", "metrics.metric", "metrics.pays", "metrics.crossover",
        "metrics.crossover.load", "metrics.crossover.low", "metrics.crossover.high", "metrics.crossover.between",
        "metrics.levels", "metrics.levels.load", "metrics.levels.value", "metrics.levels.citable"))})


class Problem(NamedTuple):
    """Where a summary departs from the schema (a path into it, ``rates[0].decode_tps``) and what is wrong."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where or '(top)'}: {self.message}"


@cache
def _adapter(whole: bool) -> Any:
    from typing import get_type_hints  # noqa: PLC0415

    from pydantic import TypeAdapter  # noqa: PLC0415  (pydantic only when checking)
    from typing_extensions import NotRequired, Required, TypedDict  # noqa: PLC0415

    from . import strict_row  # noqa: PLC0415
    from .summary import Summary  # noqa: PLC0415

    if whole:
        return TypeAdapter(Summary)
    hints = get_type_hints(Summary, include_extras=True)
    fields = {k: (Required if k in READER_NEEDS else NotRequired)[t] for k, t in hints.items()}
    part = TypedDict("SummaryAsRead", fields)  # type: ignore[misc]  # keys made at run time: mypy reads only literal ones
    return TypeAdapter(strict_row(part))


def _where(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a path into the file: ``rates[0].decode_tps``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".")


def summary_problems(summary: object, *, whole: bool = True) -> list[Problem]:
    """Where *summary* departs from the schema, one :class:`Problem` per error; empty when it fits.  *summary* is
    taken as ``summary.json`` holds it (a tuple is a list there, NaN null).  *whole*: every section and key required (a
    summary leverbench built); else only :data:`READER_NEEDS` and, in a row, :data:`READER_ROW_NEEDS` (a summary
    a reader was given): every value present is checked either way."""
    from pydantic import ValidationError  # noqa: PLC0415

    if not whole and isinstance(summary, dict):
        summary = {k: v for k, v in summary.items() if k in READER_USES}
    try:
        _adapter(whole).validate_python(finite(summary))
    except ValidationError as e:
        return [Problem(_where(err["loc"]), err["msg"].removeprefix("Value error, ")) for err in e.errors()
                if whole or not _tolerated(err)]
    return []


def _tolerated(err: Any) -> bool:
    """In a reader's view: a key missing from a row that the reader does not compute with, or a key in a row that
    this leverbench does not know (an earlier one of the same schema version wrote it)."""
    path = ".".join(str(x) for x in err["loc"] if not isinstance(x, int))
    return "." in path and (err["type"] == "extra_forbidden" or
                            (err["type"] == "missing" and path not in READER_ROW_NEEDS))


def summary_json_schema() -> str:
    """The JSON Schema of ``summary.json``, as ``leverbench schema summary`` prints it (sorted keys, indent 2)."""
    import json  # noqa: PLC0415

    return json.dumps(_adapter(True).json_schema(), indent=2, sort_keys=True) + "\n"
