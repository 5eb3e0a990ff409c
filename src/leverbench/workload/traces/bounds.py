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

#: Tokens in one prompt or answer: the longest context windows served are ~10^6 (the experiment file's
#: bound on a call's tokens is the same).
MAX_TOKENS = 10_000_000
#: Seconds of one call's latency, TTFT or tool wait: a day.
MAX_CALL_S = 86_400.0
#: A time stamp's magnitude in seconds (epoch or relative): 10^11 s is past the year 5000.
MAX_STAMP_S = 1e11


def tokens_text(n: int = MAX_TOKENS) -> str:
    return f"{n:,} tokens"
