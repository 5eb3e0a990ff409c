"""A one-arm experiment file for the tests that need only an endpoint and a short case."""

from __future__ import annotations

from pathlib import Path


def one_arm_experiment(tmp: Path, base_url: str, *, repeats: int = 1, max_tokens: int = 8, experiment: str = "",
                       arm: str = "", case: str = "", tail: str = "") -> Path:
    """``tmp/exp.toml``: arm "sim" (the baseline) at *base_url*, model "sim", no sentinels, case "c"
    (prompt "hi", *max_tokens*, greedy).  *experiment*, *arm* and *case* are TOML lines added to those
    tables; *tail* comes last (``[[load]]`` stages, ``[[cases.steps]]``)."""
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "one-arm"
repeats = {repeats}
baseline = "sim"
sentinel_tokens = 0
{experiment}

[[arms]]
name = "sim"
role = "baseline"
base_url = "{base_url}"
model = "sim"
{arm}

[[cases]]
name = "c"
prompt = "hi"
max_tokens = {max_tokens}
temperature = 0.0
{case}
{tail}''')
    return p
