"""GPU facts and readings: NVML through its binding's seam (a fake of ``pynvml``, tests/fakes/fake_nvml.py), a
DCGM exporter's page (tests/data/dcgm/), the sampler's thread, and the analysis that aligns readings with each
call's prefill and decode and turns them into energy per turn, checked by hand on made-up series."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from fakes import fake_gpu, fake_nvml
from ledgers import call, header, ledger, turn, warned

from leverbench.analysis.hardware.telemetry import (
    call_spans,
    energy_rows,
    holding,
    series,
    telemetry_rows,
)
from leverbench.analysis.summary import summarize
from leverbench.gpu import dcgm
from leverbench.gpu.nvml import INSTALL_HINT, NVML_MODULE_ENV, Nvml, binding
from leverbench.gpu.readings import Reading, classify
from leverbench.gpu.sampler import Sampler

DATA = Path(__file__).parent / "data" / "dcgm"


@pytest.fixture
def nvml(monkeypatch):
    """NVML opened through leverbench's seam on the fake binding (one fake H200)."""
    monkeypatch.setenv(NVML_MODULE_ENV, "fakes.fake_nvml")
    fake_gpu.reset()
    monkeypatch.setattr(fake_nvml, "UNSUPPORTED", set())
    got, why = Nvml.open()
    assert got is not None, why
    yield got
    got.close()
    fake_gpu.reset()


# ---------------------------------------------------------------- NVML


def test_discovery_reads_each_fact_in_its_unit(nvml):
    f = nvml.facts()
    assert f == {"source": "nvml", "count": 1, "name": "NVIDIA H200", "memory_mib": 141 * 1024,
                 "power_limit_w": 700.0, "sm_clock_max_mhz": 1980, "mem_clock_max_mhz": 3201, "mig": "disabled",
                 "driver": "570.124.06", "cuda": "12.8", "devices": ["0"]}
    assert fake_nvml.initialised == 1


def test_a_reading_in_its_units_and_an_unsupported_call_asked_once(nvml, monkeypatch):
    fake_gpu.script(lambda t: (37.0, 81.0, 412.5))
    monkeypatch.setattr(fake_nvml, "UNSUPPORTED", {"nvmlDeviceGetTotalEnergyConsumption"})
    fake_nvml.calls.clear()
    r1, r2 = nvml.read(0), nvml.read(0)
    assert (r1.sm, r1.dram, r1.power_w, r1.energy_j) == (0.37, 0.81, 412.5, None)
    assert r1.mem_used_mib == pytest.approx(600.0) and r1.sm_clock_mhz > 345
    assert fake_nvml.calls.count("nvmlDeviceGetTotalEnergyConsumption") == 1  # not asked again on that device
    assert r2.sm == 0.37 and r1.t <= r2.t <= time.time()
    assert (classify(r1), classify(Reading(0.0, sm=0.95, dram=0.3)), classify(Reading(0.0, sm=0.1, dram=0.1)),
            classify(Reading(0.0))) == ("dram", "sm", "idle", "unknown")


def test_a_transient_nvml_error_costs_one_reading_not_the_field(nvml, monkeypatch):
    """Only "not supported" and "function not found" mean a device lacks a field; a timeout or an unknown error
    loses that one reading."""
    fake_gpu.script(lambda t: (37.0, 81.0, 412.5))
    monkeypatch.setattr(fake_nvml, "FAIL_ONCE", {"nvmlDeviceGetPowerUsage": fake_nvml.NVML_ERROR_TIMEOUT,
                                                 "nvmlDeviceGetUtilizationRates": fake_nvml.NVML_ERROR_UNKNOWN})
    r1, r2 = nvml.read(0), nvml.read(0)
    assert (r1.power_w, r1.sm) == (None, None) and (r2.power_w, r2.sm) == (412.5, 0.37)
    monkeypatch.setattr(fake_nvml, "FAIL_ONCE", {"nvmlDeviceGetTotalEnergyConsumption":
                                                 fake_nvml.NVML_ERROR_FUNCTION_NOT_FOUND})
    fake_nvml.calls.clear()
    assert nvml.read(0).energy_j is None and nvml.read(0).energy_j is None
    assert fake_nvml.calls.count("nvmlDeviceGetTotalEnergyConsumption") == 1  # not asked again


