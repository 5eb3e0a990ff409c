"""The bounds of every number in the experiment file, in one place, and the field types that apply them.

Each bound is far past what a real experiment uses, and short of what would hang the tool, fill a machine's
memory or overflow a conversion (the comment by each says why it is where it is).  A value outside is a
:class:`~leverbench.errors.ConfigError` naming the key, the value and the range.  The types are strict:
a string or a boolean is not a number (``repeats = "2"``, ``rate = true``), a float is not a whole number;
a whole number is still a number where a float is expected (``rate = 2``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, Strict

# the bounds shared with traffic files, the ledger and the analysis, which the experiment file's numbers are held to
# too: re-exported (`X as X`) for the importers of this module
from ..bounds import MAX_CALL_S as MAX_CALL_S
from ..bounds import MAX_CONCURRENCY as MAX_CONCURRENCY
from ..bounds import MAX_GPU_HOUR_USD as MAX_GPU_HOUR_USD
from ..bounds import MAX_GPUS as MAX_GPUS
from ..bounds import MAX_REQUESTS as MAX_REQUESTS
from ..bounds import MAX_TOKENS as MAX_TOKENS
from ..bounds import MAX_TOLERANCE as MAX_TOLERANCE
from ..bounds import SCALE_RANGE as SCALE_RANGE
from ..bounds import SPEED_RANGE as SPEED_RANGE
from ..bounds import bound_text

# ---------------------------------------------------------------- the limits

MIN_CTX_SIZE = 256  # llama.cpp's smallest useful --ctx-size (the tool's own prompts need room)
MAX_RATE = 1_000_000.0  # requests per second: past what one client machine's event loop can send
MAX_REPEATS = 1000  # repeats of each cell: the statistics are settled long before
MAX_RETRIES = 10  # retries of a failed call
MAX_STEPS = 200  # tool-call rounds of one agent turn
MAX_WORKERS = 1000  # client processes (Ray actors) of one stage
MAX_THREADS = 4096  # an engine's threads: more than any machine's cores
SEED_RANGE = (-(2**63), 2**63 - 1)  # a seed is an int64 wherever it is recorded or passed on
MAX_STAGE_S = 7 * 86_400.0  # a stage's planned time (duration, warm-up, ramp, requests at a rate): a week
BURSTINESS_RANGE = (0.001, 1000.0)  # gamma shape k: CV of the gaps 31.6 (bursts) to 0.03 (nearly constant)
MAX_TEMPERATURE = 100.0  # sampling temperature (APIs allow 0-2; llama.cpp any, but past 100 it is noise)
MAX_GPU_HOURS = 1e9  # adaptive max_gpu_hours
MAX_MIN_EFFECT = 1000.0  # adaptive min_effect: a lever 1000× faster
MAX_GPUS_PER_ENGINE = 64  # engine.devices: GPUs one engine may use (NVML indices)
MAX_GPU_SAMPLE_HZ = 1000.0  # gpu_sample_hz: past what NVML's own sampling resolves (1/6 s to 1 s per reading)
MAX_DEPTHS = 100  # probes.depths: prompt lengths probed (each × repeats × output lengths × arms calls)
MAX_NAME_CHARS = 100  # experiment.name: it names the run directory (runs/NAME-YYYYmmdd-HHMMSS)
MAX_NAME_BYTES = 200  # ... and its UTF-8 must fit a file name (255 bytes) with the 16-character time stamp
MAX_LABEL_CHARS = 200  # an arm's, case's, variant's or stage's name: shown in tables, keys of the ledger
MAX_PATH_CHARS = 4096  # a file path (PATH_MAX on Linux)
MAX_FILE_BYTES = 64 * 1024 * 1024  # a document, system prompt, tool schema or script (read whole into memory)
MAX_JSON_DEPTH = 64  # nesting of a tool schema or script (and of request/conditions values)
MAX_SELECT = 1000  # a case's select: turn ids or patterns of recorded turns
MAX_TURNS = 100_000  # a case's sample and limit: recorded turns replayed


# ---------------------------------------------------------------- messages


def shown(v: Any) -> str:
    """*v* as the experiment file would spell it, short: ``true``, ``"2"``, ``inf``, ``1e+30``."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v) if abs(v) < 10**20 else f"{float(v):.3g}" if abs(v) < 10**308 else "a number of "\
            f"{len(str(abs(v)))} digits"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "nan" if v != v else "inf" if v > 0 else "-inf"
        return repr(v) if v.is_integer() and abs(v) < 1e16 else f"{v:.6g}"
    if isinstance(v, str):
        return repr(v) if len(v) <= 60 else repr(v[:57]) + "..."
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def whole_range(lo: int, hi: int) -> str:
    return f"a whole number from {bound_text(lo)} to {bound_text(hi)}"


def number_range(lo: float, hi: float, lo_open: bool = False) -> str:
    return f"a finite number {'above' if lo_open else 'from'} {bound_text(lo)} {'and at most' if lo_open else 'to'} " \
           f"{bound_text(hi)}"


