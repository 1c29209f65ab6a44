"""The argument policy of softmax, log_softmax and cross_entropy, forward and backward, shared by every backend as a mixin of Backend."""
from __future__ import annotations


class SoftmaxOps:
    """softmax, log_softmax and cross_entropy, forward and backward (mixed into Backend)."""


class CpuSoftmaxHooks(SoftmaxOps):
    """NumPy implementations."""


class CudaSoftmaxHooks(SoftmaxOps):
    """CUDA kernels."""
