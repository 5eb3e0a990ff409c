"""Client-side and server-side accounts of prefill and decode, per cell.

Client side, per call: prefill ≈ TTFT (send → first token: includes network
and harness overhead), decode = latency − TTFT.  Server side, where the engine
reports llama.cpp ``timings``: prefill = prompt_ms, decode = predicted_ms.
Both are summed over a turn's calls and averaged over the cell's successful
turns.  A disagreement is flagged when the two differ by more than 25 % and
more than 0.25 s.  Server decode rate = Σ (predicted_n − 1) / Σ predicted_ms: llama.cpp starts its
generation clock when it samples the first token, at the end of the prompt's evaluation, so
``predicted_ms`` spans the tokens after it (its own ``predicted_per_second`` = n / ms overstates the rate by
n / (n − 1)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ..base.dataset import Dataset, sums, turn_groups, zero_nan

if TYPE_CHECKING:
    from ...schema.rate_rows import ServerRow

DISAGREE_REL = 0.25
DISAGREE_ABS_S = 0.25


def _disagree(client: float | None, server: float | None) -> bool | None:
    if client is None or server is None:
        return None
    return abs(client - server) > max(DISAGREE_ABS_S, DISAGREE_REL * max(abs(server), 1e-9))


def server_account(ds: Dataset) -> list[ServerRow]:
    c = ds.call
    n = ds.n_cells
    ok = ds.turn.ok[c.turn]  # the calls of successful turns
    cell = np.where(ok, ds.cell_code(c.arm, c.case), -1)
    turns = sums(turn_groups(ds, ok)[1], None, n)
    calls = sums(cell, None, n)
    ttft = zero_nan(c.ttft_s)
    cp_sum, cd_sum = sums(cell, ttft, n), sums(cell, c.latency_s - ttft, n)
    tim = c.has_timings

    def timed(x: NDArray[np.float64]) -> NDArray[np.float64]:
        """Σ over the calls with timings of a field (absent or null: 0)."""
        return sums(cell, np.where(tim, zero_nan(x), 0.0), n)

    have_all = sums(cell, tim, n) == calls
    sp_sum, sd_sum = timed(c.prompt_ms), timed(c.predicted_ms)
    pn, prn = timed(np.maximum(c.predicted_n - 1.0, 0.0)), timed(c.prompt_n)
    cache_n, dn, da = timed(c.cache_n), timed(c.draft_n), timed(c.draft_n_accepted)
    out: list[ServerRow] = []
    for arm in ds.arms:
        for case in ds.cases:
            k = ds.cell(arm, case)
            t = int(turns[k])
            if not t:
                continue
            have = bool(have_all[k])
            cp, cd = float(cp_sum[k]) / t, float(cd_sum[k]) / t
            sp = float(sp_sum[k]) / 1000.0 / t if have else None
            sd = float(sd_sum[k]) / 1000.0 / t if have else None
            pms, prms = float(sd_sum[k]), float(sp_sum[k])
            out.append({
                "arm": arm, "case": case, "turns": t,
                "client_prefill_s": cp, "client_decode_s": cd,
                "server_prefill_s": sp, "server_decode_s": sd,
                "server_decode_tps": float(pn[k]) / pms * 1000.0 if have and pms > 0 else None,
                "server_prefill_tps": float(prn[k]) / prms * 1000.0 if have and prms > 0 else None,
                "server_cache_n": int(cache_n[k]) if have else None,
                "draft_n": int(dn[k]) if have else None, "draft_accepted": int(da[k]) if have else None,
                "prefill_disagrees": _disagree(cp, sp), "decode_disagrees": _disagree(cd, sd),
            })
    return out
