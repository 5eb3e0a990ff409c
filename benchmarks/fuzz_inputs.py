"""A long fuzz run: the generators of the fuzz suite (``tests/fuzz_inputs.py``) for as many inputs as asked.

    python benchmarks/fuzz_inputs.py --examples 1000 [--kinds experiment,ledger,traffic] [--budget-s 900]
        [--limit-s 30] [--out fuzz-failures] [--deep-one-in 10] [--seed N]
    python benchmarks/fuzz_inputs.py --tiny    # 6 inputs, seed 0: seconds

Draws inputs round-robin from each kind (mutated experiment files run against a closed port, ledgers through
``report``/``project``/``analyze``, traffic files through ``analyze``/``whatif``), runs each in a worker process
with a time limit (``--limit-s``: past it, a hang) and prints how many inputs it tried, how many exited 0, 1 and 2,
and every problem (an exit code not 0/1/2 — 70 is the internal-error handler's —, a traceback, an error that is
not one line, a hang, a dead worker).  An internal error is run again with ``LEVERBENCH_DEBUG=1`` to find where
it was raised.  Each problem's input is written to ``--out/NNNN-KIND/`` (its files, and ``repro.txt``: the
command line and the mutations), and the problems are grouped by exception and place at the end
(``--out/summary.json`` too).  Stops after ``--examples`` inputs or ``--budget-s`` seconds, whichever first.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # before this folder: its fuzz_inputs

import fuzz_inputs as F  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

KINDS = {"experiment": F.experiments, "ledger": F.ledgers, "traffic": F.traffic}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=1000, help="inputs to try in all (default 1000)")
    ap.add_argument("--budget-s", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--limit-s", type=float, default=30.0, help="a command running longer is a hang (default 30)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: experiment, ledger, traffic")
    ap.add_argument("--out", type=Path, default=Path("fuzz-failures"), help="where reproducers go")
    ap.add_argument("--deep-one-in", type=int, default=F.DEEP_ONE_IN,
                    help=f"one value in N a deep nesting (0: none; default {F.DEEP_ONE_IN})")
    ap.add_argument("--seed", type=int, default=None, help="draw the same inputs every time (default: new ones)")
    ap.add_argument("--tiny", action="store_true", help="--examples 6 --seed 0: the shortest run, the same inputs")
    args = ap.parse_args()
    if args.tiny:
        args.examples, args.seed = 6, 0 if args.seed is None else args.seed
    F.DEEP_ONE_IN = args.deep_one_in
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if any(k not in KINDS for k in kinds):
        ap.error(f"--kinds: one of {', '.join(KINDS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="leverbench-fuzz-"))
    worker = F.CliWorker()
    t0 = time.monotonic()
    tried: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    found: list[dict] = []
    stop = [False]

    share = max(1, args.examples // len(kinds))  # each kind its share of the inputs and of the time

    def budget_left(k: int) -> bool:
        return args.budget_s is None or time.monotonic() - t0 < args.budget_s * (k + 1) / len(kinds)

    def one(case: F.Case) -> None:
        if stop[0] or not budget_left(kinds.index(case.kind)):
            stop[0] = True
            return
        n = sum(tried.values())
        folder = scratch / f"{n:05d}"
        folder.mkdir()
        out = F.run_case(worker, case, folder, args.limit_s)
        tried[case.kind] += 1
        codes["hang" if out.hung else "died" if out.died else str(out.rc)] += 1
        probs = F.problems(out, args.limit_s)
        if probs:
            if out.rc == 70:  # where was it raised? again, with the traceback let through
                again = scratch / f"{n:05d}-debug"
                again.mkdir()
                dbg = F.run_case(worker, case, again, args.limit_s, env={"LEVERBENCH_DEBUG": "1"})
                out.exception, out.raised_at = dbg.exception, dbg.raised_at
            keep = args.out / f"{n:05d}-{case.kind}"
            shutil.rmtree(keep, ignore_errors=True)
            case.write(keep)
            last = out.stderr.rstrip().split("\n")[-1][:300] if out.stderr.strip() else ""
            (keep / "repro.txt").write_text(f"cd {keep} && leverbench {' '.join(case.args)}\n\n"
                                            + "\n".join(case.mutations) + f"\n\nproblems: {probs}\nexit {out.rc}\n"
                                            f"exception: {out.exception} at {out.raised_at}\nstderr's last line: "
                                            f"{last}\n")
            found.append({"n": n, "kind": case.kind, "args": case.args, "mutations": case.mutations,
                          "problems": probs, "rc": out.rc, "exception": out.exception, "raised_at": out.raised_at,
                          "last_line": last, "seconds": round(out.seconds, 1), "folder": str(keep)})
            print(f"[{n}] {case.kind}: {probs[0]} {out.exception or ''} at {out.raised_at or '?'}\n"
                  f"      {'; '.join(case.mutations)[:300]}", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
        if n % 50 == 0:
            print(f"... {n + 1} inputs, {time.monotonic() - t0:.0f} s, {len(found)} problems", flush=True)

    try:
        for kind in kinds:
            stop[0] = False
            run = settings(max_examples=share, deadline=None, database=None, phases=[Phase.generate],
                           suppress_health_check=list(HealthCheck))(given(case=KINDS[kind]())(one))
            (run if args.seed is None else seed(args.seed)(run))()
    finally:
        worker.close()
        shutil.rmtree(scratch, ignore_errors=True)
    total = sum(tried.values())
    print(f"\n{total} inputs in {time.monotonic() - t0:.0f} s ({', '.join(f'{k} {v}' for k, v in tried.items())}); "
          f"exit codes: {', '.join(f'{k}: {v}' for k, v in sorted(codes.items()))}; {len(found)} with a problem")
    groups: dict[str, list[dict]] = defaultdict(list)
    for f in found:
        what = f["problems"][0].split(":")[0]
        groups[f"{what} | {(f['exception'] or '').split(':')[0]} | {f['raised_at'] or '-'}"].append(f)
    for key, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ex = items[0]
        print(f"\n{len(items):4d} × {key}\n       e.g. {ex['exception'] or ex['last_line']}\n"
              f"       {'; '.join(ex['mutations'])[:300]}\n       {ex['folder']}")
    (args.out / "summary.json").write_text(json.dumps({"inputs": total, "by_kind": tried, "exit_codes": codes,
                                                       "problems": found}, indent=1, default=str))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
