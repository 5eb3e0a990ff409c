"""The summary's schema: the typed rows analysis builds, the reports read and ``summary.json`` serialises.

The rows are :class:`typing.TypedDict` classes (so analysis builds them as plain dicts and every report reads
them as it always has), validated by pydantic (:mod:`.check`: strict types, no unknown keys, the bounds a reader
computes with).  ``leverbench schema summary`` prints the JSON Schema pydantic derives from them; a copy is in
``docs/summary.schema.json``.  This part imports nothing else of leverbench but the leaf modules
(:mod:`leverbench.bounds`) and, lazily, pydantic: analysis and report both read it.
"""

#: Every row's pydantic config (a plain dict: ``pydantic.ConfigDict`` is one, and importing it would load
#: pydantic): no key the schema does not name, and strict types (a string is no number, a number no string).
STRICT = {"extra": "forbid", "strict": True}
