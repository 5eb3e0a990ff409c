"""Whether the arms replayed the recorded turns as recorded: the summary's ``recorded`` section.

A recorded turn is a fixed workload only if every arm receives it.  Each replayed call's record carries the
prompt tokens the recording gave for the request it stands for (``recorded_prompt_tokens``:
``runner.recorded_turn``; its usage, else llama.cpp's ``timings`` prompt_n + cache_n, which a stream carries
without ``include_usage``: ``workload.recorded.base``); the server's count for the call is its ``prompt_tokens``.
Per arm:

- a call is *compared* when both counts are there and its messages are the recorded call's (``as_recorded``: a
  live replay's call after its path departed sends other messages, and is counted as departed instead); a call
  whose recorded call has no prompt length (an agent that streamed without ``stream_options.include_usage``
  against vLLM or SGLang, which send no timings; a request log without responses) is not compared, counted
  (``no_recorded_usage``): nothing checked it;
- its deviation is prompt_tokens / recorded − 1; it is *within* when \\|deviation\\| ≤ :data:`TOLERANCE`;
- a call beyond says why: the recording masked text in it (``--redact``), else, when every differing call of
  the arm differs alike (the same sign, their ratios within :data:`ALIKE` of each other), a different tokenizer
  or chat template than the recording's upstream (the arm's model named), else the call's own prompt.

Across arms, the calls of the same case, repeat and step are compared by the hash of their messages
(``input_sha256``): identical requests, or not.  A live replay's departures (``departed``) are listed, and what
the import of each request log left out (the header's ``recorded_skipped``: lines that cannot be replayed,
failed exchanges) is a warning.
"""

from __future__ import annotations

from collections import defaultdict

from ...ledger.reader import Ledger
from ...ledger.rows import CallRow, RunConfigRow, RunHeaderRow
from ...schema.recorded_rows import (
    MAX_LISTED,
    DepartureRow,
    DifferingCall,
    RecordedArmRow,
    RecordedCaseRow,
    RecordedSection,
)
from ...schema.warning_kinds import RunWarning, WarningKind
from ..base.dataset import Dataset

TOLERANCE = 0.01  # a prompt within 1 % of the recording's length is the recorded prompt
ALIKE = 0.02  # differing calls whose ratios lie within this of each other differ alike (a tokenizer's)


def recorded_cases(config: RunConfigRow) -> list[RecordedCaseRow]:
    """The experiment's cases that replay a recorded turn (the header's config)."""
    return [{"case": c["name"], "recorded_from": source, "turn": c.get("recorded_turn"),
             "mode": "live" if c.get("replay") == "live" else "recorded"}
            for c in config.get("cases", []) if isinstance(c, dict) and (source := c.get("recorded_from"))]


def left_out_notes(config: RunConfigRow) -> list[tuple[str, str]]:
    """(case of recorded turns, what the import of its log left out), once per case (its turns share it)."""
    out: dict[str, str] = {}
    for c in config.get("cases", []):
        if isinstance(c, dict) and (source := c.get("recorded_from")) and c.get("recorded_skipped"):
            out.setdefault(source, f"case {source!r}: {c['recorded_skipped']}")
    return list(out.items())


def _deviation(r: CallRow) -> float | None:
    rec, got = r.get("recorded_prompt_tokens"), r.get("prompt_tokens")
    return None if not rec or got is None else got / rec - 1


def _arm_row(arm: str, calls: list[CallRow], model: str | None) -> RecordedArmRow:
    compared = [r for r in calls if r.get("as_recorded") and _deviation(r) is not None and r.get("error") is None]
    beyond = [r for r in compared if abs(_deviation(r) or 0.0) > TOLERANCE]
    ratios = [1 + (_deviation(r) or 0.0) for r in beyond if not r.get("recorded_redactions")]
    alike = len(ratios) >= 2 and (all(x > 1 for x in ratios) or all(x < 1 for x in ratios)) \
        and max(ratios) / min(ratios) - 1 <= ALIKE
    reason = (f"every differing call differs alike (×{sum(ratios) / len(ratios):.3f}): a different tokenizer or chat "
              f"template than the recording's upstream ({arm} serves {model or 'an unknown model'})") if alike else None
    unanswered = [r for r in calls if r.get("as_recorded") and r.get("error") is None
                  and r.get("recorded_prompt_tokens") and r.get("prompt_tokens") is None]
    differing: list[DifferingCall] = []
    for r in beyond + unanswered:
        if r.get("prompt_tokens") is None:
            why = "the arm reported no prompt tokens (no usage, no tokenizer)"
        elif r.get("recorded_redactions"):
            why = f"the recording masked {r['recorded_redactions']} match(es) in it (--redact): not the recorded text"
        else:
            why = reason or "this call's prompt alone differs: the arm's chat template or request fields count it apart"
        dev = _deviation(r)
        differing.append({"case": r["case"], "repeat": int(r.get("repeat") or 0), "step": int(r.get("step") or 0),
                          "recorded_tokens": r.get("recorded_prompt_tokens"), "prompt_tokens": r.get("prompt_tokens"),
                          "deviation": None if dev is None else round(dev, 6), "reason": why})
    devs = [_deviation(r) or 0.0 for r in compared]
    worst = max(devs, key=abs) if devs else None
    return {"arm": arm, "calls": len(calls), "compared": len(compared), "within": len(compared) - len(beyond),
            "max_deviation": round(worst, 6) if worst is not None else None,
            "no_recorded_usage": sum(1 for r in calls if r.get("as_recorded") and r.get("error") is None
                                     and not r.get("recorded_prompt_tokens")),
            "failed_calls": sum(1 for r in calls if r.get("error") is not None),
            "departed_calls": sum(1 for r in calls if r.get("departed")), "differing_calls": len(differing),
            "differing": differing[:MAX_LISTED], "reason": reason}


