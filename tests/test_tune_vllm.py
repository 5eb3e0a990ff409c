"""``leverbench tune`` on real vLLM (issue 40): examples/tune-vllm.toml's command template — vLLM's CPU build
(``scripts/install.sh --vllm``) on the bundled model's bf16 checkpoint, ``{vllm_model}`` — over its three knobs
(n-gram drafting K 0 / 3, prefix caching on / off, ``--max-num-seqs`` 4 / 2), shortened for CI: one of its cases, at
most 4 repeats a race.  Three races at least, each two vLLM starts (~30 s each): ~5 min on 2 cores (``.ci/run``
runs it; skipped without vLLM unless LEVERBENCH_REQUIRE_VLLM is set).

Beside the tune's own verdicts, oracles that do not come from them: the arguments each arm's engine ran with are its
configuration's; vLLM's own ``/metrics`` counters in each race's ledger say that each arm ran the configuration it
was named for (accepted draft tokens with K = 3 only, prefix-cache hits with caching on only); and vLLM's own clock
(its end-to-end latency sum over the turns) points the same way as every race decided either way."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable, TypeVar

import pytest
from click.testing import CliRunner
from engine_marks import ENGINE_MARKS

from leverbench.cli import cli
from leverbench.engines.command_template import argv, vllm_model_dir
from leverbench.engines.vllm import distribution, hf_model_dir
from leverbench.knob_values import config_words
from leverbench.ledger.reader import read_ledger

VLLM_MARKS = [
    pytest.mark.vllm,
    pytest.mark.slow,  # ~5 min (issue 39 §8: .ci/run runs it)
    pytest.mark.skipif(distribution() is None and not os.environ.get("LEVERBENCH_REQUIRE_VLLM"),
                       reason="vLLM not installed (scripts/install.sh --vllm)"),
]
F = TypeVar("F", bound=Callable[..., None])
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
OUTCOMES = {"better", "same", "worse", "undecided", "refused"}
NO_DRAFTER = "None"  # spec's value for K = 0: --speculative-config None
CACHE_OFF = "--no-enable-prefix-caching"
CLEAR = 1.15  # a race's ratio this far from 1 (either way) is clear of the turns' noise: vLLM's clock must agree


def marked(marks: list[pytest.MarkDecorator]) -> Callable[[F], F]:
    """A test with each of *marks* (a module's marks, for one test of a module whose tests need different parts)."""
    def wrap(fn: F) -> F:
        for mark in reversed(marks):
            fn = mark(fn)
        return fn
    return wrap


@marked(ENGINE_MARKS)
def test_vllm_model_placeholder_names_the_embedded_vllm_engine_s_checkpoint():
    """``{vllm_model}`` needs no value: the directory the embedded vLLM engine converts the bundled GGUF into
    (command_template names it without importing engines/vllm.py: the two must agree); a value given wins."""
    assert vllm_model_dir() == hf_model_dir()
    template = "{python} -m vllm.entrypoints.openai.api_server --model {vllm_model} --port {port}"
    assert argv(template, {"port": "0"})[4] == str(hf_model_dir())
    assert argv(template, {"port": "0", "vllm_model": "/m"})[4] == "/m"


def _short_copy(tmp_path: Path) -> Path:
    """examples/tune-vllm.toml with its first case only, at most 4 repeats a race, vLLM's cache under *tmp_path*."""
    text = (EXAMPLES / "tune-vllm.toml").read_text()
    short = text.replace("max_repeats = 8", "max_repeats = 4").replace(
        'env = { VLLM_SERVER_DEV_MODE = "1",', f'env = {{ VLLM_CACHE_ROOT = "{tmp_path / "vllm-cache"}", '
        'VLLM_SERVER_DEV_MODE = "1",')
    short = short[:short.index('[[cases]]\nname = "design audit"')]
    assert short.count("[[cases]]") == 1 and "max_repeats = 4" in short and "VLLM_CACHE_ROOT" in short  # (its shape)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "findings.md").write_text((EXAMPLES / "docs" / "findings.md").read_text())
    f = tmp_path / "tune-vllm.toml"
    f.write_text(short)
    return f


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def _check_race(race: dict, knobs: dict[str, list[object]]) -> None:
    """One race's run: each arm's vLLM started, with its configuration's arguments, and its own counters agree."""
    led = read_ledger(Path(race["run_dir"]))
    header = dict(led.header)
    configs = {config_words(c.items()): c for c in (race["incumbent"], race["candidate"])}
    starts = [dict(r) for r in led.of_kind("engine_start")]
    metrics = [dict(r) for r in led.of_kind("metrics")]
    for arm, config in configs.items():
        assert set(config) == set(knobs) and all(config[k] in knobs[k] for k in config)
        mine = [r for r in starts if r["arm"] == arm]
        assert mine and all(r["error"] is None and r["pid"] for r in mine), (arm, mine)
        args = header["arms"][arm]["discovered"]["engine_args"]
        assert args[1:3] == ["-m", "vllm.entrypoints.openai.api_server"] and _flag(args, "--model") == str(
            hf_model_dir())
        assert _flag(args, "--speculative-config") == config["spec"]
        assert _flag(args, "--max-num-seqs") == str(config["seqs"])
        assert config["cache"] in args and ({"--enable-prefix-caching", CACHE_OFF} - {config["cache"]}).isdisjoint(
            args)
        # vLLM's own counters, its last scrape (after the turns): the drafter drafted and was accepted with K = 3
        # only; the prefix cache served hits with caching on only (every turn's second step repeats its first)
        samples = [r for r in metrics if r["arm"] == arm][-1]["samples"]
        accepted = samples.get("vllm:spec_decode_num_accepted_tokens_total", 0.0)
        hits = samples.get("vllm:prefix_cache_hits_total", 0.0)
        assert (accepted > 0) == (config["spec"] != NO_DRAFTER), (arm, accepted)
        assert (hits > 0) == (config["cache"] != CACHE_OFF), (arm, hits)
    # vLLM's own seconds serving the turns (its e2e latency sum between the scrape before them and the last after,
    # the same requests on both arms) against the race's ratio: a race decided either way, or one whose ratio is
    # clear of noise, points the same way as vLLM's own clock
    served = {arm: _served_s([r for r in metrics if r["arm"] == arm]) for arm in configs}
    inc, cand = config_words(race["incumbent"].items()), config_words(race["candidate"].items())
    assert served[inc][1] == served[cand][1] > 0, served  # (as many requests in the window on both)
    ratio = race["ratio"]
    if ratio is not None and (race["outcome"] in ("better", "worse") or abs(math.log(ratio)) > math.log(CLEAR)):
        assert (served[inc][0] / served[cand][0] > 1) == (ratio > 1), (race, served)


def _served_s(scrapes: list[dict]) -> tuple[float, float]:
    """(seconds, requests) vLLM says it served between an arm's first ``before`` scrape and its last scrape."""
    first = next(r["samples"] for r in scrapes if r["when"] == "before")
    last = scrapes[-1]["samples"]
    e2e = "vllm:e2e_request_latency_seconds"
    return last[f"{e2e}_sum"] - first[f"{e2e}_sum"], last[f"{e2e}_count"] - first[f"{e2e}_count"]


@marked(VLLM_MARKS)
def test_a_tune_of_real_vllm_through_its_template(tmp_path):
    """The shortened example through the CLI: exit 0, one point, every race an allowed outcome run on vLLM started
    with its configuration's flags (and vLLM's counters agreeing), and an answer in the space that is the baseline
    or a configuration decided better against it — never a refused race's candidate."""
    f = _short_copy(tmp_path)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["tune", str(f), "--out", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "At 1 request in flight: run " in res.output
    summary = json.loads((out / "tune.json").read_text())
    (point,) = summary["points"]
    knobs, baseline = summary["knobs"], summary["baseline"]
    races = point["path"] + point["final"]
    assert len(point["path"]) >= len(knobs)  # (the first sweep races each knob's other value)
    for race in races:
        assert race["outcome"] in OUTCOMES, race
    for race in {r["run_dir"]: r for r in races}.values():  # (the final check reuses the sweeps' races)
        _check_race(race, knobs)
    rec = point["recommended"]
    assert set(rec) == set(knobs) and all(rec[k] in knobs[k] for k in knobs)
    assert rec == baseline or (point["confirmed"] and point["against_baseline"]["outcome"] == "better")
    assert all(r["candidate"] != rec for r in races if r["outcome"] == "refused")
