"""``scripts/gpu-check.sh``: the sampler on a real GPU, against workloads whose bottleneck is known.

A compute-bound workload (a large bf16 matrix product) and a bandwidth-bound one (a large device-to-device
copy) alternate on one GPU, each for ``--phase-s`` seconds, ``--cycles`` times, between idle seconds, while
the sampler (:class:`~.sampler.Sampler`, NVML readings at ``--hz``) runs on its own thread.  Each phase's
start and end are taken after ``torch.cuda.synchronize()``.  The check passes when

1. **it classifies each workload**: of the readings inside each phase (its first two sample periods left
   out), at least :data:`CLASSIFIED_SHARE` are classified as the workload is (:func:`~.readings.classify`:
   the matrix product ``sm``, the copy ``dram``);
2. **its timestamps line up**: at each phase's start, the first reading classified as the new workload is at
   most one sample after the first reading taken after the start (the reading that straddles the start
   may still read the workload before: NVML averages over its own period).

It prints the GPU, the readings' means per phase and each boundary's lag, and ends with PASS (exit 0) or FAIL
(exit 1); exit 2 when it cannot run (no NVML, no torch, no GPU).  Standard library, torch and the NVML binding
only (:func:`.nvml.binding`: ``$LEVERBENCH_NVML_MODULE`` names a fake of it in the tests): it runs from a
working tree with ``PYTHONPATH=src`` and nothing of leverbench installed.  The GPU is chosen by NVML's index
(``--device``): ``CUDA_VISIBLE_DEVICES`` is set to it, in NVML's (PCI bus) order, before torch starts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .nvml import Nvml
from .readings import Reading, classify
from .sampler import Sampler

CLASSIFIED_SHARE = 0.8
EXPECTED = {"compute": "sm", "copy": "dram"}
BATCH_TARGET_S = 0.02  # a batch of operations between synchronizations: about this long


@dataclass
class Phase:
    kind: str  # "compute", "copy" or "idle"
    t0: float
    t1: float
    ops: int = 0


class Workloads:
    """The two workloads on ``cuda:0`` (the GPU chosen): a bf16 matrix product of *size*² and a copy of
    *copy_mib* MiB, each run in batches sized to :data:`BATCH_TARGET_S` between synchronizations."""

    def __init__(self, torch: Any, size: int, copy_mib: int):
        self.torch = torch
        self.a = torch.randn(size, size, dtype=torch.bfloat16, device="cuda")
        self.b = torch.randn(size, size, dtype=torch.bfloat16, device="cuda")
        self.c = torch.empty(size, size, dtype=torch.bfloat16, device="cuda")
        n = copy_mib * (1 << 20)
        self.src = torch.empty(n, dtype=torch.uint8, device="cuda")
        self.dst = torch.empty(n, dtype=torch.uint8, device="cuda")
        self.src.fill_(1)
        self.batch = {"compute": 1, "copy": 1}

    def op(self, kind: str) -> None:
        if kind == "compute":
            self.torch.matmul(self.a, self.b, out=self.c)
        else:
            self.dst.copy_(self.src)

    def run(self, kind: str, seconds: float) -> Phase:
        """Run *kind* for *seconds* (whole batches), synchronized at both ends."""
        self.torch.cuda.synchronize()
        t0 = time.time()
        ops = 0
        while time.time() - t0 < seconds:
            b0 = time.monotonic()
            for _ in range(self.batch[kind]):
                self.op(kind)
            self.torch.cuda.synchronize()
            ops += self.batch[kind]
            took = time.monotonic() - b0
            if took < BATCH_TARGET_S / 2:
                self.batch[kind] *= 2
            elif took > BATCH_TARGET_S * 2 and self.batch[kind] > 1:
                self.batch[kind] //= 2
        return Phase(kind, t0, time.time(), ops)


def idle(seconds: float) -> Phase:
    t0 = time.time()
    time.sleep(seconds)
    return Phase("idle", t0, time.time())


def _mean(xs: list[Optional[float]]) -> Optional[float]:
    vals = [x for x in xs if x is not None]
    return statistics.fmean(vals) if vals else None


def _pct(x: Optional[float]) -> str:
    return "   —" if x is None else f"{x * 100:3.0f}%"


def judge(readings: list[Reading], phases: list[Phase], period: float) -> tuple[list[str], list[str]]:
    """(lines of the report, failures) for *readings* against *phases* (module docstring)."""
    lines, failures = [], []
    lines.append(f"{'phase':>5} {'workload':8} {'s':>5} {'readings':>8} {'SM':>5} {'memory':>6} {'power W':>8} "
                 f"{'as expected':>11} {'start lag':>14}")
    prev_kind = None
    for i, ph in enumerate(phases):
        inner = [r for r in readings if ph.t0 + 2 * period <= r.t <= ph.t1]
        want = EXPECTED.get(ph.kind)
        share = sum(classify(r) == want for r in inner) / len(inner) if inner and want else None
        lag = "—"
        if want and prev_kind != ph.kind:
            after = [k for k, r in enumerate(readings) if r.t >= ph.t0]
            hit = next((k for k in after if classify(readings[k]) == want), None)
            if not after or hit is None:
                failures.append(f"phase {i} ({ph.kind}): no reading classified {want!r} after its start")
            else:
                samples = hit - after[0]
                lag = f"{samples} ({(readings[hit].t - ph.t0) * 1000:.0f} ms)"
                if samples > 1:
                    failures.append(f"phase {i} ({ph.kind}): the first {want!r} reading came {samples} readings "
                                    f"({(readings[hit].t - ph.t0) * 1000:.0f} ms) after its start: more than one")
        if want:
            if not inner:
                failures.append(f"phase {i} ({ph.kind}): no reading inside it (raise --phase-s or --hz)")
            elif share is not None and share < CLASSIFIED_SHARE:
                failures.append(f"phase {i} ({ph.kind}): {share:.0%} of its {len(inner)} readings classified "
                                f"{want!r} (at least {CLASSIFIED_SHARE:.0%} needed)")
        power = _mean([r.power_w for r in inner])
        lines.append(f"{i:>5} {ph.kind:8} {ph.t1 - ph.t0:5.1f} {len(inner):>8} {_pct(_mean([r.sm for r in inner])):>5} "
                     f"{_pct(_mean([r.dram for r in inner])):>6} {'—' if power is None else f'{power:.0f}':>8} "
                     f"{'—' if share is None else f'{share:.0%}':>11} {lag:>14}")
        prev_kind = ph.kind
    return lines, failures


def main(argv: Optional[list[str]] = None, out: Callable[[str], None] = print) -> int:
    ap = argparse.ArgumentParser(prog="gpu-check", description="The GPU sampler against a compute-bound and a "
                                 "bandwidth-bound workload on one GPU (torch and nvidia-ml-py; no network).")
    ap.add_argument("--device", type=int, default=0, help="the GPU, by NVML's (nvidia-smi's) index (default 0)")
    ap.add_argument("--hz", type=float, default=20.0, help="readings per second (default 20)")
    ap.add_argument("--phase-s", type=float, default=3.0, help="seconds each workload runs (default 3)")
    ap.add_argument("--cycles", type=int, default=3, help="compute-then-copy cycles (default 3)")
    ap.add_argument("--size", type=int, default=8192, help="matrix side of the bf16 product (default 8192)")
    ap.add_argument("--copy-mib", type=int, default=2048, help="MiB the copy moves each time (default 2048)")
    args = ap.parse_args(argv)
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    os.environ["CUDA_VISIBLE_DEVICES"] = str(args.device)
    nvml, why = Nvml.open()
    if nvml is None:
        out(f"gpu-check: cannot run: {why}")
        return 2
    try:
        import torch  # noqa: PLC0415 (after CUDA_VISIBLE_DEVICES)
    except ImportError:
        out("gpu-check: cannot run: torch is not installed")
        return 2
    if not torch.cuda.is_available():
        out("gpu-check: cannot run: torch sees no CUDA device")
        return 2
    if not 0 <= args.device < nvml.count():
        out(f"gpu-check: cannot run: --device {args.device}: NVML sees {nvml.count()} GPU(s)")
        return 2
    facts = nvml.facts([args.device])
    out(f"GPU {args.device}: {facts.get('name')}, {facts.get('memory_mib')} MiB, driver {facts.get('driver')}, "
        f"CUDA {facts.get('cuda')}, power limit {facts.get('power_limit_w')} W, SM clock max "
        f"{facts.get('sm_clock_max_mhz')} MHz, MIG {facts.get('mig')}")
    out(f"torch {torch.__version__} (CUDA {torch.version.cuda}) on {torch.cuda.get_device_name(0)}; sampler "
        f"{args.hz:g} Hz, {args.cycles} × (compute {args.phase_s:g} s, copy {args.phase_s:g} s)")
    work = Workloads(torch, args.size, args.copy_mib)
    work.run("compute", 0.2)  # warm: kernels chosen, memory touched
    work.run("copy", 0.2)
    sampler = Sampler(lambda: [("gpu", nvml.read(args.device))], args.hz)
    t_start = time.monotonic()
    with sampler:
        phases = [idle(1.0)]
        for _ in range(args.cycles):
            phases += [work.run("compute", args.phase_s), work.run("copy", args.phase_s)]
        phases.append(idle(1.0))
    readings = sampler.drain().get("gpu", [])
    nvml.close()
    gaps = [b.t - a.t for a, b in zip(readings, readings[1:])]
    period = statistics.median(gaps) if gaps else 1.0 / args.hz
    out(f"{len(readings)} readings in {time.monotonic() - t_start:.1f} s, median period {period * 1000:.0f} ms "
        f"(asked {1000 / args.hz:.0f} ms); {sampler.errors} failed reading(s)")
    lines, failures = judge(readings, phases, period)
    for line in lines:
        out(line)
    energy = [r.energy_j for r in readings if r.energy_j is not None]
    if len(energy) >= 2:
        out(f"energy counter: {energy[-1] - energy[0]:.0f} J over the run")
    if len(readings) < 2:
        failures.append("fewer than 2 readings")
    for f in failures:
        out(f"FAIL: {f}")
    out("PASS: the sampler told the matrix product (SM busy) from the copy (memory busy), and its readings lined "
        "up with the phases within one reading" if not failures else f"FAIL ({len(failures)} check(s))")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
