"""The summary's ``tools`` section: whether the tool schemas a case sent reached the model on each arm
(:mod:`leverbench.analysis.experiment.tools_reached`)."""

from __future__ import annotations

from typing import Annotated

from annotated_types import Ge
from typing_extensions import TypeAlias, TypedDict

from . import strict_row

Count: TypeAlias = Annotated[int, Ge(0)]


@strict_row
class ToolsRow(TypedDict):
    """``tools[]``: one arm and case whose calls sent tool schemas: how many did, how many of them reached the
    model (the engine's chat template rendered them), were dropped (it did not: the model never saw them), or
    could not be checked; ``how``: the check's words (``runner.tools_check``), None where no call says."""

    arm: str
    case: str
    calls: Count
    reached: Count
    dropped: Count
    not_known: Count
    how: str | None
