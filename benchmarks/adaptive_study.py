"""Simulation study of the sequential verdicts (issue 16): how often each verdict comes, how many repeats it
takes, and what the alternatives would have done.  A pure model of noisy turn times (see
leverbench.analysis.sequential.study), no HTTP; every table is seeded.

    PYTHONPATH=src .venv/bin/python benchmarks/adaptive_study.py [--experiments 20000] [--seed 2026]
    PYTHONPATH=src .venv/bin/python benchmarks/adaptive_study.py --tiny    # 50 experiments: seconds, noisy

Tables (min_effect 1.10, confidence 0.95, 4 cases, at most 12 repeats, at least 2 before a verdict; the
issue's scenario is lognormal noise of 10 % CV, 10 % drift over the run, counterbalanced order):

1. the method chosen, per true effect: verdict shares, mean repeats, how often the truth left the interval
   at some look (anytime miss), and the fixed designs it is measured against — with equal noise, and with
   unequal noise across cases (issue 22: one case ten times noisier than the three others; two deterministic
   short cases beside a steady and a tool-calling one);
2. the candidate methods tried, on the same experiments (and the anytime miss rate and false "pays" at the
   margin under unequal noise, and the miss rate under blocked order with a 50 % drift), the former interval
   with one σ pooled over cases among them;
3. noise × drift × order: the false "pays" rate at the margin (true effect = min_effect, where at most
   α/2 = 2.5 % is allowed), power and repeats at 1.3x, and the drift's bias on the estimate;
4. robustness: unequal noise across cases, failed turns, spikes, 1 and 8 cases;
5. the fixed interval (each case's variance, Welch–Satterthwaite) against one pooled σ: how often the truth
   is outside it, and "pays" at the margin, per fixed number of repeats, equal and unequal noise.

"Fixed n (matched)" is the brief's definition: the smallest fixed n whose rate of the right verdict (pays
for a true effect above min_effect, "equivalent"/"does not pay" under no effect) is at least the sequential
design's, with a false "pays" rate under no effect of at most 5 %, found on the same simulated experiments
(their first n repeats, the t-interval once).  "fixed n @90 %/@99 %": the n whose power is 90 %/99 %
(:func:`leverbench.analysis.sequential.confidence.fixed_design_repeats` at the true effect and noise).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from leverbench.analysis.sequential.confidence import Stream, fixed_design_repeats
from leverbench.analysis.sequential.study import (
    NAMES,
    UNEQUAL,
    HalfWidth,
    Looks,
    Model,
    Outcome,
    cs_method,
    experiment_looks,
    fixed,
    matched_fixed_n,
    sequential,
    t_every_look,
)

MIN_EFFECT, CONF, MAX_R, MIN_R = 1.10, 0.95, 12, 2
SIM_R = 24  # repeats simulated per experiment: fixed designs may need more than MAX_R
EFFECTS = (1.0, 1.1, 1.2, 1.3, 1.5)


# ---- the candidate methods (the chosen one lives in leverbench.analysis.sequential.confidence) ----

def t_at_levels(p_by_look: np.ndarray) -> HalfWidth:
    """Half-width of a t-interval whose two-sided level at look k (1-based repeats) is p_by_look[k-1]."""
    def hw(s: Stream, confidence: float) -> np.ndarray:
        p = np.broadcast_to(p_by_look[: s.w.shape[1]], s.w.shape)
        ok = s.nu >= 1
        q = student_t.isf(p / 2.0, np.where(ok, s.nu, 1.0))
        return np.where(ok, q * np.sqrt(s.w / np.where(ok, s.nu, 1.0) / np.where(s.m > 0, s.m, 1.0)), np.inf)
    return hw


def spending_levels(spend, looks: int, alpha: float, sims: int = 400_000, seed: int = 99) -> np.ndarray:
    """Lan–DeMets: nominal two-sided levels for looks 2..looks (info fraction k/looks) whose boundary
    crossing probabilities spend alpha·spend(t) — z boundaries by simulating the Brownian motion, then the
    same nominal level used with the t distribution at each look (the usual approximation)."""
    rng = np.random.default_rng(seed)
    fr = np.arange(2, looks + 1) / looks
    inc = np.diff(np.concatenate([[0.0], fr]))
    z = np.cumsum(rng.normal(size=(sims, len(fr))) * np.sqrt(inc), axis=1) / np.sqrt(fr)
    alive = np.ones(sims, dtype=bool)
    levels, spent = [np.nan], 0.0  # look 1: no verdict
    for k, f in enumerate(fr):
        target = alpha * spend(f) - spent
        spent = alpha * spend(f)
        a = np.abs(z[alive, k])
        cnt = int(round(target * sims))
        c = np.inf if cnt <= 0 else np.sort(a)[::-1][cnt - 1]
        alive[alive] = a < c
        levels.append(2.0 * norm.sf(c))
    return np.array(levels)


def asymptotic_cs(t_star: float) -> HalfWidth:
    """Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas (2024), two-sided asymptotic CS with the plug-in
    sd: θ̂ ± σ̂·√(2(Mρ²+1)/(M²ρ²) · log(√(Mρ²+1)/α)), ρ tuned to be tightest at M = t_star (in the units of M:
    matched repeats, or pairs for the pooled statistics)."""
    def hw(s: Stream, confidence: float) -> np.ndarray:
        alpha = 1.0 - confidence
        rho2 = (-2 * math.log(alpha) + math.log(-2 * math.log(alpha) + 1)) / t_star
        sd = np.sqrt(s.w / np.maximum(s.nu, 1.0))
        m = np.where(s.m > 0, s.m, 1.0)
        out = sd * np.sqrt(2 * (m * rho2 + 1) / (m * m * rho2) * np.log(np.sqrt(m * rho2 + 1) / alpha))
        return np.where(s.nu >= 1, out, np.inf)
    return hw


def candidates(cases: int) -> dict[str, tuple[HalfWidth, bool]]:
    """name → (half-width, on the pooled-σ statistics rather than the matched repeats)."""
    alpha = 1.0 - CONF
    looks = MAX_R - MIN_R + 1
    bonf = np.full(MAX_R, alpha / looks)
    return {
        "CS mixture g=1 (chosen)": (cs_method(1.0), False),
        "CS mixture g=0.25": (cs_method(0.25), False),
        "CS mixture g=0.5": (cs_method(0.5), False),
        "CS mixture g=2": (cs_method(2.0), False),
        "CS mixture g=4": (cs_method(4.0), False),
        "Bonferroni t, α/11 per look": (t_at_levels(bonf), False),
        "Lan-DeMets Pocock-type, t": (t_at_levels(spending_levels(
            lambda f: math.log(1 + (math.e - 1) * f), MAX_R, alpha)), False),
        "Lan-DeMets OBF-type, t": (t_at_levels(spending_levels(
            lambda f: 2 * norm.sf(norm.isf(alpha / 2) / math.sqrt(f)) / alpha, MAX_R, alpha)), False),
        "asymptotic CS, tight at 3 repeats": (asymptotic_cs(3), False),
        "asymptotic CS, tight at 12 repeats": (asymptotic_cs(12), False),
        "naive t-interval at every look (INVALID)": (t_every_look, False),
        "pooled σ, CS g=1 (the former; INVALID with unequal noise)": (cs_method(1.0), True),
        "pooled σ, asymptotic CS at 12 repeats": (asymptotic_cs(12 * cases), True),
        "pooled σ, naive t at every look (INVALID)": (t_every_look, True),
    }


# ---- helpers ----

def pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def run(model: Model, experiments: int, seed: int) -> Looks:
    return experiment_looks(model, experiments, SIM_R, seed)


def right_rate(o: Outcome, effect: float) -> float:
    """The share of the right verdict: pays above the margin, equivalent/does not pay under no effect."""
    if effect > MIN_EFFECT:
        return o.rate("pays")
    return o.rate("equivalent") + o.rate("does not pay")


def fixed_rates(lk: Looks, effect: float) -> dict[int, float]:
    return {n: right_rate(fixed(lk, n, MIN_EFFECT, CONF), effect) for n in range(2, SIM_R + 1)}


def pair_sd(model: Model) -> tuple[float, tuple[float, ...]]:
    """(sd, weights) of the model's noise, as :func:`leverbench.analysis.sequential.confidence.fixed_power`
    takes them: the root mean square over cases of one pair's log sd, and each case's share of the noise variance."""
    cv = np.broadcast_to(np.asarray(model.cv, dtype=float), (len(model.base_s),))
    var = 2.0 * np.log1p(cv * cv)
    return float(math.sqrt(np.mean(var))), tuple(float(v) for v in var / var.sum())


def table(rows: list[list[str]], head: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    print("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(head, widths))))
    for r in rows:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    print()


def table1(base: Model, E: int, seed: int, null: Looks, false_pays_fixed: dict[int, float]) -> list[list[str]]:
    rows = []
    for i, eff in enumerate(EFFECTS):
        lk = null if eff == 1.0 else run(replace(base, effect=eff), E, seed + 1 + i)
        o = sequential(lk, MIN_EFFECT, CONF, MIN_R, MAX_R, truth=math.log(eff))
        n_m = "-" if eff == MIN_EFFECT else matched_fixed_n(right_rate(o, eff), fixed_rates(lk, eff), false_pays_fixed)
        verdict = "pays" if eff > MIN_EFFECT else "does not pay"
        sd, weights = pair_sd(base)
        n90 = fixed_design_repeats(math.log(eff), sd, 4, MIN_EFFECT, CONF, 0.90, verdict, weights=weights)
        n99 = fixed_design_repeats(math.log(eff), sd, 4, MIN_EFFECT, CONF, 0.99, verdict, weights=weights)
        ratio = f"{o.mean_repeats / n_m:.2f}" if isinstance(n_m, int) else "-"
        rows.append([f"{eff:.1f}x", *(pct(o.rate(NAMES[k])) for k in (1, 2, 3, 4)), f"{o.mean_repeats:.2f}",
                     pct(float(np.mean(o.missed))), str(n_m), ratio, str(n90 or "-"), str(n99 or "-")])
    return rows


HEAD1 = ["effect", "pays %", "equiv %", "not pay %", "undec %", "mean rep", "miss %", "fixed n (matched)", "seq/fixed",
         "fixed n @90%", "fixed n @99%"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiments", type=int, default=20000, help="simulated experiments per condition")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--tiny", action="store_true", help="--experiments 50: every table in seconds (too few to read)")
    if "--tiny" in (sys.argv[1:] if argv is None else argv):
        ap.set_defaults(experiments=50)
    args = ap.parse_args(argv)
    E, seed = args.experiments, args.seed
    t0 = time.time()
    base = Model()
    null = run(base, E, seed)
    false_pays_fixed = {n: fixed(null, n, MIN_EFFECT, CONF).rate("pays") for n in range(2, SIM_R + 1)}

    print(f"# 1. Confidence sequence (matched repeats, mixture g=1): {E} experiments per row, 4 cases, cv 10 %, "
          "drift 10 %, counterbalanced\n")
    table(table1(base, E, seed, null, false_pays_fixed), HEAD1)
    for j, (name, cv) in enumerate(UNEQUAL.items()):
        m = replace(base, cv=cv)
        lk0 = run(m, E, seed + 60 + 10 * j)
        fp = {n: fixed(lk0, n, MIN_EFFECT, CONF).rate("pays") for n in range(2, SIM_R + 1)}
        print(f"# 1{'bc'[j]}. The same, unequal noise: {name} (cv {', '.join(f'{c:.0%}' for c in cv)} by case)\n")
        table(table1(m, E, seed + 60 + 10 * j, lk0, fp), HEAD1)

    print("# 2. Candidates, same experiments (margin = true effect 1.1: at most 2.5 % 'pays' allowed)\n")
    looks_by = {eff: (null if eff == 1.0 else run(replace(base, effect=eff), E, seed + 1 + EFFECTS.index(eff)))
                for eff in (1.0, 1.1, 1.3)}
    fixed13 = fixed_rates(looks_by[1.3], 1.3)
    at_margin = replace(base, effect=MIN_EFFECT)
    stressed = {name: run(replace(at_margin, cv=cv), E, seed + 50 + j) for j, (name, cv) in enumerate(UNEQUAL.items())}
    stressed["blocked, drift 50 %"] = run(replace(at_margin, order="blocked", drift=0.5), E, seed + 52)
    rows = []
    for name, (method, pooled) in candidates(4).items():
        o = {eff: sequential(lk, MIN_EFFECT, CONF, MIN_R, MAX_R, method, truth=math.log(eff), pooled=pooled)
             for eff, lk in looks_by.items()}
        hard = [sequential(lk, MIN_EFFECT, CONF, MIN_R, MAX_R, method, truth=math.log(MIN_EFFECT), pooled=pooled)
                for lk in stressed.values()]
        n_m = matched_fixed_n(o[1.3].rate("pays"), fixed13, false_pays_fixed)
        rows.append([name, pct(o[1.0].rate("pays")), pct(o[1.1].rate("pays")), pct(float(np.mean(o[1.1].missed))),
                     *(x for h in hard[:2] for x in (pct(float(np.mean(h.missed))), pct(h.rate("pays")))),
                     pct(float(np.mean(hard[2].missed))),
                     pct(o[1.3].rate("pays")), f"{o[1.3].mean_repeats:.2f}", f"{o[1.0].mean_repeats:.2f}", str(n_m),
                     f"{o[1.3].mean_repeats / n_m:.2f}" if n_m else "-"])
    table(rows, ["method", "pays@1.0 %", "pays@1.1 %", "miss@1.1 %", "miss, 1 case 10x noisier %", "pays, same %",
                 "miss, 2 determ. + 2 noisy %", "pays, same %", "miss, blocked+drift 50 % %", "pays@1.3 %", "rep@1.3",
                 "rep@1.0", "fixed n", "rep/fixed"])

    print("# 3. Noise × drift × order (chosen method)\n")
    rows = []
    k = 100
    for cv in (0.05, 0.10, 0.20):
        for drift in (0.0, 0.10, 0.50):
            for order in ("counterbalanced", "fixed", "blocked"):
                if drift == 0.0 and order != "counterbalanced":
                    continue
                m = replace(base, cv=cv, drift=drift, order=order)
                k += 1
                at_margin = run(replace(m, effect=MIN_EFFECT), E, seed + 10 * k)
                o11 = sequential(at_margin, MIN_EFFECT, CONF, MIN_R, MAX_R, truth=math.log(MIN_EFFECT))
                bias = float(np.mean(at_margin.est[:, MAX_R - 1])) - math.log(MIN_EFFECT)
                o13 = sequential(run(replace(m, effect=1.3), E, seed + 10 * k + 1), MIN_EFFECT, CONF, MIN_R, MAX_R)
                rows.append([f"cv {cv:.0%}, drift {drift:.0%}, {order}", pct(o11.rate("pays")),
                             pct(float(np.mean(o11.missed))), f"{100 * bias:+.2f}", pct(o13.rate("pays")),
                             f"{o13.mean_repeats:.2f}"])
    table(rows, ["condition", "pays@1.1 %", "miss@1.1 %", "bias of log-ratio at 12 rep, %", "pays@1.3 %", "rep@1.3"])

    print("# 4. Robustness (chosen method; cv 10 %, drift 10 %, counterbalanced unless said)\n")
    variants = {
        "as the issue (reference)": base,
        "cv 5/10/15/20 % by case": replace(base, cv=(0.05, 0.10, 0.15, 0.20)),
        **{f"cv {'/'.join(f'{100 * c:g}' for c in cv)} % by case ({name})": replace(base, cv=cv)
           for name, cv in UNEQUAL.items()},
        "5 % of turns fail": replace(base, fail_rate=0.05),
        "5 % of turns 1.5x slower (spikes)": replace(base, spike_rate=0.05),
        "1 case": replace(base, base_s=(20.0,), case_offsets=(0.0,)),
        "8 cases": replace(base, base_s=(3.0, 4.0, 6.0, 9.0, 14.0, 20.0, 30.0, 45.0),
                           case_offsets=tuple(np.linspace(-0.07, 0.07, 8))),
        "case effects ±0.3 (log)": replace(base, case_offsets=(-0.3, -0.1, 0.1, 0.3)),
    }
    rows = []
    for j, (name, m) in enumerate(variants.items()):
        o = {eff: sequential(run(replace(m, effect=eff), E, seed + 1000 + 10 * j + i), MIN_EFFECT, CONF, MIN_R, MAX_R,
                             truth=math.log(eff)) for i, eff in enumerate((1.0, 1.1, 1.3))}
        rows.append([name, pct(o[1.0].rate("pays")), pct(o[1.0].rate("undecided")), f"{o[1.0].mean_repeats:.2f}",
                     pct(float(np.mean(o[1.0].missed))), pct(o[1.1].rate("pays")), pct(float(np.mean(o[1.1].missed))),
                     pct(o[1.3].rate("pays")), f"{o[1.3].mean_repeats:.2f}"])
    table(rows, ["variant", "pays@1.0 %", "undec@1.0 %", "rep@1.0", "miss@1.0 %", "pays@1.1 %", "miss@1.1 %",
                 "pays@1.3 %", "rep@1.3"])

    print("# 5. Fixed designs: the fixed interval (per-case variances, Welch–Satterthwaite) against one pooled σ; "
          "true effect at the margin, no drift (miss: the truth outside; at most 5 % allowed, 'pays' at most 2.5 %)\n")
    rows = []
    for j, (name, cv) in enumerate({"equal noise (cv 10 %)": 0.10, **UNEQUAL}.items()):
        lk = run(replace(base, effect=MIN_EFFECT, drift=0.0, cv=cv), E, seed + 2000 + j)
        for n in (2, 3, 4, 6, 12):
            w = fixed(lk, n, MIN_EFFECT, CONF, truth=math.log(MIN_EFFECT))
            p = fixed(lk, n, MIN_EFFECT, CONF, truth=math.log(MIN_EFFECT), pooled=True)
            rows.append([name, str(n), pct(float(np.mean(w.missed))), pct(w.rate("pays")),
                         pct(float(np.mean(p.missed))), pct(p.rate("pays"))])
    table(rows, ["noise", "repeats", "miss, per-case %", "pays, per-case %", "miss, pooled σ %", "pays, pooled σ %"])
    print(f"({time.time() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
