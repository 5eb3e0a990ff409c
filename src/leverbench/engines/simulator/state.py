"""What one simulator shares across requests: the prefix cache, the drafter's memory, the FIFO slots, the fault
draws, the truth."""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import time
from collections import OrderedDict, deque

from . import dialects
from .config import FAULT_NAMES, SimConfig

TRUTH_LIMIT = 100_000  # ground-truth records kept (the most recent)
CACHE_CAPACITY_BLOCKS = 1_000_000  # prefix-cache entries kept (least recently used go first)


class PrefixCache:
    """Hashes of prompt prefixes ending at block boundaries, shared by all slots.

    Keys chain: block k's key hashes block k-1's key with block k's tokens, so
    one key stands for the whole prefix up to that block.
    """

    def __init__(self, block: int, capacity: int = CACHE_CAPACITY_BLOCKS):
        self.block = block
        self.capacity = capacity
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def block_keys(self, tokens: list[str]) -> list[bytes]:
        keys: list[bytes] = []
        previous = b""
        for end in range(self.block, len(tokens) + 1, self.block):
            digest = hashlib.blake2b(previous, digest_size=16)
            digest.update(" ".join(tokens[end - self.block : end]).encode())
            previous = digest.digest()
            keys.append(previous)
        return keys

    def lookup(self, tokens: list[str]) -> int:
        """Cached tokens: the longest seen whole-block prefix shorter than the prompt."""
        hits = 0
        for key in self.block_keys(tokens):
            if (hits + 1) * self.block >= len(tokens) or key not in self._keys:
                break
            self._keys.move_to_end(key)
            hits += 1
        return hits * self.block

    def remembered(self, tokens: list[str]) -> int:
        """Tokens of the longest seen whole-block prefix, the whole prompt allowed (unlike :meth:`lookup`,
        which always leaves one token to compute); for the drafter's memory."""
        hits = 0
        for key in self.block_keys(tokens):
            if key not in self._keys:
                break
            self._keys.move_to_end(key)
            hits += 1
        return hits * self.block

    @property
    def tokens(self) -> int:
        """Tokens held: one block per key (a key is one block of KV, its prefix shared)."""
        return len(self._keys) * self.block

    def insert(self, tokens: list[str]) -> None:
        for key in self.block_keys(tokens):
            self._keys[key] = None
            self._keys.move_to_end(key)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def clear(self) -> None:
        self._keys.clear()


class FifoSlots:
    """A counting semaphore that admits waiters strictly first come, first served."""

    def __init__(self, slots: int):
        self.total = slots
        self._free = slots
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def running(self) -> int:
        return self.total - self._free

    @property
    def waiting(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed to us as we were cancelled: pass it on
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """Hand the slot to the longest waiter, or free it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class SimState:
    """Everything one simulator instance shares across requests."""

    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.cache = PrefixCache(cfg.cache_block)
        # the drafter's n-gram memory: the prompts its drafter has served; the cache-reset endpoints leave it
        self.draft_memory = PrefixCache(cfg.cache_block)
        self.flush_pending = False  # SGLang: a /flush_cache?timeout=... waiting for the server to be idle
        self.slots = FifoSlots(cfg.slots)
        self.metrics = dialects.metrics_for(cfg)  # None: the dialect has no /metrics
        self.phases: dict[str, tuple[int, str]] = {}  # request id -> (scheduler rank, "waiting" | "running")
        self.decoding = 0  # requests in their decode phase now (a decode step's batch: decode_batch_slowdown)
        self.truth: deque[dict] = deque(maxlen=TRUTH_LIMIT)
        self.started = int(time.time())
        self.drift_t0 = cfg.drift_t0 or time.time()
        self.speed_rng = random.Random(cfg.seed + 1)  # apart from the fault draws, whose sequence stays as it was
        self._requests = 0
        self._admitted = 0

    def next_id(self) -> str:
        self._requests += 1
        return f"chatcmpl-sim-{self._requests}"

    def speed_factor(self, now: float) -> float:
        """What every service time of a request admitted at epoch *now* is multiplied by: the drift
        1 + drift_per_s × (now − drift_t0), a lognormal factor of CV speed_jitter (mean 1: exp(N(−s²/2, s²)),
        s² = log(1 + cv²)), and for the i-th of the first cold_requests requests (an engine warming up)
        1 + (cold_factor − 1)·(cold_requests − i + 1) / cold_requests; never below 0.05."""
        cfg = self.cfg
        self._admitted += 1
        f = 1.0 + cfg.drift_per_s * (now - self.drift_t0)
        if cfg.speed_jitter > 0:
            s2 = math.log1p(cfg.speed_jitter ** 2)
            f *= math.exp(self.speed_rng.gauss(-s2 / 2.0, math.sqrt(s2)))
        if self._admitted <= cfg.cold_requests:  # warming up: cold_factor at first, then less, linearly, down to 1
            f *= 1.0 + (cfg.cold_factor - 1.0) * (cfg.cold_requests - self._admitted + 1) / cfg.cold_requests
        return max(f, 0.05)

    def phase_counts(self) -> dict[int, tuple[int, int]]:
        """(running, waiting) requests per scheduler rank."""
        out: dict[int, tuple[int, int]] = {}
        for rank, phase in self.phases.values():
            running, waiting = out.get(rank, (0, 0))
            out[rank] = (running + (phase == "running"), waiting + (phase == "waiting"))
        return out

    def draw_faults(self) -> frozenset[str]:
        """One draw per fault kind, always all of them, so the sequence depends only on arrival order."""
        cfg = self.cfg
        probabilities = (
            cfg.fault_http_500,
            cfg.fault_http_429,
            cfg.fault_cut_stream,
            cfg.fault_stall,
            cfg.fault_malformed,
            cfg.fault_no_usage,
        )
        return frozenset(name for name, p in zip(FAULT_NAMES, probabilities) if self.rng.random() < p)

    def drafter_acceptance(self, prompt: list[str]) -> float:
        """The fraction of draft tokens this request's drafter gets accepted, decided when its decode starts:
        ``draft_acceptance``, or ``min(1, draft_acceptance + draft_memory)`` when the drafter's memory holds a
        whole-block prefix of at least half the prompt (the prompt, or most of it, was served before); then the
        prompt enters the memory (after the lookup: a request never helps itself).

        The model is llama.cpp's ``--spec-type ngram-mod``, whose n-gram state outlives a slot erase (measured
        on b11549: one 1,119-token prompt sent three times with the slot erased between got 0, then 23 of 53,
        then 41 of 59 drafts accepted); only a new process forgets it.  So no cache-reset endpoint clears this
        memory; :meth:`reset` (``POST /sim/reset``) does.  With ``draft_memory`` 0 nothing is kept or looked up
        and every request gets ``draft_acceptance``."""
        cfg = self.cfg
        if not cfg.draft_memory:
            return cfg.draft_acceptance
        remembered = self.draft_memory.remembered(prompt)
        self.draft_memory.insert(prompt)
        if prompt and 2 * remembered >= len(prompt):
            return min(1.0, cfg.draft_acceptance + cfg.draft_memory)
        return cfg.draft_acceptance

    def reset(self) -> None:
        """Forget truth, cache and the drafter's memory (a new process), and reseed the fault draws; metrics
        stay monotonic."""
        self.truth.clear()
        self.cache.clear()
        self.draft_memory.clear()
        self.rng = random.Random(self.cfg.seed)
        self.speed_rng = random.Random(self.cfg.seed + 1)
