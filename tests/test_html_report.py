"""report.html and the replay page: sections, escaping, no network, and the replay in headless Chromium.

The Chromium tests skip only when /usr/bin/chromium is absent and LEVERBENCH_REQUIRE_CHROMIUM is unset
(CI installs Debian's ``chromium`` and sets it).  Chromium runs with its proxy pointed at a dead loopback
port and every host name resolving to nothing, so neither the page nor the browser's own background
services can reach the network; its NetLog then shows what the page *tried* to fetch.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import limits
import pytest
from click.testing import CliRunner

from leverbench.analysis.summary import summarize
from leverbench.cli.replay import replay_command
from leverbench.errors import BadInput
from leverbench.ledger.reader import read_ledger
from leverbench.report.html import CSP, render_html, render_replay, replay_data, script_json

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = "<img src=x onerror=alert(1)>"
# the same attacks with a visible effect if they ever ran
MARK_SCRIPT = "<script>document.body.setAttribute('data-pwned','script')</script>"
MARK_IMG = "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">"
BREAKOUT = "</script><script>document.body.setAttribute('data-pwned','breakout')</script><!--"
PAYLOAD = f"Answer: {XSS_SCRIPT} then {XSS_IMG} also {MARK_SCRIPT} {MARK_IMG} {BREAKOUT} & done."
DOC_TEXT = "<iframe srcdoc='<script>parent.document.body.dataset.pwned=1</script>'></iframe> <b>bold?</b>"
CASE = "doc qa <i>x</i>"
ARMS = ("base", "fast")
SECTIONS = ("conditions", "results", "time", "regression", "probes", "cost", "warnings", "replay-section")


# ------------------------------------------------------------------ a hand-made ledger


def _chunks(text: str, size: int = 6) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def _call(arm: str, case: str, rep: int, step: int, turn_id: str, t_send: float, text: str, ttft: float,
          dt: float, store_text: bool, prompt: str) -> dict:
    pieces = _chunks(text)
    chunk_t = [round(ttft + i * dt, 6) for i in range(len(pieces))]
    rec = {"kind": "call", "arm": arm, "case": case, "repeat": rep, "step": step, "turn_id": turn_id,
           "t_send": t_send, "ttft_s": ttft, "t_first_answer_s": ttft, "latency_s": chunk_t[-1] + 0.01,
           "chunk_t": chunk_t, "chunk_chars": [len(p) for p in pieces], "status": 200, "error": None,
           "prompt_tokens": 1000 + 50 * step, "completion_tokens": len(pieces), "cached_tokens": 0,
           "reasoning_tokens": None, "token_source": "usage", "content_chars": len(text), "reasoning_chars": 0,
           "finish_reason": "stop", "tool_calls": None, "timings": None, "output_sha256": "0" * 64,
           "request": {"model": "m", "max_tokens": 256}, "input_sha256": "1" * 64, "input_chars": 4000}
    if store_text:
        rec["output_text"] = text
        rec["reasoning_text"] = ""
        rec["chunk_text"] = pieces
        rec["input_messages"] = [{"role": "system", "content": "You answer from the document."},
                                 {"role": "user", "content": f"Document:\n{DOC_TEXT}\n\n{prompt}"}]
    return rec


def write_ledger(run_dir: Path, *, store_text: bool = True, repeats: int = 3) -> Path:
    """Two arms × two cases × repeats; case CASE has two calls per turn and plants markup in base's answer.

    Timing (repeat 0): 'fast' finishes its turn at about 1.8 s, 'base' sends its second call at 4.0 s and
    finishes at about 5.8 s, so 5 s into the replay 'fast' has frozen and 'base' is streaming its second call.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    header = {
        "kind": "run", "schema": "leverbench.ledger/1", "tool_version": "0.1.0", "run_id": "htmltest01",
        "started_at": "2026-01-01T00:00:00+00:00",
        "host": {"hostname": "t", "os": "Linux", "cpu": "test cpu", "cores": 2, "python": "3.11"},
        "experiment_file": "x.toml",
        "config": {"experiment": {"name": "html-test", "repeats": repeats, "order": "interleaved", "baseline": "base",
                                  "volume_tolerance_cell": 0.2, "volume_tolerance_total": 0.05,
                                  "store_text": store_text, "drift_tolerance": 0.1},
                   "arms": [{"name": a} for a in ARMS], "cases": [{"name": CASE}, {"name": "short"}]},
        "arms": {"base": {"role": "baseline", "conditions": {"prefix_cache": False, "drafter": "none"}},
                 "fast": {"role": "treatment", "conditions": {"prefix_cache": True, "drafter": "none"}}},
    }
    lines = [header]
    t = 1_800_000_000.0
    speed = {"base": (1.0, 0.06, 0.5), "fast": (0.2, 0.05, 0.2)}  # ttft first call, s per chunk, ttft later call
    n = 0
    for rep in range(repeats):
        for case in (CASE, "short"):
            for arm in ARMS:
                n += 1
                tid = f"turn{n:04d}"
                ttft0, dt, ttft1 = speed[arm]
                filler = " more" * (rep * 4)
                if case == CASE:
                    first = PAYLOAD if arm == "base" and rep == 0 else "A plain first answer about the doc."
                    texts = [first + filler,
                             "Second step answer: the document says what it says, quoted line by line, with a "
                             "tail long enough to keep streaming for a while." + filler]
                else:
                    texts = ["Short answer." + filler]
                t0 = t
                calls = []
                for step, text in enumerate(texts):
                    c = _call(arm, case, rep, step, tid, t, text, ttft0 if step == 0 else ttft1, dt, store_text,
                              f"question {step + 1}")
                    calls.append(c)
                    t = t + c["latency_s"] + 0.05
                end = calls[-1]["t_send"] + calls[-1]["latency_s"]
                lines += calls
                lines.append({"kind": "turn", "arm": arm, "case": case, "repeat": rep, "turn_id": tid, "t_start": t0,
                              "turn_s": end - t0, "calls": len(calls), "planned_calls": len(calls), "failed_calls": 0,
                              "output_tokens": sum(c["completion_tokens"] for c in calls),
                              "prompt_tokens": sum(c["prompt_tokens"] for c in calls), "error": None})
                t = end + 1.0
    (run_dir / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    return run_dir


@pytest.fixture()
def run(tmp_path):
    d = write_ledger(tmp_path / "run")
    ledger = read_ledger(d)
    return d, ledger, summarize(ledger)


# ------------------------------------------------------------------ parsing helpers


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.data: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data):
        if not (self._in and self._in[-1] in ("script", "style")):
            self.data.append(data)


