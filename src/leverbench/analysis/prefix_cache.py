"""A prefix cache of finite capacity: what a serving engine's KV cache can reuse, call after call (issue 15).

A prompt is a sequence of **pieces** ``(key, tokens)`` in prefix order: two pieces with the same key hold
the same text *after the same prefix* (a Mooncake hash id; a session's earlier rounds; an assumed common
prefix in chunks; a call's own unique rest).  The cache keeps whole pieces (its **units**) and evicts the
least recently used one when it is full:

    unit key(i)     = (key(i − 1), piece key i)             a chain: a piece is reused only after its prefix
    cacheable(i)    = B · (⌊end_i / B⌋ − ⌊end_{i−1} / B⌋)   end_i = tokens up to the end of piece i; only whole
                                                            blocks of B tokens are cached (vLLM's rule; B = 1:
                                                            token by token, as llama.cpp compares prompts)
    hit tokens      = Σ cacheable(i) over the leading units present, ≤ input − 1 (the last position is
                      always computed: the engine needs its logits)
    after a call    its units are (re)inserted as most recently used, the LAST one first, so that a prompt's
                    first pieces are the last to go (vLLM frees a finished request's blocks tail first)
    capacity        Σ cacheable tokens of the units held ≤ capacity_tokens; the least recently used unit is
                    evicted whole until it fits (a unit larger than the whole cache is not kept)

A piece's blocks are evicted together (one unit), where an engine would evict block by block: the
difference is at most one piece per eviction.  Pure bookkeeping, no clock: the caller (the what-if
simulation, the traffic analysis) decides when a call looks up and when it inserts.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Hashable, Sequence

Piece = tuple[Hashable, int]  # (key, tokens)

#: The cache's size when neither the user (--cache-tokens) nor the arm says: an 80 GB GPU serving an 8B model
#: (Llama-3-8B: 32 layers × 8 KV heads × 128 dims × 2 (K, V) × 2 bytes = 128 KiB of KV per token) keeps about
#: 32 GiB for its KV cache after the weights and activations: 262,144 tokens.
DEFAULT_CACHE_TOKENS = 262_144
#: Tokens per cache block when the arm does not say: vLLM's default on a GPU.
DEFAULT_BLOCK_TOKENS = 16


@dataclass(frozen=True)
class Unit:
    """One piece as the cache holds it: its chained key and the tokens of it that can be cached."""

    key: int
    tokens: int


def units(pieces: Sequence[Piece], block_tokens: int) -> list[Unit]:
    """The cache units of a prompt's pieces (see the module docstring: chained keys, whole blocks only)."""
    out: list[Unit] = []
    prev: Hashable = None
    end = 0
    for key, n in pieces:
        start, end = end, end + max(int(n), 0)
        prev = hash((prev, key))
        out.append(Unit(prev, block_tokens * (end // block_tokens - start // block_tokens)))
    return out


class PrefixCache:
    """A finite LRU prefix cache over :class:`Unit` s (see the module docstring for its rules).

    ``capacity_tokens`` may be ``math.inf`` (an unbounded cache that never evicts: the upper bound).
    Counters: ``lookups``, ``looked_up_tokens`` (input tokens looked up), ``hit_tokens``, ``evicted_tokens``.
    """

    def __init__(self, capacity_tokens: float, block_tokens: int = DEFAULT_BLOCK_TOKENS):
        if not capacity_tokens >= 0:
            raise ValueError(f"capacity_tokens must be >= 0 (got {capacity_tokens})")
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1 (got {block_tokens})")
        self.capacity = capacity_tokens
        self.block = int(block_tokens)
        self.held: OrderedDict[int, int] = OrderedDict()  # key → cacheable tokens, least recently used first
        self.size = 0
        self.lookups = 0
        self.looked_up_tokens = 0
        self.hit_tokens = 0
        self.evicted_tokens = 0

    def units(self, pieces: Sequence[Piece]) -> list[Unit]:
        return units(pieces, self.block)

    def lookup(self, us: Sequence[Unit], input_tokens: int) -> int:
        """Tokens of a prompt of ``input_tokens`` the cache holds: its leading units present, ≤ input − 1."""
        hit = 0
        for u in us:
            if u.key not in self.held:
                break
            hit += u.tokens
        hit = max(0, min(hit, input_tokens - 1))
        self.lookups += 1
        self.looked_up_tokens += input_tokens
        self.hit_tokens += hit
        return hit

    def insert(self, us: Sequence[Unit]) -> None:
        """(Re)insert a call's units as most recently used, the last first; evict the least recently used."""
        for u in reversed(us):
            if u.tokens > self.capacity:
                continue
            old = self.held.pop(u.key, None)
            if old is not None:
                self.size -= old
            self.held[u.key] = u.tokens
            self.size += u.tokens
        while self.size > self.capacity and self.held:
            _, n = self.held.popitem(last=False)
            self.size -= n
            self.evicted_tokens += n

    @property
    def hit_share(self) -> float | None:
        """hit tokens / input tokens looked up."""
        return self.hit_tokens / self.looked_up_tokens if self.looked_up_tokens else None


def unbounded(block_tokens: int = DEFAULT_BLOCK_TOKENS) -> PrefixCache:
    """A cache that never evicts (the upper bound an unbounded cache would reach)."""
    return PrefixCache(math.inf, block_tokens)
