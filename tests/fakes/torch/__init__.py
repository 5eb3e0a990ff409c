"""A fake of the few torch calls ``scripts/gpu-check.sh`` makes (``leverbench.gpu.check``), over the simulated
GPU of ``fake_gpu``: a matrix product keeps it compute-busy, a copy bandwidth-busy, each for a fixed time, and
the process waits for them (every "kernel" is synchronous).  Put ``tests/fakes`` first on ``PYTHONPATH``."""

from __future__ import annotations

import fake_gpu

from . import cuda, version  # noqa: F401

__version__ = "0.0.0+fake"
bfloat16 = "bfloat16"
uint8 = "uint8"
MATMUL_S = 0.004  # one 8192² bf16 product on the fake GPU
COPY_S = 0.004  # one copy


class Tensor:
    def __init__(self, shape: tuple[int, ...], dtype: str):
        self.shape, self.dtype = shape, dtype
        n = 1
        for d in shape:
            n *= d
        self.nbytes = n * (2 if dtype == bfloat16 else 1)
        fake_gpu.allocated += self.nbytes

    def fill_(self, value: float) -> "Tensor":
        return self

    def copy_(self, other: "Tensor") -> "Tensor":
        fake_gpu.busy("dram", COPY_S)
        return self

    def __matmul__(self, other: "Tensor") -> "Tensor":
        fake_gpu.busy("sm", MATMUL_S)
        return Tensor((self.shape[0], other.shape[-1]), self.dtype)


def randn(*shape: int, dtype: str = bfloat16, device: str = "cpu") -> Tensor:
    return Tensor(shape, dtype)


def empty(*shape: int, dtype: str = bfloat16, device: str = "cpu") -> Tensor:
    return Tensor(shape, dtype)


def matmul(a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    fake_gpu.busy("sm", MATMUL_S)
    return out if out is not None else Tensor((a.shape[0], b.shape[-1]), a.dtype)