def test_without_the_binding_the_facts_are_unknown_and_say_why(monkeypatch):
    monkeypatch.setenv(NVML_MODULE_ENV, "pynvml")
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # not installed
    assert binding() == (None, INSTALL_HINT)
    got, why = Nvml.open()
    assert got is None and "nvidia-ml-py is not installed" in why and "leverbench[gpu]" in why


def test_a_driver_that_does_not_start_is_said(monkeypatch):
    monkeypatch.setenv(NVML_MODULE_ENV, "fakes.fake_nvml")
    monkeypatch.setattr(fake_nvml, "UNSUPPORTED", {"nvmlInit"})
    got, why = Nvml.open()
    assert got is None and why.startswith("NVML did not start")


# ---------------------------------------------------------------- the sampler


def test_the_sampler_reads_on_its_own_thread_at_its_rate_and_drains_in_order():
    seen: list[str] = []

    def read():
        seen.append(threading.current_thread().name)
        if len(seen) == 3:
            raise RuntimeError("a reading failed")
        return [("0", Reading(time.time(), sm=0.5))]

    with Sampler(read, hz=20.0) as s:
        time.sleep(1.0)
        first = s.drain()["0"]
        time.sleep(0.3)
    rest = s.drain()["0"]
    assert set(seen) == {"gpu-sampler"} and s.errors == 1 and s.first_error == "RuntimeError: a reading failed"
    t = [r.t for r in first + rest]
    assert t == sorted(t) and s.drain() == {}
    # a busy machine may skip ticks (never bunch them): at least a few, never faster than the rate
    assert len(first) >= 5 and min(np.diff(t)) > 0.5 / 20.0
    with pytest.raises(ValueError, match="> 0 Hz"):
        Sampler(read, hz=0)


# ---------------------------------------------------------------- DCGM


def test_a_dcgm_page_with_profiling_fields():
    page = dcgm.parse((DATA / "h100x2-dcp.metrics").read_text())
    assert page.facts() == {"source": "dcgm", "count": 2, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81159,
                            "driver": "550.90.07", "devices": ["gpu-node-7:0", "gpu-node-7:1"]}
    assert page.fields() == {"sm": "DCGM_FI_PROF_SM_ACTIVE", "dram": "DCGM_FI_PROF_DRAM_ACTIVE"}
    (k0, r0), (k1, r1) = page.readings(5.0)
    assert (k0, r0.t, r0.sm, r0.dram, r0.power_w, r0.sm_clock_mhz, r0.mem_used_mib) == \
        ("gpu-node-7:0", 5.0, 0.934512, 0.2144, 612.345, 1980.0, 73231.0)
    assert r0.energy_j == pytest.approx(98765432.1)  # the counter's mJ, as J
    assert (classify(r0), classify(r1)) == ("sm", "dram")  # the page's GPU 0 in prefill, GPU 1 in decode


def test_a_default_dcgm_page_falls_back_and_sums_a_mig_gpus_instances():
    page = dcgm.parse((DATA / "a100-mig-default.metrics").read_text())
    assert page.facts() == {"source": "dcgm", "count": 1, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 78000,
                            "mig": "enabled", "devices": ["a100-host:0"]}
    assert page.fields() == {"sm": "DCGM_FI_DEV_GPU_UTIL / 100", "dram": "DCGM_FI_DEV_MEM_COPY_UTIL / 100"}
    [(_, r)] = page.readings(1.0)
    assert (r.sm, r.dram, r.mem_used_mib, r.energy_j) == (0.4, 0.2, 28000.0, None)


def test_a_gpu_shared_by_pods_is_counted_once():
    """The exporter's Kubernetes mapping repeats a GPU's series for each pod using it (time slicing): one GPU,
    its duplicates averaged, never summed (summed, an H200 used 240,000 MiB of its 143,771)."""
    page = dcgm.parse((DATA / "h200x2-k8s-shared.metrics").read_text())
    assert page.facts() == {"source": "dcgm", "count": 2, "name": "NVIDIA H200", "memory_mib": 143771,
                            "driver": "570.124.06", "devices": ["h200-node-3:0", "h200-node-3:1"]}
    (k0, r0), (_, r1) = page.readings(1.0)
    assert (k0, r0.mem_used_mib, r0.sm, r0.dram, r0.power_w) == ("h200-node-3:0", 120000.0, 1.0, 0.71, 534.21)
    assert r0.energy_j == pytest.approx(123456789.0) and r1.mem_used_mib == 40000.0


