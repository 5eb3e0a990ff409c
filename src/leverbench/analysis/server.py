"""Client-side and server-side accounts of prefill and decode, per cell.

Client side, per call: prefill ≈ TTFT (send → first token: includes network
and harness overhead), decode = latency − TTFT.  Server side, where the engine
reports llama.cpp ``timings``: prefill = prompt_ms, decode = predicted_ms.
Both are summed over a turn's calls and averaged over the cell's successful
turns.  A disagreement is flagged when the two differ by more than 25 % and
more than 0.25 s.  Server decode rate = Σ predicted_n / Σ predicted_ms.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .dataset import Dataset

DISAGREE_REL = 0.25
DISAGREE_ABS_S = 0.25


def _disagree(client: float | None, server: float | None) -> bool | None:
    if client is None or server is None:
        return None
    return abs(client - server) > max(DISAGREE_ABS_S, DISAGREE_REL * max(abs(server), 1e-9))


def server_account(ds: Dataset) -> list[dict[str, Any]]:
    ok_turns = {t["turn_id"] for t in ds.turns if t.get("error") is None}
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in ds.calls:
        if c.get("turn_id") in ok_turns:
            by[(c["arm"], c["case"])].append(c)
    out = []
    for arm in ds.arms:
        for case in ds.cases:
            calls = by.get((arm, case), [])
            turns = len({c["turn_id"] for c in calls})
            if not turns:
                continue
            cp = sum(c["ttft_s"] or 0.0 for c in calls) / turns
            cd = sum(c["latency_s"] - (c["ttft_s"] or 0.0) for c in calls) / turns
            tim = [c["timings"] for c in calls if isinstance(c.get("timings"), dict)]
            have = len(tim) == len(calls)
            sp = sum(t.get("prompt_ms", 0.0) for t in tim) / 1000.0 / turns if have else None
            sd = sum(t.get("predicted_ms", 0.0) for t in tim) / 1000.0 / turns if have else None
            pn = sum(t.get("predicted_n", 0) for t in tim)
            pms = sum(t.get("predicted_ms", 0.0) for t in tim)
            prn = sum(t.get("prompt_n", 0) for t in tim)
            prms = sum(t.get("prompt_ms", 0.0) for t in tim)
            cache_n = sum(t.get("cache_n", 0) or 0 for t in tim)
            dn = sum(t.get("draft_n", 0) or 0 for t in tim)
            da = sum(t.get("draft_n_accepted", 0) or 0 for t in tim)
            out.append({
                "arm": arm, "case": case, "turns": turns,
                "client_prefill_s": cp, "client_decode_s": cd,
                "server_prefill_s": sp, "server_decode_s": sd,
                "server_decode_tps": pn / pms * 1000.0 if have and pms > 0 else None,
                "server_prefill_tps": prn / prms * 1000.0 if have and prms > 0 else None,
                "server_cache_n": cache_n if have else None,
                "draft_n": dn if have else None, "draft_accepted": da if have else None,
                "prefill_disagrees": _disagree(cp, sp), "decode_disagrees": _disagree(cd, sd),
            })
    return out
