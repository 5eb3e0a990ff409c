"""The recording proxy passes everything through unchanged (issue 26): against a stub upstream whose bytes are known,
a streamed answer reaches the client byte for byte (SSE comments, CRLF line ends, lines split across writes), a
gzip-encoded JSON answer stays encoded, the request's body and headers reach the upstream as the client sent them
(Authorization included, no header added), and an error passes through; the recording parses each, masks what
``--redact`` names and stores no key."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import socket
from pathlib import Path

import aiohttp
import limits
from aiohttp import web

from leverbench.proxy.server import RecordingProxy, upstream_url
from leverbench.proxy.writer import RecordingWriter
from leverbench.workload.recorded.registry import load_requests

KEY = "sk-test-not-stored-42"


def _chunk(delta: dict, **more: object) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": more.pop("finish", None)}
    return b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [choice], **more}).encode()


# what the stub streams, written in these pieces (split mid-line and mid-JSON), with a pause after each
STREAM = (b": keep-alive comment\n\n" + _chunk({"role": "assistant", "reasoning_content": "think "}) + b"\r\n\r\n"
          + _chunk({"content": "Hello"}) + b"\n\n" + _chunk({"content": " secret-token-AB12 world"}) + b"\n\n"
          + _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                    "function": {"name": "lookup", "arguments": "{\"q\":"}}]}) + b"\n\n"
          + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}, finish="tool_calls") + b"\n\n"
          + b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":21,"completion_tokens":7,"total_tokens":28},'
            b'"timings":{"prompt_n":21,"prompt_ms":3.5,"predicted_n":7,"predicted_ms":9.25}}\n\n'
          + b"data: [DONE]\n\n")
PIECES = [STREAM[i:j] for i, j in zip([0, 5, 40, 41, 200, 333, 500], [5, 40, 41, 200, 333, 500, len(STREAM)])]
JSON_BODY = json.dumps({"id": "y", "object": "chat.completion", "model": "stub-model",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "plain answer"},
                                     "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}).encode()
GZIPPED = gzip.compress(JSON_BODY)


class Stub:
    """An upstream whose every byte is known; it keeps what each request brought."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append((request.method, request.path_qs, dict(request.headers), body))
        mode = json.loads(body).get("mode")
        if mode == "gzip":
            return web.Response(body=GZIPPED, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
        if mode == "error":
            return web.json_response({"error": {"message": "bad model"}}, status=400)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Upstream": "stub"})
        await resp.prepare(request)
        for piece in PIECES[:3] if mode in ("cut", "unfinished") else PIECES:
            await resp.write(piece)
            await asyncio.sleep(0.01)
        if mode == "cut":  # the upstream dies mid-stream
            request.transport.close()
            return resp
        await resp.write_eof()  # "unfinished": an HTTP body that ends before [DONE] or a finish reason
        return resp

    async def models(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.path_qs, dict(request.headers), b""))
        return web.json_response({"object": "list", "data": [{"id": "stub-model", "object": "model"}]})


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def _exercise(out: Path) -> tuple[Stub, list[tuple[int, dict[str, str], bytes]], bytes]:
    stub = Stub()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", stub.chat)
    app.router.add_get("/v1/models", stub.models)
    runner, url = await _serve(app)
    writer = RecordingWriter(out, url + "/v1", [re.compile(r"secret-token-\w+")], "X-Session-Id")
    proxy = RecordingProxy(url + "/v1", writer)
    base = await proxy.start("127.0.0.1", 0) + "/v1"
    got = []
    sent = b'{"model": "m",  "messages": [{"role": "user", "content": "hi secret-token-ZZ9"}], "stream": true}'
    try:
        # a client that sends only the headers given (aiohttp adds User-Agent, Accept, Accept-Encoding otherwise)
        async with aiohttp.ClientSession(auto_decompress=False,
                                         skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding")) as s:
            headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", "X-Custom": "kept"}
            for body in (sent, b'{"mode": "gzip", "messages": [{"role": "user", "content": "plain"}]}',
                         b'{"mode": "error", "messages": [{"role": "user", "content": "x"}]}'):
                async with s.post(base + "/chat/completions?trace=1", data=body, headers=headers,
                                  timeout=aiohttp.ClientTimeout(total=limits.HTTP_S)) as r:
                    got.append((r.status, dict(r.headers), await r.read()))
            async with s.get(base + "/models", timeout=aiohttp.ClientTimeout(total=limits.HTTP_S)) as r:
                got.append((r.status, dict(r.headers), await r.read()))
    finally:
        await proxy.stop()
        await runner.cleanup()
        writer.close()
    return stub, got, sent


def test_the_proxy_passes_bytes_through_unchanged_and_records_them_parsed(tmp_path):
    stub, got, sent = asyncio.run(_exercise(tmp_path / "rec"))
    (s_status, s_headers, s_body), (g_status, g_headers, g_body), (e_status, _, e_body), (_, _, m_body) = got
    # the stream: every byte as the upstream wrote it, its headers too
    assert s_status == 200 and s_body == STREAM
    assert s_headers["Content-Type"] == "text/event-stream" and s_headers["X-Upstream"] == "stub"
    # gzip stays gzip: the client gets the upstream's compressed bytes (and decodes them itself)
    assert g_headers["Content-Encoding"] == "gzip" and g_body == GZIPPED
    assert e_status == 400 and json.loads(e_body) == {"error": {"message": "bad model"}}
    assert json.loads(m_body)["data"][0]["id"] == "stub-model"
    # the upstream got the request as sent: method, path and query, body bytes, the key; no header the client lacks
    method, path, headers, body = stub.seen[0]
    assert (method, path, body) == ("POST", "/v1/chat/completions?trace=1", sent)
    assert headers["Authorization"] == f"Bearer {KEY}" and headers["X-Custom"] == "kept"
    assert sorted(headers) == ["Authorization", "Content-Length", "Content-Type", "Host", "X-Custom"]
    # the recording: three chat exchanges (the model list is not one), parsed, masked, without the key
    text = (tmp_path / "rec" / "exchanges.jsonl").read_text()
    assert KEY not in text and "secret-token-" not in text
    header, *rows = [json.loads(line) for line in text.splitlines()]
    assert header["kind"] == "recording" and header["redact_patterns"] == 1
    stream, gz, err = rows
    assert stream["request"]["messages"][0]["content"] == "hi ***" and stream["redactions"] == 2
    r = stream["response"]
    assert (r["content"], r["reasoning"], r["finish_reason"]) == ("Hello *** world", "think ", "tool_calls")
    assert r["tool_calls"] == [{"id": "call_1", "name": "lookup", "arguments": '{"q": 1}'}]
    assert r["usage"]["prompt_tokens"] == 21 and r["timings"]["predicted_ms"] == 9.25
    assert stream["timing"]["chunks"] >= 2 and 0 < stream["timing"]["ttft_s"] < stream["timing"]["latency_s"]
    assert gz["stream"] is False and gz["response"]["content"] == "plain answer" and gz["error"] is None
    assert err["status"] == 400 and err["error"].startswith("HTTP 400") and err["response"] is None
    # the importer reads the recording back: the successful exchanges are calls (the failed one left out)
    imp = load_requests(tmp_path / "rec")
    assert [len(t.calls) for t in imp.turns] == [1, 1] and imp.skipped == {"failed exchange": 1}
    assert imp.turns[0].calls[0].prompt_tokens == 21 and imp.turns[0].calls[0].redactions == 2


def test_an_unreachable_upstream_is_a_502_and_a_failed_exchange(tmp_path):
    async def go() -> tuple[int, bytes]:
        writer = RecordingWriter(tmp_path / "rec", "http://127.0.0.1:9/v1", [], "X-Session-Id")
        proxy = RecordingProxy("http://127.0.0.1:9/v1", writer)
        base = await proxy.start("127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as s, s.post(base + "/v1/chat/completions", data=b'{"messages": []}',
                                                           timeout=aiohttp.ClientTimeout(total=limits.HTTP_S)) as r:
                return r.status, await r.read()
        finally:
            await proxy.stop()
            writer.close()

    status, body = asyncio.run(go())
    assert status == 502 and "cannot reach the upstream" in json.loads(body)["error"]["message"]
    (row,) = [json.loads(line) for line in (tmp_path / "rec" / "exchanges.jsonl").read_text().splitlines()[1:]]
    assert row["status"] is None and "cannot reach the upstream" in row["error"]


def test_a_client_that_goes_away_mid_stream_is_recorded_as_such(tmp_path):
    async def go() -> None:
        stub = Stub()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", stub.chat)
        runner, url = await _serve(app)
        writer = RecordingWriter(tmp_path / "rec", url, [], "X-Session-Id")
        proxy = RecordingProxy(url, writer)
        base = await proxy.start("127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as s:
                body = b'{"messages": [{"role": "user", "content": "x"}]}'
                r = await s.post(base + "/v1/chat/completions", data=body,
                                 timeout=aiohttp.ClientTimeout(total=limits.HTTP_S))
                await r.content.readany()  # the first piece, then the client hangs up
                r.close()
            for _ in range(int(limits.SETTLE_S / 0.05)):  # the proxy notices at its next write
                if writer.exchanges:
                    break
                await asyncio.sleep(0.05)
        finally:
            await proxy.stop()
            await runner.cleanup()
            writer.close()

    asyncio.run(go())
    (row,) = [json.loads(line) for line in (tmp_path / "rec" / "exchanges.jsonl").read_text().splitlines()[1:]]
    assert row["status"] == 200 and row["error"] == "the client went away mid-response" and row["response"] is None


def test_a_stream_cut_or_unfinished_upstream_is_a_failed_exchange(tmp_path):
    async def go() -> list[bytes]:
        stub = Stub()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", stub.chat)
        runner, url = await _serve(app)
        writer = RecordingWriter(tmp_path / "rec", url, [], "X-Session-Id")
        proxy = RecordingProxy(url, writer)
        base = await proxy.start("127.0.0.1", 0)
        got = []
        try:
            async with aiohttp.ClientSession() as s:
                for mode in ("cut", "unfinished"):
                    body = json.dumps({"mode": mode, "messages": [{"role": "user", "content": mode}]}).encode()
                    async with s.post(base + "/v1/chat/completions", data=body,
                                      timeout=aiohttp.ClientTimeout(total=limits.HTTP_S)) as r:
                        try:
                            got.append(await r.read())
                        except aiohttp.ClientPayloadError:
                            got.append(b"(cut)")
        finally:
            await proxy.stop()
            await runner.cleanup()
            writer.close()
        return got

    cut, unfinished = asyncio.run(go())
    assert cut == b"(cut)" and unfinished == b"".join(PIECES[:3])  # the client saw what the upstream sent
    rows = [json.loads(line) for line in (tmp_path / "rec" / "exchanges.jsonl").read_text().splitlines()[1:]]
    assert rows[0]["error"].startswith("the upstream's response broke")
    assert rows[1]["error"] == "response not parsed: ValueError: the stream ended without a finish reason or [DONE]"


def test_the_upstream_path_is_kept_once_and_other_paths_go_to_its_root():
    assert upstream_url("http://h:8000/v1", "/v1/chat/completions?x=1") == "http://h:8000/v1/chat/completions?x=1"
    assert upstream_url("http://h:8000/v1/", "/v1") == "http://h:8000/v1"
    assert upstream_url("http://h:8000", "/v1/models") == "http://h:8000/v1/models"
    # an engine's own endpoints, outside the API's base path, pass through unchanged to the upstream's root
    for path in ("/health", "/props", "/metrics?x=1", "/v1x/y"):
        assert upstream_url("http://h:8000/v1/", path) == "http://h:8000" + path
    assert upstream_url("https://h/openai/v1", "/props") == "https://h/props"


def test_an_engines_own_endpoints_pass_through_at_its_root(tmp_path):
    async def go() -> list[tuple[int, bytes]]:
        async def root(r: web.Request) -> web.Response:
            return web.Response(text=f"root {r.path}")

        app = web.Application()
        for path in ("/health", "/metrics"):
            app.router.add_get(path, root)
        runner, url = await _serve(app)
        proxy = RecordingProxy(url + "/v1", None)
        base = await proxy.start("127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as s:
                got = []
                for path in ("/health", "/metrics"):
                    async with s.get(base + path, timeout=aiohttp.ClientTimeout(total=limits.HTTP_S)) as r:
                        got.append((r.status, await r.read()))
                return got
        finally:
            await proxy.stop()
            await runner.cleanup()

    assert asyncio.run(go()) == [(200, b"root /health"), (200, b"root /metrics")]


def test_bad_record_options_are_one_line_and_leave_no_recording(tmp_path):
    from click.testing import CliRunner  # noqa: PLC0415

    from leverbench.cli import cli  # noqa: PLC0415

    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "exchanges.jsonl").write_text('{"kind": "recording"}\n')
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        up = ["--upstream", "http://127.0.0.1:9/v1"]
        for args, says in ((["--upstream", "ftp://x"], "--upstream must be an http:// or https:// URL"),
                           ([*up, "--listen", "nowhere"], "--listen 'nowhere': give"),
                           ([*up, "--redact", "(unclosed"], "not a regular expression"),
                           # (on a taken port: before the pattern was checked, the proxy would have run on)
                           *(([*up, "--listen", f"127.0.0.1:{port}", "--redact", p], "matches the empty string")
                             for p in ("", "secret|", r"\b")),
                           ([*up, "--out", str(tmp_path / "old")], "already holds a recording"),
                           ([*up, "--listen", f"127.0.0.1:{port}"], "cannot listen there")):
            out = args if "--out" in args else [*args, "--out", str(tmp_path / "new")]
            res = CliRunner().invoke(cli, ["record", *out])
            assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and says in res.output, res.output
    assert not (tmp_path / "new" / "exchanges.jsonl").exists()  # nothing recorded: no file left behind


def test_a_recording_that_cannot_be_written_never_stops_the_pass_through(tmp_path, monkeypatch):
    from leverbench.errors import RuntimeFailure  # noqa: PLC0415

    def full_disk(self: RecordingWriter, raw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RecordingWriter, "_record", full_disk)

    async def go() -> tuple[bytes, BaseException | None]:
        stub = Stub()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", stub.chat)
        runner, url = await _serve(app)
        writer = RecordingWriter(tmp_path / "rec", url, [], "X-Session-Id")
        proxy = RecordingProxy(url, writer)
        base = await proxy.start("127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as s:
                bodies = []
                for _ in range(2):
                    async with s.post(base + "/v1/chat/completions", data=b'{"messages": [{"role": "user"}]}',
                                      timeout=aiohttp.ClientTimeout(total=limits.HTTP_S)) as r:
                        bodies.append(await r.read())
        finally:
            await proxy.stop()
            await runner.cleanup()
        try:
            writer.close()
        except RuntimeFailure as exc:
            return bodies[-1], exc
        return bodies[-1], None

    body, err = asyncio.run(go())
    assert body == STREAM  # both calls went through
    assert err is not None and "2 exchange(s) could not be recorded" in str(err) and "No space left" in str(err)


def _written(out: Path, raws: list, patterns: list[str]) -> list[dict]:
    """*raws* (RawExchanges) through a writer, without HTTP: the rows it wrote."""
    writer = RecordingWriter(out, "http://127.0.0.1:9/v1", [re.compile(p) for p in patterns], "X-Session-Id")
    for raw in raws:
        writer.submit(raw)
    writer.close()
    return [json.loads(line) for line in (out / "exchanges.jsonl").read_text().splitlines()[1:]]


def _raw(body: dict, session: str | None = None, response: bytes = JSON_BODY, **kw: object):
    from leverbench.proxy.exchange import RawExchange  # noqa: PLC0415

    return RawExchange(t_start=0.0, method="POST", path="/v1/chat/completions", session=session,
                       request=json.dumps(body).encode(), status=200, content_type="application/json",
                       chunks=[(0.01, response)], end_s=0.01, **kw)


def test_redact_masks_content_never_structure(tmp_path):
    """A pattern meant for secrets (any long token) must not mask tool-call ids, roles, types, tool names or the
    model: a live replay would answer read_file(b) with a's result; a session masked before grouping would merge
    two users' sessions."""
    from leverbench.recording import RecordedCall, RecordedTurn  # noqa: PLC0415
    from leverbench.workload.recorded.live import ToolResults  # noqa: PLC0415

    ids = ("call_Qx1aZ8bK2mN4pR6sT8uV0wYy", "call_Hh3jK5lM7nP9qR1sT3uV5wXz")
    body = {"model": "gpt_4o_mini_2024_07_18_long_name", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "key sk_live_ABCDEFGHIJKLMNOPQRSTUV"}]},
        {"role": "user", "content": "read a and b, assistant"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "read_file_with_a_long_name", "arguments":
                                                       json.dumps({"path": p, "token": "tok_ABCDEFGHIJKLMNOPQRSTU"})}}
            for i, p in zip(ids, "ab")]},
        *({"role": "tool", "tool_call_id": i, "content": f"contents of {p.upper()}"} for i, p in zip(ids, "ab"))],
        "user": "alice@example.com"}
    raws = [_raw(body, session=f"sess-{who}@example.com") for who in ("alice", "bob", "alice")]
    rows = _written(tmp_path / "rec", raws, [r"\b[A-Za-z0-9_]{20,}\b", r"assistant", r"[a-z]+@example\.com"])
    req = rows[0]["request"]
    assert req["model"] == body["model"]
    assert [m["role"] for m in req["messages"]] == [m["role"] for m in body["messages"]]
    assert req["messages"][0]["content"] == [{"type": "text", "text": "key ***"}]
    assert req["messages"][1]["content"] == "read a and b, ***" and req["user"] == "***"
    calls = req["messages"][2]["tool_calls"]
    assert [c["id"] for c in calls] == list(ids) and {c["function"]["name"] for c in calls} == \
        {"read_file_with_a_long_name"} and all(c["type"] == "function" for c in calls)
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"path": p, "token": "***"} for p in "ab"]
    assert [m["tool_call_id"] for m in req["messages"][3:]] == list(ids)
    # the live replay answers each call with its own result
    tr = ToolResults(RecordedTurn("t", (RecordedCall(req, "x"),)))
    assert [tr.answer("read_file_with_a_long_name", json.dumps({"path": p, "token": "***"}))[0] for p in "ab"] == \
        ["contents of A", "contents of B"]
    # two users' sessions stay two turns, their values masked as stored and as the turns are named
    assert [(r["turn"], r["step"], r["session"]) for r in rows] == [
        ("s-sess-***", 0, "sess-***"), ("s-sess-***-2", 0, "sess-***"), ("s-sess-***", 1, "sess-***")]
    assert "example.com" not in (tmp_path / "rec" / "exchanges.jsonl").read_text()


