"""The conditions table: each arm's knobs (declared, or discovered from its endpoint) and how its caches were
brought to the experiment's declared state before each turn (:mod:`leverbench.runner.cache_state`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..levers import registry
from .table import Table

if TYPE_CHECKING:
    from ..schema.experiment_rows import ArmRow
    from ..schema.repeat_rows import RepeatArmRow
    from ..schema.summary import Summary


def conditions_table(summary: Summary) -> Table:
    keys: list[str] = []
    for a in summary["arms"]:
        for k in a.get("knobs", a["conditions"]):
            if k not in keys:
                keys.append(k)

    def value(a: ArmRow, k: str) -> str:
        knobs = a.get("knobs", a["conditions"])
        if k not in knobs:
            return "—"
        return str(knobs[k]) + ("" if k in a["conditions"] else " *")

    rep = summary.get("repeats")
    method = {r["arm"]: m for r in (rep.get("arms") if rep else None) or [] if (m := r.get("method"))}
    between = ["before each turn"] if method else []

    def how(a: ArmRow) -> list[str]:
        m = method.get(a["name"])
        if not between:
            return []
        if m is None:
            return ["—"]
        return [m]
    rows = [[a["name"], a["role"] or "", *(value(a, k) for k in keys), *how(a)] for a in summary["arms"]]
    notes = ["Declared in the experiment's conditions; * discovered from the endpoint (not declared)."]
    if between:
        notes.append(f"Before each turn every arm was brought to the declared cache state "
                     f"({rep.get('state') if rep else None}): "
                     "reset through the engine's endpoint, salted (a tag unique to the turn before its first prompt), "
                     "restarted, or left as it was (keep, none): the table below says whether it took.")
    return Table("conditions", "Arms and their knobs", ["arm", "role", *keys, *between], rows, notes=notes)


def repeats_table(summary: Summary) -> Table | None:
    """Whether the repeats were exchangeable (``repeats``): per arm its method, the check before its turns, the
    turns it could not bring to the state, its revisit share and its drafter's acceptance by visit."""
    rep = summary.get("repeats")
    arms = (rep.get("arms") if rep else None) or []
    if not rep or not arms:
        return None

    def share(v: float | None) -> str:
        return "—" if v is None else f"{v:.1%}"

    def check(r: RepeatArmRow) -> str:
        if r.get("check") is None:
            return "—"
        counts = (f" ({r['cached_before']} → {r['cached_after']} cached)"
                  if r.get("cached_before") is not None and r.get("cached_after") is not None else "")
        return f"{r['check']}{counts}"
    def drafter(r: RepeatArmRow) -> str:
        first, later = r.get("draft_first"), r.get("draft_later")
        return f"{first:.2f} → {later:.2f}" if isinstance(first, float) and isinstance(later, float) else "—"
    rows = [[r["arm"], r.get("method") or "—", check(r), str(r.get("failed_turns") or 0),
             share(r.get("revisit_share")), drafter(r)] for r in arms]
    notes = [f"Declared state: {rep.get('state') or 'none (a run before ledger v5)'}. Revisit share: of the prompt "
             "tokens each turn's first visit computed, the share later repeats found cached by the arm's own earlier "
             "repeats (10 % or more: the comparison is refused, unless the state is keep; —: its calls report no "
             "cached tokens, so it could not be checked). Turns not brought to it failed (class cache_state) and do "
             "not count; --resume runs them again. Drafter: drafted tokens accepted per output token, first visits → "
             "later repeats."]
    notes += [f"{p['arm']} vs {p['vs']}: first visits "
              + (f"{p['first_visit']:.2f}x" if p.get("first_visit") is not None else "not measured")
              + (f"; refused: {p['refused']}" if p.get("refused") else "") for p in rep.get("pairs") or []]
    natural = registry.natural()  # the lever whose drafts the last column counts (the drafter)
    return Table("repeats", "Were the repeats exchangeable?",
                 ["arm", "before each turn", "check", "turns not brought to it", "revisit share",
                  natural.words if natural else "drafts"], rows, notes=notes)


def tools_table(summary: Summary) -> Table | None:
    """Whether each case's tool schemas reached the model, per arm (``tools``); None where no call sent tools."""
    rows = [[r["arm"], r["case"], str(r["calls"]), str(r["reached"]), str(r["dropped"]), str(r["not_known"]),
             r.get("how") or "not recorded (a run before the check)"] for r in summary.get("tools") or []
            if isinstance(r, dict)]
    if not rows:
        return None
    dropped = any(r[4] != "0" for r in rows)
    notes = ["Asked once per arm and tool set, before the first call that sends it: the engine's own word (llama.cpp "
             "/props chat_template_caps.supports_tools), then the prompt its chat template renders, counted with and "
             "without the schemas (llama.cpp /apply-template, vLLM and SGLang /tokenize). Not known: the endpoint "
             "answers neither (a hosted API)."]
    if dropped:
        notes.append("A dropped schema never reached the model: those turns ran without their tools, so they are not "
                     "agent turns with tools, and their prompt counts leave the schemas out. Serve a chat template "
                     "that supports tools (llama.cpp: --jinja with --chat-template-file, or a model whose template "
                     "has them) to measure the agent as it runs.")
    return Table("tools", "Did the tool schemas reach the model?",
                 ["arm", "case", "calls with tools", "reached", "dropped", "not known", "how it was found"], rows,
                 notes=notes)
