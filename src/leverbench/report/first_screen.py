"""The first screen of every report: the answer in a few lines, before any table.

One line on the run, one line per lever (its pair, the verdict with its interval or the multiplier, citable or
why not in a short phrase), one line on where the time goes, the warnings by kind, and where the rest is.  A
reason shared by several rows is written once, as a numbered note.  The terminal prints these lines, and
``report.md`` and ``report.html`` open with them, so all three give the same answer first.  Only formatting:
every figure is the summary's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..analysis import reason_codes as guard
from ..analysis.warning_kinds import warning_groups
from .table import pct
from .tables import ratio_interval

#: A refusal's reason codes (analysis/guard.py) in a few words, for a lever's line; the full reason is a note.
SHORT_REASON = {guard.VOLUME: "output volumes differ", guard.VOLUME_UNKNOWN: "output volume unknown",
                guard.DRIFT: "the arms drifted differently", guard.FAILED: "calls failed",
                guard.RETRIED: "calls were retried", guard.REPEATS: "too few repeats",
                guard.NO_TURNS: "no successful turns", guard.CONTRADICTION: "a declared knob contradicts the engine",
                guard.NOT_ENGAGED: "the lever did not engage", guard.REFERENCE_USED: "the reference used it too",
                guard.CELLS: "a case was refused"}


#: A note on the first screen is cut at this many characters (the full report and its tables hold it whole).
NOTE_WIDTH = 150
#: The first screen's length in lines (more when there are more levers than fit: each has its line).
LINES = 15


@dataclass
class Notes:
    """Numbered notes: the same text gets the same number."""

    texts: list[str] = field(default_factory=list)

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"


@dataclass(frozen=True)
class FirstScreen:
    """The first screen as parts: ``head`` (the run), ``levers`` (one line each), ``time`` (where it goes),
    ``notes`` (shared reasons, numbered), ``warnings`` (one line), ``more`` (where the rest is)."""

    head: str
    levers: list[str]
    time: str | None
    notes: list[str]
    warnings: str | None
    more: list[str]

    def lines(self, width: int = NOTE_WIDTH, budget: int = LINES) -> list[str]:
        """The screen's lines: the notes that fit in *budget* lines, each cut at *width* characters (the full
        report holds them whole), then how many were left out."""
        fixed = [self.head, *(f"  {x}" for x in self.levers), *([self.time] if self.time else [])]
        tail = ([self.warnings] if self.warnings else []) + self.more
        room = max(budget - len(fixed) - len(tail), 1)
        notes = [f"  [{i}] {_clip(t, width)}" for i, t in enumerate(self.notes, 1)]
        if len(notes) > room:
            notes = notes[:room - 1] + [f"  (+{len(notes) - room + 1} more notes: the full report lists every reason)"]
        return fixed + notes + tail


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1].rstrip() + "…"


def _total_row(summary: dict[str, Any], arm: str, vs: str) -> dict[str, Any]:
    return next((m for m in summary.get("multipliers") or [] if m["scope"] == "total" and m["arm"] == arm
                 and m["vs"] == vs), {})


def clauses(reason: str) -> list[str]:
    """A reason's clauses: its parts between top-level ``"; "`` (a parenthesis may hold ``;`` of its own)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(reason):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and reason.startswith("; ", i):
            out.append(reason[start:i])
            start = i + 2
    return [c for c in (*out, reason[start:]) if c]


def _why(summary: dict[str, Any], lever: dict[str, Any], notes: Notes) -> str:
    """Why a lever's figure is not citable: a short phrase, and the notes that hold the whole reason (a clause
    another lever shares is one note)."""
    row = _total_row(summary, lever["arm"], lever["vs"])
    codes = row.get("reason_codes") or []
    short = ", ".join(SHORT_REASON.get(c, c) for c in codes) or "refused"
    return f"{short} " + "".join(notes.mark(c) for c in clauses(lever.get("reason") or row.get("reason") or short))


