"""The README a newcomer finishes, and docs/ with the rest (issue 24 §4): README stays short and opens with the
two commands, every option that ``--help`` lists is named in docs/, and every relative link leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import click

from leverbench.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_LINES = 200
COMMANDS = ("scripts/install.sh && .venv/bin/leverbench run",
            "scripts/install.sh --test && .venv/bin/ruff check . && .venv/bin/python -m mypy && .venv/bin/pytest")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"\]\(([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.M)


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _options(command: click.Command, path: str = "leverbench") -> dict[str, list[str]]:
    """Each long option --help lists, with the commands that list it; subcommands of groups too (walked, so
    that a command added later is covered without this test changing)."""
    found: dict[str, list[str]] = {}
    for param in command.params:
        if isinstance(param, click.Option) and param.name != "help":
            for opt in (*param.opts, *param.secondary_opts):
                if opt.startswith("--"):
                    found.setdefault(opt, []).append(path)
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            for opt, where in _options(sub, f"{path} {name}").items():
                found.setdefault(opt, []).extend(where)
    return found


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def test_the_readme_is_short_and_opens_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines, more than {README_LINES}: move some to docs/"
    first = re.search(r"^```sh\n(.*?)^```", text, re.M | re.S)
    assert first is not None and first.start() == text.index("```"), "README.md's first code block is not sh"
    assert tuple(first.group(1).splitlines()[:2]) == COMMANDS
    assert text.index("```") < text.index("\n## "), "the two commands come before the first section"


def test_every_option_help_lists_is_named_in_docs():
    options = _options(cli)
    assert {"--full", "--resume", "--trace-format", "--verify", "--dialect", "--version"} <= set(options)
    docs = "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")))
    missing = {opt: where for opt, where in options.items()
               if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", docs)}
    assert not missing, "options that --help lists and no docs/*.md names:\n" + "\n".join(
        f"  {opt}  ({', '.join(where)})" for opt, where in sorted(missing.items()))


def test_every_relative_link_leads_to_a_file_and_its_heading():
    assert (DOCS / "index.md").exists()
    broken = []
    for page in _pages():
        for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: — not a file of this repository
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_docs_page_is_linked_from_the_index():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = {t.partition("#")[0] for t in LINK.findall(index)}
    assert {p.name for p in DOCS.glob("*.md")} - {"index.md"} <= linked


def _command_options(command: click.Command, path: str = "leverbench") -> dict[str, list[str]]:
    """Each leaf command (its path: ``leverbench schema summary``) with the options --help lists for it: each
    option by its long names, or its short one where it has none."""
    if isinstance(command, click.Group):
        out: dict[str, list[str]] = {}
        for name, sub in sorted(command.commands.items()):
            out.update(_command_options(sub, f"{path} {name}"))
        return out
    opts = []
    for param in command.params:
        if isinstance(param, click.Option) and param.name != "help":
            names = [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
            opts += names or list(param.opts)
    return {path: opts}


def test_every_command_s_options_are_named_in_its_own_section_of_commands_md():
    """Not only somewhere in docs/ (an option of another command, or a page about something else, would do):
    in the section of docs/commands.md headed by the command itself."""
    text = (DOCS / "commands.md").read_text(encoding="utf-8")
    sections = {m.group(1): m for m in re.finditer(r"^## `(leverbench [a-z]+(?: [a-z]+)*)", text, re.M)}
    commands = _command_options(cli)
    assert "leverbench run" in commands and "leverbench whatif" in commands
    missing = {}
    for path, opts in commands.items():
        head = next((m for name, m in sections.items() if name == path or name.startswith(path + " ")), None)
        if head is None:
            missing[path] = ["(no section headed `" + path + " …` in docs/commands.md)"]
            continue
        end = text.find("\n## ", head.end())
        body = text[head.start(): end if end >= 0 else len(text)]
        gone = [o for o in opts if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", body)]
        if gone:
            missing[path] = gone
    assert not missing, "options --help lists that their command's section of docs/commands.md does not name: " \
        + "; ".join(f"{p}: {', '.join(o)}" for p, o in sorted(missing.items()))


def test_the_readmes_example_output_is_a_real_runs_first_screen():
    """The README's example output is the first screen of the real run it names (tests/golden/demo3.ledger.jsonl,
    issue 38), recomputed from that ledger now: not text typed by hand, nor a summary kept from an older leverbench."""
    from leverbench.analysis.summary import summarize
    from leverbench.ledger.reader import read_ledger
    from leverbench.report.first_screen import first_screen

    text = README.read_text(encoding="utf-8")
    assert "tests/golden/demo3.ledger.jsonl" in text
    block = re.search(r"^```text\n(leverbench: agent-turns.*?)^```", text, re.M | re.S)
    assert block is not None
    summary = summarize(read_ledger(ROOT / "tests" / "golden" / "demo3.ledger.jsonl"))
    want = first_screen(summary, report_path="runs/demo3/report.html",
                        full_hint="every table: leverbench report runs/demo3 --full").lines()
    assert block.group(1).splitlines() == want