def test_a_compressed_request_goes_through_as_sent_and_is_recorded_read(tmp_path):
    """A gzip-encoded request body reaches the upstream as the client sent it (bytes and Content-Encoding), never
    inflated and still labelled gzip; the recording reads it inflated, off the path."""
    sent = gzip.compress(b'{"model": "m", "messages": [{"role": "user", "content": "zipped"}]}')
    seen: list[tuple[str | None, bytes]] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append((request.headers.get("Content-Encoding"), await request.read()))  # (the stub inflates: aiohttp)
        return web.Response(body=JSON_BODY, content_type="application/json")

    async def go() -> int:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner, url = await _serve(app)
        writer = RecordingWriter(tmp_path / "rec", url + "/v1", [], "X-Session-Id")
        proxy = RecordingProxy(url + "/v1", writer)
        base = await proxy.start("127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as s, s.post(
                    base + "/v1/chat/completions", data=sent, timeout=aiohttp.ClientTimeout(total=limits.HTTP_S),
                    headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}) as r:
                return r.status
        finally:
            await proxy.stop()
            await runner.cleanup()
            writer.close()

    assert asyncio.run(go()) == 200
    assert seen == [("gzip", gzip.decompress(sent))]  # the upstream got gzip bytes labelled gzip, and read them
    (row,) = [json.loads(line) for line in (tmp_path / "rec" / "exchanges.jsonl").read_text().splitlines()[1:]]
    assert row["error"] is None and row["request"]["messages"][0]["content"] == "zipped"


