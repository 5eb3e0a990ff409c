"""A pydantic :class:`~pydantic.ValidationError` of the experiment file as one :class:`ConfigError`: the dotted
key (``arms[1].engine.kind``), and what is wrong in the file's words: the nearest valid key for an unknown one,
the value and the range for a number (:mod:`.limits`)."""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import ConfigError
from .limits import shown, type_problem

# the member of a union that pydantic names in an error's location ("float", "list[int]",
# "function-after[check(), float]", "AdaptiveSpec"): not a key of the file
_UNION_TAG = re.compile(r"^(?:int|float|str|bool|none|[a-z-]+\[.*\]|[A-Z][A-Za-z]+)$")


def _models_in(ann: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (``X``, ``X | None``, ``list[X]``), if any."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in typing.get_args(ann):
        found = _models_in(arg)
        if found is not None:
            return found
    return None


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the last key of *loc* (for suggestions)."""
    model: type[BaseModel] | None = root
    for part in loc[:-1]:
        if isinstance(part, int) or model is None or _UNION_TAG.match(str(part)):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = _models_in(field.annotation)
    return model


def dotted(loc: tuple[Any, ...], keep_last: bool = False) -> str:
    """*loc* as the file's key: ``arms[1].engine.kind`` (union tags left out; *keep_last*: the last part is the
    file's own, an unknown key, whatever it looks like)."""
    out = ""
    for n, part in enumerate(loc):
        if isinstance(part, str) and _UNION_TAG.match(part) and not (keep_last and n == len(loc) - 1):
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def first_error(file: str, err: ValidationError, root: type[BaseModel]) -> ConfigError:
    """The first of *err*'s problems (validating *root*) as a :class:`ConfigError` naming *file* and the key."""
    e = err.errors()[0]
    loc = tuple(e["loc"])
    key = dotted(loc, keep_last=e["type"] == "extra_forbidden")
    if e["type"] == "extra_forbidden":
        owner = _model_at(root, loc)
        hint = ""
        if owner is not None:
            keys = [f.alias or k for k, f in owner.model_fields.items()]  # as the file spells them (from)
            near = difflib.get_close_matches(str(loc[-1]), keys, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; valid keys: {', '.join(keys)}"
        return ConfigError(file, key, f"unknown key{hint}")
    if e["type"] == "missing":
        return ConfigError(file, key, "required key is missing")
    if e["type"] in ("int_type", "float_type", "bool_type"):
        return ConfigError(file, key, type_problem(e["type"], e.get("input")))
    if e["type"] == "string_type":
        return ConfigError(file, key, f"must be a string (in quotes), got {shown(e.get('input'))}")
    msg = e["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return ConfigError(file, key, msg)