def fidelity(ledger: Ledger[RunHeaderRow], ds: Dataset) -> tuple[RecordedSection | None, list[RunWarning]]:
    """The ``recorded`` section and its warnings (None, none: the run replayed no recorded turn).  Reads the
    counted turns' calls of the recorded cases from the ledger (only in a run that has them)."""
    cases = recorded_cases(ds.config)
    if not cases:
        return None, []
    names = {c["case"] for c in cases}
    counted = {t for t in ds.turn_ids if t is not None}
    calls = [r for r in ledger.of_kind("call") if r.get("case") in names and r.get("turn_id") in counted]
    by_arm: dict[str, list[CallRow]] = defaultdict(list)
    by_place: dict[tuple[str, int, int], dict[str, str | None]] = defaultdict(dict)
    for r in calls:
        by_arm[r["arm"]].append(r)
        if r.get("error") is None:
            by_place[(r["case"], int(r.get("repeat") or 0), int(r.get("step") or 0))][r["arm"]] = r.get("input_sha256")
    arms_h = ds.header.get("arms") or {}
    rows = [_arm_row(a, by_arm[a], (arms_h.get(a) or {}).get("model")) for a in ds.arms if by_arm.get(a)]
    shared = [hashes for hashes in by_place.values() if len(hashes) > 1]
    departures: list[DepartureRow] = []
    warnings: list[RunWarning] = []
    for a in ds.arms:
        gone = [r for r in by_arm.get(a, []) if r.get("departed")]
        departures += [{"arm": a, "case": r["case"], "repeat": int(r.get("repeat") or 0),
                        "step": int(r.get("step") or 0), "text": r["departed"]} for r in gone[:MAX_LISTED]]
        if gone:
            turns = len({(r["case"], r.get("repeat")) for r in gone})
            warnings.append(RunWarning(WarningKind.REPLAY_DEPARTED, f"arm {a!r}: the live replay departed from the "
                                       f"recording in {turns} turn(s), first at {gone[0]['case']} step "
                                       f"{gone[0].get('step')}: {gone[0]['departed']}; its work is not the "
                                       "recording's there", a, gone[0]["case"]))
    for row in rows:
        if row["differing_calls"]:
            first = row["differing"][0]
            text = (f"arm {row['arm']!r}: {row['differing_calls']} of {row['calls']} replayed call(s) received a "
                    f"prompt whose length is not the recording's (within {TOLERANCE:.0%}): {first['reason']}")
            warnings.append(RunWarning(WarningKind.REPLAY_PROMPT_DIFFERS, text, row["arm"], first["case"]))
        if row["no_recorded_usage"]:
            warnings.append(RunWarning(WarningKind.REPLAY_UNCHECKED, f"arm {row['arm']!r}: {row['no_recorded_usage']} "
                                       f"of {row['calls']} replayed call(s) not checked against the recording: it has "
                                       "no usage for them (record with stream_options.include_usage, or a log with "
                                       "responses)", row["arm"]))
    left_out = left_out_notes(ds.config)
    warnings += [RunWarning(WarningKind.REPLAY_LINES_SKIPPED, text, None, case) for case, text in left_out]
    section: RecordedSection = {
        "tolerance": TOLERANCE, "cases": cases, "arms": rows, "requests_compared": len(shared),
        "requests_identical": sum(1 for h in shared if len(set(h.values())) == 1), "departures": departures,
        "left_out": [text for _, text in left_out]}
    return section, warnings
