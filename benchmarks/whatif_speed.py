"""How fast ``leverbench whatif`` serves a large trace, and what SimPy would cost instead (issue 15).

    python benchmarks/whatif_speed.py [--calls N]
    python benchmarks/whatif_speed.py --tiny    # 2,000 calls: a second

Serves N synthetic calls (Poisson arrivals at 80 % of one slot's capacity, lengths like Azure's code
trace, a prefix cache of 262,144 tokens) with the hand-written event loop of
:func:`leverbench.analysis.whatif.forecast.simulate`, then the same FIFO one-slot queue in SimPy (when it is
importable: ``pip install simpy`` or ``PYTHONPATH=DIR_WITH_SIMPY``) with the same service times and no
cache, and prints seconds and calls per second for each, and whether their end-to-end latencies agree.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from leverbench.analysis.whatif.forecast import ArmSpec, simulate
from leverbench.analysis.whatif.plan import plan_calls
from leverbench.workload.traces import TrafficCall

MODEL = {"prefill": {"a_s": 0.02, "b_s_per_token": 1 / 8000.0}, "decode": {"d0_s_per_token": 1 / 60.0}}


def calls(n: int, seed: int = 1) -> list[TrafficCall]:
    rng = np.random.default_rng(seed)
    inp = rng.lognormal(7.5, 1.0, n).astype(int) + 2
    out = rng.lognormal(3.0, 1.0, n).astype(int) + 1
    service = MODEL["prefill"]["a_s"] + inp / 8000.0 + out / 60.0
    gaps = rng.exponential(service.mean() / 0.8, n)
    t = np.cumsum(gaps)
    shared = rng.integers(0, 50, n)  # one of 50 system prompts of 512 tokens
    return [TrafficCall(int(i), int(o), arrival_s=float(a), prefix_blocks=(int(s) + 10**9, 10**6 + k))
            for k, (i, o, a, s) in enumerate(zip(inp, out, t, shared))]


def hand(cs: list[TrafficCall], cache: bool) -> tuple[float, np.ndarray]:
    plan = plan_calls(cs)
    arm = ArmSpec("a", MODEL, cache=cache, capacity_tokens=262_144, block_tokens=16)
    t0 = time.perf_counter()
    s = simulate(plan, arm)
    return time.perf_counter() - t0, s.e2e


def with_simpy(cs: list[TrafficCall]) -> tuple[float, np.ndarray] | None:
    try:
        import simpy  # noqa: PLC0415 (optional: only this benchmark uses it)
    except ImportError:
        return None
    env = simpy.Environment()
    server = simpy.Resource(env, capacity=1)
    e2e = np.zeros(len(cs))

    def call(i: int, c: TrafficCall):
        yield env.timeout(c.arrival_s - env.now)
        t = env.now
        with server.request() as req:
            yield req
            yield env.timeout(MODEL["prefill"]["a_s"] + c.input_tokens / 8000.0 + c.output_tokens / 60.0)
        e2e[i] = env.now - t

    t0 = time.perf_counter()
    for i, c in enumerate(cs):
        env.process(call(i, c))
    env.run()
    return time.perf_counter() - t0, e2e


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--tiny", action="store_true", help="--calls 2000: a second")
    if "--tiny" in sys.argv[1:]:
        ap.set_defaults(calls=2000)
    n = ap.parse_args().calls
    cs = calls(n)
    for label, cache in (("hand-written loop, no cache", False), ("hand-written loop, finite cache", True)):
        secs, e2e = hand(cs, cache)
        print(f"{label:34s} {secs:7.2f} s  {n / secs:10,.0f} calls/s  e2e p50 {np.median(e2e):.3f} s")
    _, base = hand(cs, False)
    sp = with_simpy(cs)
    if sp is None:
        print("SimPy not importable: pip install simpy (or PYTHONPATH=DIR) to compare")
        return
    secs, e2e = sp
    print(f"{'SimPy Resource (FIFO, one slot)':34s} {secs:7.2f} s  {n / secs:10,.0f} calls/s  e2e p50 "
          f"{np.median(e2e):.3f} s; max |Δe2e| vs the loop {np.max(np.abs(e2e - base)):.2e} s")


if __name__ == "__main__":
    main()
