"""The fake torch's ``torch.cuda``: one device, always available; every kernel is synchronous already."""

from __future__ import annotations


def is_available() -> bool:
    return True


def synchronize() -> None:
    return None


def get_device_name(index: int = 0) -> str:
    return "NVIDIA H200 (fake)"
