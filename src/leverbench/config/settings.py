"""The settings a run was made with, read back from its ledger header: analysis and the reports read them here,
typed, and never as the header's JSON (issue 39, part 3).

:class:`RunSettings` is the experiment file's ``[experiment]`` section (:class:`~.experiment.ExperimentSection`:
every setting with its one default) and its ``[probes]`` (:class:`~.experiment.Probes`), loaded once from the
header's ``config`` by :meth:`RunSettings.of_header` (the analysis' dataset holds it: ``ds.settings``).  A header
holds the snapshot of whatever version wrote it (:mod:`leverbench.ledger.upgrade` reads older schemas as they
are), so:

- a setting the header lacks (written before the setting existed) gets its default, the experiment file's — but
  ``cache_between_turns``: a run before ledger v5 declared no cache state, and None says so (its repeats may have
  revisited: analysis tells);
- a key the header holds that is no setting today (an older version's ``request_timeout_s``) is left out, and a
  null is a setting left out;
- a value of the setting's type that today's loader refuses (an older version's looser bounds: a longer name,
  more retries, a zero drift tolerance) is kept as recorded: the run was made with it, and analysis judges it by
  it as it always did (the ledger's reader holds what analysis computes with to its own bounds:
  :mod:`leverbench.ledger.schema`).  The loader's checks across settings (blocked order with engines one at a
  time, ...) are about starting a run, not reading one: they are not made again;
- a value of another type (a string for a number, a choice no version offered) is a damaged header:
  :class:`~leverbench.errors.LedgerError` naming the key.
"""

from __future__ import annotations

import functools
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..errors import LedgerError
from ..json_types import JSONObject
from .cache import CacheBetweenTurns
from .experiment import ExperimentSection, Probes
from .limits import shown


class RunSettings(ExperimentSection):
    """A run's settings: every field of :class:`~.experiment.ExperimentSection` (the header's value, else the
    experiment file's default), ``cache_between_turns`` None for a run that declared none, and ``probes`` (the
    run's, else the defaults).  ``model_fields_set``: the settings the header declared.  Read-only."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    # None: a run before ledger v5, which declared no state (the experiment file's default, "cold", is today's)
    cache_between_turns: CacheBetweenTurns | None = None  # type: ignore[assignment]  # wider: a run may declare none
    probes: Probes = Field(default_factory=Probes)

    @classmethod
    def of_header(cls, config: Mapping[str, Any], where: str | Path = "the ledger") -> RunSettings:
        """The settings of a run from its header's ``config`` (module docstring); *where*: the ledger, for an
        error's message."""
        exp = config.get("experiment")
        if not isinstance(exp, Mapping):
            raise LedgerError(f"{where}: the run header's config.experiment is not a table (got {shown(exp)}): the "
                              "header is not one leverbench writes (edited or damaged)")
        values = _recorded(ExperimentSection, exp, "config.experiment", str(where))
        probes = config.get("probes")
        if probes is not None:
            values["probes"] = _value(cls, "probes", probes, "config.probes", str(where))
        return cls.model_construct(**values)

    def declared(self) -> JSONObject:
        """The ``[experiment]`` settings the header declared, as the experiment file's JSON (to carry a run's
        settings into a new experiment)."""
        return self.model_dump(mode="json", exclude_unset=True, exclude={"probes"})

    def if_declared(self, key: str) -> Any:
        """The setting *key* as the header declared it; None where it declared none (what the run recorded: a
        default the analysis applies is not a fact of the run)."""
        return getattr(self, key) if key in self.model_fields_set else None


def default(key: str) -> Any:
    """The experiment file's default of the ``[experiment]`` setting *key* (for a reader of a summary that has
    none: the one place it is written is :class:`~.experiment.ExperimentSection`)."""
    return ExperimentSection.model_fields[key].get_default(call_default_factory=True)


def _recorded(model: type[BaseModel], data: Mapping[str, Any], at: str, where: str) -> dict[str, Any]:
    """The settings of *model* that *data* (a header's table, at key path *at*) holds, each typed (module
    docstring); a required one it lacks is a :class:`LedgerError`."""
    fields = model.model_fields
    out = {key: _value(model, key, raw, f"{at}.{key}", where)
           for key, raw in data.items() if key in fields and raw is not None}
    missing = next((k for k, f in fields.items() if f.is_required() and k not in out), None)
    if missing is not None:
        raise LedgerError(f"{where}: the run header's {at}.{missing} is missing: the header is not one leverbench "
                          "writes (edited or damaged)")
    return out


def _value(model: type[BaseModel], key: str, raw: object, at: str, where: str) -> Any:
    """*raw* as *model*'s setting *key* types it: a table of settings (a model) field by field, any other value by
    the field's type; out of today's bounds, as recorded."""
    annotation = model.model_fields[key].annotation
    nested = _model_of(annotation)
    if nested is not None:
        if not isinstance(raw, Mapping):
            raise LedgerError(f"{where}: the run header's {at} must be a table, got {shown(raw)}: the header is not "
                              "one leverbench writes (edited or damaged)")
        return nested.model_construct(**_recorded(nested, raw, at, where))
    try:
        return _adapter(model, key).validate_python(raw)
    except ValidationError as err:
        if all(e["type"] in _BOUNDS for e in err.errors()):  # of its type, past a bound of today's loader
            return float(raw) if annotation is float and isinstance(raw, int) else raw
        msg = err.errors(include_url=False)[0]["msg"]
        raise LedgerError(f"{where}: the run header's {at}: {msg[:1].lower()}{msg[1:]}, got {shown(raw)}: no "
                          "version of leverbench wrote it (the header was edited or damaged)") from None


#: pydantic's error types for a value of the right type past a bound (a check of ours, a list's length, a number's
#: range): an earlier leverbench may have written it (its bounds were looser), so it is kept as recorded
_BOUNDS = frozenset({"value_error", "too_long", "too_short", "greater_than", "greater_than_equal", "less_than",
                     "less_than_equal", "multiple_of", "string_too_long", "string_too_short"})


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (``AdaptiveSpec | None`` → AdaptiveSpec), or None."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    return next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)


@functools.cache
def _adapter(model: type[BaseModel], key: str) -> TypeAdapter[Any]:
    """The validator of *model*'s field *key* alone (its type and bounds, strict as the experiment file's)."""
    field = model.model_fields[key]
    typed: Any = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    return TypeAdapter(typed, config=ConfigDict(strict=True))
