"""The first screen of every report: the answer in a few lines, before any table.

One line on the run, one line per lever (its pair, the verdict with its interval or the multiplier, citable or
why not in a short phrase), one line per lever pair measured under load (where it pays along the load levels and
where it flips: :func:`.load_levers.pair_sentence`), one line on where the time goes, the warnings by kind, and
where the rest is.  A reason shared by several rows is written once, as a numbered note.  The terminal prints
these lines, and ``report.md`` and ``report.html`` open with them, so all three give the same answer first.  Only
formatting: every figure is the summary's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..schema import reason_codes as guard
from ..schema.warning_kinds import warning_groups
from .load_levers import pair_sentence
from .recorded_tables import replay_line
from .table import pct
from .tables import ratio_interval

if TYPE_CHECKING:
    from ..schema.experiment_rows import LeverHeadlineRow, MultiplierRow, VerdictRow
    from ..schema.repeat_rows import RepeatPairRow
    from ..schema.summary import Summary

#: A refusal's reason codes (analysis/base/guard.py) in a few words, for a lever's line; the full reason is a note.
SHORT_REASON = {guard.VOLUME: "output volumes differ", guard.VOLUME_UNKNOWN: "output volume unknown",
                guard.DRIFT: "an arm's speed drifted", guard.FAILED: "calls failed",
                guard.RETRIED: "calls were retried", guard.REPEATS: "too few repeats",
                guard.NO_TURNS: "no successful turns", guard.CONTRADICTION: "a declared knob contradicts the engine",
                guard.NOT_ENGAGED: "the lever did not engage", guard.REFERENCE_USED: "the reference used it too",
                guard.CELLS: "a case was refused", guard.REVISITS: "repeats revisited",
                guard.TOOLS: "tools reached one arm only"}

#: A line of the first screen other than a lever's is cut at this many characters (the full report and its
#: tables hold it whole); a terminal passes its own width.
NOTE_WIDTH = 150
#: The first screen's length in lines (more when there are more levers than fit: each has its line).
LINES = 15
#: The warnings line names at most this many kinds.
WARNING_KINDS = 4


@dataclass
class Notes:
    """Numbered notes: the same text gets the same number."""

    texts: list[str] = field(default_factory=list)

    def number(self, text: str) -> int:
        if text not in self.texts:
            self.texts.append(text)
        return self.texts.index(text) + 1

    def marks(self, texts: list[str]) -> tuple[str, list[int]]:
        """The marks of *texts* ('[1][3]', each number once) and their numbers."""
        numbers = list(dict.fromkeys(self.number(t) for t in texts))
        return "".join(f"[{n}]" for n in numbers), numbers


@dataclass(frozen=True)
class FirstScreen:
    """The first screen as parts: ``head`` (the run) and ``conditions`` (e.g. common drift, a line each),
    ``levers`` (one line each), ``under_load`` (one line per lever pair under load), ``time`` (where it goes),
    ``notes`` (shared reasons, numbered), ``firsts`` (each lever's first note number: kept when notes must be left
    out), ``warnings`` (one line), ``more`` (where the rest is)."""

    head: str
    conditions: list[str]
    levers: list[str]
    time: str | None
    notes: list[str]
    firsts: list[int]
    warnings: str | None
    more: list[str]
    under_load: list[str] = field(default_factory=list)

    def lines(self, width: int = NOTE_WIDTH, budget: int = LINES) -> list[str]:
        """The screen's lines: every line but a lever's cut at *width* characters, the notes that fit in
        *budget* lines (each lever's first note first), then how many were left out."""
        fixed = [_clip(self.head, width), *(_clip(c, width) for c in self.conditions),
                 *(f"  {x}" for x in self.levers), *(f"  {x}" for x in self.under_load),
                 *([_clip(self.time, width)] if self.time else [])]
        tail = ([_clip(self.warnings, width)] if self.warnings else []) + [_clip(m, width) for m in self.more]
        room = max(budget - len(fixed) - len(tail), 1)
        keep = list(range(1, len(self.notes) + 1))
        if len(keep) > room:
            firsts = list(dict.fromkeys(self.firsts))
            keep = sorted((firsts + [n for n in keep if n not in firsts])[:room - 1])
        notes = [f"  [{n}] {_clip(self.notes[n - 1], width - 6)}" for n in keep]
        if len(keep) < len(self.notes):
            notes.append(f"  (+{len(self.notes) - len(keep)} more notes: the full report lists every reason)")
        return fixed + notes + tail


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width, 2) - 1].rstrip() + "…"


def _total_row(summary: Summary, arm: str, vs: str | None) -> MultiplierRow | None:
    return next((m for m in summary.get("multipliers") or [] if m.get("scope") == "total" and m.get("arm") == arm
                 and m.get("vs") == vs), None)


