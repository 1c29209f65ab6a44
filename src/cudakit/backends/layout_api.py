"""The argument policy of transpose and axis permutation, shared by every backend as a mixin of Backend."""
from __future__ import annotations


class LayoutOps:
    """transpose and axis permutation (mixed into Backend)."""


class CpuLayoutHooks(LayoutOps):
    """NumPy implementations."""


class CudaLayoutHooks(LayoutOps):
    """CUDA kernels."""
