"""Genesis's CUDA backend interface (seed 002) on cudakit: `import cudakit.compat.genesis as genesis`.

genesis.device("cuda:0"), genesis.tensor(data, device=...), genesis.matmul(a, b) and the
genesis.cuda module (memory limits and statistics, kernel cache, profiling). Tensors are the
arrays of cudakit's backends: CuPy arrays on a GPU, NumPy arrays on the CPU; ops run through cudakit.
Differences from the seed (no torch, no printing, no silent fallback): docs/compat.md.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import ops
from ...errors import DeviceError
from . import cuda
from .backends import CUDAMemoryPool, CUDAStorage, get_memory_stats


@dataclass(frozen=True)
class Device:
    """A device: type "cpu" or "cuda", and for CUDA an index (None: the current GPU)."""
    type: str
    index: int | None = None

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


def device(spec="cpu") -> Device:
    """A Device from "cpu", "cuda", "cuda:N", an int N (GPU N) or a Device. DeviceError naming
    `spec` otherwise. Needs no GPU (a CUDA tensor does)."""
    return _parse_device(spec)


def _parse_device(spec) -> Device:
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
        return Device("cuda", spec)
    if isinstance(spec, str):
        s = spec.strip().lower()
        if s in ("cpu", "cuda"):
            return Device(s)
        if s.startswith("cuda:") and s[5:].isdigit():
            return Device("cuda", int(s[5:]))
    raise DeviceError(f"device must be 'cpu', 'cuda', 'cuda:N' or an index >= 0 (got {spec!r})")


def tensor(data, device=None, dtype=None):
    """An array holding `data` (a nested list, a scalar or an array) on `device` (default "cpu"):
    a CuPy array on a GPU, a NumPy array on the CPU. dtype: default float32 (Genesis's default
    dtype; integer data becomes float32). Raises RuntimeError (BackendUnavailableError) for a
    CUDA device without one, DeviceError naming a bad device."""
    dev = _parse_device(device if device is not None else "cpu")
    host = np.array(data, dtype=np.float32 if dtype is None else dtype)
    if dev.type == "cpu":
        return host
    cuda._cuda("genesis.tensor on a CUDA device")
    from ...backends import get_backend
    return get_backend("cuda", device=dev.index).to_device(host)


def matmul(a, b):
    """a @ b (cudakit.matmul: NumPy's rules, cuBLAS on the GPU)."""
    return ops.matmul(a, b)


__all__ = ["Device", "device", "tensor", "matmul", "cuda", "CUDAStorage", "CUDAMemoryPool", "get_memory_stats"]
