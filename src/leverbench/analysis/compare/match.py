"""Which arms and cases of two runs are the same, and every condition that differs between the runs.

**Cases** are matched by what they sent (:func:`.runs.case_prints`), not by name: a case renamed but sending the same
first request is compared, and a case of the same name whose prompts were edited is not ("its prompts differ").
Two cases are the same by their prompt hashes where both runs have them, else by their definitions.  A variant case
(``[[cases]] variants``) is listed as not compared.

**Arms** are matched, in order: by ``--match BASE=LATER``; then a baseline arm whose knobs (declared and discovered,
:mod:`..base.knobs`, judged across the arms of both runs) equal those of exactly one unmatched later arm; then by
name.  An arm matched by name may differ in knobs: that is what the comparison measures, and the knobs are listed.

**What changed** (:func:`changes`): the experiment's name, the tool's version, the ledger's schema and every
experiment setting that differs (scope "run"), every fact of the host (scope "host": CPU, cores, OS, Python,
GPUs), and per matched arm every knob that differs (scope "arm": engine and version, model file, flags, request
fields, declared conditions, discovered facts).  The simulator's own settings are no fact
(:data:`..base.knobs.NOT_FACTS`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, cast

from ...errors import BadInput
from ...json_types import JSONValue
from ...schema.compare_rows import ArmMatch, CaseMatch, ChangedRow
from ..base.knobs import NOT_FLAGS, all_arm_knobs, canonical, differing, engine_flags, flatten
from .runs import RunView

#: Host facts that say where a fact came from, or why it is unknown: not the machine.
_NOT_HOST = ("gpu.unknown", "gpu.source")


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


_How = Literal["prompt hash", "case definition"]


def _same(base: RunView, later: RunView, case: str, lcase: str) -> tuple[bool, _How]:
    """Whether *case* and *lcase* sent the same, by their prompt hashes where both runs have them, else by their
    definitions (a run that salts against one that resets its cache: :mod:`.runs`)."""
    (hb, db), (hl, dl) = base.prints[case], later.prints[lcase]
    if hb is not None and hl is not None:
        return hb == hl, "prompt hash"
    return db == dl, "case definition"


def match_cases(base: RunView, later: RunView) -> list[CaseMatch]:
    """Each baseline case and the later case that sent the same (module docstring), or why none; then each variant
    case of the baseline (``[[cases]] variants``), not compared, with the reason."""
    taken: set[str] = set()
    out: list[CaseMatch] = []
    for case in base.ds.cases:
        hits = [(lc, how) for lc in later.ds.cases if lc not in taken for same, how in [_same(base, later, case, lc)]
                if same]
        if hits:
            hit, how = next((h for h in hits if h[0] == case), hits[0])
            taken.add(hit)
            out.append({"case": case, "later": hit, "how": how, "compared": True, "reason": None})
        elif case in later.ds.cases:
            _, how = _same(base, later, case, case)
            hb, hl = base.prints[case][0], later.prints[case][0]
            what = (f"its first request differs (SHA-256 of the messages sent: {(hb or '')[:12]}… against "
                    f"{(hl or '')[:12]}…)" if how == "prompt hash" else
                    "its definition differs (prompt, system, documents, steps or sampling)"
                    + (" (one run salts its turns: matched by definition)" if (hb is None) != (hl is None) else ""))
            out.append({"case": case, "later": None, "how": None, "compared": False,
                        "reason": f"not compared: its prompts differ: {what}"})
        else:
            out.append({"case": case, "later": None, "how": None, "compared": False,
                        "reason": "not compared: no case of the later run sent what it sent"})
    for variant, of in base.ds.variants.items():
        out.append({"case": variant, "later": None, "how": None, "compared": False,
                    "reason": f"not compared: a variant of case {of} (variants are not compared across runs yet)"})
    return out


def check_pairs(base: RunView, laters: Sequence[RunView], pairs: Sequence[tuple[str, str]]) -> None:
    """``--match`` as given: :class:`~leverbench.errors.BadInput` where a baseline arm or a later arm is named twice,
    or a later arm is an arm of no later run (a baseline arm that is none of its arms: :func:`match_arms`)."""
    for i, what in ((0, "baseline arm"), (1, "later arm")):
        names = [p[i] for p in pairs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise BadInput(f"--match: the {what} {twice[0]!r} is named twice; pair each arm once")
    arms = {a for r in laters for a in r.ds.arms}
    for b, lt in pairs:
        if lt not in arms:
            raise BadInput(f"--match {b}={lt}: no later run has an arm {lt!r} (their arms: {', '.join(sorted(arms))})")


def changes(base: RunView, later: RunView, arms: Sequence[ArmMatch]) -> list[ChangedRow]:
    """Every condition that differs between the runs (module docstring)."""
    hb, hl = base.ds.header, later.ds.header
    out: list[ChangedRow] = []
    run_facts: list[tuple[str, JSONValue, JSONValue]] = [
        ("experiment name", base.info["experiment_name"], later.info["experiment_name"]),
        ("tool version", hb.get("tool_version"), hl.get("tool_version")), ("ledger schema", hb["schema"], hl["schema"])]
    for key, a, b in run_facts:
        if a != b:
            out.append({"scope": "run", "arm": None, "what": key, "baseline": a, "later": b})
    eb = {k: v for k, v in base.ds.settings.declared().items() if k != "name"}
    el = {k: v for k, v in later.ds.settings.declared().items() if k != "name"}
    for k, x, y in _diff(cast("Mapping[str, JSONValue]", eb), cast("Mapping[str, JSONValue]", el)):
        out.append({"scope": "run", "arm": None, "what": f"experiment.{k}", "baseline": x, "later": y})
    host_b = {k: v for k, v in flatten(cast("JSONValue", hb.get("host") or {})).items() if k not in _NOT_HOST}
    host_l = {k: v for k, v in flatten(cast("JSONValue", hl.get("host") or {})).items() if k not in _NOT_HOST}
    for k, x, y in _diff(host_b, host_l):
        out.append({"scope": "host", "arm": None, "what": k, "baseline": x, "later": y})
    kb, kl = arm_knobs(base, later)
    for m in arms:
        if m["later"] is not None:
            knobs = differing(kb[m["arm"]], kl[m["later"]])
            for k in knobs:
                out.append({"scope": "arm", "arm": m["arm"], "what": k, "baseline": kb[m["arm"]].get(k),
                            "later": kl[m["later"]].get(k)})
            # every served flag that differs, also one a lever's knob covers without showing it (the drafter's
            # --spec-draft-n-max under the drafter's kind): its own row, unless it is a knob of its own already
            fb, fl = (_served_flags(_discovered(run, a)) for run, a in ((base, m["arm"]), (later, m["later"])))
            for flag, x, y in _diff(fb, fl):
                if f"flag:{flag}" not in knobs and f"fact:engine_args {flag}" not in knobs:
                    out.append({"scope": "arm", "arm": m["arm"], "what": f"engine flag {flag}", "baseline": x,
                                "later": y})
    return out


def _served_flags(discovered: Mapping[str, JSONValue]) -> dict[str, JSONValue]:
    """The engine's flags as :func:`engine_flags` reads them, less those that are no condition (the port, the log,
    the metrics switch: :data:`NOT_FLAGS`) and those a command template's placeholder fills (compared as its knob,
    ``value:NAME``; the tool's own, ``{engine_dir}``, names a directory of the run)."""
    fills = discovered.get("value_flags")
    filled = {str(f) for v in fills.values() if isinstance(v, list) for f in v} if isinstance(fills, dict) else set()
    return {k: v for k, v in engine_flags(discovered.get("engine_args")).items()
            if k not in NOT_FLAGS and k not in filled}


def _discovered(run: RunView, arm: str) -> Mapping[str, JSONValue]:
    entry = cast("Mapping[str, Mapping[str, JSONValue]]", run.ds.header.get("arms") or {}).get(arm, {})
    found = entry.get("discovered")
    return found if isinstance(found, dict) else {}

