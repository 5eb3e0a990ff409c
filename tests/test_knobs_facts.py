"""Issue 22, defects 4 and 11: a knob discovered on one arm and absent on the other is unknown there (not off);
two named values that differ are a contradiction; every discovered fact in which two arms differ is a knob."""

from __future__ import annotations

from ledgers import header, ledger, turn, warned

from leverbench.analysis.base.knobs import UNKNOWN, all_arm_knobs, arm_knobs, comparisons, contradiction, fact_knobs
from leverbench.analysis.summary import summarize
from leverbench.runner.discover import knobs as discovered_knobs
from leverbench.schema.warning_kinds import WarningKind as W


def _arm(discovered=None, conditions=None):
    d = dict(discovered or {})
    d.setdefault("knobs", discovered_knobs(d.get("raw") or {}))
    return {"conditions": conditions or {}, "discovered": d}


def _summary(arms: dict[str, dict]) -> dict:
    head = header({a: {} for a in arms}, ["c"])
    for a, h in arms.items():
        head["arms"][a].update(h)
    recs = []
    for r in range(3):
        for i, a in enumerate(arms):
            recs += turn(a, "c", r, 10.0 / (i + 1), 100)
    return summarize(ledger(head, recs))


def test_a_knob_discovered_on_one_arm_only_is_unknown_on_the_other_and_the_pair_not_controlled():
    """On main: base's endpoint said drafter off (vLLM's spec-decode metrics absent), control's /metrics did
    not answer; control vs base then differed in the cache alone (its drafter read as off): controlled."""
    base = _arm({"knobs": {"engine": "vllm", "drafter": False}}, {"prefix_cache": False})
    control = _arm({"knobs": {"engine": "vllm"}}, {"prefix_cache": True})
    knobs, _ = all_arm_knobs({"base": base, "control": control}, {}, ["base", "control"])
    assert knobs["control"]["drafter"] == UNKNOWN and knobs["base"]["drafter"] is False
    [comp] = comparisons(["base", "control"], "base", knobs, {"base": "baseline", "control": "control"})
    assert comp.unknown == ("drafter",) and not comp.controlled and comp.lever is None
    s = _summary({"base": base, "control": control})
    total = next(m for m in s["multipliers"] if m["scope"] == "total")
    assert total["controlled"] is False and total["unknown_knobs"] == ["drafter"]
    assert warned(s, W.KNOB_UNKNOWN, "control")
    assert not any(v["lever"] == "prefix_cache" for v in s["verdicts"])


def test_a_declared_knob_on_one_arm_only_still_means_off_on_the_other():
    knobs, _ = all_arm_knobs({"a": _arm(conditions={"drafter": "ngram"}), "b": _arm()}, {}, ["a", "b"])
    assert "drafter" not in knobs["b"]
    [comp] = comparisons(["b", "a"], "b", knobs, {"a": "treatment", "b": "baseline"})
    assert comp.controlled and comp.lever == "drafter"


def test_two_named_values_that_differ_contradict():
    _, c = arm_knobs({"conditions": {"drafter": "eagle"}, "discovered": {"knobs": {"drafter": "ngram"}}})
    assert "drafter" in c and "'ngram'" in c["drafter"]
    _, ok = arm_knobs({"conditions": {"drafter": "ngram-mod K=7"}, "discovered": {"knobs": {"drafter": "ngram-mod"}}})
    assert ok == {}
    assert contradiction("vllm", "llama.cpp") and not contradiction("llama.cpp b11434", "llama.cpp")
    assert contradiction(2, 1) and not contradiction(2, 2.0) and contradiction(False, "ngram") and not contradiction(
        True, "ngram")


def test_a_discovered_fact_that_differs_is_a_knob():
    """Defect 11: two endpoints leverbench takes for llama.cpp answer GET /version with 1.0.0 and 2.0.0; their
    build_info is the same.  On main both answers stayed in ``discovered`` and no knob differed: control vs
    baseline (version and cache) read as controlled and citable."""
    props = {"build_info": "b100-abc", "total_slots": 1}
    base = _arm({"props": props, "version": {"version": "1.0.0"},
                 "knobs": {"engine": "llama.cpp", "engine_version": "b100-abc"}}, {"prefix_cache": False})
    control = _arm({"props": props, "version": {"version": "2.0.0"},
                    "knobs": {"engine": "llama.cpp", "engine_version": "b100-abc"}}, {"prefix_cache": True})
    s = _summary({"base": base, "control": control})
    total = next(m for m in s["multipliers"] if m["scope"] == "total")
    assert total["controlled"] is False and "fact:version.version" in total["knobs"], total["knobs"]
    assert {a["name"]: a["knobs"]["fact:version.version"] for a in s["arms"]} == {"base": "1.0.0",
                                                                                 "control": "2.0.0"}


def test_facts_covered_by_a_knob_that_differs_add_nothing():
    base = {"props": {"build_info": "b1"}, "engine_args": []}
    drafter = {"props": {"build_info": "b1"}, "engine_args": ["--spec-type", "ngram-mod", "--spec-draft-n-max", "7"]}
    knobs = {"base": {"drafter": False}, "spec": {"drafter": "ngram-mod"}}
    assert fact_knobs({"base": base, "spec": drafter}, knobs) == {"base": {}, "spec": {}}
    # another flag that differs is a knob of its own
    other = {"props": {"build_info": "b1"}, "engine_args": ["--cache-reuse", "256"]}
    extra = fact_knobs({"base": base, "x": other}, {"base": {}, "x": {}})
    assert extra == {"base": {"flag:--cache-reuse": False}, "x": {"flag:--cache-reuse": "256"}}  # not given: off
    # the simulator's own settings are never a fact of this kind
    assert fact_knobs({"a": {"sim": {"decode_tps": 1}}, "b": {"sim": {"decode_tps": 2}}}, {"a": {}, "b": {}}) == \
        {"a": {}, "b": {}}


def test_the_embedded_engine_without_drafter_arguments_says_drafter_off():
    k = discovered_knobs({"props": {"build_info": "b1"}, "known": {"engine": "llama.cpp llama-server",
                                                                    "engine_args": []}})
    assert k["drafter"] is False
