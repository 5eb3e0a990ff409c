"""An arm's endpoint as the runner holds it: where to send, with which key, and what was discovered.

The key goes only to the arm's own origin (or to its ``metrics_url`` with ``metrics_send_key``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..config import Arm, LoadedExperiment
from ..engines import Engine
from ..errors import ConfigError
from ..json_types import JSONObject
from ..redact import same_origin
from ..workload.chat import ChatMessage
from .tools_check import ToolsChecks


@dataclass
class ArmEndpoint:
    arm: Arm
    base_url: str
    model: str
    headers: dict[str, str]
    engine: Engine | None = None  # the engine the tool started for the arm (None: an endpoint of the user's own)
    discovered: JSONObject = field(default_factory=dict)  # what discovery found: the engine's answers
    length_by_prompt: bool = False  # the endpoint rejected ignore_eos/min_tokens: probes ask for length instead
    depth_prompts: dict[tuple[str, int], list[ChatMessage]] = field(default_factory=dict)  # (case, depth)
    tools_checks: ToolsChecks = field(default_factory=ToolsChecks)  # whether each tool set reaches the model

    def headers_for(self, url: str) -> dict[str, str]:
        """The key's headers for a request to *url*: only on the arm's own origin (scheme, host and
        port of base_url), or to its metrics_url when the arm sets ``metrics_send_key``; else none."""
        if same_origin(url, self.base_url) or (self.arm.metrics_send_key and url == self.arm.metrics_url):
            return self.headers
        return {}

    @property
    def request(self) -> JSONObject:
        """The arm's extra request fields (every call's body carries them)."""
        return self.arm.request

    def death_note(self) -> str | None:
        """Why the engine the tool started for this arm died (its log's tail); None while it lives, or with none."""
        return self.engine.death_note() if self.engine is not None else None


class Interrupted(Exception):
    """The run was stopped (Ctrl-C); what finished, and the calls in flight (class cancelled), are in the ledger."""


def endpoint_headers(exp: LoadedExperiment, i: int, arm: Arm) -> dict[str, str]:
    """The arm's key as an Authorization header (from the variable ``api_key_env`` names); none without one."""
    if not arm.api_key_env:
        return {}
    key = os.environ.get(arm.api_key_env)
    if not key:
        raise ConfigError(str(exp.path), f"arms[{i}].api_key_env",
                          f"environment variable {arm.api_key_env} is not set (it should hold the API key)")
    bad = next((c for c in key if not c.isprintable() or c.isspace()), None)
    if bad is not None:  # an HTTP header cannot carry it (a key read from a file with its line end: "\r")
        raise ConfigError(str(exp.path), f"arms[{i}].api_key_env",
                          f"environment variable {arm.api_key_env} holds white space or a control character "
                          f"(U+{ord(bad):04X}; a key read from a file with its line end?): strip it")
    return {"Authorization": f"Bearer {key}"}
