"""The prefix cache of a what-if's arm as its engine keeps it, on the simulation's clock (issue 22, defect 6).

:func:`.whatif.simulate` tells the arm's cache three moments of every call: taken into service
(:meth:`Serving.admit`, which answers its hit), its prefill done (:meth:`Serving.prefilled`), ended
(:meth:`Serving.done`).  What the cache does then is the engine's rule (``ArmSpec.cache_rule``, from the
arm's engine: :func:`rule_of`); the bookkeeping is :mod:`.prefix_cache`'s.

    shared          vLLM, SGLang, an engine not known: one cache of blocks shared by every request
                    (:class:`~.prefix_cache.PrefixCache`).  Taken into service, a call hits the leading
                    blocks present and holds them, and reserves the rest of its KV (its prompt's other
                    tokens and its answer); once its prefill has computed its prompt's blocks they are in
                    the cache for every later call, also while it decodes (vLLM registers a block's hash as
                    soon as it is computed; SGLang inserts a prefilled prompt into its radix tree); when it
                    ends, its blocks and its answer's become free, most recently used.  Blocks held and KV
                    reserved by requests in flight count against the capacity and are never evicted
    shared_prompts  the leverbench simulator: as shared, but it caches prompts only, not answers (it enters
                    a prompt's blocks after its prefill: :mod:`leverbench.engines.simulator`)
    slots           llama.cpp: each slot keeps its last request's prompt and answer, a call takes the slot
                    most like its prompt, and a host-memory cache keeps whole prompts
                    (:class:`~.prefix_cache.SlotCache`); the capacity is that host-memory cache's

The unbounded shadow cache beside it (the upper bound) is shared, takes a prompt's units when its prefill
ends and the answer's when the call ends, under every rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from .plan import PlannedCall
from .prefix_cache import PrefixCache, SlotCache, Unit, unbounded

if TYPE_CHECKING:
    from ...json_types import JSONValue

RULES = {
    "shared": "one cache shared by all requests: a prompt's blocks shared once its prefill computed them, the "
              "KV of requests in flight counted against the capacity (vLLM, SGLang)",
    "shared_prompts": "one cache shared by all requests: a prompt's blocks shared once its prefill computed "
                      "them, answers not cached (the leverbench simulator)",
    "slots": "per slot, its last prompt and answer; a call takes the slot most like its prompt; whole prompts "
             "kept in host memory (llama.cpp's --cache-ram)",
}


def rule_of(knobs: Mapping[str, JSONValue]) -> tuple[str, str]:
    """(the cache rule of an arm's engine, why): the simulator's own, llama.cpp's slots, else shared (vLLM's,
    SGLang's, and the rule assumed for an engine the knobs do not name)."""
    engine = str(knobs.get("engine") or "").lower()
    if knobs.get("simulator"):
        return "shared_prompts", "the leverbench simulator's rule"
    if "llama" in engine:
        return "slots", "llama.cpp's rule"
    if "vllm" in engine or "sglang" in engine:
        return "shared", f"{knobs['engine']}'s rule"
    return "shared", "vLLM's rule (the arm's engine is not known)"


class Serving:
    """An arm's cache (``None`` without one) and the unbounded shadow, told when each call is admitted, has
    been prefilled and has ended (see the module docstring)."""

    def __init__(self, rule: str, capacity_tokens: float, block_tokens: int, slots: int, cache: bool):
        if rule not in RULES:
            raise ValueError(f"unknown cache rule {rule!r} (rules: {', '.join(RULES)})")
        self.rule = rule
        self.cache: PrefixCache | SlotCache | None = None
        if cache:
            self.cache = (SlotCache(slots, capacity_tokens, block_tokens) if rule == "slots"
                          else PrefixCache(capacity_tokens, block_tokens))
        self.shadow = unbounded(block_tokens)
        self._units: dict[int, list[Unit]] = {}
        self._held: dict[int, int] = {}  # call → how many of its leading units it holds (shared rules)
        self._reserved: dict[int, float] = {}
        self._slot: dict[int, int] = {}

    def admit(self, call: PlannedCall, served: int | None = None) -> int:
        """The tokens of the call's prompt its arm's cache serves as it is taken into service (0 without a
        cache); ``served``: the trace's cached tokens, served as recorded (a call without prefix structure)."""
        cid = id(call)
        us = self.shadow.units(call.pieces)
        self._units[cid] = us
        if served is None:
            self.shadow.lookup(us, call.input_tokens)
        else:
            self.shadow.count(call.input_tokens, served)
        c = self.cache
        if c is None:
            return 0
        if isinstance(c, SlotCache):
            slot, hit = c.take(us, call.input_tokens)
            self._slot[cid] = slot
            if served is not None:
                c.hit_tokens += served - hit
                hit = served
            return hit
        j = c.present(us)
        hit = c.lookup(us, call.input_tokens) if served is None else served
        if served is not None:
            c.count(call.input_tokens, served)
        c.hold(us[:j])
        self._held[cid] = j
        self._reserved[cid] = max(call.input_tokens + call.output_tokens - sum(u.tokens for u in us[:j]), 0)
        c.reserve(self._reserved[cid])
        return hit

    def prefilled(self, call: PlannedCall) -> None:
        """The call's prefill ended: its prompt's units are in the shared caches from now on."""
        cid = id(call)
        us = self._units[cid]
        self.shadow.insert(us)
        c = self.cache
        if isinstance(c, PrefixCache):
            new = us[self._held[cid]:]
            c.hold(new)
            self._held[cid] = len(us)
            moved = min(sum(u.tokens for u in new), self._reserved[cid])
            self._reserved[cid] -= moved
            c.reserve(-moved)

    def done(self, call: PlannedCall, now: float) -> None:
        """The call ended at ``now``: its units are released (with its answer's, where the rule caches it)."""
        cid = id(call)
        us = self._units.pop(cid)
        answer = self.shadow.units((*call.pieces, call.out_piece))[-1] if call.out_piece is not None else None
        if answer is not None:
            self.shadow.insert([answer])
        c = self.cache
        if isinstance(c, SlotCache):
            c.give_back(self._slot.pop(cid), [*us, answer] if answer is not None else us, now)
        elif isinstance(c, PrefixCache):
            c.reserve(-self._reserved.pop(cid))
            c.release(us[:self._held.pop(cid)], answer if self.rule == "shared" else None)
