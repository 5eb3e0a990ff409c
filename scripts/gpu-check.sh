#!/bin/sh
# The GPU sampler on a real GPU: NVML's refresh period measured, then a bf16 matrix product (compute-bound) and
# a device copy (bandwidth-bound) alternate while it reads NVML; it must tell them apart and line up with them
# (src/leverbench/gpu/check.py).  Needs one NVIDIA GPU, torch with CUDA and nvidia-ml-py (pip install
# nvidia-ml-py); nothing else of leverbench, no network.  Under a minute with the defaults; a compact report
# ending in PASS or FAIL with its reasons.
#   scripts/gpu-check.sh [--device N] [--hz 20] [--phase-s S] [--cycles 3] [--size 8192] [--copy-mib 2048]
# The Python that runs it: $PYTHON, else python3 (the one with torch; the repository's .venv has none).
set -eu
root="$(cd "$(dirname "$0")/.." && pwd)"
PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" exec "${PYTHON:-python3}" -m leverbench.gpu.check "$@"
