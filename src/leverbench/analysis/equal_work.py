"""Equal work: did two arms do the same work, and what is the multiplier at the same work?

**Same outputs** (:func:`identity`).  At temperature 0 a lever that only changes how fast the model runs
(a prefix cache; speculative decoding, in exact arithmetic) leaves the tokens as they were, and identical
outputs prove equal work.  Real engines are not bit-exact (llama.cpp's drafting, vLLM's batch-variant
kernels on GPUs), so per comparison the calls of the turns both arms ran (same case, repeat and step) are
compared: a call is **identical** when its answer's hash (``output_sha256``) and its generated token count
are the same on both arms; where the run stored its texts (``store_text``), the **divergence position** of
the others is the first character at which the two answers part (its median is reported).

**The equal-work multiplier** (:func:`equal_work`).  Where the volumes differ beyond the guard's tolerance,
the measured multiplier is refused, and beside it each of the arm's turns is timed at the reference's work:
its measured time plus what the arm's own rate model (:mod:`.rate_model`) says the difference in work costs,

    corrected_s = turn_s + Σ_steps [ M(P_r, k', O_r) − M(P_a, k_a, O_a) ]
    M(P, k, O)  = prefill_s(P − k, k) + decode_s(P + 1, O − 1)        (the first token comes with the prefill)

with P, k, O the call's prompt, cached and generated tokens on the arm (a) and on the reference (r) in the
same step of the same turn (case and repeat), and k' the cached tokens the arm would have had on the
reference's prompt: its own uncached count kept (the new text of the step), k' = P_r − min(P_a − k_a, P_r).
Where the arm's cached count is unknown, the prefill is taken as unchanged (only the decode is corrected).
A step only the arm ran is taken away (−M of its call), a step only the reference ran is added (+M of the
reference's call, at the arm's cache: its cached count where the arm has a prefix cache, else 0).  So the
measurement carries the time and the model only the difference.  Cells: the median corrected turn over
the median reference turn of the same repeats; total: Σ of the reference's cell medians over Σ of the
corrected ones.

It is **citable** when the correction is small — Σ |correction| ≤ ``MAX_CORRECTION`` (a quarter) of the
arm's time over the turns corrected, and, for a cell, of that cell's —, the arm's rate model has both
phases and passes its cross-check (at least one of the arm's probes agrees with the rate model's other
views and none disagrees: :mod:`.probes`), and nothing but the volume refuses the measured row.  It says
what it corrected ("adjusted for 9.5 % fewer tokens than the reference by the arm's rate model, 3.1 % of
its time").
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dataset import Dataset
from .knobs import Comparison, is_on
from .rate_model import decode_seconds, prefill_seconds
from .stats import median

MAX_CORRECTION = 0.25


def call_seconds(model: dict[str, Any], prompt: float, cached: float, output: float) -> float:
    """M(P, k, O) = prefill_s(P − k, k) + decode_s(P + 1, O − 1) of the arm's rate model (module docstring)."""
    return prefill_seconds(model, prompt - cached, cached) + decode_seconds(model, prompt + 1.0, max(output - 1.0, 0.0))


def first_difference(a: str, b: str) -> int | None:
    """The index of the first character at which *a* and *b* differ (the shorter's length when one is the
    other's beginning); None when they are equal."""
    if a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


@dataclass
class Turns:
    """The successful turns of a run and their calls: (arm, case, repeat) → turn row; turn row → calls by step."""

    rows: dict[tuple[int, int, int], int]
    calls: dict[int, dict[int, int]]


def turns(ds: Dataset) -> Turns:
    T, C = ds.turn, ds.call
    rows = {}
    for i in np.flatnonzero(T.ok & ~np.isnan(T.repeat)):
        rows.setdefault((int(T.arm[i]), int(T.case[i]), int(T.repeat[i])), int(i))
    calls: dict[int, dict[int, int]] = defaultdict(dict)
    for j in np.flatnonzero(C.turn >= 0):
        calls[int(C.turn[j])].setdefault(int(C.step[j]) if C.step[j] == C.step[j] else 0, int(j))
    return Turns(rows, calls)


@dataclass
class Identity:
    """Per comparison: calls compared (both arms, same case, repeat and step, temperature 0), how many are
    identical, and the median position (characters) where the others part (None without stored texts)."""

    calls: int = 0
    identical: int = 0
    divergence_chars_median: float | None = None

    @property
    def identical_share(self) -> float | None:
        return self.identical / self.calls if self.calls else None

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "identical": self.identical, "identical_share": self.identical_share,
                "divergence_chars_median": self.divergence_chars_median}


