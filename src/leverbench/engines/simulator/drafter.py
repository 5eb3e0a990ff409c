"""The simulator's drafter: how many tokens a decode step emits, what the step costs, and the exact decode time
that follows (the oracle tests compare a measurement with).  Pure functions, no state: the exchange paces its
steps with them and a test calls the same ones as "the simulator's own formula".

Two models (``SimConfig.draft_model``), with K = ``draft_k``, p = the request's acceptance (``draft_acceptance``,
or more from the drafter's memory), c = ``draft_cost``, s = ``decode_batch_slowdown``:

``round`` (the default, as before)
    Every step emits ``1 + round(K·p)`` tokens (:func:`round_tokens_per_step`; the last step what remains), and
    the batch term counts requests: a step takes ``(1 + s·(k − 1))`` times as long, k the requests decoding
    when it starts (itself included).
``expected``
    K drafts a step, each accepted with probability p in turn, the first rejection ending the step (whose
    target model then samples one token of its own): a step emits E = (1 − p^(K+1)) / (1 − p) tokens in
    expectation (E = K + 1 at p = 1; E = 1 at K = 0; :func:`expected_tokens_per_step`).  The simulator
    realises E deterministically, per request, by accumulating it: after i steps the request has emitted
    ``min(n, floor(i·E))`` tokens (:func:`decode_step_sizes`), so every step emits floor(E) or ceil(E)
    tokens, at least 1 and at most K + 1, and n tokens take ``ceil(n / E)`` steps.  The verification batch
    counts tokens, not requests: each decoding request puts its 1 + K tokens in the step, so a step takes
    ``(1 + s·(B − 1))`` times as long, B = Σ over the requests decoding when it starts of (1 + K) = k·(1 + K)
    (K is one simulator's setting; alone, B − 1 = K: verifying K drafted tokens is not free when s > 0).

In both models each step also costs ``(1 + c·K)`` plain steps (:func:`step_cost`: drafting K tokens, each c of a
plain step; 1 at c = 0, the default, and without a drafter).  A step's duration is therefore

    (1 / decode_tps + decode_slowdown_per_ctx · L) · speed_factor · batch_factor · (1 + c·K)

with L the context when it starts (the prompt plus the tokens emitted before it), and the request's decode time
is the sum over its steps (:func:`true_decode_seconds`).  With no context term and a batch that does not change,
that is ``steps(n) · (1 + c·K) · batch_factor · speed_factor / decode_tps``, steps(n) = ceil(n / E) (expected) or
ceil(n / (1 + round(K·p))) (round).  The batch term is linear in k, so a request whose batch changed from step to
step took exactly the time of its mean batch (its truth's ``decode_batch``) when its steps' plain durations are
equal (no context term).

Spec-decode counters (every dialect, :mod:`.dialects`): a step counts 1 draft, K draft tokens and
``size − 1`` accepted tokens, at draft positions 0 .. size − 2 (acceptance in turn: a step's accepted drafts are
its first ones).  In ``expected`` mode the accepted share is (E − 1) / K, not p: p is the chance of each draft
given the ones before it were accepted.  The per-position counts are those of the deterministic accumulation
(positions below floor(E) − 1 every step, position floor(E) − 1 in a share frac(E) of them), not the geometric
p, p², ... a random draw would give.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..sim_config import SimConfig

_EPS = 1e-9  # i·E a float rounding below a whole number still counts as it (the accumulation's floor)


def round_tokens_per_step(k: int, p: float) -> int:
    """Tokens one decode step emits in the ``round`` model: 1 without a drafter (k = 0), else 1 + round(k·p)
    (Python's ``round``)."""
    if not k:
        return 1
    return 1 + round(k * p)


def expected_tokens_per_step(k: int, p: float) -> float:
    """E = (1 − p^(k+1)) / (1 − p): the tokens a step emits in expectation when k drafts are each accepted with
    probability p in turn and the step adds one token of its own; k + 1 at p = 1, 1 at k = 0."""
    if k <= 0:
        return 1.0
    if p >= 1.0:
        return float(k + 1)
    return (1.0 - p ** (k + 1)) / (1.0 - p)


def step_cost(k: int, c: float) -> float:
    """What one decode step costs in plain steps: 1 + c·k (drafting k tokens, each c of a plain step)."""
    return 1.0 + c * k


def batch_factor(decoding: float, k: int, slowdown: float, model: str = "round") -> float:
    """How many times as long a decode step takes when *decoding* requests (itself included; a mean is allowed)
    are in their decode phase as it starts: ``round`` 1 + s·(decoding − 1) (requests), ``expected``
    1 + s·(decoding·(1 + k) − 1) (each request's 1 + k tokens in the verification batch)."""
    if model == "expected":
        return 1.0 + slowdown * (decoding * (1 + k) - 1)
    return 1.0 + slowdown * (decoding - 1)


def step_sizes(n_tokens: int, per_step: int) -> list[int]:
    """Tokens per decode step: full steps, then the remainder."""
    full, rest = divmod(n_tokens, per_step)
    return [per_step] * full + ([rest] if rest else [])


def decode_step_sizes(n_tokens: int, k: int, p: float, model: str = "round") -> list[int]:
    """The tokens each decode step of an *n_tokens* answer emits: ``round``: :func:`step_sizes` at
    :func:`round_tokens_per_step`; ``expected``: after step i, ``min(n, floor(i·E))`` tokens in all, E
    :func:`expected_tokens_per_step` (floor(E) or ceil(E) a step; ceil(n / E) steps)."""
    if model != "expected" or not k:
        return step_sizes(n_tokens, round_tokens_per_step(k, p))
    e = expected_tokens_per_step(k, p)
    sizes: list[int] = []
    emitted, i = 0, 0
    while emitted < n_tokens:
        i += 1
        total = min(n_tokens, math.floor(i * e + _EPS))
        sizes.append(total - emitted)
        emitted = total
    return sizes


def true_decode_seconds(n_tokens: int, k: int, p: float, c: float = 0.0, decode_tps: float = 200.0, *,
                        batch: float = 1.0, batch_slowdown: float = 0.0, model: str = "expected", context: int = 0,
                        slowdown_per_ctx: float = 0.0, speed_factor: float = 1.0) -> float:
    """The simulator's decode time of an *n_tokens* answer (its truth's ``decode_s`` on an idle machine): the sum
    over :func:`decode_step_sizes` of (1 / decode_tps + slowdown_per_ctx · L) · speed_factor ·
    :func:`batch_factor` (at *batch* requests decoding, e.g. the truth's ``decode_batch``) · :func:`step_cost`,
    L = *context* (the prompt's tokens) plus the tokens emitted before the step.  k = 0: no drafter."""
    per = speed_factor * batch_factor(batch, k, batch_slowdown, model) * step_cost(k, c)
    total, emitted = 0.0, 0
    for size in decode_step_sizes(n_tokens, k, p, model):
        total += 1.0 / decode_tps + slowdown_per_ctx * (context + emitted)
        emitted += size
    return total * per


def true_turn_seconds(cfg: SimConfig, prompt_tokens: int, n_tokens: int, concurrency: int = 1,
                      cached_tokens: int = 0) -> float:
    """The mean turn time (arrival to last token) of identical requests (*prompt_tokens* long, *cached_tokens* of
    them cached, *n_tokens* answered) sent by *concurrency* clients in a closed loop without pause, by *cfg*'s
    timing model: the service time S = overhead + prefill + :func:`true_decode_seconds` at a batch of
    b = min(concurrency, slots), times concurrency / slots when the clients outnumber the slots (they queue in
    waves: Little's law with every slot busy).  Exact, up to the loop's lateness, when b requests start together
    (a wave's requests prefill side by side and decode as one batch); it leaves out the speed factor (drift,
    jitter, cold start), faults and the drafter's memory (p = ``draft_acceptance``)."""
    uncached = prompt_tokens - cached_tokens
    prefill = uncached / cfg.prefill_tps + cfg.prefill_quadratic * uncached * (cached_tokens + uncached / 2.0)
    batch = min(concurrency, cfg.slots)
    decode = true_decode_seconds(n_tokens, cfg.draft_k, cfg.draft_acceptance, cfg.draft_cost, cfg.decode_tps,
                                 batch=batch, batch_slowdown=cfg.decode_batch_slowdown, model=cfg.draft_model,
                                 context=prompt_tokens, slowdown_per_ctx=cfg.decode_slowdown_per_ctx)
    return (cfg.overhead_s + prefill + decode) * max(1.0, concurrency / cfg.slots)