def parse(html: str) -> _Tags:
    p = _Tags()
    p.feed(html)
    p.close()
    return p


URL_ATTRS = {"src", "href", "xlink:href", "action", "formaction", "srcset", "poster", "data", "background",
             "ping", "manifest", "cite", "longdesc", "codebase", "archive", "imagesrcset"}


def external_refs(html: str) -> list[str]:
    """Attribute values and CSS that would make a browser fetch from a network address."""
    bad = []
    for tag, attrs in parse(html).tags:
        for k, v in attrs.items():
            if k.lower() in URL_ATTRS and v is not None:
                v2 = v.strip().lower()
                if not (v2.startswith("#") or v2.startswith("data:")):
                    bad.append(f"<{tag} {k}={v!r}>")
            if k.lower() == "style" and v and re.search(r"url\s*\(|@import", v, re.I):
                bad.append(f"<{tag} style={v!r}>")
    for css in re.findall(r"<style[^>]*>(.*?)</style>", html, re.S | re.I):
        if re.search(r"url\s*\(|@import", css, re.I):
            bad.append("a <style> block loads a url")
    return bad


# ------------------------------------------------------------------ static tests


def test_script_json_cannot_close_its_block():
    obj = {"t": BREAKOUT + "<!-- ' & > \u2028 é"}
    s = str(script_json(obj))
    assert not set("<>&'") & set(s)
    assert s.isascii()
    assert json.loads(s) == obj


