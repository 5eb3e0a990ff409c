"""What a format module declares: its :class:`Format` (name, detection, reader), over a :class:`Sniff`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .records import TrafficLoad


@dataclass(frozen=True)
class Sniff:
    """What detection looks at: the first JSON value (a JSON file), or the CSV header (else)."""

    obj: Any = None
    header: frozenset[str] | None = None


@dataclass(frozen=True)
class Format:
    """A traffic format: ``detect`` says whether a file's first record is this format's; ``load`` reads it.

    ``load(path, columns=..., salvage=...)`` returns a TrafficLoad; ``directory`` names the file this format
    reads inside a directory given instead of a file (None: a directory is no file of this format).
    """

    name: str
    detect: Callable[[Sniff], bool]
    load: Callable[..., TrafficLoad]
    directory: str | None = None
