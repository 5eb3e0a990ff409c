"""Serving rates for the traffic analysis, and where they come from.

``Rates`` are what the analysis applies to every call: prefill_s(I) =
prefill_a_s + I / prefill_tps, decode_s(O) = O / decode_tps.  They are had,
field by field, from where they are best known: by hand (``hand_rates``) > a
leverbench run's summary (``rates_from_summary``) > fitted from the traffic's
own latencies (:mod:`.traffic_fit`); ``choose_rates`` merges them.  A rate
book maps a model name to its rates, None to the rates of every other call.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Mapping

from typing_extensions import TypedDict

from ...errors import BadInput
from ...levers import registry
from ..base.knobs import differing, is_on

if TYPE_CHECKING:
    from ...schema.rate_rows import RateRow
    from ...schema.summary import Summary
    from ...schema.traffic_rows import HandRates, RateFitSummary, RatesJSON


@dataclass(frozen=True)
class Rates:
    """Measured serving rates, with where they came from.

    prefill_s(I) = prefill_a_s + I / prefill_tps; decode_s(O) = O / decode_tps.
    ``drafter_speedup`` = decode rate with the drafter / without.
    ``alternatives`` holds other measured values of ``prefill_tps``,
    ``decode_tps`` or ``drafter_speedup`` (other arms, other comparisons): they
    set the lever ranges.  ``conditions`` are the measurement's conditions
    (hardware, engine, concurrency) to quote with any number.
    """

    prefill_tps: float
    decode_tps: float
    source: str
    prefill_a_s: float = 0.0
    prefill_source: str = ""
    decode_source: str = ""
    drafter_speedup: float | None = None
    drafter_source: str | None = None
    prefill_input_range: tuple[float, float] | None = None
    fit: RateFitSummary | None = None
    alternatives: dict[str, tuple[float, ...]] = field(default_factory=dict)
    conditions: tuple[str, ...] = ()

    def as_dict(self) -> RatesJSON:
        return {"prefill_tps": self.prefill_tps, "prefill_a_s": self.prefill_a_s, "decode_tps": self.decode_tps,
                "source": self.source, "prefill_source": self.prefill_source, "decode_source": self.decode_source,
                "drafter_speedup": self.drafter_speedup, "drafter_source": self.drafter_source,
                "prefill_input_range": list(self.prefill_input_range) if self.prefill_input_range else None,
                "fit": self.fit, "alternatives": {k: list(v) for k, v in self.alternatives.items()},
                "conditions": list(self.conditions)}


# model name → Rates; the key None holds the rates for every other call
RateBook = Mapping[str | None, Rates]
#: The rate a lever's decode speedup is kept in, as a run measures it (its arm against its twin without it) or as
#: given (``--drafter-speedup``): the rate of the lever whose traffic saving needs it (the drafter's module says so).
SPEEDUP = "drafter_speedup"


def _speeding_knob() -> str | None:
    """The knob of the lever whose traffic saving needs :data:`SPEEDUP` (the drafter), or None."""
    return next((x.name for x in registry.traffic_levers() if x.traffic and x.traffic.rate == SPEEDUP), None)


# ---------------------------------------------------------------- per-call formulas


def rates_for(book: RateBook, model: str | None) -> Rates:
    r = book.get(model) if model is not None else None
    if r is None:
        r = book.get(None)
    if r is None:
        raise BadInput(f"no rates for model {model!r} and no rates for all calls")
    return r


def hand_rates(prefill_tps: float | None, decode_tps: float | None, prefill_a_s: float = 0.0) -> HandRates:
    """The fields given by hand (--prefill-tps, --decode-tps), to override others in ``choose_rates``."""
    out: HandRates = {}
    given: tuple[tuple[Literal["prefill_tps", "decode_tps"], float | None], ...] = (
        ("prefill_tps", prefill_tps), ("decode_tps", decode_tps))
    for name, v in given:
        if v is not None:
            if not v > 0:
                raise BadInput(f"--{name.replace('_', '-')} must be positive (got {v})")
            out[name] = float(v)
    if prefill_tps is not None:
        out["prefill_a_s"] = float(prefill_a_s)
    return out


class _ByHand(TypedDict, total=False):
    """The fields of :class:`Rates` that rates given by hand replace (``choose_rates``)."""

    prefill_tps: float
    prefill_a_s: float
    prefill_source: str
    prefill_input_range: tuple[float, float] | None
    decode_tps: float
    decode_source: str
    source: str


def choose_rates(hand: HandRates, run: Rates | None, fitted: RateBook | None) -> dict[str | None, Rates]:
    """Rates per model from where they are best known: by hand > run directory > fitted from the traffic.

    Field by field: a hand-given prefill or decode rate replaces that field in
    every model's rates; a run's rates replace fitted ones.  Raises BadInput
    when neither prefill nor decode can be had.
    """
    if run is not None:
        book: dict[str | None, Rates] = {None: run}
    elif fitted:
        book = dict(fitted)
    else:
        if "prefill_tps" not in hand or "decode_tps" not in hand:
            missing = [f"--{k.replace('_', '-')}" for k in ("prefill_tps", "decode_tps") if k not in hand]
            raise BadInput("no rates: this traffic has no latencies to fit them from; give --rates RUN_DIR "
                           f"(a leverbench run) or {' and '.join(missing)}")
        return {None: Rates(prefill_tps=hand["prefill_tps"], decode_tps=hand["decode_tps"],
                            prefill_a_s=hand.get("prefill_a_s", 0.0), source="given by hand",
                            prefill_source="given by hand", decode_source="given by hand")}
    out = {}
    for k, r in book.items():
        kw: _ByHand = {}
        if "prefill_tps" in hand:
            kw["prefill_tps"] = hand["prefill_tps"]
            kw["prefill_a_s"] = hand.get("prefill_a_s", 0.0)
            kw["prefill_source"] = "given by hand"
            kw["prefill_input_range"] = None
        if "decode_tps" in hand:
            kw["decode_tps"] = hand["decode_tps"]
            kw["decode_source"] = "given by hand"
        if kw:
            alts = {n: v for n, v in r.alternatives.items() if n not in kw}
            by_hand = ", ".join(f"{n} by hand" for n in ("prefill_tps", "decode_tps") if n in kw)
            kw["source"] = r.source + " (" + by_hand + ")"
            r = replace(r, alternatives=alts, **kw)
        out[k] = r
    return out


def with_drafter(book: RateBook, speedup: float | None,
                 source: str = "--drafter-speedup, given by hand") -> dict[str | None, Rates]:
    """Every model's rates with the drafter speedup set (``--drafter-speedup``)."""
    if speedup is None:
        return dict(book)
    if not speedup > 0:
        raise BadInput(f"--drafter-speedup must be positive (got {speedup})")
    return {k: replace(r, drafter_speedup=speedup, drafter_source=source,
                       alternatives={n: v for n, v in r.alternatives.items() if n != SPEEDUP})
            for k, r in book.items()}


