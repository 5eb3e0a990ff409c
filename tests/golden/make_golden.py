"""How the golden files of ``tests/test_summary_equivalence.py`` were made.

    .venv/bin/python tests/golden/make_golden.py ledgers    # (re)write the hand-made and simulator ledgers
    .venv/bin/python tests/golden/make_golden.py handmade   # (re)write only the hand-made ledger
    .venv/bin/python tests/golden/make_golden.py summaries  # (re)write NAME.summary.json from NAME.ledger.jsonl

``demo3`` is the ledger of a real run of the demo after issue 38 (runs/demo3, 2026-12-07: every turn brought to a
cold cache state, ledger v5), its absolute model path cut as below and each call's ``input_messages`` left out
(the prompts: the repository's own documents, 330 KB; nothing the analysis reads): its summary was written
once, from that ledger, by this leverbench, and the README's example output is its first screen
(tests/test_docs.py checks it).  ``demo1`` / ``demo2`` are copies of real runs' ledgers (runs/demo1,
runs/demo2: the embedded llama.cpp engine), with the checkout's absolute path cut from the recorded model path (it now
reads ``.venv/lib/…``) in the ledger and its summary alike, so that the repository names no machine
path.  ``handmade`` is written here, record by record, to reach the corners of the analysis: failed,
retried and orphaned calls, duplicate turns, probes (one disobeyed, one failed), sentinels (one
arm drifting, one with too few), metrics scrapes, tool calls, reasoning (from usage and estimated from
chunks), empty answers, step limits, prompt-discipline variants, arms with and without llama.cpp
timings, refused regressions; a sentinel of every arm opens every round (base's slows 50 % over the run,
flaky's fail after the first: too few to judge).  ``sim`` is a run of the runner against the
simulator (reasoning, tool calls, output jitter, HTTP 500s with retries, a drafter).

The summaries are the output of ``summarize`` *before* the analysis was vectorized; regenerate
them only when a change of output is intended.  Since then only the ``multipliers`` of ``handmade``
and ``sim`` were rewritten, when the guard began refusing cells with retried calls (DESIGN.md), and
``warning_items`` (each warning's kind, arm and case) was added to every file; the rate model
(issue 15) rewrote every file: ``rate_models`` and ``decomposition[].decode_context`` added; ``probes``
rows measured from the stream and compared at their context (new keys, new ``decode_tps``,
``prefill_s``, ``agreement``); ``server[].server_decode_tps`` over predicted_n − 1 tokens; ``rates``
(probe rates) and ``projection`` (from the rate model) recomputed; ``verdicts`` and ``adaptive``
(issue 16) were added to every file; ``probes[].regression_decode_tps`` became the per-call decode fit on
the client's stream clock at the probe's context (``regression_source``, ``regression_extrapolated`` added;
``regression_context`` only for the cell-regression fallback), and ``agreement`` / ``agrees`` / ``views``
with it (issue 15; ``sim``'s drafter row again when a stream's decode went back to completion − 1 tokens,
its first chunk being the prefill's one token; every file's ``probes[]`` again when the regression left
the probe's own calls out of its fit); issue 22 rewrote every file (drift judged from each arm's series
and per comparison, ``drift_pairs``, ``drift_common``, ``equal_work`` and ``multipliers[].equal_work``, coded
reasons, Welch intervals in ``verdicts``, probes' ``prefill_s`` one token later) and regenerated the
``handmade`` and ``sim`` ledgers (a sentinel of every arm opening every round, warm-ups until stable, the
Williams order); the review of issue 22 added a ``drift_undetermined`` warning to ``warnings`` and
``warning_items`` of ``handmade`` and ``sim`` (those two keys only were rewritten: regenerating whole files
would also move the last digits of sums the vectorized analysis adds in another order), and, when equal work
began pairing the call that counted rather than a failed attempt it retried, ``multipliers`` and
``equal_work`` of ``handmade`` and ``sim`` and ``levers`` and ``verdicts`` of ``sim`` (its retried turns are now
corrected: 9 turns, not 6); issue 27 added ``engines`` and ``gpu`` to every file (their ledgers hold no engine
or GPU records: no mode, no starts, every arm's GPU "not recorded"); the rest of each file is as first
computed; the ``revisits`` warning (a comparison whose later repeats met prompts its earlier repeats cached)
was added to ``warnings`` and ``warning_items`` of ``demo1``, ``demo2`` and ``sim`` (those two keys only, the
other items unchanged and in their order); issue 38 added ``repeats`` (each arm's revisit share and drafter
acceptance by visit, the pairs that revisited with their first-visit figure: these ledgers, before v5, declare
no cache state, so nothing is refused) to every file and rewrote the ``revisits`` warnings' last clause (how a
run today measures new turns) in ``demo1``, ``demo2`` and ``sim``; and, since a comparison whose repeats revisited
is refused even in a ledger that declared no state (its figure across repeats is not a new turn's), the
``multipliers``, ``equal_work``, ``levers``, ``verdicts`` and ``projection`` of those three files were rewritten
too: only their citability, reasons and what follows from them changed (a verdict no longer cited at equal work
gives its measured ratio; a lever's headline likewise), no measured figure; issue 42 added ``tools`` to every
file (empty but in ``sim``, whose agent case sent tools before the check existed: every call "not known").  These
files catch
change; tests/test_oracles.py checks the
headline numbers against hand computation.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from ledgers import header  # noqa: E402

ARMS = {
    "base": {"prefix_cache": False, "drafter": "none", "gpu_hour_usd": 5.5},
    "cache": {"prefix_cache": True, "drafter": "none", "gpu_hour_usd": 5.5},
    "spec": {"prefix_cache": True, "drafter": "ngram", "gpu_hour_usd": 5.5, "gpus": 2},
    "eagle": {"prefix_cache": False, "drafter": "eagle", "engine": "vllm"},
    "flaky": {"prefix_cache": True, "drafter": "none"},
}
CASES = ["long", "short", "tools", "reason"]


def handmade() -> list[dict]:
    rnd = random.Random(7)
    head = header(ARMS, CASES, repeats=4, retries=2, engaged_acceptance_min=0.3, drift_tolerance=0.1)
    head["config"]["cases"].append({"name": "short [brief]", "variant_of": "short"})
    head["config"]["probes"] = {"output_tokens": [16, 128], "repeats": 3, "case": "long", "tolerance": 0.05}
    head["arms"]["eagle"]["model"] = "m-7b"
    recs: list[dict] = []
    n_id = [0]

    def tid() -> str:
        n_id[0] += 1
        return f"t{n_id[0]:05d}"

    speed = {"base": 1.0, "cache": 0.8, "spec": 0.45, "eagle": 0.6, "flaky": 0.9}
    prompt_of = {"long": 6000, "short": 300, "tools": 1200, "reason": 800, "short [brief]": 310}
    t_send = 1.7e9

    def call(kind: str, arm: str, case: str, rep: int, step: int, turn_id: str | None, out: int | None, *,
             error: dict | None = None, prompt: int | None = None, **extra) -> dict:
        nonlocal t_send
        prompt = prompt_of.get(case, 100) + 150 * step if prompt is None else prompt
        cached = 0
        if ARMS[arm]["prefix_cache"] and step > 0:
            cached = prompt - 150 - rnd.randint(0, 40)
        o = out or 0
        lat = speed[arm] * (0.05 + (prompt - cached) / 4000.0 + o / 60.0) * rnd.uniform(0.95, 1.05)
        ttft = speed[arm] * (0.05 + (prompt - cached) / 4000.0) * rnd.uniform(0.9, 1.1)
        t_send += lat + 0.01
        n_chunks = max(1, min(12, o))
        rec = {"kind": kind, "arm": arm, "case": case, "repeat": rep, "step": step,
               **({"turn_id": turn_id} if turn_id is not None else {}),
               "t_send": t_send, "ttft_s": ttft if error is None else None, "latency_s": lat,
               "chunk_t": [round(ttft + i * (lat - ttft) / n_chunks, 6) for i in range(n_chunks)]
               if error is None else [],
               "chunk_chars": [4] * n_chunks if error is None else [],
               "status": 200 if error is None else 500, "error": error,
               "prompt_tokens": prompt if error is None else None, "completion_tokens": out if error is None else None,
               "cached_tokens": cached if error is None else None, "reasoning_tokens": None,
               "token_source": "usage", "content_chars": 4 * o, "reasoning_chars": 0,
               "finish_reason": "stop", "tool_calls": None, "t_first_answer_s": ttft if error is None else None,
               "timings": None, "request": {"max_tokens": 256}, "input_sha256": f"{rnd.getrandbits(64):016x}",
               "output_sha256": f"{rnd.getrandbits(64):016x}", "input_chars": 4 * prompt, "tools_sent": 0}
        if error is None and arm in ("cache", "spec", "flaky"):
            t = {"cache_n": cached, "prompt_n": prompt - cached, "prompt_ms": 1000 * ttft * 0.9,
                 "predicted_n": o, "predicted_ms": 1000 * (lat - ttft) * 0.97}
            if arm == "spec":
                t["draft_n"] = 7 * max(1, o // 3)
                t["draft_n_accepted"] = int(t["draft_n"] * rnd.uniform(0.3, 0.6))
            if arm == "flaky" and step == 1:
                t = {"prompt_n": prompt - cached}  # a partial timings object (no ms)
            rec["timings"] = t
            if arm == "cache" and step == 0:
                rec["cached_tokens"] = None  # usage without cached count: fall back to timings.cache_n
        rec.update(extra)
        return rec

    def turn_rec(arm: str, case: str, rep: int, turn_id: str, calls: list[dict], **extra) -> dict:
        failed = [c for c in calls if c["error"] is not None and not c.get("retried")]
        outs = [c["completion_tokens"] for c in calls if not c.get("retried")]
        return {"kind": "turn", "arm": arm, "case": case, "repeat": rep, "turn_id": turn_id,
                "t_start": calls[0]["t_send"],
                "turn_s": sum(c["latency_s"] for c in calls) + extra.get("tool_s", 0.0) + 0.02,
                "model_s": sum(c["latency_s"] for c in calls) + 0.02, "tool_s": 0.0, "calls": len(calls),
                "scripted_steps": 2, "failed_calls": len(failed), "step_limit": False,
                "empty_answers": sum(1 for c in calls if c.get("empty_answer")),
                "output_tokens": sum(o or 0 for o in outs) if all(o is not None for o in outs) else None,
                "prompt_tokens": sum(c["prompt_tokens"] or 0 for c in calls),
                "reasoning_tokens": sum(c.get("reasoning_tokens") or 0 for c in calls),
                "error": {"class": failed[0]["error"]["class"], "message": "failed"} if failed else None, **extra}

    recs.append({"kind": "metrics", "arm": "eagle", "when": "before", "t": 1.0,
                 "samples": {"vllm:spec_decode_num_draft_tokens_total": 100.0,
                             "vllm:spec_decode_num_accepted_tokens_total": 40.0, "vllm:num_requests_running": 0.0}})
    recs.append({"kind": "metrics", "arm": "spec", "when": "before", "t": 1.0, "samples": {}})
    recs.append({"kind": "warmup", "arm": "base", "case": "(sentinel)", "repeat": 0, "step": 0, "error": None,
                 "latency_s": 0.3})
    err500 = {"class": "http_status", "message": "HTTP 500: simulated internal error"}
    for rep in range(4):
        for arm in ARMS:  # a sentinel of every arm opens every round: base slows down, flaky's fail after the first
            err = err500 if (arm == "flaky" and rep > 0) else None
            rec = call("sentinel", arm, "(sentinel)", rep, 0, None, 16, error=err, prompt=20, probe_tokens=16,
                       position="start")
            if arm == "base":
                rec["latency_s"] = rec["ttft_s"] + (rec["latency_s"] - rec["ttft_s"]) * (1 + 0.125 * rep)
            recs.append(rec)
        for case in CASES + ["short [brief]"]:
            for arm in ARMS:
                t_id = tid()
                calls: list[dict] = []
                extra: dict = {}
                steps = {"long": 2, "short": 1, "tools": 3, "reason": 2, "short [brief]": 1}[case]
                for step in range(steps):
                    if case == "short" and arm == "eagle":
                        out = 50  # barely varying output: the regression is refused
                    elif case == "short [brief]":
                        out = rnd.randint(10, 20)
                    elif case == "long" and arm == "base" and step == 0:
                        out = 400 - 60 * rep  # longer answers faster: with noise the slope may go negative
                    else:
                        out = rnd.randint(20, 300)
                    kw: dict = {}
                    if case == "tools" and step < steps - 1:
                        kw["tool_calls"] = [{"id": f"c{step}", "name": "search_docs", "arguments": "{\"q\": \"x\"}"}]
                        kw["finish_reason"] = "tool_calls"
                    if case == "reason":
                        if arm in ("base", "cache"):
                            kw["reasoning_tokens"] = out // 2
                        elif arm == "spec":
                            kw["reasoning_chunks"], kw["answer_chunks"] = out // 3, out - out // 3
                        else:
                            kw["reasoning_chunks"], kw["answer_chunks"] = 0, 0
                        kw["reasoning_chars"] = 2 * out
                    if arm == "flaky" and case == "reason" and step == 1 and rep < 2:
                        kw.update(finish_reason="length", content_chars=0, empty_answer=True)
                    if arm == "flaky" and case == "long" and step == 0 and rep in (1, 3):
                        # a failed attempt, retried
                        calls.append(call("call", arm, case, rep, step, t_id, out, error=err500, retried=True,
                                          attempt=0))
                        kw["attempt"] = 1
                    c = call("call", arm, case, rep, step, t_id, out, **kw)
                    if arm == "eagle" and case == "tools":
                        c["latency_s"] = 6.0 - out / 100.0 + rnd.uniform(0, 0.05)  # longer answers faster: slope < 0
                    if arm == "base" and case == "tools" and step == 2 and rep < 3:
                        c["completion_tokens"] = None  # usage missing
                        c["token_source"] = "none"
                    if arm == "flaky" and case == "tools" and step == 1:  # every turn of this cell fails
                        c.update(error={"class": "stream_cut", "message": "cut"}, completion_tokens=None)
                        calls.append(c)
                        break
                    calls.append(c)
                if case == "tools":
                    extra["tool_s"] = 0.25 * (len(calls) - 1)
                    if arm == "spec" and rep == 1:
                        extra["step_limit"] = True
                if arm == "flaky" and case == "short" and rep >= 1:
                    recs += calls  # cut off by an interrupt: orphan calls, turn never written
                    continue
                recs += calls
                recs.append(turn_rec(arm, case, rep, t_id, calls, **extra))
        if rep == 1:
            recs.append({"kind": "resume", "at": "2026-01-01T00:10:00+00:00", "tool_version": "test",
                         "completed_units": 40, "repeats": 4})
            # a duplicate turn of the same unit written after the resume: the first one counts
            t_id = tid()
            dup = [call("call", "base", "long", 0, 0, t_id, 111)]
            recs += dup
            recs.append(turn_rec("base", "long", 0, t_id, dup))
    for arm in ("base", "cache", "spec", "flaky"):
        for n in (16, 128):
            for rep in range(3):
                out = n
                if arm == "cache" and n == 128 and rep == 2:
                    out = 120  # the engine did not honour ignore_eos
                err = err500 if (arm == "flaky" and n == 16 and rep == 0) else None
                recs.append(call("probe", arm, "long", rep, 0, None, out, error=err, prompt=6000, probe_tokens=n,
                                 position=None))
    for n, lat in ((16, 2.0), (128, 1.5)):  # the longer probe was not faster: refused
        p = call("probe", "eagle", "long", 0, 0, None, n, prompt=6000, probe_tokens=n, position=None)
        p["latency_s"] = lat
        recs.append(p)
    recs.append(call("probe", "base", "short", 0, 0, None, 16, prompt=300, probe_tokens=16, position=None))
    for arm in ARMS:
        err = err500 if arm == "flaky" else None
        rec = call("sentinel", arm, "(sentinel)", 0, 0, None, 16, error=err, prompt=20, probe_tokens=16, position="end")
        if arm == "base":  # decoded slower at the end: drift
            rec["latency_s"] = rec["ttft_s"] + (rec["latency_s"] - rec["ttft_s"]) * 1.5
        recs.append(rec)
    recs.append({"kind": "metrics", "arm": "eagle", "when": "after", "t": 2.0,
                 "samples": {"vllm:spec_decode_num_draft_tokens_total": 900.0,
                             "vllm:spec_decode_num_accepted_tokens_total": 340.0, "vllm:num_requests_running": 0.0}})
    return [head, *recs]


def sim_ledger(tmp: Path) -> Path:
    from leverbench.config import load
    from leverbench.engines.simulator import SimConfig, SimulatorThread
    from leverbench.runner.run import Runner

    tools = [{"type": "function", "function": {"name": "search_docs", "description": "search",
                                                "parameters": {"type": "object",
                                                               "properties": {"q": {"type": "string"}}}}}]
    (tmp / "tools.json").write_text(json.dumps(tools))
    (tmp / "script.json").write_text(json.dumps({"search_docs": {"result": "found", "latency_s": 0.05}}))
    (tmp / "doc.txt").write_text(" ".join(f"w{i}" for i in range(3000)))
    base = dict(prefill_tps=50_000.0, decode_tps=800.0, output_tokens=40, output_jitter=0.5, reasoning_tokens=10)
    with SimulatorThread(SimConfig(**base, prefix_cache=False, fault_http_500=0.15, seed=5)) as a, \
            SimulatorThread(SimConfig(**base, prefix_cache=True, seed=6)) as b, \
            SimulatorThread(SimConfig(**base, prefix_cache=True, draft_k=4, draft_acceptance=0.5, tool_call_rounds=2,
                                      seed=7)) as c:
        arms = ""
        for name, sim, cond in (("nocache", a, "prefix_cache = false"), ("cache", b, "prefix_cache = true"),
                                ("drafter", c, 'prefix_cache = true, drafter = "sim K=4"')):
            role = "baseline" if name == "nocache" else "treatment"
            arms += (f'[[arms]]\nname = "{name}"\nrole = "{role}"\nbase_url = "{sim.base_url}"\nmodel = "sim"\n'
                     f'conditions = {{ {cond} }}\n')
        (tmp / "exp.toml").write_text(f'''
[experiment]
name = "golden-sim"
repeats = 3
baseline = "nocache"
sentinel_tokens = 16
retries = 2

{arms}
[[cases]]
name = "read"
documents = ["doc.txt"]
prompt = "summarise"
max_tokens = 96
[[cases.steps]]
prompt = "more"
max_tokens = 48
[[cases.variants]]
name = "brief"
append = "One sentence."
max_tokens = 16

[[cases]]
name = "agent"
prompt = "find out what the cache does"
max_tokens = 64
tools = "tools.json"
tool_script = "script.json"

[probes]
output_tokens = [16, 96]
repeats = 2
case = "read"
''')
        Runner(load(tmp / "exp.toml"), tmp / "run").run()
    return tmp / "run" / "ledger.jsonl"


def main(what: str) -> None:
    if what == "handmade":
        with open(HERE / "handmade.ledger.jsonl", "w") as fh:
            for r in handmade():
                fh.write(json.dumps(r) + "\n")
    elif what == "ledgers":
        with open(HERE / "handmade.ledger.jsonl", "w") as fh:
            for r in handmade():
                fh.write(json.dumps(r) + "\n")
        import shutil
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            shutil.copy(sim_ledger(Path(d)), HERE / "sim.ledger.jsonl")
    elif what == "summaries":
        from leverbench.analysis.summary import summarize
        from leverbench.ledger.reader import read_ledger
        for p in sorted(HERE.glob("*.ledger.jsonl")):
            s = summarize(read_ledger(p))
            (HERE / p.name.replace(".ledger.jsonl", ".summary.json")).write_text(json.dumps(s, indent=1) + "\n")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
