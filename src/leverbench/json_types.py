"""The types of JSON data that no schema of leverbench's own describes: what an engine answers (``/props``,
``/v1/models``, metrics labels), what a user writes into a request body or a condition, a trace's raw row.

``JSONValue`` is what :func:`json.loads` can return; ``JSONObject`` a JSON object.  Where leverbench owns the
shape (the ledger's records, the summary's rows), the data has a typed record instead (:mod:`.ledger.records`,
:mod:`.schema`).
"""

from __future__ import annotations

import math
from typing import Any, Union

from typing_extensions import TypeAlias

JSONScalar: TypeAlias = Union[str, int, float, bool, None]
JSONValue: TypeAlias = Union[JSONScalar, list["JSONValue"], dict[str, "JSONValue"]]
JSONObject: TypeAlias = dict[str, JSONValue]


def finite(o: Any) -> Any:
    """*o* as JSON holds it: non-finite floats become null (JSON has no inf/NaN), tuples lists."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite(v) for v in o]
    return o
