"""``report.md``: the first screen, then the same tables as the terminal's ``--full``, as Markdown, with the
prose around them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..schema.warning_kinds import warning_groups
from .first_screen import first_screen
from .table import Table
from .tables import all_tables

if TYPE_CHECKING:
    from ..schema.summary import Summary

_INTRO = {
    "verdicts": (
        "Each lever's verdict with a stated confidence: the same calls replayed on both arms are paired repeat by "
        "repeat, so what two turns share (the prompt, the machine at that moment) cancels. An adaptive run adds "
        "repeats only to the comparisons still undecided and stops each as soon as its interval decides it."
    ),
    "shares": (
        "## Where the time goes\n\n"
        "A model call spends its time in two phases. **Prefill** reads the whole prompt (system prompt, documents, "
        "tool schemas, the conversation so far) before the first token can appear; a prefix cache removes the part "
        "of it that an earlier call already computed. **Decode** writes the answer one token at a time (reasoning "
        "tokens included, even when they are hidden); a speculative-decoding drafter speeds up this phase. Which "
        "lever pays depends on which phase dominates your turns: long prompts with short answers are prefill-bound, "
        "long answers are decode-bound."
    ),
    "decomposition": (
        "### How decode speed and prefill were measured\n\n"
        "Within one cell the input is nearly fixed, so regressing each call's latency on its generated tokens gives "
        "the decode rate (1 / slope) and the time spent before decoding (intercept: prefill plus overhead)."
    ),
    "probes": (
        "Independently, the probes send the same prompt with the output length forced to two values (a drafter arm's "
        "answers are left natural); the difference isolates the decode rate, and what remains is prefill. Decode "
        "slows as the context grows, so the probe, the regression and the server's own timings are compared at the "
        "probe's context through the arm's rate model, and should agree."
    ),
    "rate_model": (
        "The rate model below is what the scenario projection (and `leverbench whatif`) applies: prefill as a "
        "function of uncached tokens and their position, decode per token as a function of the context."
    ),
    "projection": (
        "### A scenario\n\n"
        "The measured rates, applied to one turn of the size below, show how each arm's time would split and what "
        "each lever returns (a lever only shortens its own phase)."
    ),
}


def md_table(t: Table) -> str:
    """A table as Markdown: its title in bold, its cells' pipes escaped and line breaks made spaces, its notes
    below."""
    def esc(x: str) -> str:
        return x.replace("|", "\\|").replace("\n", " ")

    lines = [f"**{t.title}**", "", "| " + " | ".join(esc(h) for h in t.headers) + " |",
             "|" + "---|" * len(t.headers)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in t.rows]
    if t.notes:
        lines.append("")
        lines += [f"- {esc(n)}" for n in t.notes]
    return "\n".join(lines)


def render_markdown(summary: Summary) -> str:
    run = summary["run"]
    host = run.get("host") or {}
    answer = first_screen(summary, full_hint=None).lines(width=1000)  # a page has room for whole notes
    out = [f"# leverbench: {run['name']}", "", "```text", *answer, "```", "",
           f"Run {run['run_id']} started {run['started_at']} on {host.get('cpu', '?')} "
           f"({host.get('cores', '?')} cores); "
           f"{run['repeats']} repeats, {run['order']} order, concurrency {run['concurrency']}; "
           f"{run['calls']} model calls, {run['failed_calls']} failed. Baseline: **{summary['baseline']}**. "
           f"Every number below is computed from `ledger.jsonl` by `leverbench report`.", ""]
    for t in all_tables(summary):
        if t.key in _INTRO:
            out += [_INTRO[t.key], ""]
        out += [md_table(t), ""]
    groups = warning_groups(summary)
    out += ["## Warnings", ""]
    for kind, heading, texts in groups:
        out += [f"### {heading}" + (f" (`{kind}`)" if kind else ""), "", *(f"- {w}" for w in texts), ""]
    if not groups:
        out += ["- none", ""]
    return "\n".join(out[:-1]) + "\n"
