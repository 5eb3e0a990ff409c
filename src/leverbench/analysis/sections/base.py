"""What a summary section is, and the runner that orders them.

A :class:`Product` is one value the summary computes: a section of ``summary.json`` (``key`` names it) or an
intermediate value other products take (the comparisons, the server metrics each arm owns).  It names what it
needs (other products: ``needs``) and how it is built from them (``build``); the run's inputs every product may
read (the dataset, the ledger, the command's options, the experiment's settings) are on :class:`Inputs`.  A
product reads only what it declared: :meth:`Inputs.__getitem__` refuses any other, so the declarations are the
dependency graph, checked on every summary built.  A product's warnings go through :meth:`Inputs.warn`, in the
order the products run: :func:`order` runs them in dependency order, and among those free to run in the order
they are listed (so the summary's warnings keep the order the reports have always shown).  AIPerf's metric
registry (each metric names what it needs; the registry sorts them) is the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar, cast

from ...ledger.reader import Ledger
from ...ledger.rows import RunHeaderRow
from ...schema.warning_kinds import RunWarning
from ..base.dataset import Dataset

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True, eq=False)
class Product(Generic[T_co]):
    """One value of the summary: ``name`` (unique), ``needs`` (the products its ``build`` reads), ``build``
    (computes it from :class:`Inputs`), ``key`` (the summary section it is written as; None: an intermediate).
    ``optional``: a section left out of the summary when its value is None."""

    name: str
    needs: tuple[Product[Any], ...]
    build: Callable[[Inputs], T_co]
    key: str | None = None
    optional: bool = False


@dataclass
class Inputs:
    """What a product's ``build`` reads: the run's data and options, and the values of the products it needs.
    ``scenario``: (prompt tokens, generated tokens) of the projection, or None for the default;
    ``gpu_hour_usd``: the price of a GPU-hour where an arm's conditions give none."""

    ledger: Ledger[RunHeaderRow]
    ds: Dataset
    scenario: tuple[int, int] | None = None
    gpu_hour_usd: float | None = None
    warnings: list[RunWarning] = field(default_factory=list)
    read: dict[str, set[str]] = field(default_factory=dict)  # per product built, the products it read
    _values: dict[str, object] = field(default_factory=dict)
    _building: Product[Any] | None = None

    def __getitem__(self, product: Product[T]) -> T:
        """The value of *product*, which the product being built must have declared among its ``needs``."""
        p = self._building
        if p is None or all(n is not product for n in p.needs):
            raise KeyError(f"{product.name!r} read by {p.name if p else 'no product'!r}, which does not declare it "
                           "among its needs")
        self.read[p.name].add(product.name)
        return cast(T, self._values[product.name])  # (built by *product*, whose build returns a T)

    def value(self, name: str) -> object:
        """The value of the product named *name*, once built (for a caller outside every product: a test)."""
        return self._values[name]

    def warn(self, *warnings: RunWarning) -> None:
        """Add the product's warnings to the summary's, in the order products run."""
        self.warnings.extend(warnings)


def order(products: Sequence[Product[Any]]) -> list[Product[Any]]:
    """*products* in an order where each comes after everything it needs, and otherwise as listed (a stable
    topological sort); ValueError for a need that is not listed, a name used twice, or a cycle."""
    names = [p.name for p in products]
    if len(set(names)) != len(names):
        raise ValueError(f"products named twice: {sorted({n for n in names if names.count(n) > 1})}")
    listed = set(names)
    for p in products:
        missing = [n.name for n in p.needs if n.name not in listed]
        if missing:
            raise ValueError(f"{p.name!r} needs {missing}, which no listed product builds")
    done: set[str] = set()
    out: list[Product[Any]] = []
    pending = list(products)
    while pending:
        ready = next((p for p in pending if all(n.name in done for n in p.needs)), None)
        if ready is None:
            raise ValueError(f"a cycle among {[p.name for p in pending]}")
        out.append(ready)
        done.add(ready.name)
        pending.remove(ready)
    return out


def build_all(products: Sequence[Product[Any]], inputs: Inputs,
              on_built: Callable[[Product[Any], object], None] | None = None) -> dict[str, object]:
    """Build every product of *products* (in :func:`order`) on *inputs*; returns the sections, by key, in the
    order listed (those of an ``optional`` product left out when None); the warnings are on ``inputs``.
    *on_built*: called with each product and its value as soon as it is built (a test's probe)."""
    for p in order(products):
        inputs._building = p
        inputs.read[p.name] = set()
        try:
            inputs._values[p.name] = p.build(inputs)
        finally:
            inputs._building = None
        if on_built is not None:
            on_built(p, inputs._values[p.name])
    return {p.key: inputs._values[p.name] for p in products
            if p.key is not None and not (p.optional and inputs._values[p.name] is None)}
