"""The rate model: where a turn's time goes (the phase regression, the probes, the server's own account), the
rate fit each arm gets, and the time shares per cell."""

from __future__ import annotations

from ...schema.rate_rows import ProbeRow, ServerRow
from ...schema.warning_kinds import RunWarning, WarningKind
from ..rates.phases import cell_shares
from ..rates.probes import probes
from ..rates.rate_fit import rate_models
from ..rates.regression import decomposition
from ..rates.server import server_account
from .base import Inputs, Product
from .engagement import OWN_METRICS
from .load import LOAD

RATE_MODELS = Product("rate_models", (LOAD, OWN_METRICS), lambda i: rate_models(i.ds, i[LOAD], i[OWN_METRICS]),
                      key="rate_models")
DECOMPOSITION = Product("decomposition", (), lambda i: decomposition(i.ds), key="decomposition")


def _probes(i: Inputs) -> list[ProbeRow]:
    rows, w = probes(i.ds, i[DECOMPOSITION], i[RATE_MODELS])
    i.warn(*w)
    return rows


PROBES = Product("probes", (DECOMPOSITION, RATE_MODELS), _probes, key="probes")


def _server(i: Inputs) -> list[ServerRow]:
    rows = server_account(i.ds)
    for s in rows:
        if s["prefill_disagrees"] or s["decode_disagrees"]:
            what = " and ".join(p for p, bad in (("prefill", s["prefill_disagrees"]), ("decode", s["decode_disagrees"]))
                                if bad)
            i.warn(RunWarning(
                WarningKind.CLIENT_SERVER_DISAGREE,
                f"client and server disagree on {what} for {s['arm']}/{s['case']}: client prefill "
                f"{s['client_prefill_s']:.2f} s vs server {s['server_prefill_s']:.2f} s, client decode "
                f"{s['client_decode_s']:.2f} s vs server {s['server_decode_s']:.2f} s per turn", s["arm"], s["case"]))
    return rows


SERVER = Product("server", (), _server, key="server")
TIME_SHARES = Product("time_shares", (), lambda i: cell_shares(i.ds), key="time_shares")