def test_a_dcgm_page_is_read_once_a_second_and_nvml_at_its_rate(nvml, monkeypatch):
    """Parsing an exporter's page holds the interpreter (about 25 ms for an 8-GPU node), and the exporter
    refreshes it every 30 s by default: its sampler reads once a second, NVML's at the run's rate."""
    from leverbench.runner import telemetry  # noqa: PLC0415

    monkeypatch.setattr(telemetry, "fetch_page", lambda url, headers: None)
    tel = telemetry.Telemetry(hz=10.0, nvml=nvml, pages={"http://x:9400/metrics": ({}, ["b"], {})})
    tel.start({"a": ("0",)})
    tel.stop()
    assert {s.kind: s.sampler.period for s in tel.sources} == {"nvml": 0.1, "dcgm": 1.0}


def test_a_page_that_is_no_dcgm_page():
    assert dcgm.parse("vllm:num_requests_running 1\n") is None
    assert dcgm.parse("not { prometheus") is None


# ---------------------------------------------------------------- phases, by hand


def _gpu_record(t, sm, dram, power, energy=None, arms=("a",)):
    n = len(t)
    return {"kind": "gpu", "source": "nvml", "device": "0", "arms": list(arms), "fields": {}, "t": list(t),
            "sm": list(sm), "dram": list(dram), "mem_used_mib": [1000.0] * n, "power_w": list(power),
            "sm_clock_mhz": [1500.0] * n, "energy_j": list(energy) if energy is not None else [None] * n}


T = [round(0.1 * i, 10) for i in range(1, 21)]  # readings at 0.1 … 2.0 s, each covering the 0.1 s before it
IN_PREFILL = [0.4, 0.5, 0.6, 0.7]  # their middles 0.35 … 0.65 lie in [0.30, 0.70)


def _made_up():
    sm = [0.9 if t in IN_PREFILL else 0.3 for t in T]
    dram = [0.2 if t in IN_PREFILL else 0.8 for t in T]
    power = [600.0 if t in IN_PREFILL else 400.0 for t in T]
    return series([_gpu_record(T, sm, dram, power)])


def _call(arm, s, ttft, lat, kind="call", **kw):
    return {"kind": kind, "arm": arm, "t_send": s - 0.01, "connect_s": 0.01, "ttft_s": ttft, "latency_s": lat,
            "error": None, **kw}


def test_readings_placed_at_their_intervals_middles_fall_in_each_calls_phase():
    """One call sent at 0.30 s: prefill [0.30, 0.70), decode [0.70, 1.50].  The readings whose middles fall in
    prefill are those at 0.4-0.7 s (sm 0.9, dram 0.2, 600 W); in decode, 0.8-1.5 s (sm 0.3, dram 0.8, 400 W)."""
    [row] = telemetry_rows(_made_up(), call_spans([_call("a", 0.30, 0.40, 1.20)]), ["a"])
    assert row["scope"] == "turns" and row["samples"] == 12 and row["period_s"] == pytest.approx(0.1)
    assert row["prefill"] == {"samples": 4, "sm": pytest.approx(0.9), "dram": pytest.approx(0.2),
                              "power_w": pytest.approx(600.0), "mem_used_mib": 1000.0, "sm_clock_mhz": 1500.0}
    assert (row["decode"]["samples"], row["decode"]["sm"], row["decode"]["dram"], row["decode"]["power_w"]) == \
        (8, pytest.approx(0.3), pytest.approx(0.8), pytest.approx(400.0))
    assert row["overlap"]["samples"] == row["idle"]["samples"] == 0
    assert row["overlap_share"] == row["concurrent_share"] == 0.0 and row["short_prefill_share"] == 0.0
    assert row["note"] is None


def test_concurrent_calls_overlap_and_the_note_says_so():
    """A second call sent at 1.00 s (prefill [1.00, 1.20), decode [1.20, 1.80]) runs during the first's decode:
    the readings at 1.1 and 1.2 s (middles 1.05, 1.15) see prefill and decode at once (overlap, in neither);
    those at 1.3-1.5 s see two decodes (decode, concurrent); 15 readings fall within calls."""
    spans = call_spans([_call("a", 0.30, 0.40, 1.20), _call("a", 1.00, 0.20, 0.80)])
    [row] = telemetry_rows(_made_up(), spans, ["a"])
    assert (row["prefill"]["samples"], row["decode"]["samples"], row["overlap"]["samples"]) == (4, 9, 2)
    assert row["overlap_share"] == pytest.approx(2 / 15) and row["concurrent_share"] == pytest.approx(5 / 15)
    assert "phases overlap" in row["note"]
    assert list(holding(np.array([[0.0, 1.0], [0.5, 2.0]]), np.array([0.25, 0.75, 1.5, 3.0]))) == [1, 2, 1, 0]


