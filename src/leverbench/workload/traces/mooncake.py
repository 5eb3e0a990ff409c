"""``mooncake``: Mooncake's JSON-lines traces (FAST'25), read row by row.

JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``
(one id per 512-token block of the prompt; equal ids mean an equal prefix).
cached_tokens = 512 × the length of the longest leading run of this request's
ids that all occurred in some earlier request, capped at input_length − 1:
what an unbounded prefix cache that never evicts could have reused (an upper
bound).  Each row depends on every earlier one, so this importer walks the
rows in order (the public traces hold tens of thousands of rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import Format, Sniff
from .files import jsonl, read_text
from .records import Rows, Skip, TrafficCall, TrafficLoad, count, opt_stamp

BLOCK_TOKENS = 512


def shared_prefix_tokens(blocks: tuple[int, ...], seen: set[int] | frozenset[int], input_tokens: int) -> int:
    """Tokens of a prompt an unbounded prefix cache could reuse, from Mooncake block ids.

    k = the length of the longest leading run of ``blocks`` whose ids are all in
    ``seen`` (the ids of every earlier request); cached = min(512 × k,
    input_tokens − 1): at least one token is always prefilled, as engines need
    the last position's logits.
    """
    k = 0
    for b in blocks:
        if b not in seen:
            break
        k += 1
    return max(0, min(BLOCK_TOKENS * k, input_tokens - 1))


def load(path: Path, **_: Any) -> TrafficLoad:
    rows = Rows()
    seen: set[int] = set()
    for line, obj in jsonl(read_text(path), rows):
        try:
            inp = count(obj.get("input_length"), "input_length")
            out = count(obj.get("output_length"), "output_length")
            ids = obj.get("hash_ids")
            if ids is not None and (not isinstance(ids, list)
                                    or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids)):
                raise Skip("hash_ids not a list of integers")
        except Skip as s:
            rows.skip(s.reason, line)
            continue
        blocks = tuple(ids) if ids is not None else None
        cached = shared_prefix_tokens(blocks, seen, inp) if blocks is not None else None
        if blocks is not None:
            seen.update(blocks)
        ts = opt_stamp(obj.get("timestamp"), 1e-3)
        if ts is None:
            rows.soft["no usable timestamp (arrival unknown)"] += 1
        rows.add(TrafficCall(input_tokens=inp, output_tokens=out, cached_tokens=cached, prefix_blocks=blocks), ts)
    return rows.load(path, "mooncake", notes=[
        f"cached tokens from hash_ids ({BLOCK_TOKENS}-token blocks): the leading blocks already seen in an earlier "
        "request, as an unbounded prefix cache that never evicts would hold them (an upper bound)"])


def detect(s: Sniff) -> bool:
    return s.obj is not None and {"input_length", "output_length"} <= set(s.obj)


FORMAT = Format("mooncake", detect, load)
