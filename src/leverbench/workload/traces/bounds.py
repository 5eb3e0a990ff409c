"""The bounds of the numbers a traffic file holds, in one place (the importers and the commands that read
traffic use them).

Each bound is far past what real traffic holds and short of what would overflow a conversion (a token
count into polars' Int64, a length times a scale into a float) or turn a sum into infinity.  A row whose
token count lies outside is skipped like a negative one, its reason naming the field and the bound
("input_length above 10,000,000 tokens"), counted with the line where it was first met; a file with no
usable row is bad input naming that line.  A duration or time stamp outside is not used (the call's
latency or arrival is then unknown), as a negative duration is not.
"""

from __future__ import annotations

from ...bounds import MAX_CALL_S, MAX_STAMP_S, MAX_TOKENS  # shared with the experiment file and the ledger

__all__ = ["MAX_CALL_S", "MAX_STAMP_S", "MAX_TOKENS", "tokens_text"]


def tokens_text(n: int = MAX_TOKENS) -> str:
    return f"{n:,} tokens"
