"""Turn a case of the experiment into the chat messages of each of its calls.

A case is one agent turn.  Its first call sends the system prompt and a user
message made of the case's documents followed by its prompt.  Each further
``[[cases.steps]]`` entry is one more call whose messages are the previous
call's messages, the model's previous answer, and the step's prompt: the agent
pattern in which every call repeats a growing prefix.  A case of recorded turns (``from``) sends the
recording's requests instead (``runner.recorded_turn``); its first messages are its first request's.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import cast

from ..config import Case, LoadedExperiment
from ..json_types import JSONObject
from .chat import ChatMessage


def system_text(exp: LoadedExperiment, case: Case) -> str | None:
    if case.system_file:
        return exp.texts[case.system_file]
    return case.system


def first_user_text(exp: LoadedExperiment, case: Case) -> str:
    """The first user message of a written case (a recorded turn's messages are the recording's)."""
    parts = []
    for doc in case.documents:
        parts.append(f"=== {PurePath(doc).name} ===\n{exp.texts[doc].rstrip()}\n=== end of {PurePath(doc).name} ===")
    parts.append(case.prompt or "")
    return "\n\n".join(parts)


def first_messages(exp: LoadedExperiment, case: Case) -> list[ChatMessage]:
    """The messages of the case's first call: a recorded turn's first request's, else the system prompt and the
    documents with the prompt."""
    turn = exp.recorded.get(case.name)
    if turn is not None:
        return recorded_messages(turn.first.messages)
    msgs: list[ChatMessage] = []
    sys = system_text(exp, case)
    if sys:
        msgs.append({"role": "system", "content": sys})
    msgs.append({"role": "user", "content": first_user_text(exp, case)})
    return msgs


def next_messages(previous: list[ChatMessage], answer: str, prompt: str) -> list[ChatMessage]:
    return [*previous, {"role": "assistant", "content": answer}, {"role": "user", "content": prompt}]


def step_prompts(case: Case) -> list[tuple[str, int]]:
    """(prompt, max_tokens) of every call of the turn, first call included."""
    out = [(case.prompt or "", case.max_tokens)]
    out += [(s.prompt, s.max_tokens or case.max_tokens) for s in case.steps]
    return out


def case_size_chars(exp: LoadedExperiment, case: Case) -> int:
    """The characters of the case's first call's messages (which case is the longest: the probes' default)."""
    if case.name in exp.recorded:
        return sum(len(message_text(m.get("content"))) for m in first_messages(exp, case))
    return len(system_text(exp, case) or "") + len(first_user_text(exp, case))


def recorded_messages(messages: list[JSONObject]) -> list[ChatMessage]:
    """A recorded request's messages as the runner sends them: copies (each a chat message, its fields as recorded:
    the importers checked that every one is an object with a role)."""
    return [cast(ChatMessage, dict(m)) for m in messages]


def message_text(content: object) -> str:
    """A message's text: its content, or the text of its content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""
