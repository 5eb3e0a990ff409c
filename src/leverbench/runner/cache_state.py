"""Each arm's caches brought to the experiment's declared state before every turn, so that repeats are exchangeable.

A repeat of a turn is another sample of the same experiment only if it meets the server state its first repeat
met.  A server that kept every prompt of the run serves a turn's second repeat from the cache its first repeat
filled: a revisit, not a sample (the demo's cache paid 3.38x across repeats and 1.39x on first visits).  So
before every turn (each repeat of each case, on each arm) the arm is brought to the state the experiment
declares (``[experiment] cache_between_turns``):

- ``cold`` (the default): nothing of earlier turns cached;
- ``shared``: cold, then the prefix the case shares with every turn of its kind warmed by one call of
  ``SHARED_WARM_TOKENS`` token (the system prompt and the tool schemas: what an agent platform in steady state
  has cached; a ``warmup`` record, ``position`` "shared", its prompt tokens in the turn's ``warmed_tokens``);
- ``keep``: nothing done: each turn meets what the earlier ones left (for traffic that really resends its
  turns; the analysis labels the figures so).

How (``[experiment] cache_reset``; each arm's choice is a ``cache_reset`` record, each turn's a ``cache``
object in its ``turn`` record):

- ``reset``: the engine's own endpoint.  llama.cpp: ``POST /slots/{id}?action=erase`` for every slot ``GET
  /slots`` lists (an engine the tool starts gets ``--slot-save-path`` and ``--cache-ram 0``, without which
  llama-server refuses the erase or serves the prompt again from host memory:
  :meth:`~leverbench.engines.embedded.EmbeddedEngine.reset_args`); vLLM: ``POST /reset_prefix_cache`` (served
  in its development mode only: the tool starts its own vLLM with ``VLLM_SERVER_DEV_MODE=1``); SGLang: ``POST
  /flush_cache`` (refused, 400, while requests run: tried again for ``FLUSH_WAIT_S``).
- ``salt``: a short tag unique to the turn (:func:`salt_for`: the run, the case and the repeat; the arm too
  where two arms share one endpoint) put where the turns stop sharing their prefix: before the first message's
  text (cold) or the first user message's (shared).  Every arm gets the same tag, so that the arms still send
  the same prompts; it costs each turn the tag's few tokens, alike on every arm.
- ``restart``: the engine the tool started stopped and started again, then one short call sent (a ``warmup``
  record, ``position`` "restart": a fresh process's first call is slow), before the turn.  With ``salt``:
  ``restart+salt``.
- ``none``: nothing: the repeats revisit, and the analysis heads each comparison with its first-visit figure.

``auto`` (the default): ``reset`` on every arm when every arm's endpoint has one and its check (below) does not
find it failing, else ``salt`` on every arm (a mix would send different prompts to the arms); and a
``restart`` of an engine the tool starts whose drafter keeps a state across requests that no endpoint clears
(llama.cpp's ``--spec-type ngram-mod``, :data:`CARRYING_SPEC_TYPES`).  A recorded turn (a case ``from`` a
recording) keeps the sharing of its recording's own turns: its arm is reset (or restarted) before the
recording's first turn of each round only, and it is never salted (its prompts are the recording's, which the
fidelity check compares with the replay's).

**The check** (:func:`.cache_reset.check_reset`, once per arm before its turns) sees whether an arm's reset takes;
every turn is checked again afterwards from its own calls' cached counts
(:mod:`leverbench.analysis.experiment.revisits`), which refuses a comparison whose later repeats still met more
cache than their first.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping
from urllib.parse import urlsplit

import aiohttp

from ..config import Case, Experiment, LoadedExperiment
from ..errors import ConfigError
from ..ledger.records import CallError, CallRecord, ErrorClass, TurnRecord
from ..ledger.rows import CacheResetRow, TurnCacheRow
from ..workload.cases import system_text
from ..workload.chat import ChatMessage
from .cache_reset import ENDPOINTS, Send, check_reset, engine_of, reset_endpoint
from .discover import api_base
from .endpoint import ArmEndpoint
from .send import Sender

#: llama.cpp speculative types whose drafter keeps a state across requests that a slot erase leaves: ngram-mod's
#: n-gram pool (measured on b11549: one 1,119-token prompt sent three times, its slot erased in between, got 0,
#: then 23 of 53, then 41 of 59 drafts accepted; ngram-simple, ngram-map-k and ngram-cache gave the same
#: drafts each time).  Only a new process forgets it.
CARRYING_SPEC_TYPES = frozenset({"ngram-mod"})
SHARED_WARM_TOKENS = 1  # the call that warms a case's shared prefix: its answer's length
SALT_HEX = 8  # hex digits of a salt

@dataclass
class ArmPlan:
    """How one arm is brought to the declared state before every turn (module docstring)."""

    state: str
    method: str  # reset | salt | restart | restart+salt | none | keep
    why: str
    endpoint: str | None = None  # the reset endpoint, where the arm has one (used by recorded turns too)
    check: str | None = None
    cached_before: int | None = None
    cached_after: int | None = None
    check_tokens: int | None = None

    @property
    def recorded_method(self) -> str:
        """How a recorded turn's arm is brought to the state before the recording's first turn of a round: it is
        never salted (its prompts are the recording's), so reset where the arm has an endpoint that takes."""
        if self.method in ("keep", "none") or self.method.startswith("restart"):
            return self.method.removesuffix("+salt")
        return "reset" if self.endpoint is not None else "none"

    def record(self, arm: str) -> CacheResetRow:
        """The arm's ``cache_reset`` record."""
        return {"kind": "cache_reset", "arm": arm, "state": self.state, "method": self.method,
                "recorded_method": self.recorded_method, "endpoint": self.endpoint, "why": self.why,
                "check": self.check, "cached_before": self.cached_before, "cached_after": self.cached_after,
                "check_tokens": self.check_tokens}


def resets_through_endpoints(spec: Experiment) -> bool:
    """Whether a turn may be reset through an engine's endpoint: then the engines the tool starts are started
    with theirs working (``resettable``: :func:`leverbench.engines.make_engine`)."""
    x = spec.experiment
    return x.cache_between_turns != "keep" and x.cache_reset in ("auto", "endpoint")


def carrying_drafter(ep: ArmEndpoint) -> str | None:
    """The speculative type of an engine the tool starts whose drafter keeps a state across requests
    (:data:`CARRYING_SPEC_TYPES`), None where there is none.  (An endpoint of one's own does not say which
    type it runs: the analysis' check of the turns' acceptance finds its carry-over.)"""
    if ep.engine is None or ep.arm.engine is None or ep.arm.engine.kind != "embedded":
        return None
    args = list(ep.arm.engine.args)
    types = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--spec-type"]
    named = {t for value in types[-1:] for t in value.split(",")}
    hit = sorted(named & CARRYING_SPEC_TYPES)
    return hit[0] if hit else None


def salt_for(run_id: str, case: str, repeat: int, arm: str | None = None, attempt: int = 0) -> str:
    """The tag of one turn: a hash of the run, the case, the repeat (the arm, where arms share a server; the
    attempt, where a failed turn is run again)."""
    key = f"{run_id}\0{case}\0{repeat}\0{arm or ''}" + (f"\0{attempt}" if attempt else "")
    h = hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
    return f"turn {h[:SALT_HEX]}"


def salted(messages: list[ChatMessage], salt: str, state: str) -> list[ChatMessage]:
    """*messages* with ``[salt]`` before the text of the first message (``cold``) or of the first message after
    the system prompt (``shared``: what every turn of the case shares stays shared)."""
    out = [m.copy() for m in messages]
    if not out:
        return out
    at = 0
    if state == "shared":
        at = next((i for i, m in enumerate(out) if m.get("role") not in ("system", "developer")), 0)
    tag = f"[{salt}] "
    content = out[at].get("content")
    if isinstance(content, list):
        out[at]["content"] = [{"type": "text", "text": tag}, *content]
    else:
        out[at]["content"] = tag + (content if isinstance(content, str) else "")
    return out


def shared_messages(exp: LoadedExperiment, case: Case) -> list[ChatMessage] | None:
    """The call that warms what every turn of *case* shares (its system prompt; its tool schemas go with the
    call): the system prompt and a one-word question; None where the case shares nothing (no system prompt, no
    tools) or is a recorded turn (its recording's turns share what they share)."""
    if case.name in exp.recorded:
        return None
    system = system_text(exp, case)
    if not system and not exp.tools.get(case.name):
        return None
    return [*([{"role": "system", "content": system}] if system else []), {"role": "user", "content": "Hello."}]


# ---------------------------------------------------------------- the plan


async def plan(session: aiohttp.ClientSession, exp: LoadedExperiment, endpoints: Mapping[str, ArmEndpoint], *,
               check: bool = True, senders: Callable[[str], Sender] | None = None) -> dict[str, ArmPlan]:
    """Each arm's :class:`ArmPlan` (module docstring: ``auto`` or the method the experiment names), its reset
    checked where it has one (*check*: every endpoint is up now; with engines one at a time only the arms'
    endpoints of their own are, and each started engine's is checked before its first turn:
    :meth:`TurnStates.prepare`; *senders*: each arm's, which send and record the check's calls);
    ConfigError where the named method cannot be had."""
    state, asked = exp.spec.experiment.cache_between_turns, exp.spec.experiment.cache_reset
    if state == "keep":
        return {a: ArmPlan(state, "keep", 'cache_between_turns = "keep": each turn meets what the earlier ones left')
                for a in endpoints}
    if asked == "none":
        return {a: ArmPlan(state, "none", 'cache_reset = "none": the repeats revisit; each comparison is headed by '
                           "its first-visit figure") for a in endpoints}
    out: dict[str, ArmPlan] = {}
    failing: dict[str, str] = {}  # arm -> why it cannot be reset through an endpoint
    for arm, ep in endpoints.items():
        engine, carrying = engine_of(ep), carrying_drafter(ep)
        p = ArmPlan(state, "reset", "")
        out[arm] = p
        if asked in ("salt", "restart") or (asked == "auto" and carrying):
            continue  # no endpoint needed
        if engine is None:
            failing[arm] = "its endpoint has no reset the tool knows (its engine is not llama.cpp, vLLM or SGLang)"
            continue
        p.endpoint = ENDPOINTS[engine]
        if (check or ep.engine is None) and senders is not None:  # (one at a time: an endpoint of one's own is up)
            said: list[str] = []

            async def reset(ep: ArmEndpoint = ep, said: list[str] = said) -> str | None:
                error = await reset_endpoint(session, ep)
                said += [error] if error else []
                return error
            p.check, p.cached_before, p.cached_after, p.check_tokens = await check_reset(
                session, ep, arm, check_sender(senders(arm), arm), reset)
            if p.check == "did not take" and said:
                failing[arm] = f"its reset failed: {said[0]}"
            elif p.check == "did not take":
                failing[arm] = (f"its reset ({p.endpoint}) did not take: the check's prompt, sent again after it, "
                                f"found {p.cached_after} of the {p.cached_before} tokens cached before it")
            elif p.check in ("not reported", "failed"):
                failing[arm] = (f"its reset ({p.endpoint}) cannot be checked: " + (
                    "its answers report no cached tokens, nor do its counters (nor will its turns')"
                    if p.check == "not reported" else "a call of the check failed"))
    if asked == "endpoint" and failing:
        arm, why = next(iter(failing.items()))
        raise ConfigError(str(exp.path), "experiment.cache_reset",
                          f'"endpoint": arm {arm!r}: {why}; use "auto" (a salt where a reset cannot be had) or "salt"')
    salt = asked == "salt" or (asked == "auto" and bool(failing))
    others = "; ".join(f"{a}: {w}" for a, w in failing.items())
    for arm, p in out.items():
        carrying = carrying_drafter(endpoints[arm])
        if asked == "restart" or (asked == "auto" and carrying):
            p.method, p.endpoint = ("restart+salt" if salt else "restart"), None
            p.why = (f"its drafter ({carrying}) keeps a state across requests that only a new process forgets"
                     if asked == "auto" else 'cache_reset = "restart"') + \
                (f"; salted as every arm is ({others})" if salt and asked == "auto" else "")
            continue
        if salt:
            p.method = "salt"
            if p.check == "did not take" or asked == "salt" or engine_of(endpoints[arm]) is None:
                p.endpoint = None  # (an arm whose reset answers keeps it for its recorded turns, never salted)
            p.why = ('cache_reset = "salt"' if asked == "salt" else failing[arm] if arm in failing else
                     f"another arm cannot be reset ({others}): every arm is salted alike")
        else:
            p.why = (f"{p.endpoint}, which the check " + ("saw take" if p.check == "took" else "could not see take "
                     "(the arm cached nothing of the check's prompt)" if p.check else "is made before its first "
                     "turn (engines one at a time: each is started for its block only)"))
        if carrying:
            p.why += (f"; its drafter ({carrying}) keeps a state across requests that no reset clears (its "
                      'comparisons will be refused; "auto" or "restart" restarts it before each turn)')
    return out


# ---------------------------------------------------------------- before a turn


Restart = Callable[[str, int], Awaitable[None]]  # (arm, repeat): stop and start its engine, send one call


async def warm_shared(sender: Sender, exp: LoadedExperiment, arm: str, case: Case, repeat: int,
                      messages: list[ChatMessage]) -> CallRecord:
    """The call that warms what every turn of *case* shares (kind ``warmup``, position ``shared``, its tool
    schemas with it): its record."""
    body = sender.body(messages, SHARED_WARM_TOKENS, 0.0, tools=exp.tools.get(case.name))
    head = CallRecord(kind="warmup", arm=arm, case=case.name, repeat=repeat, step=0,
                      extra={"position": "shared", "probe_tokens": SHARED_WARM_TOKENS})
    return (await sender.send(body, head)).record


CHECK_CASE = "(reset check)"


def check_sender(sender: Sender, arm: str) -> Send:
    """How the check sends its prompt on *arm*: one token, greedy, recorded (kind ``warmup``, position ``check``,
    case :data:`CHECK_CASE`, repeat: the send's index)."""
    async def send(messages: list[ChatMessage], k: int) -> CallRecord:
        head = CallRecord(kind="warmup", arm=arm, case=CHECK_CASE, repeat=k, step=0,
                          extra={"position": "check", "probe_tokens": 1})
        return (await sender.send(sender.body(messages, 1, 0.0), head)).record
    return send


def _origin(url: str) -> str:
    """Which server a base URL reaches, as far as its spelling tells: its API base (``http://h:p`` and
    ``http://h:p/v1`` are one: :func:`~.discover.api_base`), host (the loopback's spellings as one, case ignored),
    port and path.  (One server reached under two host names cannot be told from the URLs.)"""
    parts = urlsplit(api_base(url) if url else "")
    host = (parts.hostname or "").lower()
    host = "loopback" if host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.") else host
    try:
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme, 0)
    except ValueError:
        port = -1
    return f"{host}:{port}{parts.path.rstrip('/')}"


