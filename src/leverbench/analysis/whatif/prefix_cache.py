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
simulation, :mod:`.whatif_cache`; the traffic analysis) decides when a call looks up and when it inserts.

Requests in flight (:class:`PrefixCache` ``hold`` / ``release`` / ``reserve``, the what-if's vLLM rule):

    held units      a unit a request in service uses (the blocks it hit, then its prompt's once computed) is
                    held: counted once however many requests share it, never evicted while held
    reserved        the KV a request in service holds outside held units (the rest of its prompt, its
                    answer) counts too:  Σ cacheable tokens held or free + reserved ≤ capacity_tokens, the
                    least recently used free unit evicted first; requests in flight alone may exceed it
                    (an engine would queue or preempt; the simulation admits by slots)
    release         a finished request's units become free, most recently used, its answer's (when cached)
                    and then its prompt's tail first

:class:`SlotCache` is llama.cpp's cache instead: no cache shared by requests, but per slot the tokens of its
last request, and a host-memory cache of whole prompts (see its docstring).
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
        self.free: OrderedDict[int, int] = OrderedDict()  # key → cacheable tokens, least recently used first
        self.in_use: dict[int, list[int]] = {}  # units held by requests in flight: key → [cacheable tokens, requests]
        self.size = 0  # cacheable tokens of the units, free or in use
        self.reserved = 0.0  # KV of requests in flight outside their units
        self.lookups = 0
        self.looked_up_tokens = 0
        self.hit_tokens = 0
        self.evicted_tokens = 0

    def units(self, pieces: Sequence[Piece]) -> list[Unit]:
        return units(pieces, self.block)

    def present(self, us: Sequence[Unit]) -> int:
        """How many leading units of a prompt the cache holds (free or in use)."""
        j = 0
        for u in us:
            if u.key not in self.free and u.key not in self.in_use:
                break
            j += 1
        return j

    def lookup(self, us: Sequence[Unit], input_tokens: int) -> int:
        """Tokens of a prompt of ``input_tokens`` the cache holds: its leading units present, ≤ input − 1."""
        hit = sum(u.tokens for u in us[:self.present(us)])
        hit = max(0, min(hit, input_tokens - 1))
        self.count(input_tokens, hit)
        return hit

    def count(self, input_tokens: int, hit: int) -> None:
        """Count one lookup of a prompt of ``input_tokens`` that hit ``hit`` tokens."""
        self.lookups += 1
        self.looked_up_tokens += input_tokens
        self.hit_tokens += hit

    def insert(self, us: Sequence[Unit]) -> None:
        """(Re)insert a call's units as most recently used, the last first (a unit in use stays as it is); evict
        the least recently used."""
        for u in reversed(us):
            if u.tokens > self.capacity or u.key in self.in_use:
                continue
            old = self.free.pop(u.key, None)
            if old is not None:
                self.size -= old
            self.free[u.key] = u.tokens
            self.size += u.tokens
        self._fit()

    def hold(self, us: Sequence[Unit]) -> None:
        """A request in service uses these units: each is held (taken from the free ones, or added) once more."""
        for u in us:
            entry = self.in_use.get(u.key)
            if entry is not None:
                entry[1] += 1
                continue
            if self.free.pop(u.key, None) is None:
                self.size += u.tokens
            self.in_use[u.key] = [u.tokens, 1]
        self._fit()

    def release(self, us: Sequence[Unit], answer: Unit | None = None) -> None:
        """A request that held ``us`` ended: each unit held once less; one no request holds is free again, most
        recently used, the answer's unit (kept as free, when given) and then the prompt's tail first."""
        if answer is not None:
            self.insert([answer])
        for u in reversed(us):
            entry = self.in_use.get(u.key)
            if entry is None:
                continue
            entry[1] -= 1
            if entry[1] > 0:
                continue
            del self.in_use[u.key]
            if entry[0] > self.capacity:
                self.size -= entry[0]  # larger than the whole cache: not kept
            else:
                self.free[u.key] = entry[0]
        self._fit()

    def reserve(self, tokens: float) -> None:
        """Tokens of KV held by requests in flight outside their units: + when taken, − when given back."""
        self.reserved = max(self.reserved + tokens, 0.0)
        self._fit()

    def _fit(self) -> None:
        while self.size + self.reserved > self.capacity and self.free:
            _, n = self.free.popitem(last=False)
            self.size -= n
            self.evicted_tokens += n

    @property
    def hit_share(self) -> float | None:
        """hit tokens / input tokens looked up."""
        return self.hit_tokens / self.looked_up_tokens if self.looked_up_tokens else None


@dataclass
class Kept:
    """The tokens a slot (or a saved prompt) holds: its units' chained keys with the tokens up to the end of
    each (a chained key stands for its whole prefix, so a prompt shares with it up to its last key in it)."""

    upto: dict[int, int]
    last: int | None
    tokens: int

    @classmethod
    def of(cls, us: Sequence[Unit]) -> Kept:
        upto, n = {}, 0
        for u in us:
            n += u.tokens
            upto[u.key] = n
        return cls(upto, us[-1].key if us else None, n)

    def common(self, us: Sequence[Unit]) -> int:
        """Tokens of the longest common prefix with a prompt's units."""
        n = 0
        for u in us:
            if u.key not in self.upto:
                break
            n = self.upto[u.key]
        return n

    def within(self, other: Kept) -> bool:
        """Whether all of it is a prefix of ``other``."""
        return self.last is None or other.upto.get(self.last) == self.tokens


EMPTY = Kept({}, None, 0)


class SlotCache:
    """llama.cpp's prompt cache (its server's ``get_available_slot``, ``server_prompt_cache``): each of the
    server's slots keeps the tokens of its last request, prompt and answer, and nothing is shared between
    slots; prompts are compared token by token (units of B = 1).  A call admitted (a slot is free):

        slot        the free slot whose tokens share the largest part of its prompt, when that is more
                    than SIMILARITY of it (``--slot-prompt-similarity``, 0.1); else the least recently
                    used free slot
        saved       (the host-memory prompt cache, ``--cache-ram``: capacity_tokens > 0) when the slot was
                    taken as least recently used, or keeps less than KEEP_SAVE of its tokens: its tokens
                    are saved there (unless a saved prompt holds them all; saved prompts that they hold
                    whole are dropped; the oldest saved go first while the cache is over capacity), and the
                    saved prompt that keeps at least KEEP_LOAD of itself, and keeps more of itself and of
                    the call's prompt than the slot, is loaded into the slot (and leaves the cache)
        hit         the tokens the slot's tokens share with the prompt, ≤ input − 1
        after it    the slot holds the call's prompt and its answer, and was used last

    Saving an idle slot when a new task starts (``--cache-idle-slots``) is left out: it saves earlier what
    a takeover saves anyway.  Counters as :class:`PrefixCache`'s (``evicted_tokens``: saved prompts
    dropped for room).
    """

    SIMILARITY = 0.1
    KEEP_SAVE = 0.5
    KEEP_LOAD = 0.25

    def __init__(self, slots: int, capacity_tokens: float, block_tokens: int = 1):
        if not capacity_tokens >= 0:
            raise ValueError(f"capacity_tokens must be >= 0 (got {capacity_tokens})")
        self.capacity = capacity_tokens
        self.block = int(block_tokens)
        self.kept = [EMPTY] * max(int(slots), 1)
        self.busy = [False] * len(self.kept)
        self.last_used = [-1.0] * len(self.kept)
        self.saved: list[Kept] = []  # the host-memory prompt cache, oldest first
        self.saved_tokens = 0
        self.lookups = 0
        self.looked_up_tokens = 0
        self.hit_tokens = 0
        self.evicted_tokens = 0

    def units(self, pieces: Sequence[Piece]) -> list[Unit]:
        return units(pieces, self.block)

    def take(self, us: Sequence[Unit], input_tokens: int) -> tuple[int, int]:
        """(the slot a call takes, the tokens of its prompt the slot holds then); see the class docstring."""
        free = [i for i, b in enumerate(self.busy) if not b]
        if not free:
            raise RuntimeError("no free slot")
        best, sim_best, save = None, 0.0, True
        for i in free:
            if self.kept[i].tokens:
                sim = self.kept[i].common(us) / input_tokens
                if sim > sim_best and sim > self.SIMILARITY:
                    best, sim_best = i, sim
        if best is not None:
            save = sim_best * input_tokens / self.kept[best].tokens < self.KEEP_SAVE
        else:
            best = min(free, key=lambda i: (self.last_used[i], -i))  # llama.cpp: the last of equally old ones
        if save and self.capacity > 0:
            self._save(self.kept[best])
            self._load(best, us, input_tokens)
        self.busy[best] = True
        hit = max(0, min(self.kept[best].common(us), input_tokens - 1))
        self.count(input_tokens, hit)
        return best, hit

    def count(self, input_tokens: int, hit: int) -> None:
        self.lookups += 1
        self.looked_up_tokens += input_tokens
        self.hit_tokens += hit

    def give_back(self, slot: int, us: Sequence[Unit], now: float) -> None:
        """The call on ``slot`` ended: the slot holds ``us`` (its prompt and answer), used at ``now``."""
        self.kept[slot] = Kept.of(us)
        self.busy[slot] = False
        self.last_used[slot] = now

    def _save(self, k: Kept) -> None:
        if not k.tokens or k.tokens > self.capacity or any(k.within(s) for s in self.saved):
            return
        for s in [s for s in self.saved if s.within(k)]:
            self.saved.remove(s)
            self.saved_tokens -= s.tokens
        while self.saved and self.saved_tokens + k.tokens > self.capacity:
            old = self.saved.pop(0)
            self.saved_tokens -= old.tokens
            self.evicted_tokens += old.tokens
        self.saved.append(k)
        self.saved_tokens += k.tokens

    def _load(self, slot: int, us: Sequence[Unit], input_tokens: int) -> None:
        cur = self.kept[slot]
        n = cur.common(us)
        keep_best = n / cur.tokens if cur.tokens else -1.0
        sim_best, best = n / input_tokens, None
        for s in self.saved:
            n = s.common(us)
            keep, sim = n / s.tokens, n / input_tokens
            if keep >= self.KEEP_LOAD and keep > keep_best and sim > sim_best:
                keep_best, sim_best, best = keep, sim, s
        if best is not None:
            self.saved.remove(best)
            self.saved_tokens -= best.tokens
            self.kept[slot] = best

    @property
    def hit_share(self) -> float | None:
        return self.hit_tokens / self.looked_up_tokens if self.looked_up_tokens else None


def unbounded(block_tokens: int = DEFAULT_BLOCK_TOKENS) -> PrefixCache:
    """A cache that never evicts (the upper bound an unbounded cache would reach)."""
    return PrefixCache(math.inf, block_tokens)
