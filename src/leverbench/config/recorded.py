"""A case of recorded turns (``[[cases]] from = ...``, docs/recording.md): which keys go with ``from`` and which
may not (its messages, tools and steps are the recording's).  Reading the recording is the workload's
(``workload.recorded.expand``)."""

from __future__ import annotations

from typing import Any

WRITTEN = ("prompt", "system", "system_file", "tools", "tool_script", "documents", "steps", "variants")
RECORDED = ("format", "select", "sample", "limit")


def recorded_case_problem(case: Any) -> str | None:
    """What is wrong with *case* (a ``config.Case``) as a written case or a case of recorded turns (None:
    nothing): a written one needs ``prompt`` and takes none of the recorded turns' keys; one with ``from`` takes
    none of a written case's (but the loader's own cases of single turns, which carry what they replay)."""
    if case.from_ is None:
        if case.prompt is None:
            return ("give prompt (the turn's first instruction), or from (recorded turns: a recording directory or a "
                    "request log)")
        given = [k for k in RECORDED if getattr(case, k) not in (None, [])] + ["replay"] * (case.replay != "recorded")
        if given:
            return (f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to recorded turns: give from (a "
                    "recording directory or a request log) too")
        return None
    written = [k for k in WRITTEN if getattr(case, k) not in (None, [])]
    if written and case.recorded_from is None:
        return (f"a case of recorded turns (from) takes its messages, tools and steps from the recording; drop "
                f"{', '.join(written)} (or make it a case of its own)")
    return None