def clauses(reason: str | None) -> list[str]:
    """A reason's clauses: its parts between top-level ``"; "`` (a parenthesis may hold ``;`` of its own)."""
    reason = reason or ""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(reason):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and reason.startswith("; ", i):
            out.append(reason[start:i])
            start = i + 2
    return [c for c in (*out, reason[start:]) if c]


def lever_line(summary: Summary, lever: LeverHeadlineRow, notes: Notes,
               width: tuple[int, int]) -> tuple[str, list[int]]:
    """One lever: its pair, the verdict and its interval where one was taken, the total multiplier, and whether
    it may be cited, else why, briefly (a figure that may not be cited is in parentheses); and its notes."""
    name = str(lever.get("lever")).ljust(width[0])
    arm = lever.get("arm")
    if arm is None:
        why = clauses(lever.get("reason"))
        return f"{name}  {'no pair measures it'.ljust(width[1])}  {_clip(why[0], 90) if why else ''}".rstrip(), []
    pair = f"{arm} vs {lever.get('vs')}".ljust(width[1])
    verdict = next((v for v in summary.get("verdicts") or [] if v.get("arm") == arm
                    and v.get("vs") == lever.get("vs")), None)
    citable = bool(lever.get("citable"))
    equal_work = [verdict is not None and verdict.get("measure") == "equal work",
                  lever.get("measure") == "equal work"]
    parts: list[str] = []
    numbers: list[int] = []
    if verdict is not None:
        said = f"{verdict.get('verdict')} {ratio_interval(verdict)}"
        if verdict.get("refused") and citable:  # else the lever's own reason says it
            marks, numbers = notes.marks(clauses(verdict["refused"]))
            said = f"({said}: refused) {marks}"
        elif verdict.get("verdict") == "undecided" and citable:  # a refused lever's line gives the refusal
            marks, numbers = notes.marks([undecided_note(summary, verdict)])
            said = f"{said} {marks}"
        parts.append(said)
    multiplier = lever.get("multiplier")
    if multiplier is not None and total_tells(verdict, multiplier):
        parts.append(("total " if verdict is not None else "") + f"{multiplier:.2f}x")
    rep = _repeat_pair(summary, arm, lever.get("vs"))
    first_visit = rep.get("first_visit") if rep else None
    if rep and rep.get("refused") and first_visit is not None:  # the honest figure first, then the echo's
        parts = [f"first visits {first_visit:.2f}x (no interval)",
                 *(["across repeats " + "; ".join(parts)] if parts else [])]
    revisit = revisit_note(summary, arm, lever.get("vs"))
    if revisit and citable:
        marks, more = notes.marks([revisit])
        if parts:
            parts[-1] += f" {marks}"
        else:
            parts.append(marks)
        numbers = [*numbers, *more]
    if any(equal_work):
        parts.append("both at equal work" if all(equal_work) and len(parts) > 1 else
                     "the total at equal work" if equal_work[1] and len(parts) > 1 else "at equal work")
    figure = "; ".join(parts) or "—"
    row = _total_row(summary, arm, lever.get("vs"))
    codes = (row.get("reason_codes") if row else None) or []
    drift_said, drift_note = drift_words(summary, arm, lever.get("vs"))
    short = {**SHORT_REASON, **({guard.DRIFT: drift_said} if drift_said and not drift_note else {})}
    if citable:
        cite = "citable"
        if drift_note:  # not refused for it (interleaved): said on the line, why it is still cited in a note
            marks, more = notes.marks([drift_note])
            cite += f", {drift_said} {marks}"
            numbers = [*numbers, *more]
    else:
        figure = f"({figure})"
        marks, numbers = notes.marks(clauses(lever.get("reason") or (row.get("reason") if row else None))
                                     or ["refused"])
        cite = f"not citable: {', '.join(short.get(c, c) for c in codes) or 'refused'} {marks}"
        if drift_note:
            cite += f"; {drift_said}"
    if lever.get("engaged") is False and guard.NOT_ENGAGED not in codes:
        cite += "; did NOT engage"
    return f"{name}  {pair}  {figure} · {cite}", numbers