def test_scopes_arms_and_what_cannot_be_resolved():
    """A load stage is its own scope; a call of another arm, a warm-up and a failed call are no one's; a prefill
    shorter than the sample period holds no reading, and the note says it is not resolved."""
    calls = [_call("a", 0.30, 0.40, 1.20), _call("a", 1.61, 0.03, 0.3, kind="load", stage="c4"),
             _call("a", 0.1, 0.1, 0.2, kind="warmup"), {**_call("a", 0.1, 0.1, 0.2), "error": {"class": "x"}},
             _call("b", 0.30, 0.40, 1.20)]
    rows = telemetry_rows(_made_up(), call_spans(calls), ["a", "b"])
    assert [(r["arm"], r["scope"]) for r in rows] == [("a", "turns"), ("a", "load:c4")]  # b's GPU: none read
    load = rows[1]
    assert load["prefill"]["samples"] == 0 and load["short_prefill_share"] == 1.0 and "not resolved" in load["note"]


def _driver_series(window_s, truth, step=0.05, until=100.0, offset=0.0731):
    """What NVML reads at *step* intervals when its driver samples every *window_s* and returns its last complete
    sample, the average of *truth* (t → (sm, dram)) over the period before it."""
    t = np.round(np.arange(step, until, step), 4)

    def sample(x):
        end = math.floor((x - offset) / window_s) * window_s + offset
        xs = np.linspace(end - window_s, end, 120, endpoint=False)
        return np.round(np.mean([truth(y) for y in xs], axis=0), 2)  # NVML counts in whole percents

    vals = np.array([sample(x) for x in t])
    return series([_gpu_record(t, vals[:, 0], vals[:, 1], [300.0] * len(t))])


def _cycle(x):
    """Every 5 s: idle, a prefill [1.0, 1.4) (SMs 100 %, memory 30 %), a decode [1.4, 3.4] (60 %, 90 %), idle."""
    k = x % 5.0
    return (1.0, 0.3) if 1.0 <= k < 1.4 else (0.6, 0.9) if 1.4 <= k <= 3.4 else (0.0, 0.0)


@pytest.mark.parametrize("window_s", [1 / 6, 1.0])
def test_each_reading_covers_nvmls_window_before_it_was_first_read(window_s):
    """A reading shows the driver's last sample: the window of its refresh period W (measured where the readings
    change) before the reading that first showed it.  Counted in a phase only where that window lies wholly in
    it, the phases' means are the truth's (placed over the sampler's own 50 ms interval, they mixed the
    phases: prefill read 78 % SMs and 24 % memory at W = 1/6 s); a prefill shorter than W is not resolved."""
    spans = [("a", "turns", 5.0 * i + 1.0, 0.4, 2.4) for i in range(20)]
    [row] = telemetry_rows(_driver_series(window_s, _cycle), spans, ["a"])
    assert row["resolution_s"] == pytest.approx(window_s, rel=0.1) and row["period_s"] == pytest.approx(0.05)
    assert (row["decode"]["sm"], row["decode"]["dram"]) == (pytest.approx(0.6, abs=0.01), pytest.approx(0.9, abs=0.01))
    if window_s < 0.4:
        assert (row["prefill"]["sm"], row["prefill"]["dram"]) == (pytest.approx(1.0, abs=0.01),
                                                                  pytest.approx(0.3, abs=0.01))
    else:
        assert row["prefill"]["samples"] == 0 and "prefill is not resolved" in row["note"]
        assert "refreshed its values every 1 s" in row["note"]


def test_a_steady_signal_is_no_slow_source():
    """Readings that change only when the work does (long steady decodes) say nothing of a slow refresh: the
    refresh period is measured where they change (the median interval between changes, 2.5 s here, said the
    source refreshed every 2.5 s)."""
    def steady(x):
        return (0.6, 0.9) if x % 10.0 < 5.0 else (0.0, 0.0)

    spans = [("a", "turns", 10.0 * i, 0.01, 5.0) for i in range(6)]
    [row] = telemetry_rows(_driver_series(1 / 6, steady, step=0.1, until=60.0), spans, ["a"])
    assert row["resolution_s"] == pytest.approx(1 / 6, rel=0.25) and row["note"] is not None
    assert "refreshed" not in row["note"] and row["decode"]["dram"] == pytest.approx(0.9)


