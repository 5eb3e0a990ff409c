"""``scripts/gpu-check.sh``: the sampler on a real GPU, against workloads whose bottleneck is known.

**NVML's refresh period** W first: NVML's utilisations are the driver's last sample, the average over its
sample period ("between 1 second and 1/6 second depending on the product", ``nvmlUtilization_t``), so a
reading shows what the GPU did up to two periods before it was taken.  A flickering load (matrix products in
bursts of random length between idle gaps, for :data:`CAL_MIN_S` to :data:`CAL_MAX_S` s, read at
:data:`CAL_HZ`) makes each sample differ from the last; W is the mean interval between changed readings,
leaving out those over 1.5 × their median (a sample that happened to repeat its predecessor).

Then a compute-bound workload (a large bf16 matrix product) and a bandwidth-bound one (a large device-to-device
copy) alternate on one GPU, each for ``--phase-s`` seconds (default: 3 s or 6 W, whichever is longer),
``--cycles`` times, between idle seconds, while the sampler (:class:`~.sampler.Sampler`, NVML readings at
``--hz``, a reading every h s) runs on its own thread.  Each phase's start and end are taken after
``torch.cuda.synchronize()``; a phase's readings are those from 2 W + h after its start to its end (the ones
before may show the workload before it).  The check passes when

1. **the copy keeps the memory busier**: the mean memory utilisation of the copy's readings is at least
   :data:`DRAM_GAP` above the matrix product's, and the product's mean SM utilisation at least the copy's
   (within :data:`SM_SLACK`: NVML counts in whole percents, and a copy is a kernel too); both workloads' SM
   means at least :data:`BUSY_GAP` above idle's.  Judged against each other, not against fixed thresholds: a
   large bf16 product may keep an H200's memory busy more than half the time; the absolute rule
   (:func:`~.readings.classify`) is printed as a note;
2. **each reading tells its workload**: a reading is idle when its SM utilisation is below the midpoint of
   idle's mean and the workloads', else the copy when its memory utilisation is at least the midpoint of the
   two workloads' means, else the product; at least :data:`CLASSIFIED_SHARE` of each phase's readings are
   its workload's;
3. **its timestamps line up**: at each workload's start, the first reading telling the new workload comes at
   most 2 W + h after it (the driver's next sample may hold mostly the workload before; the one after holds
   only the new one; a reading sees it within h).

It prints the GPU, the versions of the binding, NVML, torch and CUDA, the refresh period, each phase's raw
means and each start's lag, and ends with PASS (exit 0) or FAIL (exit 1) with its reasons; exit 2 when it
cannot run (no NVML, no torch, no GPU, MIG on: NVML does not report a MIG GPU's utilisation).  Standard
library, torch and the NVML binding only (:func:`.nvml.binding`: ``$LEVERBENCH_NVML_MODULE`` names a fake of it
in the tests): it runs from a working tree with ``PYTHONPATH=src`` and nothing of leverbench installed.  The
GPU: ``CUDA_VISIBLE_DEVICES``'s first where it is set (an index in NVML's order, or a UUID; ``--device`` must
agree), else ``--device`` (NVML's index, default 0), given to torch as ``CUDA_VISIBLE_DEVICES`` in NVML's
(PCI bus) order; torch's device is checked to be NVML's by its UUID where torch reports one.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .nvml import Nvml
from .readings import Reading, classify
from .sampler import Sampler

CLASSIFIED_SHARE = 0.8
DRAM_GAP = 0.2
SM_SLACK = 0.02
BUSY_GAP = 0.25
BATCH_TARGET_S = 0.02  # a batch of operations between synchronizations: about this long
CAL_HZ, CAL_MIN_S, CAL_MAX_S, CAL_CHANGES = 100.0, 2.0, 12.0, 7
WORKLOADS = ("compute", "copy")
ABSOLUTE = {"compute": "sm", "copy": "dram"}


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


def refresh_period(readings: list[Reading]) -> tuple[Optional[float], int]:
    """(NVML's refresh period as the module docstring measures it, or None: fewer than 3 changes; how many
    times the readings changed)."""
    changed = [b.t for a, b in zip(readings, readings[1:]) if (a.sm, a.dram) != (b.sm, b.dram)]
    gaps = [b - a for a, b in zip(changed, changed[1:])]
    if len(gaps) < 2:
        return None, len(changed)
    cap = 1.5 * statistics.median(gaps)
    return statistics.fmean(g for g in gaps if g <= cap), len(changed)


def calibrate(nvml: Nvml, device: int, work: Workloads) -> tuple[Optional[float], int, float]:
    """The flickering load (module docstring): (refresh period, changes seen, seconds it took)."""
    rng = random.Random(27)
    got: list[Reading] = []
    t0 = time.monotonic()
    with Sampler(lambda: [("gpu", nvml.read(device))], CAL_HZ, name="gpu-check-calibration") as sampler:
        while time.monotonic() - t0 < CAL_MAX_S:
            work.run("compute", rng.uniform(0.01, 0.08))
            time.sleep(rng.uniform(0.01, 0.08))
            got += sampler.drain().get("gpu", [])
            if time.monotonic() - t0 >= CAL_MIN_S and refresh_period(got)[1] > CAL_CHANGES:
                break
    got += sampler.drain().get("gpu", [])
    period, changes = refresh_period(got)
    return period, changes, time.monotonic() - t0


def _mean(xs: list[Optional[float]]) -> Optional[float]:
    vals = [x for x in xs if x is not None]
    return statistics.fmean(vals) if vals else None


def _pct(x: Optional[float]) -> str:
    return "   —" if x is None else f"{x * 100:3.0f}%"


@dataclass(frozen=True)
class Levels:
    """Each workload's mean SM and memory utilisation over its phases' readings (idle's too), and the
    midpoints a reading is told by (module docstring, 2)."""

    means: dict[str, tuple[Optional[float], Optional[float]]]

    def sm_mid(self) -> float:
        busy = [self.means[k][0] for k in WORKLOADS if self.means[k][0] is not None]
        return ((self.means["idle"][0] or 0.0) + min(busy)) / 2 if busy else 0.5

    def dram_mid(self) -> float:
        (_, a), (_, b) = self.means["compute"], self.means["copy"]
        return (a + b) / 2 if a is not None and b is not None else 0.5

    def tell(self, r: Reading) -> str:
        if r.sm is None or r.dram is None:
            return "unknown"
        if r.sm < self.sm_mid():
            return "idle"
        return "copy" if r.dram >= self.dram_mid() else "compute"


def judge(readings: list[Reading], phases: list[Phase], window: float, step: float
          ) -> tuple[list[str], list[str]]:
    """(lines of the report, failures) for *readings* against *phases*, NVML's refresh period *window* and
    the sampler's interval *step* (module docstring)."""
    settle = 2 * window + step
    inner = [[r for r in readings if ph.t0 + settle <= r.t <= ph.t1] for ph in phases]
    pooled = {k: [r for ph, rs in zip(phases, inner) if ph.kind == k for r in rs] for k in ("idle", *WORKLOADS)}
    lv = Levels({k: (_mean([r.sm for r in rs]), _mean([r.dram for r in rs])) for k, rs in pooled.items()})
    lines, failures = [], []
    lines.append(f"{'phase':>5} {'workload':8} {'s':>5} {'readings':>8} {'SM':>5} {'memory':>6} {'power W':>8} "
                 f"{'as expected':>11} {'start lag':>14}")
    prev_kind = None
    for i, (ph, rs) in enumerate(zip(phases, inner)):
        want = ph.kind if ph.kind in WORKLOADS else None
        share = sum(lv.tell(r) == want for r in rs) / len(rs) if rs and want else None
        lag = "—"
        if want and prev_kind != ph.kind:
            hit = next((r for r in readings if r.t >= ph.t0 and lv.tell(r) == want), None)
            if hit is None:
                failures.append(f"phase {i} ({ph.kind}): no reading told {want!r} after its start")
            else:
                ms = (hit.t - ph.t0) * 1000
                lag = f"{ms:.0f} ms"
                if hit.t - ph.t0 > settle:
                    failures.append(f"phase {i} ({ph.kind}): the first reading telling {want!r} came {ms:.0f} ms "
                                    f"after its start: more than {settle * 1000:.0f} ms (2 NVML periods + 1 reading)")
        if want:
            if not rs:
                failures.append(f"phase {i} ({ph.kind}): no reading in it after its first {settle:.2f} s (raise "
                                "--phase-s or --hz)")
            elif share is not None and share < CLASSIFIED_SHARE:
                failures.append(f"phase {i} ({ph.kind}): {share:.0%} of its {len(rs)} readings told {want!r} (at "
                                f"least {CLASSIFIED_SHARE:.0%} needed)")
        power = _mean([r.power_w for r in rs])
        lines.append(f"{i:>5} {ph.kind:8} {ph.t1 - ph.t0:5.1f} {len(rs):>8} {_pct(_mean([r.sm for r in rs])):>5} "
                     f"{_pct(_mean([r.dram for r in rs])):>6} {'—' if power is None else f'{power:.0f}':>8} "
                     f"{'—' if share is None else f'{share:.0%}':>11} {lag:>14}")
        prev_kind = ph.kind
    lines.append("means: " + "; ".join(f"{k} SM {_pct(lv.means[k][0]).strip()} memory {_pct(lv.means[k][1]).strip()}"
                                       for k in (*WORKLOADS, "idle")))
    failures += _relative(lv)
    absolute = [f"{k} phases read as {'compute' if ABSOLUTE[k] == 'sm' else 'bandwidth'}-bound in "
                f"{sum(classify(r) == ABSOLUTE[k] for r in pooled[k]) / len(pooled[k]):.0%}"
                for k in WORKLOADS if pooled[k]]
    lines.append("note: by absolute thresholds (memory >= 50 % bandwidth-bound, else SM >= 50 % compute-bound; "
                 "not judged): " + ", ".join(absolute))
    return lines, failures


def _relative(lv: Levels) -> list[str]:
    """The workloads' means against each other (module docstring, 1)."""
    (c_sm, c_mem), (p_sm, p_mem), (i_sm, _) = lv.means["compute"], lv.means["copy"], lv.means["idle"]
    if None in (c_sm, c_mem, p_sm, p_mem):
        return ["a workload's utilisations were not read"]
    out = []
    if p_mem - c_mem < DRAM_GAP:
        out.append(f"the copy's memory utilisation ({p_mem:.0%}) is not well above the matrix product's "
                   f"({c_mem:.0%}): at least {DRAM_GAP:.0%} above needed")
    if c_sm < p_sm - SM_SLACK:
        out.append(f"the matrix product's SM utilisation ({c_sm:.0%}) is below the copy's ({p_sm:.0%})")
    for k, sm in (("matrix product", c_sm), ("copy", p_sm)):
        if sm - (i_sm or 0.0) < BUSY_GAP:
            out.append(f"the {k}'s SM utilisation ({sm:.0%}) is not {BUSY_GAP:.0%} above idle's ({i_sm or 0:.0%})")
    return out


def choose_device(nvml: Nvml, asked: Optional[int]) -> tuple[Optional[int], str]:
    """(the NVML index of the GPU to check, how it was chosen), or (None, why not) (module docstring)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        device = 0 if asked is None else asked
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
        return device, f"--device {device}"
    first = visible.split(",")[0].strip()
    if first.isdigit():
        device: Optional[int] = int(first)
    else:
        uuids = {str(nvml.device(i).get("uuid")): i for i in range(nvml.count())}
        device = next((i for u, i in uuids.items() if first and (u == first or u.endswith(first))), None)
    if device is None or not 0 <= device < nvml.count():
        return None, f"CUDA_VISIBLE_DEVICES={visible}: its first GPU is none of NVML's {nvml.count()}"
    if asked is not None and asked != device:
        return None, (f"--device {asked}, but CUDA_VISIBLE_DEVICES={visible} gives torch GPU {device}: drop one of "
                      "them")
    return device, f"CUDA_VISIBLE_DEVICES={visible}"


def versions(nvml: Nvml, torch: Any) -> str:
    try:
        binding = importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        binding = str(getattr(nvml.lib, "__version__", "unknown"))
    lib = nvml._call(None, "nvmlSystemGetNVMLVersion")
    return (f"nvidia-ml-py {binding} (NVML {lib if lib is not None else 'unknown'}); torch {torch.__version__} "
            f"(CUDA {torch.version.cuda}); Python {sys.version.split()[0]}")


def main(argv: Optional[list[str]] = None, out: Callable[[str], None] = print) -> int:
    ap = argparse.ArgumentParser(prog="gpu-check", description="The GPU sampler against a compute-bound and a "
                                 "bandwidth-bound workload on one GPU (torch and nvidia-ml-py; no network).")
    ap.add_argument("--device", type=int, default=None, help="the GPU, by NVML's (nvidia-smi's) index (default: "
                    "CUDA_VISIBLE_DEVICES's first, else 0)")
    ap.add_argument("--hz", type=float, default=20.0, help="readings per second (default 20)")
    ap.add_argument("--phase-s", type=float, default=None, help="seconds each workload runs (default: 3, or 6 "
                    "NVML refresh periods where longer)")
    ap.add_argument("--cycles", type=int, default=3, help="compute-then-copy cycles (default 3)")
    ap.add_argument("--size", type=int, default=8192, help="matrix side of the bf16 product (default 8192)")
    ap.add_argument("--copy-mib", type=int, default=2048, help="MiB the copy moves each time (default 2048)")
    args = ap.parse_args(argv)
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    nvml, why = Nvml.open()
    if nvml is None:
        out(f"gpu-check: cannot run: {why}")
        return 2
    try:
        return _check(nvml, args, out)
    finally:
        nvml.close()


def _check(nvml: Nvml, args: argparse.Namespace, out: Callable[[str], None]) -> int:
    device, how = choose_device(nvml, args.device)
    if device is None:
        out(f"gpu-check: cannot run: {how}")
        return 2
    facts = nvml.device(device)
    if facts.get("mig") == "enabled":
        out(f"gpu-check: cannot run: MIG is enabled on GPU {device}: NVML does not report a MIG GPU's utilisation "
            "(nvmlDeviceGetUtilizationRates is not supported under MIG); check a GPU without MIG")
        return 2
    try:
        import torch  # noqa: PLC0415 (after CUDA_VISIBLE_DEVICES)
    except ImportError:
        out("gpu-check: cannot run: torch is not installed")
        return 2
    if not torch.cuda.is_available():
        out("gpu-check: cannot run: torch sees no CUDA device")
        return 2
    tu = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    if tu is not None and facts.get("uuid") and not str(facts["uuid"]).endswith(str(tu)):
        out(f"gpu-check: cannot run: torch's cuda:0 ({tu}) is not NVML's GPU {device} ({facts['uuid']}); set "
            "CUDA_DEVICE_ORDER=PCI_BUS_ID")
        return 2
    sysf = nvml.system()
    out(f"GPU {device}: {facts.get('name')}, {facts.get('memory_mib')} MiB, driver {sysf.get('driver')}, "
        f"CUDA {sysf.get('cuda')}, power limit {facts.get('power_limit_w')} W, SM clock max "
        f"{facts.get('sm_clock_max_mhz')} MHz, MIG {facts.get('mig')} (chosen by {how})")
    out(versions(nvml, torch))
    work = Workloads(torch, args.size, args.copy_mib)
    work.run("compute", 0.2)  # warm: kernels chosen, memory touched
    work.run("copy", 0.2)
    window, changes, took = calibrate(nvml, device, work)
    failures = []
    if window is None:
        failures.append(f"NVML's utilisation changed {changes} time(s) in {took:.0f} s of a flickering load: its "
                        "refresh period is not measurable (taken as 1 s)")
        out(f"NVML refresh period: not measured ({changes} changes in {took:.1f} s)")
    else:
        out(f"NVML refresh period: {window * 1000:.0f} ms ({changes} changes in {took:.1f} s of a flickering load, "
            f"read at {CAL_HZ:g} Hz)")
    window = window or 1.0
    phase_s = args.phase_s if args.phase_s is not None else max(3.0, 6 * window)
    sampler = Sampler(lambda: [("gpu", nvml.read(device))], args.hz)
    t_start = time.monotonic()
    with sampler:
        phases = [idle(max(1.0, 3 * window))]
        for _ in range(args.cycles):
            phases += [work.run("compute", phase_s), work.run("copy", phase_s)]
        phases.append(idle(max(1.0, 3 * window)))
    readings = sampler.drain().get("gpu", [])
    gaps = [b.t - a.t for a, b in zip(readings, readings[1:])]
    step = statistics.median(gaps) if gaps else 1.0 / args.hz
    out(f"sampler: {len(readings)} readings in {time.monotonic() - t_start:.1f} s, median interval "
        f"{step * 1000:.0f} ms (asked {1000 / args.hz:.0f}), {sampler.errors} failed; {args.cycles} x (compute "
        f"{phase_s:g} s, copy {phase_s:g} s), each phase's first {2 * window + step:.2f} s left out")
    lines, more = judge(readings, phases, window, step)
    for line in lines:
        out(line)
    energy = [r.energy_j for r in readings if r.energy_j is not None]
    if len(energy) >= 2:
        out(f"energy counter: {energy[-1] - energy[0]:.0f} J over the run")
    failures += more + (["fewer than 2 readings"] if len(readings) < 2 else [])
    for f in failures:
        out(f"FAIL: {f}")
    out("PASS: the readings told the matrix product (SMs busy, memory less) from the copy (memory busy) and lined "
        f"up with them within 2 NVML periods + 1 reading ({(2 * window + step) * 1000:.0f} ms)" if not failures
        else f"FAIL ({len(failures)} check(s))")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
