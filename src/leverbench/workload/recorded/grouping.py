"""Which turn a recorded request belongs to: a session the agent names, else the conversation it continues.

An agent's turn is a conversation that grows: each call sends the messages of the one before, the model's
answer and what came of it (tool results, a user's next message).  :class:`TurnGrouper` puts a request in
the turn of the latest earlier request whose messages it extends (they are its first messages, and it has
more); one that extends none starts a new turn.  An agent that sends a session header (``X-Session-Id`` by
default) names its turn itself: every request with the same value is one turn.

Messages are compared by a chain of hashes (each message's canonical JSON, folded into the hash of those
before it), so a request of n messages is matched in O(n) whatever the number of turns: the proxy groups
as it records, and the importers group the request logs that carry no turn of their own.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from dataclasses import dataclass, field

from ...json_types import JSONValue

SESSION_ID_CHARS = 64  # a session header's value, as a turn's name, is cut to this


def message_key(message: JSONValue) -> bytes:
    """A message as compared: its canonical JSON (keys sorted), so that key order does not part two requests."""
    return json.dumps(message, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def prefix_hashes(messages: list[JSONValue]) -> list[str]:
    """The chain hash of each prefix of *messages*: element k is the hash of messages[:k + 1]."""
    out, h = [], b""
    for m in messages:
        h = hashlib.sha256(h + message_key(m)).digest()
        out.append(h.hex())
    return out


def session_turn_id(value: str) -> str:
    """A session header's value as a turn's name: ``s-`` and the value without control characters, cut."""
    clean = "".join(c for c in value if unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp")).strip()
    return "s-" + (clean[:SESSION_ID_CHARS] or "empty")


@dataclass
class TurnGrouper:
    """Assigns each request, in the order they are given, its turn and its step in it (see the module's
    docstring).  Turn ids are ``t0001``, ``t0002``, ... in order of their first request (``s-VALUE`` for a
    session the agent named)."""

    _open: dict[str, str] = field(default_factory=dict)  # hash of a turn's latest request's messages -> turn
    _steps: dict[str, int] = field(default_factory=dict)  # turn -> requests in it so far
    _count: int = 0

    def assign(self, messages: list[JSONValue], session: str | None = None) -> tuple[str, int]:
        """(turn id, step) of a request with *messages* (and the agent's *session* header, if it sent one)."""
        hashes = prefix_hashes(messages)
        if session is not None:
            turn = session_turn_id(session)
        else:
            # the longest earlier request that this one extends: its messages are a strict prefix of these
            turn = next((self._open[h] for h in reversed(hashes[:-1]) if h in self._open), None)
            if turn is None:
                self._count += 1
                turn = f"t{self._count:04d}"
        if hashes:
            self._open[hashes[-1]] = turn
        step = self._steps.get(turn, 0)
        self._steps[turn] = step + 1
        return turn, step
