"""Which turn a recorded request belongs to: a session the agent names, else the conversation it continues.

An agent's turn is a conversation that grows: each call sends the messages of the one before, the model's
answer and what came of it (tool results, a user's next message).  :class:`TurnGrouper` puts a request in
an open turn whose latest request it extends (those messages are its first, and it has more); where several
turns' latest requests are the same messages (agents that opened alike, running at once), the one that has
waited longest takes it (a FIFO per request), so that concurrent turns never mix.  A request that extends no
turn's latest request continues the turn of the latest earlier request it extends (an agent that went back,
a branch); one that extends none starts a new turn.  A request sent again after it failed (a retry: the same
messages) stays in its turn.  An agent that sends a session header (``X-Session-Id`` by default) names its
turn itself: every request with the same value is one turn.

Messages are compared by a chain of hashes (each message's canonical JSON, folded into the hash of those
before it), so a request of n messages is matched in O(n) whatever the number of turns: the proxy groups
as it records, and the importers group the request logs that carry no turn of their own.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from ...json_types import JSONValue

if TYPE_CHECKING:
    from ..chat import ChatMessage

SESSION_ID_CHARS = 64  # a session header's value, as a turn's name, is cut to this (and a hash of it added)
SESSION_HASH_CHARS = 8


def message_key(message: JSONValue | ChatMessage) -> bytes:
    """A message as compared: its canonical JSON (keys sorted), so that key order does not part two requests (a
    lone surrogate, which JSON can carry, kept as it is)."""
    return json.dumps(message, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8",
                                                                                                 "surrogatepass")


def prefix_hashes(messages: Sequence[JSONValue | ChatMessage]) -> list[str]:
    """The chain hash of each prefix of *messages*: element k is the hash of messages[:k + 1]."""
    out, h = [], b""
    for m in messages:
        h = hashlib.sha256(h + message_key(m)).digest()
        out.append(h.hex())
    return out


def session_turn_id(value: str) -> str:
    """A session header's value as a turn's name: ``s-`` and the value without control characters; a longer
    one than :data:`SESSION_ID_CHARS` cut, with a short hash of the whole (long ids with a common start part)."""
    clean = "".join(c for c in value if unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp")).strip()
    if len(clean) > SESSION_ID_CHARS:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:SESSION_HASH_CHARS]
        clean = f"{clean[:SESSION_ID_CHARS - SESSION_HASH_CHARS - 1]}~{digest}"
    return "s-" + (clean or "empty")


@dataclass
class TurnGrouper:
    """Assigns each request, in the order they are given, its turn and its step in it (see the module's
    docstring).  Turn ids are ``t0001``, ``t0002``, ... in order of their first request (``s-VALUE`` for a
    session the agent named)."""

    _open: dict[str, deque[str]] = field(default_factory=dict)  # hash of messages -> turns whose latest they are
    _seen: dict[str, str] = field(default_factory=dict)  # hash of messages -> the latest turn that sent them
    _latest: dict[str, str | None] = field(default_factory=dict)  # turn -> hash of its latest request's messages
    _failed: set[str] = field(default_factory=set)  # turns whose latest request failed (a retry may follow)
    _sessions: dict[str, str] = field(default_factory=dict)  # a session's value -> its turn
    _steps: dict[str, int] = field(default_factory=dict)  # turn -> requests in it so far
    _count: int = 0

    def assign(self, messages: list[JSONValue], session: str | None = None, *, failed: bool = False,
               shown: str | None = None) -> tuple[str, int]:
        """(turn id, step) of a request with *messages* (and the agent's *session* header, if it sent one);
        *failed*: the request failed (sent again, it stays in its turn); *shown*: the session's value as the
        turn's name shows it (masked by ``--redact``; None: *session* itself): requests are grouped by *session*."""
        hashes = prefix_hashes(messages)
        last = hashes[-1] if hashes else None
        turn = self._session(session, shown) if session is not None else self._continued(hashes)
        if turn is None:
            self._count += 1
            turn = f"t{self._count:04d}"
        before = self._latest.get(turn)
        if before != last:
            if before is not None and turn in self._open.get(before, ()):
                self._open[before].remove(turn)
            if last is not None:
                self._open.setdefault(last, deque()).append(turn)
        self._latest[turn] = last
        if last is not None:
            self._seen[last] = turn
        (self._failed.add if failed else self._failed.discard)(turn)
        step = self._steps.get(turn, 0)
        self._steps[turn] = step + 1
        return turn, step

    def _continued(self, hashes: list[str]) -> str | None:
        """The turn a request without a session continues (None: a new one)."""
        if hashes:  # a retry: the same messages as a turn's latest request, which failed
            retried = next((t for t in self._open.get(hashes[-1], ()) if t in self._failed), None)
            if retried is not None:
                return retried
        for h in reversed(hashes[:-1]):  # the longest open request this one extends: its waiting turns, oldest first
            if self._open.get(h):
                return self._open[h][0]
        return next((self._seen[h] for h in reversed(hashes[:-1]) if h in self._seen), None)  # a branch

    def _session(self, session: str, shown: str | None) -> str:
        if session not in self._sessions:
            name = base = session_turn_id(session if shown is None else shown)
            taken = set(self._sessions.values())
            k = 1
            while name in taken:  # another session shown alike (masked, cut): told apart
                k += 1
                name = f"{base}-{k}"
            self._sessions[session] = name
        return self._sessions[session]