def with_cache(rec: TurnRecord, cache: TurnCacheRow | None) -> TurnRecord:
    """*rec* with how its arm was brought to the state (``cache``); a turn whose arm could not be (its reset, or
    its shared prefix's warm call, failed) is no sample of the declared experiment: it fails (class
    ``cache_state``; its calls, which ran, keep their own records), so that it does not count and a resumed run
    runs it again."""
    rec.cache = cache
    if cache is not None and cache.get("error") and rec.error is None:
        rec.error = CallError(ErrorClass.CACHE_STATE, f"not brought to the declared cache state: {cache['error']}")
    return rec


def failure_record(arm: str, case: str, repeat: int, row: TurnCacheRow) -> CacheResetRow:
    """A ``cache_reset`` record of one turn whose arm could not be brought to the state (its reset, or its
    shared prefix's warm call, failed): the analysis counts them (the turn's own ``cache`` says it too)."""
    return {"kind": "cache_reset", "arm": arm, "state": row["state"], "method": row["method"], "case": case,
            "repeat": repeat, "error": row.get("error")}


class TurnStates:
    """The run's cache states: each arm's :class:`ArmPlan` (:meth:`plan`), and each turn's preparation
    (:meth:`prepare`).  *rerun*: the turn units a resumed run runs again (every earlier attempt failed): their salt
    is another, so that they do not meet what the failed attempt cached."""

    def __init__(self, exp: LoadedExperiment, endpoints: Mapping[str, ArmEndpoint], run_id: str,
                 rerun: set[tuple] | None = None):
        self.exp, self.endpoints, self.run_id = exp, endpoints, run_id
        self.rerun = rerun or set()
        self.session = secrets.randbelow(999_999) + 1  # a failed turn run again is salted anew by each session
        self.plans: dict[str, ArmPlan] = {}

    async def plan(self, session: aiohttp.ClientSession, senders: Callable[[str], Sender], check: bool = True
                   ) -> list[CacheResetRow]:
        """Every arm's plan (:func:`plan`; *senders*: each arm's, for the check's calls); their ``cache_reset``
        records."""
        self.plans = await plan(session, self.exp, self.endpoints, check=check, senders=senders)
        return [p.record(arm) for arm, p in self.plans.items()]

    def salt(self, arm: str, case: str, repeat: int, attempt: int = 0) -> str:
        """The turn's salt (:func:`salt_for`; with the arm's name where another arm sends to the same server)."""
        mine = _origin(self.endpoints[arm].base_url)
        shared = sum(1 for ep in self.endpoints.values() if ep.engine is None and _origin(ep.base_url) == mine) > 1
        return salt_for(self.run_id, case, repeat, arm if shared else None, attempt)

    async def prepare(self, session: aiohttp.ClientSession, arm: str, case: Case, repeat: int,
                      senders: Callable[[str], Sender], restart: Restart, record: Callable[[CacheResetRow], object],
                      *, first: bool = True) -> tuple[TurnCacheRow | None, str | None]:
        """Bring *arm* to its plan's state before its turn of *case* (:func:`before_turn`; nothing without a
        plan); the turn's ``cache`` object and its salt.  *senders*: the arm's sender (after a restart, a new
        pool's); *record*: where a turn that could not be brought to the state is recorded
        (:func:`failure_record`); *first*: a recorded turn is its recording's first of the round on *arm* (the
        run's plan says which: :class:`leverbench.runner.plan.CacheBefore`)."""
        p = self.plans.get(arm)
        if p is None:
            return None, None
        attempt = self.session if ("turn", arm, case.name, repeat, None, None, None) in self.rerun else 0
        ep = self.endpoints[arm]
        if p.method == "reset" and p.check is None and ep.engine is not None:  # engines one at a time: its first
            p.check, p.cached_before, p.cached_after, p.check_tokens = await check_reset(  # block, before its turns
                session, ep, arm, check_sender(senders(arm), arm), lambda: reset_endpoint(session, ep))
            p.why = f"{p.endpoint}, which the check before its first turn " + (
                "saw take" if p.check == "took" else f"found: {p.check}")
            record(p.record(arm))

        async def warm(msgs: list[ChatMessage]) -> tuple[int | None, str | None]:
            rec = await warm_shared(senders(arm), self.exp, arm, case, repeat, msgs)
            return rec.prompt_tokens, (None if rec.error is None else f"{rec.error.cls}: {rec.error.message}")
        row, salt = await before_turn(session, self.exp, self.endpoints[arm], p, case, repeat,
                                      self.salt(arm, case.name, repeat, attempt), first_of_round=first,
                                      restart=lambda: restart(arm, repeat), warm=warm)
        if attempt:
            row["attempt"] = attempt
        if row.get("error"):
            record(failure_record(arm, case.name, repeat, row))
        return row, salt


