"""The summary's sections, declared (issue 39): each names what it needs, the runner orders them, a product
reads only what it declared, every section of the schema is built by exactly one product, and every need a
product declares is one it reads (on the golden ledgers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from leverbench.analysis.base.dataset import dataset
from leverbench.analysis.sections import PRODUCTS, SECTION_ORDER
from leverbench.analysis.sections.base import Inputs, Product, build_all, order
from leverbench.analysis.summary import summarize
from leverbench.ledger.reader import read_ledger
from leverbench.schema.summary import Summary
from leverbench.schema.warning_kinds import RunWarning, WarningKind

GOLDEN = Path(__file__).parent / "golden"
LEDGERS = sorted(GOLDEN.glob("*.ledger.jsonl"))


def _p(name: str, *needs: Product[object]) -> Product[object]:
    return Product(name, tuple(needs), lambda i: name)


def test_order_puts_needs_first_and_keeps_the_listed_order_otherwise() -> None:
    a, b = _p("a"), _p("b")
    c = _p("c", a)
    d = _p("d", c, b)
    # d is listed first but needs c and b; a, b, c stay in their listed order
    assert [p.name for p in order([d, b, a, c])] == ["b", "a", "c", "d"]
    assert [p.name for p in order([a, b, c, d])] == ["a", "b", "c", "d"]


def test_order_refuses_a_missing_need_a_name_twice_and_a_cycle() -> None:
    a = _p("a")
    with pytest.raises(ValueError, match="needs \\['a'\\], which no listed product builds"):
        order([_p("b", a)])
    with pytest.raises(ValueError, match="named twice"):
        order([a, _p("a")])
    x = Product[object]("x", (), lambda i: 1)
    y = Product[object]("y", (x,), lambda i: 1)
    object.__setattr__(x, "needs", (y,))  # (frozen: a cycle can only be made by hand)
    with pytest.raises(ValueError, match="a cycle"):
        order([x, y])


def test_a_product_reads_only_what_it_declared_and_warns_in_the_order_products_run() -> None:
    led = read_ledger(LEDGERS[0])
    a = Product("a", (), lambda i: (i.warn(RunWarning(WarningKind.RETRIED, "from a")), 1)[1], key="a")
    b = Product("b", (a,), lambda i: (i.warn(RunWarning(WarningKind.RETRIED, "from b")), i[a] + 1)[1], key="b")
    inputs = Inputs(led, dataset(led))
    assert build_all([b, a], inputs) == {"b": 2, "a": 1}  # sections in the listed order, built in dependency order
    assert [w.text for w in inputs.warnings] == ["from a", "from b"]
    sneaky = Product("sneaky", (), lambda i: i[a])  # reads a without declaring it
    with pytest.raises(KeyError, match="'a' read by 'sneaky', which does not declare it"):
        build_all([a, sneaky], Inputs(led, dataset(led)))


def test_every_section_of_the_schema_is_built_by_exactly_one_product() -> None:
    keys = [p.key for p in PRODUCTS if p.key is not None]
    assert len(keys) == len(set(keys)), "a section built twice"
    added_by_summary = {"schema", "warnings", "warning_items"}
    assert set(keys) | added_by_summary == set(Summary.__annotations__)  # the oracle: the schema's own fields
    assert set(SECTION_ORDER) == set(Summary.__annotations__)


def test_the_listed_order_is_already_an_order_the_needs_allow() -> None:
    """So the warnings come in the listed order: the order the reports have always shown them."""
    assert [p.name for p in order(PRODUCTS)] == [p.name for p in PRODUCTS]


@pytest.mark.parametrize("path", LEDGERS, ids=[p.name.removesuffix(".ledger.jsonl") for p in LEDGERS])
def test_a_summary_lists_its_sections_in_the_files_order(path: Path) -> None:
    got = list(summarize(read_ledger(path)))
    assert got == [k for k in SECTION_ORDER if k in got]


def test_every_declared_need_is_read() -> None:
    """A need declared and never read would order products for nothing (and hide what a section rests on):
    over the golden ledgers (which reach the corners), each product reads every product it declares."""
    read: dict[str, set[str]] = {p.name: set() for p in PRODUCTS}
    for path in LEDGERS:
        led = read_ledger(path)
        inputs = Inputs(led, dataset(led))
        build_all(PRODUCTS, inputs)
        for name, got in inputs.read.items():
            read[name] |= got
    unread = {p.name: sorted({n.name for n in p.needs} - read[p.name]) for p in PRODUCTS
              if {n.name for n in p.needs} - read[p.name]}
    assert not unread, f"needs declared but never read: {unread}"


def test_no_product_changes_another_products_value() -> None:
    """A product that changed a value another product built (a row it added a key to) would make the summary
    depend on the order of the list, not on the declared needs: each value, as pickled once built, is the same
    when the summary is done (the check fails on a planted product that appends to the cells)."""
    import pickle  # noqa: PLC0415

    from leverbench.analysis.sections import CELLS  # noqa: PLC0415

    def changed(products: tuple[Product[object], ...], path: Path) -> list[str]:
        led = read_ledger(path)
        inputs = Inputs(led, dataset(led))
        frozen: dict[str, bytes] = {}
        build_all(products, inputs, on_built=lambda p, value: frozen.__setitem__(p.name, pickle.dumps(value)))
        return [name for name, before in frozen.items() if pickle.dumps(inputs.value(name)) != before]

    for path in LEDGERS:
        assert not changed(PRODUCTS, path), f"{path.name}: values changed after they were built"
    planted = Product("planted", (CELLS,), lambda i: i[CELLS].append(i[CELLS][0]))
    assert changed((*PRODUCTS, planted), LEDGERS[0]) == ["cells"]
