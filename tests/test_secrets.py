"""Secrets stay out: a planted API key appears in no output file, log or message."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import limits
import pytest
from aiohttp import web
from one_arm import one_arm_experiment
from test_run_sim import experiment
from test_stream_faults import serve

from leverbench.config import Arm, load
from leverbench.engines.simulator import SimConfig, SimulatorThread
from leverbench.errors import ConfigError
from leverbench.redact import redact_text, redact_url
from leverbench.runner.run import ArmEndpoint, Runner

KEY = "sk-planted-5f0c2e9d-never-print-me"


def test_api_key_never_written(tmp_path):
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=500.0, output_tokens=8)) as sim:
        exp = experiment(tmp_path, {"nocache": sim.base_url, "gone": "http://127.0.0.1:9/v1"}, repeats=2)
        text = exp.read_text().replace('model = "sim"', 'model = "sim"\napi_key_env = "LB_PLANTED_KEY"')
        exp.write_text(text)
        env = {**os.environ, "LB_PLANTED_KEY": KEY}
        out = tmp_path / "run"
        res = subprocess.run([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(out)],
                             env=env, capture_output=True, text=True, timeout=limits.SMALL_RUN_S)
        assert res.returncode == 0, res.stderr
        rep = subprocess.run([sys.executable, "-m", "leverbench.cli", "report", str(out), "--format", "md"],
                             env=env, capture_output=True, text=True, timeout=limits.SMALL_COMMAND_S)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"ledger.jsonl", "summary.json", "report.md"}
    for p in files:
        assert KEY not in p.read_text(errors="replace"), p
    for stream in (res.stdout, res.stderr, rep.stdout, rep.stderr):
        assert KEY not in stream
    # the failing arm's errors were recorded (so error messages were written and checked above)
    assert '"class":"connect"' in (out / "ledger.jsonl").read_text()


def test_texts_are_hashed_unless_store_text(tmp_path):
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=500.0, output_tokens=8)) as sim:
        exp = experiment(tmp_path, {"nocache": sim.base_url}, repeats=1, probes=False)
        out = tmp_path / "run"
        assert subprocess.run([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(out)],
                              capture_output=True, timeout=limits.SMALL_RUN_S).returncode == 0
        ledger = (out / "ledger.jsonl").read_text()
        doc_words = (tmp_path / "doc.txt").read_text().split()[:5]
        assert " ".join(doc_words) not in ledger and "output_text" not in ledger and "input_sha256" in ledger
        exp.write_text(exp.read_text().replace("sentinel_tokens = 16", "sentinel_tokens = 16\nstore_text = true"))
        out2 = tmp_path / "run2"
        assert subprocess.run([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(out2)],
                              capture_output=True, timeout=limits.SMALL_RUN_S).returncode == 0
        stored = (out2 / "ledger.jsonl").read_text()
        assert " ".join(doc_words) in stored and '"output_text"' in stored and '"chunk_text"' in stored


# ------------------------------------------------------------------ the key goes to the arm's own origin only


def _metrics_recorder(seen: list) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(text='vllm:prefix_cache_hits_total{model_name="sim"} 1\n', content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


def test_key_is_not_sent_to_a_metrics_url_on_another_origin(tmp_path, monkeypatch):
    monkeypatch.setenv("LB_PLANTED_KEY", KEY)
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=2000.0, output_tokens=8)) as sim:

        def scrapes_seen(extra: str, out: str) -> list:
            seen: list = []
            with serve(_metrics_recorder(seen)) as murl:  # another port: another origin
                arm = f'api_key_env = "LB_PLANTED_KEY"\nmetrics_url = "{murl}/metrics"\n{extra}'
                Runner(load(one_arm_experiment(tmp_path, sim.base_url, arm=arm)), tmp_path / out).run()
            return seen

        # every request to it (the before and after scrapes, and any discovery) without the key ...
        seen = scrapes_seen("", "run")
        assert len(seen) >= 2 and set(seen) == {None}, seen
        # ... unless the arm says so
        seen = scrapes_seen("metrics_send_key = true", "run-send")
        assert len(seen) >= 2 and set(seen) == {f"Bearer {KEY}"}, seen


def test_headers_for_follows_the_origin():
    arm = Arm(name="a", base_url="http://h:8000/v1", model="m", api_key_env="K", metrics_url="http://m:9100/metrics")
    ep = ArmEndpoint(arm, "http://h:8000/v1", "m", {"Authorization": "Bearer x"})
    assert ep.headers_for("http://h:8000/metrics") == {"Authorization": "Bearer x"}
    assert ep.headers_for("http://H:8000/props") == {"Authorization": "Bearer x"}
    assert ep.headers_for("http://m:9100/metrics") == {}
    assert ep.headers_for("https://h:8000/metrics") == {} and ep.headers_for("http://h:8001/metrics") == {}
    sending = ArmEndpoint(arm.model_copy(update={"metrics_send_key": True}), "http://h:8000/v1", "m", ep.headers)
    assert sending.headers_for("http://m:9100/metrics") == ep.headers
    assert sending.headers_for("http://m:9100/other") == {}


@pytest.mark.parametrize("extra, key, says", [
    ('metrics_send_key = true', "arms[0]", "metrics_send_key sends the api_key_env key to metrics_url"),
    ('api_key_env = "K"', "arms[0]", "base_url carries credentials"),
])
def test_key_settings_are_checked(tmp_path, extra, key, says):
    p = one_arm_experiment(tmp_path, "http://u:p@127.0.0.1:1/v1", arm=extra)
    with pytest.raises(ConfigError) as err:
        load(p)
    assert err.value.key == key and says in str(err.value)


# ------------------------------------------------------------------ credentials in base_url are never written

PASSWORD = "pw-planted-7d1e-never-print-me"
QUERY_KEY = "qk-planted-93ab-never-print-me"


def test_url_credentials_never_written(tmp_path):
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=500.0, output_tokens=8)) as sim:
        host = sim.base_url.split("://", 1)[1]
        creds = f"user:{PASSWORD}@"
        exp = experiment(tmp_path, {"nocache": sim.base_url,
                                    "creds": f"http://{creds}{host}/v1?api_key={QUERY_KEY}",
                                    "gone": f"http://{creds}127.0.0.1:9/v1?api_key={QUERY_KEY}&key={QUERY_KEY}"},
                         repeats=1, probes=False)
        out = tmp_path / "run"
        res = subprocess.run([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(out)],
                             capture_output=True, text=True, timeout=limits.SMALL_RUN_S)
        assert res.returncode == 0, res.stderr
        rep = subprocess.run([sys.executable, "-m", "leverbench.cli", "report", str(out), "--format", "md"],
                             capture_output=True, text=True, timeout=limits.SMALL_COMMAND_S)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"ledger.jsonl", "summary.json", "report.md", "report.html"}
    for p in files:
        text = p.read_text(errors="replace")
        assert PASSWORD not in text and QUERY_KEY not in text, p
    for stream in (res.stdout, res.stderr, rep.stdout, rep.stderr):
        assert PASSWORD not in stream and QUERY_KEY not in stream
    ledger = (out / "ledger.jsonl").read_text()
    header = json.loads(ledger.splitlines()[0])
    assert header["config"]["arms"][2]["base_url"] == "http://***@127.0.0.1:9/v1?api_key=***&key=***"
    assert header["arms"]["gone"]["endpoint"].startswith("http://***@127.0.0.1:9")
    # the failing arm's errors name its URL, redacted
    gone = [json.loads(x) for x in ledger.splitlines() if '"arm":"gone"' in x and '"error":{' in x]
    assert gone and all("http://***@127.0.0.1:9" in r["error"]["message"] for r in gone if r["kind"] == "call")


@pytest.mark.parametrize("url, shown", [
    ("http://h:8000/v1", "http://h:8000/v1"),
    ("http://user:pass@h:8000/v1", "http://***@h:8000/v1"),
    ("https://tok@h/v1", "https://***@h/v1"),
    ("https://h/v1?api_key=k&sig=s&flag", "https://h/v1?api_key=***&sig=***&***"),
    ("https://h/openai?api-version=2024-02-01&key=k#frag", "https://h/openai?api-version=2024-02-01&key=***#***"),
    ("http://[::1", "***"),
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown


def test_redact_text_finds_urls_and_echoed_queries():
    msg = "cannot connect to http://u:p@h:9/v1?token=t1, then 404 for /v1/x?key=k2&api-version=3 (x=1)"
    assert redact_text(msg) == ("cannot connect to http://***@h:9/v1?token=***, then 404 for "
                                "/v1/x?key=***&api-version=3 (x=1)")


def test_a_key_the_server_echoes_is_never_written(tmp_path):
    """A 401 body that quotes the Authorization header (some gateways do) carries the key into the error
    message: the ledger writer writes it as ***."""
    async def chat(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": f"bad token: {request.headers.get('Authorization')}"}},
                                 status=401)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    with serve(app) as url:
        exp = one_arm_experiment(tmp_path, url + "/v1", arm='api_key_env = "LB_PLANTED_KEY"')
        env = {**os.environ, "LB_PLANTED_KEY": KEY}
        res = subprocess.run([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(tmp_path / "run")],
                             env=env, capture_output=True, text=True, timeout=limits.SMALL_RUN_S)
    ledger = (tmp_path / "run" / "ledger.jsonl").read_text()
    assert "bad token: Bearer ***" in ledger  # the error is recorded, the key is not
    for text in (ledger, res.stdout, res.stderr, *(p.read_text() for p in (tmp_path / "run").glob("report.*"))):
        assert KEY not in text
