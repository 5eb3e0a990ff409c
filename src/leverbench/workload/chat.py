"""The OpenAI-style chat shapes leverbench builds and sends: a message, the request body.

A case's messages (:mod:`.cases`), a load stage's and a trace's (``runner.prompts``, ``runner.load``), the
turn's tool results (``runner.turn``) are :class:`ChatMessage` lists; ``runner.send`` makes the
:class:`ChatBody`.  The tools' schemas a case declares, and the request fields an arm adds, are the user's
JSON (:data:`~leverbench.json_types.JSONObject`).  Only typing is imported here; no ``from __future__ import
annotations``, so that the TypedDicts know their ``Required`` keys at runtime.
"""


from typing_extensions import Required, TypedDict

from ..json_types import JSONObject


class ToolFunction(TypedDict):
    """A tool call's function, as the assistant's message carries it back."""

    name: str
    arguments: str  # JSON text, as the model wrote it


class MessageToolCall(TypedDict):
    """A tool call in an assistant message (``runner.turn.assistant_tool_message``)."""

    id: str
    type: str  # "function"
    function: ToolFunction


class ContentPart(TypedDict, total=False):
    """A part of a message's content given as a list (OpenAI's content parts: a text part's ``text``)."""

    type: str
    text: str


class ChatMessage(TypedDict, total=False):
    """One chat message: ``role`` and ``content`` (text, text parts, or None for an assistant message with only
    tool calls); a tool result names the call it answers (``tool_call_id``), an assistant message its
    ``tool_calls``."""

    role: Required[str]
    content: Required[str | list[ContentPart] | None]
    tool_call_id: str
    tool_calls: list[MessageToolCall]


class StreamOptions(TypedDict, total=False):
    include_usage: bool


class ChatBody(TypedDict, total=False):
    """A ``/chat/completions`` request body as ``runner.send`` makes it.  The arm's request fields (the
    experiment file's, any JSON) and a caller's extras (a probe's ``ignore_eos``, ``min_tokens``) are merged
    in: keys this type does not name may be present."""

    model: Required[str]
    messages: Required[list[ChatMessage]]
    max_tokens: int
    temperature: float
    tools: list[JSONObject]  # the case's tool schemas (the user's JSON)
    stream: bool
    stream_options: StreamOptions
    ignore_eos: bool
    min_tokens: int
