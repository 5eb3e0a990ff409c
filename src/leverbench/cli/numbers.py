"""The numeric options of the analysis commands (``analyze``, ``whatif``, ``project``), each bounded, in one place.

An option's type is a :class:`Number`: a finite number (or a whole one) within a stated range.  A value
outside, or one that is no number at all, is bad input: ``leverbench: error: --gpus: -1 is out of range
(a finite number above 0 and at most 1,000,000)``, exit code 2, one line, before anything is read.  The
types refuse it while click parses the command line, before the command's body runs: as a
:class:`BadOption` (a :class:`~leverbench.errors.BadInput`), which click's own handler sends down the one
error path (:func:`.common.fail`), as the body's own errors go.

Each range is far past what a real analysis uses and short of what would overflow a conversion or print
infinity; they are defined once, in :mod:`leverbench.analysis.base.bounds` (whose token bounds are the traffic
files' own), and the summary.json reader checks a run's figures against the same ones.
"""

from __future__ import annotations

import math
from typing import Any

import click

from ..analysis.base.bounds import (
    MAX_CACHE_TOKENS,
    MAX_CALL_S,
    MAX_GPU_HOUR_USD,
    MAX_GPUS,
    MAX_ORDERS,
    MAX_REQUESTS,
    MAX_TOKENS,
    SCALE_RANGE,
    SPEED_RANGE,
    SPEEDUP_RANGE,
    TPS_RANGE,
)
from ..bounds import bound_text
from ..errors import BadInput
from .common import fail


def _shown(v: Any) -> str:
    text = " ".join(str(v).split())  # one line, whatever the value holds
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


class Number(click.ParamType):
    """A finite number in [lo, hi] (``lo_open``: above lo; ``hi_open``: below hi); ``whole``: an integer."""

    def __init__(self, lo: float, hi: float, *, whole: bool = False, lo_open: bool = False, hi_open: bool = False):
        self.lo, self.hi, self.whole, self.lo_open, self.hi_open = lo, hi, whole, lo_open, hi_open
        self.name = "integer" if whole else "float"

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a finite number"
        if not (self.lo_open or self.hi_open):
            return f"{kind} from {bound_text(self.lo)} to {bound_text(self.hi)}"
        return (f"{kind} {'above' if self.lo_open else 'at least'} {bound_text(self.lo)} and "
                f"{'below' if self.hi_open else 'at most'} {bound_text(self.hi)}")

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
        return f"{'INTEGER' if self.whole else 'FLOAT'} {'(' if self.lo_open else '['}{bound_text(self.lo)}, " \
               f"{bound_text(self.hi)}{')' if self.hi_open else ']'}"


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
SPEEDUP = Number(*SPEEDUP_RANGE)
SPEED = Number(*SPEED_RANGE)
SCALE = Number(*SCALE_RANGE)
REQUESTS = Number(1, MAX_REQUESTS, whole=True)
ORDERS = Number(1, MAX_ORDERS, whole=True)
