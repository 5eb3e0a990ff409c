"""The bounds shared across the tool's boundaries, one definition each: a quantity that the experiment file,
a traffic file, a ledger or summary.json and the analysis commands' options all hold has its bound here, so
that what one layer accepts the next one does too.

Each is far past what real use reaches and short of what would hang the tool, fill a machine's memory or
overflow a conversion.  The layers' own modules add the bounds only they have and the types that apply them:
:mod:`leverbench.config.limits` (the experiment file), :mod:`leverbench.workload.traces.bounds` (traffic
files), :mod:`leverbench.analysis.base.bounds` (options and summary.json), :mod:`leverbench.ledger.records` (a
record's fields).  A leaf: it imports nothing (``--help`` reads it: :func:`bound_text` formats the bounds in messages).
"""

from __future__ import annotations

#: Tokens in one prompt or answer: the longest context windows served are ~10^6.
MAX_TOKENS = 10_000_000
#: Calls one stage (or a trace served, or a forecast) sends or plans: each a record in memory and in the ledger.
MAX_REQUESTS = 10_000_000
#: Clients, calls in flight or a server's slots at once: each holds a connection (ports end at 65,535).
MAX_CONCURRENCY = 100_000
#: Seconds of one call (its limits, latency, TTFT, a tool's wait, an engine's start-up): a day.
MAX_CALL_S = 86_400.0
#: A time stamp's magnitude in seconds (epoch or relative): 10^11 s is past the year 5000.
MAX_STAMP_S = 1e11
#: GPUs per server (conditions.gpus, --gpus).
MAX_GPUS = 1_000_000
#: Dollars per GPU-hour (conditions.gpu_hour_usd, --gpu-hour-usd).
MAX_GPU_HOUR_USD = 1_000_000.0
#: A trace replayed 1000x slower (a 10-minute trace: a week) to 10^6x faster.
SPEED_RANGE = (0.001, 1_000_000.0)
#: A trace's lengths scaled: 1000x of a 10^4-token call is already 10^7 tokens.
SCALE_RANGE = (0.000001, 1000.0)
#: A prefill or decode rate, tokens/s: a token in 1000 s to 10^3 x the fastest served (the analysis' options and
#: summary.json's rates; here because the summary's schema, :mod:`leverbench.schema`, bounds them too).
TPS_RANGE = (0.001, 1e9)
#: A relative difference a tolerance may allow (100 = 10,000 %): past any the checks could tell apart (the
#: experiment file's tolerances; summary.json's ``tolerances``).
MAX_TOLERANCE = 100.0
#: Any count a ledger record holds (tokens, characters, chunks, indices): a few calls past MAX_TOKENS summed.
MAX_COUNT = 10**9


def bound_text(x: float) -> str:
    """A bound as a message gives it: ``10,000,000``, ``0.001``, ``1e+12``."""
    if isinstance(x, int):
        return f"{x:,}"
    return f"{int(x):,}" if x.is_integer() and abs(x) < 1e15 else f"{x:g}"
