"""The replay's data: each finished turn's calls with their recorded chunk times (and texts, when stored).

Both pages embed it (:mod:`.html`): ``report.html`` all turns up to a bound, the replay page one
case and repeat of the chosen arms.  It travels to the page's script as JSON; the script inserts
text with ``textContent`` only.

Public API: :func:`replay_data`, :func:`replay_choice`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from typing_extensions import TypedDict

from ..config.settings import RunSettings
from ..errors import BadInput
from ..ledger.reader import Ledger
from .jsonio import number

if TYPE_CHECKING:
    from ..ledger.rows import CallRow, RunHeaderRow, TurnRow

__all__ = ["CallView", "ReplayArm", "ReplayData", "TurnView", "replay_choice", "replay_data"]


class CallView(TypedDict):
    """One call of a turn as the replay shows it: its step, when it started (seconds after the turn's first send,
    its request out), its time to first token and latency, its chunks' times (after its start), sizes and texts
    (None: not stored), the last user prompt it sent, its output tokens, its tool calls and its error."""

    step: int
    start: float
    ttft: float | None
    latency: float | None
    t: list[float]
    chars: list[int]
    text: list[str] | None
    prompt: str | None
    tokens: int | None
    tools: list[str]
    error: str | None


class TurnView(TypedDict):
    """One finished turn (arm, case, repeat): when its last call ended, its time, whether every call's text was
    stored, its error and its calls."""

    arm: str
    case: str
    repeat: int
    end: float
    turn_s: float | None
    text: bool
    error: str | None
    calls: list[CallView]


class ReplayArm(TypedDict):
    """An arm of the replay: its name, role and declared conditions (as text)."""

    name: str
    role: str | None
    conditions: dict[str, str]


class ReplayData(TypedDict):
    """The replay's data (:func:`replay_data`): whether the ledger stored the answers' text, the arms, the cases
    and repeats embedded, whether repeats were left out for size, how many turns were embedded of those recorded,
    and the turns."""

    text_stored: bool
    arms: list[ReplayArm]
    cases: list[str]
    repeats: list[int]
    truncated: bool
    turns_embedded: int
    turns_recorded: int
    turns: list[TurnView]


def _store_text(ledger: Ledger[RunHeaderRow]) -> bool:
    return RunSettings.of_header(ledger.header["config"], ledger.path).store_text


def _names(ledger: Ledger[RunHeaderRow]) -> tuple[list[str], list[str]]:
    cfg = ledger.header.get("config")
    arms = [a["name"] for a in (cfg.get("arms", []) if cfg else []) if isinstance(a, dict) and "name" in a]
    cases = [c["name"] for c in (cfg.get("cases", []) if cfg else []) if isinstance(c, dict) and "name" in c]
    for r in ledger.of_kind("turn"):
        if r["arm"] not in arms:
            arms.append(r["arm"])
        case = r.get("case")
        if case is not None and case not in cases:
            cases.append(case)
    return arms, cases


def _last_user_prompt(messages: object) -> str | None:
    if not isinstance(messages, list):
        return None
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, list):  # content parts
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            if isinstance(c, str):
                return c if len(c) <= 400 else c[:200] + " … " + c[-180:]
    return None


def _chunks_text(call: CallRow) -> list[str] | None:
    """The text of each chunk, aligned with chunk_t, or None when the ledger did not store it."""
    n = len(call.get("chunk_t") or [])
    ct = call.get("chunk_text")
    if isinstance(ct, list) and len(ct) == n and all(isinstance(x, str) for x in ct):
        return ct
    out = call.get("output_text")
    chars = call.get("chunk_chars") or []
    if isinstance(out, str) and len(chars) == n:
        reasoning = call.get("reasoning_text") or ""
        full = reasoning + out if isinstance(reasoning, str) else out
        if sum(chars) == len(full):  # slice the stored output by the recorded chunk sizes
            pieces, i = [], 0
            for k in chars:
                pieces.append(full[i:i + k])
                i += k
            return pieces
    return None


def _turn_view(turn: TurnRow, calls: list[CallRow]) -> TurnView:
    calls = sorted(calls, key=lambda c: (c.get("step", 0), c.get("t_send") or 0))
    t0 = min((c["t_send"] for c in calls if number(c.get("t_send")) is not None), default=None)
    out_calls: list[CallView] = []
    text_ok = bool(calls)
    end = 0.0
    for c in calls:
        start = (c["t_send"] - t0) if t0 is not None and number(c.get("t_send")) is not None else 0.0
        # its chunk times count from when its request went out
        start += (number(c.get("connect_s")) or 0.0) + (number(c.get("send_s")) or 0.0)
        texts = _chunks_text(c)
        if texts is None:
            text_ok = False
        ct = [round(float(x), 4) for x in c.get("chunk_t") or []]
        lat = number(c.get("latency_s"))
        err = c.get("error")
        tc = c.get("tool_calls") or []
        out_calls.append({
            "step": c.get("step", 0), "start": round(start, 4), "ttft": number(c.get("ttft_s")),
            "latency": lat, "t": ct, "chars": list(c.get("chunk_chars") or [0] * len(ct)), "text": texts,
            "prompt": _last_user_prompt(c.get("input_messages")),
            "tokens": c.get("completion_tokens"),
            "tools": [f"{t.get('name', '')}({t.get('arguments', '')})" for t in tc if isinstance(t, dict)],
            "error": None if err is None else (f"{err.get('class', 'error')}: {err.get('message', '')}"
                                               if isinstance(err, dict) else str(err)),
        })
        end = max(end, start + (lat if lat is not None else (ct[-1] if ct else 0.0)))
    turn_s = number(turn.get("turn_s"))
    return {"arm": turn["arm"], "case": turn["case"], "repeat": turn["repeat"],
            "end": round(max(end, turn_s or 0.0), 4), "turn_s": turn_s, "text": text_ok,
            "error": None if turn.get("error") is None else str(turn.get("error")), "calls": out_calls}


def replay_data(ledger: Ledger[RunHeaderRow], *, cases: list[str] | None = None, arms: list[str] | None = None,
                repeats: list[int] | None = None, max_events: int | None = None) -> ReplayData:
    """The replay's data: for each finished turn (arm, case, repeat), its calls' chunk times and texts.

    Call k of a turn starts at its t_send + connect_s + send_s − the turn's first t_send; chunk times are seconds
    after that (after its request went out).  ``text_stored`` is False when the ledger holds no text (then the
    replay shows timing only).
    With ``max_events``, whole repeats are added in order while the chunk count stays under it.
    """
    all_arms, all_cases = _names(ledger)
    want_arms = arms or all_arms
    want_cases = cases or all_cases
    turns: dict[tuple[str, str, int | None], TurnRow] = {}
    for t in ledger.of_kind("turn"):
        arm, case, rep = t["arm"], t.get("case"), t.get("repeat")
        if arm in want_arms and case is not None and case in want_cases and (repeats is None or rep in repeats):
            turns[(arm, case, rep)] = t  # the latest attempt of a unit (a failed one re-run on resume supersedes it)
    by_id: dict[str, list[CallRow]] = {}
    ids = {t.get("turn_id") for t in turns.values()}
    for c in ledger.of_kind("call"):
        if c.get("turn_id") in ids:
            by_id.setdefault(c["turn_id"], []).append(c)
    case_pos = {c: i for i, c in enumerate(want_cases)}
    units: dict[tuple[int, int], list[TurnRow]] = {}
    for (_, case, rep), t in turns.items():
        if isinstance(rep, int):
            units.setdefault((rep, case_pos[case]), []).append(t)
    views: list[TurnView] = []
    events = 0
    truncated = False
    for key in sorted(units):  # repeat by repeat, case by case, all arms of a case together
        batch = [_turn_view(t, by_id.get(tid, []) if (tid := t.get("turn_id")) is not None else [])
                 for t in units[key]]
        n = sum(len(c["t"]) + 1 for v in batch for c in v["calls"])
        if max_events is not None and views and events + n > max_events:
            truncated = True
            break
        events += n
        views.extend(batch)
    arm_h = ledger.header.get("arms") or {}
    order = {a: i for i, a in enumerate(want_arms)}
    views.sort(key=lambda v: (case_pos[v["case"]], v["repeat"], order.get(v["arm"], 99)))
    return {
        "text_stored": _store_text(ledger) or any(v["text"] for v in views),
        "arms": [{"name": a, "role": (arm_h.get(a) or {}).get("role"),
                  "conditions": {k: str(v) for k, v in ((arm_h.get(a) or {}).get("conditions") or {}).items()}}
                 for a in want_arms],
        "cases": [c for c in want_cases if any(v["case"] == c for v in views)],
        "repeats": sorted({v["repeat"] for v in views}),
        "truncated": truncated, "turns_embedded": len(views), "turns_recorded": len(turns),
        "turns": views,
    }


def replay_choice(ledger: Ledger[RunHeaderRow], case: str, arms: list[str], repeat: int = 0) -> ReplayData:
    """:func:`replay_data` of one case and repeat for the chosen arms, each of which has a finished turn
    there.  Raises :class:`BadInput` naming the valid values for an unknown case, arm or repeat."""
    all_arms, all_cases = _names(ledger)
    if case not in all_cases:
        raise BadInput(f"unknown case {case!r}; the run's cases: {', '.join(map(repr, all_cases)) or 'none'}")
    if not arms:
        raise BadInput(f"name at least one arm; the run's arms: {', '.join(map(repr, all_arms))}")
    bad = [a for a in arms if a not in all_arms]
    if bad:
        raise BadInput(f"unknown arm(s) {', '.join(map(repr, bad))}; the run's arms: {', '.join(map(repr, all_arms))}")
    if len(set(arms)) != len(arms):
        raise BadInput(f"arm named twice in {', '.join(arms)}")
    data = replay_data(ledger, cases=[case], arms=arms, repeats=[repeat])
    have = {v["arm"] for v in data["turns"]}
    missing = [a for a in arms if a not in have]
    if missing:
        reps = sorted({r for t in ledger.of_kind("turn") if t.get("case") == case
                       and t.get("arm") in arms and isinstance(r := t.get("repeat"), int)})
        raise BadInput(f"no finished turn of case {case!r}, repeat {repeat} for arm(s) "
                       f"{', '.join(map(repr, missing))}; "
                       f"repeats recorded for this case: {', '.join(map(str, reps)) or 'none'}")
    return data
