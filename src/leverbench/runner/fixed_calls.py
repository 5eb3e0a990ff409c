"""A call of fixed length: a probe, a drift sentinel or a warm-up (the prompts: :mod:`.fixed_length`)."""

from __future__ import annotations

import aiohttp

from ..config import LoadedExperiment
from ..ledger.records import CallRecord
from .endpoint import ArmEndpoint
from .fixed_length import LENGTH_BY_FIELDS, LENGTH_BY_PROMPT, LENGTH_NATURAL, ask_at_length, sentinel_messages
from .probe_prompt import probe_messages, serves_with_drafter
from .schedule import Unit
from .send import ArmSender


async def fixed_length(sender: ArmSender, ep: ArmEndpoint, exp: LoadedExperiment, session: aiohttp.ClientSession,
                       unit: Unit) -> CallRecord | None:
    """A probe or sentinel: one call whose output length is forced with ``ignore_eos`` +
    ``min_tokens`` (``max_tokens`` = n).  An endpoint that rejects those fields (HTTP 400/422)
    gets the same prompt again without them, with :data:`LONG_ANSWER` appended so that
    ``max_tokens`` ends the answer; the rejected attempt stays in the ledger (``retried``,
    ``rejected_fields``), and the arm's later probes ask that way straight away.  A probe on an arm
    with a drafter is not forced (:data:`LENGTH_NATURAL`: ``max_tokens`` = n only), so that its decode
    is that of a natural answer.  A probe with a ``depth`` sends its case's prompt cut or padded to
    that many tokens (:mod:`.probe_prompt`, measured once per arm, case and depth)."""
    n = unit.probe_tokens or 1
    if unit.kind in ("sentinel", "warmup"):
        messages = sentinel_messages()
    else:
        case = next(c for c in exp.spec.cases if c.name == unit.case)
        messages = await probe_messages(session, ep, exp, case, unit.depth)
    depth = {"probe_depth": unit.depth} if unit.depth is not None else {}

    def head(length_method: str) -> CallRecord:
        return CallRecord(kind=unit.kind, arm=unit.arm, case=unit.case, repeat=unit.repeat, step=0,
                          extra={"probe_tokens": n, "position": unit.position, "length_method": length_method,
                                 **depth})
    if unit.kind == "probe" and serves_with_drafter(ep.arm.conditions, ep.discovered):
        return (await sender.send(sender.body(messages, n, 0.0), head(LENGTH_NATURAL))).record
    if not ep.length_by_prompt:
        body = sender.body(messages, n, 0.0, extra={"ignore_eos": True, "min_tokens": n})
        sent = await sender.send(body, head(LENGTH_BY_FIELDS), forced_tokens=n)
        if not sent.record.rejected_fields:
            return sent.record
    body = sender.body(ask_at_length(messages), n, 0.0)
    sent = await sender.send(body, head(LENGTH_BY_PROMPT), forced_tokens=n)
    if sent.record.error is None:
        ep.length_by_prompt = True
    return sent.record
