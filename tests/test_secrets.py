"""Secrets stay out: a planted API key appears in no output file, log or message."""

from __future__ import annotations

import os
import subprocess
import sys

from test_run_sim import experiment

from leverbench.engines.simulator import SimConfig, SimulatorThread

KEY = "sk-planted-5f0c2e9d-never-print-me"


def test_api_key_never_written(tmp_path):
    with SimulatorThread(SimConfig(prefill_tps=100_000.0, decode_tps=500.0, output_tokens=8)) as sim:
        exp = experiment(tmp_path, {"nocache": sim.base_url, "gone": "http://127.0.0.1:9/v1"}, repeats=2)
        text = exp.read_text().replace('model = "sim"', 'model = "sim"\napi_key_env = "LB_PLANTED_KEY"')
        exp.write_text(text)
        env = {**os.environ, "LB_PLANTED_KEY": KEY}
        out = tmp_path / "run"
        res = subprocess.run([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(out)],
                             env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        rep = subprocess.run([sys.executable, "-m", "leverbench.cli", "report", str(out), "--format", "md"],
                             env=env, capture_output=True, text=True, timeout=60)
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
                              capture_output=True, timeout=120).returncode == 0
        ledger = (out / "ledger.jsonl").read_text()
        doc_words = (tmp_path / "doc.txt").read_text().split()[:5]
        assert " ".join(doc_words) not in ledger and "output_text" not in ledger and "input_sha256" in ledger
        exp.write_text(exp.read_text().replace("sentinel_tokens = 16", "sentinel_tokens = 16\nstore_text = true"))
        out2 = tmp_path / "run2"
        assert subprocess.run([sys.executable, "-m", "leverbench.cli", "run", str(exp), "--out", str(out2)],
                              capture_output=True, timeout=120).returncode == 0
        stored = (out2 / "ledger.jsonl").read_text()
        assert " ".join(doc_words) in stored and '"output_text"' in stored and '"chunk_text"' in stored