def test_a_brotli_or_zstd_answer_is_read_where_a_library_is_else_recorded_without_it(tmp_path, monkeypatch):
    from leverbench.proxy import exchange  # noqa: PLC0415

    monkeypatch.setattr(exchange, "_brotli", lambda: None)
    monkeypatch.setattr(exchange, "_zstd", lambda: None)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    raws = [_raw(body, response=b"\x8b\x02", content_encoding=enc) for enc in ("br", "zstd")]
    rows = _written(tmp_path / "none", raws, [])
    assert [(r["error"], r["response"]) for r in rows] == [(None, None)] * 2  # not a failure: the request is kept
    assert [r["note"] for r in rows] == ["the response is not recorded: content-encoding 'br' not read: install "
                                         "brotli (pip install brotli) to read it",
                                         "the response is not recorded: content-encoding 'zstd' not read: install "
                                         "zstandard (pip install zstandard) to read it"]
    imp = load_requests(tmp_path / "none")
    assert [len(t.calls) for t in imp.turns] == [1, 1] and imp.skipped == {}  # replayable (no usage to check against)
    monkeypatch.setattr(exchange, "_brotli", lambda: lambda data: JSON_BODY)  # a library (stood in for)
    (row,) = _written(tmp_path / "lib", [_raw(body, response=b"\x8b\x02", content_encoding="br")], [])
    assert row["error"] is None and row["note"] is None and row["response"]["content"] == "plain answer"


