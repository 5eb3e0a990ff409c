"""Whether the tool schemas a case sends reached the model, per arm and case, and the comparisons that served
different prompts because of it.

An engine whose chat template cannot render tools drops them without an error (see
:mod:`leverbench.runner.tools_check`, which asks each arm once per tool set and writes the answer on every call
that sent tools: ``tools_reached`` "yes", "no", or "not known" when the endpoint could not tell).  Here:

- a row per (arm, case) whose calls sent tools (a turn's or a load stage's): ``calls`` (that sent tools),
  ``reached``, ``dropped``, ``not_known``, and the check's words;
- a warning (kind ``tools_dropped``) per arm and case with dropped calls: its turns ran without their tool
  schemas, so they are not agent turns with tools (the reports say so wherever they speak of the prompt);
- a comparison whose two arms differ on a case — the schemas reached the model on one, were dropped on the
  other — is refused (reason code ``tools``): the arms were sent the same request but served different prompts.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ...ledger.reader import Columns
from ...ledger.rows import CallRow
from ...schema.reason_codes import TOOLS
from ...schema.tools_rows import ToolsRow
from ...schema.warning_kinds import RunWarning, WarningKind
from ..base.guard import Reason
from ..base.knobs import Comparison


def tools_rows(calls: Columns, load_calls: Iterable[CallRow] = ()) -> list[ToolsRow]:
    """The section's rows from the ledger's ``call`` records as columns and its ``load`` records (a load stage's
    calls; those that sent no tools are passed over), in the order their (arm, case) first appears."""
    rows: dict[tuple[str, str], ToolsRow] = {}

    def count(arm: object, case: object, reached: object, how: object) -> None:
        key = (str(arm), str(case))
        row = rows.setdefault(key, {"arm": key[0], "case": key[1], "calls": 0, "reached": 0, "dropped": 0,
                                    "not_known": 0, "how": None})
        row["calls"] += 1
        row["reached" if reached == "yes" else "dropped" if reached == "no" else "not_known"] += 1
        if row["how"] is None and isinstance(how, str):
            row["how"] = how

    sent = calls.numbers.get("tools_sent")
    if sent is not None and calls.n:
        labels = [calls.labels[k] for k in ("arm", "case", "tools_reached", "tools_check")]
        for i in np.flatnonzero(np.nan_to_num(sent) > 0):
            count(*(names[codes[i]] for codes, names in labels))
    for c in load_calls:
        if isinstance(sent_c := c.get("tools_sent"), int) and sent_c > 0:
            count(c.get("arm"), c.get("case"), c.get("tools_reached"), c.get("tools_check"))
    # the check runs once per arm and tool set: its words are on one case's call, and hold for the arm's
    said: dict[str, str] = {}
    for row in rows.values():
        if row["how"] is not None:
            said.setdefault(row["arm"], row["how"])
    for row in rows.values():
        row["how"] = row["how"] or said.get(row["arm"])
    return list(rows.values())


def tools_reached(rows: list[ToolsRow], comps: Iterable[Comparison]
                  ) -> tuple[dict[tuple[str, str], list[Reason]], list[RunWarning]]:
    """The comparisons refused (reason code ``tools``) and the warnings (module docstring)."""
    warnings = [RunWarning(WarningKind.TOOLS_DROPPED,
                           f"{r['arm']}/{r['case']}: the tool schemas did not reach the model in {r['dropped']} of "
                           f"{r['calls']} calls that sent them ({r['how'] or 'the engine dropped them'}); these "
                           "turns ran without their tools: they are not agent turns with tools, and their prompts "
                           "are shorter than the request says", r["arm"], r["case"])
                for r in rows if r["dropped"]]
    fate = {(r["arm"], r["case"]): "dropped" if r["dropped"] else "reached" if r["reached"] else None for r in rows}
    reasons: dict[tuple[str, str], list[Reason]] = {}
    for comp in comps:
        cases = sorted({case for (arm, case) in fate if arm in (comp.arm, comp.vs)})
        differ = [c for c in cases if {fate.get((comp.arm, c)), fate.get((comp.vs, c))} == {"dropped", "reached"}]
        if differ:
            reasons[(comp.arm, comp.vs)] = [(TOOLS, "the tool schemas reached the model on one arm and were "
                                             f"dropped on the other (case {', '.join(differ)}): different prompts")]
    return reasons, warnings
