"""What each client process of a load stage sends, decided before any of them starts (issue 17).

A stage's :class:`Schedule` is computed once, by the coordinator
(:meth:`~leverbench.runner.load.StageRun.schedule`): for a closed loop its
clients (each one's start offset, ``ramp_s``) and its request budget, for an
open loop every arrival (request index, offset after the start, warm-up or
not: the seeded draws), for a trace replay its sessions (each with its calls
in round order) and the prompts' calibration.  :func:`split` cuts it into one
share per worker, shipped to the workers before the stage's shared start:

- closed: client k of the stage goes to worker k mod N (its ramp offset kept);
  the warm-up and measured request budgets are apportioned to the workers by
  their clients (:func:`apportion`); worker w's j-th request has the stage's
  index w + N·j, so no two workers send the same request (prompt);
- open: arrival i goes to worker i mod N (the arrivals keep their times, so the
  stage's offered load is unchanged and each worker sends every N-th);
- trace: sessions, kept whole (a session's rounds build on its answers), go to
  the workers in turn in the order they start; the stage's first call (the
  trace import and token check it carries) is worker 0's;
- ``max_in_flight`` is apportioned evenly.

A share is plain data (picklable: Ray ships it); a whole stage run in one
process is the share of worker None out of 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..config.stages import LoadStage
from ..ledger.rows import CallExtras
from ..workload.load import arrival_offsets


@dataclass
class TraceCall:
    """One planned trace call."""

    index: int
    input_tokens: int
    output_tokens: int
    new_tokens: int  # tokens this call appends (a session's later rounds carry the earlier ones)
    blocks: tuple[int, ...] | None
    tool_wait_s: float


@dataclass
class Schedule:
    """One process's part of a stage (see the module docstring); ``worker`` None: the whole stage."""

    mode: str
    run_id: str  # the stage execution's ``load_run``, shared by every worker
    worker: int | None = None
    workers: int = 1
    # closed loop
    client_starts: list[float] = field(default_factory=list)  # s after the start at which each client begins
    warmup_requests: int = 0  # this share's warm-up budget (and warmup_s, the stage's, from the start)
    requests: int | None = None  # this share's measured requests (None: bound by duration_s only)
    timed: bool = False  # a duration_s bound: how many requests go out depends on the server
    # open loop: (request index, s after the start, warm-up)
    arrivals: list[tuple[int, float, bool]] = field(default_factory=list)
    # trace replay: (s after the start, the session's calls in round order)
    sessions: list[tuple[float, list[TraceCall]]] = field(default_factory=list)
    tokens_per_word: float = 1.0  # the synthetic prompts' calibration (/tokenize)
    first_extra: CallExtras = field(default_factory=CallExtras)  # what this share's first call carries
    max_in_flight: int | None = None

    def index(self, j: int) -> int:
        """Closed loop: the stage's request index of this share's j-th request: worker + workers·j."""
        return j if self.worker is None else self.worker + self.workers * j

    @property
    def scheduled(self) -> int | None:
        """Calls this share is to send; None where the server's pace decides (a closed loop with a
        duration_s bound).  A trace session cut by a failed call sends fewer."""
        if self.mode == "closed":
            return None if self.timed or self.requests is None else self.warmup_requests + self.requests
        if self.mode == "open":
            return len(self.arrivals)
        return sum(len(calls) for _, calls in self.sessions)


def open_arrivals(s: LoadStage, rate: float) -> list[tuple[int, float, bool]]:
    """An open loop's arrivals (request index, s after the start, warm-up), seeded: the warm-up
    (warmup_requests and/or warmup_s), then the measured ones up to requests and/or duration_s."""
    out = []
    m0: float | None = None
    measured = 0
    for i, off in enumerate(arrival_offsets(rate, s.arrival, s.burstiness, s.seed)):
        warm = m0 is None and (i < s.warmup_requests or off < s.warmup_s)
        if not warm:
            if m0 is None:
                m0 = off
            if s.requests is not None and measured >= s.requests:
                break
            if s.duration_s is not None and off - m0 >= s.duration_s:
                break
            measured += 1
        out.append((i, off, warm))
    return out


def apportion(total: int, weights: list[int]) -> list[int]:
    """*total* split in proportion to *weights* (largest remainders, ties to the earlier): whole
    numbers that sum to *total*."""
    w = sum(weights)
    exact = [total * x / w for x in weights]
    out = [int(e) for e in exact]
    by_rest = sorted(range(len(weights)), key=lambda k: (-(exact[k] - out[k]), k))
    for k in by_rest[: total - sum(out)]:
        out[k] += 1
    return out


def split(schedule: Schedule, n: int) -> list[Schedule]:
    """*schedule* (a whole stage's) as *n* workers' shares: see the module docstring."""
    if n < 1:
        raise ValueError("a stage needs at least one worker")
    if schedule.mode == "closed" and len(schedule.client_starts) < n:
        raise ValueError(f"{len(schedule.client_starts)} clients cannot be split across {n} workers")
    clients = [schedule.client_starts[k::n] for k in range(n)]
    weights = [len(c) for c in clients] if schedule.mode == "closed" else [1] * n
    warm = apportion(schedule.warmup_requests, weights)
    measured = apportion(schedule.requests, weights) if schedule.requests is not None else [None] * n
    cap = apportion(schedule.max_in_flight, [1] * n) if schedule.max_in_flight is not None else [None] * n
    return [replace(schedule, worker=k, workers=n, client_starts=clients[k], warmup_requests=warm[k],
                    requests=measured[k], arrivals=schedule.arrivals[k::n], sessions=schedule.sessions[k::n],
                    first_extra=schedule.first_extra if k == 0 else {}, max_in_flight=cap[k])
            for k in range(n)]
