"""Recorded turns: agents' real requests read from a recording or a request log, replayed as cases.

``[[cases]] from = "DIR or FILE"`` names a recording (what ``leverbench record`` wrote: :mod:`.proxy_files`)
or a request log (:mod:`.openai_requests`, OpenAI's chat-request JSONL; :mod:`.otel_genai`, OpenTelemetry
GenAI spans): one module per format, each with its layout in its docstring and its ``FORMAT`` that
:mod:`.registry` collects (as :mod:`..traces` does for traffic logs).  :mod:`.grouping` puts requests into
turns (a session the agent names, else the conversation each continues); :mod:`.expand` makes each kept turn
a case; :mod:`.live` holds what a live replay reads of a turn (its tool results by name and arguments, its
user steps, where an arm's path departs from it).
"""
