"""A small agent, as a user's would be, for the recording tests: an OpenAI-compatible client (the standard
library's HTTP only: it knows nothing of leverbench), one long system prompt, two tools whose results it computes
itself, and a loop that calls the model until it answers without a tool call.

    python tests/agent_script.py --base-url http://127.0.0.1:8099/v1 --task "fix the build" [--task ...]

Each task is one turn: the system prompt and the task, then as many tool rounds as the model asks for (the
simulator with ``tool_call_rounds = 2``: two).  The API key (``--key``, default ``$AGENT_API_KEY``) goes in the
Authorization header.  Prints one JSON line per task: the calls made, each one's tool calls, and the answer.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import urllib.request

SYSTEM_WORDS = 1500
CALL_TIMEOUT_S = 120.0  # a call's limit, as tests/limits.py SERVER_READY_S (this script runs on its own)
TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file of the repository.",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "run_tests", "description": "Run the test suite.",
                                      "parameters": {"type": "object", "properties": {}}}},
]


def words(n: int, seed: str) -> str:
    rng = random.Random(seed)
    return " ".join("".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(1, 3)))
                    for _ in range(n))


SYSTEM = ("You are a careful build engineer. Follow the house rules below to the letter.\n\n"
          + words(SYSTEM_WORDS, "house-rules"))


def tool_result(name: str, arguments: str) -> str:
    """What the agent's tool returns: a text whose size grows with the round the model names."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        args = {}
    rounds = args.get("round", 1) if isinstance(args, dict) else 1
    return f"{name} {arguments}:\n" + words(300 * int(rounds), f"{name}:{arguments}")


def chat(base_url: str, key: str, body: dict, session: str | None) -> tuple[str, list[dict]]:
    """One chat completion, streamed: the answer's text and its tool calls."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    if session:
        headers["X-Session-Id"] = session
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                 headers=headers, method="POST")
    content, calls = [], {}
    with urllib.request.urlopen(req, timeout=CALL_TIMEOUT_S) as resp:  # noqa: S310 (the test's own loopback servers)
        if not body.get("stream"):
            message = json.loads(resp.read())["choices"][0]["message"]
            return message.get("content") or "", [
                {"id": tc["id"], "name": tc["function"]["name"], "arguments": tc["function"]["arguments"]}
                for tc in message.get("tool_calls") or []]
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[5:]).get("choices") or []:
                delta = choice.get("delta") or {}
                content.append(delta.get("content") or "")
                for tc in delta.get("tool_calls") or []:
                    slot = calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "arguments": ""})
                    slot["id"] = tc.get("id") or slot["id"]
                    fn = tc.get("function") or {}
                    slot["name"] += fn.get("name") or ""
                    slot["arguments"] += fn.get("arguments") or ""
    return "".join(content), [calls[k] for k in sorted(calls)]


def run_task(base_url: str, key: str, task: str, *, stream: bool = True, session: str | None = None,
             max_calls: int = 8) -> dict:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    made = []
    for _ in range(max_calls):
        body = {"model": "agent-model", "messages": messages, "tools": TOOLS, "max_tokens": 64, "temperature": 0,
                "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        content, calls = chat(base_url, key, body, session)
        made.append({"tool_calls": calls, "content": content})
        if not calls:
            break
        messages.append({"role": "assistant", "content": content or None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls]})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": tool_result(c["name"], c["arguments"])}
                     for c in calls]
    return {"task": task, "calls": made}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--task", action="append", required=True)
    ap.add_argument("--key", default=os.environ.get("AGENT_API_KEY", "sk-none"))
    ap.add_argument("--no-stream", action="store_true")
    ap.add_argument("--session", default=None, help="send this X-Session-Id header")
    a = ap.parse_args()
    for task in a.task:
        print(json.dumps(run_task(a.base_url, a.key, task, stream=not a.no_stream, session=a.session)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
