"""Load shapes of the experiment file (``[[load]]`` stages).  Owned by the load work (issue 5)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class LoadStage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
