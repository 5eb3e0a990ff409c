"""Prompt-discipline variants of a case (``[[cases.variants]]``), each expanded into a case of its own."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError


def variant_name(case: str, variant: str) -> str:
    return f"{case} [{variant}]"


def expand_variants(file: str, spec: Any) -> list[Any]:
    """Each variant becomes a case of its own, marked ``variant_of`` its case (*spec*: a loaded
    :class:`~leverbench.config.experiment.Experiment`; its cases: ``Case`` models, copied)."""
    out = []
    names = {c.name for c in spec.cases}
    for i, case in enumerate(spec.cases):
        for j, v in enumerate(case.variants):
            name = variant_name(case.name, v.name)
            if name in names:
                raise ConfigError(file, f"cases[{i}].variants[{j}].name", f"{name!r} is already a case name")
            names.add(name)
            prompt = v.prompt if v.prompt is not None else f"{case.prompt}\n\n{v.append}"
            out.append(case.model_copy(update={"name": name, "prompt": prompt, "variants": [], "variant_of": case.name,
                                               "max_tokens": v.max_tokens or case.max_tokens}))
    return out
