"""The summary's schema: the typed rows analysis builds, the reports read and ``summary.json`` serialises.

The rows are :class:`typing.TypedDict` classes (so analysis builds them as plain dicts and every report reads them as
it always has), validated by pydantic (:mod:`.check`: strict types, no unknown keys, the bounds a reader computes
with), and their vocabulary: the closed list of warnings (:mod:`.warning_kinds`) and the guard's reason codes
(:mod:`.reason_codes`). ``leverbench schema summary`` prints the JSON Schema pydantic derives from them; a copy is in
``docs/summary.schema.json``. This part imports nothing else of leverbench but the leaf modules
(:mod:`leverbench.bounds`) and, lazily, pydantic: analysis and report both read it."""

from collections.abc import Callable
from typing import TypeVar

_Row = TypeVar("_Row", bound=type)

#: Every row's pydantic config (a plain dict: ``pydantic.ConfigDict`` is one, and importing it would load
#: pydantic): no key the schema does not name, and strict types (a string is no number, a number no string).
STRICT: dict[str, object] = {"extra": "forbid", "strict": True}


def row_config(config: dict[str, object]) -> Callable[[_Row], _Row]:
    """A class decorator giving a row its pydantic *config*: the ``__pydantic_config__`` attribute pydantic reads
    on a TypedDict.  Set by a decorator, not in the class body, because a type checker takes every statement in a
    TypedDict's body for a key; pydantic's own ``with_config`` does the same but would load pydantic."""

    def apply(row: _Row) -> _Row:
        setattr(row, "__pydantic_config__", config)  # noqa: B010  (an attribute the row's type does not declare)
        return row

    return apply


#: The decorator of every row checked strictly (:data:`STRICT`).
strict_row = row_config(STRICT)