def test_untrusted_text_stays_text_in_the_html(run):
    d, ledger, summary = run
    for page in (render_html(summary, ledger), render_replay(ledger, CASE, list(ARMS))):
        for raw in (XSS_SCRIPT, XSS_IMG, MARK_SCRIPT, MARK_IMG, "</script><script>", "<iframe", "<i>x</i>"):
            assert raw not in page
        tags = parse(page).tags
        names = [t for t, _ in tags]
        assert "img" not in names and "iframe" not in names and "i" not in names
        scripts = [a for t, a in tags if t == "script"]
        assert [a.get("type") for a in scripts] == ["application/json", None]  # the data, then the page's code
        assert not [k for _, a in tags for k in a if k.lower().startswith("on")]  # no inline event handlers
        # the case name is shown, escaped
        assert "doc qa &lt;i&gt;x&lt;/i&gt;" in page
    # the payload travels intact inside the inert JSON block
    page = render_replay(ledger, CASE, list(ARMS))
    block = re.search(r'<script type="application/json" id="replay-data">(.*?)</script>', page, re.S).group(1)
    data = json.loads(block)
    base = next(t for t in data["turns"] if t["arm"] == "base")
    assert "".join(base["calls"][0]["text"]) == PAYLOAD
    assert DOC_TEXT in base["calls"][0]["prompt"]


def test_sections_and_tables(run):
    d, ledger, summary = run
    page = render_html(summary, ledger)
    ids = {a.get("id") for _, a in parse(page).tags}
    for s in SECTIONS:
        assert s in ids, s
    assert "load" not in ids  # no load stages in this run
    for key in ("conditions", "results", "volume", "multipliers", "shares", "decomposition"):
        assert f"t-{key}" in ids, key
    text = " ".join(parse(page).data)
    assert "Where the time goes" in text and "Side-by-side replay" in text
    # a scatter per cell with its fitted line, stacked bars with the phases
    assert page.count('class="scatter"') == len(summary["decomposition"])
    assert 'class="fit"' in page and "R²" in page
    assert "prefill" in text and "decode" in text
    # refused multipliers are marked with their reason
    if any(not m["citable"] for m in summary["multipliers"]):
        assert 'class="refused-row"' in page
    # with load stages, the throughput-latency section appears
    s2 = copy.deepcopy(summary)
    s2["load"] = [{"arm": a, "stage": i, "concurrency": c, "throughput_tps": tp, "requests_per_s": tp / 100,
                   "p50_s": p50, "p99_s": p50 * 1.8}
                  for a, k in (("base", 1.0), ("fast", 0.6))
                  for i, (c, tp, p50) in enumerate(((1, 40 / k, 2 * k), (4, 140 / k, 2.6 * k), (16, 210 / k, 6 * k)))]
    page2 = render_html(s2, ledger)
    ids2 = {a.get("id") for _, a in parse(page2).tags}
    assert "load" in ids2 and "t-load" in ids2
    assert "throughput, output tokens/s" in page2
    # without a ledger the replay section explains how to get one
    page3 = render_html(summary, None)
    assert "replay-data" not in page3 and "leverbench replay RUN_DIR" in page3


def test_no_network_references(run):
    d, ledger, summary = run
    for page in (render_html(summary, ledger), render_replay(ledger, CASE, list(ARMS))):
        csp = [a for t, a in parse(page).tags if t == "meta" and (a.get("http-equiv") or "").lower()
               == "content-security-policy"]
        assert len(csp) == 1 and csp[0]["content"] == CSP
        assert "default-src 'none'" in CSP and "unsafe-inline" not in CSP.split("script-src")[1].split(";")[0]
        assert page.index("Content-Security-Policy") < page.index("<style")  # the policy comes before anything
        assert external_refs(page) == []
        assert not re.search(r"(?:https?|wss?|ftp):", page, re.I)  # this run has no URL anywhere in its data
        assert not re.search(r"""(?:src|href)\s*=\s*["']?//""", page, re.I)
    # the detector itself works
    assert external_refs('<img src="https://example.invalid/x.png"><a href="//h/x">') != []
    assert external_refs('<div style="background:url(http://h/x)"></div>') != []


def test_replay_without_stored_text_says_so(tmp_path):
    d = write_ledger(tmp_path / "notext", store_text=False)
    ledger = read_ledger(d)
    page = render_replay(ledger, "short", ["fast", "base"])
    assert "The text was not stored in this run" in page and "store_text = true" in page
    data = replay_data(ledger)
    assert data["text_stored"] is False
    assert all(c["text"] is None for t in data["turns"] for c in t["calls"])
    assert all(c["chars"] for t in data["turns"] for c in t["calls"])  # timing still there
    # and report.html says it too
    assert "The text was not stored in this run" in render_html(summarize(ledger), ledger)


