"""The numeric options of the analysis commands (``analyze``, ``whatif``, ``project``), each bounded, in one place.

An option's type is a :class:`Number`: a finite number (or a whole one) within a stated range.  A value
outside, or one that is no number at all, is bad input: ``leverbench: error: --gpus: -1 is out of range
(a finite number above 0 and at most 1,000,000)``, exit code 2, one line, before anything is read.  The
types refuse it while click parses the command line, before the command's body runs: as a
:class:`BadOption` (a :class:`~leverbench.errors.BadInput`), which click's own handler sends down the one
error path (:func:`.common.fail`), as the body's own errors go.

Each range is far past what a real analysis uses and short of what would overflow a conversion or print
infinity: the token bounds are the traffic files' own (:mod:`leverbench.workload.traces.bounds`).
"""

from __future__ import annotations

import math
from typing import Any

import click

from ..errors import BadInput
from ..workload.traces.bounds import MAX_CALL_S, MAX_TOKENS
from .common import fail

MAX_GPUS = 1_000_000  # GPUs per server (the experiment file's conditions.gpus has the same bound)
MAX_GPU_HOUR_USD = 1_000_000.0  # dollars per GPU-hour (the same as conditions.gpu_hour_usd's)
TPS_RANGE = (0.001, 1e9)  # tokens per second by hand: a token in 1000 s to a thousand times the fastest prefill
MAX_SPEEDUP = 100.0  # a drafter's decode speedup: speculative decoding gives 2-4x
MAX_CACHE_TOKENS = 1e12  # a prefix cache's capacity: 10^5 GPUs' worth of KV
SPEED_RANGE = (0.001, 1_000_000.0)  # a trace replayed 1000x slower to 10^6x faster (a trace stage's speed)
SCALE_RANGE = (0.000001, 1000.0)  # a trace's lengths scaled: 1000x of a 10^4-token call is already 10^7 tokens
MAX_REQUESTS = 10_000_000  # calls of a trace served (a trace stage's bound on requests)
MAX_ORDERS = 1000  # random orders of simultaneous arrivals: the mean has long settled (the default is 16)


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _shown(v: Any) -> str:
    text = str(v)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


class Number(click.ParamType):
    """A finite number in [lo, hi] (``lo_open``: above lo; ``hi_open``: below hi); ``whole``: an integer."""

    def __init__(self, lo: float, hi: float, *, whole: bool = False, lo_open: bool = False, hi_open: bool = False):
        self.lo, self.hi, self.whole, self.lo_open, self.hi_open = lo, hi, whole, lo_open, hi_open
        self.name = "integer" if whole else "float"

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a finite number"
        if not (self.lo_open or self.hi_open):
            return f"{kind} from {_num(self.lo)} to {_num(self.hi)}"
        return (f"{kind} {'above' if self.lo_open else 'at least'} {_num(self.lo)} and "
                f"{'below' if self.hi_open else 'at most'} {_num(self.hi)}")

    def _inside(self, x: float) -> bool:
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return math.isfinite(x) and above and below

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        opt = max(param.opts, key=len) if param is not None and param.opts else "value"
        if isinstance(value, bool):
            raise BadOption(f"{opt}: {value} is not a number ({self.describe()})")
        try:
            x: int | float = (value if isinstance(value, int) else int(str(value).strip())) if self.whole else \
                float(value)
        except (TypeError, ValueError, OverflowError):
            raise BadOption(f"{opt}: {_shown(value)!r} is not {self.describe()}") from None
        try:
            inside = self._inside(float(x))
        except OverflowError:  # a whole number past a float's range
            inside = False
        if not inside:
            raise BadOption(f"{opt}: {_shown(value)} is out of range ({self.describe()})")
        return x

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return f"{'INTEGER' if self.whole else 'FLOAT'} {'(' if self.lo_open else '['}{_num(self.lo)}, " \
               f"{_num(self.hi)}{')' if self.hi_open else ']'}"


class BadOption(BadInput, click.ClickException):
    """A value an option's type refused.  It is raised while click parses the command line, before the command's
    body runs, so click's own handler meets it: it is a ClickException whose ``show`` goes down the one error
    path (:func:`.common.fail`: ``leverbench: error: MESSAGE``, exit code 2), not click's usage text."""

    exit_code = BadInput.exit_code

    def show(self, file: Any = None) -> None:
        fail(self)


# ---------------------------------------------------------------- the options' types, one per bound

TOKENS = Number(1, MAX_TOKENS, whole=True)  # a call's input or output tokens
TOKENS_OR_NONE = Number(0, MAX_TOKENS, whole=True)  # tokens that may be none (an answer cap of 0, no template)
MAX_INPUT = Number(2, MAX_TOKENS, whole=True)  # a cap on a call's input (a prompt of one token has no prefix)
BLOCK = Number(1, MAX_TOKENS, whole=True)  # a prefix cache's block
CACHE = Number(0, MAX_CACHE_TOKENS)  # a prefix cache's capacity in tokens
SHARE = Number(0, 1, hi_open=True)  # a share of every prompt assumed cached
GPUS = Number(0, MAX_GPUS, lo_open=True)
GPU_HOUR_USD = Number(0, MAX_GPU_HOUR_USD)
TPS = Number(*TPS_RANGE)  # a prefill or decode rate by hand
SECONDS = Number(0, MAX_CALL_S)  # a fixed time per call
SPEEDUP = Number(0, MAX_SPEEDUP, lo_open=True)
SPEED = Number(*SPEED_RANGE)
SCALE = Number(*SCALE_RANGE)
REQUESTS = Number(1, MAX_REQUESTS, whole=True)
ORDERS = Number(1, MAX_ORDERS, whole=True)
