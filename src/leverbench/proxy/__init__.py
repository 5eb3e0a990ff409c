"""``leverbench record``: an OpenAI-compatible pass-through proxy that records an agent's real model calls.

:mod:`.server` passes every request to the upstream and every response back unchanged, capturing the chat
exchanges as bytes; :mod:`.writer` (a thread) parses each captured exchange (:mod:`.exchange`), masks what
``--redact`` names, puts it in its turn and appends it to ``DIR/exchanges.jsonl`` (the format:
:mod:`leverbench.recording`).
"""
