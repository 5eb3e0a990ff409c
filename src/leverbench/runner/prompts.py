"""Synthetic prompts for load stages: text of a given token length, and prompts that share a set prefix.

Words are pseudo-words in the simulator's style, one simulator token each (:func:`vocabulary`);
seeded, so that the same seed gives the same text.  :class:`PromptBuilder` writes a trace call's
prompt of a given length (Mooncake hash blocks shared exactly); :class:`SharedPrefix` makes a
closed/open stage's requests distinct past the share of their prompt they are to have in common.
"""

from __future__ import annotations

import random
import re

from ..workload.chat import ChatMessage

BLOCK_CACHE = 8192  # Mooncake block texts kept
ROLE_TOKENS = 1  # tokens a chat message's role adds (the simulator's template; real templates add a few more)
UNIQUE_WORDS = 4  # words of the seeded unique part that makes a closed/open stage's prompts distinct

_VOCAB: list[str] | None = None


def vocabulary() -> list[str]:
    """4096 distinct pseudo-words in the simulator's style (one simulator token each)."""
    global _VOCAB
    if _VOCAB is None:
        from ..engines.simulator import synthetic_text  # noqa: PLC0415

        words: list[str] = []
        seen: set[str] = set()
        for w in synthetic_text(20000, "leverbench-load-vocab").split():
            if w not in seen:
                seen.add(w)
                words.append(w)
            if len(words) == 4096:
                break
        _VOCAB = words
    return _VOCAB


def words(n: int, seed: str) -> list[str]:
    """``n`` deterministic pseudo-words for ``seed`` (the same seed gives the same words)."""
    if n <= 0:
        return []
    return random.Random(seed).choices(vocabulary(), k=n)


class PromptBuilder:
    """Synthetic prompt text of a given token length, for trace replay.

    Lengths are in engine tokens; ``tokens_per_word`` (1 for the simulator,
    measured with ``/tokenize`` on a real engine) converts them to words.
    Mooncake hash blocks: block id ``h`` always becomes the same words, so two
    requests sharing their leading ids share that prefix text exactly (and so
    its tokens, on any tokenizer).
    """

    def __init__(self, block_tokens: int, tokens_per_word: float = 1.0, salt: str = ""):
        self.block_tokens = max(1, block_tokens)
        self.tokens_per_word = tokens_per_word
        self.salt = salt
        self._blocks: dict[int, list[str]] = {}

    def n_words(self, tokens: int) -> int:
        return max(0, round(tokens / self.tokens_per_word))

    def block(self, h: int, upto: int | None = None) -> list[str]:
        """Block *h*'s words, or its first *upto* (the same words: a block's text is one seeded sequence, so a
        prompt that needs only the start of a block never builds the rest, however large ``block_tokens``)."""
        n = self.n_words(self.block_tokens)
        if upto is not None:
            n = min(n, max(0, upto))
        w = self._blocks.get(h)
        if w is None or len(w) < n:
            if w is None and len(self._blocks) >= BLOCK_CACHE:
                self._blocks.clear()
            w = self._blocks[h] = words(n, f"mooncake-block:{h}")
        return w[:n]

    def content(self, tokens: int, seed: str, blocks: tuple[int, ...] | None = None) -> str:
        """Text of ``tokens`` tokens: the hash blocks' words first (when given), then unique words."""
        need = self.n_words(tokens)
        out: list[str] = []
        for h in blocks or ():
            if len(out) >= need:
                break
            out.extend(self.block(h, need - len(out)))
        del out[need:]
        if len(out) < need:
            out.extend(words(need - len(out), f"{self.salt}:{seed}"))
        return " ".join(out)


class SharedPrefix:
    """A closed/open stage's prompts: the case's first messages, with a seeded unique part inserted
    so that the leading ``fraction`` of each prompt's tokens is shared by all requests.

    Tokens as the simulator counts them: per message, ``ROLE_TOKENS`` for its role, then one per
    whitespace word of its (string) content.  With T = those tokens + ``UNIQUE_WORDS``, the unique
    words go where k = round(fraction × T) tokens precede them (at a word boundary; never inside a
    role), so shared / total = k / T exactly in simulator tokens (at most (T − UNIQUE_WORDS) / T:
    the unique words come last), and the prompt grows by ``UNIQUE_WORDS`` words only.
    fraction = 1: no unique part (every request the same prompt).
    The original text is kept as it is around the inserted words.
    """

    def __init__(self, messages: list[ChatMessage], fraction: float, salt: str):
        self.messages = messages
        self.salt = salt
        self.at: tuple[int, int] | None = None  # (message index, character offset) of the unique part
        self.shared_tokens = self.total_tokens = sum(ROLE_TOKENS + len(_text(m).split()) for m in messages)
        if fraction >= 1.0 or not messages:
            return
        self.total_tokens += UNIQUE_WORDS
        vocabulary()  # built now, before the stage starts, not inside its first call's send time (~0.1-0.6 s)
        k = round(fraction * self.total_tokens)
        pos = 0
        for i, m in enumerate(messages):
            text = _text(m)
            starts = [w.start() for w in re.finditer(r"\S+", text)]
            pos += ROLE_TOKENS
            last = i == len(messages) - 1
            if isinstance(m.get("content"), str) and (k <= pos + len(starts) or last):
                j = min(max(0, k - pos), len(starts))
                self.at = (i, starts[j] if j < len(starts) else len(text))
                self.shared_tokens = pos + j
                return
            pos += len(starts)

    def for_request(self, i: int) -> list[ChatMessage]:
        """Request *i*'s messages (the same list for every *i* when nothing is unique)."""
        if self.at is None:
            return self.messages
        mi, off = self.at
        text = self.messages[mi]["content"]
        unique = " ".join(words(UNIQUE_WORDS, f"{self.salt}:{i}"))
        sep_before = " " if off > 0 and not text[off - 1].isspace() else ""
        sep_after = " " if off < len(text) else ""
        msgs = list(self.messages)
        msgs[mi] = {**msgs[mi], "content": text[:off] + sep_before + unique + sep_after + text[off:]}
        return msgs


def _text(m: ChatMessage) -> str:
    c = m.get("content")
    return c if isinstance(c, str) else ""