@dataclass
class EqualWork:
    """One comparison at equal work (module docstring)."""

    arm: str
    vs: str
    identity: Identity
    corrected: dict[tuple[str, int], float] = field(default_factory=dict)  # (case, repeat) → corrected turn_s
    measured: dict[tuple[str, int], float] = field(default_factory=dict)  # (case, repeat) → the arm's turn_s
    reference: dict[tuple[str, int], float] = field(default_factory=dict)  # (case, repeat) → the reference's
    delta: dict[tuple[str, int], float] = field(default_factory=dict)  # (case, repeat) → the correction, s
    correction: dict[str, float] = field(default_factory=dict)  # case → Σ |correction| seconds
    tokens: tuple[float, float] = (0.0, 0.0)  # Σ generated tokens over the turns corrected: (arm, reference)
    problem: str | None = None  # why no figure, or why it may not be cited (model, cross-check)

    def share(self, case: str | None = None) -> float | None:
        """Σ |correction| / Σ measured turn_s, over a case's turns or all of them."""
        keys = [k for k in self.measured if case is None or k[0] == case]
        spent = sum(self.measured[k] for k in keys)
        corr = sum(v for c, v in self.correction.items() if case is None or c == case)
        return float(corr / spent) if spent > 0 else None

    def token_change(self) -> float | None:
        """The arm's generated tokens against the reference's over the turns corrected, − 1."""
        a, r = self.tokens
        return float(a / r - 1.0) if r > 0 else None

    def words(self) -> str:
        ch, sh = self.token_change(), self.share()
        if ch is None or sh is None:
            return "no turns to correct"
        more = "more" if ch > 0 else "fewer"
        return (f"adjusted for {abs(ch):.1%} {more} tokens than {self.vs} by {self.arm}'s rate model "
                f"({sh:.1%} of its time)")

    def value(self, cases: list[str]) -> float | None:
        """Σ_c median reference turn_s / Σ_c median corrected turn_s over *cases*; None unless each has a pair."""
        ref, arm = 0.0, 0.0
        for c in cases:
            r = [v for (case, _), v in self.reference.items() if case == c]
            a = [v for (case, _), v in self.corrected.items() if case == c]
            if not r or not a:
                return None
            ref += median(np.array(r))
            arm += median(np.array(a))
        return float(ref / arm) if arm > 0 else None


def identity(ds: Dataset, comp: Comparison, tt: Turns, texts: dict[tuple[str, str, int, int], str] | None
             ) -> Identity:
    """The calls of *comp*'s two arms compared (module docstring), over the cases at temperature 0."""
    C = ds.call
    greedy = {c.get("name") for c in ds.config.get("cases", []) if not c.get("temperature")}
    a, v = ds.arm_index(comp.arm), ds.arm_index(comp.vs)
    out, positions = Identity(), []
    for (arm, case, rep), row in tt.rows.items():
        name = ds.case_names[case]
        if arm != a or name not in greedy or (v, case, rep) not in tt.rows:
            continue
        mine, theirs = tt.calls.get(row, {}), tt.calls.get(tt.rows[(v, case, rep)], {})
        for step in sorted(mine.keys() & theirs.keys()):
            i, j = mine[step], theirs[step]
            out.calls += 1
            same = C.output[i] >= 0 and C.output[i] == C.output[j] and C.completion_tokens[i] == C.completion_tokens[j]
            out.identical += bool(same)
            if not same and texts is not None:
                ta, tb = texts.get((comp.arm, name, rep, step)), texts.get((comp.vs, name, rep, step))
                if ta is not None and tb is not None and (pos := first_difference(ta, tb)) is not None:
                    positions.append(pos)
    out.divergence_chars_median = median(np.array(positions, float)) if positions else None
    return out


def _cross_checked(probe_rows: list[dict[str, Any]], arm: str) -> str | None:
    """Why the arm's rate model is not cross-checked (None when it is: a probe agrees, none disagrees)."""
    mine = [p for p in probe_rows if p.get("arm") == arm and p.get("agrees") is not None]
    if not mine:
        return f"{arm}'s rate model has no cross-check (no probe compared with it: add [probes])"
    bad = [p for p in mine if p["agrees"] is False]
    if bad:
        worst = max(bad, key=lambda p: p.get("agreement") or 0.0)
        return (f"{arm}'s rate model fails its cross-check (probe at context {worst.get('context_tokens') or 0:.0f}: "
                f"views {worst.get('agreement') or 0:.1%} apart)")
    return None