def check_whole(v: Any, lo: int, hi: int, unit: str = "") -> str | None:
    """The problem with *v* as a whole number in [lo, hi] (None: none)."""
    if isinstance(v, bool) or not isinstance(v, int):
        return f"must be {whole_range(lo, hi)}{unit}, got {shown(v)}{_kind(v)}"
    if not lo <= v <= hi:
        return f"must be {whole_range(lo, hi)}{unit}, got {shown(v)}"
    return None


def check_number(v: Any, lo: float, hi: float, lo_open: bool = False, unit: str = "") -> str | None:
    """The problem with *v* as a finite number in [lo, hi] (lo excluded if *lo_open*; None: none)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"must be {number_range(lo, hi, lo_open)}{unit}, got {shown(v)}{_kind(v)}"
    if isinstance(v, int) and abs(v) > 10**300:
        return f"must be {number_range(lo, hi, lo_open)}{unit}, got {shown(v)}"
    if not (math.isfinite(v) and (lo < v if lo_open else lo <= v) and v <= hi):
        return f"must be {number_range(lo, hi, lo_open)}{unit}, got {shown(v)}"
    return None


def _kind(v: Any) -> str:
    if isinstance(v, str):
        return " (a string: write the number without quotes)"
    if isinstance(v, bool):
        return " (a boolean)"
    if isinstance(v, float):
        return " (not a whole number)"
    return ""


def type_problem(kind: str, v: Any) -> str:
    """A strict type's complaint (pydantic's error type *kind*: ``int_type``, ``float_type``, ``bool_type``) in
    the file's words."""
    want = {"int_type": "a whole number", "float_type": "a number", "bool_type": "true or false"}[kind]
    if kind == "float_type" and isinstance(v, int) and not isinstance(v, bool):
        return f"must be {want} a float can hold, got {shown(v)}"
    return f"must be {want}, got {shown(v)}{_kind(v) if kind != 'bool_type' else ''}"


# ---------------------------------------------------------------- the field types


def _whole(lo: int, hi: int, unit: str = "") -> Any:
    def check(v: int) -> int:
        problem = check_whole(v, lo, hi, unit)
        if problem:
            raise ValueError(problem)
        return v
    return Annotated[int, Strict(), AfterValidator(check)]


def _number(lo: float, hi: float, lo_open: bool = False, unit: str = "") -> Any:
    def check(v: float) -> float:
        problem = check_number(v, lo, hi, lo_open, unit)
        if problem:
            raise ValueError(problem)
        return v
    return Annotated[float, Strict(), AfterValidator(check)]


Flag = Annotated[bool, Strict()]
Tokens = _whole(1, MAX_TOKENS, " tokens")
TokensOrZero = _whole(0, MAX_TOKENS, " tokens")
CtxSize = _whole(MIN_CTX_SIZE, MAX_TOKENS, " tokens")
InputCap = _whole(2, MAX_TOKENS, " tokens")
Requests = _whole(1, MAX_REQUESTS, " requests")
WarmupRequests = _whole(0, MAX_REQUESTS, " requests")
InFlight = _whole(1, MAX_CONCURRENCY)
Repeats = _whole(1, MAX_REPEATS)
AdaptiveRepeats = _whole(2, MAX_REPEATS, " (no verdict comes before 2 repeats)")
Retries = _whole(0, MAX_RETRIES)
Steps = _whole(1, MAX_STEPS)
Workers = _whole(1, MAX_WORKERS)
Threads = _whole(1, MAX_THREADS)
Seed = _whole(*SEED_RANGE, " (an int64)")
Turns = _whole(1, MAX_TURNS, " turns")
CallSeconds = _number(0, MAX_CALL_S, lo_open=True, unit=" s (a day)")
CallSecondsOrZero = _number(0, MAX_CALL_S, unit=" s (a day)")
StageSeconds = _number(0, MAX_STAGE_S, lo_open=True, unit=" s (a week)")
StageSecondsOrZero = _number(0, MAX_STAGE_S, unit=" s (a week)")
Tolerance = _number(0, MAX_TOLERANCE)
PositiveTolerance = _number(0, MAX_TOLERANCE, lo_open=True)
Fraction = _number(0, 1)
Temperature = _number(0, MAX_TEMPERATURE)
Speed = _number(*SPEED_RANGE)
Scale = _number(*SCALE_RANGE)
Burstiness = _number(*BURSTINESS_RANGE)
MinEffect = _number(1, MAX_MIN_EFFECT, lo_open=True, unit=" (a ratio: 1.10 = the lever must make turns 10 % faster)")
Confidence = _number(0, 1, lo_open=True)  # and below 1: AdaptiveSpec says so
GpuHours = _number(0, MAX_GPU_HOURS, lo_open=True, unit=" GPU-hours")
GpuIndex = _whole(0, MAX_GPUS_PER_ENGINE - 1, " (a GPU's index, as nvidia-smi numbers them)")
GpuSampleHz = _number(0, MAX_GPU_SAMPLE_HZ, unit=" samples per second (0: none)")


def check_rate(v: Any) -> str | None:
    return check_number(v, 0, MAX_RATE, lo_open=True, unit=" requests/s")


def check_concurrency(v: Any) -> str | None:
    return check_whole(v, 1, MAX_CONCURRENCY, " clients")