def test_energy_per_turn_from_the_counter_else_from_power():
    """A counter rising 100 J/s: a turn whose model time is 1.2 s took 120 J, 0.0333 kWh per 1,000 turns; its turn
    time 1.5 s on one GPU is 0.4167 GPU-hours per 1,000.  Without the counter, 300 W for 1.2 s: 360 J."""
    counted = series([_gpu_record(T, [0.5] * 20, [0.5] * 20, [300.0] * 20, energy=[100.0 * t for t in T])])
    [row] = energy_rows(counted, [("a", 0.30, 1.2, 1.5), ("a", 0.4, 1.2, 1.5), ("b", 0.3, 1.0, 1.0)], ["a"])
    assert row == {"arm": "a", "turns": 2, "unmeasured": 0, "note": None, "gpus": 1, "j_per_turn": pytest.approx(120.0),
                   "kwh_per_1000_turns": pytest.approx(120.0 * 1000 / 3.6e6),
                   "gpu_hours_per_1000_turns": pytest.approx(1.5 * 1000 / 3600), "source": "energy counter"}
    powered = series([_gpu_record(T, [0.5] * 20, [0.5] * 20, [300.0] * 20)])
    [row] = energy_rows(powered, [("a", 0.35, 1.2, 1.5)], ["a"])
    assert row["j_per_turn"] == pytest.approx(360.0) and row["source"] == "power readings"
    [row] = energy_rows(powered, [("a", 1.9, 1.2, 1.5)], ["a"])  # past the readings: not measured
    assert row["turns"] == 0 and row["j_per_turn"] is None and row["unmeasured"] == 1


def test_a_turn_across_a_gap_in_the_readings_is_not_measured():
    """Readings every 0.1 s, then none for 10 s (a sampler that stalled), then again: a turn inside the gap, or
    whose end falls in it, has no energy (it would be interpolated over 10 s); a gap inside a turn whose ends
    the counter brackets closely costs nothing (the counter counted through it), but power readings cannot
    integrate across it."""
    t = [round(x, 4) for x in [*np.arange(0.0, 1.01, 0.1), *np.arange(11.0, 12.01, 0.1)]]
    energy = [100.0 * x if x <= 1.0 else 100.0 + 600.0 * 10 + 100.0 * (x - 11.0) for x in t]
    counted = series([_gpu_record(t, [0.5] * len(t), [0.5] * len(t), [100.0] * len(t), energy=energy)])
    turns = [("a", 5.0, 1.0, 1.0), ("a", 0.5, 1.0, 1.0), ("a", 0.25, 11.5, 11.5), ("a", 0.2, 0.5, 0.5)]
    [row] = energy_rows(counted, turns, ["a"])
    assert (row["turns"], row["unmeasured"]) == (2, 2) and row["source"] == "energy counter"
    assert "a gap of 10 s in the readings" in row["note"] and "3 sample periods" in row["note"]
    assert row["j_per_turn"] == pytest.approx((50.0 + 6150.0) / 2)  # the 0.5 s turn, and 11.5 s through the gap
    powered = series([_gpu_record(t, [0.5] * len(t), [0.5] * len(t), [100.0] * len(t))])
    [row] = energy_rows(powered, turns, ["a"])
    assert (row["turns"], row["unmeasured"], row["j_per_turn"]) == (1, 3, pytest.approx(50.0))