def _rate_row(summary: Summary, arm: str) -> RateRow | None:
    return next((r for r in summary.get("rates") or [] if r.get("arm") == arm), None)


def rates_from_summary(summary: Summary, label: str = "run") -> Rates:
    """The no-lever rates of a leverbench run (its baseline arm), with the drafter's measured speedup.

    drafter_speedup = decode_tps of the arm that declares a drafter (the knob of the lever whose saving needs
    :data:`SPEEDUP`) / decode_tps of the arm that differs from it only in that knob (else the baseline);
    its speedup against every other arm without it goes to the alternatives, as do all arms' prefill rates and
    the other arms' decode rates.
    """
    base_name = summary.get("baseline")
    base = _rate_row(summary, base_name)
    base_prefill = base.get("prefill_tps") if base is not None else None
    base_decode = base.get("decode_tps") if base is not None else None
    if base is None or not base_prefill or not base_decode:
        raise BadInput(f"{label}: the baseline arm {base_name!r} has no measured prefill and decode rate "
                       "(summary rates); use another run or give --prefill-tps and --decode-tps")
    arms = {a["name"]: a for a in summary.get("arms") or []}
    cond = {n: dict(a.get("conditions") or {}) for n, a in arms.items()}
    rows = {r["arm"]: r for r in summary.get("rates") or [] if r.get("arm") in arms}
    decode = {n: tps for n, r in rows.items() if (tps := r.get("decode_tps"))}  # the arms with a decode rate
    knob = _speeding_knob()
    drafters = [n for n in arms if knob and is_on(cond[n].get(knob)) and n in decode]
    plain = [n for n in arms if not (knob and is_on(cond[n].get(knob))) and n in decode]
    speedup: float | None = None
    src: str | None = None
    speedups: list[float] = []
    if drafters:
        d = drafters[0]
        twin = next((n for n in plain if differing(cond[n], cond[d]) == [knob]), base_name)
        if twin in decode:
            speedup = decode[d] / decode[twin]
            src = (f"{label}: arm {d!r} ({cond[d].get(str(knob))}) vs {twin!r}, "
                   f"decode rates from {rows[d].get('decode_source')}")
        speedups = [decode[d] / decode[n] for n in plain]
    alts = {
        "prefill_tps": tuple(p for r in rows.values() if (p := r.get("prefill_tps"))),
        "decode_tps": tuple(decode[n] for n in plain),
        SPEEDUP: tuple(speedups),
    }
    bc = cond.get(base_name, {})
    run = summary.get("run") or {}
    conditions = [f"{k} {bc[k]}" for k in ("hardware", "engine") if bc.get(k)]
    base_arm = arms.get(base_name)
    model = base_arm.get("model") if base_arm else None
    if model:
        conditions.append(f"model {model}")
    host = run.get("host") or {}
    if host.get("cpu"):
        conditions.append(f"host {host['cpu']}" + (f", {host['cores']} cores" if host.get("cores") else ""))
    conditions.append(f"concurrency {run.get('concurrency', 1)}")
    drifted = [d["arm"] for d in summary.get("drift") or [] if d.get("drifted")]
    if drifted:
        conditions.append(f"the run flagged decode-rate drift on arm(s) {', '.join(drifted)}: "
                          "its rates moved while measured")
    rng = base.get("prefill_input_range")
    return Rates(prefill_tps=float(base_prefill), decode_tps=float(base_decode),
                 prefill_a_s=float(base.get("prefill_a_s") or 0.0),
                 source=f"{label}, baseline arm {base_name!r}",
                 prefill_source=str(base.get("prefill_source") or ""),
                 decode_source=str(base.get("decode_source") or ""),
                 drafter_speedup=speedup, drafter_source=src,
                 prefill_input_range=(float(rng[0]), float(rng[1])) if rng else None,
                 alternatives={k: v for k, v in alts.items() if len(v) > 1},
                 conditions=tuple(conditions))