def test_a_request_with_a_lone_surrogate_is_recorded_and_a_bad_one_says_why(tmp_path):
    """JSON may escape half a surrogate pair (a cut emoji, as json.dumps writes it): orjson refuses it, Python's
    parser reads it; the exchange is recorded (and reads back). A request that is no JSON says the parser's
    error, not that it is "not a JSON object"."""
    from leverbench.proxy.exchange import RawExchange  # noqa: PLC0415

    cut = b'{"model": "m", "messages": [{"role": "user", "content": "emoji cut \\ud83d"}]}'
    bad = RawExchange(t_start=0.0, method="POST", path="/v1/chat/completions", session=None,
                      request=b'{"model": "m", "messages": [', status=200, content_type="application/json",
                      chunks=[(0.01, JSON_BODY)], end_s=0.01)
    ok = RawExchange(t_start=0.0, method="POST", path="/v1/chat/completions", session=None, request=cut, status=200,
                     content_type="application/json", chunks=[(0.01, JSON_BODY)], end_s=0.01)
    rows = _written(tmp_path / "rec", [ok, bad], [r"secret"])
    assert rows[0]["error"] is None and rows[0]["request"]["messages"][0]["content"] == "emoji cut \ud83d"
    assert rows[1]["error"].startswith("the request is not JSON: ") and "char 28" in rows[1]["error"], rows[1]["error"]
    (turn,) = load_requests(tmp_path / "rec").turns
    assert turn.calls[0].messages[0]["content"] == "emoji cut \ud83d"
    # its replay hashes those messages and, with store_text, writes them in the ledger, as they came
    from leverbench.ledger.writer import LedgerWriter  # noqa: PLC0415
    from leverbench.runner.client import messages_sha256  # noqa: PLC0415

    assert len(messages_sha256(turn.calls[0].messages)) == 64  # type: ignore[arg-type]
    led = LedgerWriter(tmp_path / "ledger.jsonl")
    led.append({"kind": "call", "input_messages": turn.calls[0].messages})
    led.close()
    assert json.loads((tmp_path / "ledger.jsonl").read_text())["input_messages"] == turn.calls[0].messages


