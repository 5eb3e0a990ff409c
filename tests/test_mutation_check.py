"""scripts/mutation-check.sh stays runnable: each of its mutations' texts occurs exactly once in the file it
mutates (the check itself stops when one does not, but it runs only in CI's slow part; this catches a refactor that
moves a mutated line at once), and each mutated text differs from the original."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "mutation-check.sh"


def mutations() -> dict[str, tuple[str, str, str]]:
    """The script's ``MUTATIONS`` table (name → file, text, mutated text), read from its embedded Python."""
    found = re.search(r"^MUTATIONS = (\{.*?^\})$", SCRIPT.read_text(encoding="utf-8"), re.S | re.M)
    assert found, f"{SCRIPT}: no MUTATIONS table"
    table = ast.literal_eval(found.group(1))
    assert isinstance(table, dict) and table
    return table


def test_every_mutation_is_listed_with_its_tests():
    listed = set(re.findall(r'^  "([a-z0-9]+)\|', SCRIPT.read_text(encoding="utf-8"), re.M))
    assert listed == set(mutations())


@pytest.mark.parametrize("name", sorted(mutations()))
def test_each_mutation_applies_once(name):
    rel, old, new = mutations()[name]
    text = (ROOT / rel).read_text(encoding="utf-8")
    assert text.count(old) == 1, f"mutation {name}: {old!r} occurs {text.count(old)} times in {rel}: update the script"
    assert new != old
