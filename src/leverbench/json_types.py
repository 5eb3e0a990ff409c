"""The types of JSON data that no schema of leverbench's own describes: what an engine answers (``/props``,
``/v1/models``, metrics labels), what a user writes into a request body or a condition, a trace's raw row.

``JSONValue`` is what :func:`json.loads` can return; ``JSONObject`` a JSON object.  Where leverbench owns the
shape (the ledger's records, the summary's rows), the data has a typed record instead (:mod:`.ledger.records`,
:mod:`.schema`).
"""

from __future__ import annotations

from typing import Union

from typing_extensions import TypeAlias

JSONScalar: TypeAlias = Union[str, int, float, bool, None]
JSONValue: TypeAlias = Union[JSONScalar, list["JSONValue"], dict[str, "JSONValue"]]
JSONObject: TypeAlias = dict[str, JSONValue]
