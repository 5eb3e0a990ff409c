"""``leverbench tune`` on the real llama.cpp server (issue 40): examples/tune.toml's command template, the
llama.cpp server leverbench bundles on its bundled model, raced once.  Slow: a minute of real engine starts and
turns (``.ci/run`` runs it)."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine_marks import SLOW_ENGINE_MARKS

from leverbench.config.tune import load_tune
from leverbench.ledger.reader import Ledger, read_ledger
from leverbench.tune.run import run_tune

pytestmark = SLOW_ENGINE_MARKS


def _one_race(tmp_path: Path, text: str) -> tuple[dict, dict, Ledger, list[dict]]:
    """Tune *text* (an example's, its documents beside it) to its one race: the point, the race, its ledger and its
    successful calls, each with llama.cpp's own timings."""
    shutil.copytree(Path(__file__).resolve().parents[1] / "examples" / "docs", tmp_path / "docs")
    f = tmp_path / "tune.toml"
    f.write_text(text)
    summary = run_tune(load_tune(f), tmp_path / "out")
    (point,) = summary["points"]
    (race,) = point["path"]
    led = read_ledger(Path(race["run_dir"]))
    calls = [r for r in led.records if r.get("kind") == "call" and r.get("error") is None]
    assert calls and all(isinstance(r.get("timings"), dict) for r in calls)  # llama.cpp's own timings
    return dict(point), dict(race), led, calls


def test_a_tune_of_the_real_llama_cpp_server_through_its_template(tmp_path):
    """examples/tune.toml's template (the bundled llama.cpp server on its bundled model), its drafter alone, on one
    of its turns: one race, a ledger whose calls the real server answered (its own timings), and an answer that
    is the baseline or a drafter decided better against it — never a refused or undecided one."""
    examples = Path(__file__).resolve().parents[1] / "examples"
    text = (examples / "tune.toml").read_text()
    text = text.replace('knobs = { spec = ["none", "ngram-simple"], k = [3, 7], slots = [1, 2], cache = '
                        '["--cache-prompt", "--no-cache-prompt"] }', 'knobs = { spec = ["none", "ngram-simple"] }')
    text = text.replace('baseline = { spec = "none", k = 3, slots = 1, cache = "--cache-prompt" }\nconcurrency = [1, 2]'
                        '\nexclude = [{ spec = "none", k = 7 }]', 'baseline = { spec = "none" }')
    text = text.replace("max_repeats = 6", "max_repeats = 4").replace(
        'startup_timeout_s = 120.0 }',
        'startup_timeout_s = 120.0, values = { k = 3, slots = 1, cache = "--cache-prompt" } }')
    assert 'knobs = { spec = ["none", "ngram-simple"] }' in text and "k = 3," in text  # (the example's shape held)
    point, race, led, calls = _one_race(tmp_path, text)
    assert point["recommended"] == ({"spec": "ngram-simple"} if race["outcome"] == "better" else {"spec": "none"})


def test_a_tune_of_the_embedded_llama_cpp_server_with_knobs_named_by_lever(tmp_path):
    """examples/tune-levers.toml (the embedded engine, its knobs named by lever), its drafter alone: one race whose
    arms the embedded llama.cpp server ran with the flags the drafter lever sets (its ledger's discovered
    arguments), and a launch line that is the experiment file's engine line for the answer."""
    examples = Path(__file__).resolve().parents[1] / "examples"
    text = (examples / "tune-levers.toml").read_text()
    old = ('knobs = { drafter = ["none", "ngram-simple"], draft_tokens = [3, 7], slots = [1, 2], prefix_cache = '
           '[true, false] }\nbaseline = { drafter = "none", draft_tokens = 3, slots = 1, prefix_cache = true }\n'
           'concurrency = [1, 2]\nexclude = [{ drafter = "none", draft_tokens = 7 }]')
    assert old in text  # (the example's shape held)
    text = text.replace(old, 'knobs = { drafter = ["none", "ngram-simple"], draft_tokens = [3] }').replace(
        "max_repeats = 6", "max_repeats = 4")
    point, race, led, calls = _one_race(tmp_path, text)
    args = {name: arm["discovered"]["engine_args"] for name, arm in led.header["arms"].items()}
    assert args == {"drafter=none draft_tokens=3": [],
                    "drafter=ngram-simple draft_tokens=3": ["--spec-type", "ngram-simple", "--spec-draft-n-max", "3"]}
    drafted = [r for r in calls if r["arm"].startswith("drafter=ngram-simple")]
    assert drafted and any((r["timings"].get("draft_n") or 0) > 0 for r in drafted)  # the drafter drafted
    better = race["outcome"] == "better"
    assert point["recommended"] == {"drafter": "ngram-simple" if better else "none", "draft_tokens": 3}
    served = '"--spec-type", "ngram-simple", "--spec-draft-n-max", "3"' if better else ""
    assert point["command"] == f'engine = {{ kind = "embedded", args = [{served}], ctx_size = 4096 }}'
