"""Turn a case of the experiment into the chat messages of each of its calls.

A case is one agent turn.  Its first call sends the system prompt and a user
message made of the case's documents followed by its prompt.  Each further
``[[cases.steps]]`` entry is one more call whose messages are the previous
call's messages, the model's previous answer, and the step's prompt: the agent
pattern in which every call repeats a growing prefix.
"""

from __future__ import annotations

from pathlib import PurePath

from ..config import Case, LoadedExperiment
from .chat import ChatMessage


def system_text(exp: LoadedExperiment, case: Case) -> str | None:
    if case.system_file:
        return exp.texts[case.system_file]
    return case.system


def first_user_text(exp: LoadedExperiment, case: Case) -> str:
    parts = []
    for doc in case.documents:
        parts.append(f"=== {PurePath(doc).name} ===\n{exp.texts[doc].rstrip()}\n=== end of {PurePath(doc).name} ===")
    parts.append(case.prompt)
    return "\n\n".join(parts)


def first_messages(exp: LoadedExperiment, case: Case) -> list[ChatMessage]:
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
    out = [(case.prompt, case.max_tokens)]
    out += [(s.prompt, s.max_tokens or case.max_tokens) for s in case.steps]
    return out


def case_size_chars(exp: LoadedExperiment, case: Case) -> int:
    return len(system_text(exp, case) or "") + len(first_user_text(exp, case))
