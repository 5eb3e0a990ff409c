"""The type checker (issue 39): mypy passes on the whole package, by the configuration in ``pyproject.toml``
(``[tool.mypy]``: a baseline for the packages not yet clean, strict on the packages its strict override names),
and every ``# type: ignore`` in the package, strict or not, names its error code and says why on the line.

The command is the README's and CI's: ``python -m mypy`` from the repository root (the package list, the pydantic
plugin and the overrides come from ``pyproject.toml``); its cache, ``.mypy_cache/``, makes a second run quick.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import limits
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
MYPY = ROOT / "pyproject.toml"

#: A ``# type: ignore`` comment as every module must write it: its error codes, then ``#`` and a reason.
#: (mypy itself refuses any text after the codes that does not start with ``#``.)
GOOD_IGNORE = re.compile(r"type:\s*ignore\[[a-z-]+(?:,\s*[a-z-]+)*\]\s+#\s*\S.{2,}")
IGNORE = re.compile(r"type:\s*ignore\b")


def _mypy_config() -> dict:
    return tomllib.loads(MYPY.read_text())["tool"]["mypy"]


def _strict_override() -> dict:
    """The override that makes its modules strict: the one that sets ``disallow_untyped_defs``."""
    found = [o for o in _mypy_config().get("overrides", []) if o.get("disallow_untyped_defs") is True]
    assert len(found) == 1, "pyproject.toml: expected one [[tool.mypy.overrides]] with disallow_untyped_defs = true"
    return found[0]


def strict_modules() -> list[str]:
    """The module patterns checked strictly (``leverbench.ledger``, ``leverbench.ledger.*``, ...)."""
    modules = _strict_override()["module"]
    return [modules] if isinstance(modules, str) else list(modules)


def package_files() -> list[Path]:
    """Every source file of the package."""
    return sorted((SRC / "leverbench").rglob("*.py"))


def strict_files() -> list[Path]:
    """The source files of :func:`strict_modules`."""
    out = []
    for path in package_files():
        parts = path.relative_to(SRC).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if any(fnmatch(module, pattern) for pattern in strict_modules()):
            out.append(path)
    return out


def bad_ignores(source: str) -> list[tuple[int, str]]:
    """Each ``# type: ignore`` comment in *source* (Python) that lacks its error code or a reason after it:
    (line, the comment).  Comments only (tokenize): the words in a string or docstring are no ignore."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        at = IGNORE.search(tok.string)
        if at and not GOOD_IGNORE.fullmatch(tok.string[at.start():].rstrip()):
            out.append((tok.start[0], tok.string))
    return out


def test_mypy_passes_on_the_package():
    # (quiet: ~20 s without a cache, ~3 s with one; a busy 2-core machine takes up to 10x)
    res = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True,
                         timeout=limits.SMALL_RUN_S)
    assert "No module named mypy" not in res.stderr, "mypy is not installed: scripts/install.sh --test"
    assert res.returncode == 0 and "Success" in res.stdout, f"mypy found errors:\n{res.stdout}{res.stderr}"


def test_the_strict_packages_are_strict():
    """The strict override sets every per-module flag of ``mypy --strict`` (as this mypy lists them), the global
    ones are set globally, and an ignore without its code is an error there."""
    help_text = subprocess.run([sys.executable, "-m", "mypy", "--help"], capture_output=True, text=True,
                               timeout=limits.IMPORT_AND_EXIT_S).stdout
    # (the list runs on over indented lines, a flag's name broken after a hyphen, to the next option at 2 spaces)
    listed = re.search(r"--strict\s+Strict mode; enables the following flags:(.*?)(?:\n  -|\Z)", help_text, re.S)
    assert listed, "mypy --help no longer lists what --strict enables"
    flags = re.findall(r"--([a-z-]+)", re.sub(r"-\s*\n\s*", "-", listed.group(1)))
    assert "disallow-untyped-defs" in flags and len(flags) >= 10, flags
    config, strict = _mypy_config(), _strict_override()
    unset = [f for f in flags if strict.get(f.replace("-", "_")) is not True and config.get(f.replace("-", "_"))
             is not True]
    assert not unset, f"pyproject.toml's strict override lacks these --strict flags: {unset}"
    assert "ignore-without-code" in strict.get("enable_error_code", [])
    assert {"leverbench.ledger.*", "leverbench.levers.*", "leverbench.schema.*"} <= set(strict_modules())


def test_every_ignore_in_the_package_says_its_code_and_why():
    """Strict or not (mypy itself asks a code only in the strict packages: ``ignore-without-code``)."""
    files, strict = package_files(), strict_files()
    assert len(strict) > 20, "the strict packages' files were not found"
    assert len(files) > len(strict) and set(strict) <= set(files), "the package's files were not found"
    bad = [f"{path.relative_to(ROOT)}:{line}: {comment}"
           for path in files for line, comment in bad_ignores(path.read_text())]
    assert not bad, ("a `# type: ignore` needs its error code and a reason: "
                     "`# type: ignore[code]  # why`:\n" + "\n".join(bad))


@pytest.mark.parametrize(("line", "good"), [
    ("x: float = None  # type: ignore[assignment]  # pydantic: left out or a number", True),
    ("f()  # type: ignore[misc, arg-type]  # keys made at run time", True),
    ("f()  # noqa: B010  # type: ignore[attr-defined]  # pydantic reads it", True),
    ("f()  # type: ignore", False),
    ("f()  # type: ignore  # no code", False),
    ("f()  # type: ignore[misc]", False),
    ("f()  # type: ignore[misc]  (a reason mypy cannot parse)", False),
    ("f()  # type: ignore[misc]  #", False),
    ("f()  #type:ignore[misc]", False),
    ('s = "# type: ignore"  # a string, not a comment', True),
])
def test_the_ignore_rule_tells_good_from_bad(line, good):
    assert (bad_ignores(line + "\n") == []) is good
