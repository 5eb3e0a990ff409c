"""``scripts/gpu-check.sh`` against the fake NVML binding and a fake torch (tests/fakes/): it runs unchanged on
them, with a Python that has none of leverbench's dependencies (no site-packages at all), tells the
compute-bound workload from the bandwidth-bound one and lines its readings up with them; a sampler that reads
them the wrong way round fails it; without NVML it says why and exits 2.  On a real GPU the same script runs
with real torch and nvidia-ml-py (its output goes into the closing note of the work that used one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import limits

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
FAKES = Path(__file__).parent / "fakes"


def bare_python(tmp: Path) -> str:
    """This Python without its site-packages (``-S``): none of leverbench's dependencies importable."""
    p = tmp / "bare-python"
    p.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    p.chmod(0o755)
    assert subprocess.run([str(p), "-c", "import numpy"], capture_output=True).returncode != 0
    return str(p)


def check(*args: str, python: str = sys.executable, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), "--phase-s", "0.6", "--cycles", "2", *args], capture_output=True,
                          text=True, timeout=limits.SMALL_COMMAND_S,
                          env={**os.environ, "PYTHONPATH": str(FAKES), "PYTHON": python,
                               "LEVERBENCH_NVML_MODULE": "fake_nvml", **env})


def test_the_check_passes_on_a_gpu_that_does_what_it_is_given(tmp_path):
    res = check(python=bare_python(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "GPU 0: NVIDIA H200, 144384 MiB, driver 570.124.06, CUDA 12.8, power limit 700.0 W" in out
    rows = [w for w in map(str.split, out.splitlines()) if len(w) > 5 and w[0].isdigit() and w[1] in
            ("idle", "compute", "copy")]
    assert [r[1] for r in rows] == ["idle", "compute", "copy", "compute", "copy", "idle"]
    assert all(int(r[7].rstrip("%")) >= 80 for r in rows if r[1] != "idle")  # the readings inside, classified right
    assert out.rstrip().splitlines()[-1].startswith("PASS")


def test_a_sampler_that_reads_the_workloads_the_wrong_way_round_fails():
    res = check(FAKE_GPU_SWAP="1")
    assert res.returncode == 1 and "FAIL: phase 1 (compute): 0% of its" in res.stdout


def test_without_nvml_it_says_why():
    res = check(LEVERBENCH_NVML_MODULE="pynvml_missing_here")
    assert res.returncode == 2 and "cannot run: the NVML binding 'pynvml_missing_here' cannot be imported" in res.stdout