def drift_words(summary: Summary, arm: str, vs: str | None) -> tuple[str | None, str | None]:
    """What a lever's line says of its pair's drift where the sentinels did not rule one out (``drift_pairs``:
    :func:`...analysis.experiment.drift.pair_drift`): ("drift undetermined" or "drift unknown", the note why it is
    still cited) where it did not refuse the pair (interleaved order); (the refusal's short words, None) where it
    did (blocked order: undetermined or unknown drift refuses); (None, None) where the drift was ruled out, or
    detected (the refusal's own reason says it)."""
    row = next((p for p in summary.get("drift_pairs") or [] if p.get("arm") == arm and p.get("vs") == vs), None)
    if not row:
        return None, None
    reason = row.get("reason") or ""
    if row.get("refuses"):
        if row.get("undetermined"):
            return "drift undetermined (blocked order)", None
        return ("drift unknown (blocked order)", None) if "drift is unknown" in reason and "changed" not in reason \
            else (None, None)
    if not row.get("undetermined"):
        return None, None
    from ..config.settings import default  # noqa: PLC0415 (pydantic: --help loads none of it)

    tol = pct((summary.get("tolerances") or {}).get("drift", default("drift_tolerance")))
    what = ("drift unknown: under 3 sentinels an arm" if (row.get("points") or 0) < 3 else
            f"drift undetermined: the sentinels cannot rule out the arms drifting apart by over {tol}")
    return what.split(":")[0], f"{what}; cited: interleaved, it is the run's mean ratio"


def total_tells(verdict: VerdictRow | None, total: float) -> bool:
    """Whether a lever's total multiplier tells something its verdict's ratio does not: there is no verdict, or
    no interval, or the total lies outside the verdict's interval (the cases' time weights move it)."""
    if verdict is None:
        return True
    low, high = verdict.get("low"), verdict.get("high")
    if not isinstance(low, (int, float)) or not isinstance(high, (int, float)):
        return verdict.get("ratio") is None
    return not low <= total <= high


def _repeat_pair(summary: Summary, arm: str, vs: str | None) -> RepeatPairRow | None:
    """The ``repeats`` section's row of the pair (:mod:`...analysis.experiment.revisits`); None where none."""
    repeats = summary.get("repeats")
    pairs = (repeats.get("pairs") if repeats else None) or []
    return next((p for p in pairs if p.get("arm") == arm and p.get("vs") == vs), None)


def revisit_note(summary: Summary, arm: str, vs: str | None) -> str | None:
    """The first-visit figure of a pair whose later repeats revisited their own cached prompts, not refused for
    it (a run that kept its cache on purpose, or one before ledger v5, which declared no state), as a note;
    None where there is none."""
    pair = _repeat_pair(summary, arm, vs)
    first_visit = pair.get("first_visit") if pair else None
    if pair is None or pair.get("refused") or first_visit is None:
        return None
    repeats = summary.get("repeats")
    kept = (repeats.get("state") if repeats else None) == "keep"
    return (f"{arm} vs {vs} on first visits (each case's first turn, no interval): {first_visit:.2f}x; "
            + ("the repeats met what earlier ones cached, on purpose (keep)" if kept else
               "later repeats hit the first one's cache (see revisits)"))


def tools_line(summary: Summary) -> str | None:
    """The cases whose tool schemas the engine dropped (the ``tools`` section), said before any figure: their
    turns ran without their tools, so they are not agent turns with tools; None where every schema reached."""
    dropped = [r for r in summary.get("tools") or [] if isinstance(r, dict) and r.get("dropped")]
    if not dropped:
        return None
    where = "; ".join(f"{r.get('case')} on {r.get('arm')} ({r['dropped']} of {r.get('calls')} calls)" for r in dropped)
    return (f"Tools DROPPED: the engine did not put the tool schemas in the prompt: {where}; those turns ran "
            "without their tools (not agent turns with tools): see Tools in the report")


def undecided_note(summary: Summary, verdict: VerdictRow) -> str:
    """What decides an undecided verdict: its own reason where it has one (no spread: repeats cannot bound it);
    in an adaptive run, what stopped it; else the repeats per case a fixed design would need (were the observed
    effect and noise true), or, with the effect at the bound, that no practical number does."""
    if verdict.get("reason"):
        return f"undecided: {clauses(verdict['reason'])[0]}"
    n = verdict.get("fixed_design_repeats")
    known = isinstance(n, int) and n > 0
    if summary.get("adaptive"):
        stopped = verdict.get("stopped_by")
        if stopped != "max_repeats":
            resume = " (--resume goes on)" if stopped == "not finished" else ""
            return f"undecided: stopped by {stopped or 'the run'}{resume}"
        return (f"undecided when the repeats ran out: {f'about {n} per case' if known else 'more'} would decide it "
                "(raise max_repeats)")
    if not known:
        return (f"undecided: the ratio lies at the {verdict.get('min_effect', 1.1):.2f}x bound, where no practical "
                "number of repeats decides it")
    return f"undecided: more repeats decide it (about {n} per case: --repeats {n}), or --adaptive adds them until " \
           "it is decided"


