"""The engine kinds, collected: every module of :mod:`leverbench.engines` that declares an ``ENGINE``.

As the levers' registry does (:mod:`leverbench.levers.registry`), the package finds its modules itself: adding
an engine kind is adding its module, which declares its :class:`EngineKind` (the name an arm's ``engine``
table gives as ``kind``, and how it is built from that table).  :func:`make_engine` is what the runner calls;
the experiment file's ``kind`` (:class:`leverbench.config.EngineSpec`) names the same kinds, which a test
holds.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

from ..errors import BadInput
from .interface import Engine, EngineSettings


@dataclass(frozen=True)
class Launch:
    """What building one arm's engine takes: the arm's name, its ``engine`` table, the engine's log file, the
    arm's own start timeout (None: derived from the model's size, :func:`.process.derived_timeout`), and
    *resettable*: started with its cache-reset endpoint working (the run brings each turn to a declared state:
    :mod:`leverbench.runner.cache_state`)."""

    arm: str
    spec: EngineSettings
    log_path: Path
    startup_timeout_s: Optional[float]
    resettable: bool = False

    @property
    def devices(self) -> Optional[list[int]]:
        """The GPUs the engine may use (its table's ``devices``; None: every GPU the tool sees)."""
        return None if self.spec.devices is None else list(self.spec.devices)


@dataclass(frozen=True)
class EngineKind:
    """One kind of engine: its ``kind`` name, what it is in words, and its factory."""

    name: str
    what: str
    make: Callable[[Launch], Engine]


_NOT_ENGINE_MODULES = ("registry",)


@lru_cache(maxsize=1)
def kinds() -> dict[str, EngineKind]:
    """Every engine kind of the package, by name (sorted)."""
    package = __name__.rpartition(".")[0]
    found: list[EngineKind] = []
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if info.ispkg or info.name in _NOT_ENGINE_MODULES or info.name.startswith("_"):
            continue
        one = getattr(importlib.import_module(f"{package}.{info.name}"), "ENGINE", None)
        found += [one] if isinstance(one, EngineKind) else []
    names = [k.name for k in found]
    if len(names) != len(set(names)):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"two engine modules claim the kind(s) {', '.join(twice)}")
    return {k.name: k for k in sorted(found, key=lambda k: k.name)}


def kind(name: str) -> EngineKind:
    """The engine kind *name*; BadInput naming the known ones where there is none."""
    found = kinds().get(name)
    if found is None:
        known = ", ".join(f"{k.name} ({k.what})" for k in kinds().values())
        raise BadInput(f"unknown engine kind {name!r}; the known kinds: {known}")
    return found


def make_engine(arm: str, spec: EngineSettings, log_path: Path, *, resettable: bool = False) -> Engine:
    """The engine of an arm's ``engine`` table (*spec*: :class:`~leverbench.config.EngineSpec`), built by its
    kind's factory; its log at *log_path*; *resettable*: see :class:`Launch`."""
    # a start timeout the arm does not set is derived from the model's size (EngineProcess)
    timeout = spec.startup_timeout_s if "startup_timeout_s" in spec.model_fields_set else None
    return kind(spec.kind).make(Launch(arm, spec, Path(log_path), timeout, resettable))
