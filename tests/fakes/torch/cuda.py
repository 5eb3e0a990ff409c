"""The fake torch's ``torch.cuda``: one device, always available (the first of ``CUDA_VISIBLE_DEVICES``, as
fake NVML's index: its UUID ``fake-NNNN``, which NVML's reads ``GPU-fake-NNNN``); every kernel is synchronous
already."""

from __future__ import annotations

import os
from types import SimpleNamespace


def is_available() -> bool:
    return True


def synchronize() -> None:
    return None


def get_device_name(index: int = 0) -> str:
    return "NVIDIA H200 (fake)"


def get_device_properties(index: int = 0) -> SimpleNamespace:
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    return SimpleNamespace(name=get_device_name(index), uuid=f"fake-{int(first):04d}")
