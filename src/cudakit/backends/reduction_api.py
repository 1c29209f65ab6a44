"""The argument policy of sum, mean, max, min, argmax, var (and reduce_sum), shared by every backend as a mixin of Backend."""
from __future__ import annotations


class ReductionOps:
    """sum, mean, max, min, argmax, var (and reduce_sum) (mixed into Backend)."""


class CpuReductionHooks(ReductionOps):
    """NumPy implementations."""


class CudaReductionHooks(ReductionOps):
    """CUDA kernels."""
