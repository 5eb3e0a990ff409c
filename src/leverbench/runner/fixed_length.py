"""The prompts of the fixed-length calls: drift sentinels (and warm-ups), and how a probe asks for its length.

A sentinel's prompt is a fixed text behind a fresh tag (:func:`sentinel_messages`), so that no prefix cache
holds it (a cache matches from the prompt's start) and its time to first token measures a prefill; its
output is forced to ``sentinel_tokens`` tokens.  A probe or sentinel forces its length with ``ignore_eos`` +
``min_tokens`` (:data:`LENGTH_BY_FIELDS`); an endpoint that rejects those fields gets the same prompt asking
for a long answer instead (:func:`ask_at_length`, :data:`LENGTH_BY_PROMPT`); a drafter arm's probe is not
forced (:data:`LENGTH_NATURAL`).
"""

from __future__ import annotations

import uuid

from ..workload.chat import ChatMessage

SENTINEL_PROMPT = "Count upward from 1, one number per line, and keep going."
SENTINEL_PREAMBLE = ("The following is a calibration request. It is sent at the start of every round of the "
                     "benchmark so that the speed of the server can be followed over the run: the time it takes "
                     "to read this paragraph and the rate at which it writes the answer below. Nothing in this "
                     "paragraph needs an answer of its own.")
LONG_ANSWER = ("Answer at great length: write many long, detailed paragraphs and keep writing; "
               "do not stop early or summarise.")
LENGTH_BY_FIELDS = "ignore_eos"
LENGTH_BY_PROMPT = "prompt (engine rejected ignore_eos)"
LENGTH_NATURAL = "natural (drafter arm: not forced past end-of-sequence)"


def sentinel_messages() -> list[ChatMessage]:
    """A sentinel's (and warm-up's) prompt: a fresh tag, :data:`SENTINEL_PREAMBLE`, :data:`SENTINEL_PROMPT`."""
    return [{"role": "user", "content": f"[{uuid.uuid4().hex[:8]}] {SENTINEL_PREAMBLE}\n\n{SENTINEL_PROMPT}"}]


def ask_at_length(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The same conversation with :data:`LONG_ANSWER` appended to its last user message (or added
    as one), so that the prompt, and the prefill it costs, stay nearly the same."""
    out = [ChatMessage(**m) for m in messages]
    last = out[-1] if out else None
    if last is None or last.get("role") != "user":
        return [*out, {"role": "user", "content": LONG_ANSWER}]
    content = last.get("content")
    if isinstance(content, list):
        last["content"] = [*content, {"type": "text", "text": LONG_ANSWER}]
    else:
        last["content"] = f"{content or ''}\n\n{LONG_ANSWER}"
    return out
