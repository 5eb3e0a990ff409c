"""Names from the experiment file (an arm's) as parts of the file names the runner writes (engine-NAME.log)."""

from __future__ import annotations

import hashlib

FILE_PART_CHARS = 80  # of a file name's 255 bytes


def file_part(name: str) -> str:
    """*name* as part of a file name: ASCII letters, digits and ``-_.`` (the rest ``_``); one longer than
    :data:`FILE_PART_CHARS` cut, with a hash of the whole, so that two long names stay apart."""
    safe = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "-_." else "_" for ch in name)
    if len(safe) > FILE_PART_CHARS:
        safe = safe[:FILE_PART_CHARS - 13] + "-" + hashlib.sha256(name.encode(errors="replace")).hexdigest()[:12]
    return safe
