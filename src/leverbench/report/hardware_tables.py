"""The engines' and the GPUs' tables, built from ``summary["engines"]`` and ``summary["gpu"]``; formatting only.

A summary written before these sections existed has neither: no table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from typing_extensions import TypeAlias

from .table import Table, pct, s

if TYPE_CHECKING:
    from ..schema.hardware_rows import EngineArmRow, Fact
    from ..schema.summary import Summary

_FactKey: TypeAlias = Literal["name", "count", "memory_mib", "driver", "cuda", "power_limit_w", "sm_clock_max_mhz",
                              "mig"]
#: The GPU facts the table shows (:class:`...schema.hardware_rows.GpuFactsRow`'s keys), with their headers.
FACT_COLUMNS: tuple[tuple[_FactKey, str], ...] = (
    ("name", "GPU"), ("count", "GPUs"), ("memory_mib", "memory MiB"), ("driver", "driver"), ("cuda", "CUDA"),
    ("power_limit_w", "power limit W"), ("sm_clock_max_mhz", "SM clock max MHz"), ("mig", "MIG"))


def _fact(v: Fact) -> str:
    if v is None:
        return "—"
    if isinstance(v, list):
        return " / ".join(_fact(x) for x in v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def _released(a: EngineArmRow) -> str:
    if a["released"] is False:
        return "NO"
    if a.get("unchecked"):
        return "unchecked"
    return "—" if a["released"] is None else "yes"


def engines_table(summary: Summary) -> Table | None:
    e = summary.get("engines")
    if not e or not e.get("arms"):
        return None
    rows = [[a["arm"], str(a["starts"]) + (f" ({a['failed']} failed)" if a.get("failed") else ""),
             f"{s(a['ready_s_median'])} / {s(a['ready_s_max'])}",
             s(a["model_load_s_median"]), s(a["warmup_s_median"]),
             f"{s(a['timeout_s'], 0)} ({a['timeout_from'] or '—'})", pct(a["timeout_used"]),
             _released(a)] for a in e["arms"]]
    mode = e.get("mode") or "not recorded"
    notes = [f"Engines {mode}" + (f": {e['reason']}" if e.get("reason") else "") + "."]
    if e.get("server_state"):
        notes.append(f"Server state the measured calls met: {e['server_state']}.")
    notes.append(f"Pairs of engines of different arms up at once: {e.get('overlaps', 0)}"
                 + (" (none may be, one at a time)." if e.get("mode") == "one at a time" else "."))
    notes += [f"Start {r['block']} of arm {r['arm']} failed: {r['error']}" for r in e.get("starts") or []
              if r.get("error")]
    if any(a.get("unchecked") for a in e["arms"]):
        notes.append("Released unchecked: the engine's processes were gone, but its GPUs could not be read (no "
                     "NVML) to see their memory come back.")
    notes.append("ready: spawned until /health answered (process start, model load, the engine's own warm-up); "
                 "model load: what the engine's log says; warm-up: the calls until its sentinel's speed settled.")
    return Table("engines", "Engine starts per arm", ["arm", "starts", "ready s median / max", "model load s",
                                                      "warm-up s", "start timeout s (from)", "timeout used",
                                                      "released devices"], rows, notes=notes)


def gpu_facts_table(summary: Summary) -> Table | None:
    g = summary.get("gpu")
    if not g or not any(a["facts"] for a in g.get("arms") or []):  # none recorded: a run before GPU facts
        return None
    rows = []
    for a in g["arms"]:
        f = a["facts"]
        if not a["known"]:
            rows.append([a["arm"], "unknown", *(["—"] * (len(FACT_COLUMNS) - 1)), a.get("why") or ""])
        else:
            rows.append([a["arm"], *(_fact(f.get(k)) for k, _ in FACT_COLUMNS), f.get("source") or ""])
    host = g.get("host") or {}
    notes = ["Discovered facts: two arms that differ in one were measured on different hardware, and their "
             "comparison is not controlled."]
    notes.append("The host: " + (f"{_fact(host.get('count'))} × {_fact(host.get('name'))}, driver "
                                 f"{_fact(host.get('driver'))}, CUDA {_fact(host.get('cuda'))}" if host.get("name")
                                 else f"GPUs unknown ({host.get('unknown') or 'not recorded'})") + ".")
    return Table("gpu_facts", "The GPUs each arm ran on", ["arm", *(h for _, h in FACT_COLUMNS), "source / why"],
                 rows, notes=notes)


def telemetry_table(summary: Summary) -> Table | None:
    g = summary.get("gpu")
    rows_in = (g or {}).get("telemetry") or []
    if not rows_in:
        return None
    rows = []
    for r in rows_in:
        p, d = r["prefill"], r["decode"]
        rows.append([r["arm"], r["scope"], pct(p["sm"]), pct(p["dram"]), pct(d["sm"]), pct(d["dram"]),
                     f"{s(p['power_w'], 0)} / {s(d['power_w'], 0)}", f"{p['samples']} / {d['samples']}",
                     pct(r["overlap_share"]), f"{s(r['period_s'], 2)} / {s(r['resolution_s'], 2)}",
                     r.get("note") or ""])
    return Table("gpu_phases", "What the GPUs did in each phase: prefill (send → first token) and decode "
                 "(first → last token)",
                 ["arm", "calls", "prefill SM", "prefill memory", "decode SM", "decode memory",
                  "power W prefill / decode", "readings prefill / decode", "overlap", "period / window s", "note"],
                 rows, notes=["SM: the share of the sample period the GPU's SMs were busy (NVML utilization.gpu, or "
                              "DCGM_FI_PROF_SM_ACTIVE); memory: the share its memory was busy (NVML "
                              "utilization.memory, or DCGM_FI_PROF_DRAM_ACTIVE). Prefill is compute-bound (SMs busy, "
                              "memory less), decode memory-bandwidth-bound (memory busy): measured here.",
                              "A reading shows its source's last sample: the window of its refresh period (NVML's "
                              "driver: 1/6 s to 1 s; measured where the readings change) before it was first read; "
                              "it counts in a phase only where that window lies wholly in it, so the window is the "
                              "table's time resolution (period: how often it was read). Overlap: readings that saw "
                              "calls in both phases at once (concurrent calls), counted in neither."])


def energy_table(summary: Summary) -> Table | None:
    g = summary.get("gpu")
    rows_in = (g or {}).get("energy") or []
    if not rows_in:
        return None
    rows = [[r["arm"], f"{r['turns']}" + (f" (+{r['unmeasured']} not measured)" if r.get("unmeasured") else ""),
             str(r["gpus"]), s(r["j_per_turn"], 0), s(r["kwh_per_1000_turns"], 3),
             s(r["gpu_hours_per_1000_turns"], 3), r["source"] or "—"] for r in rows_in]
    notes = ["Median over the counted turns, over each turn's model time (declared tool time not measured), summed "
             "over the arm's GPUs; GPU-hours = median turn s × GPUs × 1000 / 3600. GPUs shared by arms at once "
             "count for each."]
    notes += [f"{r['arm']}: {r['note']}." for r in rows_in if r.get("note")]
    return Table("gpu_energy", "GPU energy per turn", ["arm", "turns", "GPUs", "J per turn", "kWh per 1000 turns",
                                                       "GPU-h per 1000 turns", "from"], rows, notes=notes)


def hardware_tables(summary: Summary) -> list[Table | None]:
    return [engines_table(summary), gpu_facts_table(summary), telemetry_table(summary), energy_table(summary)]
