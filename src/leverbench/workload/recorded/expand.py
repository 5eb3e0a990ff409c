"""A case of recorded turns (``[[cases]] from = ...``) made into one case per turn it keeps.

:func:`with_recorded` reads each such case's recording or request log (:func:`.registry.load_requests`),
keeps the turns :func:`chosen` picks (``select``, ``sample``, ``limit``) and puts one case per turn in its
place, named ``CASE/TURN``: the experiment's cases, as the schedule, the ledger's header and the analysis
see them.  Each holds its turn (``LoadedExperiment.recorded``), its first request's tools
(``LoadedExperiment.tools``: a load stage or a probe on it sends them), and the sampling its first request
asked for (``temperature``: the equal-work analysis reads it; a request that gives none samples at the
API's default, 1; ``max_tokens``) and what the import left out (``recorded_skipped``: lines that cannot be
replayed, failed exchanges; the analysis warns).  A probe or load stage that names the case itself takes its
first turn.
"""

from __future__ import annotations

import fnmatch
import math
import random
from pathlib import Path

from ...config import Case, LoadedExperiment
from ...errors import BadInput, ConfigError
from ...recording import RecordedTurn
from ..traces.files import listed
from .base import skipped_note
from .registry import FORMATS, load_requests

DEFAULT_TEMPERATURE = 1.0  # what an OpenAI-compatible API samples at when the request names none


def chosen(turns: list[RecordedTurn], case: Case) -> list[RecordedTurn]:
    """The turns *case* keeps, in the recording's order: those whose id matches one of ``select`` (ids or glob
    patterns; none given: all), then ``sample`` of them drawn at random (``random.Random(seed)``: the same draw on
    every run), then the first ``limit``.  ValueError when ``select`` keeps none."""
    if case.select:
        kept = [t for t in turns if any(fnmatch.fnmatchcase(t.id, p) for p in case.select)]
        if not kept:
            raise ValueError(f"select ({listed(case.select, 4)}) matches none of the {len(turns)} recorded turns "
                             f"({listed((t.id for t in turns), 6)})")
        turns = kept
    if case.sample is not None and case.sample < len(turns):
        keep = sorted(random.Random(case.seed).sample(range(len(turns)), case.sample))
        turns = [turns[i] for i in keep]
    return turns[:case.limit] if case.limit is not None else turns


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def turn_case(case: Case, turn: RecordedTurn, skipped: str | None = None) -> Case:
    """The case that replays *turn* of *case*; *skipped*: what the import of its log left out (the run keeps
    it in its header, and the analysis warns)."""
    first = turn.first.request
    temperature = _number(first.get("temperature"))
    max_tokens = _number(first.get("max_tokens") if first.get("max_tokens") is not None
                         else first.get("max_completion_tokens"))
    return case.model_copy(update={
        "name": f"{case.name}/{turn.id}", "recorded_from": case.name, "recorded_turn": turn.id,
        "temperature": DEFAULT_TEMPERATURE if temperature is None else max(0.0, temperature),
        "max_tokens": int(max_tokens) if max_tokens and max_tokens >= 1 else case.max_tokens,
        "max_steps": max(case.max_steps, len(turn.calls)), "recorded_skipped": skipped})


def with_recorded(exp: LoadedExperiment) -> LoadedExperiment:
    """*exp* with each case of recorded turns replaced by a case per turn (see the module's docstring); *exp*
    itself when it has none left to expand.  Raises ConfigError naming the case's key."""
    spec = exp.spec
    if not any(c.from_ is not None and c.recorded_from is None for c in spec.cases):
        return exp
    file, base = str(exp.path), Path(exp.path).resolve().parent
    cases: list[Case] = []
    recorded, tools = dict(exp.recorded), dict(exp.tools)
    first_of: dict[str, str] = {}  # a case of recorded turns -> its first turn's case
    names = {c.name for c in spec.cases if c.from_ is None}
    for i, case in enumerate(spec.cases):
        if case.from_ is None or case.recorded_from is not None:
            cases.append(case)
            continue
        if case.format is not None and case.format not in FORMATS:
            raise ConfigError(file, f"cases[{i}].format", f"unknown request-log format {case.format!r}; known: "
                                                          f"{', '.join(FORMATS)} (or leave it out: detected)")
        try:
            imported = load_requests(base / case.from_, case.format)
            turns = chosen(imported.turns, case)
        except (BadInput, ValueError) as exc:
            raise ConfigError(file, f"cases[{i}].from", str(exc)) from None
        for turn in turns:
            one = turn_case(case, turn, skipped_note(imported))
            if one.name in names:
                raise ConfigError(file, f"cases[{i}].name", f"{one.name!r} (case {case.name!r}, recorded turn "
                                                            f"{turn.id!r}) is already a case name")
            names.add(one.name)
            cases.append(one)
            recorded[one.name] = turn
            if turn.first.tools:
                tools[one.name] = turn.first.tools  # type: ignore[assignment]  # JSON objects, as a tools file's
        first_of[case.name] = f"{case.name}/{turns[0].id}"
    new = spec.model_copy(update={"cases": cases})
    if new.probes is not None and new.probes.case in first_of:
        new.probes = new.probes.model_copy(update={"case": first_of[new.probes.case]})
    new.load = [s.model_copy(update={"case": first_of[s.case]}) if getattr(s, "case", None) in first_of else s
                for s in new.load]
    if new.probes is not None and new.probes.depths and (new.probes.case is None or new.probes.case in recorded):
        raise ConfigError(file, "probes.depths", "a probe at a depth cuts a written case's documents; name a written "
                                                 "case (with prompt and documents) in probes.case")
    return exp.model_copy(update={"spec": new, "recorded": recorded, "tools": tools})
