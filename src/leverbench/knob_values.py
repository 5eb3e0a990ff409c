"""What a knob's value means, as the analysis compares it and the reports show it: off in every spelling, or
unknown (a knob discovered on another arm and not found on this one).  Apart from the analysis (its knobs are
:mod:`leverbench.analysis.base.knobs`), so that a report reads a knob's value without the analysis."""

from __future__ import annotations

from typing import Iterable

#: A knob discovered on another arm and not found on this one.
UNKNOWN = "(unknown)"
#: The words that mean "off" (after trimming, any case); null, false and 0 do too.
OFF_WORDS = ("none", "off", "no", "", "false")


def is_on(value: object) -> bool:
    """Whether a knob's value means "on": anything but absent/None/False/0/""/none/off/no/false, and not
    :data:`UNKNOWN` (an unknown knob is not claimed to be on)."""
    if value == UNKNOWN:
        return False
    if isinstance(value, str):
        return value.strip().lower() not in OFF_WORDS
    return not (value is None or value is False or (isinstance(value, (int, float)) and value == 0))


def value_words(v: object) -> str:
    """A knob's value in words: a boolean as on / off, anything else as it is written."""
    return ("on" if v else "off") if isinstance(v, bool) else str(v)


def config_words(values: Iterable[tuple[str, object]]) -> str:
    """Knobs' values in words, ``k=4 slots=2`` (a boolean as on / off): a tune's configuration, as its races name
    their arms and its answer says it."""
    return " ".join(f"{k}={value_words(v)}" for k, v in values)