def test_the_summary_holds_the_gpu_section_and_warns_of_unknown_hardware():
    head = header({"a": {}, "b": {}}, ["c"])
    head["arms"]["a"]["discovered"] = {"gpu": {"source": "nvml", "name": "NVIDIA H200", "count": 1}}
    head["arms"]["b"]["discovered"] = {"gpu": {"unknown": "no DCGM exporter page at http://x:9400/metrics"}}
    recs = []
    for r in range(3):
        for a in ("a", "b"):
            c = call(a, "c", r, latency=1.2, ttft=0.4, out=10)
            c["t_send"] = 0.3 + 3 * r
            recs += turn(a, "c", r, 1.5, 10, calls=[c])
            recs[-1]["t_start"], recs[-1]["model_s"] = 0.3 + 3 * r, 1.2
    t = [round(0.1 * i, 10) for i in range(1, 100)]
    recs.append(_gpu_record(t, [0.5] * len(t), [0.5] * len(t), [300.0] * len(t), energy=[100.0 * x for x in t]))
    s = summarize(ledger(head, recs))
    assert [r["arm"] for r in s["gpu"]["telemetry"]] == ["a"] and s["gpu"]["energy"][0]["j_per_turn"] == \
        pytest.approx(120.0)
    assert [a["known"] for a in s["gpu"]["arms"]] == [True, False]
    assert warned(s, "gpu_unknown", "b") and not warned(s, "gpu_unknown", "a")
    assert not any(k.startswith("fact:gpu") for a in s["arms"] for k in a["knobs"])  # why, or whence: no knob
    assert math.isclose(s["gpu"]["energy"][0]["kwh_per_1000_turns"], 120.0 / 3600)


# ---------------------------------------------------------------- an endpoint's GPUs, from its DCGM exporter


def test_an_endpoints_gpus_come_from_its_dcgm_exporter(tmp_path, monkeypatch):
    """Two endpoints (simulators) whose GPUs a DCGM exporter serves (the page of tests/data/dcgm/, from a local
    HTTP server): their facts in the header, the page's readings in the ledger as ``gpu`` records of source
    ``dcgm``, aligned with the arms' calls."""
    import http.server  # noqa: PLC0415

    from leverbench.config import load  # noqa: PLC0415
    from leverbench.engines.simulator import SimConfig, SimulatorThread  # noqa: PLC0415
    from leverbench.ledger.reader import read_ledger  # noqa: PLC0415
    from leverbench.runner import telemetry  # noqa: PLC0415
    from leverbench.runner.run import Runner  # noqa: PLC0415

    monkeypatch.setattr(telemetry, "DCGM_HZ", 20.0)  # a short run: the page read as often as NVML
    page = (DATA / "h100x2-dcp.metrics").read_bytes()

    class Exporter(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    try:
        with SimulatorThread(SimConfig(decode_tps=400.0)) as a, SimulatorThread(SimConfig(decode_tps=400.0)) as b:
            arms = "".join(f'''
[[arms]]
name = "{n}"
role = "{r}"
base_url = "{s.base_url}"
model = "sim"
gpu_metrics_url = "{url}"
conditions = {{ prefix_cache = {c} }}
''' for n, r, s, c in (("a", "baseline", a, "false"), ("b", "treatment", b, "true")))
            (tmp_path / "exp.toml").write_text(f'''
[experiment]
name = "dcgm"
repeats = 2
baseline = "a"
sentinel_tokens = 8
gpu_sample_hz = 20
{arms}
[[cases]]
name = "c"
prompt = "write at length"
max_tokens = 60
''')
            Runner(load(tmp_path / "exp.toml"), tmp_path / "run").run()
    finally:
        srv.shutdown()
    led = read_ledger(tmp_path / "run")
    facts = led.header["arms"]["a"]["discovered"]["gpu"]
    assert (facts["source"], facts["name"], facts["count"], facts["driver"]) == \
        ("dcgm", "NVIDIA H100 80GB HBM3", 2, "550.90.07")
    gpu = list(led.of_kind("gpu"))
    assert {(r["source"], r["device"]) for r in gpu} == {("dcgm", "gpu-node-7:0"), ("dcgm", "gpu-node-7:1")}
    assert all(r["arms"] == ["a", "b"] and r["fields"]["sm"] == "DCGM_FI_PROF_SM_ACTIVE" for r in gpu)
    s = summarize(led)
    rows = {r["arm"]: r for r in s["gpu"]["telemetry"]}
    assert set(rows) == {"a", "b"} and rows["a"]["devices"] == ["gpu-node-7:0", "gpu-node-7:1"]
    # the page never changes: both GPUs' mean, whatever the phase (and no resolution to speak of)
    assert rows["a"]["decode"]["sm"] == pytest.approx((0.9345 + 0.6113) / 2)  # as the ledger keeps them: 4 places
    assert rows["a"]["decode"]["power_w"] == pytest.approx(612.345 + 388.12)
    assert rows["a"]["resolution_s"] is None and not warned(s, "gpu_unknown")
