"""A lever is one module (issue 39 part 4): the module docs/adding-a-lever.md shows, written into a copy of the
package and nothing else changed, is picked up by discovery, engagement, ``analyze`` and the reports; and a lever
that declares server figures of its own (:data:`METRIC_LEVER`) has them in the summary (which still fits its
schema), in its judge's evidence and in the report's metrics table.

The copy is a temporary directory (nothing is left behind); the checks run in a process of their own that imports
the copy, and their expectations are worked out here by hand from the records the script builds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import limits
import pytest

from leverbench.analysis.base.metrics import check_figure_names
from leverbench.levers import Lever, MetricTable, lever, registry

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "adding-a-lever.md"

#: What the process importing the copy checks, printed as JSON: two SGLang arms (the lever off and on) run the same
#: case, the one with it prefilling at 2000 tok/s against 1000; a trace (a CSV log) of three calls of 10,000 input
#: tokens of which 4,000 cached, 100 output tokens each, analysed at 1000 prefill tok/s and 50 decode tok/s.
SCRIPT = r'''
import json

from ledgers import header, ledger, probes_for, timed, turn

from leverbench.analysis.summary import summarize
from leverbench.report.markdown import render_markdown
from leverbench.report.traffic import render_markdown as traffic_markdown
from leverbench.pipeline.traffic_files import analyze_file
from leverbench.runner.discover import knobs


def sglang(on):
    info = {"version": "0.5.0", "enable_hierarchical_cache": on}
    raw = {"server_info": info, "models": [{"id": "m", "owned_by": "sglang", "root": "m"}]}
    return {"server_info": info, "models": ["m"], "knobs": knobs(raw)}


head = header({"base": {}, "host": {}}, ["c"])
for arm, on in (("base", False), ("host", True)):
    head["arms"][arm]["discovered"] = sglang(on)
recs = probes_for(head, {"base": {}}, prefill_tps=1000.0) + probes_for(head, {"host": {}}, prefill_tps=2000.0)
for r in range(3):
    for arm, tps in (("base", 1000.0), ("host", 2000.0)):
        c = timed(arm, "c", r, prompt=4000, cached=0, out=50, prefill_tps=tps, decode_tps=50.0)
        recs += turn(arm, "c", r, c["latency_s"], 50, prompt=4000, calls=[c])
s = summarize(ledger(head, recs), scenario=(4000, 50))
with open("trace.csv", "w") as f:
    f.write("input_tokens,output_tokens,cached_tokens\n" + "10000,100,4000\n" * 3)
traffic = analyze_file("trace.csv", prefill_tps=1000.0, decode_tps=50.0)
print(json.dumps({
    "knobs": {a: head["arms"][a]["discovered"]["knobs"] for a in ("base", "host")},
    "engaged": {e["arm"]: e.get("levers") for e in s["engaged"]},
    "levers": [{k: r[k] for k in ("lever", "arm", "vs", "engaged", "multiplier")} for r in s["levers"]],
    "projection": [{k: p[k] for k in ("lever", "phase", "saved_s")} for p in s["projection"]["levers"]],
    "traffic": traffic["levers"],
    "recommendation": traffic["recommendation"],
    "report": [x for x in render_markdown(s).splitlines() if "host_kv_cache" in x],
    "traffic_report": [x for x in traffic_markdown(traffic).splitlines() if "host KV cache" in x],
}, default=str))
'''


#: A lever of this test only, read from the server's own metrics (issue 39 review): its figures land in the summary's
#: ``server_metrics`` rows (the schema takes a lever's figure it does not name), its judge reads them, and the
#: report's metrics table shows the ones it declares ``shown``.
METRIC_LEVER = '''"""Turbo decode (a lever of this test): read from llama.cpp counters of its own."""

from __future__ import annotations

from typing import Mapping, Optional

from ..json_types import JSONValue
from .lever import ArmEvidence, KnobValue, Lever, MetricTable, Use, part


def _discover(raw: Mapping[str, JSONValue], engine: Optional[str]) -> KnobValue:
    return True if part(raw, "props").get("turbo") is True else None  # stated only when on: reported_by says off


def _judge(arm: ArmEvidence) -> Use:
    tokens = arm.metrics.get("turbo_tokens")
    if tokens is None:
        return Use(None, None, f"engagement unknown: arm {arm.arm!r} says turbo on, its server does not count it")
    return Use(tokens > 0, "server metrics: turbo_tokens", f"arm {arm.arm!r} decoded no turbo token")


LEVER = Lever(
    name="turbo",
    summary="decode steps taken in turbo",
    phases=("decode",),
    projection="decode",
    words="turbo decode",
    flags=("--turbo",),
    facts=("props.turbo",),
    discover=_discover,
    reported_by=("props.turbo",),
    metrics=MetricTable(
        shares=(("turbo_share", "llamacpp:turbo_tokens_total", "llamacpp:tokens_predicted_total"),),
        deltas=(("turbo_tokens", "llamacpp:turbo_tokens_total"),),
        gauges=(("turbo_level", "llamacpp:turbo_level"),),
        shown=(("turbo_share", "turbo share", None), ("turbo_tokens", "turbo tokens", 0))),
    judge=_judge,
    unknown_hint="llama.cpp: /metrics",
    rank=47,
)
'''

#: What the copy says of a run of two arms, turbo off and on as each one's llama.cpp ``/props`` says (``turbo``:
#: false, true; discovered from a server of the script's own), whose server counters are scraped around their
#: blocks: each decoded 300 tokens (the base arm in 6 s, the turbo arm in 3 s), the turbo arm 240 of them in turbo,
#: its gauge read 3 and 5 (two label sets).
METRIC_SCRIPT = r'''
import asyncio
import json

import jsonschema
from aiohttp import ClientSession
from http_stub import answering, serving
from ledgers import header, ledger, turn

from leverbench.analysis.summary import summarize
from leverbench.json_types import finite
from leverbench.report.markdown import render_markdown
from leverbench.runner.discover import endpoint_info
from leverbench.schema.check import summary_json_schema, summary_problems


async def discovered(turbo):
    props = answering({"build_info": "b1", "total_slots": 1, "turbo": turbo})
    async with serving({("GET", "/health"): answering({"status": "ok"}), ("GET", "/props"): props}) as url:
        async with ClientSession() as session:
            return await endpoint_info(session, url, {})


def metrics(arm, when, t, **samples):
    return {"kind": "metrics", "arm": arm, "when": when, "t": t, "samples": samples}


head = header({"base": {}, "fast": {}}, ["c"])
for arm, on in (("base", False), ("fast", True)):
    head["arms"][arm]["discovered"] = asyncio.run(discovered(on))
recs = [metrics("base", "before", 1.0), metrics("fast", "before", 1.0,
        **{"llamacpp:turbo_tokens_total": 10.0, "llamacpp:tokens_predicted_total": 0.0})]
for r in range(3):
    for arm, s in (("base", 4.0), ("fast", 2.0)):
        recs += turn(arm, "c", r, s, 100)
recs += [metrics("base", "after", 50.0, **{"llamacpp:tokens_predicted_total": 300.0,
                                           "llamacpp:tokens_predicted_seconds_total": 6.0}),
         metrics("fast", "after", 50.0, **{"llamacpp:turbo_tokens_total": 250.0,
                                           "llamacpp:tokens_predicted_total": 300.0,
                                           "llamacpp:tokens_predicted_seconds_total": 3.0,
                                           "llamacpp:turbo_level{slot=0}": 3.0, "llamacpp:turbo_level{slot=1}": 5.0})]
s = summarize(ledger(head, recs), scenario=(100, 100))
data = finite(s)
print(json.dumps({
    "discovered": {a: head["arms"][a]["discovered"] for a in ("base", "fast")},
    "levers": [{k: r[k] for k in ("lever", "arm", "vs", "engaged")} for r in s["levers"]],
    "server_metrics": {r["arm"]: r for r in s["server_metrics"]},
    "engaged": {e["arm"]: e.get("levers") for e in s["engaged"]},
    "problems": [str(p) for p in summary_problems(data)],
    "json_schema": [e.message for e in jsonschema.Draft202012Validator(
        json.loads(summary_json_schema())).iter_errors(data)],
    "report": render_markdown(s).splitlines(),
}, default=str))
'''


def _module_from_the_docs() -> str:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## One module, picked up everywhere", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "docs/adding-a-lever.md shows no module under 'One module, picked up everywhere'"
    return match.group(1)


@pytest.fixture(scope="module")
def picked_up(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What the copy of the package with the docs' module in ``levers/`` says (the script's JSON)."""
    src = tmp_path_factory.mktemp("copy") / "src"
    shutil.copytree(ROOT / "src" / "leverbench", src / "leverbench", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "leverbench" / "levers" / "host_kv_cache.py").write_text(_module_from_the_docs(), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=limits.SMALL_RUN_S, cwd=src.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def with_metrics(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What a copy of the package with :data:`METRIC_LEVER` in ``levers/`` says of a run (the script's JSON)."""
    src = tmp_path_factory.mktemp("copy") / "src"
    shutil.copytree(ROOT / "src" / "leverbench", src / "leverbench", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "leverbench" / "levers" / "turbo.py").write_text(METRIC_LEVER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, "-c", METRIC_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=limits.SMALL_RUN_S, cwd=src.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_discovery_keeps_the_props_a_lever_names_so_its_default_reads_as_off(with_metrics):
    """``props.turbo`` in the lever's ``reported_by`` (and ``facts``): discovery keeps /props' ``turbo`` in the
    record, so the base arm, whose endpoint reports it false (the knob not stated), has it off, not unknown: the
    pair is a controlled comparison measuring the lever."""
    found = with_metrics["discovered"]
    assert found["base"]["props"]["turbo"] is False and found["fast"]["props"]["turbo"] is True
    assert "turbo" not in found["base"]["knobs"] and found["fast"]["knobs"]["turbo"] is True
    assert {"lever": "turbo", "arm": "fast", "vs": "base", "engaged": True} in with_metrics["levers"]


def test_a_levers_own_server_figures_reach_the_summary_its_judge_and_the_report(with_metrics):
    fast = with_metrics["server_metrics"]["fast"]
    assert fast["turbo_tokens"] == pytest.approx(240.0)  # Δ over the block: 250 − 10
    assert fast["turbo_share"] == pytest.approx(240.0 / 300.0)
    assert fast["turbo_level"] == pytest.approx(4.0)  # a gauge: its label sets averaged, as read after the block
    base = with_metrics["server_metrics"]["base"]
    assert base["decode_tps"] == pytest.approx(50.0) and fast["decode_tps"] == pytest.approx(100.0)
    assert "turbo_tokens" not in base and "turbo_share" not in base  # no counter of it there: absent, not 0
    assert with_metrics["engaged"]["fast"] == {"turbo": {"used": True, "source": "server metrics: turbo_tokens"}}
    # the summary fits its schema as written (pydantic) and as published (the JSON Schema, an independent checker)
    assert with_metrics["problems"] == [] and with_metrics["json_schema"] == []
    [head] = [x for x in with_metrics["report"] if x.startswith("| arm |") and "turbo share" in x]
    cols = [c.strip() for c in head.strip("|").split("|")]
    assert "turbo tokens" in cols and "turbo_level" not in head  # shown as declared; the gauge not declared shown
    [fast_row] = [x for x in with_metrics["report"] if x.startswith("| fast |") and "80%" in x]
    cells = [c.strip() for c in fast_row.strip("|").split("|")]
    assert cells[cols.index("turbo share")] == "80%" and cells[cols.index("turbo tokens")] == "240"


def test_the_package_itself_has_no_such_lever():
    assert lever("host_kv_cache") is None  # the module alone brings it


def test_discovery_states_its_knob_from_what_the_engine_reports(picked_up):
    assert picked_up["knobs"]["host"]["host_kv_cache"] is True and picked_up["knobs"]["base"]["host_kv_cache"] is False


def test_the_arm_with_it_is_judged_engaged_and_measures_it(picked_up):
    assert picked_up["engaged"] == {"base": None, "host": {"host_kv_cache": {
        "used": True, "source": "SGLang /get_server_info: enable_hierarchical_cache"}}}
    [row] = [r for r in picked_up["levers"] if r["lever"] == "host_kv_cache"]
    assert (row["arm"], row["vs"], row["engaged"]) == ("host", "base", True)
    assert row["multiplier"] == pytest.approx((4 + 49 / 50) / (2 + 49 / 50), rel=1e-3)  # turn: prefill + 49 decoded
    [proj] = [p for p in picked_up["projection"] if p["lever"] == "host_kv_cache"]
    assert proj["phase"] == "prefill"
    assert proj["saved_s"] == pytest.approx(4000 / 1000 - 4000 / 2000, rel=1e-3)  # the scenario's prefill, halved


def test_analyze_gives_its_phase_and_saving_on_a_trace_and_recommends_it(picked_up):
    [row] = [r for r in picked_up["traffic"] if r["lever"] == "host KV cache"]
    assert row["phase"] == "prefill" and row["estimated"]
    assert row["saved_s"] == pytest.approx(0.25 * 3 * 4000 / 1000)  # EVICTED × Σ cached / prefill_tps
    assert row["parameter"] == "25% of 12,000 cached tokens evicted from the GPU (assumed)"
    assert {r["lever"] for r in picked_up["traffic"]} >= {"prefix cache", "drafter", "answer cap", "host KV cache"}
    # the prefix cache was on in the log (its cached tokens served): the host KV cache saves most of the others
    assert "Try the host KV cache (25% of 12,000 cached tokens evicted from the GPU (assumed)) first" in \
        picked_up["recommendation"]


def test_both_reports_print_its_line(picked_up):
    assert any("lever host_kv_cache: base → host returns 2.00 s" in x and x.endswith("prefill")
               for x in picked_up["report"]), picked_up["report"]
    lines = picked_up["traffic_report"]  # analyze's Markdown: its levers table's row, the buckets' column
    assert [x for x in lines if "| prefill | 25% of 12,000 cached tokens evicted from the GPU (assumed) | 3 |" in x]
    assert [x for x in lines if x.startswith("| input |")]  # the saving per bucket has its column


def _metric_lever(name: str, **table) -> Lever:
    return Lever(name=name, summary="s", phases=("decode",), projection="decode", words=name,
                      metrics=MetricTable(**table))


@pytest.mark.parametrize(("levers", "words"), [
    ([_metric_lever("turbo", deltas=(("turbo_tokens", "c"),), shown=(("turbo_token", "t", 0),))],
     "lever 'turbo' shows figure(s) turbo_token that its MetricTable does not declare (its figures: turbo_tokens)"),
    ([_metric_lever("turbo", deltas=(("tokens", "c"),)), _metric_lever("warp", gauges=(("tokens", "g"),))],
     "levers 'turbo' and 'warp' both declare the server figure 'tokens'"),
])
def test_the_registry_refuses_levers_whose_figures_do_not_hold_together(levers, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        registry.check(levers)
    registry.check(levers[:1] if "both" in words else [])  # alone (or none), nothing to refuse


@pytest.mark.parametrize("figure", ["decode_tps", "queue_s_per_request", "arm", "windows", "attribution"])
def test_a_lever_figure_may_not_take_an_engine_figure_or_a_key_of_the_row(figure):
    with pytest.raises(ValueError) as err:
        check_figure_names([_metric_lever("turbo", shares=((f"llamacpp_{figure}", "a", "b"),))])
    assert f"lever 'turbo' declares the server figure(s) {figure} in its MetricTable" in str(err.value)
    assert str(err.value).endswith("(name the lever's figures after it, e.g. turbo_tokens)")
    check_figure_names([_metric_lever("turbo", deltas=(("turbo_tokens", "c"),))])
    check_figure_names(registry.levers())  # the package's own are fine
