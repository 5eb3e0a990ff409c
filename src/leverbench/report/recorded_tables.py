"""The replay of recorded turns, as the reports show it (the summary's ``recorded`` section): one line for the
first screen, and a table with the mode, each arm's prompt lengths against the recording's, the identical
requests and where a live replay departed.  Formats only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .table import Table, pct

if TYPE_CHECKING:
    from ..schema.recorded_rows import RecordedSection
    from ..schema.summary import Summary


def _modes(section: RecordedSection) -> str:
    modes = sorted({c["mode"] for c in section["cases"]})
    return " and ".join(modes)


def _unchecked(section: RecordedSection) -> list[str]:
    """Why calls were not compared with the recording (the departed ones aside: said apart)."""
    usage = sum(a.get("no_recorded_usage", 0) for a in section["arms"])  # (a summary written before they were)
    failed = sum(a.get("failed_calls", 0) for a in section["arms"])
    said = [f"{usage} call{'s have' if usage != 1 else ' has'} no recorded prompt length"] if usage else []
    return said + ([f"{failed} failed"] if failed else [])


def _requests(section: RecordedSection) -> str:
    if section["requests_compared"] == 0:
        return "requests not compared across arms (no call succeeded on two arms)"
    if section["requests_identical"] == section["requests_compared"]:
        return "identical requests on every arm"
    return f"identical requests at {section['requests_identical']} of {section['requests_compared']} calls"


def replay_line(summary: Summary) -> str | None:
    """One line: how many recorded turns, in which mode, and whether every arm received them as recorded (what
    was not compared said: never "as recorded" over nothing compared)."""
    sec = summary.get("recorded")
    if not sec:
        return None
    n = len(sec["cases"])
    off = [f"{a['arm']} ({a['differing_calls']} of {a['calls']} calls)" for a in sec["arms"] if a["differing_calls"]]
    calls, compared = sum(a["calls"] for a in sec["arms"]), sum(a["compared"] for a in sec["arms"])
    unchecked = _unchecked(sec)
    if off:
        prompts = f"prompts NOT as recorded on {', '.join(off)}"
    elif compared == 0:
        prompts = "prompts not checked"
    else:
        prompts = f"prompts as recorded on every arm (within {pct(sec['tolerance'])})" + \
            (f" at {compared} of {calls} calls" if compared < calls else "")
    if unchecked:
        prompts += (": " if compared == 0 and not off else "; not checked: ") + ", ".join(unchecked)
    departed = sum(a["departed_calls"] for a in sec["arms"])
    gone = f"; the live path departed at {departed} call(s)" if departed else ""
    return (f"Replay: {n} recorded turn{'s' if n != 1 else ''}, mode {_modes(sec)}; {prompts}; {_requests(sec)}"
            f"{gone}")


def recorded_table(summary: Summary) -> Table | None:
    sec = summary.get("recorded")
    if not sec:
        return None
    rows = []
    for a in sec["arms"]:
        dev = "—" if a["max_deviation"] is None else f"{a['max_deviation'] * 100:+.2f}%"
        rows.append([a["arm"], str(a["calls"]), f"{a['within']} of {a['compared']}"
                     + (f" ({a['no_recorded_usage']} without a recorded length)" if a.get("no_recorded_usage") else ""),
                     dev, str(a["departed_calls"]),
                     a["reason"] or (a["differing"][0]["reason"] if a["differing"] else "")])
    notes = [f"Mode {_modes(sec)}: " + ("each call sent the recorded request (its messages, recorded answers and tool "
                                        "results, tools and sampling): every arm received the same work."
                                        if _modes(sec) == "recorded" else
                                        "live cases let the arm's own tool calls drive the turn, answered from the "
                                        "recorded tool results by tool name and arguments."),
             f"Identical requests: {sec['requests_identical']} of {sec['requests_compared']} calls of the same case, "
             "repeat and step had the same messages on every arm that made them"
             + (" (none was made on two arms: nothing compared)." if not sec["requests_compared"] else ".")]
    if _unchecked(sec):
        notes.append(f"Not checked: {', '.join(_unchecked(sec))}: the recording holds no prompt length for a call "
                     "whose response had neither usage nor llama.cpp's timings (an agent that streamed without "
                     "stream_options.include_usage against vLLM, SGLang or a hosted API; a request log without "
                     "responses), so nothing says the arm received the recorded prompt there.")
    for a in sec["arms"]:
        for d in a["differing"]:
            got = "—" if d["prompt_tokens"] is None else f"{d['prompt_tokens']:,}"
            notes.append(f"{a['arm']} {d['case']} #{d['repeat'] + 1} step {d['step']}: {got} prompt tokens, recorded "
                         f"{d['recorded_tokens'] or 0:,}: {d['reason']}")
    notes += [f"{d['arm']} {d['case']} #{d['repeat'] + 1} step {d['step']} departed: {d['text']}"
              for d in sec["departures"]]
    notes += [f"Not replayed: {text}" for text in sec.get("left_out") or []]
    return Table("recorded", f"Recorded turns replayed ({len(sec['cases'])} turns, mode {_modes(sec)}): prompt tokens "
                             f"against the recording's (within {pct(sec['tolerance'])})",
                 ["arm", "calls", "prompts as recorded", "largest deviation", "departed calls", "why not"], rows,
                 notes=notes)
