"""What a live replay (``replay = "live"``) reads of a recorded turn: its user steps, its tool results by tool
name and arguments, and where an arm's path departs from it.

In a live replay the arm's own tool calls drive the turn: each is answered with the result the recording
holds for that tool and those arguments, and the turn goes on as the arm's answers take it.  What the agent
(or its user) said itself is kept: the turn is cut into :class:`UserStep` s, each opened by a request whose
new messages are not all tool results (the first request; a user's next message after an answer), and each
step runs until the arm answers without a tool call.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from ...json_types import JSONObject
from ...recording import RecordedCall, RecordedTurn
from .grouping import message_key

ARGS_SHOWN = 60  # characters of a tool call's arguments a departure's text shows (with store_text)
ARGS_HASH_CHARS = 12  # ... else hex digits of their hash


@dataclass(frozen=True)
class UserStep:
    """A part of a recorded turn the agent opened: ``messages`` to append (after the arm's last answer), or the
    whole conversation when ``replace`` (the first step; a request that did not extend the one before it); the
    recorded calls ``first`` to ``last`` are the step's (its tool rounds)."""

    messages: list[JSONObject]
    first: int
    last: int
    replace: bool


def _extends(prev: list[JSONObject], msgs: list[JSONObject]) -> bool:
    return len(msgs) > len(prev) and all(message_key(a) == message_key(b) for a, b in zip(prev, msgs))


def user_steps(turn: RecordedTurn) -> list[UserStep]:
    """The turn's user steps, in order (see the module's docstring)."""
    calls = turn.calls
    steps: list[UserStep] = []
    cur = UserStep(list(calls[0].messages), 0, 0, True)
    for k in range(1, len(calls)):
        prev, msgs = calls[k - 1].messages, calls[k].messages
        if _extends(prev, msgs):
            delta = msgs[len(prev):]
            body = delta[1:] if delta[0].get("role") == "assistant" else delta
            if body and all(m.get("role") == "tool" for m in body):  # a tool round of the same step
                cur = UserStep(cur.messages, cur.first, k, cur.replace)
                continue
            steps.append(cur)
            cur = UserStep([m for m in body if m.get("role") != "tool"], k, k, False)
        else:
            steps.append(cur)
            cur = UserStep(list(msgs), k, k, True)
    steps.append(cur)
    return steps


def canonical_arguments(arguments: str) -> str:
    """A tool call's arguments as compared: their JSON with keys sorted (the text as it is, when not JSON)."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        return arguments.strip()


def shown_call(name: str, arguments: str, show: bool = True) -> str:
    """A tool call as a departure's text names it: its arguments cut to :data:`ARGS_SHOWN` characters, or, when
    they may not be *shown* (the experiment's ``store_text`` off: they are the agent's content), their hash."""
    if not show:
        digest = hashlib.sha256(canonical_arguments(arguments).encode("utf-8", "surrogatepass")).hexdigest()
        return f"{name}(args sha256:{digest[:ARGS_HASH_CHARS]})"
    args = " ".join(arguments.split())
    return f"{name}({args if len(args) <= ARGS_SHOWN else args[:ARGS_SHOWN - 1] + '…'})"


def _content(m: JSONObject) -> str:
    c = m.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "".join(str(p.get("text") or "") for p in c if isinstance(p, dict))
    return "" if c is None else json.dumps(c)


class ToolResults:
    """The recorded turn's tool results, by tool name and arguments: read from its requests, where each assistant
    message's tool call is followed by the tool message that answers it (``tool_call_id``).  *show*: a note may
    show a call's arguments (else their hash: :func:`shown_call`)."""

    def __init__(self, turn: RecordedTurn, show: bool = True):
        self.show = show
        self.by_call: dict[tuple[str, str], list[str]] = {}
        self.by_name: dict[str, list[str]] = {}
        self._served: dict[tuple[str, str], int] = {}
        seen: set[tuple[str, str, str]] = set()
        for call in turn.calls:
            asked: dict[str, tuple[str, str]] = {}  # tool_call_id -> (name, canonical arguments)
            for m in call.messages:
                for tc in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
                    fn = tc.get("function") if isinstance(tc, dict) and isinstance(tc.get("function"), dict) else {}
                    if isinstance(tc, dict) and isinstance(tc.get("id"), str):
                        args = fn.get("arguments")
                        asked[tc["id"]] = (str(fn.get("name") or ""),
                                           canonical_arguments(args if isinstance(args, str) else json.dumps(args)))
                tid = m.get("tool_call_id")
                if m.get("role") == "tool" and isinstance(tid, str) and tid in asked and (tid, *asked[tid]) not in seen:
                    seen.add((tid, *asked[tid]))
                    self.by_call.setdefault(asked[tid], []).append(_content(m))
                    self.by_name.setdefault(asked[tid][0], []).append(_content(m))

    def answer(self, name: str, arguments: str) -> tuple[str, str | None]:
        """The result for a call of *name* with *arguments*, and a note when it is not the recording's own: the
        recorded results of that call in the order they were given (the last again once they run out); else the
        tool's first recorded result (another call's); else a text saying there is none."""
        key = (name, canonical_arguments(arguments))
        if key in self.by_call:
            results = self.by_call[key]
            i = self._served.get(key, 0)
            self._served[key] = i + 1
            return results[min(i, len(results) - 1)], None
        if name in self.by_name:
            return self.by_name[name][0], (f"no recorded result for {shown_call(name, arguments, self.show)}: sent "
                                           f"{name}'s first")
        return f"(no result recorded for {name})", f"no recorded result for tool {name!r}"


def departure(tool_calls: list[tuple[str, str]], recorded: RecordedCall | None, show: bool = True) -> str | None:
    """Where an arm's call departs from the recording at the same place: *tool_calls* the arm's (name, arguments),
    *recorded* the recorded call at that place (None: the recording had answered by then).  None: no departure.
    *show*: the text may show the calls' arguments (else their hashes)."""
    arm = [shown_call(n, a, show) for n, a in tool_calls]
    if recorded is None:
        return f"called {', '.join(arm)} where the recording had answered" if arm else None
    rec = [shown_call(tc.name, tc.arguments, show) for tc in recorded.tool_calls]
    if not arm:
        return f"answered where the recording called {', '.join(rec)}" if rec else None
    if not rec:
        return f"called {', '.join(arm)} where the recording answered"
    same = [(n, canonical_arguments(a)) for n, a in tool_calls] == \
        [(tc.name, canonical_arguments(tc.arguments)) for tc in recorded.tool_calls]
    return None if same else f"called {', '.join(arm)} where the recording called {', '.join(rec)}"
