"""The simulator's tokenizer: one token per whitespace-separated word (see the package docstring)."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

TOKEN_ID_SPACE = 50_000  # /tokenize ids are stable hashes modulo this


def tokenize(text: str) -> list[str]:
    """The simulator's tokens: one per whitespace-separated word."""
    return text.split()


def count_tokens(text: str) -> int:
    """How many simulator tokens ``text`` has."""
    return len(text.split())


def message_text(content: Any) -> str:
    """The text of a message's content: a string, null, or a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    raise ValueError("message content must be a string, null or a list of content parts")


def chat_prompt_tokens(messages: list[dict], tools: list | None = None) -> list[str]:
    """The prompt tokens of a chat request: tools' JSON words, then role + content per message."""
    tokens = tokenize(json.dumps(tools)) if tools else []
    for message in messages:
        tokens.append(str(message.get("role", "user")))
        tokens += tokenize(message_text(message.get("content")))
    return tokens


def token_ids(text: str) -> list[int]:
    """Stable integer ids for ``text``'s tokens (for ``/tokenize``)."""
    return [stable_int(word) % TOKEN_ID_SPACE for word in tokenize(text)]


def synthetic_text(n_tokens: int, seed: int | str) -> str:
    """``n_tokens`` deterministic pseudo-words; the same seed gives the same text."""
    rng = random.Random(f"leverbench-sim:{seed}")
    return " ".join(_pseudo_word(rng) for _ in range(n_tokens))


def _pseudo_word(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(1, 3)))


def stable_int(*parts: object) -> int:
    """A 64-bit hash of ``parts`` that is the same in every process (unlike ``hash``)."""
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        digest.update(str(part).encode())
        digest.update(b"\x00")
    return int.from_bytes(digest.digest(), "big")