def test_replay_data_offsets_multi_step_turns(run):
    d, ledger, summary = run
    data = replay_data(ledger, cases=[CASE], arms=["base"], repeats=[0])
    (turn,) = data["turns"]
    c0, c1 = turn["calls"]
    assert c0["start"] == 0 and c1["start"] > c0["latency"]  # the second call starts after the first ends
    assert turn["end"] == pytest.approx(c1["start"] + c1["latency"], abs=1e-3)
    assert turn["end"] == pytest.approx(turn["turn_s"], abs=1e-3)


def test_report_embeds_a_bounded_replay(run):
    d, ledger, summary = run
    data = replay_data(ledger, max_events=60)
    assert data["truncated"] and 0 < data["turns_embedded"] < data["turns_recorded"]
    assert data["cases"] == [CASE] and data["repeats"] == [0]  # whole (repeat, case) units, first ones first
    assert {t["arm"] for t in data["turns"]} == set(ARMS)
    full = replay_data(ledger)
    assert not full["truncated"] and full["turns_embedded"] == full["turns_recorded"] == 12
    assert full["repeats"] == [0, 1, 2]


def test_print_stylesheet(run):
    d, ledger, summary = run
    page = render_html(summary, ledger)
    assert "@media print" in page and "break-inside: avoid" in page


def test_replay_names_valid_values_on_bad_input(run):
    d, ledger, summary = run
    with pytest.raises(BadInput, match=r"unknown case 'nope'.*'short'"):
        render_replay(ledger, "nope", ["base"])
    with pytest.raises(BadInput, match=r"unknown arm\(s\) 'slow'.*'base', 'fast'"):
        render_replay(ledger, "short", ["base", "slow"])
    with pytest.raises(BadInput, match=r"repeat 7.*0, 1, 2"):
        render_replay(ledger, "short", ["base"], repeat=7)


def test_replay_command(run):
    d, ledger, summary = run
    r = CliRunner().invoke(replay_command, [str(d), "--case", CASE, "--arms", "fast,base", "--repeat", "1"])
    assert r.exit_code == 0, r.output
    out = Path(r.output.strip().splitlines()[-1])
    assert out == d / "replay-doc-qa-i-x-i.html" and out.exists()
    page = out.read_text(encoding="utf-8")
    assert "repeat 1" in page
    r = CliRunner().invoke(replay_command, [str(d), "--case", "nope"])
    assert r.exit_code == 2 and "unknown case" in r.output
    r = CliRunner().invoke(replay_command, [str(d), "--case", "short", "--out", str(d / "x.html")])
    assert r.exit_code == 0 and (d / "x.html").exists()


# ------------------------------------------------------------------ headless Chromium

CHROMIUM = Path("/usr/bin/chromium")
REQUIRE = bool(os.environ.get("LEVERBENCH_REQUIRE_CHROMIUM"))
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists() and not REQUIRE,
                                    reason="needs /usr/bin/chromium (apt-get install chromium)")


def chromium(tmp_path: Path, url: str, *extra: str, budget_ms: int = 5000) -> subprocess.CompletedProcess:
    if not CHROMIUM.exists():
        pytest.fail("LEVERBENCH_REQUIRE_CHROMIUM is set but /usr/bin/chromium is missing (apt-get install chromium)")
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    profile.mkdir()
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-default-apps", "--disable-extensions", "--no-pings", "--disable-breakpad",
           f"--user-data-dir={profile}",
           # nothing leaves the machine: every host name resolves to nothing and every request goes to a
           # loopback proxy port where nothing listens (the browser's own updater/sign-in calls included)
           "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
           "--window-size=1280,2000", f"--virtual-time-budget={budget_ms}", *extra, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=limits.SMALL_COMMAND_S,
                          stdin=subprocess.DEVNULL)


def page_requests(netlog: Path) -> list[str]:
    """URLs the page asked the network stack for, from Chromium's NetLog.

    Requests by the browser itself (its updater, sign-in, network time; initiator 'not an origin') are left
    out: they are not the page's, and the proxy above refuses them.  file: and data: never reach the log.
    """
    text = netlog.read_text(encoding="utf-8", errors="replace").rstrip()
    try:
        log = json.loads(text)
    except json.JSONDecodeError:  # a log cut off at exit: close it
        log = json.loads(text.rstrip(",") + "]}")
    types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    urls = []
    for e in log["events"]:
        if types.get(e["type"]) == "URL_REQUEST_START_JOB":
            p = e.get("params") or {}
            if "url" in p and p.get("initiator") != "not an origin":
                urls.append(p["url"])
    return sorted(set(urls))


