"""``leverbench record``: the recording proxy (:mod:`leverbench.proxy`), until Ctrl-C, SIGTERM or SIGHUP."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path

import click

from ..errors import BadInput
from .common import Command

DEFAULT_LISTEN = "127.0.0.1:8099"
SWITCH_INTERVAL_S = 0.0005


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; ``:PORT`` is 127.0.0.1) as (host, port); BadInput when it is not."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise BadInput(f"--listen {listen!r}: give HOST:PORT, e.g. {DEFAULT_LISTEN} (port 0: any free one)")
    return host.strip("[]") or "127.0.0.1", int(port)


#: Texts a ``--redact`` pattern is tried on: one that matches the empty string in any (``''``, ``a*``, ``\b``,
#: ``x|``) would put ``***`` between characters and mask nothing.
EMPTY_PROBES = ("", "a", " ", "a b", "ab1-_.:/")


def compiled(patterns: tuple[str, ...]) -> list[re.Pattern[str]]:
    """The ``--redact`` patterns; BadInput for one that is no regular expression or matches the empty string."""
    out = []
    for p in patterns:
        try:
            pattern = re.compile(p)
        except re.error as exc:
            raise BadInput(f"--redact {p!r}: not a regular expression ({exc})") from None
        if any(m.start() == m.end() for text in EMPTY_PROBES for m in pattern.finditer(text)):
            raise BadInput(f"--redact {p!r}: matches the empty string (it would mask between characters); give a "
                           "pattern that matches the text to hide, e.g. 'sk-[A-Za-z0-9]+'")
        out.append(pattern)
    return out


@click.command(name="record", cls=Command)
@click.option("--upstream", required=True, metavar="URL",
              help="The OpenAI-compatible endpoint the agent would call (e.g. http://127.0.0.1:8000/v1).")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Where the proxy listens; point the agent's base URL at it (with the upstream's path, e.g. /v1). "
              "Port 0: any free one (printed).")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The recording's directory: exchanges.jsonl is written there (a new one).")
@click.option("--redact", "redact", multiple=True, metavar="REGEX",
              help="Mask every match of this regular expression (***) in what the recorded requests and responses "
              "say (messages, tool-call arguments, answers; never roles, ids, tool names or the model) before anything "
              "is written; repeat for more. The agent and the upstream still see the text.")
@click.option("--session-header", default="X-Session-Id", show_default=True, metavar="NAME",
              help="A request header that names the agent's session: requests with the same value are one turn "
              "(without it, a request that extends an earlier one's messages continues its turn).")
def record_command(upstream: str, listen: str, out: Path, redact: tuple[str, ...], session_header: str) -> None:
    """Record an agent's real model calls: an OpenAI-compatible pass-through proxy.

    Point the agent's base URL at the proxy and run it as usual. Every request
    goes to --upstream unchanged (chat completions streamed or not, tools,
    /v1/models and the rest; the Authorization header is forwarded, never
    stored) and every response comes back unchanged, byte for byte, as it
    arrives. Each chat exchange is appended to OUT/exchanges.jsonl: the request
    (messages, tools, sampling), the response (text, reasoning, tool calls,
    usage, the engine's timings) and its timing, grouped into turns. Prints the
    proxy's base URL, then runs until Ctrl-C, SIGTERM or SIGHUP. Replay the recording with
    [[cases]] from = "OUT" in an experiment (docs/recording.md).
    """
    import asyncio  # noqa: PLC0415

    from ..config.names import url_problem  # noqa: PLC0415
    from ..proxy.server import RecordingProxy, serve  # noqa: PLC0415 (aiohttp)
    from ..proxy.writer import RecordingWriter  # noqa: PLC0415
    from ..runner.signals import STOP_SIGNALS, cancel_on  # noqa: PLC0415

    # the recording's thread parses and writes each exchange; a thread holding the GIL keeps the proxy's event
    # loop waiting until the interpreter's switch interval (5 ms) ends: a shorter one hands it back sooner
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    problem = url_problem(upstream)
    if problem:
        raise BadInput(f"--upstream {problem}")
    host, port = parse_listen(listen)
    writer = RecordingWriter(out, upstream, compiled(redact), session_header,
                             hint=lambda line: click.echo(line, err=True))  # the first stream without usage
    path = urlsplit_path(upstream)

    def ready(url: str) -> None:
        click.echo(url + path, nl=True)
        click.echo(f"leverbench record: {url}{path} → {upstream}; recording to {writer.path} (Ctrl-C stops)", err=True)

    proxy = RecordingProxy(upstream, writer, session_header)

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        # each stops the proxy and closes the recording (SIGINT too: a shell's background job ignores it otherwise)
        cancel_on(asyncio.get_running_loop(), task.cancel, STOP_SIGNALS)
        await serve(proxy, host, port, ready)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except asyncio.CancelledError:
        pass
    except OSError as exc:
        writer.discard_if_empty()
        raise BadInput(f"--listen {listen}: cannot listen there ({exc.strerror or exc}); pick another port (0: any "
                       "free one)") from None
    try:
        writer.close()
    finally:
        click.echo(f"recorded {writer.exchanges} exchange(s) ({writer.failed} failed) in {len(writer.turns)} "
                   f"turn(s): {writer.path}" + unrecorded_note(proxy.unrecorded), err=True)


def unrecorded_note(unrecorded: Mapping[str, int]) -> str:
    """The POSTs the proxy passed through without recording them, for the closing line ("" when none)."""
    if not unrecorded:
        return ""
    paths = sorted(unrecorded.items(), key=lambda kv: -kv[1])
    said = ", ".join(f"{n} POST {path}" for path, n in paths[:3]) + (f" and {len(paths) - 3} more path(s)"
                                                                      if len(paths) > 3 else "")
    return f"; passed through unrecorded: {said} (only chat completions are recorded)"


def urlsplit_path(url: str) -> str:
    """The path of *url* without its trailing slash (what the agent's base URL adds to the proxy's)."""
    from urllib.parse import urlsplit  # noqa: PLC0415

    return urlsplit(url).path.rstrip("/")
