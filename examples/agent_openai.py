"""A small tool-using agent on the official ``openai`` SDK, to record with ``leverbench record``
(docs/recording.md's worked example; ``tests/test_record_openai.py`` runs this very file).

    pip install openai
    python examples/agent_openai.py --base-url http://127.0.0.1:8099/v1

Each question is one conversation (one turn): the system prompt, the two tools' JSON schemas and the question,
then up to ``--max-rounds`` tool rounds (the model asks for a tool, the agent runs it here and sends the result
back), then one follow-up in the same conversation (``--follow-up``).  It streams every call, as most agents do,
and never asks for usage (no ``stream_options``): the engine's own counters (llama.cpp's ``timings``) are what
the recording gets.  Prints one JSON line per question: each call it made, with the tool calls it got and the
engine's counts as the SDK read them from the stream (``timings``; ``usage`` where the engine sent one).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from openai import OpenAI

SYSTEM = (
    "You are a concise assistant for a small hardware shop. You answer customers' questions about stock and "
    "prices. When you need a fact you do not have, call one of your tools: check_stock(item) returns how many of "
    "an item are in the shop, and add(a, b) adds two numbers. Never invent a stock level or a price. Answer in "
    "one or two short sentences, in plain words, without lists or markdown. If a question is not about the shop, "
    "say so politely and offer help with the shop instead."
)
QUESTIONS = ("How many hammers are in stock?", "Do you have screwdrivers?", "What is 12 plus 30?",
             "How many ladders and hammers do you have together?")
TOOLS = [
    {"type": "function", "function": {
        "name": "check_stock", "description": "How many of an item the shop has in stock.",
        "parameters": {"type": "object", "properties": {"item": {"type": "string", "description": "the item"}},
                       "required": ["item"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}}},
]
STOCK = {"hammer": 14, "screwdriver": 0, "ladder": 3}


def run_tool(name: str, arguments: str) -> str:
    """The agent's tools, run here: their result as the text sent back to the model."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return "error: the arguments are not JSON"
    if name == "check_stock":
        item = str(args.get("item", "")).lower().rstrip("s")
        return json.dumps({"item": item, "in_stock": STOCK.get(item, 0)})
    if name == "add":
        try:
            total = float(args.get("a", 0)) + float(args.get("b", 0))
        except (TypeError, ValueError):
            return "error: a and b must be numbers"
        return json.dumps({"sum": total if math.isfinite(total) else None})
    return f"error: no tool {name!r}"


def streamed_call(client: OpenAI, model: str, messages: list[dict], max_tokens: int) -> dict:
    """One streamed chat call: the answer's text, its tool calls, and the engine's counts from the stream."""
    stream = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, stream=True,
                                            max_tokens=max_tokens, temperature=0)
    text, calls, timings, usage = [], {}, None, None
    for chunk in stream:
        extra = chunk.model_extra or {}
        timings = extra.get("timings") or timings  # llama.cpp: its own counters, on the last chunk
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.delta.content:
                text.append(choice.delta.content)
            for tc in choice.delta.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = tc.id or call["id"]
                if tc.function is not None:
                    call["name"] += tc.function.name or ""
                    call["arguments"] += tc.function.arguments or ""
    return {"content": "".join(text), "tool_calls": [calls[i] for i in sorted(calls)], "timings": timings,
            "usage": usage}


def ask(client: OpenAI, model: str, question: str, max_rounds: int, follow_up: str, max_tokens: int) -> dict:
    """One conversation: the question, its tool rounds, the follow-up; every call made, in order."""
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    made, rounds = [], 0
    while True:
        answer = streamed_call(client, model, messages, max_tokens)
        made.append(answer)
        if not answer["tool_calls"] or rounds == max_rounds:
            break
        rounds += 1
        messages.append({"role": "assistant", "content": answer["content"] or None, "tool_calls": [
            {"id": tc["id"] or f"call_{rounds}_{i}", "type": "function",
             "function": {"name": tc["name"], "arguments": tc["arguments"]}}
            for i, tc in enumerate(answer["tool_calls"])]})
        for i, tc in enumerate(answer["tool_calls"]):
            messages.append({"role": "tool", "tool_call_id": tc["id"] or f"call_{rounds}_{i}",
                             "content": run_tool(tc["name"], tc["arguments"])})
    if follow_up:
        messages += [{"role": "assistant", "content": made[-1]["content"]}, {"role": "user", "content": follow_up}]
        made.append(streamed_call(client, model, messages, max_tokens))
    return {"question": question, "tool_rounds": rounds, "calls": made}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8099/v1", help="the recorder's URL (default: %(default)s)")
    p.add_argument("--model", default="local", help="the model name sent (llama.cpp's server takes any)")
    p.add_argument("--question", action="append", help="a question (repeatable; default: four about the shop)")
    p.add_argument("--max-rounds", type=int, default=3, help="tool rounds per question at most (default 3)")
    p.add_argument("--follow-up", default="Say that again in five words.",
                   help="asked after each answer, in the same conversation ('' for none)")
    p.add_argument("--max-tokens", type=int, default=48, help="max_tokens of every call (default 48)")
    args = p.parse_args()
    client = OpenAI(base_url=args.base_url, api_key=os.environ.get("OPENAI_API_KEY", "none"), max_retries=0)
    for q in args.question or QUESTIONS:
        print(json.dumps(ask(client, args.model, q, args.max_rounds, args.follow_up, args.max_tokens)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