def time_line(summary: Summary) -> str | None:
    """Where the baseline's turn time goes: prefill, decode and the rest, summed over one turn of each case."""
    base = summary.get("baseline")
    rows = [r for r in summary.get("time_shares") or [] if r.get("arm") == base and r.get("turn_s")]
    if not rows:
        return None
    total = sum(r["turn_s"] for r in rows)
    share = {"prefill": sum(r.get("prefill_s") or 0.0 for r in rows) / total,
             "decode": sum(r.get("decode_s") or 0.0 for r in rows) / total,
             "other": sum(r.get("other_s") or 0.0 for r in rows) / total}
    sources = {r.get("source") for r in rows} - {None, ""}
    source = sources.pop() if len(sources) == 1 else "mixed sources" if sources else ""
    n = len(rows)
    return (f"Where the time goes ({base}, a turn of each case: {n} turn{'s' if n > 1 else ''}, {total:.1f} s"
            f"{', ' + source if source else ''}): prefill {pct(share['prefill'])}, decode {pct(share['decode'])}, "
            f"other {pct(share['other'])}")


def _repeats(summary: Summary) -> str:
    """The repeats: the fixed count, or for an adaptive run the range the verdicts reached and the cap."""
    run = summary.get("run") or {}
    ad = summary.get("adaptive")
    counts = [n for v in summary.get("verdicts") or [] for n in (v.get("repeats") or {}).values()
              if isinstance(n, int)]
    if ad and counts:
        low, high = min(counts), max(counts)
        said = f"{low}" if low == high else f"{low}–{high}"
        return f"{said} repeats (adaptive, up to {ad.get('max_repeats', '?')})"
    return f"{run.get('repeats', '?')} repeats"


def _head(summary: Summary) -> str:
    run = summary.get("run") or {}
    arms, cases = summary.get("arms") or [], summary.get("cases") or []
    failed = run.get("failed_calls") or 0
    head = (f"leverbench: {run.get('name', '?')}: {len(arms)} arm{'s' if len(arms) != 1 else ''} × {len(cases)} "
            f"case{'s' if len(cases) != 1 else ''} × {_repeats(summary)}, {run.get('calls', 0)} calls"
            f"{f', {failed} FAILED' if failed else ''}")
    if (in_flight := run.get("concurrency") or 1) > 1:
        beside, lost = run.get("companion_calls") or 0, run.get("companion_failed") or 0
        head += (f", each turn timed at {in_flight} requests in flight ({beside} companion calls"
                 f"{f', {lost} FAILED' if lost else ''})")
    v = next(iter(summary.get("verdicts") or []), None)
    if v and isinstance(v.get("confidence"), (int, float)) and isinstance(v.get("min_effect"), (int, float)):
        head += f"; verdicts at {pct(v['confidence'])}, pays above {v['min_effect']:.2f}x"
    return head


def first_screen(summary: Summary, *, report_path: str | None = None,
                 full_hint: str | None = "every table: --full") -> FirstScreen:
    """The first screen of *summary*; *report_path*: the HTML report to point at; *full_hint*: how to see
    every table (None: say nothing of it)."""
    notes = Notes()
    levers = [x for x in summary.get("levers") or [] if isinstance(x, dict)]
    width = (max([len(str(x.get("lever"))) for x in levers] + [5]),
             max([len(f"{x['arm']} vs {x.get('vs')}") for x in levers if x.get("arm") is not None] + [19]))
    lines, firsts = [], []
    for x in levers:
        line, numbers = lever_line(summary, x, notes, width)
        lines.append(line)
        firsts += numbers[:1]
    common = summary.get("drift_common")
    drift = common.get("text") if common else None
    conditions = [f"Drift: {drift}"] if drift else []
    conditions += [x for x in (replay_line(summary), tools_line(summary)) if x]
    groups = warning_groups(summary)
    warnings = None
    if groups:
        n = sum(len(t) for _, _, t in groups)
        named = ", ".join(f"{kind or 'other'} ({len(t)})" for kind, _, t in groups[:WARNING_KINDS])
        kinds_left = len(groups) - WARNING_KINDS
        warnings = (f"{n} warning{'s' if n > 1 else ''}: {named}"
                    + (f", +{kinds_left} more kinds" if kinds_left > 0 else "")
                    + (" (the full report lists them)" if full_hint else ""))
    more = [x for x in (f"report: {report_path}" if report_path else None, full_hint) if x]
    return FirstScreen(_head(summary), conditions, lines or ["no lever: the arms differ in no knob"],
                       time_line(summary), notes.texts, firsts, warnings, [" · ".join(more)] if more else [],
                       [pair_sentence(r) for r in summary.get("load_levers") or [] if isinstance(r, dict)])
