"""The answer cap: a limit on how many tokens an answer may have (the request's ``max_tokens``), set by the client,
not the server.  It acts on decode alone: the tokens an answer would have written past the cap are not decoded.

It only pays where shorter answers still do the job (hidden reasoning tokens count too: a cap can end with an
empty answer), so ``analyze`` shows its saving but never tells to try it first.  No engine reports it and no
engagement is judged.

On traffic (``analyze``): saved = max(0, O − N) / decode_tps per call, N the cap (``--answer-cap``; by default the
median output, an assumption the conditions say).
"""

from __future__ import annotations

from typing import Optional

from .lever import GroupSums, Lever, TrafficFacts, TrafficSaving


def _saved(g: GroupSums, decode_tps: Optional[float]) -> Optional[float]:
    """Σ max(0, O − N) / decode_tps: the decode seconds of the tokens above the cap."""
    return g["excess"] / decode_tps if decode_tps else None


def _parameter(t: TrafficFacts) -> Optional[str]:
    return f"cap {t.answer_cap:.0f} tokens" + (", the median output" if t.answer_cap_default else "")


def _condition(t: TrafficFacts) -> Optional[str]:
    return (f"the answer cap ({t.answer_cap:.0f} tokens) is the median output, an assumption (set --answer-cap): it "
            "pays only if shorter answers still do the job") if t.answer_cap_default else None


LEVER = Lever(name="answer_cap", summary="a cap on the answer's length (max_tokens)", phases=("decode",),
              projection="decode", words="answer cap", advice="cap max_tokens where shorter answers still do the job",
              traffic=TrafficSaving(rate="decode_tps", saved=_saved, parameter=_parameter, first=False,
                                    condition=_condition),
              rank=80)