async def before_turn(session: aiohttp.ClientSession, exp: LoadedExperiment, ep: ArmEndpoint, p: ArmPlan,
                      case: Case, repeat: int, salt: str | None, *, first_of_round: bool,
                      restart: Callable[[], Awaitable[None]],
                      warm: Callable[[list[ChatMessage]], Awaitable[tuple[int | None, str | None]]]
                      ) -> tuple[TurnCacheRow, str | None]:
    """Bring the arm to its plan's state before one turn of *case*; the turn's ``cache`` object and the salt to
    put before its first prompt (None: none).  *first_of_round*: for a recorded turn, whether it is its
    recording's first of the round on this arm (the others keep what their recording's earlier turns left; a
    recorded turn is never salted: :attr:`ArmPlan.recorded_method`)."""
    recorded = case.name in exp.recorded
    method = p.recorded_method if recorded else p.method
    row: TurnCacheRow = {"state": p.state, "method": method}
    if method in ("keep", "none"):
        return row, None
    if recorded and not first_of_round:
        row["method"] = "keep"  # the recording's own sharing, within the round
        return row, None
    t0 = time.monotonic()
    if method.startswith("restart"):
        await restart()
    elif method == "reset":
        error = await reset_endpoint(session, ep)
        if error is not None:
            row["error"] = error
    if method.startswith("restart") or method == "reset":
        row["reset_s"] = round(time.monotonic() - t0, 4)
    use_salt = salt if method.endswith("salt") else None
    if use_salt is not None:
        row["salt"] = use_salt
    if p.state == "shared":
        msgs = shared_messages(exp, case)
        if msgs is not None:
            row["warmed_tokens"], failed = await warm(msgs)
            if failed is not None:
                row["error"] = "; ".join(filter(None, [row.get("error"), f"the shared prefix's warm call: {failed}"]))
    return row, use_salt