def equal_work(ds: Dataset, comp: Comparison, model: dict[str, Any] | None, probe_rows: list[dict[str, Any]],
               tt: Turns, texts: dict[tuple[str, str, int, int], str] | None = None,
               turn_s: np.ndarray | None = None) -> EqualWork:
    """*comp* at equal work (module docstring): its arm's turns corrected to the reference's work; *turn_s*:
    the turns' times the cells take (default: as measured; :func:`.drift.adjusted_turn_s`)."""
    C, T = ds.call, ds.turn
    times = T.turn_s if turn_s is None else turn_s
    out = EqualWork(comp.arm, comp.vs, identity(ds, comp, tt, texts))
    if not model or not model.get("prefill") or not model.get("decode"):
        out.problem = f"{comp.arm} has no rate model of both phases to correct with"
        return out
    cache_on = is_on(ds.knobs(comp.arm).get("prefix_cache"))
    cached = C.cached()
    a, v = ds.arm_index(comp.arm), ds.arm_index(comp.vs)
    tok_a = tok_r = 0.0
    for (arm, case, rep), row in tt.rows.items():
        ref_row = tt.rows.get((v, case, rep))
        if arm != a or ref_row is None:
            continue
        mine, theirs = tt.calls.get(row, {}), tt.calls.get(ref_row, {})
        delta, absolute, ok = 0.0, 0.0, True
        for step in sorted(mine.keys() | theirs.keys()):
            i, j = mine.get(step), theirs.get(step)
            if i is not None and j is not None:
                pa, oa, pr, orr = C.prompt_tokens[i], C.completion_tokens[i], C.prompt_tokens[j], C.completion_tokens[j]
                if np.isnan([pa, oa, pr, orr]).any():
                    ok = False
                    break
                ka = cached[i] if not np.isnan(cached[i]) else (0.0 if not cache_on else np.nan)
                if np.isnan(ka):  # the prefill taken as unchanged: only the decode corrected
                    d = decode_seconds(model, pr + 1.0, max(orr - 1.0, 0.0)) - decode_seconds(model, pa + 1.0,
                                                                                             max(oa - 1.0, 0.0))
                else:
                    kr = pr - min(pa - ka, pr)
                    d = call_seconds(model, pr, kr, orr) - call_seconds(model, pa, ka, oa)
                tok_a, tok_r = tok_a + oa, tok_r + orr
            elif i is not None:
                if np.isnan([C.prompt_tokens[i], C.completion_tokens[i]]).any():
                    ok = False
                    break
                ka = 0.0 if np.isnan(cached[i]) else cached[i]
                d = -call_seconds(model, C.prompt_tokens[i], ka, C.completion_tokens[i])
                tok_a += C.completion_tokens[i]
            else:
                if np.isnan([C.prompt_tokens[j], C.completion_tokens[j]]).any():
                    ok = False
                    break
                kr = (0.0 if np.isnan(cached[j]) else cached[j]) if cache_on else 0.0
                d = call_seconds(model, C.prompt_tokens[j], kr, C.completion_tokens[j])
                tok_r += C.completion_tokens[j]
            delta += d
            absolute += abs(d)
        if not ok:
            continue
        name = ds.case_names[case]
        out.measured[(name, rep)] = float(times[row])
        out.reference[(name, rep)] = float(times[ref_row])
        out.corrected[(name, rep)] = float(times[row]) + delta
        out.delta[(name, rep)] = delta
        out.correction[name] = out.correction.get(name, 0.0) + absolute
    out.tokens = (tok_a, tok_r)
    out.problem = _cross_checked(probe_rows, comp.arm)
    return out


def figure(ew: EqualWork, cases: list[str], row: dict[str, Any]) -> dict[str, Any]:
    """A multiplier row's ``equal_work``: {value, citable, reason, corrected, correction_share, token_change}
    for the row's scope (a case, or the total over *cases*)."""
    scope = row["scope"]
    case = scope.removeprefix("case:") if scope != "total" else None
    value = ew.value([case] if case else cases)
    share = ew.share(case)
    reasons = []
    if value is None:
        reasons.append("no turn both arms ran with known token counts")
    if ew.problem:
        reasons.append(ew.problem)
    if share is not None and share > MAX_CORRECTION:
        reasons.append(f"the correction is {share:.0%} of the arm's time, more than {MAX_CORRECTION:.0%}")
    others = [c for c in row.get("reason_codes") or [] if c != "volume"]
    if others:
        reasons.append("the measured comparison is also refused for " + ", ".join(others))
    return {"value": value, "citable": not reasons, "reason": "; ".join(reasons) or None,
            "corrected": ew.words(), "correction_share": share, "token_change": ew.token_change()}


def equal_work_rows(ews: list[EqualWork], mults: list[dict[str, Any]], cases: list[str]) -> list[dict[str, Any]]:
    """``summary.json`` ``equal_work[]``: per comparison, its identity figures and, where its total is refused
    for volume, the equal-work total; adds ``equal_work`` to every multiplier row refused for its volume."""
    by = {(e.arm, e.vs): e for e in ews}
    for m in mults:
        ew = by.get((m["arm"], m["vs"]))
        m["equal_work"] = figure(ew, cases, m) if ew and "volume" in (m.get("reason_codes") or []) else None
    out = []
    for e in ews:
        total = next((m for m in mults if (m["arm"], m["vs"]) == (e.arm, e.vs) and m["scope"] == "total"), None)
        out.append({"arm": e.arm, "vs": e.vs, **e.identity.as_dict(), "turns_corrected": len(e.corrected),
                    "correction_share": e.share(), "token_change": e.token_change(),
                    "model_problem": e.problem, "total": (total or {}).get("equal_work")})
    return out