def lever_line(summary: dict[str, Any], lever: dict[str, Any], notes: Notes, width: tuple[int, int]) -> str:
    """One lever: its pair, the verdict and its interval where one was taken, the total multiplier, and whether
    it may be cited, else why, briefly; a figure that may not be cited is in parentheses."""
    name = lever["lever"].ljust(width[0])
    if lever["arm"] is None:
        return f"{name}  {'no pair measures it'.ljust(width[1])}  " + "".join(notes.mark(c)
                                                                          for c in clauses(lever["reason"]))
    pair = f"{lever['arm']} vs {lever['vs']}".ljust(width[1])
    verdict = next((v for v in summary.get("verdicts") or [] if v["arm"] == lever["arm"] and v["vs"] == lever["vs"]),
                   None)
    parts = []
    if verdict is not None:
        said = f"{verdict['verdict']} {ratio_interval(verdict)}"
        if verdict.get("refused") and lever["citable"]:  # else the lever's own reason says it
            said = f"({said}: refused) " + "".join(notes.mark(c) for c in clauses(verdict["refused"]))
        parts.append(said)
    if lever["multiplier"] is not None:
        total = f"{lever['multiplier']:.2f}x" + (" at equal work" if lever.get("measure") == "equal work" else "")
        parts.append(("total " if verdict is not None else "") + total)
    figure = "; ".join(parts) or "—"
    if not lever["citable"]:
        figure = f"({figure})"
    cite = "citable" if lever["citable"] else f"not citable: {_why(summary, lever, notes)}"
    if lever.get("engaged") is False:
        cite += "; did NOT engage"
    return f"{name}  {pair}  {figure} · {cite}"


def time_line(summary: dict[str, Any]) -> str | None:
    """Where the baseline's turn time goes: prefill, decode and the rest, summed over its cases."""
    base = summary.get("baseline")
    rows = [r for r in summary.get("time_shares") or [] if r["arm"] == base and r.get("turn_s")]
    if not rows:
        return None
    total = sum(r["turn_s"] for r in rows)
    share = {k: sum(r[f"{k}_s"] or 0.0 for r in rows) / total for k in ("prefill", "decode", "other")}
    source = rows[0].get("source") or ""
    return (f"Where the time goes ({base}, {total:.1f} s over {len(rows)} case{'s' if len(rows) > 1 else ''}"
            f"{', ' + source if source else ''}): prefill {pct(share['prefill'])}, decode {pct(share['decode'])}, "
            f"other {pct(share['other'])}")


def _head(summary: dict[str, Any]) -> str:
    run = summary.get("run") or {}
    arms, cases = summary.get("arms") or [], summary.get("cases") or []
    failed = run.get("failed_calls") or 0
    head = (f"leverbench: {run.get('name', '?')}: {len(arms)} arm{'s' if len(arms) != 1 else ''} × {len(cases)} "
            f"case{'s' if len(cases) != 1 else ''} × {run.get('repeats', '?')} repeats, {run.get('calls', 0)} calls"
            f"{f', {failed} FAILED' if failed else ''}")
    verdicts = summary.get("verdicts") or []
    if verdicts:
        v = verdicts[0]
        head += f"; verdicts: {pct(v['confidence'])} intervals, a lever pays above {v['min_effect']:.2f}x"
    common = summary.get("drift_common") or {}
    if common.get("text"):
        head += f"; {common['text']}"
    return head


def first_screen(summary: dict[str, Any], *, report_path: str | None = None,
                 full_hint: str | None = "every table: --full") -> FirstScreen:
    """The first screen of *summary*; *report_path*: the HTML report to point at; *full_hint*: how to see
    every table (None: say nothing of it)."""
    notes = Notes()
    levers = summary.get("levers") or []
    width = (max([len(x["lever"]) for x in levers] + [5]),
             max([len(f"{x['arm']} vs {x['vs']}") for x in levers if x["arm"] is not None] + [19]))
    lines = [lever_line(summary, x, notes, width) for x in levers] or ["no lever: the arms differ in no knob"]
    groups = warning_groups(summary)
    warnings = None
    if groups:
        n = sum(len(t) for _, _, t in groups)
        warnings = (f"{n} warning{'s' if n > 1 else ''}: "
                    + ", ".join(f"{kind or 'other'} ({len(t)})" for kind, _, t in groups)
                    + (" (the full report lists them)" if full_hint else ""))
    more = [x for x in (f"report: {report_path}" if report_path else None, full_hint) if x]
    return FirstScreen(_head(summary), lines, time_line(summary), notes.texts, warnings,
                       [" · ".join(more)] if more else [])
