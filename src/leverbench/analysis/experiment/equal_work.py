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
reference's prompt: its own uncached count kept (the new text of the step), k' = P_r − (P_a − k_a) within
[0, P_r − 1], and 0 where the arm cached nothing.
Where the arm's cached count is unknown, the prefill is taken as unchanged (only the decode is corrected).
A step only the arm ran is taken away (−M of its call), a step only the reference ran is added (+M of the
reference's call, at the arm's cache: its cached count where the arm has a prefix cache, else 0).  So the
measurement carries the time and the model only the difference.  Cells: the median corrected turn over
the median reference turn of the same repeats; total: Σ of the reference's cell medians over Σ of the
corrected ones.

A tool call one arm made and the other did not adds or takes away its scripted latency too (the turns'
``tool_s`` differ).  It is **citable** when the correction is small — Σ |correction| ≤ ``MAX_CORRECTION``
(a quarter) of the arm's time over the turns of every case the figure covers (a total whose gain comes
from one case corrected beyond it is refused with it) —, no corrected turn is left with no time at all
(the model would not describe it), the arm's rate model has both phases and passes its cross-check (at
least one of the arm's probes agrees with the rate model's other views and none disagrees:
:mod:`.probes`) at the precision the correction needs — where a probe's views disagree beyond the probes'
tolerance by a spread s, the correction may be off by about s of itself, so the figure is still citable when
s × the correction's share of the time is within the guard's volume tolerance of its scope (5 % for a total,
20 % for a cell: a correction more precise than the work difference the guard lets pass uncorrected) —,
and nothing but the volume refuses the measured row.  It says
what it corrected ("adjusted for 9.5 % fewer tokens than the reference by the arm's rate model, 3.1 % of
its time").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ...schema.check_rows import EqualWorkFigure, EqualWorkRow, IdentityFigures
from ...schema.experiment_rows import MultiplierRow
from ...schema.rate_rows import ProbeRow, RateModelRow
from ..base.dataset import Dataset
from ..base.knobs import Comparison, caches_prompts
from ..base.stats import median
from ..rates.rate_model import decode_seconds, prefill_seconds

MAX_CORRECTION = 0.25


def call_seconds(model: RateModelRow, prompt: Any, cached: Any, output: Any) -> Any:
    """M(P, k, O) = prefill_s(P − k, k) + decode_s(P + 1, O − 1) of the arm's rate model (module docstring);
    numbers or numpy arrays alike."""
    return prefill_seconds(model, prompt - cached, cached) + decode_seconds(model, prompt + 1.0, output - 1.0)


def first_difference(a: str, b: str) -> int | None:
    """The index of the first character at which *a* and *b* differ (the shorter's length when one is the
    other's beginning); None when they are equal."""
    if a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


@dataclass
class Turns:
    """The successful turns of a run and their calls, as keys: a turn's (case, repeat) as one integer
    ``case · R + repeat``; a call's as ``turn key · S + step`` (R, S: one past the highest repeat and step)."""

    turn_key: np.ndarray  # per turn row (−1: not a successful turn with a repeat number)
    call_key: np.ndarray  # per call row (−1: not a call of such a turn)
    repeats: int
    steps: int


def turns(ds: Dataset) -> Turns:
    T, C = ds.turn, ds.call
    good = T.ok & ~np.isnan(T.repeat)
    rep = np.where(good, T.repeat, 0).astype(np.int64)
    R = int(rep.max()) + 1 if len(rep) else 1
    tkey = np.where(good, T.case.astype(np.int64) * R + rep, -1)
    step = np.where(np.isnan(C.step), 0, C.step).astype(np.int64)
    S = int(step.max()) + 1 if len(step) else 1
    of_turn = np.where(C.turn >= 0, tkey[np.maximum(C.turn, 0)] if len(tkey) else -1, -1)
    ckey = np.where(of_turn >= 0, of_turn * S + step, -1)
    return Turns(tkey, ckey, R, S)


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

    def as_dict(self) -> IdentityFigures:
        return {"calls": self.calls, "identical": self.identical, "identical_share": self.identical_share,
                "divergence_chars_median": self.divergence_chars_median}


@dataclass
class EqualWork:
    """One comparison at equal work (module docstring): per turn both arms ran (``case`` index into
    ``case_names``, ``repeat``) the arm's measured time, the reference's, and the correction (s)."""

    arm: str
    vs: str
    identity: Identity
    case_names: list[Any] = field(default_factory=list)
    case: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    repeat: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    measured: np.ndarray = field(default_factory=lambda: np.zeros(0))
    reference: np.ndarray = field(default_factory=lambda: np.zeros(0))
    delta: np.ndarray = field(default_factory=lambda: np.zeros(0))
    absolute: np.ndarray = field(default_factory=lambda: np.zeros(0))  # Σ |correction| of each turn's steps
    tokens: tuple[float, float] = (0.0, 0.0)  # Σ generated tokens over the turns corrected: (arm, reference)
    problem: str | None = None  # why the figure may not be cited (model, cross-check)
    disagreement: float | None = None  # the worst spread of the rate model's views where its cross-check failed

    @property
    def corrected(self) -> np.ndarray:
        out: np.ndarray = self.measured + self.delta  # (numpy's arithmetic on untyped arrays is Any)
        return out

    def _in(self, case: str | None) -> np.ndarray:
        if case is None:
            return np.ones(len(self.case), bool)
        of_case: np.ndarray = self.case == (self.case_names.index(case) if case in self.case_names else -1)
        return of_case

    def share(self, case: str | None = None) -> float | None:
        """Σ |correction| / Σ measured turn_s, over a case's turns or all of them."""
        m = self._in(case)
        spent = float(self.measured[m].sum())
        return float(self.absolute[m].sum() / spent) if spent > 0 else None

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
        corrected = self.corrected
        for c in cases:
            m = self._in(c)
            if not m.any():
                return None
            ref += median(self.reference[m])
            arm += median(corrected[m])
        return float(ref / arm) if arm > 0 else None

    def deltas(self) -> dict[tuple[str, int], float]:
        """(case name, repeat) → the correction of the arm's turn (for the verdict's pairs)."""
        return {(self.case_names[c], int(r)): float(d) for c, r, d in zip(self.case, self.repeat, self.delta)}


def _pairs(keys_a: np.ndarray, keys_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions (in *keys_a*, in *keys_b*) of the keys both hold (each key once on each side)."""
    _, ia, ib = np.intersect1d(keys_a, keys_b, assume_unique=False, return_indices=True)
    return ia, ib


def _side(ds: Dataset, tt: Turns, arm: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An arm's successful turns (rows, keys) and their calls (rows, keys): the calls that counted, not an attempt
    that failed and was retried (it shares its step's key with the retry that counted)."""
    t = np.flatnonzero((ds.turn.arm == arm) & (tt.turn_key >= 0))
    c = np.flatnonzero((ds.call.arm == arm) & (tt.call_key >= 0) & ~ds.call.retried)
    return t, tt.turn_key[t], c, tt.call_key[c]


def identity(ds: Dataset, comp: Comparison, tt: Turns, texts: dict[tuple[str, str, int, int], str] | None
             ) -> Identity:
    """The calls of *comp*'s two arms compared (module docstring), over the cases both arms sent at temperature 0
    (the case's temperature, or the arm's ``request`` field where it sets one: the body sent)."""
    C = ds.call
    sent = {a.get("name"): (a.get("request") or {}).get("temperature") for a in ds.config.get("arms", [])}

    def greedy_on_both(case_temperature: object) -> bool:  # an arm's request fields override the case's
        return all(not (case_temperature if sent.get(a) is None else sent[a]) for a in (comp.arm, comp.vs))

    greedy = np.array([greedy_on_both(c.get("temperature")) for c in ds.config.get("cases", [])]
                      + [False] * (len(ds.case_names) - len(ds.config.get("cases", []))), dtype=bool)
    _, _, ca, ka = _side(ds, tt, ds.arm_index(comp.arm))
    _, _, cv, kv = _side(ds, tt, ds.arm_index(comp.vs))
    ia, iv = _pairs(ka, kv)
    i, j = ca[ia], cv[iv]
    keep = greedy[C.case[i]] if len(greedy) else np.zeros(len(i), bool)
    i, j = i[keep], j[keep]
    same = (C.output[i] >= 0) & (C.output[i] == C.output[j]) & (C.completion_tokens[i] == C.completion_tokens[j])
    out = Identity(int(len(i)), int(same.sum()))
    if texts is not None:
        positions = []
        for x in i[~same]:
            k = int(tt.call_key[x])
            name, rep, step = ds.case_names[k // tt.steps // tt.repeats], (k // tt.steps) % tt.repeats, k % tt.steps
            ta, tb = texts.get((comp.arm, name, rep, step)), texts.get((comp.vs, name, rep, step))
            if ta is not None and tb is not None and (pos := first_difference(ta, tb)) is not None:
                positions.append(pos)
        out.divergence_chars_median = median(np.array(positions, float)) if positions else None
    return out


def _cross_checked(probe_rows: Sequence[ProbeRow], arm: str, tolerance: float | None = None
                   ) -> tuple[str | None, float | None]:
    """(why the arm's rate model is not cross-checked, and what to do; the worst spread of its views where the
    check failed): (None, None) when it is — a probe agrees and none disagrees."""
    mine = [p for p in probe_rows if p.get("arm") == arm and p.get("agrees") is not None]
    if not mine:
        return f"{arm}'s rate model has no cross-check (no probe compared with it: add [probes])", None
    bad = [p for p in mine if p["agrees"] is False]
    if bad:
        worst = max(bad, key=lambda p: p.get("agreement") or 0.0)
        tol = f", tolerance {tolerance:.0%}" if tolerance is not None else ""
        return (f"{arm}'s rate model fails its cross-check (probe at context {worst.get('context_tokens') or 0:.0f}: "
                f"its decode views {worst.get('agreement') or 0:.1%} apart{tol})"), float(worst.get("agreement") or 0)
    return None, None


def equal_work(ds: Dataset, comp: Comparison, model: RateModelRow | None, probe_rows: Sequence[ProbeRow],
               tt: Turns, texts: dict[tuple[str, str, int, int], str] | None = None,
               turn_s: np.ndarray | None = None, correct: bool = True) -> EqualWork:
    """*comp* at equal work (module docstring): its arm's turns corrected to the reference's work; *turn_s*:
    the turns' times the cells take (default: as measured; :func:`.drift.adjusted_turn_s`); *correct*: False
    where no row of the comparison differs in volume (the outputs are compared, nothing corrected)."""
    C, T = ds.call, ds.turn
    times = T.turn_s if turn_s is None else turn_s
    out = EqualWork(comp.arm, comp.vs, identity(ds, comp, tt, texts), list(ds.case_names))
    if not correct:
        return out
    if not model or not model.get("prefill") or not model.get("decode"):
        out.problem = f"{comp.arm} has no rate model of both phases to correct with"
        return out
    cache_on = caches_prompts(ds.knobs(comp.arm))
    ta, tka, ca, cka = _side(ds, tt, ds.arm_index(comp.arm))
    tv, tkv, cv, ckv = _side(ds, tt, ds.arm_index(comp.vs))
    pa, pv = _pairs(tka, tkv)  # the turns both ran: positions in ta / tv
    both = tka[pa]  # their keys, ascending
    in_a, in_v = np.isin(cka // tt.steps, both), np.isin(ckv // tt.steps, both)
    ca, cka, cv, ckv = ca[in_a], cka[in_a], cv[in_v], ckv[in_v]
    P, O, K = C.prompt_tokens, C.completion_tokens, C.cached()
    ia, iv = _pairs(cka, ckv)
    i, j = ca[ia], cv[iv]  # steps both ran: the arm's call i, the reference's call j
    ka = np.where(np.isnan(K[i]), 0.0 if not cache_on else np.nan, K[i])
    # the arm's cache on the reference's prompt: its own uncached count kept; nothing cached stays nothing
    k0 = np.where(np.isnan(ka), 0.0, ka)
    kr = np.where(k0 > 0, np.clip(P[j] - (P[i] - k0), 0.0, np.maximum(P[j] - 1.0, 0.0)), 0.0)
    d_both = np.where(np.isnan(ka),  # the cached count unknown: the prefill taken as unchanged
                      decode_seconds(model, P[j] + 1.0, O[j] - 1.0) - decode_seconds(model, P[i] + 1.0, O[i] - 1.0),
                      call_seconds(model, P[j], kr, O[j]) - call_seconds(model, P[i], np.where(np.isnan(ka), 0, ka),
                                                                         O[i]))
    left_a, left_v = np.ones(len(ca), bool), np.ones(len(cv), bool)
    left_a[ia] = left_v[iv] = False
    only_a, only_v = ca[left_a], cv[left_v]
    d_a = -call_seconds(model, P[only_a], np.where(np.isnan(K[only_a]), 0.0, K[only_a]), O[only_a])
    kv_only = np.where(np.isnan(K[only_v]), 0.0, K[only_v]) if cache_on else np.zeros(len(only_v))
    d_v = call_seconds(model, P[only_v], kv_only, O[only_v])
    key = np.concatenate([tt.call_key[i], tt.call_key[only_a], tt.call_key[only_v]]) // tt.steps
    d = np.concatenate([d_both, d_a, d_v])
    pos = np.searchsorted(both, key)
    ok = np.ones(len(both), bool)
    bad = ~np.isfinite(d)
    ok[pos[bad]] = False  # a turn with a call whose token counts are unknown is not corrected
    d = np.where(bad, 0.0, d)
    # a tool call one arm made and the other did not: its scripted latency is work too (in turn_s as tool_s)
    tool = np.nan_to_num(T.tool_s[tv[pv]]) - np.nan_to_num(T.tool_s[ta[pa]])
    delta = np.bincount(pos, weights=d, minlength=len(both)) + tool
    absolute = np.bincount(pos, weights=np.abs(d), minlength=len(both)) + np.abs(tool)
    tok_a = np.bincount(pos, weights=np.nan_to_num(np.concatenate([O[i], O[only_a], np.zeros(len(only_v))])),
                        minlength=len(both))
    tok_r = np.bincount(pos, weights=np.nan_to_num(np.concatenate([O[j], np.zeros(len(only_a)), O[only_v]])),
                        minlength=len(both))
    rows_a, rows_v = ta[pa][ok], tv[pv][ok]
    out.case, out.repeat = both[ok] // tt.repeats, both[ok] % tt.repeats
    out.measured, out.reference = times[rows_a].astype(float), times[rows_v].astype(float)
    out.delta, out.absolute = delta[ok], absolute[ok]
    out.tokens = (float(tok_a[ok].sum()), float(tok_r[ok].sum()))
    out.problem, out.disagreement = _cross_checked(probe_rows, comp.arm, ds.settings.probes.tolerance)
    return out


def figure(ew: EqualWork, cases: list[str], row: MultiplierRow, tolerance: float) -> EqualWorkFigure:
    """A multiplier row's ``equal_work``: {value, citable, reason, corrected, correction_share, token_change}
    for the row's scope (a case, or the total over *cases*).  A total is citable only where each of its cases'
    corrections is (a total whose gain came from one case corrected beyond the limit would hide it).
    *tolerance*: the guard's volume tolerance of the row's scope (a rate model whose cross-check failed may
    still correct where its views' spread × the correction's share stays within it)."""
    scope = row["scope"]
    case = scope.removeprefix("case:") if scope != "total" else None
    scoped = [case] if case else cases
    value = ew.value(scoped)
    share = ew.share(case)
    reasons = []
    if value is None:
        reasons.append("no turn both arms ran with known token counts")
    bound = (share or 0.0) * ew.disagreement if ew.disagreement is not None else None
    if ew.problem and (bound is None or bound > tolerance):
        reasons.append(ew.problem + (f": the correction's error could reach {bound:.1%} of the time, more than "
                                     f"{tolerance:.0%}; run the probes again on a quieter machine, or with more "
                                     "[probes] repeats" if bound is not None else ""))
    worst = max(((c, ew.share(c)) for c in scoped), key=lambda x: x[1] or 0.0, default=(None, None))
    if worst[1] is not None and worst[1] > MAX_CORRECTION:
        where = f" in {worst[0]}" if case is None else ""
        reasons.append(f"the correction is {worst[1]:.0%} of the arm's time{where}, more than {MAX_CORRECTION:.0%}: "
                       "the arms' work differs too much to correct (bound the answers with max_tokens, or see why "
                       "they differ)")
    negative = sorted({ew.case_names[c] for c in ew.case[ew.corrected <= 0]} & set(scoped))
    if negative:
        reasons.append(f"the correction exceeds the turn's own time in {', '.join(negative)}: the rate model does "
                       "not describe those turns")
    others = [c for c in row.get("reason_codes") or [] if c != "volume"]
    if others:
        reasons.append("the measured comparison is also refused for " + ", ".join(others))
    words = ew.words()
    if not reasons and bound is not None:
        words += (f"; its rate model's decode views disagree by up to {ew.disagreement:.1%} at the probes, so the "
                  f"correction is good to {bound:.1%} of the time (within the guard's {tolerance:.0%})")
    return {"value": value, "citable": not reasons, "reason": "; ".join(reasons) or None,
            "corrected": words, "correction_share": share, "token_change": ew.token_change()}


def equal_work_rows(ews: list[EqualWork], mults: Sequence[MultiplierRow], cases: list[str],
                    tolerances: tuple[float, float]) -> list[EqualWorkRow]:
    """``summary.json`` ``equal_work[]``: per comparison, its identity figures and, where its total is refused
    for volume, the equal-work total; adds ``equal_work`` to every multiplier row refused for its volume
    (*tolerances*: the guard's volume tolerances of a cell and of a total)."""
    by = {(e.arm, e.vs): e for e in ews}
    for m in mults:
        ew = by.get((m["arm"], m["vs"]))
        tol = tolerances[1] if m["scope"] == "total" else tolerances[0]
        m["equal_work"] = figure(ew, cases, m, tol) if ew and "volume" in (m.get("reason_codes") or []) else None
    out: list[EqualWorkRow] = []
    for e in ews:
        total = next((m for m in mults if (m["arm"], m["vs"]) == (e.arm, e.vs) and m["scope"] == "total"), None)
        out.append({"arm": e.arm, "vs": e.vs, **e.identity.as_dict(), "turns_corrected": len(e.corrected),
                    "correction_share": e.share(), "token_change": e.token_change(),
                    "model_problem": e.problem, "total": total.get("equal_work") if total else None})
    return out


