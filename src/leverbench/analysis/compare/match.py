"""Which arms and cases of two runs are the same, and every condition that differs between the runs.

**Cases** are matched by what they sent (:func:`.runs.case_prints`), not by name: a case renamed but sending the same
first request is compared, and a case of the same name whose prompts were edited is not ("its prompts differ").

**Arms** are matched, in order: by ``--match BASE=LATER``; then a baseline arm whose knobs (declared and discovered,
:mod:`..base.knobs`, judged across the arms of both runs) equal those of exactly one unmatched later arm; then by
name.  An arm matched by name may differ in knobs: that is what the comparison measures, and the knobs are listed.

**What changed** (:func:`changes`): the tool's version, the ledger's schema and every experiment setting that differs
(scope "run"), every fact of the host (scope "host": CPU, cores, OS, Python, GPUs), and per matched arm every knob
that differs (scope "arm": engine and version, model file, flags, request fields, declared conditions, discovered
facts).  The simulator's own settings are no fact (:data:`..base.knobs.NOT_FACTS`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from ...errors import BadInput
from ...json_types import JSONValue
from ...schema.compare_rows import ArmMatch, CaseMatch, ChangedRow
from ..base.knobs import all_arm_knobs, canonical, differing
from .runs import RunView

#: Host facts that say where a fact came from, or why it is unknown: not the machine.
_NOT_HOST = ("gpu.unknown", "gpu.source")


def _flat(d: JSONValue, path: str = "") -> dict[str, JSONValue]:
    if isinstance(d, dict):
        out: dict[str, JSONValue] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{path}{k}."))
        return out
    return {path[:-1]: d}


def _diff(a: Mapping[str, JSONValue], b: Mapping[str, JSONValue]) -> list[tuple[str, JSONValue, JSONValue]]:
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if canonical(a.get(k)) != canonical(b.get(k))]


def arm_knobs(base: RunView, later: RunView) -> tuple[dict[str, dict[str, JSONValue]], dict[str, dict[str, JSONValue]]]:
    """The knobs of every arm of both runs, judged together (a fact in which any two arms differ is a knob)."""
    header: dict[str, Mapping[str, JSONValue]] = {}
    requests: dict[str, Mapping[str, JSONValue] | None] = {}
    for tag, run in (("b", base), ("l", later)):
        arms = cast("Mapping[str, Mapping[str, JSONValue]]", run.ds.header.get("arms") or {})
        for a in run.ds.arms:
            header[f"{tag}:{a}"] = arms.get(a, {})
            requests[f"{tag}:{a}"] = next((c.get("request") for c in run.ds.config.get("arms", [])
                                           if c.get("name") == a), None)
    knobs, _ = all_arm_knobs(header, requests, list(header))
    return ({a: knobs[f"b:{a}"] for a in base.ds.arms}, {a: knobs[f"l:{a}"] for a in later.ds.arms})


def match_arms(base: RunView, later: RunView, pairs: Sequence[tuple[str, str]]) -> list[ArmMatch]:
    """Each baseline arm and the later arm it is compared with (module docstring); *pairs*: ``--match``."""
    kb, kl = arm_knobs(base, later)
    out: dict[str, ArmMatch] = {}
    free = list(later.ds.arms)
    for b, lt in pairs:
        if b not in kb:
            raise BadInput(f"--match {b}={lt}: {base.path} has no arm {b!r} (its arms: {', '.join(base.ds.arms)})")
        if lt not in kl:
            continue  # (another later run may hold it: --match applies to every later run that has the arm)
        if lt in free:
            free.remove(lt)
            out[b] = {"arm": b, "later": lt, "how": "--match", "changed": differing(kb[b], kl[lt])}
    for b in base.ds.arms:
        same = [lt for lt in free if not differing(kb[b], kl[lt])]
        if b not in out and len(same) == 1:
            free.remove(same[0])
            out[b] = {"arm": b, "later": same[0], "how": "knobs", "changed": []}
    for b in base.ds.arms:
        if b not in out and b in free:
            free.remove(b)
            out[b] = {"arm": b, "later": b, "how": "name", "changed": differing(kb[b], kl[b])}
    return [out.get(b) or {"arm": b, "later": None, "how": None, "changed": []} for b in base.ds.arms]


def match_cases(base: RunView, later: RunView) -> list[CaseMatch]:
    """Each baseline case and the later case that sent the same (module docstring), or why none."""
    by_print: dict[str, list[str]] = {}
    for case, (_, p) in later.prints.items():
        by_print.setdefault(p, []).append(case)
    taken: set[str] = set()
    out: list[CaseMatch] = []
    for case in base.ds.cases:
        how, p = base.prints[case]
        hits = [c for c in by_print.get(p, []) if c not in taken and c in later.ds.cases]
        if hits:
            hit = case if case in hits else hits[0]
            taken.add(hit)
            same = how == later.prints[hit][0] == "prompt hash"
            out.append({"case": case, "later": hit, "how": "prompt hash" if same else "case definition",
                        "compared": True, "reason": None})
        elif case in later.prints:
            lhow, lp = later.prints[case]
            what = ("its first request differs (SHA-256 of the messages sent: "
                    f"{p[:12]}… against {lp[:12]}…)" if how == lhow == "prompt hash" else
                    "its definition differs (prompt, system, documents, steps or sampling)")
            out.append({"case": case, "later": None, "how": None, "compared": False,
                        "reason": f"not compared: its prompts differ: {what}"})
        else:
            out.append({"case": case, "later": None, "how": None, "compared": False,
                        "reason": "not compared: no case of the later run sent what it sent"})
    return out


def changes(base: RunView, later: RunView, arms: Sequence[ArmMatch]) -> list[ChangedRow]:
    """Every condition that differs between the runs (module docstring)."""
    hb, hl = base.ds.header, later.ds.header
    out: list[ChangedRow] = []
    run_facts: list[tuple[str, JSONValue, JSONValue]] = [
        ("tool version", hb.get("tool_version"), hl.get("tool_version")), ("ledger schema", hb["schema"], hl["schema"])]
    for key, a, b in run_facts:
        if a != b:
            out.append({"scope": "run", "arm": None, "what": key, "baseline": a, "later": b})
    eb = {k: v for k, v in dict(base.ds.config["experiment"]).items() if k != "name"}
    el = {k: v for k, v in dict(later.ds.config["experiment"]).items() if k != "name"}
    for k, x, y in _diff(cast("Mapping[str, JSONValue]", eb), cast("Mapping[str, JSONValue]", el)):
        out.append({"scope": "run", "arm": None, "what": f"experiment.{k}", "baseline": x, "later": y})
    host_b = {k: v for k, v in _flat(cast("JSONValue", hb.get("host") or {})).items() if k not in _NOT_HOST}
    host_l = {k: v for k, v in _flat(cast("JSONValue", hl.get("host") or {})).items() if k not in _NOT_HOST}
    for k, x, y in _diff(host_b, host_l):
        out.append({"scope": "host", "arm": None, "what": k, "baseline": x, "later": y})
    kb, kl = arm_knobs(base, later)
    for m in arms:
        if m["later"] is not None:
            for k in differing(kb[m["arm"]], kl[m["later"]]):
                out.append({"scope": "arm", "arm": m["arm"], "what": k, "baseline": kb[m["arm"]].get(k),
                            "later": kl[m["later"]].get(k)})
    return out