@needs_chromium
def test_chromium_sections_replay_and_escaping(run, tmp_path):
    d, ledger, summary = run
    html_path = d / "report.html"
    html_path.write_text(render_html(summary, ledger), encoding="utf-8")
    url = html_path.as_uri() + "?autoplay=1"
    res = chromium(tmp_path, url, "--dump-dom")
    dom = res.stdout
    assert "<body" in dom, res.stderr[-2000:]
    p = parse(dom)
    ids = {a.get("id") for _, a in p.tags}
    for s in SECTIONS:
        assert s in ids, s
    # the replay started and advanced: 5 s of (virtual) time at 1x
    replay = next(a for t, a in p.tags if a.get("id") == "replay")
    assert replay["data-state"] == "playing"
    assert 4.0 <= float(replay["data-clock"]) <= 6.5
    panes = {a["data-arm"]: a for t, a in p.tags if t == "section" and "data-arm" in a}
    assert set(panes) == set(ARMS)
    assert panes["fast"]["data-state"] == "done"       # finished at ~3 s and froze
    assert panes["base"]["data-state"] == "streaming"  # still on its second call
    assert len(PAYLOAD) < int(panes["base"]["data-chars"]) < len(PAYLOAD) + 130
    # the planted markup is text on the page, not elements, and nothing ran
    text = "".join(p.data)
    assert XSS_SCRIPT in text and XSS_IMG in text and MARK_IMG in text
    assert "doc qa <i>x</i>" in text
    names = [t for t, _ in p.tags]
    assert "img" not in names and "iframe" not in names
    assert len([t for t in names if t == "script"]) == 2
    body = next(a for t, a in p.tags if t == "body")
    assert "data-pwned" not in body
    # screenshots: the report's top, and the standalone replay page mid-play
    shot = tmp_path / "report.png"
    chromium(tmp_path, url, f"--screenshot={shot}", budget_ms=3000)
    rp = d / "replay.html"
    rp.write_text(render_replay(ledger, CASE, list(ARMS)), encoding="utf-8")
    shot2 = tmp_path / "replay.png"
    chromium(tmp_path, rp.as_uri() + "?autoplay=1", f"--screenshot={shot2}", budget_ms=5000)
    for s in (shot, shot2):
        assert s.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and s.stat().st_size > 20_000
    keep = os.environ.get("LEVERBENCH_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for s in (shot, shot2):
            (Path(keep) / s.name).write_bytes(s.read_bytes())


@needs_chromium
def test_chromium_page_makes_no_network_request(run, tmp_path):
    d, ledger, summary = run
    pages = {"report.html": render_html(summary, ledger), "replay.html": render_replay(ledger, CASE, list(ARMS))}
    for name, html in pages.items():
        path = d / name
        path.write_text(html, encoding="utf-8")
        log = tmp_path / f"{name}.netlog.json"
        res = chromium(tmp_path, path.as_uri() + "?autoplay=1&speed=5", "--dump-dom", f"--log-net-log={log}")
        assert "<body" in res.stdout
        # at 5x the replay (5.8 s of recording) ended inside the 5 s of virtual time, every pane frozen
        p = parse(res.stdout)
        replay = next(a for t, a in p.tags if a.get("id") == "replay")
        assert replay["data-state"] == "ended"
        assert {a["data-state"] for t, a in p.tags if "data-arm" in a} == {"done"}
        assert log.exists()
        assert page_requests(log) == [], name
    # control: a page that does fetch is caught by the same check (so an empty list above means something)
    bad = d / "control.html"
    bad.write_text('<!doctype html><body><img src="http://127.0.0.1:9/x.png">'
                   "<script>fetch('http://127.0.0.1:9/f').catch(function(){})</script></body>", encoding="utf-8")
    log = tmp_path / "control.netlog.json"
    chromium(tmp_path, bad.as_uri(), "--dump-dom", f"--log-net-log={log}", budget_ms=2000)
    assert "http://127.0.0.1:9/x.png" in page_requests(log)