def test_a_proxy_that_cannot_listen_leaves_no_client_session_open():
    async def go(port: int) -> aiohttp.ClientSession | None:
        proxy = RecordingProxy("http://127.0.0.1:9/v1", None)
        try:
            await proxy.start("127.0.0.1", port)
        except OSError:
            return proxy.session
        raise AssertionError("the port was free")

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        session = asyncio.run(go(taken.getsockname()[1]))
    assert session is None or session.closed  # (else: "Unclosed client session" when it is collected)


def test_a_client_that_hangs_up_after_done_got_a_whole_answer_and_it_is_recorded(tmp_path):
    """The openai SDK closes its connection once it has read ``data: [DONE]``: when the upstream still writes after
    it (here an SSE comment, a moment later), the proxy's next write fails.  The answer was whole: the exchange is
    recorded as answered (its text, finish reason, usage), with a note, not as a client gone mid-response."""

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in PIECES:
            await resp.write(piece)
        await asyncio.sleep(0.3)  # the client has read [DONE] and hung up by now
        try:
            for _ in range(3):
                await resp.write(b": still here\n\n")
                await asyncio.sleep(0.05)
            await resp.write_eof()
        except ConnectionResetError:  # the proxy let go of this stream once its client had gone
            pass
        return resp

    async def go() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner, url = await _serve(app)
        writer = RecordingWriter(tmp_path / "rec", url, [], "X-Session-Id")
        proxy = RecordingProxy(url, writer)
        base = await proxy.start("127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as s:
                r = await s.post(base + "/v1/chat/completions",
                                 data=b'{"messages": [{"role": "user", "content": "x"}]}',
                                 timeout=aiohttp.ClientTimeout(total=limits.HTTP_S))
                got = b""
                while b"[DONE]" not in got:
                    got += await r.content.readany()
                r.close()
            for _ in range(int(limits.SETTLE_S / 0.05)):
                if writer.exchanges:
                    break
                await asyncio.sleep(0.05)
        finally:
            await proxy.stop()
            await runner.cleanup()
            writer.close()

    asyncio.run(go())
    (row,) = [json.loads(line) for line in (tmp_path / "rec" / "exchanges.jsonl").read_text().splitlines()[1:]]
    assert row["error"] is None and row["note"].startswith("the client closed the connection after the stream's [DONE]")
    assert row["response"]["content"] == "Hello secret-token-AB12 world"
    assert row["response"]["finish_reason"] == "tool_calls" and row["response"]["usage"]["prompt_tokens"] == 21
